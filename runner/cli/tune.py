"""`runner tune FILE`: the fastest settings that keep accuracy, searched over the file's `tune:`
block (the method is in runner/tune/spec.py, the run in runner/tune/driver.py); every run is an
ordinary cell under --out, so an interrupted tune continues."""

from __future__ import annotations

from pathlib import Path

import click

from runner.base.errors import RunnerError
from runner.cli.app import EXIT_FAILED, cli, guard
from runner.cli.go import interrupted, say
from runner.cli.loading import IN_PROCESS, NO_PROGRESS, echo_json, json_flag, overrides, price
from runner.orchestrate import Interrupted


@cli.command()
@click.argument("path")
@click.option(
    "--out", default="reports", show_default=True, help="Folder for the runs and the tune report."
)
@click.option("--dry-run", is_flag=True, help="List the candidates and the budget; run nothing.")
@overrides
@NO_PROGRESS
@click.option(
    "--report-only",
    is_flag=True,
    help="Rebuild <out>/<name>-tune.md from the stored runs; run nothing.",
)
@price(
    "Price of one GPU-hour in US dollars (the same as --set cost.usd_per_gpu_hour=X): reports add "
    "dollars."
)
@IN_PROCESS
@json_flag(
    "the outcome (report, failed, words, winners, against_baseline, front, the winner's recipe, "
    "every cell)"
)
@guard
# click hands each option in as a parameter
def tune(  # noqa: PLR0913
    path,
    out,
    dry_run,
    sets,
    model_paths,
    no_progress,
    report_only,
    usd_per_gpu_hour,
    in_process,
    as_json,
):
    """Search the `tune:` block of a recipe or study file for the fastest settings that keep its
    accuracy: every candidate screened on the first examples, the best confirmed on every example
    with repeats against the recipe as written (a study: its `tune.start` cell; the cells in
    `tune.compare` confirmed with them), the gate checked on every example; writes
    <out>/<name>-tune.md with the trajectory, the winner (or the candidates within noise of each
    other) and its recipe as YAML. Exit 1 when a run failed."""
    from runner.tune import driver
    from runner.wings import call_wings, cell_file, studies

    if dry_run and as_json:
        why = "lists the candidates as Markdown: it has no JSON"
        raise RunnerError(why, field="--json with --dry-run", hint="leave out --json")
    if usd_per_gpu_hour is not None:
        sets = (*sets, f"cost.usd_per_gpu_hour={usd_per_gpu_hour}")
    call = driver.Call(
        Path(path), Path(out), sets, model_paths, not no_progress, in_process, report_only
    )
    wiring = driver.Wiring(call_wings(), studies, cell_file, say(as_json))
    t = driver.prepare(call, wiring)
    if dry_run:
        click.echo(driver.dry_run(t))
        return
    try:
        outcome = driver.run(t, wiring)
    except Interrupted as e:
        interrupted(e)
    words = f"tune {t.name}: {outcome.words.replace('**', '')}\ntune report: {outcome.report}"
    click.echo(words, err=as_json)
    if as_json:
        echo_json({"tune": t.name, **outcome.as_json()})
    if outcome.failed:
        raise SystemExit(EXIT_FAILED)
