"""`runner go --executor ray`: each job (recipes sharing an engine), or each data-parallel replica
of one, as a Ray task asking for the engine's GPUs: `run_isolated` in a folder on the worker node,
where a retry (of a task whose worker or node died) finds the samples it had finished. What it wrote
comes back; the driver merges the replicas and writes every file under its `--out` (no shared disk).
Finished samples come as they finish, via a Ray queue, into the driver's partial samples file (a
call interrupted there continues from them, as on the local executor). And report.md's "Where it
ran"."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from runner.base.errors import RunnerError
from runner.base.files import PartialWriter, jsonl_lines, write_bytes_atomic, write_jsonl_atomic
from runner.base.format import secs, table
from runner.base.procs import cmdline, descendants, end_stragglers, signals_held
from runner.folder import RunFolder
from runner.results import ReplicaRun, RunResult, Sample, Timings
from runner.run.isolate import failed_result, run_isolated
from runner.run.job import Job, Unit, check_host
from runner.run.result import (
    LOG_MARK,
    Failure,
    Measured,
    Output,
    engine_facts,
    merge_samples,
    run_result,
)
from runner.run.resume import load_partial, start_partial


@dataclass(frozen=True)
class Replica:
    """One replica's share of a job: its units cut to their shards, and where each shard lies."""

    index: int
    of: int
    job: Job
    bounds: dict[str, tuple[int, int]]  # unit name -> [start, end) in the unit's examples
    tag: str  # names the worker-side folder (the same on a retry)

    def share(self, name: str) -> str:
        a, b = self.bounds[name]
        return f"replica {self.index + 1} of {self.of} (examples {a + 1}-{b})"


@dataclass(frozen=True)
class Shard:
    """What one replica's run of one recipe left on the worker node, its paths written as the
    driver's."""

    result: RunResult | None
    samples: dict[str, Sample]
    log: bytes
    generation_end: float | None  # when samples.jsonl was written (epoch s, the worker's clock)
    run_end: float | None  # when results.json was written


def split(job: Job, n: int) -> list[Replica]:
    """The job as at most `n` replicas (never more than a recipe has examples), contiguous shares in
    dataset order, larger ones first; a recipe too small to be in every replica is only in the first
    ones."""
    # two --out: two folders
    named = [str(Path(job.options.out).resolve()), *(u.run_key for u in job.units)]
    key = hashlib.sha256("+".join(named).encode()).hexdigest()[:16]
    n = max(1, min(n, max(len(u.prepared.examples) for u in job.units)))
    out = []
    for k in range(n):
        units, bounds = [], {}
        for u in job.units:
            m = len(u.prepared.examples)
            a, b = -(-k * m // n), -(-(k + 1) * m // n)
            if b > a or n == 1:
                p = u.prepared
                cut = replace(p, examples=p.examples[a:b], messages=p.messages[a:b], n_target=b - a)
                units.append(replace(u, prepared=cut))  # (unused for n = 1: the job is itself)
                bounds[u.name] = (a, b)
        out.append(
            Replica(
                k,
                n,
                job if n == 1 else replace(job, units=tuple(units)),
                bounds,
                f"{key}-r{k}of{n}",
            )
        )
    return out


def run_replica(rep: Replica, seeds: dict[str, list[Sample]], events: Any) -> dict[str, Shard]:
    """The Ray task: the replica's job in a folder on this node, from the driver's `seeds`; what it
    wrote comes back."""
    import ray

    wdir = Path(tempfile.gettempdir()) / "runner-ray" / rep.tag
    wdir.mkdir(parents=True, exist_ok=True)
    owner = wdir / ".owner"
    if owner.exists() and owner.read_text() != str(os.getpid()):
        # a run whose worker died ends its own process group within a second (worker.py)
        time.sleep(1.5)
    owner.write_text(str(os.getpid()))
    where = {
        "node_id": ray.get_runtime_context().get_node_id(),
        "node_ip": ray.util.get_node_ip_address(),
        "pid": os.getpid(),
    }
    events.put(("started", rep.tag, where))
    job = replace(rep.job, options=replace(rep.job.options, out=wdir, progress=False))
    folders = {u.name: job.options.folder(u.name) for u in job.units}
    for u, f in zip(job.units, folders.values()):
        f.samples.unlink(missing_ok=True)
        # (an earlier attempt's partial file holds them)
        if seeds.get(u.name) and not f.partial.exists():
            start_partial(f.partial, u.run_key, seeds[u.name])
    stop, sent = threading.Event(), {}

    # every half second, each recipe's finished samples (whole lines of its partial file after the
    # run key) not sent yet, with their count, for the driver's partial file
    def report_progress() -> None:
        while not stop.wait(0.5):
            for name, folder in folders.items():
                try:
                    data = folder.partial.read_bytes()
                except OSError:
                    continue
                data = data[: data.rfind(b"\n") + 1]
                if len(data) > (at := sent.get(name) or data.find(b"\n") + 1):
                    sent[name] = len(data)
                    events.put(("samples", rep.tag, name, data.count(b"\n") - 1, data[at:]))

    threading.Thread(target=report_progress, daemon=True).start()
    try:
        run_here(job, where["node_ip"])
    finally:
        stop.set()
    shards = {u.name: _shard(u, folders[u.name], wdir, rep.job.options.out) for u in job.units}
    shutil.rmtree(wdir, ignore_errors=True)  # everything it holds goes back to the driver
    return shards


def _shard(u: Unit, f: RunFolder, wdir: Path, out: Path) -> Shard:
    read = lambda p: p.read_bytes() if p.is_file() else b""
    mtime = lambda p: p.stat().st_mtime if p.is_file() else None
    # a failed run keeps its finished samples
    raw, lines = read(f.results), read(f.samples) or read(f.partial)
    worker, driver = (json.dumps(str(p))[1:-1] for p in (wdir, out))
    result = (
        RunResult.model_validate_json(raw.decode("utf-8", "replace").replace(worker, driver))
        if raw
        else None
    )
    rows = [
        d
        for d in map(json.loads, filter(str.strip, jsonl_lines(lines.decode("utf-8", "replace"))))
        if isinstance(d, dict) and "id" in d
    ]
    samples = {str(d["id"]): Sample.from_line(d, list(u.loaded.recipe.metrics)) for d in rows}
    return Shard(result, samples, read(f.engine_log), mtime(f.samples), mtime(f.results))


def run_here(job: Job, node_ip: str) -> None:
    """run_isolated where this node can run the job's engine (`runner go` left that to the workers),
    else say why."""
    try:
        check_host(job.units[0].loaded)
    except RunnerError as e:
        why = f"Ray node {node_ip} cannot run it: {e.render(with_hint=False)}"
        for u in job.units:
            job.options.folder(u.name).write(failed_result(u, why, e.hint, job.options.command))
        return
    run_isolated(job)


def _no_room(gpus: int) -> str | None:
    import ray

    nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
    if not any(r.get("CPU", 0) >= 1 and r.get("GPU", 0) >= gpus for r in nodes):
        most = max((r.get("GPU", 0) for r in nodes), default=0)
        return (
            f"the engine needs {gpus} GPU(s) on one node, and no node of the Ray cluster has "
            f"them (most: {most:g})"
        )


def _connect(address: str | None) -> None:
    import ray

    if address is None:
        ray.init(include_dashboard=False, log_to_driver=False)
        return
    # the runner package for the workers; a `ray job submit` driver: the job's own env
    env = (
        None
        if "RAY_JOB_CONFIG_JSON_ENV_VAR" in os.environ
        else {
            "py_modules": [str(Path(__file__).resolve().parents[1])],
            "excludes": ["__pycache__/"],
        }
    )
    try:
        ray.init(address=address, log_to_driver=False, runtime_env=env)
    except ConnectionError as e:
        raise RunnerError(
            f"cannot connect to the Ray cluster: {e}",
            field="--address",
            hint="check the address (`ray status` on the head node prints it); a cluster with "
            "token authentication needs RAY_AUTH_MODE=token here and its token in RAY_AUTH_TOKEN "
            "or ~/.ray/auth_token (`ray get-auth-token` on the head node)",
        ) from None


def _start_ray(address: str | None) -> None:
    """ray.init with Ctrl-C and SIGTERM held until it returns (interrupted midway, Ray's start left
    its agents running or aborted the process; its own SIGTERM handler exits 15), then raised as
    KeyboardInterrupt once Ray is up and can be shut down whole. Our SIGTERM handler is put back
    over Ray's."""
    with signals_held() as pending:
        try:
            _connect(address)
        # Ray's own SIGTERM handler, installed during init, caught a SIGTERM in its window
        except SystemExit as e:
            if e.code != signal.SIGTERM:
                raise
            pending.append(signal.SIGTERM)
    if pending:
        shutdown()
        raise KeyboardInterrupt


def shutdown() -> None:
    """ray.shutdown, then an end to what the local instance started and left behind (its dashboard
    and runtime-env agents outlive a shutdown that comes right after the start)."""
    import ray

    below = [p for p in descendants(os.getpid()) if b"ray" in cmdline(p)]
    ray.shutdown()
    end_stragglers([p for p in below if b"ray" in cmdline(p)])


def run_jobs_on_ray(
    jobs: list[Job],
    *,
    address: str | None = None,
    replicas: int | None = None,
    on_result: Callable[[RunResult], None] | None = None,
    on_event: Callable[[dict[str, Any]], None] | None = None,
) -> list[RunResult]:
    """One result per recipe, in the jobs' order; `replicas` overrides each recipe's. Without
    `address` (and no Ray connection in this process) a local Ray instance runs the call.
    `on_result` gets each recipe's result as it is written; `on_event` the tasks' reports
    (`started`, with the node and pid; `samples`: a recipe's finished count)."""
    import ray

    started = not ray.is_initialized()
    if started:
        _start_ray(address)
    env = {"version": ray.__version__, "address": address or "local instance"}
    try:
        return _Call(
            jobs, replicas, on_result or (lambda r: None), on_event or (lambda e: None), env
        ).run()
    finally:
        if started:
            shutdown()


class _Call:
    def __init__(
        self, jobs: list[Job], replicas: int | None, on_result, on_event, env: dict[str, str]
    ):
        self.jobs, self.on_result, self.on_event, self.env = jobs, on_result, on_event, env
        self.plans = [split(j, replicas or j.units[0].loaded.recipe.replicas) for j in jobs]
        self.by_tag = {r.tag: r for reps in self.plans for r in reps}
        self.units = {u.name: (u, j.options.folder(u.name)) for j in jobs for u in j.units}
        # each recipe's finished samples in the driver's partial file, by id: the tasks' seeds, and
        # those the tasks send are appended as they come
        self.kept = {
            n: load_partial(f.partial, u.run_key, u.loaded.recipe.metrics)
            for n, (u, f) in self.units.items()
        }
        self.outputs: list[dict[int, Any]] = [{} for _ in jobs]  # [job][replica]: shards or error
        self.results: list[list[RunResult]] = [[] for _ in jobs]
        self.bars, self.where = {}, {}  # where: replica tag -> node, pid, attempts, counts

    def run(self) -> list[RunResult]:
        import ray
        from ray.util.queue import Queue

        events = Queue(actor_options={"num_cpus": 0})
        # retried if its worker dies
        task = ray.remote(num_cpus=1, max_retries=3, retry_exceptions=False)(run_replica)
        refs: dict[Any, tuple[int, Replica]] = {}
        try:
            for j, reps in enumerate(self.plans):
                gpus = self.jobs[j].units[0].loaded.recipe.engine.gpus_needed()
                why = _no_room(gpus)
                for rep in reps:
                    if why:
                        self._received(j, rep, RuntimeError(why))
                    else:
                        run = task.options(num_gpus=gpus, name=f"runner:{rep.tag}")
                        # the finished samples the driver's `--out` holds for its shares
                        seeds = {
                            u.name: merge_samples(u.prepared.examples, self.kept[u.name])
                            for u in rep.job.units
                        }
                        refs[run.remote(rep, seeds, events)] = (j, rep)
            while refs:
                ready, _ = ray.wait(list(refs), num_returns=1, timeout=0.5)
                self._pump(events)
                for ref in ready:
                    try:
                        got = ray.get(ref)
                    except ray.exceptions.RayError as e:
                        got = e
                    self._pump(events)
                    self._received(*refs.pop(ref), got)
        except BaseException:
            for r in refs:  # Ctrl-C, SIGTERM: end the tasks (their runs end their process groups)
                ray.cancel(r, force=True)
            raise
        finally:
            for bar in self.bars.values():
                bar.close()
            ray.kill(events.actor)
        return [res for results in self.results for res in results]

    def _keep(self, name: str, lines: bytes) -> None:
        """A task's finished samples (partial file lines) appended to the driver's partial file,
        each once: an interrupted call leaves them to the next."""
        (u, folder), kept, new = self.units[name], self.kept[name], []
        for line in lines.splitlines(keepends=True):
            s = Sample.from_line(json.loads(line), list(u.loaded.recipe.metrics))
            if s.id not in kept:
                kept[s.id] = s
                new.append(line.decode())
        if not new:
            return
        if not folder.partial.is_file():
            start_partial(folder.partial, u.run_key)
        with PartialWriter(folder.partial) as w:
            w.append(new)

    def _pump(self, events: Any) -> None:
        from tqdm import tqdm

        for kind, tag, *ev in events.get_nowait_batch(events.qsize()):
            if kind == "started":
                n = self.where.get(tag, {}).get("attempts", 0) + 1
                self.where[tag] = {**ev[0], "attempts": n}
                self.on_event(dict(event="started", tag=tag, attempt=n, **ev[0]))
                rep = self.by_tag[tag]
                for name in rep.bounds if rep.job.options.progress else ():
                    if name not in self.bars:
                        self.bars[name] = tqdm(
                            total=len(self.units[name][0].prepared.examples),
                            desc=name,
                            unit="ex",
                            dynamic_ncols=True,
                            mininterval=0.5,
                        )
                continue
            name, count, lines = ev
            self._keep(name, lines)
            self.where[tag].setdefault("counts", {})[name] = count
            done = sum(w.get("counts", {}).get(name, 0) for w in self.where.values())
            if name in self.bars:
                self.bars[name].update(done - self.bars[name].n)
            # over the recipe's replicas
            total = len(self.units[name][0].prepared.examples)
            self.on_event(dict(event="samples", tag=tag, name=name, done=done, total=total))

    def _received(self, j: int, rep: Replica, got: dict[str, Shard] | BaseException) -> None:
        self.outputs[j][rep.index] = got
        if len(self.outputs[j]) == len(self.plans[j]):
            for u in self.jobs[j].units:
                self.results[j].append(self._merge(j, u))
                self.on_result(self.results[j][-1])

    def _merge(self, j: int, unit: Unit) -> RunResult:
        """The recipe's files under the driver's --out, from its replicas' shards (job `j`)."""
        opts = self.jobs[j].options
        folder = opts.folder(unit.name)
        shards, rows, logs = [], [], []
        for rep in (r for r in self.plans[j] if unit.name in r.bounds):
            got, where = self.outputs[j][rep.index], self.where.get(rep.tag, {})
            shard = got.get(unit.name) if isinstance(got, dict) else None
            res = shard.result if shard else None
            if res is None:
                why = (
                    f"the Ray task failed: {type(got).__name__}: {' '.join(str(got).split())[:600]}"
                    if isinstance(got, BaseException)
                    else "the replica's run left no results.json"
                )
                res = failed_result(unit, why, None, opts.command)
            head = (
                f"{unit.name}: Ray {rep.share(unit.name)} on node {where.get('node_ip', '?')}, "
                f"worker pid {where.get('pid', '?')}, attempt {where.get('attempts', '?')}"
            )
            logs += [f"\n{LOG_MARK} {head} =====\n".encode(), shard.log if shard else b""]
            rows.append(
                ReplicaRun(
                    **{k: where[k] for k in ("node_id", "node_ip", "pid") if where.get(k)},
                    index=rep.index,
                    examples=list(rep.bounds[unit.name]),
                    status=res.status,
                    attempts=where.get("attempts") or 1,
                    reused_samples=res.reused_samples,
                    load_s=res.timings.load_s,
                    generate_s=res.timings.generate_s,
                )
            )
            shards.append((rep, shard, res))
        write_bytes_atomic(folder.engine_log, b"".join(logs))
        samples = merge_samples(
            unit.prepared.examples,
            *[s.samples if s else {} for _, s, _ in shards],
            self.kept[unit.name],  # (a failed task's, sent before it failed)
        )
        # a task's samples event that comes after its result brings none of them again
        self.kept[unit.name] = {s.id: s for s in samples}
        facts = dict(executor="ray", replicas=rows, env={"ray": self.env})
        bad = [(rep, r) for rep, _, r in shards if r.status != "ok"]
        # the samples the replicas finished stay in the driver's partial file for the next call
        if bad:
            start_partial(folder.partial, unit.run_key, samples)
            rep, r = bad[0]
            error = r.error or "the run wrote no results"
            if rep.of > 1:
                error = f"{rep.share(unit.name)}: {error}"
                error += (
                    f" (and {len(bad) - 1} more of its replicas failed)" if len(bad) > 1 else ""
                )
            res = run_result(
                unit, opts.command, Measured(), Failure(error, r.hint, engine_facts(r)), **facts
            )
        else:
            write_jsonl_atomic(folder.samples, [s.to_line() for s in samples])
            folder.partial.unlink(missing_ok=True)
            res = self._merged(unit, opts.command, shards, samples, facts)
        folder.write(res)
        if bar := self.bars.pop(unit.name, None):
            bar.update(bar.total - bar.n if res.status == "ok" else 0)
            bar.close()
        return res

    def _merged(
        self, unit: Unit, cmd: str, shards: list, samples: list[Sample], facts: dict
    ) -> RunResult:
        """The replicas' results as one (the last note says how); any replica's ignored knob is the
        run's."""
        results, n = [r for _, _, r in shards], len(shards)

        def window(end: str, span: str) -> float:
            ends = [getattr(s, end) for _, s, _ in shards]
            spans = [getattr(r.timings, span) or 0.0 for r in results]
            return (
                max(spans) if None in ends else max(ends) - min(e - s for e, s in zip(ends, spans))
            )

        def most(key: str) -> float | None:
            values = [getattr(r.memory, key) for r in results]
            return max((v for v in values if v is not None), default=None)

        gen_s = window("generation_end", "generate_s")
        timings = Timings(
            load_s=max(r.timings.load_s or 0.0 for r in results),
            generate_s=gen_s,
            total_s=max(window("run_end", "total_s"), gen_s),
        )
        m = Measured(
            timings,
            most("peak_gpu_gib"),
            most("baseline_gpu_gib"),
            False,
            min(r.started_at for r in results),
            0.0,
            sum(r.reused_samples for r in results),
        )
        every = [x for x in results[0].notes if all(x in r.notes for r in results)]
        notes = every + [
            f"replica {p.index + 1} of {n}: {x}"
            for p, _, r in shards
            for x in r.notes
            if x not in every
        ]
        if n > 1:
            notes.append(
                f"ran as {n} data-parallel replicas on Ray, each on a contiguous share of the "
                "examples: generation "
                "time is the wall time from the first replica's generation start to the last one's "
                "end (each node's clock), engine start the slowest replica's; tokens, scores and "
                "latencies are over the merged samples"
            )
        engine = engine_facts(results[0])
        ignored = {k.name: k for r in results for k in r.knobs if k.status == "ignored"}
        engine.knobs = [ignored.get(k.name, k) for k in engine.knobs]
        # token ids do not come back: the smallest shared prefix
        k = min(r.prefix.shared_prefix_tokens for r in results)
        out = Output(samples, engine, notes, shared_prefix=k)
        return run_result(unit, cmd, m, out, engine_of=results[0].engine_of, **facts)


def where_it_ran(r: RunResult) -> list[str]:
    """report.md's section on a run on Ray: the cluster, each replica's share, node, worker,
    attempts and times."""
    if r.executor != "ray":
        return []
    v, n, rows = r.environment.get("ray", {}), len(r.replicas), []
    for x in r.replicas:
        head = f"{x.index + 1}" + (" (failed)" if x.status != "ok" else "")
        share = f"{x.examples[0] + 1}–{x.examples[1]}" if len(x.examples) == 2 else None
        node = (
            f"{x.node_ip or '?'} ({x.node_id[:8]})"
            if x.node_id
            else x.node_ip or "– (never started)"
        )
        pid = str(x.pid) if x.pid is not None else None
        rows.append([head, share, node, pid, x.attempts, secs(x.load_s), secs(x.generate_s)])
    about = (
        f"Ray {v.get('version', '?')} ({v.get('address', '?')}), {n} data-parallel "
        f"{'replica' if n == 1 else 'replicas'} (each on a contiguous share of the examples); the "
        "workers' files "
        "came back to the machine that ran `runner go`."
    )
    columns = ["replica", "examples", "node", "pid", "attempts", "start", "generation"]
    out = ["", "## Where it ran", "", about, "", table(rows, columns)]
    if retried := ", ".join(str(x.index + 1) for x in r.replicas if x.attempts > 1):
        out += [
            "",
            f"Retried after its worker or node died: replica {retried} (each continued from the "
            "samples it had finished; see `reused_samples` in results.json).",
        ]
    return out
