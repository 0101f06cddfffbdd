"""`runner check`, `runner plan`, `runner report`, `runner schema`: look at recipes and results
without running."""

from __future__ import annotations

import json
from pathlib import Path

import click
from pydantic import BaseModel

from runner.base.errors import RunnerError
from runner.cli.app import EXIT_FAILED, UserError, cli, guard
from runner.cli.loading import (
    FAIL_ON_GATE,
    ONLY_HELP,
    SUMMARY_AS_JSON,
    after_summary,
    echo_json,
    json_flag,
    once,
    overrides,
    price,
)
from runner.config.calls import (
    Asked,
    check_model_paths,
    every_recipe,
    expand_paths,
    load_all,
    unmatched,
)
from runner.recipe import GateSpec
from runner.results import RunResult
from runner.wings import recipe_schema, studies


@cli.command()
@click.argument("paths", nargs=-1, required=True)
@overrides
@click.option("--only", metavar="PATTERN", help=f"Check {ONLY_HELP}")
@click.option(
    "--no-tokens", is_flag=True, help="Skip prompt-token statistics (they need the tokenizer)."
)
@json_flag(
    '{"recipes": [{path, name, engine, model, examples, dataset_examples, runs, notes}], "errors": '
    "[{path, error}]}",
    " A file with errors still exits 2, after the JSON.",
)
@guard
def check(paths, sets, model_paths, only, no_tokens, as_json):  # noqa: PLR0913
    """Validate recipes and study files without loading a model; show each recipe's first prompt
    (a study's cells with the settings that vary) and prompt-token statistics."""
    # a study shows the first prompt of each distinct prompt setting once
    shown: set[tuple[str, str]] = set()
    asked = Asked(sets, model_paths, only)  # its --set items checked before the paths are read
    files, errors, names, every, checked = expand_paths(paths), [], {}, [], []
    say = lambda text: click.echo(text, err=as_json)
    for f in files:  # each file to its first error; the others are still checked
        try:
            got = load_all((str(f),), asked, none_ok=True, unused_ok=True, studies=studies)
            if not got and only is None:
                say(f"ok {f}: shared settings for other files' `base:` (abstract: true), no recipe")
            for lr in got:
                every.append(lr)
                if (name := lr.recipe.name) in names:
                    why = (
                        f"two recipes are named {name!r}: {names[name]} and {lr.path}; names must "
                        "be unique in one call (they name the report folders)"
                    )
                    raise RunnerError(why, file=lr.path, field="name")
                names[name] = lr.path
                checked.append(_check_one(lr, shown, no_tokens, say))
        except RunnerError as e:
            errors.append({"path": str(f), "error": e.render()})
    if only is not None and unmatched(only, list(names)) and not errors:
        # raises: a pattern of --only matches no recipe (and lists them)
        load_all(paths, asked, studies=studies)
    if not errors:  # with --only, a mapping for a recipe it leaves out is no typo
        left_out = None if only is None else every_recipe(paths, asked, studies)
        check_model_paths(model_paths, every, left_out)
    if as_json:
        echo_json({"recipes": checked, "errors": errors})
    if errors:
        of = f"\n\n{len(errors)} of {len(files)} files have errors" if len(files) > 1 else ""
        raise UserError("\n\nError: ".join(e["error"] for e in errors) + of)


def _data_notes(r, examples) -> list[str]:
    """What `check` notes of the examples: those without gold answers, and those whose mapped
    context is missing or empty (a key left out of one row reads as null)."""
    n, notes = len(examples), []
    if r.metrics and (no_gold := sum(not e.answers for e in examples)):
        notes.append(
            f"{no_gold} of {n} examples have no gold answers: they are left out of every score"
        )
    ctx = r.dataset.fields.context if r.dataset.format != "squad" else None
    if ctx and (empty := [e.id for e in examples if not e.context]):
        some = ", ".join(empty[:3]) + (", ..." if len(empty) > 3 else "")
        notes.append(
            f"{len(empty)} of {n} examples have no {ctx!r} (mapped to `context`): their prompts "
            f"have an empty passage (ids {some})"
        )
    return notes


def _check_one(lr, shown: set[tuple[str, str]], no_tokens: bool, say) -> dict:
    """Check one recipe, saying what was found; what `check --json` prints of it."""
    from runner.run.job import RunOptions, check_library, make_unit

    # the checks of `runner go` (the engine's library below: a note)
    prepared = make_unit(lr, RunOptions(Path()), library=False).prepared
    r, n = lr.recipe, len(prepared.examples)
    est = f" (an estimate: runs {n}, projects {prepared.n_target})" if n < prepared.n_target else ""
    of = f"{prepared.n_target} of {prepared.n_dataset} examples{est}"
    say(f"ok {lr.path}: {r.name} — {r.engine.kind}, {r.model.id}, {of}")
    got = {"path": str(lr.path), "name": r.name, "engine": r.engine.kind, "model": r.model.id}
    got |= {"examples": prepared.n_target, "dataset_examples": prepared.n_dataset, "runs": n}
    notes = got["notes"] = []

    def note(text: str) -> None:
        notes.append(text)
        say(f"  note: {text}")

    for text in _data_notes(r, prepared.examples):
        note(text)
    from runner.engines.hf import hub_note

    if not r.engine.fake and (hub := hub_note(r.model)):
        note(hub)
    try:
        check_library(lr)
    except RunnerError as e:  # `runner go` records such a recipe failed and runs the others
        note(f"cannot run on this machine: {e.message}")
    from runner.config.loading import read_recipe_file

    if ("tune", lr.path) not in shown and "tune" in read_recipe_file(lr.path).keys:
        shown.add(("tune", lr.path))  # once per file
        what = "its cells" if lr.cell else "the recipe as written"
        note(f"this file has a `tune:` block: runner go runs {what}, runner tune searches it")
    if (c := lr.cell) is not None:
        cell = ", ".join(f"{k}={v}" for k, v in c.settings.items()) or "(no varying settings)"
        say(f"  cell of study {c.study}: {cell}")
        # one first prompt per distinct prompt
        prompt = json.dumps(r.prompt.model_dump(mode="json"), sort_keys=True)
        if (c.study, prompt) in shown:
            return got
        shown.add((c.study, prompt))
    say("first prompt:")
    for m in prepared.messages[0]:
        say(f"  [{m['role']}] " + m["content"].replace("\n", "\n    "))
    if not no_tokens:
        say("  " + token_stats(r, list(prepared.messages)))
    return got


def token_stats(r, messages) -> str:
    try:
        from runner.engines.hf import count_prompts

        # local files only: a quick look
        chat, ids = count_prompts(r.model, messages, r.prompt.chat_template)
        lens = [len(i) for i in ids]
    except Exception as e:  # no transformers here, or the tokenizer is not on this machine
        first = (str(e).splitlines() or [""])[0]
        # the runner's own message whole (written for the user), another's first 120 characters
        why = first if isinstance(e, RunnerError) or len(first) <= 120 else first[:119] + "…"
        return f"prompt tokens: unavailable ({type(e).__name__}: {why})"
    from runner.base.stats import percentile

    return (
        f"prompt tokens over {len(lens)} prompts: mean {sum(lens) / len(lens):.1f}, "
        f"p50 {percentile(lens, 50):.0f}, p90 {percentile(lens, 90):.0f}, max {max(lens)}, "
        f"total {sum(lens):,}; chat template: {'yes' if chat else 'no'}"
    )


@cli.command()
@click.argument("paths", nargs=-1, required=True)
@click.option(
    "--gpu",
    metavar="NAME",
    help=(
        "Plan for this GPU (H100, H200, A100-80G, L40S, L4, RTX 4090), or cpu; default: the GPU of "
        "this machine (NVML), or the H200 on a machine without one. A recipe that runs on the CPU "
        "(engine.device: cpu) is planned for the CPU."
    ),
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help=(
        'Print the plans as JSON: {"recipes": [...]} (keys: docs/recipe-reference.md, section '
        "Plan)."
    ),
)
@overrides
@click.option("--only", metavar="PATTERN", help=f"Plan {ONLY_HELP}")
@guard
# click hands each option in as a parameter
def plan(paths, gpu, as_json, sets, model_paths, only):  # noqa: PLR0913
    """Predict prompt tokens and context fit of each recipe or study cell and, for vLLM on a GPU,
    prefix-cache hits (exact, block by block as vLLM counts them), memory fit, KV-cache capacity and
    the compute floor, on the CPU: the tokenizer and the model's config.json are read, no weights.
    Prints Markdown, or JSON with --json."""
    from runner.engines.hf import count_prompts
    from runner.inputs.prepare import prepare
    from runner.plan.plan import check_config, pick_gpu, plan_advice, plan_recipe, plan_table
    from runner.run.job import check_model

    target, fallback = pick_gpu(gpu)
    plans = []
    fake = []
    for lr in load_all(paths, Asked(sets, model_paths, only), studies=studies):
        if lr.recipe.engine.fake:  # no model: nothing a plan could read
            fake.append(lr.recipe.name)
            continue
        check_model(lr, weights=False)
        config = check_config(lr)  # before the tokenizer, which reads config.json too
        r = lr.recipe
        prepared = prepare(lr)
        try:
            _, ids = count_prompts(r.model, list(prepared.messages), r.prompt.chat_template)
        except RunnerError as e:
            raise RunnerError(e.message, file=lr.path, field=e.field, hint=e.hint) from None
        plans.append(plan_recipe(lr, prepared, ids, target, config).model_dump(mode="json"))
    if fake:
        why = "the fake engine makes its replies up; it has no model to plan"
        if not plans:
            hint = "plan the recipes of a real engine (vllm, transformers)"
            raise RunnerError(f"nothing to plan: {why}", file=", ".join(map(str, paths)), hint=hint)
        click.echo(f"not planned: {', '.join(fake)} ({why})", err=True)
    on_gpu = any(p["gpu"] for p in plans)
    if fallback and on_gpu:
        click.echo(
            f"no GPU on this machine: planning for the {target.name} (--gpu NAME picks another)",
            err=True,
        )
    if as_json:
        echo_json({"recipes": plans})
        return
    on = f"{target.name}, {target.memory_gib:.0f} GiB" if target and on_gpu else "CPU"
    click.echo(f"# Plan ({on})\n")
    click.echo(plan_table(plans))
    if advice := plan_advice(plans):
        click.echo("\n" + "\n".join(advice))


@cli.command()
@click.argument("out", type=click.Path(exists=True, file_okay=False))
@click.option("--baseline", help="Recipe name to compare against.")
@click.option(
    "--gate",
    "gate_text",
    multiple=True,
    callback=once,
    metavar="METRIC:DROP",
    help=(
        "A quality gate for every recipe that has none of its own: METRIC:DROP, the largest "
        "allowed drop in absolute points (squad_f1:0.01), or METRIC:PCT% to keep that share of "
        "the baseline's score (squad_f1:99%)."
    ),
)
@price(
    "Price the stored runs at X US dollars per GPU-hour (results.json keeps the recipe's own "
    "price)."
)
@FAIL_ON_GATE
@SUMMARY_AS_JSON
@guard
def report(out, baseline, gate_text, usd_per_gpu_hour, fail_on_gate, as_json):  # noqa: PLR0913
    """Rebuild every report.md and summary.md (and each study's own summary) from stored
    results.json files (runs nothing). Exit code 0, or 1 with --fail-on-gate when a recipe clearly
    failed its gate; 2 for bad input."""
    from runner.folder import RunFolder, load_results, set_aside_foreign_summary
    from runner.report.markdown import priced, write_report
    from runner.report.summary import write_summary
    from runner.wings import report_sections, study_summaries, summary_sections

    out_dir, skipped, say = Path(out), [], lambda text: click.echo(text, err=as_json)
    results = [priced(r, usd_per_gpu_hour) for r in load_results(out_dir, skipped)]
    if not results:
        none = RunnerError("no */results.json here", file=out)
        raise UserError("\n\nError: ".join(skipped)) if skipped else none
    for why in skipped:  # one bad file does not stop the others' reports
        click.echo(f"left out: {why}", err=True)
    names = [r.name for r in results]
    _check_baseline(results, baseline, say)
    # before anything is written
    gate = gate_for(gate_text, results, baseline) if gate_text else None
    for r in results:
        write_report(r, out_dir, report_sections(out_dir))
        if r.status == "ok" and (short := RunFolder.of(out_dir, r.name).samples_short(r.n_samples)):
            say(
                f"{r.name}: {short} (deleted or cut short since the run): `runner go` runs it again"
            )
    if kept := set_aside_foreign_summary(out_dir):
        say(kept)
    summary = write_summary(results, out_dir, baseline, summary_sections(), gate)
    say(f"summary: {summary} ({len(results)} recipe{'s' * (len(results) != 1)})")
    for path in study_summaries(results, out_dir, baseline, gate):
        say(f"study summary: {path}")
    for folder in sorted(p for p in out_dir.iterdir() if p.is_dir() and p.name not in names):
        # a run folder without a result
        ran = (folder / "engine.log").is_file() or (folder / "replaced").is_dir()
        # (one with a results.json was left out above)
        if ran and not (folder / "results.json").exists():
            say(
                f"no results.json in {folder}: a run that did not finish (left out; rerun it to "
                "report it)"
            )
    if after_summary(summary, as_json, fail_on_gate):
        raise SystemExit(EXIT_FAILED)


def _check_baseline(results: list, baseline: str | None, say) -> None:
    """--baseline names a stored result; without it, several marked `baseline: true` are said."""
    names = [r.name for r in results]
    if baseline and baseline not in names:
        raise RunnerError(
            f"--baseline {baseline!r} names no stored result; results: " + ", ".join(names)
        )
    if not baseline and len(marked := [r.name for r in results if r.recipe.baseline]) > 1:
        say(
            f"{len(marked)} stored results are marked `baseline: true` ({', '.join(marked)}): "
            f"summary.md compares against {marked[0]} (--baseline NAME picks another)"
        )


def gate_for(text: str, results: list, baseline: str | None) -> GateSpec:
    """`--gate METRIC:DROP` or `METRIC:PCT%`. One that cannot apply is an error that says why: no
    baseline to compare with, a metric no run scored with real weights, or every recipe has a gate
    of its own; one that applies to some says which keep theirs."""
    metric, _, bound = text.partition(":")
    try:
        if bound.endswith("%"):
            gate = GateSpec(metric=metric, relative=float(bound[:-1]) / 100)
        else:
            gate = GateSpec(metric=metric, max_drop=float(bound))
    except ValueError:  # pydantic's ValidationError is one
        scored = sorted({m for r in results for m in r.scores})
        hint = "e.g. --gate squad_f1:0.01 or --gate squad_f1:99%"
        hint += f"; scores here: {', '.join(scored)}" if scored else ""
        why = f"{text!r} is not METRIC:DROP (a drop from 0 to 1) or METRIC:PCT% (above 0, at most"
        raise RunnerError(why + " 100) of a known metric", field="--gate", hint=hint) from None
    from runner.report.summary import pick_baseline

    base = pick_baseline(results, baseline)
    if base is None:
        names = ", ".join(r.name for r in results)
        why = "has no baseline to compare with: no stored recipe is marked `baseline: true`"
        raise RunnerError(
            why, field="--gate", hint=f"name one with --baseline NAME (results here: {names})"
        )
    real = sorted(
        {m for r in results if r.status == "ok" and r.scores_meaningful for m in r.scores}
    )
    if gate.metric not in real:
        some = f"gate a metric they scored: {', '.join(real)}"
        hint = some if real else "every run here has random weights or failed"
        why = f"no stored run scored {gate.metric!r} with real weights"
        raise RunnerError(why, field="--gate", hint=hint)
    own = [r.name for r in results if r is not base and r.recipe.gate is not None]
    if len(own) == len(results) - 1:
        why = (
            f"every recipe but the baseline has a gate of its own ({', '.join(own)}); --gate is "
            "for those without"
        )
        raise RunnerError(
            why, field="--gate", hint="leave --gate out, or change the recipes' `gate:` and rerun"
        )
    if own:
        click.echo(
            f"--gate applies to the recipes without a gate of their own; {', '.join(own)} keep "
            "theirs",
            err=True,
        )
    return gate


@cli.command()
@click.argument(
    "what", type=click.Choice(["recipe", "results", "summary", "compare"]), default="recipe"
)
def schema(what):
    """Print the JSON Schema of recipe files, of results.json, summary.json or compare.json."""
    got = {
        "recipe": recipe_schema,
        "results": results_schema,
        "summary": summary_schema,
        "compare": compare_schema,
    }[what]()
    echo_json(got)


def _schema(model: type[BaseModel], title: str) -> dict:
    return {
        **model.model_json_schema(),
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": title,
    }


def results_schema() -> dict:
    return _schema(RunResult, "runner results.json")


def summary_schema() -> dict:
    from runner.report.summary import SummaryJson

    return _schema(SummaryJson, "runner summary.json")


def compare_schema() -> dict:
    from runner.compare.compare import Comparison

    return _schema(Comparison, "runner compare.json")
