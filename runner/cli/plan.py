"""`runner plan`: predict, before any GPU time, what each recipe will need and can reach."""

from __future__ import annotations

import json

import click

from runner.cli import cli, guard
from runner.cli.loading import MP_HELP, SET_HELP, load_all


@cli.command()
@click.argument("paths", nargs=-1, required=True)
@click.option(
    "--gpu",
    metavar="NAME",
    help="Plan for this GPU (H100, H200, A100-80G, L40S, L4, RTX 4090); default: the GPU of this machine "
    "(NVML), or the H200 on a machine without one.",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print the plans as JSON: {"recipes": [...]} (keys: docs/recipe-reference.md, section Plan).',
)
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help=SET_HELP)
@click.option("--model-path", "model_paths", multiple=True, metavar="HUB_ID=PATH", help=MP_HELP)
@click.option(
    "--only",
    metavar="PATTERN",
    help="Plan only the recipes or study cells whose name matches (a name or glob; several separated by commas).",
)
@guard
def plan(paths, gpu, as_json, sets, model_paths, only):
    """Predict prompt tokens, prefix-cache hits (exact, block by block as vLLM counts them), memory fit,
    KV-cache capacity and the compute floor of each recipe or study cell, on the CPU: the tokenizer
    and the model's config.json are read, no weights. Prints Markdown, or JSON with --json."""
    from runner.cli.preflight import check_model
    from runner.engines.tokenizing import encode_prompts, load_tokenizer, uses_chat_template
    from runner.inputs.prepare import prepare
    from runner.planning.recipe_plan import pick_gpu, plan_recipe

    target, fallback = pick_gpu(gpu)
    if fallback:
        click.echo(f"no GPU on this machine: planning for the {target.name} (--gpu NAME picks another)", err=True)
    plans = []
    tokenizers: dict[tuple, object] = {}
    for lr in load_all(paths, sets, model_paths, only):
        check_model(lr)
        r = lr.recipe
        key = (r.model.tokenizer_id, r.model.revision)
        if key not in tokenizers:
            tokenizers[key] = load_tokenizer(r.model, local_only=True)
        tok = tokenizers[key]
        prepared = prepare(lr)
        _, ids = encode_prompts(tok, list(prepared.messages), uses_chat_template(tok, r.prompt.chat_template))
        encode = lambda text, t=tok: list(t(text, add_special_tokens=False)["input_ids"])  # noqa: E731
        plans.append(plan_recipe(lr, prepared, ids, target, encode).model_dump(mode="json"))
    if as_json:
        click.echo(json.dumps({"recipes": plans}, indent=2, ensure_ascii=False))
        return
    from runner.reporting.plan_markdown import plan_advice, plan_table

    click.echo(f"# Plan ({target.name}, {target.memory_gib:.0f} GiB)\n")
    click.echo(plan_table(plans))
    advice = plan_advice(plans)
    if advice:
        click.echo("\n" + "\n".join(advice))
