"""Running recipes on an engine: token ids -> generate -> score -> results files.

Runs inside the recipes' own process (see isolate.py), or in the caller's with `--in-process`.
Recipes of one job share one engine (built for the first); the prefix cache is reset between
them, so no recipe is sped up by another's cache. Samples are appended to the partial file as
they finish; results.json and samples.jsonl are written atomically at the end."""

from __future__ import annotations

import datetime as dt
import json
import sys
import time
from collections.abc import Callable
from typing import IO, Any

from runner.engines.base import Engine, Generation, Request
from runner.errors import RunnerError
from runner.execution import environment
from runner.execution.assemble import Measured, assemble, failure_hint, make_sample, unit_result
from runner.execution.gpumem import PeakSampler
from runner.execution.job import Job, RunOptions, Unit
from runner.execution.layout import RunFolder
from runner.execution.resume import load_partial, start_partial
from runner.files import PartialWriter, write_json_atomic, write_jsonl_atomic
from runner.reporting.results import RunResult, Sample


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


class SharedEngine:
    """The job's one engine, built when the first recipe needs it; later recipes reuse it."""

    def __init__(self, unit: Unit):
        self.unit, self.engine, self.error = unit, None, None
        self.users = 0
        self.sampler = PeakSampler()

    def get(self) -> Engine:
        if self.error is not None:
            raise self.error
        if self.engine is None:
            r = self.unit.loaded.recipe
            self.sampler.__enter__()  # whole device, from before the engine starts
            try:
                self.engine = r.engine.build(r.model, r.prompt.chat_template)
            except BaseException as e:
                self.error = e
                raise
        elif self.users:
            self.engine.reset_prefix_cache()
        self.users += 1
        return self.engine

    def close(self) -> None:
        self.sampler.__exit__(None, None, None)
        if self.engine is not None:
            self.engine.close()
            self.engine = None


def _progress_bar(total: int, name: str, enabled: bool, stream: IO[str] | None) -> Any:
    from tqdm import tqdm

    return tqdm(
        total=total,
        desc=name,
        unit="ex",
        disable=not enabled,
        file=stream or sys.stderr,
        dynamic_ncols=True,
        mininterval=0.5,
    )


class _Collector:
    """The sink engines hand finished generations to: scores them, appends their lines to the
    partial file (made durable at most every second), and keeps the clock of the last output."""

    def __init__(self, unit: Unit, todo: list[int], texts: list[str], writer: PartialWriter):
        self.unit, self.todo, self.texts, self.writer = unit, todo, texts, writer
        self.new: dict[int, Sample] = {}
        self.clock = time.perf_counter()
        self.one_at_a_time = True  # per-example wall times are real only when examples finish one by one

    def __call__(self, finished: list[tuple[int, Generation]]) -> None:
        self.one_at_a_time &= len(finished) == 1
        t = time.perf_counter()
        wall, self.clock = (t - self.clock) / max(len(finished), 1), t
        r, lines = self.unit.loaded.recipe, []
        for j, g in finished:
            i = self.todo[j]
            ex = self.unit.prepared.examples[i]
            self.new[i] = make_sample(ex, self.texts[i], g, r, seconds=wall)
            lines.append(json.dumps(self.new[i].to_line(), ensure_ascii=False) + "\n")
        self.writer.append(lines)


def _base_result(unit: Unit, opts: RunOptions) -> RunResult:
    r = unit.loaded.recipe
    meaningful = not (r.model.load_format == "dummy" or r.model.id.startswith("builtin:") or r.engine.fake)
    return unit_result(unit, opts.command, started_at=now(), scores_meaningful=meaningful)


def _generate(
    unit: Unit, opts: RunOptions, shared: SharedEngine, base: RunResult, progress_file: IO[str] | None
) -> RunResult:
    r, folder = unit.loaded.recipe, RunFolder.of(opts.out, unit.name)
    done = load_partial(folder.partial, unit.run_key, r.metrics)
    examples = unit.prepared.examples
    todo = [i for i, ex in enumerate(examples) if ex.id not in done]
    reused = shared.users > 0
    engine = shared.get()
    texts, ids = _encode(unit, engine, base)
    base.plan = _plan(unit, ids, base)
    if not done:
        start_partial(folder.partial, unit.run_key)
    sink, t0, gen_s = _run_engine(unit, opts, engine, todo, texts, ids, len(done), progress_file)
    samples = [done[ex.id] if ex.id in done else sink.new[i] for i, ex in enumerate(examples)]
    write_jsonl_atomic(folder.samples, [s.to_line() for s in samples])
    folder.partial.unlink(missing_ok=True)
    reused_s = sum(d.seconds or 0.0 for d in done.values())
    m = Measured(
        generate_s=gen_s + reused_s,
        peak_gpu_gib=shared.sampler.peak,  # None without a GPU
        baseline_gpu_gib=shared.sampler.start_gib,
        per_example=sink.one_at_a_time,
        n_target=unit.prepared.n_target,
        gpu_busy=shared.sampler.busy_share(t0, t0 + gen_s),  # None without a GPU
        gpu_busy_tenths=shared.sampler.busy_parts(t0, t0 + gen_s),
    )
    result = assemble(base, r, samples, ids, engine.info, m)
    result.reused_samples = len(done)
    if done:
        result.notes.append(
            f"{len(done)} of {len(samples)} samples were reused from an earlier, interrupted "
            f"run of the same recipe; generation time adds their recorded wall time "
            f"({reused_s:.1f} s) to this run's ({gen_s:.1f} s)."
        )
    if reused:
        _note_shared_engine(result, shared, engine)
    return result


def _encode(unit: Unit, engine: Engine, base: RunResult) -> tuple[list[str], list[list[int]]]:
    """The prompts as text and token ids, cut from the left where the recipe asks it (noted in `base`)."""
    r = unit.loaded.recipe
    texts, ids = engine.encode(unit.prepared.messages)
    if r.prompt.truncate:
        from runner.inputs.context import context_length, truncate_left

        ids, cut = truncate_left(ids, context_length(unit.loaded), r.sampling.max_tokens)
        if cut:
            base.notes.append(
                f"{cut} prompt(s) were cut from the left to fit the model's context (prompt.truncate: true)"
            )
    return texts, ids


def _run_engine(
    unit: Unit,
    opts: RunOptions,
    engine: Engine,
    todo: list[int],
    texts: list[str],
    ids: list[list[int]],
    n_done: int,
    progress_file: IO[str] | None,
) -> tuple[_Collector, float, float]:
    """Generate the examples not yet done into the partial file; the sink, the generation's start
    (time.perf_counter()) and its duration."""
    r, examples = unit.loaded.recipe, unit.prepared.examples
    bar = _progress_bar(len(ids), r.name, opts.progress, progress_file)
    bar.update(n_done)
    with PartialWriter(RunFolder.of(opts.out, unit.name).partial) as writer:
        sink = _Collector(unit, todo, texts, writer)
        t0 = sink.clock = time.perf_counter()
        engine.generate(
            [Request(ids=ids[i], example=examples[i]) for i in todo],
            r.sampling,
            progress=bar.update if opts.progress else None,
            sink=sink,
        )
    # generation ends when the last output is back (the sink's clock), as a plain generate() call
    # would time it: what the engine does after handing over its last outputs counts in total only
    gen_s = (sink.clock if sink.new else time.perf_counter()) - t0
    bar.close()
    return sink, t0, gen_s


def _note_shared_engine(result: RunResult, shared: SharedEngine, engine: Engine) -> None:
    """A recipe that ran on an engine another recipe started: its engine start counts there."""
    result.timings.load_s = 0.0
    result.notes.append(
        f"this recipe ran on the engine started for {shared.unit.name} (engine start "
        f"{engine.info.load_s:.1f} s, counted there); the prefix cache was reset before it"
    )


def _plan(unit: Unit, ids: list[list[int]], base: RunResult) -> dict[str, Any] | None:
    """The prediction for this run, made before generation on the GPU it runs on (none without a GPU)."""
    from runner.planning.gpus import gpu_from_nvml

    gpu = gpu_from_nvml()
    if gpu is None:
        return None
    try:
        from runner.planning.recipe_plan import plan_recipe

        return plan_recipe(unit.loaded, unit.prepared, ids, gpu).model_dump(mode="json")
    except Exception as e:  # a prediction is evidence, never a reason to fail the run
        base.notes.append(f"no prediction: {type(e).__name__}: {e}")
        return None


def run_unit(unit: Unit, opts: RunOptions, shared: SharedEngine, progress_file: IO[str] | None = None) -> RunResult:
    """Run one recipe on the job's engine; always writes and returns a RunResult (failed on error)."""
    r = unit.loaded.recipe
    folder = RunFolder.of(opts.out, unit.name)
    folder.root.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    base = _base_result(unit, opts)
    try:
        if r.load is not None:
            from runner.execution.serve_run import run_serving

            result = run_serving(unit, opts, base, progress_file)
        else:
            result = _generate(unit, opts, shared, base, progress_file)
    except RunnerError as e:
        base.error, base.hint = e.render(with_hint=False), e.hint
        result = base
    except Exception as e:  # engine crash, OOM, ...: recorded as this recipe's failure
        base.error = f"{type(e).__name__}: {e}"
        base.hint = failure_hint(base.error)
        import traceback

        traceback.print_exc()
        result = base
    result.timings.total_s = time.perf_counter() - t_start
    result.finished_at = now()
    result.environment = {**environment.collect(), **result.environment, "inputs": unit.prepared.inputs}
    if r.model.trust_remote_code:
        result.notes.append("trust_remote_code was ON: code shipped with the checkpoint was allowed to run.")
    write_json_atomic(folder.results, result.model_dump(mode="json"))
    return result


def run_job(
    job: Job, progress_file: IO[str] | None = None, on_result: Callable[[RunResult], None] | None = None
) -> list[RunResult]:
    """Run a job's recipes in order on one engine, in this process."""
    shared = SharedEngine(job.units[0])
    results = []
    try:
        for unit in job.units:
            res = run_unit(unit, job.options, shared, progress_file)
            results.append(res)
            if on_result:
                on_result(res)
    finally:
        shared.close()
    return results
