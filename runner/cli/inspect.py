"""`runner check`, `runner report`, `runner schema`: look at recipes and results without running."""

from __future__ import annotations

import json
from pathlib import Path

import click

from runner.cli import cli, guard
from runner.cli.loading import MP_HELP, SET_HELP, load_all
from runner.errors import RunnerError


@cli.command()
@click.argument("paths", nargs=-1, required=True)
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help=SET_HELP)
@click.option("--model-path", "model_paths", multiple=True, metavar="HUB_ID=PATH", help=MP_HELP)
@click.option(
    "--only",
    metavar="PATTERN",
    help="Check only the recipes or study cells whose name matches (a name or glob; several separated by commas).",
)
@click.option("--no-tokens", is_flag=True, help="Skip prompt-token statistics (they need the tokenizer).")
@guard
def check(paths, sets, model_paths, only, no_tokens):
    """Validate recipes and study files without loading a model; show each recipe's first prompt
    (a study's cells with the settings that vary) and prompt-token statistics."""
    from runner.cli.preflight import check_model
    from runner.inputs.context import check_context
    from runner.inputs.prepare import prepare

    shown: set[str] = set()  # a study shows its first cell's prompt; the rest list what varies
    for lr in load_all(paths, sets, model_paths, only):
        prepared = prepare(lr)
        check_model(lr)
        check_context(lr, prepared.examples, prepared.messages)
        r = lr.recipe
        n = len(prepared.examples)
        est = f" (an estimate: runs {n}, projects {prepared.n_target})" if n < prepared.n_target else ""
        click.echo(
            f"ok {lr.path}: {r.name} — {r.engine.kind}, {r.model.id}, {prepared.n_target} of "
            f"{prepared.n_dataset} examples{est}"
        )
        if lr.study:
            cell = ", ".join(f"{k}={v}" for k, v in lr.cell.items()) or "(no varying settings)"
            click.echo(f"  cell of study {lr.study}: {cell}")
            if lr.study in shown:
                continue
            shown.add(lr.study)
        click.echo("first prompt:")
        for m in prepared.messages[0]:
            click.echo(f"  [{m['role']}] " + m["content"].replace("\n", "\n    "))
        if not no_tokens:
            click.echo("  " + token_stats(r, list(prepared.messages)))


def token_stats(r, messages) -> str:
    try:
        from runner.engines.tokenizing import encode_prompts, load_tokenizer, uses_chat_template

        tok = load_tokenizer(r.model, local_only=True)  # no hub retries: check is a quick look
        chat = uses_chat_template(tok, r.prompt.chat_template)
        lens = [len(i) for i in encode_prompts(tok, messages, chat)[1]]
    except Exception as e:  # no transformers here, or the tokenizer is not on this machine
        return f"prompt tokens: unavailable ({type(e).__name__}: {str(e).splitlines()[0][:120]})"
    from runner.reporting.stats import percentile

    return (
        f"prompt tokens over {len(lens)} prompts: mean {sum(lens) / len(lens):.1f}, "
        f"p50 {percentile(lens, 50):.0f}, p90 {percentile(lens, 90):.0f}, max {max(lens)}, "
        f"total {sum(lens):,}; chat template: {'yes' if chat else 'no'}"
    )


@cli.command()
@click.argument("out", type=click.Path(exists=True, file_okay=False))
@click.option("--baseline", help="Recipe name to compare against.")
@guard
def report(out, baseline):
    """Rebuild every report.md and summary.md from stored results.json files (runs nothing)."""
    from runner.reporting.markdown import write_report
    from runner.reporting.stored import load_results
    from runner.reporting.summary import write_summary

    out_dir = Path(out)
    results = load_results(out_dir)
    if not results:
        raise RunnerError("no */results.json here", file=out)
    if baseline and baseline not in {r.name for r in results}:
        raise RunnerError(
            f"--baseline {baseline!r} names no stored result; results: " + ", ".join(r.name for r in results)
        )
    for r in results:
        write_report(r, out_dir)
    click.echo(f"summary: {write_summary(results, out_dir, baseline)} ({len(results)} recipes)")


@cli.command()
@click.argument("what", type=click.Choice(["recipe", "results"]), default="recipe")
def schema(what):
    """Print the JSON Schema of recipe files or of results.json."""
    from runner.config.schema import recipe_schema, results_schema

    click.echo(json.dumps(recipe_schema() if what == "recipe" else results_schema(), indent=2, ensure_ascii=False))
