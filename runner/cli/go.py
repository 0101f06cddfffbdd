"""`runner go`: check every recipe, then run each (or each group that shares an engine) in its own
process, or as a Ray task (`--executor ray`), and write the reports."""

from __future__ import annotations

import os
import shlex
import signal
import sys
from contextlib import ExitStack
from pathlib import Path

import click

from runner.cli import EXIT_FAILED, EXIT_INTERRUPTED, cli, guard
from runner.cli.executors import EXECUTORS, Executor
from runner.cli.loading import MP_HELP, SET_HELP, load_all
from runner.config.recipe import MAX_TIMEOUT_S, LoadedRecipe
from runner.errors import RunnerError
from runner.execution.job import RunOptions, Unit
from runner.execution.layout import RunFolder
from runner.reporting.format import brief
from runner.reporting.results import RunResult


@cli.command()
@click.argument("paths", nargs=-1, required=True)
@click.option(
    "--out",
    "out",
    default="reports",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Folder for the reports; nothing is written outside it.",
)
@click.option(
    "--only",
    metavar="PATTERN",
    help="Run only the recipes or study cells named PATTERN, or matching it as a glob (e.g. 'jsquad-vllm-*cache*'); "
    "several patterns separated by commas.",
)
@click.option(
    "--limit", type=click.IntRange(min=1, max=100_000_000), help="Run only the first N examples of each recipe."
)
@click.option(
    "--estimate",
    type=click.IntRange(min=2, max=100_000_000),
    help="Run N randomly chosen examples (fixed seed) and project the full-dataset time, with a 95% "
    "interval; marked as an estimate everywhere it is shown.",
)
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help=SET_HELP)
@click.option("--model-path", "model_paths", multiple=True, metavar="HUB_ID=PATH", help=MP_HELP)
@click.option(
    "--timeout",
    type=click.IntRange(min=1, max=MAX_TIMEOUT_S),
    help="Seconds per recipe before it is ended and recorded failed (a recipe's own timeout_s wins).",
)
@click.option(
    "--baseline", help="Name of the recipe the summary compares against (default: the recipe with `baseline: true`)."
)
@click.option(
    "--force",
    is_flag=True,
    help="Rerun recipes whose complete results are already in --out "
    "(default: an unchanged recipe is skipped; an interrupted one continues from its finished samples).",
)
@click.option("--in-process", is_flag=True, hidden=True, help="Run recipes in this process (tests).")
@click.option("--no-progress", is_flag=True, help="No progress bars.")
@click.option(
    "--executor",
    type=click.Choice(EXECUTORS),
    default="local",
    show_default=True,
    help="Where jobs run: `local` (one after another, each in its own process on this machine) or "
    "`ray` (each a Ray task asking for the engine's GPUs, as many at once as the cluster holds; "
    "reports are still written under --out here).",
)
@click.option(
    "--address",
    metavar="ADDR",
    help="With --executor ray: the Ray cluster to run on (e.g. HEAD:6379, "
    "or `auto`); default: a local Ray instance started for this call.",
)
@click.option(
    "--replicas",
    type=click.IntRange(min=1, max=1024),
    metavar="N",
    help="With --executor ray: split "
    "each recipe's examples into N contiguous shares, each run by its own engine (the same as "
    "--set replicas=N: it is recorded in the recipe and its run key).",
)
@guard
def go(
    paths,
    out,
    only,
    limit,
    estimate,
    sets,
    model_paths,
    timeout,
    baseline,
    force,
    in_process,
    no_progress,
    executor,
    address,
    replicas,
):
    """Run recipes and study files (files, folders or globs) and write Markdown reports.

    Every recipe is checked before anything runs (bad input: exit 2). Each
    recipe runs in its own process; study cells that differ only in
    request-side settings (prompt, sampling, dataset) share one engine, with
    the prefix cache reset between them. With --executor ray each such job is
    a Ray task instead (several at once, on any node of the cluster), and its
    files come back here. An unchanged recipe whose results are complete in
    --out is skipped, an interrupted one continues from its finished samples.
    Exit code 0 when every recipe succeeded, 1 when any failed (the others
    still run and report), 2 for bad input (nothing is run), 130 when
    interrupted."""
    ex = Executor(kind=executor, address=address, in_process=in_process)
    ex.check_options(replicas)
    if replicas is not None:
        sets = (*sets, f"replicas={replicas}")
    loaded = load_all(paths, sets, model_paths, only)
    ex.check_recipes(loaded)
    _check_baseline_and_out(baseline, out, loaded)
    opts = RunOptions(
        out=Path(out), limit=limit, estimate=estimate, command=_command(), progress=not no_progress, timeout_s=timeout
    )
    units = [make_unit(lr, opts, host=not ex.on_ray) for lr in loaded]  # all checked before anything is written
    results = _run_locked(units, opts, force, ex, baseline, _out_dir(out))
    if any(r.status != "ok" for r in results):
        sys.exit(EXIT_FAILED)


def _check_baseline_and_out(baseline: str | None, out: str, loaded: list[LoadedRecipe]) -> None:
    if baseline and baseline not in {lr.recipe.name for lr in loaded}:
        raise RunnerError(
            f"--baseline {baseline!r} names no recipe of this call; recipes: "
            + ", ".join(lr.recipe.name for lr in loaded)
        )
    if not out or not out.strip():
        raise RunnerError("--out is empty; give a folder for the reports", field="--out")


def _command() -> str:
    """This call's command line, for the reports (empty where `runner go` was not how it was called)."""
    return "runner go " + " ".join(shlex.quote(a) for a in sys.argv[2:]) if sys.argv[1:2] == ["go"] else ""


def _run_locked(
    units: list[Unit], opts: RunOptions, force: bool, ex: Executor, baseline: str | None, out_dir: Path
) -> list[RunResult]:
    """Every unit's run folder locked while the units run."""
    with ExitStack() as locks:
        for u in units:
            locks.enter_context(_lock(RunFolder.of(out_dir, u.name)))
        return _run_all(units, opts, force, ex, baseline)


def _out_dir(out: str) -> Path:
    path = Path(out)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise RunnerError(f"cannot create the report folder: {e.strerror}", file=out, field="--out") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise RunnerError(
            "the report folder is not writable",
            file=out,
            field="--out",
            hint="choose another --out, or make this one writable",
        )
    return path


def _lock(folder: RunFolder):
    """One writer per run folder: a second `runner go` writing the same recipe stops before it runs."""
    from filelock import FileLock, Timeout

    folder.root.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(folder.lock), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise RunnerError(
            "another `runner go` is writing this recipe's folder right now; wait for it to "
            "finish, or use another --out",
            file=str(folder.root),
        ) from None
    return lock


def make_unit(lr: LoadedRecipe, opts: RunOptions, host: bool = True) -> Unit:
    """Everything checkable without a model, done now: bad input stops the call before anything runs.
    `host`: also what this machine needs to run it (False: it runs on Ray workers, which check that)."""
    from runner.cli.preflight import check_runnable
    from runner.execution.resume import run_key
    from runner.inputs.prepare import prepare

    prepared = prepare(lr, opts.limit, opts.estimate)
    check_runnable(lr, prepared, host=host)
    key = run_key(lr.recipe.canonical(), prepared.inputs, opts.limit, opts.estimate)
    return Unit(loaded=lr, prepared=prepared, run_key=key)


def _run_all(units: list[Unit], opts: RunOptions, force: bool, ex: Executor, baseline: str | None):
    from runner.reporting.summary import write_summary

    results: list[RunResult] = []

    def done(res: RunResult) -> None:
        results.append(res)
        click.echo(one_line(res, _report(res, opts.out)))

    old_handler = signal.signal(signal.SIGTERM, _sigterm)
    try:
        ex.run(_skip_finished(units, opts, force, results), opts, done)
    except KeyboardInterrupt:
        if results:
            write_summary(results, opts.out, baseline)
        click.echo(
            f"interrupted: {len(results)} of {len(units)} recipes finished; finished samples of the "
            "interrupted recipe are kept, and the same command resumes",
            err=True,
        )
        sys.exit(EXIT_INTERRUPTED)
    finally:
        signal.signal(signal.SIGTERM, old_handler)
    order = {u.name: i for i, u in enumerate(units)}
    results.sort(key=lambda r: order.get(r.name, len(order)))
    click.echo(f"summary: {write_summary(results, opts.out, baseline)}")
    return results


def _skip_finished(units: list[Unit], opts: RunOptions, force: bool, results: list[RunResult]) -> list[Unit]:
    from runner.execution.resume import previous_result

    todo = []
    for u in units:
        folder = RunFolder.of(opts.out, u.name)
        prev = None if force else previous_result(folder, u.run_key)
        if prev is not None:
            results.append(prev)
            click.echo(f"skip {u.name}: unchanged since {prev.finished_at} (results complete; --force reruns)")
            continue
        if force:
            folder.partial.unlink(missing_ok=True)
        todo.append(u)
    return todo


def _report(res: RunResult, out: Path) -> Path:
    from runner.reporting.markdown import write_report

    return write_report(res, out)


def _sigterm(signum, frame):
    raise KeyboardInterrupt


def one_line(res: RunResult, path: Path) -> str:
    if res.status != "ok":
        line = f"FAILED {res.name}: {res.error}"
        if res.hint:
            line += f"\n  hint: {res.hint}"
        return line + f"\n  report: {path}"
    from runner.reporting.format import secs

    t = res.timings
    bits = [
        f"ok {res.name}: {res.n_samples} examples",
        f"generation {secs(t.generate_s)}",
        f"start {secs(t.load_s)}",
        f"{res.throughput.requests_per_s or 0:.2f} req/s",
    ]
    if res.estimate:
        bits.append(f"projected full run ~{secs(res.estimate.projected_s)} (estimate)")
    if res.scores:
        sc = ", ".join(f"{k} {v:.3f}" for k, v in res.scores.items())
        bits.append(sc + ("" if res.scores_meaningful else " (not meaningful: random weights or fake engine)"))
    line = "; ".join(bits)
    for k in res.knobs:
        if k.status == "ignored":
            line += (
                f"\n  WARNING: knob {k.name} did not take effect (requested {brief(k.requested)}, "
                f"effective {brief(k.effective)}): {k.evidence}"
            )
    return line + f"\n  report: {path}"
