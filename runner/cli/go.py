"""`runner go`: check every recipe, then run each (or each group that shares an engine) in its own process, a
serving run against its engine's server, or each as a Ray task (`--executor ray`), and write the reports."""

from __future__ import annotations

import datetime as dt
import importlib.util
import os
import shlex
import sys
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import click

from runner.base.errors import RunnerError
from runner.base.files import write_json_atomic
from runner.base.format import brief, secs
from runner.cli import EXIT_FAILED, EXIT_INTERRUPTED, cli, guard
from runner.cli.loading import MP_HELP, SET_HELP, load_all
from runner.cli.wings import Plans, report_sections, study_summaries, summary_sections
from runner.engines.builtin import is_builtin
from runner.folder import RunFolder, previous_result, stored_ok
from runner.recipe import MAX_REPEAT, MAX_TIMEOUT_S, LoadedRecipe
from runner.report.markdown import priced, write_report
from runner.report.summary import write_summary
from runner.results import RunResult
from runner.run.isolate import failed_result, run_isolated
from runner.run.job import Job, RunOptions, Unit, check_library, group_by_engine, make_unit
from runner.run.loop import run_job


@dataclass(frozen=True)
class Executor:
    kind: str = "local"
    address: str | None = None  # ray: an existing cluster (None: a local Ray instance for the call)
    in_process: bool = False  # local: run the jobs in this process (tests)

    @property
    def on_ray(self) -> bool:
        return self.kind == "ray"

    def check_options(self, replicas: int | None) -> None:
        """Options that do not go together, and a missing ray: bad input before any recipe is read."""
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
                where = "on Ray" if self.on_ray else "in a serving run (`load` measures each rate once)"
                why = f"{n} repeats are for offline runs on the local executor, not {where}"
                raise RunnerError(why, file=lr.path, field="repeat", hint="set repeat: 1 (--set repeat=1)")
            if (n := lr.recipe.replicas) > 1 and not self.on_ray:
                why = f"{n} data-parallel replicas run only on Ray; the local executor runs one engine per recipe"
                raise RunnerError(why, file=lr.path, field="replicas", hint="add --executor ray, or set replicas: 1")

    def run(self, todo: list[Unit], opts: RunOptions, done: Callable[[RunResult], None], plans: Plans) -> None:
        """Run the units, those that share an engine as one job; `done` gets each result as it is written. Each job
        takes its units' plans just before it starts. With repeats taken in turns across engines (`interleave`),
        each turn is a job of its own: repeat 1 of every job, then repeat 2 in the reverse order (A B, B A, ...),
        each on a freshly started engine."""
        groups = group_by_engine(todo, opts.timeout_s)
        if self.on_ray:
            from runner.cluster.ray import run_jobs_on_ray

            groups = [plans.attach(g) for g in groups]
            for n, group in enumerate(groups, 1):
                self._announce(group, n, opts)
            run_jobs_on_ray([Job(units=g, options=opts) for g in groups], address=self.address, on_result=done)
            return
        turns = max((u.loaded.recipe.repeat for u in todo), default=1) if takes_turns(groups) else 1
        if turns > 1:
            across = f"take turns across the {len(groups)} engines" if len(groups) > 1 else "run one at a time"
            click.echo(f"repeats {across}, each on a freshly started engine", err=True)
        finished: set[str] = set()
        for turn in range(1, turns + 1):  # A B, then B A, A B, ...: a drift over the call hits every recipe alike
            seq = list(enumerate(groups, 1))
            for n, group in seq if turn % 2 else seq[::-1]:
                if turn == 1:
                    self._announce(group, n, opts)
                    group = groups[n - 1] = plans.attach(group)
                live = tuple(u for u in group if u.name not in finished and turn <= u.loaded.recipe.repeat)
                if not live:
                    continue
                job = Job(units=live, options=opts, rounds=(turn,), restarts=True) if turns > 1 else Job(live, opts)
                for res in self._run_job(job):
                    finished.add(res.name)
                    done(res)

    def _run_job(self, job: Job) -> list[RunResult]:
        if job.units[0].loaded.recipe.load is not None:  # a serving run: the recipe against its engine's server
            from runner.serve.run import run_serving

            return [run_serving(job.units[0], job.options)]
        if self.in_process:
            return run_job(job)
        return run_isolated(job, warn=lambda line: click.echo(line, err=True))

    def _announce(self, group: tuple[Unit, ...], n: int, opts: RunOptions) -> None:
        r = group[0].loaded.recipe
        names = ", ".join(u.name for u in group)
        shared = f" ({len(group)} recipes on one engine)" if len(group) > 1 else ""
        reps = f", {r.replicas} replicas" if r.replicas > 1 else ""
        click.echo(f"[{n}] {names} ({r.engine.kind}, {r.model.id}{reps}){shared}", err=True)
        log = RunFolder.of(opts.out, group[0].name).engine_log
        if self.on_ray:
            click.echo(f"  engine output: {log} (from the Ray worker, when the job ends)", err=True)
        elif not self.in_process:  # engine start can take a minute with nothing on screen: say where to look
            click.echo(f"  engine output: {log}", err=True)


EXECUTORS = ("local", "ray")
HELP = {  # the options' help, where it does not fit on the option's line
    "out": "Folder for the reports; nothing is written outside it.",
    "limit": "Run only the first N examples of each recipe.",
    "only": "Run only the recipes or study cells named PATTERN, or matching it as a glob (e.g. "
    "'jsquad-vllm-*cache*'); several patterns separated by commas.",
    "estimate": "Run N randomly chosen examples (fixed seed) and project the full-dataset time, with a 95% interval; "
    "marked as an estimate everywhere it is shown.",
    "timeout": "Seconds per recipe before it is ended and recorded failed (a recipe's own timeout_s wins).",
    "baseline": "Name of the recipe the summary compares against (default: the recipe with `baseline: true`).",
    "force": "Rerun recipes whose complete results are already in --out (default: an unchanged recipe is skipped; "
    "an interrupted one continues from its finished samples).",
    "executor": "Where jobs run: `local` (one after another, each in its own process on this machine) or `ray` (each "
    "a Ray task asking for the engine's GPUs, as many at once as the cluster holds; reports are still written "
    "under --out here).",
    "address": "With --executor ray: the Ray cluster to run on (e.g. HEAD:6379, or `auto`); default: a local Ray "
    "instance started for this call.",
    "repeat": "Measure each recipe's generation N times (the same as --set repeat=N): reports give the geometric mean "
    "with a 95% interval, and a speed-up whose interval holds 1 is 'no clear difference'. Repeats already measured "
    "by an earlier call of the same recipe are kept.",
    "warmup": "Uncounted generations after each engine start (the same as --set warmup=N).",
    "interleave": "How repeats of recipes on different engines are ordered (--set interleave=...): `restarts` takes "
    "turns (A B A B), starting each engine afresh every turn; `off` runs each recipe's repeats back to back; `auto` "
    "(the recipes' default) takes turns only where every engine starts in seconds. Recipes on one engine always take "
    "turns.",
    "usd_per_gpu_hour": "Price of one GPU-hour in US dollars (the same as --set cost.usd_per_gpu_hour=X): reports "
    "add dollars per million output and prompt tokens and the cost of each run; a run already complete is not rerun "
    "for it.",
    "replicas": "With --executor ray: split each recipe's examples into N contiguous shares, each run by its own "
    "engine (the same as --set replicas=N: it is recorded in the recipe and its run key).",
}


@cli.command()
@click.argument("paths", nargs=-1, required=True)
@click.option("--out", default="reports", show_default=True, type=click.Path(file_okay=False), help=HELP["out"])
@click.option("--only", metavar="PATTERN", help=HELP["only"])
@click.option("--limit", type=click.IntRange(min=1, max=100_000_000), help=HELP["limit"])
@click.option("--estimate", type=click.IntRange(min=2, max=100_000_000), help=HELP["estimate"])
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help=SET_HELP)
@click.option("--model-path", "model_paths", multiple=True, metavar="HUB_ID=PATH", help=MP_HELP)
@click.option("--timeout", "timeout_s", type=click.IntRange(min=1, max=MAX_TIMEOUT_S), help=HELP["timeout"])
@click.option("--baseline", help=HELP["baseline"])
@click.option("--force", is_flag=True, help=HELP["force"])
@click.option("--in-process", is_flag=True, hidden=True, help="Run recipes in this process (tests).")
@click.option("--no-progress", is_flag=True, help="No progress bars.")
@click.option("--executor", type=click.Choice(EXECUTORS), default="local", show_default=True, help=HELP["executor"])
@click.option("--address", metavar="ADDR", help=HELP["address"])
@click.option("--replicas", type=click.IntRange(min=1, max=1024), metavar="N", help=HELP["replicas"])
@click.option("--repeat", type=click.IntRange(min=1, max=MAX_REPEAT), metavar="N", help=HELP["repeat"])
@click.option("--warmup", type=click.IntRange(min=0, max=MAX_REPEAT), metavar="N", help=HELP["warmup"])
@click.option("--interleave", type=click.Choice(["auto", "restarts", "off"]), help=HELP["interleave"])
@click.option(
    "--usd-per-gpu-hour",
    type=click.FloatRange(min=0, min_open=True, max=1_000_000),
    metavar="X",
    help=HELP["usd_per_gpu_hour"],
)
@guard
def go(paths, out, only, sets, model_paths, baseline, force, executor, address, replicas, in_process, **run):
    """Run recipes and study files (files, folders or globs) and write Markdown reports.

    Every recipe is checked before anything runs (bad input: exit 2). Each
    recipe runs in its own process; study cells that differ only in
    request-side settings (prompt, sampling, dataset) share one engine, with
    the prefix cache reset between them. With --executor ray each such job is
    a Ray task instead (several at once, on any node of the cluster), and its
    files come back here. An unchanged recipe whose results are complete in
    --out is skipped, an interrupted one continues from its finished samples.
    With --repeat N each recipe's generation is measured N times (recipes
    on one engine take turns; see --interleave) and reports give geometric means
    with 95% intervals.
    Exit code 0 when every recipe succeeded, 1 when any failed (the others
    still run and report), 2 for bad input (nothing is run), 130 when
    interrupted."""
    ex = Executor(kind=executor, address=address, in_process=in_process)
    ex.check_options(replicas)
    if replicas is not None:
        sets = (*sets, f"replicas={replicas}")
    for key in ("repeat", "warmup", "interleave"):  # call-wide settings of every recipe
        if (value := run.pop(key)) is not None:
            sets = (*sets, f"{key}={value}")
    if (price := run.pop("usd_per_gpu_hour")) is not None:
        sets = (*sets, f"cost.usd_per_gpu_hour={price}")
    loaded = load_all(paths, sets, model_paths, only)
    ex.check_recipes(loaded)
    names = [lr.recipe.name for lr in loaded]
    if baseline and baseline not in names:
        raise RunnerError(f"--baseline {baseline!r} names no recipe of this call; recipes: " + ", ".join(names))
    if not out or not out.strip():
        raise RunnerError("is empty; give a folder for the reports", field="--out")
    argv = sys.argv  # this call's command line, for the reports (none where `runner go` was not how it was called)
    command = "runner go " + shlex.join(argv[2:]) if argv[1:2] == ["go"] else ""
    progress = not run.pop("no_progress")
    call = new_call()
    opts = RunOptions(
        out=Path(out), command=command, progress=progress, call=call, **run
    )  # --limit, --estimate, --timeout
    results = run_loaded(loaded, opts, ex, force, baseline)
    if any(r.status != "ok" for r in results):
        sys.exit(EXIT_FAILED)


def new_call() -> str:
    """An id for one call (its repeats are marked with it)."""
    return f"{dt.datetime.now(dt.timezone.utc):%Y%m%dT%H%M%SZ}-{os.getpid()}-{uuid.uuid4().hex[:4]}"


def run_loaded(
    loaded: list[LoadedRecipe], opts: RunOptions, ex: Executor, force: bool = False, baseline: str | None = None
) -> list[RunResult]:
    """Run loaded recipes as `runner go` does (checked first, each folder locked, unchanged ones skipped, reports
    and the summary written); one result per recipe. `runner tune` runs its stages through it."""
    units, cannot = [], {}  # all checked before anything is written
    for lr in loaded:
        units.append(make_unit(lr, opts, host=not ex.on_ray, library=False))
        try:
            if not ex.on_ray:
                check_library(lr)
        except RunnerError as e:  # an engine library this machine lacks: that recipe fails, the others run
            cannot[lr.recipe.name] = e
    out_dir = _out_dir(str(opts.out))
    with ExitStack() as locks:  # every unit's run folder locked while the units run
        _room_for_locks(len(units))
        for u in units:
            RunFolder.of(out_dir, u.name).check_files()  # before the lock: a linked lock file is refused, not opened
            locks.enter_context(_lock(RunFolder.of(out_dir, u.name)))
        return _run_all(units, opts, force, ex, baseline, cannot)


def takes_turns(groups: list[tuple[Unit, ...]]) -> bool:
    """Repeats of recipes on different engines take turns (each turn on a fresh engine): when any recipe asks for it
    (`interleave: restarts`), or by default when every engine starts in seconds (the fake engine, builtin models);
    never when one says `off`. Recipes on one engine always take turns, within their job."""
    recipes = [u.loaded.recipe for g in groups for u in g]
    if max((r.repeat for r in recipes), default=1) == 1 or any(r.load is not None for r in recipes):
        return False
    modes = {r.interleave for r in recipes}
    if "off" in modes:
        return False
    quick = all(r.engine.fake or is_builtin(r.model.id) for r in recipes)
    return "restarts" in modes or (quick and len(groups) > 1)


def _out_dir(out: str) -> Path:
    path = Path(out)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise RunnerError(f"cannot create the report folder: {e.strerror}", file=out, field="--out") from None
    if not os.access(path, os.W_OK | os.X_OK):
        hint = "choose another --out, or make this one writable"
        raise RunnerError("the report folder is not writable", file=out, field="--out", hint=hint)
    return path


def _room_for_locks(n: int) -> None:
    """One lock file is held open per recipe for the whole call: raise the open-files limit to the hard limit when a
    large study needs it (an ordinary 256 or 1,024 is below a big matrix), or say why it cannot run."""
    try:
        import resource
    except ImportError:  # not POSIX
        return
    need = n + 256  # the locks, and room for what the run itself opens
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return
    if hard != resource.RLIM_INFINITY and hard < need:
        why = f"{n} recipes hold {n} lock files open, and this shell allows {hard} open files (ulimit -Hn)"
        raise RunnerError(why, hint="run fewer recipes per call (--only), or raise the hard limit (ulimit -Hn)")
    resource.setrlimit(resource.RLIMIT_NOFILE, (need if hard == resource.RLIM_INFINITY else min(need, hard), hard))


def _lock(folder: RunFolder):
    """One writer per run folder: a second `runner go` writing the same recipe stops before it runs."""
    from filelock import FileLock, Timeout

    folder.root.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(folder.lock), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        busy = "another `runner go` is writing this recipe's folder right now"
        raise RunnerError(f"{busy}; wait for it to finish, or use another --out", file=str(folder.root)) from None
    return lock


def _run_all(
    units: list[Unit],
    opts: RunOptions,
    force: bool,
    ex: Executor,
    baseline: str | None,
    cannot: dict[str, RunnerError] | None = None,
):
    results: list[RunResult] = []

    def done(res: RunResult) -> None:
        results.append(res)
        click.echo(one_line(res, write_report(res, opts.out, report_sections(opts.out))))

    try:  # SIGTERM arrives here as Ctrl-C: the command's guard (runner.cli.guard) makes it so
        todo = []
        for u in units:  # an unchanged recipe whose results are complete is skipped
            folder = RunFolder.of(opts.out, u.name)
            if not force and (back := folder.take_back(u.run_key)) is not None:
                click.echo(f"took {u.name}'s results of this very run back from {back} (set aside by an earlier call)")
            prev = None if force else previous_result(folder, u.run_key, u.loaded.recipe.repeat)
            stored = None if force or prev is not None else stored_ok(folder, u.run_key)
            if stored is not None and (short := folder.samples_short(stored.n_samples)):
                kept = folder.set_aside(u.run_key, force=True)  # results, samples and repeats: run again whole
                click.echo(f"rerun {u.name}: its results were complete but {short} (kept in {kept})")
            if prev is not None and (cost := u.loaded.recipe.cost) is not None:  # this call's price, if it names one
                prev = priced(prev, cost.usd_per_gpu_hour)
            if prev is not None:
                results.append(prev)
                write_report(prev, opts.out, report_sections(opts.out))  # a report.md deleted since is back
                click.echo(f"skip {u.name}: unchanged since {prev.finished_at} (results complete; --force reruns)")
                continue
            if (kept := folder.set_aside(u.run_key, force)) is not None:
                why = "--force" if force else "the recipe, its inputs or --limit changed since"
                click.echo(f"kept {u.name}'s earlier results in {kept} ({why}); this run replaces them")
            if (e := (cannot or {}).get(u.name)) is not None:  # recorded failed without running
                res = failed_result(u, e.render(with_hint=False), e.hint, opts.command)
                write_json_atomic(folder.results, res.model_dump(mode="json"))
                done(res)
                continue
            todo.append(u)
        plans = Plans(todo)  # made in the background, the next job's while the current one runs
        try:
            ex.run(todo, opts, done, plans)
        finally:
            plans.close()
    except KeyboardInterrupt:
        have = {r.name for r in results}
        for u in units:  # recipes of the interrupted job that finished before it (complete ones were skipped above)
            if u.name not in have and (prev := previous_result(RunFolder.of(opts.out, u.name), u.run_key, 1)):
                done(prev)
        if results:
            order = {u.name: i for i, u in enumerate(units)}
            results.sort(key=lambda r: order.get(r.name, len(order)))
            click.echo(f"summary: {write_summary(results, opts.out, baseline, summary_sections())}", err=True)
            for path in study_summaries(results, opts.out, baseline):
                click.echo(f"study summary (every stored cell): {path}", err=True)
        kept = "finished samples of an interrupted recipe are kept; the same command without --force continues"
        kept += " from them"
        click.echo(f"interrupted: {len(results)} of {len(units)} recipes finished; {kept}", err=True)
        sys.exit(EXIT_INTERRUPTED)
    order = {u.name: i for i, u in enumerate(units)}
    results.sort(key=lambda r: order.get(r.name, len(order)))
    click.echo(f"summary: {write_summary(results, opts.out, baseline, summary_sections())}")
    for path in study_summaries(results, opts.out, baseline):
        click.echo(f"study summary (every stored cell): {path}")
    return results


def one_line(res: RunResult, path: Path) -> str:
    if res.status != "ok":
        hint = f"\n  hint: {res.hint}" if res.hint else ""
        return f"FAILED {res.name}: {res.error}{hint}\n  report: {path}"
    t = res.timings
    bits = [f"ok {res.name}: {res.n_samples} examples", f"generation {secs(t.generate_s)}", f"start {secs(t.load_s)}"]
    bits.append(f"{res.throughput.requests_per_s or 0:.2f} req/s")
    if res.estimate:
        bits.append(f"projected full run ~{secs(res.estimate.projected_s)} (estimate)")
    if res.scores:
        sc = ", ".join(f"{k} {v:.3f}" for k, v in res.scores.items())
        bits.append(sc + ("" if res.scores_meaningful else " (not meaningful: random weights or fake engine)"))
    line = "; ".join(bits)
    for k in res.knobs:
        if k.status == "ignored":
            took = f"requested {brief(k.requested)}, effective {brief(k.effective)}"
            line += f"\n  WARNING: knob {k.name} did not take effect ({took}): {k.evidence}"
    return line + f"\n  report: {path}"
