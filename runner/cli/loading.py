"""The options every command that loads recipes shares; the loading itself is
runner/config/calls.py's."""

from __future__ import annotations

import math

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


def price(text: str):
    """--usd-per-gpu-hour, with its help."""
    price_range = click.FloatRange(min=0, min_open=True, max=1_000_000)
    return click.option(
        "--usd-per-gpu-hour", type=price_range, metavar="X", help=text, callback=_finite
    )
