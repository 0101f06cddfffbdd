"""Markdown of a call: summary.md, comparing every recipe of the call (and each study's cells), with
the sections that pair recipes: what sets one recipe apart from another, prefix caching on against
off, and the answers that change against the baseline (with an exact McNemar test)."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from runner.base.dotted import flat_dotted
from runner.base.files import write_text_atomic
from runner.base.format import N_EXAMPLES_SHOWN, diff_cell, gib, inline, secs, table
from runner.base.stats import (
    MIN_PAIRED,
    PAIRED_CI,
    TIME_CI,
    examples_to_resolve,
    mcnemar_exact,
    paired_interval,
)
from runner.folder import SUMMARY, SUMMARY_JSON, RunFolder, load_samples
from runner.recipe import GateSpec, Recipe
from runner.report.markdown import cost_figures
from runner.report.plots import Accuracy, accuracy_front, write_charts
from runner.report.spread import (
    LEGEND,
    across_calls,
    busy,
    calls,
    clear,
    compared,
    drifted,
    estimate,
    examples,
    paired,
    rate_cell,
    ratio_text,
    repeats_to_tell,
    speedup,
    tie_text,
    time_cell,
    why_no_ratio,
)
from runner.results import RunResult

# a wing's sections of summary.md (studies, serving runs): results, the --out folder -> Markdown
# lines
Sections = Callable[[list[RunResult], Path | None], list[str]]
SKIP_DIFF = {"name", "description", "baseline", "timeout_s", "estimate"}


def _engine_view(r: Recipe) -> dict:
    """An engine's kind plus only the fields set away from that kind's defaults, so engines of
    different kinds compare by what was chosen, not by every field either kind has."""
    engine = r.engine.model_dump(mode="json")
    defaults = type(r.engine).model_validate({"kind": r.engine.kind}).model_dump(mode="json")
    return {k: v for k, v in engine.items() if k == "kind" or defaults.get(k) != v}


def recipe_diff(r: Recipe, base: Recipe) -> dict[str, Any]:
    """Settings of `r` that differ from `base` (dotted keys)."""
    view = lambda x: flat_dotted({**x.canonical(), "engine": _engine_view(x)})
    a, b, full = view(r), view(base), flat_dotted(r.canonical())
    other_kind = r.engine.kind != base.engine.kind
    return {
        k: a.get(k, full.get(k))
        for k in sorted(set(a) | set(b))
        # the kind has its own column; a field the other engine does not have is left out
        if k.split(".")[0] not in SKIP_DIFF
        and k != "engine.kind"
        and not (other_kind and k.startswith("engine.") and k not in a)
        and a.get(k) != b.get(k)
    }


def _prefix_on(r: RunResult) -> bool:
    """The engine has a prefix cache and it was on (as measured where the engine said so)."""
    field = r.recipe.engine.prefix_cache_field
    eff = next((k.effective for k in r.knobs if k.name == field), None)
    return field is not None and (
        bool(eff) if eff is not None else r.recipe.engine.prefix_caching_requested()
    )


def _prefix_row(r: RunResult, results: list[RunResult]) -> list:
    # the last other finished recipe that differs only in prefix caching
    partner = next(
        (
            o
            for o in reversed(results)
            if o is not r
            and o.status == "ok"
            and set(recipe_diff(r.recipe, o.recipe)) == {"engine.enable_prefix_caching"}
        ),
        None,
    )
    saved = None
    if partner and partner.timings.generate_s and r.timings.generate_s:
        d = partner.timings.generate_s - r.timings.generate_s
        saved = f"{d:.1f} s ({d / partner.timings.generate_s:.0%}) vs {partner.name}"
    pred, p = (r.plan or {}).get("cached_share"), r.prefix
    pct = lambda x: f"{x:.1%}" if x is not None else None
    return [
        r.name,
        p.shared_prefix_tokens,
        f"{p.shared_prefix_share:.1%}",
        pct(pred),
        pct(p.hit_rate),
        saved,
    ]


def prefix_section(results: list[RunResult]) -> list[str]:
    """Shared prefix (from the prompts), measured hit rate, and time saved against the same recipe
    with caching off, for each recipe with prefix caching on."""
    rows = [_prefix_row(r, results) for r in results if r.status == "ok" and _prefix_on(r)]
    if not rows:
        return []
    head = [
        "recipe",
        "prefix shared by all (tokens)",
        "share",
        "predicted hit rate",
        "measured hit rate",
    ]
    note = (
        "Shared by all: tokens every prompt starts with (share of all prompt tokens). "
        "Predicted: the prompt tokens a prefix cache serves, counted block by block over the real "
        "token ids before the engine started (`runner plan`); measured: what the engine reported."
    )
    return ["", "## Prefix caching", "", note, "", table(rows, [*head, "generation time saved"])]


# a run's stored samples by example id (how two runs are paired), by the run's name
Samples = Callable[[str], dict[str, dict]]


def reader(out: Path | Samples) -> Samples:
    """The samples of the runs stored in `out`, each run's read at most once (`out` a reader:
    itself, so a summary's readers share one)."""
    by_id = lambda name: {s["id"]: s for s in load_samples(RunFolder.of(out, name))}  # type: ignore[arg-type]
    return out if callable(out) else cache(by_id)


def samples_by_id(out: Path, r: RunResult) -> dict[str, dict]:
    return reader(out)(r.name)


def _interval(diffs: list[float]) -> tuple[str, str | None]:
    """`+0.004 (-0.002 to +0.010)` and the direction when the interval excludes 0 (`lower` /
    `higher`); under MIN_PAIRED examples `+0.200 (too few examples to tell: n=5; 30 needed)`."""
    v = paired_verdict("", diffs)
    if v.lo is None or v.hi is None:
        return v.interval_text(), None
    way = "higher" if v.lo > 0 else "lower" if v.hi < 0 else None
    text = v.interval_text()
    if way is None and (n := examples_to_resolve(statistics.stdev(diffs), v.mean, v.n)):
        text += f"; ~{n:,} examples would tell"
    return text, way


def signed(x: float) -> str:
    return f"{round(x, 3) + 0.0:+.3f}"  # no "-0.000"


def _changed_answers(
    r: RunResult, rs: dict, bs: dict, metrics: list[str]
) -> tuple[list, list[str]] | None:
    """`r`'s row of the table (against the baseline's samples `bs`) and its first changed
    answers."""
    em = metrics[0]
    common = [i for i in rs if i in bs and all(m in rs[i] and m in bs[i] for m in metrics)]
    if not common:
        return None
    differ = sum(rs[i]["output"] != bs[i]["output"] for i in common)
    gained = [i for i in common if rs[i][em] > bs[i][em]]
    lost = [i for i in common if rs[i][em] < bs[i][em]]
    got = {m: _interval([rs[i][m] - bs[i][m] for i in common]) for m in metrics}
    clear = ", ".join(f"{m} {way}" for m, (_, way) in got.items() if way)
    few = len(common) < MIN_PAIRED
    row = [
        r.name,
        len(common),
        differ,
        len(gained),
        len(lost),
        f"{mcnemar_exact(len(gained), len(lost)):.3g}",
        *(text for text, _ in got.values()),
        clear or ("too few examples to tell" if few else "no clear difference"),
    ]
    lines = [
        f"- {r.name} · `{i}`: baseline `{inline(bs[i]['output'])}` → `{inline(rs[i]['output'])}` "
        f"(gold: {', '.join(inline(a) for a in rs[i]['answers'])})"
        for i in (lost + gained)[:N_EXAMPLES_SHOWN]
    ]
    return row, lines


def changed_answers_section(
    results: list[RunResult], base: RunResult | None, out: Path | Samples | None
) -> list[str]:
    """Per recipe with real weights against the baseline, on the same examples: how many outputs
    differ, the examples whose exact match rose or fell (exact McNemar test), and every score's mean
    paired difference with a paired 95% interval (PAIRED_CI); a difference whose interval holds 0 is
    no clear difference."""
    # the baseline's exact-match score: `exact_match` or a `*_exact_match` (the first such)
    em = next((m for m in base.scores if m.endswith("exact_match")), None) if base else None
    has_em = lambda r: r.status == "ok" and r.scores_meaningful and em in r.scores
    if base is None or out is None or em is None or not has_em(base):
        return []
    read, metrics = reader(out), [em, *(m for m in base.scores if m != em)]
    changed = [
        c
        for r in results
        if r is not base
        and has_em(r)
        and (c := _changed_answers(r, read(r.name), read(base.name), metrics)) is not None
    ]
    if not changed:
        return []
    head = [
        "recipe",
        "paired examples",
        "outputs differ",
        "EM now right",
        "EM now wrong",
        "McNemar p (EM)",
    ]
    head += [f"{m} difference (95% CI)" for m in metrics] + ["clear differences"]
    note = (
        f"EM is `{em}`; now right / now wrong: examples whose EM rose / fell against the "
        "baseline's on the same example (McNemar: exact test on those). Differences: this "
        "recipe's score minus the baseline's, the mean over the paired examples, with a 95% "
        f"interval ({PAIRED_CI}); an interval that holds 0 is no clear difference."
    )
    lines = [line for _, shown in changed for line in shown]
    table_md = table([row for row, _ in changed], head)
    return ["", f"## Answers that change against {base.name}", "", note, "", table_md, "", *lines]


@dataclass(frozen=True)
class GateVerdict:
    """A run's gate against the baseline, from their paired samples: `passed` None when too few
    examples to tell. An allowance above 0 passes when the lower end of the paired 95% interval is
    above minus the allowance; an allowance of 0 (`max_drop: 0`, `relative: 1`, or a share of a
    baseline scoring 0) passes when no example scored lower than the baseline's, whatever the
    count."""

    metric: str
    passed: bool | None
    n: int
    mean: float
    lo: float | None
    hi: float | None
    allowed: float
    fell: int  # examples that scored lower than the baseline's

    def interval_text(self) -> str:
        if self.lo is None or self.hi is None:
            return (
                f"{signed(self.mean)} (too few examples to tell: n={self.n}; {MIN_PAIRED} needed)"
            )
        return f"{signed(self.mean)} ({signed(self.lo)} to {signed(self.hi)})"

    def why(self) -> str:
        if self.allowed == 0:
            return f"allowance 0: {self.fell or 'none'} of {self.n} examples scored lower"
        if self.passed is None:
            return f"too few examples to tell (n={self.n}; {MIN_PAIRED} needed)"
        return (
            f"lower end {self.lo:+.3f} {'above' if self.passed else 'at or below'} "
            f"-{self.allowed:.3f}"
        )

    def words(self) -> str:
        return f"{self.metric} {self.interval_text()}, allowed -{self.allowed:.3f}"


GATE_WORDS = {True: "pass", False: "fail", None: "too few to tell"}


def paired_verdict(metric: str, diffs: list[float], allowed: float = 0) -> GateVerdict:
    """The paired differences `diffs` (a run's score minus the baseline's, one per example) judged
    against the drop `allowed`."""
    got, fell = paired_interval(diffs), sum(d < 0 for d in diffs)
    mean, lo, hi = got if got is not None else (sum(diffs) / len(diffs), None, None)
    passed = fell == 0 if allowed == 0 else None if lo is None else lo > -allowed
    return GateVerdict(metric, passed, len(diffs), mean, lo, hi, allowed, fell)


def gate_verdict(rs: dict, bs: dict, g: GateSpec) -> GateVerdict | None:
    """A run's samples `rs` against the baseline's `bs` (by example id) under gate `g`; None when no
    example is scored in both."""
    m = g.metric
    common = [i for i, s in rs.items() if i in bs and m in s and m in bs[i]]
    if not common:
        return None
    allowed = g.allowed_drop(sum(bs[i][m] for i in common) / len(common))
    return paired_verdict(m, [rs[i][m] - bs[i][m] for i in common], allowed)


def gates(
    results: list[RunResult],
    base: RunResult | None,
    out: Path | Samples | None,
    default: GateSpec | None = None,
) -> dict[str, GateVerdict | str]:
    """Each gated run's verdict (its own `gate`, else `default`: `runner report --gate`) against the
    baseline, by name; a string says why it could not be checked. Empty without a baseline, a folder
    or a gate."""
    gate_of = lambda r: r.recipe.gate or default
    gated = [r for r in results if gate_of(r) is not None and r is not base]
    if not gated or base is None or out is None:
        return {}
    scored = lambda r: r.status == "ok" and r.scores_meaningful and r.recipe.engine.kind != "fake"
    read = reader(out)
    bs = read(base.name) if scored(base) else {}
    return {
        r.name: gate_verdict(read(r.name) if scored(r) else {}, bs, gate_of(r))
        or (
            "random weights or the fake engine"
            if r.status == "ok" and not scored(r)
            else "baseline not scored"
            if not bs
            else f"status {r.status}"
            if r.status != "ok"
            else "no scores to pair"
        )
        for r in gated
    }


def stopped_by_gate(verdicts: dict[str, GateVerdict | str]) -> set[str]:
    """The runs their gate stopped: failed, too few examples to tell, or not checkable."""
    return {
        n for n, v in verdicts.items() if not isinstance(v, GateVerdict) or v.passed is not True
    }


def gate_section(j: Judged) -> list[str]:
    """Each recipe with a `gate` against the baseline: passed, failed (and by how much), too few to
    tell or not scored; then the fastest recipe among those that passed that timed the baseline's
    examples (the baseline passes its own gate)."""
    base, verdicts = j.base, j.verdicts
    if not verdicts or base is None:
        return []
    rows = []
    for r in j.results:
        if (v := verdicts.get(r.name)) is None:
            continue
        if isinstance(v, str):
            rows.append([r.name, _gate_metric(r, j), None, None, "not scored", v])
            continue
        word = GATE_WORDS[v.passed]
        rows.append([r.name, v.metric, v.interval_text(), f"-{v.allowed:.3f}", word, v.why()])
    head = ["recipe", "metric", "difference from the baseline (95% CI)", "allowed", "gate", "why"]
    note = (
        "A recipe passes its `gate` when the lower end of its paired 95% interval "
        f"({PAIRED_CI}) against **{base.name}** is above the allowed drop (`max_drop`, or 1 - "
        "`relative` times the baseline's score); with an allowance of 0, when no example scored "
        "lower than the baseline's."
    )
    stopped = stopped_by_gate(verdicts)
    ok = [r for r in _timed(j) if r is base or r.name in verdicts and r.name not in stopped]
    best = min(ok, key=lambda r: r.projected_s, default=None)  # type: ignore[arg-type, return-value]
    last = "No recipe that passed has a time."
    if best is not None:
        last = (
            f"Fastest that passed: **{best.name}** "
            f"({time_cell(best, '~' if best.estimate else '')})"
        )
        if best is not base and (ratio := speedup(base, best)) is not None:
            last += f"; against the baseline: {ratio_text(*ratio)}"
        last += "."
    return ["", "## Quality gate", "", note, "", table(rows, head), "", last]


def _timed(j: Judged) -> list[RunResult]:
    """The runs that may be named fastest: finished, timed and not served, on the baseline's
    examples and comparable with it (`why_no_ratio`: random weights are not set against real ones);
    without a timed baseline: on the most examples any run timed, so a tune's screen on the first
    few is never the fastest."""
    timed = [r for r in j.results if r.status == "ok" and r.projected_s and r.serving is None]
    if j.base in timed:
        return [r for r in timed if why_no_ratio(j.base, r) is None]  # type: ignore[arg-type]
    on = max((examples(r) for r in timed), key=lambda e: e[1], default=None)
    return [r for r in timed if examples(r) == on]


def chart_metric(results: list[RunResult], gate: GateSpec | None = None) -> str | None:
    """The score the accuracy chart plots: the gate's (`--gate`, else the first recipe gate), else
    `exact_match`, else the first metric; one that no run with meaningful scores scored above 0 is
    passed over."""
    scored = [r for r in results if r.status == "ok" and r.scores_meaningful and r.scores]
    names = [
        *(g.metric for g in [gate, *(r.recipe.gate for r in results)] if g is not None),
        "exact_match",
        *(m for r in scored for m in r.scores),
    ]
    return next((m for m in names if any(r.scores.get(m, 0) > 0 for r in scored)), None)


def score_interval(out: Path | Samples, r: RunResult, metric: str) -> tuple[float, float] | None:
    """The 95% interval of a run's mean score over its examples (Student t; none under MIN_PAIRED
    examples)."""
    if r.status != "ok" or not r.scores_meaningful or metric not in r.scores:
        return None
    got = paired_interval([s[metric] for s in reader(out)(r.name).values() if metric in s])
    return got and got[1:]  # type: ignore[return-value]


def pick_baseline(results: list[RunResult], name: str | None = None) -> RunResult | None:
    """The run named `name`, else the first marked `baseline: true`."""
    return next((r for r in results if (r.name == name if name else r.recipe.baseline)), None)


def _speed(r: RunResult, base: RunResult | None) -> str | None:
    """The speed-up cell: against the baseline, how it was measured and, inside the noise, how many
    repeats would tell."""
    if not _vs_base(r, base):
        return "1.0×" if r is base and r.status == "ok" else None
    # a tune's screen, another --limit or dataset: no ratio to give
    if (ratio := speedup(base, r)) is None:
        return f"– ({why})" if (why := why_no_ratio(base, r)) else None
    speed = ratio_text(*ratio, approx="~" if r.estimate or base.estimate else "")
    if ratio[1] is not None and (how := compared(base, r)) != "in turns":
        speed += f" ({how})"
    if ratio[1] is not None and not clear(ratio[1], ratio[2]) and (n := repeats_to_tell(base, r)):
        speed += f"; ~{n:,} repeats would tell"
    return speed


def _vs_base(r: RunResult, base: RunResult | None) -> bool:
    """`r` has a speed-up against the baseline: both finished, `r` is not it."""
    return r is not base and base is not None and base.status == "ok" and r.status == "ok"


def _served(r: RunResult) -> bool:
    """A serving run: its time is set by the offered rate (no speed-up)."""
    return r.serving is not None and r.serving.headline_rate is not None


def _time(r: RunResult, base: RunResult | None) -> str | None:
    """The generation-time cell with its marks: estimate, serving rate, busy, pooled calls, drift,
    another call."""
    tcell = time_cell(r, "~" if r.estimate else "")
    if r.estimate and tcell is not None:
        tcell += f" (est. from {r.estimate.n_measured})"
    # its time is set by the offered rate
    if _served(r):
        tcell = f"{secs(r.projected_s)} at {r.serving.headline_rate:g} req/s (serving)"  # type: ignore[union-attr]
    if tcell is not None:
        tcell += (" busy" if busy(r) else "") + (
            f" ({len(calls(r))} calls)" if len(calls(r)) > 1 else ""
        )
        tcell += f" drift {trend[0]:+.1%}/repeat" if (trend := drifted(r)) is not None else ""
    if base is not None and across_calls(r, base):
        tcell = f"{tcell} †"
    return tcell


def _row(
    r: RunResult, base: RunResult | None, metric_names: list[str], correct: str | None = None
) -> list:
    diff = recipe_diff(r.recipe, base.recipe) if base is not None and r is not base else {}
    ignored = ", ".join(k.name for k in r.knobs if k.status == "ignored")
    score = lambda m: f"{r.scores[m]:.3f}" if r.scores_meaningful else "n/a (random weights)"
    # `runner plan`'s floor of the generation time, when it made one
    floor = (r.plan or {}).get("floor_s")
    roof = (
        floor / r.timings.generate_s
        if floor and r.status == "ok" and r.timings.generate_s
        else None
    )
    th, jpt, usd = r.throughput, j_per_token(r), usd_per_m(r)
    return [
        r.name,
        f"{r.status}; ignored: {ignored}" if ignored else r.status,
        r.recipe.engine.kind,
        _time(r, base),
        None if _served(r) else _speed(r, base),
        rate_cell(r, th.requests_per_s),
        rate_cell(r, th.output_tokens_per_s),
        gib(r.memory.peak_gpu_gib),
        f"{roof:.0%}" if roof else None,
        f"{jpt:.3g}" if jpt is not None else None,
        f"${usd:.3g}" if usd is not None else None,
        _start_cell(r),
        *per_correct(r, correct),
        *(score(m) if m in r.scores else None for m in metric_names),
        diff_cell(diff) if diff else ("(baseline)" if r is base else ""),
    ]


def j_per_token(r: RunResult) -> float | None:
    return r.energy.j_per_output_token if r.energy and r.energy.measured else None


def usd_per_m(r: RunResult) -> float | None:
    return (cost_figures(r) or {}).get("usd_per_m_output_tokens")


def per_correct(r: RunResult, metric: str | None) -> list[str | None]:
    """Joules and dollars of one generation per 1,000 correct answers, counted by `metric` (its mean
    times the examples scored: a 0/1 score counts the right answers, a graded one their credit);
    None where the scores mean nothing or the run has no energy or price."""
    if metric is None or r.status != "ok" or not r.scores_meaningful or not r.scores.get(metric):
        return [None, None]
    right = r.scores[metric] * (r.n_scored or r.n_samples)
    e, dollars = r.energy, cost_figures(r) or {}
    joules = e.joules if e and e.measured and e.joules else None
    usd = (
        dollars["usd_per_gpu_hour"] / 3600 * dollars["gpus"] * r.timings.generate_s
        if dollars
        else None
    )  # type: ignore[operator]
    return [
        f"{joules / right * 1000:,.4g}" if joules else None,
        f"${usd / right * 1000:.3g}" if usd else None,
    ]


def _start_cell(r: RunResult) -> str | None:
    """The run's engine start (the median over its starts), `cold`/`warm` where the engine compiled
    or loaded its compiled graphs; None for a run on another recipe's engine or without a start."""
    if not r.timings.load_s:
        return None
    kinds = {x.start.cold for x in r.repeats if x.start is not None and x.start.cold is not None}
    mark = (
        ""
        if not kinds
        else " cold"
        if kinds == {True}
        else " warm"
        if kinds == {False}
        else " cold+warm"
    )
    return secs(r.timings.load_s) + mark


def in_order(results: Iterable[RunResult]) -> list[RunResult]:
    """The one order of a summary, however its results were read: recipes by name, a study's cells
    together in the study's own order (so `runner go` and `runner report` write the same summary;
    cells stored before that order was recorded keep the order they come in)."""
    return sorted(
        results,
        key=lambda r: (
            (r.cell.study, r.cell.index is None, r.cell.index or 0, "")
            if r.cell
            else ("", True, 0, r.name)
        ),
    )


@dataclass(frozen=True)
class Judged:
    """The runs a summary compares, in its order, with their baseline, the folder they are stored in
    (None: no samples to pair), the `--gate`, every gate's verdict (`gates(...)`) and the runs'
    samples, each run's read at most once."""

    results: list[RunResult]
    base: RunResult | None
    out: Path | None
    gate: GateSpec | None
    verdicts: dict[str, GateVerdict | str]
    samples: Samples | None


def judged(
    results: Iterable[RunResult],
    baseline: str | None = None,
    out: Path | None = None,
    gate: GateSpec | None = None,
) -> Judged:
    """The runs of a summary, in its order, with the `baseline` named (or marked) and their gates
    judged."""
    results = in_order(results)
    base, read = pick_baseline(results, baseline), out and reader(out)
    return Judged(results, base, out, gate, gates(results, base, read, gate), read)


def summary_markdown(j: Judged, extra: Sequence[Sections] = (), title: str = "Summary") -> str:
    rs, out = j.results, j.out
    note = " ".join(
        m
        for m, shown in (
            (
                "Times marked `~` are projections from a partial run (see each report).",
                any(r.estimate for r in rs),
            ),
            (
                "Scores of runs with random weights are left out of comparisons.",
                any(not r.scores_meaningful for r in rs),
            ),
        )
        if shown
    )
    return "\n".join(
        [
            *_overview(j, title),
            *(line for section in extra for line in section(rs, out)),
            *prefix_section(rs),
            *changed_answers_section(rs, j.base, j.samples),
            *gate_section(j),
            *_failures(rs),
            *(["", note] if note else []),
            "",
        ]
    )


def _overview(j: Judged, title: str) -> list[str]:
    results, base = j.results, j.base
    which = (
        f"baseline: **{base.name}**."
        if base
        else "no baseline among these recipes (a study's own summary compares its cells with the "
        "study's baseline; `--baseline NAME` picks one here)."
        if any(r.cell for r in results)
        else "no baseline (mark one with `baseline: true` or `--baseline NAME`; for one stored "
        "by another call, `runner report` compares every stored run)."
    )
    parts = [
        f"# {title}",
        "",
        f"{len(results)} recipe{'s' * (len(results) != 1)}; {which}",
        *_verdict(j),
    ]
    # in order of first appearance
    metric_names = list(dict.fromkeys(m for r in results for m in r.scores))
    if metric_names and not any(r.scores_meaningful and r.scores for r in results):
        fakes = sum(r.recipe.engine.fake for r in results)
        what = (
            "the fake engine"
            if fakes == len(results)
            else "random weights or the fake engine"
            if fakes
            else "random weights"
        )
        parts.insert(
            3, f"Scores are left out: every recipe here ran with {what} (speed and memory only)."
        )
        metric_names = []
    correct = chart_metric(results, j.gate) if metric_names else None
    rows = [_row(r, base, metric_names, correct) for r in results]
    headers = [
        "recipe",
        "status",
        "engine",
        "generation time",
        "speed-up",
        "requests/s",
        "output tok/s",
        "peak GPU",
        "roofline",
        "J / output token",
        "$ / M output tokens",
        "engine start",
        f"J / 1,000 correct ({correct})",
        f"$ / 1,000 correct ({correct})",
        *metric_names,
    ]
    notes = {
        8: "Roofline: the predicted floor of the generation time (compute, memory bandwidth or "
        "PCIe, whichever binds; `runner plan`) ÷ the measured generation time.",
        9: "J / output token: GPU energy of one generation (NVML, whole devices) ÷ its output "
        "tokens.",
        10: "$ / M output tokens: price per GPU-hour / 3600 × GPUs × generation time ÷ output "
        "tokens × 10^6.",
    }
    shown = [
        x
        for i, note in notes.items()
        if any(row[i] is not None for row in rows)
        for x in ("", note)
    ]
    # speed-up to the per-1,000-correct columns: left out where empty (CPU runs: no GPU; no counter,
    # price, start)
    table_md = table(rows, [*headers, "differs from baseline"], frozenset(headers[4:14]))
    return [*parts, "", table_md, *shown, "", _legend(j, rows)]


def _legend(j: Judged, rows: list[list]) -> str:
    """The legend of the summary table: what its times are, then each mark that shows in it."""
    results, base = j.results, j.base
    marks = {
        "`drift`: the run's repeats trended in the order measured (the least-squares slope of log "
        "time per repeat, its 95% interval excluding 0): the machine changed while it ran": any(
            drifted(r) for r in results
        ),
        "`(N calls)`: the run's repeats were measured in N `runner go` calls and pooled into one "
        "time; compare them in its report's repeats table (a machine that changed between calls "
        "shows there)": any(len(calls(r)) > 1 for r in results),
        "`(back to back)`, `(across calls)`: how the speed-up's two runs were measured when not in "
        "turns of one call: one after the other (a drift over the call lands on one of them), or "
        "in different calls": any(
            row[4] and ("(back to back)" in row[4] or "(across calls)" in row[4]) for row in rows
        ),
        "`busy`: measured while the machine was busy (load, CPU pressure or another process on the "
        "GPU: see the recipe's report)": any(busy(r) for r in results),
        "`†`: measured, wholly or in part, in another `runner go` call than the baseline; the "
        "machine may have differed": base is not None
        and any(across_calls(r, base) for r in results),
    }
    return " ".join(
        [
            LEGEND + (" Speed-up: against the baseline." if base is not None else ""),
            *(f"{m}." for m, shown in marks.items() if shown),
        ]
    )


def _verdict(j: Judged) -> list[str]:
    """The answer first: the fastest recipe (that passed its gate, where one applies), and against
    the baseline by how much and how sure; faster recipes the gate stopped are named after it."""
    base, verdicts = j.base, j.verdicts
    if not (timed := _timed(j)):
        return []
    stopped, best = stopped_by_gate(verdicts), fastest(j)
    if best is None:
        return ["", "No recipe passed its gate with a time: see the quality gate below."]
    what = "Fastest that passed its gate" if verdicts else "Fastest"
    line = f"{what}: **{best.name}**, {time_cell(best, '~' if best.estimate else '')}"
    said = base is not best and base in timed and (ratio := speedup(base, best)) is not None
    if said:
        line += f"; against the baseline {base.name}: {ratio_text(*ratio)}"  # type: ignore[union-attr]
    elif base is best:
        line += " (the baseline)"
    # (the baseline's own clause says it already)
    if tied := [(r, lo, hi) for r, lo, hi in within_noise(j, best) if not (said and r is base)]:
        line += "; not clearly faster than " + ", ".join(
            f"{r.name} ({tie_text(lo, hi)})" for r, lo, hi in tied
        )
    faster = sorted(
        (
            r
            for r in timed
            if r.projected_s < best.projected_s and speedup(best, r) and r.name in stopped
        ),
        key=lambda r: r.projected_s,  # type: ignore[arg-type, return-value]
    )
    if faster:
        word = lambda v: (
            v
            if isinstance(v, str)
            else {False: "failed", None: "too few examples to tell"}[v.passed]
        )
        line += ". Faster, but not through the gate: " + ", ".join(
            f"{r.name} ({word(verdicts[r.name])})" for r in faster
        )
    return ["", line + "."]


def within_noise(j: Judged, best: RunResult | None) -> list[tuple[RunResult, float, float]]:
    """The runs that may be named (`_timed`), not stopped by their gate, that `best` is not clearly
    faster than, with that 95% interval of their time ratio, which holds 1 (fastest first; one run
    a side gives no interval, and says so already)."""
    stopped = stopped_by_gate(j.verdicts)
    out = []
    for r in sorted(_timed(j), key=lambda r: r.projected_s):  # type: ignore[arg-type, return-value]
        if best is None or r is best or r.name in stopped or (got := speedup(r, best)) is None:
            continue
        if (lo := got[1]) is not None and (hi := got[2]) is not None and not clear(lo, hi):
            out.append((r, lo, hi))
    return out


def fastest(j: Judged) -> RunResult | None:
    """What the summary's headline names: the fastest run that may be named (`_timed`) that its gate
    did not stop."""
    stopped = stopped_by_gate(j.verdicts)
    return min(
        (r for r in _timed(j) if r.name not in stopped),
        key=lambda r: r.projected_s,  # type: ignore[arg-type, return-value]
        default=None,
    )


def _failures(results: list[RunResult]) -> list[str]:
    failed = [r for r in results if r.status != "ok"]
    if not failed:
        return []
    return [
        "",
        "## Failures",
        "",
        *(f"- **{r.name}**: {r.error}" + (f" — hint: {r.hint}" if r.hint else "") for r in failed),
    ]


def write_summary(
    results: Iterable[RunResult],
    out: Path,
    baseline: str | None = None,
    extra: Sequence[Sections] = (),
    gate: GateSpec | None = None,
) -> Path:
    j, accuracy = judged(results, baseline, out, gate), None
    doc = SummaryJson.of(j)  # every score's interval, computed once: the chart takes its own
    if metric := chart_metric(j.results, gate):
        score_ci = {
            f.name: (s.lo, s.hi)
            for f in doc.recipes
            if (s := f.scores.get(metric)) is not None and s.lo is not None and s.hi is not None
        }
        accuracy = Accuracy(metric, stopped_by_gate(j.verdicts), score_ci)
    charts = write_charts(j.results, j.base, out, accuracy)
    text = summary_markdown(j, extra)
    if charts:
        text += "\n## Charts\n\n" + "\n\n".join(f"![{c.stem}]({c.name})" for c in charts) + "\n"
    write_text_atomic(path := Path(out) / SUMMARY, text)
    write_summary_json(doc, out)
    return path


def _gate_metric(r: RunResult, j: Judged) -> str:
    return (r.recipe.gate or j.gate).metric  # type: ignore[union-attr]


class Time(BaseModel):
    """A generation time in seconds: the geometric mean over the `n` repeats (projected to the full
    dataset for an estimate) with its 95% interval (null for one repeat)."""

    s: float
    lo: float | None
    hi: float | None
    n: int
    method: str = TIME_CI
    # each measured repeat on a busy machine, what made it busy (`repeat 2: load average 3.1 ...`)
    busy: list[str] = []

    @classmethod
    def of(cls, r: RunResult) -> Time | None:
        e = estimate(r)
        return None if e is None else cls(s=e[0], lo=e[1], hi=e[2], n=len(r.times), busy=busy(r))


class Speedup(BaseModel):
    """The baseline's generation time ÷ this recipe's: the ratio of their geometric means with its
    95% interval; `verdict` `no clear difference` where the interval holds 1."""

    ratio: float
    lo: float | None
    hi: float | None
    method: Literal["paired t on log ratios (in turns)", "Welch t on log times"]
    measured: Literal["in turns", "back to back", "across calls"]
    verdict: Literal["faster", "slower", "no clear difference", "no interval"]

    @classmethod
    def of(cls, r: RunResult, base: RunResult | None) -> Speedup | None:
        if not _vs_base(r, base) or _served(r) or (got := speedup(base, r)) is None:  # type: ignore[arg-type]
            return None
        ratio, lo, hi = got
        verdict = "faster" if ratio > 1 else "slower"
        verdict = (
            "no interval" if lo is None else verdict if clear(lo, hi) else "no clear difference"
        )
        how = "paired t on log ratios (in turns)" if paired(base, r) else "Welch t on log times"  # type: ignore[arg-type]
        return cls(
            ratio=ratio, lo=lo, hi=hi, method=how, measured=compared(base, r), verdict=verdict
        )  # type: ignore[arg-type]


class Score(BaseModel):
    """A score's mean over the examples with its 95% interval (Student t; null under 30)."""

    mean: float
    lo: float | None = None
    hi: float | None = None


class Gate(BaseModel):
    """The recipe's quality gate against the baseline on their `n` paired examples (as summary.md's
    quality gate section): the `mean` difference from the baseline with its 95% interval, the
    `allowed` drop, the examples that scored lower (`fell`); `passed` null: too few examples to
    tell, or `not scored` (why not; the figures null)."""

    metric: str
    verdict: Literal["pass", "fail", "too few to tell", "not scored"]
    passed: bool | None
    why: str
    n: int | None = None
    mean: float | None = None
    lo: float | None = None
    hi: float | None = None
    allowed: float | None = None
    fell: int | None = None

    @classmethod
    def of(cls, r: RunResult, j: Judged) -> Gate | None:
        if (v := j.verdicts.get(r.name)) is None:
            return None
        if isinstance(v, str):
            return cls(metric=_gate_metric(r, j), verdict="not scored", passed=None, why=v)
        return cls(**asdict(v), verdict=GATE_WORDS[v.passed], why=v.why())  # type: ignore[arg-type]


class RecipeFigures(BaseModel):
    """One recipe's row of summary.md: `estimate`, its time projected from a partial run
    (--estimate); `speedup` null for the baseline, a failed or serving run, or one on other
    examples; `scores` empty where they mean nothing (random weights)."""

    name: str
    status: str
    engine: str
    error: str | None
    time: Time | None
    estimate: bool
    speedup: Speedup | None
    scores: dict[str, Score]
    requests_per_s: float | None
    output_tokens_per_s: float | None
    peak_gpu_gib: float | None
    j_per_output_token: float | None
    usd_per_m_output_tokens: float | None
    gate: Gate | None

    @classmethod
    def of(cls, r: RunResult, j: Judged) -> RecipeFigures:
        ci = lambda m: (j.samples and score_interval(j.samples, r, m)) or (None, None)
        scores = {m: Score(mean=v, lo=lo, hi=hi) for m, v in r.scores.items() for lo, hi in [ci(m)]}
        return cls(
            name=r.name,
            status=r.status,
            engine=r.recipe.engine.kind,
            error=r.error,
            time=Time.of(r),
            estimate=r.estimate is not None,
            speedup=Speedup.of(r, j.base),
            scores=scores if r.scores_meaningful else {},
            requests_per_s=r.throughput.requests_per_s,
            output_tokens_per_s=r.throughput.output_tokens_per_s,
            peak_gpu_gib=r.memory.peak_gpu_gib,
            j_per_output_token=j_per_token(r),
            usd_per_m_output_tokens=usd_per_m(r),
            gate=Gate.of(r, j),
        )


class SummaryJson(BaseModel):
    """summary.json, written beside every summary.md (a call's and each study's own) from the same
    functions: each recipe's figures; `fastest`, the fastest finished, timed run on the baseline's
    examples that its gate did not stop (summary.md's headline); `front`, the Pareto front over
    (generation time, `front_metric`) among the finished, timed runs with meaningful scores that
    their gate did not stop (the accuracy chart's green points); `front_metric`, the gate's score,
    else exact_match, else the first a run scored above 0 with real weights; `path`, the summary.md
    (in `--json` output only)."""

    schema_version: Literal[1] = 1
    title: str
    baseline: str | None
    fastest: str | None
    fastest_within_noise: list[str] = Field(
        default_factory=list,
        description="Runs `fastest` is not clearly faster than (the 95% interval of their time "
        "ratio holds 1): the headline names them too.",
    )
    front_metric: str | None
    front: list[str]
    recipes: list[RecipeFigures]
    path: str | None = None

    @classmethod
    def of(cls, j: Judged, title: str = "Summary") -> SummaryJson:
        metric, best = chart_metric(j.results, j.gate), fastest(j)
        on = (
            accuracy_front(j.results, Accuracy(metric, stopped_by_gate(j.verdicts)))
            if metric
            else []
        )
        return cls(
            title=title,
            baseline=j.base and j.base.name,
            fastest=best and best.name,
            fastest_within_noise=[r.name for r, *_ in within_noise(j, best)],
            front_metric=metric,
            front=[r.name for r in on],
            recipes=[RecipeFigures.of(r, j) for r in j.results],
        )


def write_summary_json(doc: SummaryJson, folder: Path) -> Path:
    """`<folder>/summary.json`."""
    text = doc.model_dump_json(indent=2)
    write_text_atomic(path := Path(folder) / SUMMARY_JSON, text + "\n")
    return path
