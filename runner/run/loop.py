"""Running recipes on an engine: token ids -> generate -> score -> results files.

Runs inside the recipes' own process (see isolate.py), or in the caller's. Recipes of one job share one engine (built
for the first); the prefix cache is reset between them, so no recipe is sped up by another's cache. Samples are appended
to the partial file as they finish; results.json and samples.jsonl are written atomically at the end."""

from __future__ import annotations

import json
import sys
import time
import traceback
from typing import IO

from runner.base.errors import RunnerError
from runner.base.files import PartialWriter, write_json_atomic, write_jsonl_atomic
from runner.base.nvml import PeakSampler
from runner.base.types import Engine, Generation, Request
from runner.folder import RunFolder
from runner.inputs.context import context_length, truncate_left
from runner.results import RunResult, Sample, Timings
from runner.run.job import Job, RunOptions, Unit
from runner.run.result import Measured, failure_hint, make_sample, merge_samples, now, run_result
from runner.run.resume import load_partial, start_partial


class SharedEngine:
    """The job's one engine, built when the first recipe needs it; later recipes reuse it."""

    def __init__(self, unit: Unit):
        self.unit, self.engine, self.error, self.users, self.sampler = unit, None, None, 0, PeakSampler()

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


class _Collector:
    """The sink engines hand finished generations to: scores them, appends their lines to the partial file
    (made durable at most every second), and keeps the clock of the last output."""

    def __init__(self, unit: Unit, todo: list[int], texts: list[str], writer: PartialWriter):
        self.unit, self.todo, self.texts, self.writer = unit, todo, texts, writer
        self.new: dict[str, Sample] = {}
        self.clock = time.perf_counter()
        self.one_at_a_time = True  # per-example wall times are real only when examples finish one by one

    def __call__(self, finished: list[tuple[int, Generation]]) -> None:
        self.one_at_a_time &= len(finished) == 1
        t = time.perf_counter()
        wall, self.clock = (t - self.clock) / max(len(finished), 1), t
        lines = []
        for j, g in finished:
            i = self.todo[j]
            ex = self.unit.prepared.examples[i]
            s = self.new[ex.id] = make_sample(ex, self.texts[i], g, self.unit.loaded.recipe, seconds=wall)
            lines.append(json.dumps(s.to_line(), ensure_ascii=False) + "\n")
        self.writer.append(lines)


def _encode(unit: Unit, engine: Engine) -> tuple[list[str], list[list[int]], list[str]]:
    """The prompts as text and token ids, cut from the left where the recipe asks it (and a note saying so)."""
    r = unit.loaded.recipe
    texts, ids = engine.encode(unit.prepared.messages)
    if not r.prompt.truncate:
        return texts, ids, []
    ids, cut = truncate_left(ids, context_length(unit.loaded), r.sampling.max_tokens)
    note = f"{cut} prompt(s) were cut from the left to fit the model's context (prompt.truncate: true)"
    return texts, ids, [note] if cut else []


def _generate(unit: Unit, opts: RunOptions, shared: SharedEngine, progress_file: IO[str] | None) -> RunResult:
    t_start, started = time.perf_counter(), now()
    r, folder = unit.loaded.recipe, RunFolder.of(opts.out, unit.name)
    done = load_partial(folder.partial, unit.run_key, r.metrics)
    examples = unit.prepared.examples
    todo = [i for i, ex in enumerate(examples) if ex.id not in done]
    engine_of = shared.unit.name if shared.users else None  # a later recipe on the job's engine
    engine = shared.get()
    texts, ids, notes = _encode(unit, engine)
    if not done:
        start_partial(folder.partial, unit.run_key)
    from tqdm import tqdm

    shown = dict(disable=not opts.progress, file=progress_file or sys.stderr, dynamic_ncols=True, mininterval=0.5)
    bar = tqdm(total=len(ids), desc=r.name, unit="ex", **shown)
    bar.update(len(done))
    with PartialWriter(folder.partial) as writer:
        sink = _Collector(unit, todo, texts, writer)
        t0 = sink.clock = time.perf_counter()
        requests = [Request(ids=ids[i], example=examples[i]) for i in todo]
        engine.generate(requests, r.sampling, bar.update if opts.progress else None, sink)
    # generation ends when the last output is back (the sink's clock), as a plain generate() call would time
    # it: what the engine does after handing over its last outputs counts in total only
    gen_s = (sink.clock if sink.new else time.perf_counter()) - t0
    bar.close()
    samples = merge_samples(examples, done, sink.new)
    write_jsonl_atomic(folder.samples, [s.to_line() for s in samples])
    folder.partial.unlink(missing_ok=True)
    reused_s = sum(d.seconds or 0.0 for d in done.values())
    total_s, end, sampler = time.perf_counter() - t_start, t0 + gen_s, shared.sampler
    load_s = 0.0 if engine_of else engine.info.load_s  # a shared engine's start counts where it started
    busy = dict(gpu_busy=sampler.busy_share(t0, end), gpu_busy_tenths=sampler.busy_parts(t0, end))  # None: no GPU
    timings = Timings(load_s=load_s, generate_s=gen_s + reused_s, total_s=total_s, **busy)
    m = Measured(timings, sampler.peak, sampler.start_gib, sink.one_at_a_time, started, reused_s)
    facts = dict(ids=ids, notes=notes, reused=len(done), engine_of=engine_of)
    return run_result(unit, opts.command, samples, engine.info, m, **facts)


def run_unit(unit: Unit, opts: RunOptions, shared: SharedEngine, progress_file: IO[str] | None = None) -> RunResult:
    """Run one recipe on the job's engine; always writes and returns a RunResult (failed on error)."""
    folder = RunFolder.of(opts.out, unit.name)
    folder.root.mkdir(parents=True, exist_ok=True)
    t_start, started = time.perf_counter(), now()
    try:
        result = _generate(unit, opts, shared, progress_file)
    except Exception as e:  # a user error, an engine crash, OOM, ...: recorded as this recipe's failure
        if isinstance(e, RunnerError):
            error, hint = e.render(with_hint=False), e.hint
        else:
            traceback.print_exc()
            error = f"{type(e).__name__}: {e}"
            hint = failure_hint(error)
        m = Measured(Timings(total_s=time.perf_counter() - t_start), started_at=started)
        result = run_result(unit, opts.command, [], None, m, error=error, hint=hint)
    write_json_atomic(folder.results, result.model_dump(mode="json"))
    return result


def run_job(job: Job) -> list[RunResult]:
    """Run a job's recipes in order on one engine, in this process."""
    shared = SharedEngine(job.units[0])
    try:
        return [run_unit(unit, job.options, shared) for unit in job.units]
    finally:
        shared.close()
