"""The driver's side of `runner go --executor ray` (see ray_executor.py): starts a Ray task
(ray_task.py) per replica of each job, follows their reports (progress bars, the partial samples
under `--out`), and writes each recipe's files from what its replicas hand back, merged where there
are several (replica_merge.py). Ray is imported only inside the functions that run a call."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from runner.execution import replica_merge as merge
from runner.execution import replicas as dp
from runner.execution.isolate import LOG_MARK, failed_result
from runner.execution.job import Job, Unit
from runner.execution.layout import RunFolder
from runner.execution.ray_task import run_replica
from runner.execution.resume import load_partial, start_partial
from runner.files import PartialWriter, write_bytes_atomic, write_json_atomic
from runner.reporting.results import RunResult

MAX_RETRIES = 3  # a task whose worker or node dies runs again (continuing from its finished samples)


def gpus_needed(job: Job) -> int:
    """GPUs one engine of the job needs (all on one node)."""
    return job.units[0].loaded.recipe.engine.gpus_needed()


def _no_room(gpus: int) -> str | None:
    import ray

    nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
    if any(r.get("CPU", 0) >= 1 and r.get("GPU", 0) >= gpus for r in nodes):
        return None
    most = max((r.get("GPU", 0) for r in nodes), default=0)
    return f"the engine needs {gpus} GPU(s) on one node, and no node of the Ray cluster has them (most: {most:g})"


class _Store:
    """A recipe's finished samples as the driver holds them, kept in `<out>/<name>/samples.partial.jsonl`."""

    def __init__(self, unit: Unit, out: Path):
        self.unit, self.folder = unit, RunFolder.of(out, unit.name)
        self.folder.root.mkdir(parents=True, exist_ok=True)
        self.folder.results.unlink(missing_ok=True)
        done = load_partial(self.folder.partial, unit.run_key, unit.loaded.recipe.metrics)
        self.ids = {ex.id for ex in unit.prepared.examples}
        self.written = False  # results are written: lines that still arrive are late copies
        self.lines: dp.Lines = {
            i: json.dumps(s.to_line(), ensure_ascii=False) for i, s in done.items() if i in self.ids
        }

    def add(self, lines: dp.Lines) -> int:
        new = {i: x for i, x in lines.items() if i in self.ids and i not in self.lines}
        if new and not self.written:
            if not self.folder.partial.is_file():
                start_partial(self.folder.partial, self.unit.run_key)
            with PartialWriter(self.folder.partial) as w:
                w.append([x + "\n" for x in new.values()])
            self.lines.update(new)
        return len(new)


class Call:
    """One call of run_jobs_on_ray: its tasks started, their reports followed, their files written."""

    def __init__(self, jobs: list[Job], replicas: int | None, on_result, on_event, address: str | None):
        import ray

        self.jobs, self.on_result, self.on_event = jobs, on_result, on_event
        self.plans = [dp.split(j, replicas or j.units[0].loaded.recipe.replicas) for j in jobs]
        self.stores = {u.name: _Store(u, j.options.out) for j in jobs for u in j.units}
        self.outputs: dict[int, dict[int, dp.TaskOutput | BaseException]] = {i: {} for i in range(len(jobs))}
        self.results: dict[int, list[RunResult]] = {}
        self.where: dict[str, dict] = {}
        self.bars: dict[str, Any] = {}
        self.board: Any = None
        self.progress = {u.name for j in jobs if j.options.progress for u in j.units}
        self.env = {"version": ray.__version__, "address": address or "local instance"}

    def run(self) -> list[RunResult]:
        import ray

        self.board = board = (
            ray.remote(dp.Board).options(num_cpus=0).remote({n: s.lines for n, s in self.stores.items()})
        )
        task = ray.remote(run_replica)
        refs: dict[Any, tuple[int, dp.Replica]] = {}
        try:
            for j, reps in enumerate(self.plans):
                gpus = gpus_needed(self.jobs[j])
                why = _no_room(gpus)
                for rep in reps:
                    if why:
                        self._received(j, rep, RuntimeError(why))
                        continue
                    ref = task.options(
                        num_cpus=1,
                        num_gpus=gpus,
                        max_retries=MAX_RETRIES,
                        retry_exceptions=False,
                        name=f"runner:{rep.tag}",
                    ).remote(rep, board)
                    refs[ref] = (j, rep)
            while refs:
                ready, _ = ray.wait(list(refs), num_returns=1, timeout=0.5)
                self._pump(ray.get(board.take.remote()))
                for ref in ready:
                    j, rep = refs.pop(ref)
                    self._received(j, rep, _get(ref))
        except BaseException:
            _cancel(list(refs))
            raise
        finally:
            for bar in self.bars.values():
                bar.close()
            ray.kill(board)
        return [res for j in range(len(self.jobs)) for res in self.results.get(j, [])]

    def _event(self, **ev: Any) -> None:
        if self.on_event:
            self.on_event(ev)

    def _pump(self, events: list[tuple]) -> None:
        for ev in events:
            if ev[0] == "started":
                _, tag, info = ev
                n = self.where.get(tag, {}).get("attempts", 0) + 1
                self.where[tag] = {**info, "attempts": n}
                self._event(event="started", tag=tag, attempt=n, **info)
                for name in self._units_of(tag):
                    self._bar(name)
            else:
                _, tag, name, lines = ev
                store = self.stores.get(name)
                if store is None:
                    continue
                new = store.add(lines)
                if new:
                    if name in self.bars:
                        self.bars[name].update(new)
                    self._event(event="samples", tag=tag, name=name, done=len(store.lines), total=len(store.ids))

    def _units_of(self, tag: str) -> list[str]:
        return [n for reps in self.plans for r in reps if r.tag == tag for n in r.bounds]

    def _bar(self, name: str) -> None:
        store = self.stores[name]
        if name in self.bars or name not in self.progress:
            return
        from tqdm import tqdm

        self.bars[name] = tqdm(
            total=len(store.ids), initial=len(store.lines), desc=name, unit="ex", dynamic_ncols=True, mininterval=0.5
        )

    def _received(self, j: int, rep: dp.Replica, out: dp.TaskOutput | BaseException) -> None:
        self.outputs[j][rep.index] = out
        if len(self.outputs[j]) < len(self.plans[j]):
            return
        results = []
        for unit in self.jobs[j].units:
            parts = [self._part(unit, r, self.outputs[j][r.index]) for r in self.plans[j] if unit.name in r.bounds]
            res = self._write(unit, parts)
            results.append(res)
            if self.on_result:
                self.on_result(res)
        self.results[j] = results
        self.board.forget.remote([u.name for u in self.jobs[j].units])  # keep only what is still running

    def _part(self, unit: Unit, rep: dp.Replica, out: dp.TaskOutput | BaseException) -> merge.Part:
        where = dict(self.where.get(rep.tag, {"attempts": 0}))
        shard = next(u for u in rep.job.units if u.name == unit.name)
        cmd = rep.job.options.command
        if isinstance(out, BaseException):
            why = f"the Ray task failed: {type(out).__name__}: {' '.join(str(out).split())[:600]}"
            return merge.Part(rep, where, failed_result(shard, why, None, cmd), None)
        where.update(node_id=out.node_id, node_ip=out.node_ip, pid=out.pid)
        files = next((f for f in out.units if f.name == unit.name), None)
        if files is None or not files.result_json:
            return merge.Part(
                rep, where, failed_result(shard, "the replica's run left no results.json", None, cmd), files
            )
        old, new = (json.dumps(str(p))[1:-1] for p in (out.worker_dir, rep.job.options.out))
        text = files.result_json.decode("utf-8", errors="replace").replace(old, new)
        return merge.Part(rep, where, RunResult.model_validate_json(text), files)

    def _write(self, unit: Unit, parts: list[merge.Part]) -> RunResult:
        store = self.stores[unit.name]
        ok = all(p.result.status == "ok" and p.files and p.files.samples is not None for p in parts)
        if not ok:
            res, samples = merge.merge_failed(unit, parts), None
        elif len(parts) == 1 and parts[0].replica.of == 1:
            res, samples = parts[0].result, parts[0].files.samples  # type: ignore[union-attr]
        else:
            res, samples = merge.merge_ok(unit, parts)
        res = _with_ray(
            res, [merge.replica_info(unit, p) for p in parts], {**self.env, "replicas": parts[0].replica.of}
        )
        _append_logs(store.folder.engine_log, unit, parts)
        if samples is not None:
            write_bytes_atomic(store.folder.samples, samples)
            store.folder.partial.unlink(missing_ok=True)
        else:
            for p in parts:
                if p.files:
                    store.add({**dp.line_ids(p.files.samples or b""), **dp.line_ids(p.files.partial or b"")})
        write_json_atomic(store.folder.results, res.model_dump(mode="json"))
        store.written = True
        if unit.name in self.bars:
            bar = self.bars.pop(unit.name)
            bar.update(max(0, bar.total - bar.n) if ok else 0)
            bar.close()
        return res


def _get(ref: Any) -> dp.TaskOutput | BaseException:
    import ray

    try:
        return ray.get(ref)
    except ray.exceptions.RayError as e:
        return e


def _cancel(refs: list) -> None:
    """Ctrl-C, SIGTERM: end the tasks (their runs end their process groups), forcefully if they linger."""
    import ray

    for r in refs:
        ray.cancel(r)
    if refs:
        _, lingering = ray.wait(refs, num_returns=len(refs), timeout=15)
        for r in lingering:
            ray.cancel(r, force=True)


def _with_ray(res: RunResult, replicas: list[dict], env: dict) -> RunResult:
    d = res.model_dump(mode="json")
    d["environment"] = {**d.get("environment", {}), "ray": env}
    d.update(executor="ray", replicas=replicas)
    return RunResult.model_validate(d)


def _append_logs(path: Path, unit: Unit, parts: list[merge.Part]) -> None:
    with open(path, "ab") as f:
        for p in parts:
            a, b = p.replica.bounds[unit.name]
            w = p.where
            f.write(
                f"\n{LOG_MARK} {unit.name}: Ray replica {p.replica.index + 1} of {p.replica.of} (examples "
                f"{a + 1}-{b}) on node {w.get('node_ip', '?')}, worker pid {w.get('pid', '?')}, attempt "
                f"{w.get('attempts', '?')} =====\n".encode()
            )
            if p.files:
                f.write(p.files.engine_log)
