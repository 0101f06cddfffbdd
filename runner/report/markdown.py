"""Markdown of one run: report.md, its sections in order; a wing adds its own (Ray replicas, serving
rates, the plan against the measurement) through `extra`."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from runner.base.files import write_text_atomic
from runner.base.format import N_EXAMPLES_SHOWN, brief, gib, inline, secs, short, table
from runner.base.types import PROFILE_MAX_WINDOW, PROFILE_WINDOW
from runner.folder import RunFolder, load_samples
from runner.report.spread import LEGEND, rate_cell, time_cell
from runner.results import RunResult
from runner.scoring import conventions

Section = Callable[[RunResult], list[str]]
REPRO_KEYS = (
    "runner",
    "git_commit",
    "python",
    "platform",
    "gpu",
    "driver",
    "cuda_driver",
    "gpu_memory_gib",
)


def paragraphs(*parts: str) -> list[str]:
    """Markdown lines with each part (a heading, a paragraph, a table) after a blank line."""
    return [line for part in parts for line in ("", part)]


def _interval(e: Any) -> str:
    if e.low_s is None or e.high_s is None:
        return "no interval"
    return f"95% interval {secs(e.low_s)} – {secs(e.high_s)}"


def _verdict(r: RunResult) -> list[str]:
    """The answer first, in the figures the sections below show: how it ended, its time and
    throughput, its scores, the knobs ignored, a busy machine, the largest stage."""
    t, th, e = r.timings, r.throughput, r.estimate
    n = f"{r.n_samples:,}" + (f" of {r.n_dataset:,}" if r.n_dataset not in (0, r.n_samples) else "")
    head = f"**{r.status}**" + (f": {r.error}" if r.error else "")
    if e:
        head += (
            f" · **estimate**: {e.n_measured:,} of {e.n_total:,} examples run, the full "
            f"generation projected at ~{secs(e.projected_s)} ({_interval(e)}; {e.method})"
        )
    elif time := time_cell(r) or (t.generate_s and secs(t.generate_s)):
        head += f" · {n} examples, generation {time}"
    rates = (("requests/s", th.requests_per_s), ("output tok/s", th.output_tokens_per_s))
    head += "".join(f" · {rate_cell(r, v)} {what}" for what, v in rates if v)
    out = [head] + ([f"Hint: {r.hint}"] if r.hint else [])
    if r.recipe.engine.fake:
        out.append("Scores: not meaningful (fake engine: no model ran)")
    elif not r.scores_meaningful:
        out.append("Scores: not meaningful (random weights): read it for speed only")
    elif r.scores:
        out.append("Scores: " + ", ".join(f"{k} {v:.4f}" for k, v in r.scores.items()))
    named = lambda status: ", ".join(k.name for k in r.knobs if k.status == status)
    unsure = f"; unverified: {named('unverified')}" if named("unverified") else ""
    knobs = r.knobs and (
        f"Knobs **IGNORED**: {named('ignored')}"
        if named("ignored")
        else f"Knobs: none ignored ({len(r.knobs)} read back{unsure})"
    )
    where = ", ".join(str(x.index) for x in r.repeats if x.noise.busy)
    machine = r.repeats and (
        f"**Busy machine** in repeat{'s' * (',' in where)} {where}: the time may be off (see "
        "Repeats)"
        if where
        else "No repeat found the machine busy"
    )
    if line := " · ".join(x for x in (knobs, machine) if x):
        out.append(line)
    if (s := r.stages) and s.wall_s:
        k = max((k for k in STAGES if k not in ("sink_s", "wall_s")), key=lambda k: getattr(s, k))
        v = getattr(s, k)
        out.append(
            f"Most of the wall time went to {STAGES[k]}: {secs(v)}, {v / s.wall_s:.0%} of "
            f"{secs(s.wall_s)}"
        )
    return [f"- {x}" for x in out]


def report_markdown(r: RunResult, samples: list[dict], extra: Sequence[Section] = ()) -> str:
    sections = (
        _header,
        _time_section,
        _tokens_section,
        _latency_section,
        *extra,
        _memory_section,
        _scores_section,
        _prefix_section,
        _knobs_section,
    )
    return "\n".join(
        [line for section in sections for line in section(r)]
        + _samples_section(samples)
        + _reproduce(r)
    )


def cell_value(v: Any) -> str:
    """A study cell's value in a line or table cell: text as it is, mappings as k=v pairs (nested
    ones in braces, lists of more than four values as a count), other values as JSON."""

    def one(x: Any) -> str:
        if isinstance(x, dict):
            return "{" + ",".join(f"{k}={one(y)}" for k, y in x.items()) + "}"
        if isinstance(x, list) and len(x) > 4:
            return f"[{len(x)} values]"
        return x if isinstance(x, str) else json.dumps(x, ensure_ascii=False, default=str)

    if isinstance(v, dict) and v:
        v = one(v)[1:-1]
    elif not isinstance(v, (str, list)):
        v = one(v)
    return short(v, 80)


def _banners(r: RunResult) -> list[str]:
    out = []
    if r.recipe.engine.fake:
        out.append(
            f"> **FAKE ENGINE**: `{r.recipe.engine.kind}` made these outputs up from a template; "
            "no model ran. Times, tokens and scores test the pipeline only."
        )
    if r.engine_of:
        out.append(
            f"> Note: this recipe ran on the engine started for {r.engine_of} (engine start "
            "counted there); the prefix cache was reset before it"
        )
    return out + [f"> Note: {n}" for n in r.notes]


def _header(r: RunResult) -> list[str]:
    rec, c, lines = r.recipe, r.cell, []
    if c is not None:
        what = ", ".join(f"{k}={c.labels.get(k) or cell_value(v)}" for k, v in c.settings.items())
        lines.append(f"Cell of study **{c.study}**" + (f": {what}" if what else ""))
    if rec.description:
        lines.append(rec.description)
    engine = rec.engine.label or r.engine.name or rec.engine.kind
    lines.append(
        f"Engine: {' '.join(x for x in (engine, r.engine.version) if x not in ('', '-'))} · "
        f"model: `{rec.model.id}` · device: {r.engine.device or '–'} · finished {r.finished_at}"
    )
    # each banner its own block quote (adjacent ones would merge)
    return [f"# {r.name}", "", *_verdict(r), *paragraphs(*lines, *_banners(r)), ""]


def _time_section(r: RunResult) -> list[str]:
    t, th = r.timings, r.throughput
    row = [
        secs(t.load_s),
        time_cell(r, "~" if r.estimate else "") or secs(t.generate_s),
        secs(t.total_s),
        rate_cell(r, th.requests_per_s),
        rate_cell(r, th.output_tokens_per_s),
        rate_cell(r, th.total_tokens_per_s),
        f"{t.gpu_busy:.0%}" if t.gpu_busy is not None else None,
    ]
    head = [
        "engine start",
        "generation",
        "total",
        "requests/s",
        "output tok/s",
        "total tok/s",
        "GPU busy",
    ]
    total = "Total: engine start, tokenizing, generation, scoring and writing the samples"
    total += ", over every repeat and engine start." if len(r.repeats) > 1 else "."
    if e := r.estimate:
        total += (
            f" `~`: the generation projected to all {e.n_total:,} examples; the total and the "
            f"rates are of the {e.n_measured:,} examples run."
        )
    parts = paragraphs("## Time and throughput", table([row], head, frozenset({"GPU busy"})), total)
    if t.gpu_busy is not None:
        text = (
            "GPU busy: the mean of NVML's utilization counter (share of time a kernel was "
            "running, whole device) sampled every 50 ms during generation; it says whether the GPU "
            "waited, not how full it was."
        )
        if t.gpu_busy_tenths:
            tenths = " ".join(f"{x:.0%}" for x in t.gpu_busy_tenths)
            text += (
                f" By tenth of the generation time: {tenths} (NVML averages over its own window, "
                "up to a second: the tenths lag, the first reads low)."
            )
        parts += ["", text]
    parts += _repeats_section(r) + _start_section(r) + _stages_section(r) + _profile_section(r)
    return parts + _energy_section(r)


# what a start did ahead or left out (a StartParts field that is true in some start): its note
_START_NOTES = (
    (
        "tokenizer_ahead",
        " *Tokenizer loaded ahead*: the job's process loaded the engine's own tokenizer before the "
        "start (while the job before it ran), so the start did not.",
    ),
    (
        "tokenizer_copies_ahead",
        " *Tokenizer copies made ahead*: the deep copies of its tokenizer that vLLM's front end "
        "makes inside `LLM()` (~1 s each for a 150k-token vocabulary) were made by the job's "
        "process before the start.",
    ),
    (
        "modules_ahead",
        " *Modules loaded ahead*: the job's process imported what vLLM's front end imported inside "
        "earlier starts with this vLLM version (kept under `$RUNNER_CACHE/vllm-front`), so this "
        "start imported fewer itself.",
    ),
    (
        "autotune_skipped",
        " *FlashInfer autotuning skipped*: an earlier start of the same configuration (its "
        "arguments but the memory it takes, GPU, model config, environment and library versions) "
        "found nothing for it to tune (kept under `$RUNNER_CACHE/vllm-autotune`), so this start "
        "left out its forward pass of `max_num_batched_tokens` tokens and ran FlashInfer's default "
        "tactics, as that one did. `engine_args.enable_flashinfer_autotune: true` runs it; "
        "deleting that folder forgets every such configuration.",
    ),
)


def _start_section(r: RunResult) -> list[str]:
    """Each engine start of the run split as the engine accounted for it, cold or warm."""
    starts = [(x.index, x.load_s, x.start) for x in r.repeats if x.start is not None]
    if not starts:
        return []
    kind = lambda p: (
        (
            "eager (nothing compiled)"
            if p.cold is None
            else "cold (compiled)"
            if p.cold
            else "warm (cache)"
        )
        + ("; memory profiling skipped" if p.profiled is False else "")
        + ("; tokenizer loaded ahead" if p.tokenizer_ahead else "")
        + (
            f"; {n} tokenizer cop{'y' if n == 1 else 'ies'} made ahead"
            if (n := p.tokenizer_copies_ahead)
            else ""
        )
        + (f"; {p.modules_ahead} modules loaded ahead" if p.modules_ahead else "")
        + ("; FlashInfer autotuning skipped" if p.autotune_skipped else "")
    )
    opt = lambda v: secs(v) if v is not None else "–"
    rows = [
        [
            i,
            *map(opt, (total, p.load_s, p.compile_s, p.capture_s, p.profile_kv_s)),
            *map(opt, (p.warmup_s, p.other_s)),
            kind(p),
        ]
        for i, total, p in starts
    ]
    head = [
        "before repeat",
        "engine start",
        "weights",
        "compile",
        "CUDA graphs",
        "profiling, KV cache, kernel warm-up",
        "warm-up",
        "other",
        "compile cache",
    ]
    caches = sorted({p.compile_cache for _, _, p in starts if p.compile_cache})
    note = (
        "As the engine's own log accounts for it: weights loaded, torch.compile (or its output "
        "loaded from the compile cache: a warm start), CUDA graph capture, the memory profiling "
        "run with the KV cache's allocation and the engine's own kernel warm-up (where new "
        "kernels' first compiling on a host shows), the recipe's warm-up batch, and the rest "
        "(the front end, the engine process's start)."
    )
    note += f" Compile cache: {', '.join(f'`{c}`' for c in caches)}." if caches else ""
    if any(p.profiled is False for _, _, p in starts):
        note += (
            " *Memory profiling skipped*: the engine was given its KV cache size "
            "(`engine_args.kv_cache_memory_bytes`, or vLLM's startup plan from an earlier start of "
            'the same configuration, which `engine.env: {VLLM_ENABLE_STARTUP_PLAN: "1"}` turns '
            "on) instead of measuring it; its `gpu_memory_utilization` did not apply."
        )
    note += "".join(
        text for field, text in _START_NOTES if any(getattr(p, field) for *_, p in starts)
    )
    return paragraphs("### Engine start", note, table(rows, head))


STAGES = {
    "prepare_s": "input preparation",
    "process_s": "process start",
    "start_s": "engine start (its build, imports included)",
    "warmup_s": "warm-up",
    "tokenize_s": "tokenizing",
    "generate_s": "generation",
    "sink_s": "scoring and appending (during generation)",
    "write_s": "writing samples",
    "other_s": "other",
    "wall_s": "wall time",
}


def _stages_section(r: RunResult) -> list[str]:
    """Where the run's wall time went, stage by stage (runs that recorded it)."""
    if (s := r.stages) is None:
        return []
    rows = [
        [what, secs(v := getattr(s, k)), f"{v / s.wall_s:.0%}" if s.wall_s else "–"]
        for k, what in STAGES.items()
    ]
    note = (
        "Each stage timed where it happens, over every repeat; scoring and appending run while the "
        "engine generates (part of generation, not of the sum). report.md, summary.md and the "
        "charts are written after results.json: not counted. The engine start here is the whole "
        "build, the libraries' imports included; the table above gives the engine's own account."
    )
    head = ["stage", "seconds", "share of the wall time"]
    return paragraphs("### Where the time went", note, table(rows, head))


def _profile_cache(r: RunResult) -> str:
    """How the profile's windows found the prefix cache."""
    if (emptied := r.profile.cache_emptied) is not None:
        return (
            "each with the prefix cache emptied first, as before each repeat"
            if emptied
            else "on an engine that emptied no prefix cache (it keeps none, or could not)"
        )
    if not r.recipe.engine.prefix_caching_requested():
        return "on an engine without a prefix cache"
    return (  # results of an earlier version, which did not empty it
        "**on the prefix cache as the repeats left it** (a run of an earlier version: the "
        "prompts the repeats had cached were not computed again in these windows)"
    )


def _profile_section(r: RunResult) -> list[str]:
    """`profile: true`: the profiled window's time by kernel class, prefill against the whole, the
    GPU's idle time, the largest part, and the plan's floor beside it."""
    if (p := r.profile) is None:
        return []
    head = "### Where the generation's time goes (profile)"
    if p.full is None or p.prefill is None:
        return paragraphs(head, f"No profile: {p.note}.")
    full, pre = p.full, p.prefill
    what = "GPU kernel time" if full.device == "cuda" else "CPU operators' own time"
    rows = [
        [
            k,
            secs(pre.classes.get(k, 0.0)),
            secs(v),
            f"{v / full.busy_s:.0%}" if full.busy_s else "–",
        ]
        for k, v in full.classes.items()
    ]
    parts = {**full.classes}
    if full.idle_s is not None:
        rows.append(
            ["GPU idle (no kernel running)", secs(pre.idle_s or 0.0), secs(full.idle_s), ""]
        )
        parts["the GPU idle (waiting on the CPU side)"] = full.idle_s
    rows.append(["window wall time (under the profiler)", secs(pre.wall_s), secs(full.wall_s), ""])
    note = (
        f"The first {p.examples} prompts (at most what one engine step holds, up to "
        f"{PROFILE_MAX_WINDOW:,}; {PROFILE_WINDOW} where the engine does not say) generated twice "
        "more after the measured repeats, under "
        f"the engine's profiler ({what}; untimed: the profiler slows them, the figures above "
        "do not include them): once with one output token (the prefill) and once as the recipe "
        "asks, "
        + _profile_cache(r)
        + "; decode is roughly the second less the first. Classes are read from kernel and "
        "operator names" + (f". Largest part: **{max(parts, key=parts.get)}**" if parts else "")
    )
    plan = r.plan or {}
    if plan.get("bound") and plan.get("floor_s"):
        note += (
            f"; the plan's floor for all prompts: {secs(plan['floor_s'])}, {plan['bound']}-bound"
        )
    traces = ", ".join(f"`{t}`" for t in p.traces)
    note += f". Trace: {traces} (Perfetto, chrome://tracing)." if traces else "."
    cols = ["class", "prefill window", "full window", "share of the full window's busy time"]
    return paragraphs(head, note, table(rows, cols))


def priced(r: RunResult, usd_per_gpu_hour: float | None) -> RunResult:
    """The result as a report shows it at another GPU-hour price (a price is no measured fact:
    results.json keeps the recipe's own); the result itself when no price is given or it is the
    same."""
    from runner.recipe import CostSpec

    if usd_per_gpu_hour is None or r.recipe.cost == (
        cost := CostSpec(usd_per_gpu_hour=usd_per_gpu_hour)
    ):
        return r
    return r.model_copy(update={"recipe": r.recipe.model_copy(update={"cost": cost})})


def cost_figures(r: RunResult) -> dict[str, float] | None:
    """Dollars from the recipe's price: GPU-seconds x GPUs x price per GPU-second, for one
    generation (per million output or prompt tokens) and for the whole run (`timings.total_s`: every
    engine start and repeat)."""
    price, gpus = r.recipe.cost and r.recipe.cost.usd_per_gpu_hour, r.energy and r.energy.gpus
    if price is None or not gpus or not r.timings.generate_s:
        return None
    per_s = price / 3600 * gpus
    out: dict[str, float] = {"usd_per_gpu_hour": price, "gpus": gpus}
    for kind in ("output", "prompt"):
        if n := getattr(r.tokens, kind):
            out[f"usd_per_m_{kind}_tokens"] = per_s * r.timings.generate_s / n * 1e6
    if r.timings.total_s:
        out["usd_run"] = per_s * r.timings.total_s
    return out


def _energy_section(r: RunResult) -> list[str]:
    e = r.energy
    if e is None:
        return []
    if not e.measured:
        rows = [["energy", f"not measured: {e.why_not}"]]
    else:
        per = (
            ("per output token", e.j_per_output_token),
            ("per 1,000 prompt tokens", e.j_per_1k_prompt_tokens),
        )
        rows = [
            ["energy per generation", f"{e.joules:,.0f} J"],
            ["average power", f"{e.watts:,.0f} W"],
            *([what, f"{j:.3g} J"] for what, j in per if j is not None),
            ["GPUs read", e.gpus],
        ]
    note = (
        "Energy: NVML's total-energy counter of each GPU the engine ran on, read when the "
        "prompts went in and when the last output was back (whole devices), the mean over the "
        "repeats."
    )
    parts = paragraphs(
        "## Energy and cost", *([note] if e.measured else []), table(rows, ["", "value"])
    )
    if c := cost_figures(r):
        named = {
            "usd_per_m_output_tokens": "per million output tokens",
            "usd_per_m_prompt_tokens": "per million prompt tokens",
            "usd_run": "this run (engine starts, every repeat)",
        }
        rows = [
            ["price", f"${c['usd_per_gpu_hour']:g} per GPU-hour x {c['gpus']:g} GPU(s)"],
            *([what, f"${c[k]:.4g}"] for k, what in named.items() if k in c),
        ]
        formula = (
            "Dollars: price per GPU-hour / 3600 x GPUs x seconds; per million tokens: the "
            "generation time (the geometric mean over the repeats) / the tokens of one generation "
            "x 10^6; the run: its total time."
        )
        parts += paragraphs(formula, table(rows, ["", "dollars"]))
    elif r.recipe.cost is not None and not e.gpus:
        price = f"${r.recipe.cost.usd_per_gpu_hour:g}"
        parts += ["", f"No dollars: the price is per GPU-hour ({price}) and this run used no GPU."]
    return parts


def _repeats_section(r: RunResult) -> list[str]:
    """Every measured repeat with how busy the machine was, and how the repeats were ordered."""
    if not r.repeats:
        return []
    order = {
        "interleaved": "taking turns with the other recipes on its engine (A B A B)",
        "interleaved with "
        "restarts": "taking turns with the other recipes, each turn on a freshly started engine",
        "back to back": "back to back on one engine",
    }.get(r.repeat_order or "", "")
    n = len(r.repeats)
    how = f"{n} repeats, {order}" if n > 1 else "1 run"
    warm = (
        f"; {r.recipe.warmup} uncounted warm-up generation(s) after each engine start"
        if r.recipe.warmup
        else ""
    )
    head = [
        "repeat",
        "generation",
        "GPU energy",
        "engine start",
        "outputs changed",
        "prompt tokens from cache",
        "load avg",
        "CPU pressure",
        "CPU s",
        "other GPU processes",
        "SM MHz",
        "busy",
        "call",
    ]
    note = (
        f"{how}{warm}; the prefix cache was emptied before each. {LEGEND} Outputs changed: "
        "against repeat 1 (its outputs are the samples). Busy: load average above the CPUs, "
        "tasks waiting for a CPU over 10% of the time (/proc/pressure/cpu), or another process "
        "on the GPU (NVML)."
    )
    # GPU energy: NVML's over each repeat's generation, where read
    table_md = table([_repeat_row(x) for x in r.repeats], head, frozenset({"GPU energy"}))
    return paragraphs("### Repeats", note, table_md)


def _repeat_row(x: Any) -> list:
    n, j = x.noise, f"{x.energy_j:,.0f} J" if x.energy_j is not None else None
    part = x.reused_samples and j and x.energy_s  # a continued run: this call's part only
    others = None if n.gpu_other_processes is None else len(n.gpu_other_processes)
    return [
        x.index,
        secs(x.generate_s),
        f"{j} (this call's {x.energy_s:.1f} s)" if part else j,
        secs(x.load_s) if x.load_s is not None else "(running)",
        x.changed,
        x.cached_tokens,
        n.load_avg,
        f"{n.cpu_pressure:.0%}" if n.cpu_pressure is not None else None,
        n.process_cpu_s,
        "cannot tell" if others is None and n.gpu_sm_clock_mhz else others,
        n.gpu_sm_clock_mhz,
        "; ".join(n.busy) or "no",
        x.call,
    ]


def _tokens_section(r: RunResult) -> list[str]:
    t, n = r.tokens, r.n_samples
    row = [
        t.prompt,
        t.output,
        t.cached,
        f"{t.prompt / n:.1f}" if n else None,
        f"{t.output / n:.1f}" if n else None,
    ]
    head = ["prompt", "output", "prompt from cache", "prompt / example", "output / example"]
    return paragraphs("## Tokens", table([row], head))


def _latency_section(r: RunResult) -> list[str]:
    rows = [
        [n, secs(p.p50), secs(p.p90), secs(p.p99), secs(p.mean)]
        for n, p in (("time to first token", r.latency.ttft_s), ("end-to-end", r.latency.e2e_s))
        if p
    ]
    if not rows:
        return []
    return paragraphs("## Latency per request", table(rows, ["", "p50", "p90", "p99", "mean"]))


def _memory_section(r: RunResult) -> list[str]:
    m, env = r.memory, r.environment
    cpu = f"{env.get('cpu', 'CPU')}, {env['cpus']} CPUs" if env.get("cpus") else env.get("cpu")
    threads = f", torch threads {env['torch_threads']}" if env.get("torch_threads") else ""
    row = [
        gib(m.peak_gpu_gib),
        gib(m.baseline_gpu_gib),
        gib(m.weights_gib),
        f"{m.kv_cache_tokens:,}" if m.kv_cache_tokens else None,
        gib(m.kv_cache_gib),
        gib(m.peak_rss_gib),
        f"{cpu}{threads}" if cpu else None,
    ]
    head = [
        "peak GPU (whole device)",
        "GPU before start",
        "weights",
        "KV cache (tokens)",
        "KV cache",
        "peak process memory (RSS)",
        "CPU",
    ]
    # columns empty here (no GPU) left out
    return paragraphs("## Memory", table([row], head, frozenset(head)))


def _scores_section(r: RunResult) -> list[str]:
    """Each score with the convention it follows, and the recipe's gold policy and clean-up."""
    unscored = r.n_samples - r.n_scored if r.n_scored is not None else 0
    left = (
        f"{unscored} of {r.n_samples} examples have no gold answers: they are left out of every "
        "score" + (f" (scores are over the other {r.n_scored})." if r.n_scored else ".")
    )
    if not r.scores:
        none = "No scores (no gold answers, or the run failed)."
        return paragraphs("## Scores", left if unscored and r.n_samples else none)
    note = " (not meaningful: random weights or a fake engine)" if not r.scores_meaningful else ""
    gold = r.recipe.scoring.gold
    conv = conventions(list(r.scores))
    rows = [
        [k, f"{v:.4f}", conv[k].name, gold or conv[k].gold, conv[k].formula]
        for k, v in r.scores.items()
    ]
    scores = table(rows, ["metric", "score" + note, "convention", "gold answers", "formula"])
    post = r.recipe.scoring.postprocess.model_dump().items()
    cleanup = ", ".join(f"{k}={v!r}" for k, v in post if v) or "none"
    policy = (
        f"; gold policy set by the recipe: {gold}" if gold else "; gold policy: each metric's own"
    )
    out = paragraphs("## Scores", scores, f"Output clean-up before scoring: {cleanup}{policy}.")
    return out + (["", f"> **Note**: {left}"] if unscored else [])


def _prefix_section(r: RunResult) -> list[str]:
    if r.status != "ok":
        return []
    p = r.prefix
    text = (
        f"Every prompt starts with the same {p.shared_prefix_tokens} tokens "
        f"({p.shared_prefix_share:.1%} of all prompt tokens); a block-granular prefix cache also "
        "reuses prefixes shared by some prompts only"
    )
    text += " (see Predicted and measured)." if r.plan and not r.plan.get("error") else "."
    text += f" Measured hit rate: {p.hit_rate:.1%}." if p.hit_rate is not None else ""
    return paragraphs("## Prompt prefix", text)


def _knobs_section(r: RunResult) -> list[str]:
    if not r.knobs:
        return []
    rows = [
        [
            k.name,
            brief(k.requested),
            brief(k.effective),
            "**IGNORED**" if k.status == "ignored" else k.status,
            k.evidence,
        ]
        for k in r.knobs
    ]
    head = ["knob", "requested", "effective", "status", "evidence"]
    return paragraphs("## Knobs: requested and effective", table(rows, head))


def _samples_section(samples: list[dict]) -> list[str]:
    if not samples:
        return []
    parts = ["", "## Sample prompts and outputs", ""]
    for s in samples[:N_EXAMPLES_SHOWN]:
        gold = ", ".join(f"`{inline(a)}`" for a in s.get("answers", []))
        parts += [
            f"### {s['id']}",
            "",
            "Prompt:",
            "",
            "```text",
            s["prompt"].replace("```", "ˋˋˋ"),
            "```",
            "",
            f"Output: `{inline(s['output'])}` · gold: " + gold,
            "",
        ]
    return parts


def _reproduce(r: RunResult) -> list[str]:
    """Everything needed to run this again and get comparable numbers."""
    env = r.environment
    rows = [
        ["recipe hash", f"`{r.recipe_hash}`"],
        ["run key", f"`{r.run_key}`" if r.run_key else None],
        *([k, f"`{v}`"] for k, v in env.get("inputs", {}).items()),
        *([k.replace("_", " "), env.get(k)] for k in REPRO_KEYS),
        *([k, v] for k, v in env.get("packages", {}).items()),
    ]
    extra = env.get("engine_extra", {})
    if extra.get("model_runner"):
        rows.append(["vLLM model runner", extra["model_runner"]])
    if extra.get("env"):
        rows.append(["engine environment", ", ".join(f"{k}={v}" for k, v in extra["env"].items())])
    if extra.get("warmup"):
        rows.append(["engine warm-up", extra["warmup"]])
    rows.append(["started / finished", f"{r.started_at or '–'} / {r.finished_at}"])
    out = ["", "## Reproduce", "", table(rows, ["", "value"]), ""]
    if r.command:
        out += ["Command (from the directory it was run in):", "", "```bash", r.command, "```"]
    recipe = yaml.safe_dump(r.recipe.canonical(), sort_keys=False, allow_unicode=True).rstrip()
    return [*out, "", "## Resolved recipe", "", "```yaml", recipe, "```", ""]


def write_report(r: RunResult, out: Path, extra: Sequence[Section] = ()) -> Path:
    folder = RunFolder.of(out, r.name)
    write_text_atomic(folder.report, report_markdown(r, load_samples(folder), extra))
    return folder.report
