"""One recipe's plan: prompt tokens, prefix-cache reuse, memory, the compute floor and layout
advice.

``make_plan`` is pure: token ids and a config.json dict in, a ``Plan`` out; no torch, no vLLM, no
GPU needed. ``plan_recipe`` makes it from what the runner has before the engine starts: the rendered
prompts' token ids, the model's config.json, the engine's settings and the GPU (NVML, else `--gpu
NAME`). Then the Markdown: `runner plan`'s table, and predicted-vs-measured in reports.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import ConfigDict

from runner.base.errors import RunnerError
from runner.base.format import table
from runner.base.stats import common_prefix_len, percentile
from runner.base.types import StrictModel
from runner.engines.hf import count_prompts, count_texts, model_config
from runner.inputs.context import context_length, truncate_left
from runner.inputs.prepare import Prepared
from runner.recipe import LoadedRecipe
from runner.results import RunResult

from .floor import GPU, GPUS, Floor, Workload, compute_floor, find_gpu, get_gpu, gpu_from_nvml
from .memory import (
    GIB,
    MemoryPlan,
    Settings,
    kv_bytes_per_token,
    model_shape,
    plan_memory,
    resolve_quantization,
    weight_bytes,
)
from .prefix_cache import (
    LayoutAdvice,
    LayoutInputs,
    advise_layout,
    encode_examples,
    simulate_prefix_cache,
)

LAYOUT_VARIABLES = ("context", "question")
DEFAULT_GPU = "H200"  # the GPU this project's measurements come from
PLAN_HEADERS = [
    "recipe",
    "on",
    "prompt tokens",
    "mean / max per prompt",
    "context",
    "from prefix cache",
    "weights",
    "KV bytes/token",
    "KV capacity (tokens)",
    "fits",
    "floor",
]
# the plan's fields that are the memory plan's
MEMORY_KEYS = {
    "weights_gib",
    "kv_bytes_per_token",
    "kv_capacity_tokens",
    "fits",
    "cpu_offload_gb_needed",
}


class TokenStats(StrictModel):
    """Distribution of prompt lengths, tokens per example."""

    mean: float  # Mean.
    p50: float  # Median.
    p90: float  # 90th percentile.
    max: int  # Longest.


class Plan(StrictModel):
    """What a recipe will need and can reach on a GPU, before running it."""

    # each field's description is the docstring below it (`runner plan --json`'s contract, in
    # docs/recipe-reference.md)
    model_config = ConfigDict(use_attribute_docstrings=True)

    name: str
    """Recipe name."""
    gpu: str | None
    """GPU planned for; None: the recipe runs on the CPU."""
    requests: int
    """Prompts."""
    prompt_tokens: int
    """All prompt tokens."""
    prompt_tokens_per_example: TokenStats | None
    """Prompt length distribution; None without prompts."""
    max_tokens: int
    """Output tokens per request assumed (sampling.max_tokens)."""
    max_model_len: int | None
    """Context length (the recipe's, else the model's); None if unknown."""
    over_context: int
    """Prompts whose length + max_tokens exceeds max_model_len."""
    prefix_caching: bool = False
    """Whether prefix caching is on."""
    cached_prompt_tokens: int | None = None
    (
        "Prompt tokens served from the prefix cache (0 when off); exact for vLLM V1 unless "
        "cache_upper_bound. None: not planned (an engine without vLLM's KV-cache pool, or the "
        "CPU)."
    )
    cached_share: float | None = None
    """cached_prompt_tokens / prompt_tokens."""
    block_size: int | None = None
    """KV-cache block size, tokens."""
    kv_blocks_needed: int | None = None
    """Distinct full prompt blocks a cache must hold for all the reuse."""
    cache_upper_bound: bool = False
    (
        "The KV cache holds fewer blocks than kv_blocks_needed: blocks get evicted and "
        "cached_prompt_tokens is an upper bound."
    )
    cached_prompt_tokens_lru: int | None = None
    (
        "When cache_upper_bound: an LRU estimate at the KV capacity (ignores blocks held by "
        "running requests)."
    )
    weights_gib: float | None
    """Weights, GiB (in CPU memory for a recipe on the CPU)."""
    kv_bytes_per_token: int
    """KV-cache bytes per token."""
    kv_capacity_tokens: int | None = None
    """KV-cache capacity, tokens (this and below: vLLM on a GPU)."""
    fits: bool | None = None
    """Fits without CPU offload (weights, overheads, one max_model_len sequence)."""
    cpu_offload_gb_needed: float | None = None
    """cpu_offload_gb needed to fit (GiB, vLLM's unit); 0 if it fits."""
    memory: MemoryPlan | None = None
    """The memory budget in detail."""
    batch: int | None = None
    """Sequences decoded together assumed for the floor."""
    floor_s: float | None = None
    """Lower bound on generation time, seconds; None if the GPU's peaks are unknown."""
    bound: str | None = None
    """What sets the floor: compute, memory or pcie."""
    floor: Floor | None = None
    """The floor in detail."""
    layout_advice: list[LayoutAdvice] = []
    """Template layout advice (empty without layout inputs)."""
    notes: list[str] = []
    """Caveats in words."""


def _notes(p: Plan, gpu: GPU, caching_would: int) -> list[str]:
    notes = []
    if not p.prefix_caching and caching_would:
        notes.append(f"prefix caching is off; on, it would serve {caching_would:,} prompt tokens.")
    if p.cache_upper_bound:
        notes.append(
            f"the KV cache holds {p.memory.kv_capacity_blocks:,} blocks but full reuse needs "
            f"{p.kv_blocks_needed:,}: blocks get evicted, the cached count is an upper bound."
        )
    if not p.fits:
        need = p.cpu_offload_gb_needed
        notes.append(f"does not fit without offload: cpu_offload_gb >= {need} needed.")
    if over := p.over_context:
        notes.append(f"{over:,} prompts + max_tokens exceed max_model_len {p.max_model_len:,}.")
    if gpu.bf16_tflops is None:
        notes.append(f"{gpu.name}: peak FLOP/s unknown, no floor.")
    return notes


@dataclass(frozen=True)
class Prompts:
    """What is planned: the recipe's name, its prompts' token ids in the order the engine receives
    them, the output tokens assumed per request (sampling.max_tokens) and the layout inputs (None:
    no layout advice)."""

    name: str
    ids: Sequence[Sequence[int]]
    max_tokens: int
    layout: LayoutInputs | None = None


def _base(p: Prompts, gpu: GPU | None, max_model_len: int | None) -> dict[str, Any]:
    """The fields of any plan: the prompts' tokens and their fit in the context."""
    lens = [len(x) for x in p.ids]
    return dict(
        name=p.name,
        gpu=gpu and gpu.name,
        requests=len(lens),
        prompt_tokens=sum(lens),
        prompt_tokens_per_example=TokenStats(
            mean=sum(lens) / len(lens),
            p50=percentile(lens, 50),
            p90=percentile(lens, 90),
            max=max(lens),
        )
        if lens
        else None,
        max_tokens=p.max_tokens,
        max_model_len=max_model_len,
        over_context=sum(n + p.max_tokens > max_model_len for n in lens) if max_model_len else 0,
    )


def make_plan(
    p: Prompts,
    config: Mapping[str, Any],
    gpu: GPU | str,
    s: Settings = Settings(),
) -> Plan:
    """Plan one recipe: ``config`` is the model's config.json, ``s`` the recipe's engine settings.
    The floor assumes min(requests, max_num_seqs, KV capacity / (mean prompt + max_tokens))
    sequences decoded together."""
    g = get_gpu(gpu) if isinstance(gpu, str) else gpu
    mem, (t, seqs) = plan_memory(config, g.memory_gib, s, g.name), s.batch(g.memory_gib, g.name)
    lens, bs, cap = [len(x) for x in p.ids], s.block_size, mem.kv_capacity_blocks
    caching = s.enable_prefix_caching
    simulate = lambda c: _once("cache", p.ids, (bs, c), lambda: simulate_prefix_cache(p.ids, bs, c))
    # what caching would serve with room for every block; with fewer blocks than needed an upper
    # bound
    hits, needed, _ = simulate(None)
    upper = caching and needed > cap
    lru = sum(simulate(cap)[0]) if upper and cap > 0 else None  # an LRU estimate at the capacity
    used = hits if caching else []
    # sequences of the mean prompt + max_tokens
    per_seq = max(1, math.ceil(sum(lens) / max(1, len(lens)) + p.max_tokens))
    b = max(1, min(len(lens), seqs, mem.kv_capacity_tokens // per_seq))
    fl = compute_floor(config, Workload(lens, used, p.max_tokens, b, t), g, mem)
    evicts = cap if upper else None
    advise = lambda: advise_layout(p.layout, bs, evicts)
    advice = _once("advice", p.ids, (bs, evicts), advise) if p.layout else []
    plan = Plan(
        **_base(p, g, mem.max_model_len),
        **mem.model_dump(include=MEMORY_KEYS),
        prefix_caching=caching,
        cached_prompt_tokens=sum(used),
        cached_share=sum(used) / sum(lens) if sum(lens) else 0.0,
        block_size=bs,
        kv_blocks_needed=needed,
        cache_upper_bound=upper,
        cached_prompt_tokens_lru=lru,
        memory=mem,
        batch=b,
        floor_s=fl and fl.floor_s,
        bound=fl and fl.bound,
        floor=fl,
        layout_advice=advice,
    )
    return plan.model_copy(update={"notes": _notes(plan, g, sum(hits))})


_ONCE: dict[tuple, tuple[Any, Any]] = {}  # (what, id(ids), args) -> (ids, result)


def _once(what: str, ids: Any, args: tuple, compute: Any) -> Any:
    """`compute()` once per prompts object: the cells of a study that send the same prompts share
    one token-id list (`count_prompts` keeps one object per distinct prompts), so their cache
    simulations and layout advice are made once. The entry holds `ids` itself, so its id cannot be
    reused by another object."""
    key = (what, id(ids), *args)
    hit = _ONCE.get(key)
    if hit is None or hit[0] is not ids:
        hit = _ONCE[key] = (ids, compute())
        while len(_ONCE) > 32:  # the oldest go (with their hold on the ids)
            _ONCE.pop(next(iter(_ONCE)))
    return hit[1]


def pick_gpu(name: str | None) -> tuple[GPU | None, bool]:
    """The GPU to plan for: the named one (None for `cpu`: every recipe planned on the CPU), else
    this machine's (NVML), else the H200. The flag is True when it fell back to the H200 because
    this machine has no GPU."""
    if name:
        if name.strip().lower() == "cpu":
            return None, False
        if (g := find_gpu(name)) is None:
            raise RunnerError(
                f"unknown GPU {name!r}; known: " + ", ".join(GPUS) + ", or cpu", field="--gpu"
            )
        return g, False
    g = gpu_from_nvml()
    return (get_gpu(DEFAULT_GPU), True) if g is None else (g, False)


def _layout(lr: LoadedRecipe, prepared: Prepared, ids: list[list[int]]) -> LayoutInputs | None:
    """The layout inputs when the user template uses both example variables (in the order it first
    uses them); each distinct value encoded once, in one batch (and kept, see `count_texts`)."""
    from runner.inputs.prompts import find_template

    path = find_template(lr.recipe.prompt.template, Path(lr.base_dir))
    text = path.read_text(encoding="utf-8") if path else ""
    found = {v: m.start() for v in LAYOUT_VARIABLES if (m := re.search(r"\b" + v + r"\b", text))}
    order = sorted(found, key=found.get)
    if len(order) < 2:
        return None
    rows = [{"question": e.question, "context": e.context} for e in prepared.examples]
    values = list(dict.fromkeys(str(row[v]) for row in rows for v in order))
    encoded = dict(zip(values, count_texts(lr.recipe.model, values)))
    head = ids[0][: common_prefix_len(ids)] if ids else []
    return LayoutInputs(
        examples=encode_examples(rows, encoded.__getitem__, order), order=order, head_ids=head
    )


def check_config(lr: LoadedRecipe) -> dict[str, Any]:
    """The model's config.json, its sizes checked (whole numbers in range), as a plan reads it: bad
    ones are the user's to fix, named with the key."""
    config = model_config(lr.recipe.model, lr.path)
    try:
        model_shape(config)
        resolve_quantization(
            config, lr.recipe.engine.plan_settings(lr.recipe.model).get("quantization")
        )
    except (ValueError, TypeError, KeyError) as e:
        hint = "fix the model's config.json, or point model.id at the model's own folder"
        raise RunnerError(str(e), file=lr.path, field="model.id", hint=hint) from None
    return config


def plan_recipe(
    lr: LoadedRecipe,
    prepared: Prepared | None,
    ids: list[list[int]],
    gpu: GPU | None,
    config: dict,
) -> Plan:
    """`prepared`: the examples, for the template layout advice (None: without it); `ids`: the
    prompts' token ids in engine order; `gpu`: None plans for the CPU. vLLM on a GPU gets the whole
    plan; any other engine, or the CPU, what applies to it."""
    r = lr.recipe
    settings = r.engine.plan_settings(r.model)
    device, cpu_dtype = settings.pop("device", None), settings.pop("cpu_dtype", None)
    p, s = Prompts(r.name, ids, r.sampling.max_tokens), Settings(**settings)
    if gpu is not None and device != "cpu" and r.engine.kv_pool:
        inputs = prepared and _once("layout", ids, (), lambda: _layout(lr, prepared, ids))
        return make_plan(replace(p, layout=inputs), config, gpu, s)
    # what applies to any engine on any device: prompt tokens, context fit, the weights and KV bytes
    # per token; the rest None, and why in the notes
    on = None if gpu is None or device == "cpu" else gpu
    dtype, mml = (on is None and cpu_dtype) or s.dtype, context_length(lr)
    fields, notes = _base(p, on, mml), [_not_planned(r.engine, on, gpu)]
    if over := fields["over_context"]:
        notes.append(f"{over:,} prompts + max_tokens exceed the context of {mml:,}.")
    return Plan(
        **fields,
        weights_gib=weight_bytes(config, dtype, s.quantization) / GIB,
        kv_bytes_per_token=kv_bytes_per_token(config, "auto", dtype),
        notes=notes,
    )


def _not_planned(engine: Any, on: GPU | None, asked: GPU | None) -> str:
    """What the plan of a recipe without vLLM's KV-cache pool on a GPU leaves out, and why: one
    sentence, the same for every such recipe, so that `runner plan` prints it once for all of
    them."""
    if on is not None:
        return (
            f"{engine.label} has no paged KV-cache pool: KV capacity, prefix-cache hits, memory "
            "fit and the floor are "
            "vLLM's and not planned; prompt tokens, context fit and weights are."
        )
    if engine.kv_pool:
        return (
            f"{engine.label} runs on a GPU only: --gpu cpu plans its prompt tokens, context fit "
            "and weights, not its "
            "KV cache, prefix-cache hits, memory fit or floor."
        )
    where = "planned for the CPU (--gpu cpu)" if asked is None else "runs on the CPU"
    return (
        f"{where}: GPU memory, KV cache, prefix-cache hits and the floor do not apply; prompt "
        "tokens, context fit "
        "and weights (in CPU memory) are planned."
    )


def plan_for_run(lr: LoadedRecipe, prepared: Prepared) -> dict[str, Any] | None:
    """What `runner go` shows beside the measurement: the plan for this machine's GPU (NVML), made
    in the parent before the run starts, from the prompts as the engine will get them (the recipe's
    tokenizer and chat template, cut like the run where `prompt.truncate` asks it); None without a
    GPU. A prediction is evidence, never a reason to stop: where it cannot be made, `{"error": ...}`
    says why."""
    gpu = gpu_from_nvml()
    if gpu is None:
        return None
    try:
        r = lr.recipe
        _, ids = count_prompts(r.model, list(prepared.messages), r.prompt.chat_template)
        if r.prompt.truncate:
            ids = truncate_left(ids, context_length(lr), r.sampling.max_tokens)[0]
        return plan_recipe(lr, None, ids, gpu, check_config(lr)).model_dump(mode="json")
    except Exception as e:  # a prediction is evidence, never a reason to fail the run
        return {"error": f"{type(e).__name__}: {e}"}


def plan_table(plans: list[dict[str, Any]]) -> str:
    """One row per recipe: what `runner plan` predicts ("–": not planned for that recipe, see its
    note)."""
    rows = []
    num = lambda v: "–" if v is None else f"{v:,}"
    for p in plans:
        st = p.get("prompt_tokens_per_example") or {}
        cached = "–"
        if p["cached_prompt_tokens"] is not None:
            cached = f"{p['cached_prompt_tokens']:,} ({p['cached_share']:.1%})"
            cached += " ≤" if p["cache_upper_bound"] else ""
        context = num(p["max_model_len"]) + (
            f" ({p['over_context']:,} over)" if p["over_context"] else ""
        )
        tokens = f"{p['prompt_tokens']:,}", f"{st.get('mean', 0):.0f} / {st.get('max', 0)}", context
        kv = num(p["kv_bytes_per_token"]), num(p["kv_capacity_tokens"])
        fits = {None: "–", True: "yes", False: f"no (offload ≥ {p['cpu_offload_gb_needed']} GiB)"}[
            p["fits"]
        ]
        floor = "–" if p["floor_s"] is None else f"{p['floor_s']:.2f} s ({p['bound']})"
        w = p["weights_gib"]
        weights = f"{w:.2f} GiB" if w >= 0.1 else f"{w * 1024:.2g} MiB"
        rows.append([p["name"], p["gpu"] or "CPU", *tokens, cached, weights, *kv, fits, floor])
    return table(rows, PLAN_HEADERS)


def plan_advice(plans: list[dict[str, Any]]) -> list[str]:
    """The plans' notes, a note shared by several recipes written once with all their names, then
    layout advice."""
    by_note: dict[str, list[str]] = {}
    for p in plans:
        for note in p.get("notes", []):
            by_note.setdefault(note, []).append(p["name"])
    out = [f"- {_names(names)}: {note}" for note, names in by_note.items()]
    for p in plans:
        for a in p.get("layout_advice", []):
            # only advice that would change something
            if a["first_share"] > a["current_share"] + 0.01:
                out.append(f"- {p['name']} (layout): {a['text']}")
    return out


def _names(names: list[str]) -> str:
    return (
        ", ".join(names)
        if len(names) <= 4
        else ", ".join(names[:3]) + f" and {len(names) - 3} more"
    )


def predicted_vs_measured(r: RunResult) -> list[str]:
    """A report section: each prediction (cached tokens, weights, KV capacity) next to its
    measurement, with warnings beyond tolerance, and the generation floor against the measured
    generation time, with a warning where it is above it."""
    p = r.plan
    if not p or r.status != "ok":
        return []
    title = ["", "## Predicted and measured", ""]
    if p.get("error"):
        return [*title, f"No prediction: {p['error']}"]
    rows, warn = [], []
    weights = (p.get("memory") or {}).get("weights_gpu_gib", p.get("weights_gib"))
    # label, prediction, measurement, how far apart before the report warns (issue-set tolerances)
    pairs = [
        ("cached prompt tokens", p.get("cached_prompt_tokens"), r.tokens.cached, 0.005),
        ("weights on the GPU (GiB)", weights, r.memory.weights_gib, 0.05),
        ("KV capacity (tokens)", p.get("kv_capacity_tokens"), r.memory.kv_cache_tokens, 0.10),
    ]
    fmt = lambda v: "–" if v is None else f"{v:,}" if isinstance(v, int) else f"{v:.2f}"
    for label, pred, meas, tol in pairs:
        if pred is None:  # not planned for this engine or device (the plan's notes say why)
            continue
        off = (pred - meas) / meas if meas else None
        rows.append([label, fmt(pred), fmt(meas), "–" if off is None else f"{off:+.2%}"])
        if abs(off or 0) > tol:
            off_by = f"off by {off:+.1%} (tolerance ±{tol:.1%})"
            warn.append(f"> **Warning**: predicted {label} {off_by}.")
    floor, gen, roof = p.get("floor_s"), r.timings.generate_s, roofline(r)
    if floor is not None:
        roof_cell = "–" if roof is None else f"roofline {roof:.0%}"
        rows.append(
            ["generation floor (s)", f"{floor:.2f} ({p.get('bound')})", fmt(gen), roof_cell]
        )
    if not rows:
        return []
    if (roof or 0) > 1:
        warn.append(
            "> **Warning**: the predicted floor is above the measured generation time: the floor's "
            "assumptions (peaks, batch) do not hold for this run."
        )
    on = f"GPU {p['gpu']}" if p.get("gpu") else "on the CPU"
    head = f"Predicted before the engine started (`runner plan`, {on}); measured in this run."
    out = [*title, head, "", table(rows, ["", "predicted", "measured", "off by"])]
    return out + [x for w in warn for x in ("", w)]


def roofline(r: RunResult) -> float | None:
    floor = (r.plan or {}).get("floor_s")
    gen = r.timings.generate_s
    return floor / gen if floor and gen and r.status == "ok" else None
