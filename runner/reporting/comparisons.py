"""Sections of summary.md that pair recipes: prefix caching on against off, and the answers that change
against the baseline (with an exact McNemar test)."""

from __future__ import annotations

from pathlib import Path

from runner.execution.layout import RunFolder
from runner.reporting.format import inline, table
from runner.reporting.recipe_diff import recipe_diff
from runner.reporting.results import RunResult
from runner.reporting.stored import load_samples


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


def _caching_off_partner(r: RunResult, results: list[RunResult]) -> RunResult | None:
    """The last other finished recipe that differs from `r` only in prefix caching."""
    partner = None
    for o in results:
        if o is r or o.status != "ok":
            continue
        if set(recipe_diff(r.recipe, o.recipe)) == {"engine.enable_prefix_caching"}:
            partner = o
    return partner


def _prefix_row(r: RunResult, results: list[RunResult]) -> list:
    partner = _caching_off_partner(r, results)
    saved = None
    if partner and partner.timings.generate_s and r.timings.generate_s:
        d = partner.timings.generate_s - r.timings.generate_s
        saved = f"{d:.1f} s ({d / partner.timings.generate_s:.0%}) vs {partner.name}"
    pred = (r.plan or {}).get("cached_share")
    return [
        r.name,
        r.prefix.shared_prefix_tokens,
        f"{r.prefix.shared_prefix_share:.1%}",
        f"{pred:.1%}" if pred is not None else None,
        f"{r.prefix.hit_rate:.1%}" if r.prefix.hit_rate is not None else None,
        saved,
    ]


def prefix_section(results: list[RunResult]) -> list[str]:
    """Shared prefix (from the prompts), measured hit rate, and time saved against the same recipe
    with caching off, for each recipe with prefix caching on."""
    rows = [_prefix_row(r, results) for r in results if r.status == "ok" and _prefix_on(r)]
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


def _has_exact_match(r: RunResult) -> bool:
    return r.status == "ok" and r.scores_meaningful and "exact_match" in r.scores


def _samples_by_id(out: Path, r: RunResult) -> dict[str, dict]:
    return {s["id"]: s for s in load_samples(RunFolder.of(out, r.name))}


def _changed_answers(
    r: RunResult, rs: dict[str, dict], bs: dict[str, dict], n_show: int
) -> tuple[list, list[str]] | None:
    """`r`'s row of the table (against the baseline's samples `bs`) and its first changed answers."""
    from runner.reporting.stats import mcnemar_exact

    common = [i for i in rs if i in bs and "exact_match" in rs[i] and "exact_match" in bs[i]]
    if not common:
        return None
    gained = [i for i in common if rs[i]["exact_match"] > bs[i]["exact_match"]]
    lost = [i for i in common if rs[i]["exact_match"] < bs[i]["exact_match"]]
    p = mcnemar_exact(len(gained), len(lost))
    diff = (sum(rs[i]["exact_match"] for i in common) - sum(bs[i]["exact_match"] for i in common)) / len(common)
    row = [r.name, len(common), len(gained), len(lost), f"{diff:+.3f}", f"{p:.3g}", "yes" if p < 0.05 else "no"]
    lines = [
        f"- {r.name} · `{i}`: baseline `{inline(bs[i]['output'])}` → `{inline(rs[i]['output'])}` "
        f"(gold: {', '.join(inline(a) for a in rs[i]['answers'])})"
        for i in (lost + gained)[:n_show]
    ]
    return row, lines


def changed_answers_section(
    results: list[RunResult], base: RunResult | None, out: Path | None, n_show: int = 3
) -> list[str]:
    """Per recipe with real weights: examples whose exact match differs from the baseline's,
    with an exact McNemar test on the discordant pairs."""
    if base is None or out is None or not _has_exact_match(base):
        return []
    bs = _samples_by_id(out, base)
    lines: list[str] = []
    rows = []
    for r in results:
        if r is base or not _has_exact_match(r):
            continue
        changed = _changed_answers(r, _samples_by_id(out, r), bs, n_show)
        if changed is not None:
            rows.append(changed[0])
            lines += changed[1]
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
