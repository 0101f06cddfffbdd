"""Running recipes on an engine: token ids -> generate -> score -> results files.

Runs inside the recipes' own process (see isolate.py), or in the caller's. Recipes of one job share
one engine (built for the first); the prefix cache is emptied before every generation but the
engine's first, so no recipe or repeat is sped up by another's cache. A recipe with `repeat: N` is
generated N times; the recipes of a job take turns, repeat by repeat (A B A B), so drift and load
hit them alike, after the warm-up generations each asks for. The first repeat's samples are appended
to the partial file as they finish (an interrupted run continues from them) and become
samples.jsonl; every repeat is appended to repeats.jsonl when it ends (a later call skips those);
results.json is written when the recipe has all its repeats."""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from functools import cached_property
from typing import IO

from runner.base.errors import RunnerError
from runner.base.files import PartialWriter, write_jsonl_atomic
from runner.base.noise import peak_rss
from runner.base.nvml import PeakSampler
from runner.base.stats import geomean_interval, percentile
from runner.base.types import PROFILE_ENV, Engine, Generation, Request
from runner.folder import load_samples
from runner.inputs.context import context_length, truncate_left
from runner.results import Repeat, RunResult, Sample, Stages, Timings
from runner.run.job import Job, Unit
from runner.run.profile import profile_run
from runner.run.result import (
    Failure,
    Measured,
    Output,
    engine_failure,
    failure_hint,
    make_sample,
    merge_samples,
    now,
    run_result,
)
from runner.run.resume import add_repeat, load_partial, load_repeats, start_partial
from runner.run.trackers import Stage, parts, timed, untimed


def _size(path: str | None) -> int:
    try:
        return os.path.getsize(path) if path else 0
    except OSError:
        return 0


class SharedEngine:
    """The job's one engine, built when the first recipe needs it; later generations reuse it, their
    prefix cache emptied first."""

    def __init__(self, unit: Unit):
        self.unit, self.engine, self.error, self.users, self.sampler = (
            unit,
            None,
            None,
            0,
            PeakSampler(),
        )
        self.unclaimed_start = False  # the engine's start is not yet counted by a measured repeat
        self.profile = False  # a recipe of the job profiles (`profile: true`)
        self.started_by: str | None = None  # the recipe whose generation built the engine
        # where the engine's processes write (the engine.log current when it was built; None in
        # this process's own runs): the log its errors point at, read from `log_from` (its size
        # when the recipe now using the engine took it)
        self.log: str | None = None
        self.log_from = 0
        self.start_failure: tuple[str, str | None] | None = None  # `explain` of `error`, kept
        # the process and engine start (s), until the generation after them takes them
        self.stages: Counter = Counter()

    def get(self, by: str) -> Engine:
        if self.error is not None:
            raise self.error
        if self.engine is None:
            r = self.unit.loaded.recipe
            self.sampler.__enter__()  # whole device, from before the engine starts
            if self.profile:  # read by an engine whose profiler is set up as it is built
                os.environ[PROFILE_ENV] = "1"
            self.log = os.environ.get("RUNNER_ENGINE_LOG") or None
            self.log_from = _size(self.log)
            try:
                with Stage(self.stages, "start_s"):
                    self.engine = r.engine.build(r.model, r.prompt.chat_template)
                self.unclaimed_start, self.started_by = True, by
            except BaseException as e:
                self.error = e
                raise
            finally:
                os.environ.pop(PROFILE_ENV, None)
        elif self.users:
            self.log_from = _size(self.log)
            if self.engine.reset_prefix_cache() is False:
                field = self.unit.loaded.recipe.engine.prefix_cache_field
                raise RunnerError(
                    "the engine's prefix cache could not be emptied after the run before this one "
                    "(the engine still held its blocks), so this run's cache hits would include "
                    "that run's prompts",
                    field=f"engine.{field}" if field else "engine",
                    hint=f"a run on this engine before it was cut short or failed: run {by} "
                    f"again (runner go with --only {by}) on a fresh engine",
                )
        self.users += 1
        return self.engine

    def explain(self, e: Exception) -> tuple[str, str | None]:
        """The error and hint a recipe's failure records for `e`, its cause read from the engine's
        log; a failed start's once, for each recipe that needed the engine (the runner's traceback
        of it is in the log after)."""
        if e is self.error and self.start_failure is not None:
            return self.start_failure
        error = f"{type(e).__name__}: {e}"
        try:
            told = engine_failure(error, self.log, self.log_from)
        except Exception:  # the failure is recorded whatever its log holds
            told = error, failure_hint(error)
        if e is self.error:
            self.start_failure = told
        return told

    def claim_start(self) -> dict:
        """The engine start's fields of the repeat that first follows it (None in later ones)."""
        new, self.unclaimed_start, info = self.unclaimed_start, False, self.engine.info
        return dict(load_s=info.load_s, start=info.extra.get("start")) if new else {}

    def close(self) -> None:
        self.sampler.__exit__(None, None, None)
        if self.engine is not None:
            self.engine.close()
            self.engine = None


class _Collector:
    """The sink engines hand finished generations to: scores them, appends their lines to the
    partial file (made durable at most every second; the first repeat only), and keeps the clock of
    the last output. It knows the examples still to do and the recorded seconds of those reused from
    an interrupted run (`done`)."""

    def __init__(
        self, unit: Unit, done: dict[str, Sample], texts: list[str], writer: PartialWriter | None
    ):
        self.unit, self.texts, self.writer = unit, texts, writer
        self.todo = [i for i, ex in enumerate(unit.prepared.examples) if ex.id not in done]
        # samples reused from an interrupted run
        self.reused_s = sum(d.seconds or 0.0 for d in done.values())
        self.new: dict[str, Sample] = {}
        self.clock = time.perf_counter()
        # per-example wall times are real only when examples finish one by one
        self.one_at_a_time, self.busy_s = True, 0.0

    def __call__(self, finished: list[tuple[int, Generation]]) -> None:
        self.one_at_a_time &= len(finished) == 1
        t = time.perf_counter()
        wall, self.clock = (t - self.clock) / max(len(finished), 1), t
        lines = []
        for j, g in finished:
            i = self.todo[j]
            ex = self.unit.prepared.examples[i]
            s = self.new[ex.id] = make_sample(
                ex, self.texts[i], g, self.unit.loaded.recipe, seconds=wall
            )
            lines.append(json.dumps(s.to_line(), ensure_ascii=False) + "\n")
        if self.writer is not None:
            self.writer.append(lines)
        self.busy_s += time.perf_counter() - t


def _encode(unit: Unit, engine: Engine) -> tuple[list[str], list[list[int]], list[str]]:
    """The prompts as text and token ids, cut from the left where the recipe asks it (and a note
    saying so)."""
    r = unit.loaded.recipe
    texts, ids = engine.encode(unit.prepared.messages)
    if not r.prompt.truncate:
        return texts, ids, []
    kept, cut = truncate_left(ids, context_length(unit.loaded), r.sampling.max_tokens)
    which = [e.id for e, a, b in zip(unit.prepared.examples, ids, kept) if len(a) != len(b)]
    # a sample's prompt is the text rendered; where the model saw less, it says so first
    texts = [
        t
        if len(a) == len(b)
        else f"[cut: the model saw the last {len(b):,} of its {len(a):,} tokens]\n{t}"
        for t, a, b in zip(texts, ids, kept)
    ]
    some = ", ".join(which[:5]) + (", ..." if len(which) > 5 else "")
    note = (
        f"{cut} prompt(s) were cut from the left to fit the model's context (prompt.truncate: "
        f"true): example(s) {some}"
    )
    return texts, kept, [note] if cut else []


class UnitRun:
    """One recipe's repeats in this process: those an earlier call measured (repeats.jsonl), each
    generation run here, and the facts of the last one, from which the result is made once every
    repeat is measured."""

    def __init__(self, unit: Unit, job: Job):
        self.unit, self.opts, self.r = unit, job.options, unit.loaded.recipe
        self.folder = self.opts.folder(unit.name)
        self.folder.root.mkdir(parents=True, exist_ok=True)
        self.repeats: dict[int, Repeat] = {}  # by index
        # each bad stored line: named by run_rounds, and in the result's notes (the report's)
        self.set_aside: list[str] = []
        if self.folder.samples.is_file():
            reps, self.set_aside = load_repeats(self.folder, unit.run_key)
            self.repeats = {x.index: x for x in reps}
        else:
            # repeats without the first one's samples: measured again
            self.folder.repeats.unlink(missing_ok=True)
        self.started, call, sharing = now(), self.opts.call or "call", len(job.units) > 1
        # the turn-taking its repeats are part of (see `Repeat.turns`)
        self.turns = (
            f"{call}/turns"
            if job.restarts
            else f"{call}/{os.getpid()}/{job.units[0].name}"
            if sharing
            else None
        )
        # how its repeats were ordered (results.json's repeat_order)
        self.order = (
            None
            if self.r.repeat == 1
            else "interleaved with restarts"
            if job.restarts
            else "interleaved"
            if sharing
            else "back to back"
        )
        self.result, self.last, self.engine_of = None, None, None
        self.per_example = False
        self.stages: Counter = Counter()  # since the last repeat recorded (see `Stages`)

    @cached_property
    def samples(self) -> list[Sample]:
        """The first repeat's samples (its outputs are the run's; later repeats are compared with
        them): read from samples.jsonl at most once, or set by the first repeat."""
        return [Sample.from_line(d, self.r.metrics) for d in load_samples(self.folder)]

    @property
    def wanted(self) -> int:
        return self.r.repeat

    @property
    def complete(self) -> bool:
        return all(i in self.repeats for i in range(1, self.wanted + 1))

    def generate(self, index: int, shared: SharedEngine, progress_file: IO[str] | None) -> None:
        """Generation `index` of the recipe (0: a warm-up, not kept); on error the recipe's failed
        result."""
        t_start = time.perf_counter()
        try:
            self._generate(index, shared, progress_file)
        # a user error, an engine crash, OOM, ...: recorded as this recipe's failure
        except Exception as e:
            if isinstance(e, RunnerError):
                error, hint = e.render(with_hint=False), e.hint
            else:  # its cause read from the engine's log before this traceback joins it
                error, hint = shared.explain(e)
                traceback.print_exc()
            m = Measured(Timings(total_s=time.perf_counter() - t_start), started_at=self.started)
            self.result = run_result(self.unit, self.opts.command, m, Failure(error, hint))
            self.folder.write(self.result)

    def _generate(self, index: int, shared: SharedEngine, progress_file: IO[str] | None) -> None:
        t0, st = time.perf_counter(), self.stages
        started, r, opts, unit, first = (
            now("milliseconds"),
            self.r,
            self.opts,
            self.unit,
            index == 1,
        )
        done = load_partial(self.folder.partial, unit.run_key, r.metrics) if first else {}
        engine = shared.get(unit.name)
        t_start = time.perf_counter()  # after the engine start, which is counted on its own
        st.update(shared.stages, wall_s=shared.stages["process_s"])
        shared.stages.clear()
        if shared.started_by != unit.name:
            # a recipe on the engine another recipe's generation started
            self.engine_of = shared.started_by
        with Stage(st, "tokenize_s"):
            texts, ids, notes = _encode(unit, engine)
        if first and not done:
            start_partial(self.folder.partial, unit.run_key)
        from tqdm import tqdm

        turn = (
            " (warm-up)" if index == 0 else f" ({index}/{self.wanted})" if self.wanted > 1 else ""
        )
        bar = tqdm(
            total=len(ids),
            initial=len(done),  # reused samples: not in its rate or time left
            desc=r.name + turn,
            unit="ex",
            disable=not opts.progress,
            file=progress_file or sys.stderr,
            dynamic_ncols=True,
            mininterval=0.5,
        )
        # left in the reverse order: the timed trackers, the partial file, the untimed trackers
        with ExitStack() as stack:
            trackers = [stack.enter_context(t) for t in untimed()]
            writer = stack.enter_context(PartialWriter(self.folder.partial)) if first else None
            sink = _Collector(unit, done, texts, writer)
            requests = [Request(ids=ids[i], example=unit.prepared.examples[i]) for i in sink.todo]
            # engine-side setup for these settings
            if (prepare := getattr(engine, "prepare", None)) is not None:
                prepare(r.sampling)
            trackers += [
                stack.enter_context(t) for t in timed(engine.info.gpus, sink, shared.sampler)
            ]
            with Stage(st, "generate_s" if index else "warmup_s"):
                update = bar.update if opts.progress else None
                engine.generate(requests, r.sampling, update, sink)
        bar.close()
        st["sink_s"] += sink.busy_s
        if index == 0:
            st["wall_s"] += time.perf_counter() - t0
            return
        measured, timings = parts(trackers)
        with Stage(st, "write_s"):
            changed = self._keep(first, done, sink)  # before the repeat's wall time ends
        cached = [s.cached_tokens for s in sink.new.values() if s.cached_tokens is not None]
        st["wall_s"] += time.perf_counter() - t0
        rep = Repeat(
            index=index,
            wall_s=time.perf_counter() - t_start,
            started_at=started,
            call=opts.call,
            turns=self.turns,
            changed=changed,
            cached_tokens=sum(cached) if cached else None,
            reused_samples=len(done),
            reused_s=sink.reused_s,
            stages=Stages.of(st),
            **shared.claim_start(),
            **measured,
        )
        self.stages = Counter()
        add_repeat(self.folder.repeats, unit.run_key, rep)
        self.repeats[index], self.last = rep, (engine, ids, notes, timings)
        if self.complete:
            self.finish(shared)

    def _keep(self, first: bool, done: dict[str, Sample], sink: _Collector) -> int | None:
        """The first repeat's samples written (the reused and the new); a later repeat's outputs
        that differ."""
        if not first:
            before = {s.id: s.output for s in self.samples}
            return sum(before.get(i) != s.output for i, s in sink.new.items())
        self.samples = merge_samples(self.unit.prepared.examples, done, sink.new)
        write_jsonl_atomic(self.folder.samples, [s.to_line() for s in self.samples])
        self.folder.partial.unlink(missing_ok=True)
        self.per_example = sink.one_at_a_time
        return None

    def finish(self, shared: SharedEngine) -> None:
        """The recipe's result once every repeat is measured (written to results.json)."""
        engine, ids, notes, busy = self.last
        reps = [self.repeats[i] for i in range(1, self.wanted + 1)]
        first = reps[0]
        loads = [x.load_s for x in reps if x.load_s is not None]
        if loads:  # it started the engine of some repeat (taking turns: not of every one)
            self.engine_of = None
        load_s = percentile(loads, 50) if loads else 0.0 if self.engine_of else engine.info.load_s
        timings = Timings(
            load_s=load_s,
            generate_s=geomean_interval([x.generate_s for x in reps])[0],
            total_s=sum(loads) + sum(x.wall_s or x.generate_s for x in reps),
            start=next((x.start for x in reps if x.start is not None), None),
            **busy,
        )
        stages = Counter(prepare_s=self.unit.prepare_s, wall_s=self.unit.prepare_s)
        for x in reps:
            stages.update(x.stages.model_dump() if x.stages else {})
        m = Measured(
            timings,
            shared.sampler.peak,
            shared.sampler.start_gib,
            self.per_example and len(reps) == 1,  # with repeats an estimate scales the geomean
            first.started_at,
            first.reused_s,
            first.reused_samples,
            peak_rss(),
        )
        profile = profile_run(engine, self.unit, ids, self.folder) if self.r.profile else None
        self.result = run_result(
            self.unit,
            self.opts.command,
            m,
            Output(self.samples, engine.info, [*self.set_aside, *notes], ids),
            profile=profile,
            engine_of=self.engine_of,
            stages=Stages(**stages) if all(x.stages for x in reps) else None,
            repeats=reps,
            repeat_order=self.order,
        )
        self.folder.write(self.result)


def _say_set_aside(runs: list[UnitRun], progress_file: IO[str] | None) -> None:
    """Stored lines set aside, before the engine's output: on stderr (the engine's log, where the
    job runs in a process of its own) and on the call's terminal too (`progress_file`)."""
    for line in (x for u in runs for x in u.set_aside):
        for f in (sys.stderr, progress_file) if progress_file is not None else (sys.stderr,):
            print(f"WARNING: {line}", file=f, flush=True)


def run_rounds(
    job: Job,
    shared: SharedEngine,
    progress_file: IO[str] | None = None,
    before: Callable[[Unit], None] = lambda unit: None,
) -> list[RunResult]:
    """The job's generations on its one engine: each recipe's warm-ups, then the repeats in turns
    (repeat 1 of every recipe, then repeat 2 in the reverse order, ...), skipping those measured
    before; `before(unit)` runs before each generation. Returns the results written: recipes that
    failed or have every repeat."""
    runs = [UnitRun(u, job) for u in job.units]
    _say_set_aside(runs, progress_file)
    shared.profile = any(u.r.profile for u in runs)
    rounds = job.rounds or tuple(range(1, max(u.wanted for u in runs) + 1))
    todo = lambda u: [i for i in rounds if i <= u.wanted and i not in u.repeats]
    step = lambda u, i: (before(u.unit), u.generate(i, shared, progress_file))
    for u in runs:
        for _ in range(u.r.warmup if todo(u) else 0):
            if u.result is None:
                step(u, 0)
    for i in rounds:
        # A B, B A, A B: a drift over the job hits each recipe alike
        for u in runs if i % 2 else runs[::-1]:
            if u.result is None and i in todo(u):
                step(u, i)
    # measured before but never reported (the call ended first): the last repeat measured again
    for u in runs:
        if u.result is None and u.last is None and u.complete and max(rounds) >= u.wanted:
            for i in [0] * u.r.warmup + [u.wanted]:
                step(u, i)
    return [u.result for u in runs if u.result is not None]


def run_job(job: Job) -> list[RunResult]:
    """Run a job's recipes on one engine, in this process."""
    shared = SharedEngine(job.units[0])
    try:
        return run_rounds(job, shared)
    finally:
        shared.close()
