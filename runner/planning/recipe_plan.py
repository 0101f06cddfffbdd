"""A recipe's plan from what the runner has before the engine starts: its rendered prompts' token
ids, the model's config.json, the engine's settings and the GPU (NVML, else `--gpu NAME`)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from runner.config.recipe import LoadedRecipe
from runner.errors import RunnerError
from runner.inputs.prepare import Prepared
from runner.planning.gpus import GPU, GPUS, find_gpu, get_gpu, gpu_from_nvml
from runner.planning.layout import LayoutInputs, encode_examples
from runner.planning.plan import Plan, make_plan

LAYOUT_VARIABLES = ("context", "question")


def model_config(lr: LoadedRecipe) -> dict[str, Any]:
    """The model's config.json: a local folder, a builtin, or the hub cache (never the network)."""
    from runner.engines.builtin import ensure_builtin, is_builtin

    m = lr.recipe.model
    folder = Path(ensure_builtin(m.id)) if is_builtin(m.id) else Path(m.id).expanduser()
    cfg = folder / "config.json"
    if not cfg.is_file():
        try:
            from huggingface_hub import try_to_load_from_cache

            hit = try_to_load_from_cache(m.id, "config.json", revision=m.revision)
        except Exception:  # no hub library, or not a repo id
            hit = None
        if not isinstance(hit, str):
            raise RunnerError(
                f"no config.json for {m.id} on this machine (plan reads the model's config, never the network)",
                file=lr.path,
                field="model.id",
                hint="pass the model folder with --model-path HUB_ID=PATH",
            )
        cfg = Path(hit)
    return json.loads(cfg.read_text(encoding="utf-8"))


DEFAULT_GPU = "H200"  # the GPU this project's measurements come from


def pick_gpu(name: str | None) -> tuple[GPU, bool]:
    """The GPU to plan for: the named one, else this machine's (NVML), else the H200. The flag is True
    when it fell back to the H200 because this machine has no GPU."""
    if name:
        g = find_gpu(name)
        if g is None:
            raise RunnerError(f"unknown GPU {name!r}; known: " + ", ".join(GPUS), field="--gpu")
        return g, False
    g = gpu_from_nvml()
    if g is None:
        return get_gpu(DEFAULT_GPU), True
    return g, False


def template_order(lr: LoadedRecipe) -> list[str]:
    """The example variables in the order the user template first uses them."""
    from runner.inputs.prompts import find_template

    path = find_template(lr.recipe.prompt.template, Path(lr.base_dir))
    text = path.read_text(encoding="utf-8") if path else ""
    found = {v: m.start() for v in LAYOUT_VARIABLES if (m := re.search(r"\b" + v + r"\b", text))}
    return sorted(found, key=found.get)


def _layout(lr: LoadedRecipe, prepared: Prepared, ids: list[list[int]], encode) -> LayoutInputs | None:
    order = template_order(lr)
    if len(order) < 2:
        return None
    from runner.reporting.stats import common_prefix_len

    rows = [{"question": e.question, "context": e.context} for e in prepared.examples]
    return LayoutInputs(
        examples=encode_examples(rows, encode, order),
        order=order,
        head_ids=list(ids[0][: common_prefix_len(ids)]) if ids else [],
    )


def plan_recipe(lr: LoadedRecipe, prepared: Prepared, ids: list[list[int]], gpu: GPU, encode=None) -> Plan:
    """`ids`: the prompts' token ids in engine order; `encode`: text -> ids, for the layout advice."""
    r = lr.recipe
    settings = r.engine.plan_settings(r.model)
    layout = _layout(lr, prepared, ids, encode) if encode is not None else None
    plan = make_plan(
        r.name, ids, model_config(lr), gpu=gpu, max_tokens=r.sampling.max_tokens, layout=layout, **settings
    )
    if r.engine.prefix_cache_field is None:  # an engine without a prefix cache: no "turn it on" advice
        plan = plan.model_copy(update={"notes": [n for n in plan.notes if not n.startswith("prefix caching is off")]})
    return plan
