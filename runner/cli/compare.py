"""`runner compare OLD NEW`: did a new engine, driver or prompt make a workload slower or change its
answers (runner/compare/); exit 1 on the conditions a CI gates on."""

from __future__ import annotations

from pathlib import Path

import click

from runner.cli.app import EXIT_FAILED, cli, guard
from runner.cli.loading import echo_json, json_flag, once


@cli.command()
@click.argument("old", type=click.Path(path_type=Path))
@click.argument("new", type=click.Path(path_type=Path))
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    help="Folder for compare.md, compare.json and compare.png (default: NEW, the --out folder or "
    "run folder named); never OLD or a folder in it. Earlier compare files there are replaced, "
    "and said so.",
)
@json_flag("compare.json's document")
@click.option(
    "--fail-on-slower",
    "pct",
    type=float,
    multiple=True,
    callback=once,
    metavar="PCT",
    help="Exit 1 when a recipe is clearly slower by more than PCT percent: the lower end of its "
    "NEW/OLD time's 95% interval above 1 + PCT/100 (a time without an interval cannot fail), or "
    "when a recipe that ran ok in OLD failed in NEW.",
)
@click.option(
    "--fail-on-drop",
    "drops",
    multiple=True,
    metavar="METRIC:DROP",
    help="Exit 1 when a recipe's paired difference of METRIC is clearly below -DROP (give it once "
    "per metric to gate several): the upper end "
    "of its 95% interval below -DROP (under 30 paired examples it cannot fail), or when a recipe "
    "that ran ok in OLD failed in NEW.",
)
@guard
def compare(old, new, out, as_json, pct, drops):  # noqa: PLR0913
    """Compare the runs stored in NEW with those in OLD: each a `runner go --out` folder or one run
    folder (results.json in it, e.g. OUT/NAME/replaced/<time>-<key>), recipes matched by name. Per
    recipe: what differs (settings, versions), the speed-up (OLD's time ÷ NEW's) with its 95%
    interval (Welch's t on the log times across calls), each score's paired difference with its
    95% interval, the outputs that changed, and a verdict. Exit 1 when a --fail-on condition holds,
    2 on bad input."""
    from runner.compare import compare as cmp
    from runner.compare import report

    c = cmp.compare(old, new)
    fails, cannot = cmp.gates(c, pct, drops)
    asked = cmp.asked_gates(pct, drops)
    # in compare.json too
    c = c.model_copy(update={"gates": asked, "failed": fails, "cannot_fail": cannot})
    out = out or new
    if replaced := report.check_out(out, old):
        click.echo(f"replacing the earlier {', '.join(replaced)} in {out}", err=True)
    md = report.write(c, out)
    if c.same_runs:
        click.echo(
            f"the same run on both sides (nothing measured anew): {', '.join(c.same_runs)}",
            err=True,
        )
    for side, names in (("old", c.only_old), ("new", c.only_new)):
        if names:
            click.echo(f"only in {side}: {', '.join(names)}", err=True)
    for line in [*(f"{p.name}: {p.time}; {p.answers}" for p in c.recipes), f"compare: {md}"]:
        click.echo(line, err=as_json)
    busy = [
        (p.name, side, t.busy[0])
        for p in c.recipes
        for side, t in (("old", p.old_time), ("new", p.new_time))
        if t and t.busy
    ]
    for name, side, why in busy:  # a time measured on a busy machine moves more than it says
        click.echo(f"{name}: measured on a busy machine in {side}: {why}", err=True)
    if as_json:
        echo_json(c.model_dump(mode="json"))
    for line in [*cannot, *(f"failed {x}" for x in fails)]:
        click.echo(line, err=True)
    if fails:
        raise SystemExit(EXIT_FAILED)
