"""`runner go`: check every recipe, then run each (or each group that shares an engine) in its own
process, a serving run against its engine's server, or each as a Ray task (`--executor ray`), and
write the reports."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import NoReturn

import click

from runner.base.errors import RunnerError
from runner.cli.app import EXIT_FAILED, EXIT_INTERRUPTED, cli, guard
from runner.cli.loading import (
    FAIL_ON_GATE,
    IN_PROCESS,
    NO_PROGRESS,
    SUMMARY_AS_JSON,
    after_summary,
    overrides,
    price,
)
from runner.config.calls import Asked, load_all
from runner.folder import SUMMARY
from runner.orchestrate import Executor, Interrupted, new_call, run_loaded
from runner.recipe import MAX_REPEAT, MAX_TIMEOUT_S
from runner.run.job import RunOptions
from runner.wings import call_wings, studies


def say(as_json: bool):
    """The orchestrator's `say`: with --json every message to stderr (stdout holds the JSON)."""
    return lambda text, to_stderr: click.echo(text, err=to_stderr or as_json)


def whole(flag: str, least: int, most: int, text: str, metavar: str | None = "N"):
    """An option that takes a whole number from `least` to `most`."""
    return click.option(flag, type=click.IntRange(min=least, max=most), metavar=metavar, help=text)


def interrupted(e: Interrupted) -> NoReturn:
    kept = (
        "finished samples of an interrupted recipe are kept; the same command without --force "
        "continues"
    )
    click.echo(
        f"interrupted: {e.finished} of {e.total} recipes finished; {kept} from them", err=True
    )
    sys.exit(EXIT_INTERRUPTED)


@cli.command()
@click.argument("paths", nargs=-1, required=True)
@click.option(
    "--out",
    default="reports",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Folder for the reports; nothing but caches ($RUNNER_CACHE, default ~/.cache/runner: "
    "token counts, built-in models, compile caches, vLLM's module list) is written outside it.",
)
@click.option(
    "--only",
    metavar="PATTERN",
    help=(
        "Run only the recipes or study cells named PATTERN, or matching it as a glob (e.g. "
        "'jsquad-vllm-*cache*'); several patterns separated by commas."
    ),
)
@whole("--limit", 1, 100_000_000, "Run only the first N examples of each recipe.", metavar=None)
@whole(
    "--estimate",
    2,
    100_000_000,
    "Run N randomly chosen examples (fixed seed) and project the full-dataset time, "
    "with a 95% interval; marked as an estimate everywhere it is shown.",
    metavar=None,
)
@overrides
@click.option(
    "--timeout",
    "timeout_s",
    type=click.IntRange(min=1, max=MAX_TIMEOUT_S),
    help=(
        "Seconds per recipe, all its repeats included, before it is ended and recorded failed "
        "(recipes that share one engine share the sum of theirs; a recipe's own timeout_s wins; "
        "a `load:` recipe's sweep stops after the rate that passes it)."
    ),
)
@click.option(
    "--baseline",
    help=(
        "Name of the recipe the summary compares against (default: the recipe with "
        "`baseline: true`)."
    ),
)
@click.option(
    "--force",
    is_flag=True,
    help=(
        "Rerun recipes whose complete results are already in --out (default: an unchanged "
        "recipe is skipped; an interrupted one continues from its finished samples)."
    ),
)
@IN_PROCESS
@NO_PROGRESS
@click.option(
    "--executor",
    type=click.Choice(("local", "ray")),
    default="local",
    show_default=True,
    help=(
        "Where jobs run: `local` (one after another, each in its own process on this "
        "machine) or `ray` (each a Ray task asking for the engine's GPUs, as many at once as the "
        "cluster holds; reports are still written under --out here)."
    ),
)
@click.option(
    "--address",
    metavar="ADDR",
    help=(
        "With --executor ray: the Ray cluster to run on (e.g. HEAD:6379, or `auto`); "
        "default: a local Ray instance started for this call."
    ),
)
@whole(
    "--replicas",
    1,
    1024,
    "With --executor ray: split each recipe's examples into N contiguous shares, each run "
    "by its own engine (the same as --set replicas=N: it is recorded in the recipe and its "
    "run key).",
)
@whole(
    "--repeat",
    1,
    MAX_REPEAT,
    "Measure each recipe's generation N times (the same as --set repeat=N): reports give the "
    "geometric mean with a 95% interval, and a speed-up whose interval holds 1 is 'no clear "
    "difference'. Repeats already measured by an earlier call of the same recipe are kept.",
)
@whole(
    "--warmup",
    0,
    MAX_REPEAT,
    "Uncounted generations after each engine start (the same as --set warmup=N).",
)
@click.option(
    "--interleave",
    type=click.Choice(["auto", "restarts", "off"]),
    help=(
        "How repeats of recipes on different engines are ordered (--set interleave=...): "
        "`restarts` takes turns (A B A B), starting each engine afresh every turn; `off` runs each "
        "recipe's repeats back to back; `auto` (the recipes' default) takes turns only where every "
        "engine starts in seconds. Recipes on one engine always take turns."
    ),
)
@click.option(
    "--profile",
    is_flag=True,
    help=(
        "Also say where each recipe's generation time goes (the same as --set profile=true): "
        "after its repeats, its first prompts (one engine step's worth) run twice more, untimed, "
        "under the engine's profiler; report.md sorts the GPU time by kernel class and keeps the "
        "trace. Offline runs only."
    ),
)
@price(
    "Price of one GPU-hour in US dollars (the same as --set "
    "cost.usd_per_gpu_hour=X): reports add dollars per million output and prompt tokens and the "
    "cost of each run; a run already complete is not rerun for it."
)
@FAIL_ON_GATE
@SUMMARY_AS_JSON
@guard
# click hands each option in as a parameter
def go(paths, out, only, sets, model_paths, executor, address, in_process, **run):  # noqa: PLR0913
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
    still run and report) or, with --fail-on-gate, failed its gate, 2
    for bad input (nothing is run), 130 when interrupted."""
    ex = Executor(executor, address, in_process)
    ex.check_options(run["replicas"])
    # call-wide settings of every recipe, as the --set items they stand for
    for key in ("replicas", "repeat", "warmup", "interleave", "cost.usd_per_gpu_hour"):
        if (value := run.pop(key.removeprefix("cost."))) is not None:
            sets = (*sets, f"{key}={value}")
    sets += ("profile=true",) if run.pop("profile") else ()
    loaded = load_all(paths, Asked(sets, model_paths, only), studies=studies)
    ex.check_recipes(loaded)
    names = [lr.recipe.name for lr in loaded]
    if (baseline := run["baseline"]) and baseline not in names:
        raise RunnerError(
            f"--baseline {baseline!r} names no recipe of this call; recipes: " + ", ".join(names)
        )
    if not out.strip():
        raise RunnerError("is empty; give a folder for the reports", field="--out")
    # this call's command line, for the reports (none where `runner go` was not how it was called)
    argv = sys.argv
    command = "runner go " + shlex.join(argv[2:]) if argv[1:2] == ["go"] else ""
    progress, as_json = not run.pop("no_progress"), run.pop("as_json")
    fail_on_gate = run.pop("fail_on_gate")
    # --limit, --force, ...
    opts = RunOptions(Path(out), command=command, progress=progress, call=new_call(), **run)
    try:
        results = run_loaded(loaded, opts, ex, wings=call_wings(), say=say(as_json))
    except Interrupted as e:
        if as_json and e.finished:  # the summary of what finished, as written
            after_summary(Path(out) / SUMMARY, True, False)
        interrupted(e)
    gate_failed = after_summary(Path(out) / SUMMARY, as_json, fail_on_gate)
    if gate_failed or any(r.status != "ok" for r in results):
        sys.exit(EXIT_FAILED)
