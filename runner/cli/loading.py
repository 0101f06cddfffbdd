"""The options commands share (the loading itself is runner/config/calls.py's), and what `go` and
`report` do after the summary: --json and --fail-on-gate."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import click

ONLY_HELP = (
    "only the recipes or study cells whose name matches (a name or glob; several "
    "separated by commas)."
)
IN_PROCESS = click.option(
    "--in-process",
    is_flag=True,
    hidden=True,
    help="Run recipes in this process (tests).",
)
NO_PROGRESS = click.option("--no-progress", is_flag=True, help="No progress bars.")


def overrides(f):
    """--set and --model-path."""
    f = click.option(
        "--model-path",
        "model_paths",
        multiple=True,
        metavar="HUB_ID=PATH",
        help=(
            "Load a hub model from a local folder instead: HUB_ID=PATH (repeatable; applies to "
            "model.id and model.tokenizer of every recipe that names HUB_ID)."
        ),
    )(f)
    return click.option(
        "--set",
        "sets",
        multiple=True,
        metavar="KEY=VALUE",
        help=(
            "Override a recipe field, e.g. --set model.id=../shared/models/x (repeatable). A value "
            "for a text field is taken as written; other values are read as YAML (numbers, "
            "true/false, lists)."
        ),
    )(f)


def _finite(ctx, param, value: float | None) -> float | None:
    if value is not None and math.isnan(value):  # FloatRange lets nan through (no comparison holds)
        raise click.BadParameter("nan is not a price: give a number of dollars, e.g. 3.5")
    return value


def once(ctx, param, values: tuple) -> Any:
    """An option read with `multiple=True` so that giving it twice is an error, not the last one
    silently kept (a CI's second gate dropped)."""
    if len(values) > 1:
        raise click.BadParameter(
            f"given {len(values)} times ({', '.join(map(str, values))}); give it once"
        )
    return values[0] if values else None


def price(text: str):
    """--usd-per-gpu-hour, with its help."""
    price_range = click.FloatRange(min=0, min_open=True, max=1_000_000)
    return click.option(
        "--usd-per-gpu-hour", type=price_range, metavar="X", help=text, callback=_finite
    )


FAIL_ON_GATE = click.option(
    "--fail-on-gate",
    is_flag=True,
    help=(
        "Exit 1 when a recipe failed its quality gate (`fail` in the summary's quality gate: the "
        "lower end of its paired 95% interval at or below minus the allowed drop, so a score not "
        "shown to hold fails too); one too few to tell or not checked does not fail the call. "
        "Each gate that did not pass is named on stderr."
    ),
)


def json_flag(what: str, after: str = ""):
    """--json: `what` on stdout as one JSON document, every message on stderr."""
    text = f"Print {what} on stdout as one JSON document; every message goes to stderr.{after}"
    return click.option("--json", "as_json", is_flag=True, help=text)


def echo_json(doc: Any) -> None:
    """The --json output: one JSON document on stdout."""
    click.echo(json.dumps(doc, indent=2, ensure_ascii=False))


SUMMARY_AS_JSON = json_flag("the summary (summary.json's document, with `path`: the summary.md)")


def after_summary(summary: Path, as_json: bool, fail_on_gate: bool) -> bool:
    """The summary.json beside `summary` on stdout (`as_json`, with its path); with `fail_on_gate`,
    each gate that did not pass on stderr. True when some recipe failed its gate."""
    from runner.folder import SUMMARY_JSON
    from runner.report.summary import SummaryJson

    doc = SummaryJson.model_validate_json(summary.with_name(SUMMARY_JSON).read_text("utf-8"))
    if as_json:
        click.echo(doc.model_copy(update={"path": str(summary)}).model_dump_json(indent=2))
    gated = [(r.name, r.gate) for r in doc.recipes if r.gate and r.gate.verdict != "pass"]
    for name, g in gated if fail_on_gate else ():
        tail = "" if g.passed is False else "; not a failure for --fail-on-gate"
        word = {"fail": "failed", "too few to tell": "not decided"}.get(g.verdict, "not checked")
        click.echo(f"gate {word}: {name} — {g.metric}: {g.why}{tail}", err=True)
    return fail_on_gate and any(g.passed is False for _, g in gated)
