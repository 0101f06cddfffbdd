"""One call's orchestration, the same for `runner go`, `runner tune` and `runner.run_recipe`: every
recipe checked before anything is written, each run folder locked (one writer), an unchanged
complete run skipped, what another run left set aside in `replaced/` (never overwritten), the jobs
run (each in its own process, in this one, or through a wing's route), each report and the summary
written.

No click, no exit codes: what a call has to say goes out through `say(text, to_stderr)` (the CLI
echoes it, the API logs it); Ctrl-C writes the partial summary and raises `Interrupted`. Below the
wings: what they add to a call (plans, report and summary sections, the study summaries, the serving
and Ray routes) comes in as `Wings`, which the callers build from runner/wings.py; nothing here
imports a wing."""

from __future__ import annotations

import datetime as dt
import importlib.util
import os
import resource
import threading
import uuid
from collections.abc import Callable, Sequence
from contextlib import ExitStack, suppress
from dataclasses import dataclass, field
from pathlib import Path
from statistics import fmean
from time import monotonic
from typing import Any

from runner.base.errors import RunnerError
from runner.base.format import brief, secs
from runner.engines.builtin import is_builtin
from runner.folder import (
    RunFolder,
    previous_result,
    set_aside_foreign_summary,
    stored,
    stored_ok,
)
from runner.recipe import LoadedRecipe
from runner.report.markdown import Section, priced, write_report
from runner.report.spread import time_cell
from runner.report.summary import Sections, write_summary
from runner.results import SCHEMA_VERSION, RunResult
from runner.run.isolate import Ends, Worker, failed_result, run_isolated
from runner.run.job import Job, RunOptions, Unit, check_library, group_by_engine, make_unit
from runner.run.loop import run_job
from runner.run.resume import stored_repeats

# (text, to_stderr): one message of the call, rendered by the caller
Say = Callable[[str, bool], None]


def quiet(text: str, to_stderr: bool) -> None:
    """A `Say` that drops every message."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM, where the CLI's guard turns it into Ctrl-C) during a call, raised after
    the summary of the recipes that finished was written; finished samples of the interrupted recipe
    are kept for the next call. A KeyboardInterrupt still, so an `except Exception` does not swallow
    it."""

    def __init__(self, finished: int, total: int):
        self.finished, self.total = finished, total
        super().__init__(f"interrupted: {finished} of {total} recipes finished")


class NoPlans:
    """No plan wing: units run without a prediction beside them. A call's plans answer these two
    (runner/wings.py's `Plans` makes them in the background)."""

    def __init__(self, units: Sequence[Unit]):
        pass

    def attach(self, units: Sequence[Unit]) -> tuple[Unit, ...]:
        return tuple(units)

    def close(self) -> None:
        pass


@dataclass(frozen=True)
class Wings:
    """What the wings add to a call, handed in by the caller (both the CLI's and the API's are
    `runner.wings.call_wings()`). The defaults add nothing, and a call that needs a missing route is
    refused before anything runs."""

    plans: Callable[[Sequence[Unit]], NoPlans] = NoPlans  # or one with the same methods
    report_sections: Callable[[Path | None], Sequence[Section]] = lambda out: ()
    summary_sections: Callable[[], Sequence[Sections]] = tuple
    study_summaries: Callable[[list[RunResult], Path, str | None], list[Path]] = (
        lambda results, out, baseline: []
    )
    # a `load:` recipe against its server
    run_serving: Callable[[Unit, RunOptions], RunResult] | None = None
    run_on_ray: Callable[..., Any] | None = None  # (jobs, *, address, on_result): `--executor ray`


NO_WINGS = Wings()


@dataclass(frozen=True)
class Executor:
    kind: str = "local"
    address: str | None = None  # ray: an existing cluster (None: a local Ray instance for the call)
    in_process: bool = False  # local: run the jobs in this process (tests)

    @property
    def on_ray(self) -> bool:
        return self.kind == "ray"

    def check_options(self, replicas: int | None) -> None:
        """Options that do not go together, and a missing ray: bad input before any recipe is
        read."""
        if not self.on_ray and replicas is not None:
            why = "only the Ray executor runs data-parallel replicas; add --executor ray"
            raise RunnerError(why, field="--replicas")
        if not self.on_ray and self.address is not None:
            why = "names a Ray cluster, which only the Ray executor uses; add --executor ray"
            raise RunnerError(why, field="--address")
        if self.on_ray and self.in_process:
            why = "runs the recipes in this process; the Ray executor runs them in Ray tasks"
            raise RunnerError(why, field="--in-process")
        if self.on_ray and importlib.util.find_spec("ray") is None:
            why = "ray is not installed in this Python, so `--executor ray` cannot run here"
            raise RunnerError(why, field="--executor", hint="pip install -e '.[ray]'")

    def check_recipes(self, loaded: list[LoadedRecipe]) -> None:
        for lr in loaded:
            if (n := lr.recipe.repeat) > 1 and (self.on_ray or lr.recipe.load is not None):
                where = (
                    "on Ray" if self.on_ray else "in a serving run (`load` measures each rate once)"
                )
                why = f"{n} repeats are for offline runs on the local executor, not {where}"
                raise RunnerError(
                    why, file=lr.path, field="repeat", hint="set repeat: 1 (--set repeat=1)"
                )
            if (n := lr.recipe.replicas) > 1 and not self.on_ray:
                why = (
                    f"{n} data-parallel replicas run only on Ray; the local executor runs one "
                    "engine per recipe"
                )
                raise RunnerError(
                    why,
                    file=lr.path,
                    field="replicas",
                    hint="add --executor ray, or set replicas: 1",
                )

    def check_routes(self, loaded: list[LoadedRecipe], wings: Wings) -> None:
        """The wings' routes this call needs are there (a caller that left them out runs offline
        recipes only)."""
        if self.on_ray and wings.run_on_ray is None:
            raise RunnerError(
                "this call has no Ray route (the cluster wing); run it with `runner go`"
            )
        for lr in loaded:
            if lr.recipe.load is not None and wings.run_serving is None:
                why = "is a serving recipe, and this call has no serving route (the serve wing)"
                raise RunnerError(why, file=lr.path, field="load", hint="run it with `runner go`")

    def announce(
        self, group: tuple[Unit, ...], job: str, out: Path, say: Say, turn: tuple[int, int] | None
    ) -> None:
        """`[job 2 of 7] name (engine, model)`; `turn`: (3, 7) with repeats taken in turns."""
        r = group[0].loaded.recipe
        names = ", ".join(u.name for u in group)
        shared = f" ({len(group)} recipes on one engine)" if len(group) > 1 else ""
        reps = f", {r.replicas} replicas" if r.replicas > 1 else ""
        reps += f"; turn {turn[0]} of {turn[1]}" if turn else ""
        say(f"[job {job}] {names} ({r.engine.kind}, {r.model.id}{reps}){shared}", True)
        log = RunFolder.of(out, group[0].name).engine_log
        if self.on_ray:
            say(f"  engine output: {log} (from the Ray worker, when the job ends)", True)
        # engine start can take a minute with nothing on screen: say where to look (once)
        elif not self.in_process and (turn is None or turn[0] == 1):
            say(f"  engine output: {log}", True)


def new_call() -> str:
    """An id for one call (its repeats are marked with it)."""
    return f"{dt.datetime.now(dt.timezone.utc):%Y%m%dT%H%M%SZ}-{os.getpid()}-{uuid.uuid4().hex[:4]}"


def run_loaded(
    loaded: list[LoadedRecipe],
    opts: RunOptions,
    ex: Executor,
    *,
    wings: Wings = NO_WINGS,
    say: Say = quiet,
) -> list[RunResult]:
    """Run loaded recipes as `runner go` does (checked first, each folder locked, unchanged ones
    skipped, what another run left set aside, reports and the summary written); one result per
    recipe, in the order given. Bad input or a folder another call is writing: RunnerError before
    anything runs. Ctrl-C: `Interrupted`, after the summary of what finished is written."""
    ex.check_routes(loaded, wings)
    # before anything is written
    units = [make_unit(lr, opts, host=not ex.on_ray, library=False) for lr in loaded]
    cannot = {}
    for lr in () if ex.on_ray else loaded:
        try:
            check_library(lr)
        # an engine library this machine lacks: that recipe fails, the others run
        except RunnerError as e:
            cannot[lr.recipe.name] = e
    out_dir = _out_dir(str(opts.out))
    with ExitStack() as locks:  # every unit's run folder locked while the units run
        _room_for_locks(len(units))
        for folder in (RunFolder.of(out_dir, u.name) for u in units):
            folder.check_files()  # before the lock: a linked lock file is refused, not opened
            locks.enter_context(_lock(folder))
        return _Call(opts, ex, wings, say).run(units, cannot)


def takes_turns(groups: list[tuple[Unit, ...]]) -> bool:
    """Repeats of recipes on different engines take turns (each turn on a fresh engine): when any
    recipe asks for it (`interleave: restarts`), or by default when every engine starts in seconds
    (the fake engine, builtin models); never when one says `off`. Recipes on one engine always take
    turns, within their job."""
    recipes = [u.loaded.recipe for g in groups for u in g]
    modes = {r.interleave for r in recipes}
    if all(r.repeat == 1 for r in recipes) or any(r.load for r in recipes) or "off" in modes:
        return False
    quick = all(r.engine.fake or is_builtin(r.model.id) for r in recipes)
    return "restarts" in modes or (quick and len(groups) > 1)


def _out_dir(out: str) -> Path:
    path = Path(out)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise RunnerError(
            f"cannot create the report folder: {e.strerror}", file=out, field="--out"
        ) from None
    if not os.access(path, os.W_OK | os.X_OK):
        hint = "choose another --out, or make this one writable"
        raise RunnerError("the report folder is not writable", file=out, field="--out", hint=hint)
    return path


def _room_for_locks(n: int) -> None:
    """One lock file is held open per recipe for the whole call: raise the open-files limit (within
    the hard limit) when a large study needs it (an ordinary 256 or 1,024 is below a big matrix), or
    say why it cannot run."""
    need = n + 256  # the locks, and room for what the run itself opens
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return
    if hard != resource.RLIM_INFINITY and hard < need:
        why = (
            f"{n} recipes hold {n} lock files open, and this shell allows {hard} open files "
            "(ulimit -Hn)"
        )
        raise RunnerError(
            why, hint="run fewer recipes per call (--only), or raise the hard limit (ulimit -Hn)"
        )
    resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))


def _lock(folder: RunFolder):
    """One writer per run folder: a second `runner go` writing the same recipe stops before it
    runs."""
    from filelock import FileLock, Timeout

    folder.root.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(folder.lock), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        busy = "another `runner go` is writing this recipe's folder right now"
        raise RunnerError(
            f"{busy}; wait for it to finish, or use another --out", file=str(folder.root)
        ) from None
    return lock


@dataclass
class _Call:
    """One call of `run_loaded`: what it was given, and the results so far."""

    opts: RunOptions
    ex: Executor
    wings: Wings
    say: Say
    results: list[RunResult] = field(default_factory=list)
    warm: threading.Thread | None = None  # imports for the reports, made while a job runs
    ends: Ends = field(default_factory=Ends)  # jobs' process groups still ending
    worker: Worker | None = None  # the next job's process, started ahead of it
    aside: dict[str, Path] = field(default_factory=dict)  # recipe -> its earlier results, set aside
    begun: set[str] = field(default_factory=set)  # recipes whose first job began
    ran_s: float = 0.0  # the last job's own time (from its start to its results)

    def report(self, res: RunResult) -> Path:
        return write_report(res, self.opts.out, self.wings.report_sections(self.opts.out))

    def done(self, res: RunResult) -> None:
        self.results.append(res)
        self.say(one_line(res, self.report(res)), False)

    def run(self, units: list[Unit], cannot: dict[str, RunnerError]) -> list[RunResult]:
        try:  # the last job's process group ends while the summary is written
            self._run(units, cannot)
            self._summarize(units, to_stderr=False)
            return self.results
        finally:
            self.ends.join()

    def _run(self, units: list[Unit], cannot: dict[str, RunnerError]) -> None:
        try:  # SIGTERM arrives as Ctrl-C where the CLI's guard (runner.cli.app.guard) makes it so
            todo = [u for u in units if not self._skipped(u) and self._runs(u, cannot.get(u.name))]
            self._whole_estimates(todo)
            # made in the background, the next job's while the current one runs
            plans = self.wings.plans(todo)
            try:
                self._run_units(todo, plans)
            finally:
                plans.close()
                if self.worker is not None:  # interrupted before its job
                    self.worker.close()
        except KeyboardInterrupt:
            have = {r.name for r in self.results}
            back = set()
            for u in units:  # set aside for a run that never began: back in place
                if (kept := self.aside.get(u.name)) and u.name not in self.begun | have:
                    self.opts.folder(u.name).put_back(kept)
                    self.say(f"put {u.name}'s earlier results back (its run never began)", True)
                    back.add(u.name)
            # recipes of the interrupted job that finished before it (complete ones were skipped);
            # not those put back: the call was to replace them
            for u in units:
                prev = u.name not in have | back and previous_result(
                    self.opts.folder(u.name), u.run_key
                )
                if prev:
                    self.done(prev)
            if self.results:
                left = [u.name for u in units if u.name not in {r.name for r in self.results}]
                self._summarize(units, to_stderr=True, unfinished=left)
            raise Interrupted(len(self.results), len(units)) from None

    def _whole_estimates(self, todo: list[Unit]) -> None:
        """An estimate that runs every example projects nothing: said for each recipe to run."""
        for u in todo:
            est, n = self.opts.estimate or u.loaded.recipe.estimate, u.prepared.n_target
            if est and est >= n:
                asked = f"--estimate {est:,}" if self.opts.estimate else f"its estimate: {est:,}"
                limit = f" (--limit {self.opts.limit:,})" if self.opts.limit == n else ""
                what = f"is not fewer than its {n:,} examples{limit}: all run, none projected"
                self.say(f"{u.name}: {asked} {what}", True)

    def _skipped(self, u: Unit) -> bool:
        """An unchanged recipe whose results are complete (set aside by an earlier call: taken back)
        is skipped."""
        folder = self.opts.folder(u.name)
        if self.opts.force:
            return False
        if (back := folder.take_back(u.run_key)) is not None:
            src, aside = back
            by = "(set aside by an earlier call)"
            self.say(f"took {u.name}'s results of this very run back from {src} {by}", False)
            if aside:
                where = " and ".join(map(str, aside))
                self.say(f"kept what {u.name}'s folder held of another run in {where}", False)
        if (prev := previous_result(folder, u.run_key, u.loaded.recipe.repeat)) is None:
            return False
        # what decides on the run and did not make it (its gate, baseline, description): as the
        # recipe says now, kept in its results.json so that `runner report` decides alike
        now = {k: getattr(u.loaded.recipe, k) for k in ("gate", "baseline", "description")}
        if changed := [k for k, v in now.items() if getattr(prev.recipe, k) != v]:
            recipe = prev.recipe.model_copy(update={k: now[k] for k in changed})
            new = {
                "recipe": recipe,
                "recipe_hash": recipe.digest(),
                "schema_version": SCHEMA_VERSION,
            }
            folder.write(prev := prev.model_copy(update=new))
        if (cost := u.loaded.recipe.cost) is not None:  # this call's price, if it names one
            prev = priced(prev, cost.usd_per_gpu_hour)
        self.results.append(prev)
        self.report(prev)  # a report.md deleted since is back
        why = "(results complete; --force reruns)"
        took = f"; its {' and '.join(changed)} as the recipe now says" if changed else ""
        if (n := len(prev.times)) > (asked := u.loaded.recipe.repeat):
            took += f"; it holds {n} repeats ({asked} asked): all are reported"
        self.say(f"skip {u.name}: unchanged since {prev.finished_at} {why}{took}", False)
        return True

    def _runs(self, u: Unit, cannot: RunnerError | None) -> bool:
        """What another run left is set aside; a recipe that cannot run here is recorded failed
        without running."""
        folder, say = self.opts.folder(u.name), self.say
        if (kept := folder.set_aside_foreign()) is not None:
            what = f"the report.md in {u.name}'s folder (no results.json beside it)"
            say(f"kept {what} in {kept}; this run writes its own", False)
        if (kept := folder.set_aside_unreadable()) is not None:
            say(
                f"kept {u.name}'s unreadable results.json in {kept}; this run writes another", False
            )
        stored = not self.opts.force and stored_ok(folder, u.run_key)
        if stored and (short := folder.samples_short(stored.n_samples)):
            # results, samples and repeats: run again whole
            kept = folder.set_aside(u.run_key, force=True)
            say(f"rerun {u.name}: its results were complete but {short} (kept in {kept})", False)
        if (kept := folder.set_aside(u.run_key, self.opts.force)) is not None:
            why = (
                "--force" if self.opts.force else "the recipe, its inputs or --limit changed since"
            )
            say(f"kept {u.name}'s earlier results in {kept} ({why}); this run replaces them", False)
            self.aside[u.name] = kept
        if cannot is None:
            return True
        res = failed_result(u, cannot.render(with_hint=False), cannot.hint, self.opts.command)
        folder.write(res)
        self.done(res)
        return False

    def _run_units(self, todo: list[Unit], plans: NoPlans) -> None:
        """Run the units, those that share an engine as one job; each job takes its units' plans
        just before it starts. With repeats taken in turns across engines (`interleave`), each
        turn is a job of its own: repeat 1 of every job, then repeat 2 in the reverse order (A B,
        B A, ...), each on a freshly started engine. Each job is announced with its place in the
        call; after each (but the last), how long the rest should take."""
        groups, ex, opts = group_by_engine(todo, self.opts.timeout_s), self.ex, self.opts
        if not groups:
            return
        if ex.on_ray:
            # check_routes: there is a Ray route
            for n, group in enumerate(groups, 1):
                ex.announce(group, f"{n} of {len(groups)}", opts.out, self.say, None)
            jobs = [Job(plans.attach(g), opts) for g in groups]
            self.begun |= {u.name for g in groups for u in g}
            got = lambda res: self._from_ray(res, groups)  # noqa: E731
            self.wings.run_on_ray(jobs, address=ex.address, on_result=got)
            return
        turns = max(u.loaded.recipe.repeat for u in todo) if takes_turns(groups) else 1
        if turns > 1:
            across = (
                f"take turns across the {len(groups)} engines"
                if len(groups) > 1
                else "run one at a time"
            )
            self.say(f"repeats {across}, each on a freshly started engine", True)
        # A B, then B A, A B, ...: a drift over the call hits every recipe alike
        most, order = [max(u.loaded.recipe.repeat for u in g) for g in groups], range(len(groups))
        # a turn whose repeats an earlier call measured starts no process and no engine
        need = {u.name: self._turns_left(u) for u in todo} if turns > 1 else None
        seq = [
            (turn, i)
            for turn in range(1, turns + 1)
            for i in (order if turn % 2 else order[::-1])
            if turn <= most[i]
            and (need is None or any(turn in need[u.name] for u in _live(groups[i], turn, set())))
        ]
        self._ahead((groups[seq[0][1]], seq[0][0]), set())  # the first job's process starts now
        walls: dict[int, list[float]] = {}  # each group's jobs' wall times (announce to end)
        spent: dict[str, float] = {}  # each recipe's share of its turns' wall times so far
        each: list[float] = []  # each job's wall time per recipe in it
        begun, planned = monotonic(), set[int]()
        while seq:
            (turn, i), *seq = seq
            start, done = monotonic(), sum(map(len, walls.values()))
            ended = {r.name for r in self.results}
            of = (turn, most[i]) if turns > 1 else None
            ex.announce(
                _live(groups[i], turn, ended),
                f"{done + 1} of {done + 1 + len(seq)}",
                opts.out,
                self.say,
                of,
            )
            if i not in planned:  # the group's first job
                planned.add(i)
                groups[i] = plans.attach(groups[i])
            live = _live(groups[i], turn, ended)
            rounds = (turn,) if turns > 1 else None
            then = (groups[seq[0][1]], seq[0][0]) if seq else None
            used = tuple((u.name, spent[u.name]) for u in live if u.name in spent)
            self._run_job(Job(live, opts, rounds, turns > 1, spent=used), then)
            walls.setdefault(i, []).append(monotonic() - start)
            each.append(walls[i][-1] / len(live))
            if turns > 1:  # a recipe's timeout covers all its turns: what this one ran
                _charge(spent, live, opts.timeout_s, self.ran_s)
            # a job whose recipes all ended in an earlier turn (a failure) is none
            ended = {r.name for r in self.results}
            if seq := [(t, j) for t, j in seq if _live(groups[j], t, ended)]:
                left = [(j, len(_live(groups[j], t, ended))) for t, j in seq]
                self.say(_rest(walls, each, left, monotonic() - begun), True)

    def _turns_left(self, u: Unit) -> set[int]:
        """The turns the recipe's repeats still need: those an earlier call did not measure, or
        (all measured, its result never written) the last, which is measured again to make it."""
        wanted = u.loaded.recipe.repeat
        have = stored_repeats(self.opts.folder(u.name), u.run_key)
        return {t for t in range(1, wanted + 1) if t not in have} or {wanted}

    def _from_ray(self, res: RunResult, groups: list[tuple[Unit, ...]]) -> None:
        """A result from Ray; as a job's last one comes in, how many jobs are done."""
        self.done(res)
        have = {r.name for r in self.results}
        full = [g for g in groups if all(u.name in have for u in g)]
        if len(groups) > 1 and any(u.name == res.name for g in full for u in g):
            self.say(f"  call: {len(full)} of {len(groups)} jobs done", True)

    def _ahead(self, then: tuple[tuple[Unit, ...], int], gone: set[str]) -> None:
        """The process of the job `then` (its group and turn) started ahead of it, for its recipes
        still to run, where it runs in a process of its own; one that cannot start now is started
        by the job (which records why, if it still cannot)."""
        live = _live(*then, gone | {r.name for r in self.results})
        if live and not (self.ex.in_process or self.ex.on_ray or live[0].loaded.recipe.load):
            with suppress(OSError):
                self.worker = Worker(live, self.opts)

    def _run_job(self, job: Job, then: tuple[tuple[Unit, ...], int] | None = None) -> None:
        """Run the job; `then`: the next job's group and turn, whose process starts ahead of it:
        while this job runs where they share no recipe (its output goes to their engine.log), else
        as soon as this job's results are in (while its engine shuts down and its reports are
        written)."""
        self.ends.join()  # the job before is over, its GPU memory back
        self.begun |= {u.name for u in job.units}
        t0 = monotonic()
        worker, self.worker = self.worker, None
        try:
            if worker is not None and worker.names != [u.name for u in job.units]:
                worker.close()  # one of its recipes ended since it was started
                worker = None
            if then is not None and not {u.name for u in job.units} & {u.name for u in then[0]}:
                self._ahead(then, set())
            # a serving run: the recipe against its engine's server
            if job.units[0].loaded.recipe.load is not None:
                # check_routes: there is a serving route
                results = [self.wings.run_serving(job.units[0], job.options)]
            elif self.ex.in_process:
                results = run_job(job)
            else:
                self._warm_reports()
                say = lambda line: self.say(line, True)
                results = run_isolated(job, warn=say, worker=worker, ends=self.ends)
        except BaseException:  # Ctrl-C before its process had the job: none left behind
            if worker is not None:
                worker.close()
            raise
        self.ran_s = monotonic() - t0  # the job's own time, as its timeout counts it
        if then is not None and self.worker is None:
            self._ahead(then, {r.name for r in results})
        for res in results:
            self.done(res)

    def _warm_reports(self) -> None:
        """While a job runs in its own process this one idles: import what the reports after it
        would wait for (matplotlib's pyplot for the summary's charts: about a second), once a call.
        Not for a job run in this process, where it would take the CPU from the engine."""
        from runner.report.plots import pyplot

        if self.warm is None:
            self.warm = threading.Thread(target=pyplot, name="runner-warm-reports")
            self.warm.start()

    def _summarize(self, units: list[Unit], to_stderr: bool, unfinished: list[str] = ()) -> None:
        """The results in the call's order, summary.md and each study's own summary written (an
        interrupted call's names the recipes it did not finish); the last job's end (its warnings)
        awaited before they are named."""
        out, order = self.opts.out, {u.name: i for i, u in enumerate(units)}
        self.results.sort(key=lambda r: order.get(r.name, len(order)))
        sections = self.wings.summary_sections()
        if unfinished:
            line = (
                f"> **Interrupted**: {len(unfinished)} recipe(s) of this call did not finish and "
                f"are not in this summary ({', '.join(unfinished)}); the same command again runs "
                "them, keeping what they finished."
            )
            sections = [lambda rs, out, line=line: ["", line], *sections]
        if kept := set_aside_foreign_summary(out):
            self.say(kept, to_stderr)
        summary = write_summary(self.results, out, self.opts.baseline, sections)
        studies = self.wings.study_summaries(self.results, out, self.opts.baseline)
        self.ends.join()
        self.say(f"summary: {summary}", to_stderr)
        names = {r.name for r in self.results}
        if others := [p for p in stored(out) if p.parent.name not in names]:
            self.say(
                f"  (this call's recipes only: {len(others)} other run(s) stored in {out} are not "
                f"in it; `runner report {out}` summarizes every stored run)",
                to_stderr,
            )
        for path in studies:
            self.say(f"study summary (every stored cell): {path}", to_stderr)


def _charge(spent: dict[str, float], units: tuple[Unit, ...], call_s: int | None, wall: float):
    """A turn's wall time charged to its recipes' timeouts, each its timeout's share of it."""
    each = {u.name: u.timeout(call_s) for u in units}
    if all(each.values()):
        total = sum(each.values())  # type: ignore[arg-type]
        for name, t in each.items():
            spent[name] = spent.get(name, 0.0) + wall * t / total  # type: ignore[operator]


def _live(group: tuple[Unit, ...], turn: int, ended: set[str]) -> tuple[Unit, ...]:
    """The group's recipes that run in this turn: a repeat left, and not ended (failed) before."""
    return tuple(u for u in group if u.name not in ended and turn <= u.loaded.recipe.repeat)


def _rest(
    walls: dict[int, list[float]], each: list[float], left: list[tuple[int, int]], spent: float
) -> str:
    """How long the jobs `left` (group, recipes in it) should take: each group's mean wall time in
    this call, or, where the group has none yet, the mean time a recipe took in the jobs so far
    (`each`) for each of its recipes."""
    every = [w for ws in walls.values() for w in ws]
    rest = sum(fmean(walls[j]) if j in walls else fmean(each) * n for j, n in left)
    how = "their earlier turns" if all(j in walls for j, _ in left) else "the jobs so far"
    done = f"{len(every)} of {len(every) + len(left)} jobs done in {secs(spent)}"
    return f"  call: {done}; about {secs(rest)} left (from {how})"


def one_line(res: RunResult, path: Path) -> str:
    if res.status != "ok":
        hint = f"\n  hint: {res.hint}" if res.hint else ""
        return f"FAILED {res.name}: {res.error}{hint}\n  report: {path}"
    t = res.timings
    bits = [
        f"ok {res.name}: {res.n_samples} examples",
        # with repeats, the time the reports show, with its interval
        "generation "
        + ((len(res.repeats) > 1 and not res.estimate and time_cell(res)) or secs(t.generate_s)),
        f"start {secs(t.load_s)}",
        f"{res.throughput.requests_per_s or 0:.2f} req/s",
    ]
    if res.estimate:
        bits.append(f"projected full run ~{secs(res.estimate.projected_s)} (estimate)")
    if res.scores:
        sc = ", ".join(f"{k} {v:.3f}" for k, v in res.scores.items())
        bits.append(
            sc
            + ("" if res.scores_meaningful else " (not meaningful: random weights or fake engine)")
        )
    line = "; ".join(bits)
    for k in res.knobs:
        if k.status == "ignored":
            took = f"requested {brief(k.requested)}, effective {brief(k.effective)}"
            line += f"\n  WARNING: knob {k.name} did not take effect ({took}): {k.evidence}"
    return line + f"\n  report: {path}"
