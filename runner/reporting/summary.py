"""Markdown of a call: summary.md, comparing every recipe of the call (and each study's cells)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from runner.execution.layout import RunFolder, summary_path
from runner.files import write_text_atomic
from runner.reporting.format import diff_cell, gib, inline, secs, table
from runner.reporting.plan_markdown import roofline
from runner.reporting.results import RunResult
from runner.reporting.serving_markdown import serving_summary, summary_cells
from runner.reporting.stored import load_samples
from runner.reporting.study import study_sections


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    if isinstance(d, dict):
        for k, v in d.items():
            out.update(_flat(v, f"{prefix}{k}."))
    else:
        out[prefix[:-1]] = d
    return out


SKIP_DIFF = {"name", "description", "baseline", "timeout_s", "estimate"}


def _engine_view(engine: dict) -> dict:
    """An engine's kind plus only the fields set away from that kind's defaults, so engines of
    different kinds compare by what was chosen, not by every field either kind has."""
    from runner.engines import spec_class

    cls = spec_class(engine.get("kind"))
    if cls is None:
        return engine
    defaults = cls.model_validate({"kind": engine["kind"]}).model_dump(mode="json")
    return {k: v for k, v in engine.items() if k == "kind" or defaults.get(k) != v}


def recipe_diff(rec: dict, base: dict) -> dict[str, Any]:
    """Settings of `rec` that differ from `base` (dotted keys)."""
    full = _flat(rec)
    rec = {**rec, "engine": _engine_view(rec.get("engine", {}))}
    base = {**base, "engine": _engine_view(base.get("engine", {}))}
    a, b = _flat(rec), _flat(base)
    other_kind = rec["engine"].get("kind") != base["engine"].get("kind")
    out = {}
    for k in sorted(set(a) | set(b)):
        if k.split(".")[0] in SKIP_DIFF or k == "engine.kind":  # the kind has its own column
            continue
        if other_kind and k.startswith("engine.") and k not in a:  # a field the other engine does not have
            continue
        if a.get(k) != b.get(k):
            out[k] = a.get(k, full.get(k))
    return out


def pick_baseline(results: list[RunResult], name: str | None = None) -> RunResult | None:
    if name:
        return next((r for r in results if r.name == name), None)
    return next((r for r in results if r.recipe.get("baseline")), None)


def _prefix_on(r: RunResult) -> bool:
    """The engine has a prefix cache and it was on (as measured where the engine said so)."""
    from runner.engines import spec_class

    eng = r.recipe.get("engine", {})
    cls = spec_class(eng.get("kind"))
    if cls is None or cls.prefix_cache_field is None:
        return False
    eff = next((k.effective for k in r.knobs if k.name == cls.prefix_cache_field), None)
    if eff is not None:
        return bool(eff)
    want = eng.get(cls.prefix_cache_field)
    return cls.prefix_cache_default if want is None else bool(want)


def prefix_section(results: list[RunResult]) -> list[str]:
    """Shared prefix (from the prompts), measured hit rate, and time saved against the same recipe
    with caching off, for each recipe with prefix caching on."""
    rows = []
    for r in results:
        if r.status != "ok" or not _prefix_on(r):
            continue
        partner = None
        for o in results:
            if o is r or o.status != "ok":
                continue
            if set(recipe_diff(r.recipe, o.recipe)) == {"engine.enable_prefix_caching"}:
                partner = o
        saved = None
        if partner and partner.timings.generate_s and r.timings.generate_s:
            d = partner.timings.generate_s - r.timings.generate_s
            saved = f"{d:.1f} s ({d / partner.timings.generate_s:.0%}) vs {partner.name}"
        pred = (r.plan or {}).get("cached_share")
        rows.append(
            [
                r.name,
                r.prefix.shared_prefix_tokens,
                f"{r.prefix.shared_prefix_share:.1%}",
                f"{pred:.1%}" if pred is not None else None,
                f"{r.prefix.hit_rate:.1%}" if r.prefix.hit_rate is not None else None,
                saved,
            ]
        )
    if not rows:
        return []
    return [
        "",
        "## Prefix caching",
        "",
        "Shared by all: tokens every prompt starts with (share of all prompt tokens). Predicted: the prompt "
        "tokens a prefix cache serves, counted block by block over the real token ids before the engine "
        "started (`runner plan`); measured: what the engine reported.",
        "",
        table(
            rows,
            [
                "recipe",
                "prefix shared by all (tokens)",
                "share",
                "predicted hit rate",
                "measured hit rate",
                "generation time saved",
            ],
        ),
    ]


def changed_answers_section(
    results: list[RunResult], base: RunResult | None, out: Path | None, n_show: int = 3
) -> list[str]:
    """Per recipe with real weights: examples whose exact match differs from the baseline's,
    with an exact McNemar test on the discordant pairs."""
    from runner.reporting.stats import mcnemar_exact

    if (
        base is None
        or out is None
        or base.status != "ok"
        or not base.scores_meaningful
        or "exact_match" not in base.scores
    ):
        return []
    bs = {s["id"]: s for s in load_samples(RunFolder.of(out, base.name))}
    lines: list[str] = []
    rows = []
    for r in results:
        if r is base or r.status != "ok" or not r.scores_meaningful or "exact_match" not in r.scores:
            continue
        rs = {s["id"]: s for s in load_samples(RunFolder.of(out, r.name))}
        common = [i for i in rs if i in bs and "exact_match" in rs[i] and "exact_match" in bs[i]]
        if not common:
            continue
        gained = [i for i in common if rs[i]["exact_match"] > bs[i]["exact_match"]]
        lost = [i for i in common if rs[i]["exact_match"] < bs[i]["exact_match"]]
        p = mcnemar_exact(len(gained), len(lost))
        diff = (sum(rs[i]["exact_match"] for i in common) - sum(bs[i]["exact_match"] for i in common)) / len(common)
        rows.append(
            [r.name, len(common), len(gained), len(lost), f"{diff:+.3f}", f"{p:.3g}", "yes" if p < 0.05 else "no"]
        )
        for i in (lost + gained)[:n_show]:
            lines.append(
                f"- {r.name} · `{i}`: baseline `{inline(bs[i]['output'])}` → `{inline(rs[i]['output'])}` "
                f"(gold: {', '.join(inline(a) for a in rs[i]['answers'])})"
            )
    if not rows:
        return []
    return [
        "",
        f"## Answers that change against {base.name}",
        "",
        table(
            rows,
            [
                "recipe",
                "paired examples",
                "now right",
                "now wrong",
                "EM difference",
                "McNemar p (exact)",
                "larger than chance (p<0.05)",
            ],
        ),
        "",
        *lines,
    ]


def _metric_names(results: list[RunResult]) -> list[str]:
    names: list[str] = []
    for r in results:
        names += [m for m in r.scores if m not in names]
    return names


def _row(r: RunResult, base: RunResult | None, metric_names: list[str]) -> list:
    """One recipe's row of the summary table."""
    t = r.estimate.projected_s if r.estimate else r.timings.generate_s
    bt = None
    if base is not None and base.status == "ok":
        bt = base.estimate.projected_s if base.estimate else base.timings.generate_s
    approx = "~" if (r.estimate or (base is not None and base.estimate)) else ""
    speed = f"{approx}{bt / t:.1f}×" if (t and bt and r.status == "ok") else None
    tcell = secs(t) if t is not None else None
    if r.estimate and t is not None:
        tcell = f"~{secs(t)} (est. from {r.estimate.n_measured})"
    tcell, speed = summary_cells(r, tcell, speed)
    diff = recipe_diff(r.recipe, base.recipe) if base is not None and r is not base else {}
    diff_s = diff_cell(diff) if diff else ("(baseline)" if r is base else "")
    knob_flags = [k.name for k in r.knobs if k.status == "ignored"]
    status = r.status if not knob_flags else f"{r.status}; ignored: {', '.join(knob_flags)}"
    scores = [
        (
            f"{r.scores[m]:.3f}"
            if m in r.scores and r.scores_meaningful
            else ("n/a (random weights)" if m in r.scores else None)
        )
        for m in metric_names
    ]
    roof = roofline(r)
    return [
        r.name,
        status,
        r.recipe.get("engine", {}).get("kind"),
        tcell,
        speed,
        r.throughput.requests_per_s,
        r.throughput.output_tokens_per_s,
        gib(r.memory.peak_gpu_gib),
        f"{roof:.0%}" if roof is not None else None,
        *scores,
        diff_s,
    ]


def summary_markdown(
    results: list[RunResult],
    baseline: str | None = None,
    out: Path | None = None,
    study_charts: dict[str, Path] | None = None,
) -> str:
    base = pick_baseline(results, baseline)
    parts = [
        "# Summary",
        "",
        f"{len(results)} recipes; "
        + (
            f"baseline: **{base.name}**."
            if base
            else "no baseline (mark one with `baseline: true` or `--baseline NAME`)."
        ),
    ]
    metric_names = _metric_names(results)
    if metric_names and not any(r.scores_meaningful and r.scores for r in results):
        parts.append("Scores are left out: every recipe here ran with random weights (speed and memory only).")
        metric_names = []
    rows = [_row(r, base, metric_names) for r in results]
    parts += [
        "",
        table(
            rows,
            [
                "recipe",
                "status",
                "engine",
                "generation time",
                "speed-up",
                "requests/s",
                "output tok/s",
                "peak GPU",
                "roofline",
                *metric_names,
                "differs from baseline",
            ],
        ),
    ]
    parts += [
        "",
        "Roofline: the predicted floor of the generation time (compute, memory bandwidth or PCIe, "
        "whichever binds; `runner plan`) ÷ the measured generation time.",
    ]
    parts += study_sections(results, study_charts)
    parts += serving_summary(results)
    parts += prefix_section(results)
    parts += changed_answers_section(results, base, out)
    failed = [r for r in results if r.status != "ok"]
    if failed:
        parts += ["", "## Failures", ""]
        parts += [f"- **{r.name}**: {r.error}" + (f" — hint: {r.hint}" if r.hint else "") for r in failed]
    parts += [
        "",
        "Times marked `~` are projections from a partial run (see each report). "
        "Scores of runs with random weights are left out of comparisons.",
        "",
    ]
    return "\n".join(parts)


def write_summary(results: Iterable[RunResult], out: Path, baseline: str | None = None) -> Path:
    from runner.reporting.plots import write_charts
    from runner.reporting.study_plots import write_study_charts

    results = list(results)
    path = summary_path(out)
    charts = write_charts(results, pick_baseline(results, baseline), out)
    text = summary_markdown(results, baseline, out, write_study_charts(results, out))
    if charts:
        text += "\n## Charts\n\n" + "\n\n".join(f"![{c.stem}]({c.name})" for c in charts) + "\n"
    write_text_atomic(path, text)
    return path
