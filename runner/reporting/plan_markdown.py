"""Markdown for plans: `runner plan`'s tables, and predicted-vs-measured in reports."""

from __future__ import annotations

from typing import Any

from runner.reporting.results import RunResult

# how far a measurement may be from its prediction before the report warns (issue-set tolerances)
TOLERANCE = {"cached_prompt_tokens": 0.005, "weights_gib": 0.05, "kv_capacity_tokens": 0.10}


def _gib(v: float | None) -> str:
    return "–" if v is None else f"{v:.2f} GiB"


def _n(v: Any) -> str:
    return "–" if v is None else f"{v:,}"


def plan_table(plans: list[dict[str, Any]]) -> str:
    """One row per recipe: what `runner plan` predicts."""
    from runner.reporting.format import table

    rows = []
    for p in plans:
        st = p.get("prompt_tokens_per_example") or {}
        cached = f"{p['cached_prompt_tokens']:,} ({p['cached_share']:.1%})" + (" ≤" if p["cache_upper_bound"] else "")
        rows.append(
            [
                p["name"],
                p["gpu"],
                f"{p['prompt_tokens']:,}",
                f"{st.get('mean', 0):.0f} / {st.get('max', 0)}",
                f"{p['max_model_len']:,}",
                cached,
                _gib(p["weights_gib"]),
                f"{p['kv_bytes_per_token']:,}",
                f"{p['kv_capacity_tokens']:,}",
                "yes" if p["fits"] else f"no (offload ≥ {p['cpu_offload_gb_needed']} GiB)",
                "–" if p["floor_s"] is None else f"{p['floor_s']:.2f} s ({p['bound']})",
            ]
        )
    return table(
        rows,
        [
            "recipe",
            "GPU",
            "prompt tokens",
            "mean / max per prompt",
            "context",
            "from prefix cache",
            "weights",
            "KV bytes/token",
            "KV capacity (tokens)",
            "fits",
            "floor",
        ],
    )


def plan_advice(plans: list[dict[str, Any]]) -> list[str]:
    out = []
    for p in plans:
        for note in p.get("notes", []):
            out.append(f"- {p['name']}: {note}")
        for a in p.get("layout_advice", []):
            if a["first_share"] > a["current_share"] + 0.01:  # only advice that would change something
                out.append(f"- {p['name']} (layout): {a['text']}")
    return out


def _off(pred: float | None, meas: float | None) -> float | None:
    if pred is None or meas is None or not meas:
        return None
    return (pred - meas) / meas


def _measured_rows(r: RunResult, p: dict[str, Any]) -> tuple[list[list[str]], list[str]]:
    """A row per measured prediction (cached tokens, weights, KV capacity), and warnings beyond tolerance."""
    rows, warn = [], []
    pairs = [
        ("cached prompt tokens", "cached_prompt_tokens", p.get("cached_prompt_tokens"), r.tokens.cached),
        (
            "weights on the GPU (GiB)",
            "weights_gib",
            (p.get("memory") or {}).get("weights_gpu_gib", p.get("weights_gib")),
            r.memory.weights_gib,
        ),
        ("KV capacity (tokens)", "kv_capacity_tokens", p.get("kv_capacity_tokens"), r.memory.kv_cache_tokens),
    ]
    for label, key, pred, meas in pairs:
        off = _off(pred, meas)
        rows.append(
            [
                label,
                _n(pred) if isinstance(pred, int) else f"{pred:.2f}" if pred is not None else "–",
                _n(meas) if isinstance(meas, int) else f"{meas:.2f}" if meas is not None else "–",
                "–" if off is None else f"{off:+.2%}",
            ]
        )
        if off is not None and abs(off) > TOLERANCE[key]:
            warn.append(f"> **Warning**: predicted {label} off by {off:+.1%} (tolerance ±{TOLERANCE[key]:.1%}).")
    return rows, warn


def _floor_row(r: RunResult, p: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The generation floor against the measured generation time (of a run that finished), and a warning
    where it is above it."""
    floor, gen, roof = p.get("floor_s"), r.timings.generate_s, roofline(r)
    row = [
        "generation floor (s)",
        "–" if floor is None else f"{floor:.2f} ({p.get('bound')})",
        "–" if gen is None else f"{gen:.2f}",
        "–" if roof is None else f"roofline {roof:.0%}",
    ]
    if roof is not None and roof > 1:
        return row, [
            "> **Warning**: the predicted floor is above the measured generation time: the floor's "
            "assumptions (peaks, batch) do not hold for this run."
        ]
    return row, []


def predicted_vs_measured(r: RunResult) -> list[str]:
    """A report section: each prediction next to its measurement, with warnings beyond tolerance."""
    from runner.reporting.format import table

    p = r.plan
    if not p or r.status != "ok":
        return []
    rows, warn = _measured_rows(r, p)
    floor, floor_warn = _floor_row(r, p)
    out = [
        "",
        "## Predicted and measured",
        "",
        f"Predicted before the engine started (`runner plan`, GPU {p.get('gpu')}); measured in this run.",
        "",
        table([*rows, floor], ["", "predicted", "measured", "off by"]),
    ]
    for w in warn + floor_warn:
        out += ["", w]
    return out


def roofline(r: RunResult) -> float | None:
    floor = (r.plan or {}).get("floor_s")
    gen = r.timings.generate_s
    return floor / gen if floor and gen and r.status == "ok" else None
