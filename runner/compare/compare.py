"""Two sets of stored runs side by side. A side is a `runner go --out` folder (its */results.json)
or one run folder (results.json in it, such as a run's replaced/<time>-<key>/ copy); recipes are
matched by name (two run folders: whatever their names). Per recipe: the speed-up with its 95%
interval, each score's paired difference over the examples both stored, the outputs that
changed, verdicts in words, and the conditions a CI exits on."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel

from runner.base.dotted import flat_dotted, get_dotted
from runner.base.errors import RunnerError
from runner.base.format import short
from runner.base.stats import PAIRED_CI, TIME_CI, mcnemar_exact
from runner.folder import RunFolder, load_results, load_samples, read_result
from runner.report.spread import ratio_text, why_no_ratio
from runner.report.summary import (
    Score,
    Speedup,
    Time,
    j_per_token,
    paired_verdict,
    signed,
    usd_per_m,
)
from runner.results import RunResult
from runner.run.resume import NOT_IN_KEY

VERSIONS = (
    "packages.vllm",
    "packages.torch",
    "packages.transformers",
    "driver",
    "gpu",
    "runner",
    "git_commit",
)
NO_PAIRS = (
    "no recipe has scores on both sides to pair (the fake engine's and random weights' are not "
    "comparable): leave --fail-on-drop out"
)
SIDE = "name a `runner go --out` folder, or one run folder with results.json in it"
METHOD = [
    f"Time: each side's generation time is {TIME_CI}. The speed-up is OLD's time ÷ NEW's with its "
    "95% interval by Welch's t on the log times across calls (t on the turns' log ratios where the "
    "two took turns in one call); slower is said as NEW/OLD time; an interval that holds 1 is no "
    "clear difference; one run on a side has no interval and no verdict.",
    "Scores: each metric's paired difference NEW − OLD over the examples both sides stored "
    f"(paired by id), with a 95% interval ({PAIRED_CI}); only where both runs' scores mean "
    "something (not random weights or the fake engine). A metric scored 0 or 1 adds the examples "
    "now right and now wrong and the exact McNemar test on them.",
    "Energy (J per output token) and dollars (per million output tokens): old -> new, where both "
    "runs have them.",
]


class Change(Score):
    """A metric's paired difference NEW − OLD over the `n` examples both sides scored (by id): its
    mean with the 95% interval (null under 30 examples); where every score is 0 or 1, the examples
    `now_right` (0 in OLD, 1 in NEW) and `now_wrong`, and the exact McNemar p on them."""

    metric: str
    n: int
    now_right: int | None
    now_wrong: int | None
    mcnemar_p: float | None
    words: str


class OldNew(BaseModel):
    """A figure of each side."""

    old: float
    new: float


class Pair(BaseModel):
    """One recipe on both sides: the `settings` (recipe settings, input files' hashes, example
    count) and `versions` that differ, as `old -> new` (no settings: the same workload); each
    side's status and generation time; `speedup`, OLD's time ÷ NEW's (above 1: NEW is faster;
    null: a failed run or no ratio, `time` says why) and `time`, its verdict in words; the examples
    stored on both sides (`paired`), those whose output differs (`changed`; null where none are
    paired), each score's change and the answers' verdict; energy (J per output token) and
    dollars (per million output tokens) where both have them."""

    name: str
    old_name: str
    old_status: str  # each side's run: ok or failed
    new_status: str
    settings: dict[str, str]
    versions: dict[str, str]
    old_time: Time | None
    new_time: Time | None
    speedup: Speedup | None
    time: str
    paired: int
    changed: int | None
    scores: list[Change]
    j_per_output_token: OldNew | None
    usd_per_m_output_tokens: OldNew | None
    answers: str


class Comparison(BaseModel):
    """compare.json (`runner compare OLD NEW`): how recipes were matched, those on one side only,
    the versions that differ over every pair, each pair, and the method in words."""

    old: str
    new: str
    matched: str
    only_old: list[str]
    only_new: list[str]
    differs: list[str]
    recipes: list[Pair]
    # recipes whose two sides are one run (same run key, start, end and status): no difference by
    # construction (a copy, or a later call that skipped the run as unchanged)
    same_runs: list[str] = []
    # the --fail-on conditions asked, those that hold (exit 1), and the recipes a condition given
    # cannot fail
    gates: list[str] = []
    failed: list[str] = []
    cannot_fail: list[str] = []
    method: list[str]


def side(path: Path) -> tuple[dict[str, tuple[RunResult, RunFolder]], bool]:
    """A side's runs by name, and whether it is one run folder."""
    if not path.is_dir():
        raise RunnerError("no such folder", file=str(path), hint=SIDE)
    if (one := RunFolder(path)).results.exists():
        if (r := read_result(one)) is None:
            why, hint = "not a valid results.json", "rerun that recipe, or name another folder"
            raise RunnerError(why, file=str(one.results), hint=hint)
        return {r.name: (r, one)}, True
    runs = {r.name: (r, RunFolder.of(path, r.name)) for r in load_results(path)}
    if not runs:
        raise RunnerError("no results.json here, nor in */results.json", file=str(path), hint=SIDE)
    return runs, False


def compare(old: Path, new: Path) -> Comparison:
    (a, one_a), (b, one_b) = side(old), side(new)
    names = [(x, y) for x in a for y in b if x == y or one_a and one_b]
    if not names:
        why = f"no recipe is on both sides (old: {', '.join(a)}; new: {', '.join(b)})"
        hint = "name two run folders (OLD/NAME NEW/NAME) to compare them whatever their names"
        raise RunnerError(why, hint=hint)
    if Path(old).resolve() == Path(new).resolve():
        hint = "name as NEW the --out folder of the call you want to compare with OLD"
        raise RunnerError(f"OLD and NEW are the same folder ({old}): nothing to compare", hint=hint)
    run = lambda r: (r.run_key, r.started_at, r.finished_at, r.status)
    pairs = [pair(*a[x], *b[y]) for x, y in names]
    # the same run on both sides (a copy, or a call that skipped it as unchanged): said, as it can
    # show no difference
    same = [y for x, y in names if run(a[x][0]) == run(b[y][0])]
    # its repeats on both sides are not two samples: no interval, no verdict
    none = {"time": "the same run on both sides (nothing measured anew)", "speedup": None}
    pairs = [p.model_copy(update=none) if p.name in same else p for p in pairs]
    return Comparison(
        old=str(old),
        new=str(new),
        matched="two run folders: whatever their names" if one_a and one_b else "by name",
        only_old=[x for x in a if x not in {x for x, _ in names}],
        only_new=[y for y in b if y not in {y for _, y in names}],
        differs=sorted({f"{k} {v}" for p in pairs for k, v in p.versions.items()}),
        recipes=pairs,
        same_runs=same,
        method=METHOD,
    )


def differ(a: dict, b: dict) -> dict[str, str]:
    return {k: f"{short(a.get(k))} -> {short(b.get(k))}" for k in a | b if a.get(k) != b.get(k)}


def workload(r: RunResult) -> dict:
    """What the run did, as dotted keys: the recipe less what changes nothing it produces, the
    hashes of its input files and its example count."""
    recipe = {k: v for k, v in r.recipe.canonical().items() if k not in {*NOT_IN_KEY, "name"}}
    inputs = r.environment.get("inputs", {})
    n = r.estimate.n_total if r.estimate else r.n_samples  # an estimate stands for its whole
    return flat_dotted({**recipe, "inputs": inputs, "examples": n})


def _workloads(a: RunResult, b: RunResult) -> tuple[dict, dict]:
    """Both runs' workloads; the example count only where both ran (a failed run's count of
    samples says nothing of what it was asked)."""
    wa, wb = workload(a), workload(b)
    if "failed" in (a.status, b.status):
        wa.pop("examples", None), wb.pop("examples", None)
    return wa, wb


def pair(a: RunResult, fa: RunFolder, b: RunResult, fb: RunFolder) -> Pair:
    olds, news = ({s["id"]: s for s in load_samples(f)} for f in (fa, fb))
    ids = [i for i in news if i in olds]
    changed = sum(news[i]["output"] != olds[i]["output"] for i in ids)
    scored = a.scores_meaningful and b.scores_meaningful
    scores = [s for m in b.scores if scored and m in a.scores and (s := change(m, olds, news, ids))]
    words = ", ".join([f"answers changed: {changed:,} of {len(ids):,}", *(s.words for s in scores)])
    answers = words if changed else "same answers" if ids else "no samples to pair"
    fake = "a fake engine" if a.recipe.engine.fake or b.recipe.engine.fake else "random weights"
    both = lambda f: None if None in (f(a), f(b)) else OldNew(old=f(a), new=f(b))
    env = lambda r: {k: get_dotted(r.environment, k) for k in VERSIONS}
    return Pair(
        name=b.name,
        old_name=a.name,
        old_status=a.status,
        new_status=b.status,
        settings=differ(*_workloads(a, b)),
        versions=differ(env(a), env(b)),
        old_time=Time.of(a),
        new_time=Time.of(b),
        speedup=(s := Speedup.of(b, a)),
        time=time_words(s, a, b),
        paired=len(ids),
        changed=changed if ids else None,
        scores=scores,
        j_per_output_token=both(j_per_token),
        usd_per_m_output_tokens=both(usd_per_m),
        answers=answers + ("" if scored else f"; scores not comparable ({fake})"),
    )


def time_words(s: Speedup | None, a: RunResult, b: RunResult) -> str:
    """`clearly slower: 1.23× (1.10–1.38)` (NEW/OLD time), `clearly faster: 1.25× (1.10–1.41)` (the
    speed-up), `no clear difference (0.95–1.08×)`, `no verdict: 1.23× slower (1 run: no interval)`,
    or why there is no ratio."""
    if s is None:
        failed = [f"failed in {w}" for w, r in (("old", a), ("new", b)) if r.status != "ok"]
        why = why_no_ratio(a, b) or "no time, or a serving run"
        return (failed or [f"no time ratio: {why}"])[0]
    est = [
        f"{side} projected from {r.estimate.n_measured:,} of {r.estimate.n_total:,} examples"
        for side, r in (("OLD", a), ("NEW", b))
        if r.estimate
    ]
    said = f" (~: {', '.join(est)})" if est else ""
    if s.verdict in ("faster", "slower"):
        got = (s.ratio, s.lo, s.hi) if s.verdict == "faster" else (1 / s.ratio, 1 / s.hi, 1 / s.lo)  # type: ignore[operator]
        return f"clearly {s.verdict}: {ratio_text(*got)}{said}"
    return ("no verdict: " if s.lo is None else "") + ratio_text(s.ratio, s.lo, s.hi) + said


def change(m: str, olds: dict, news: dict, ids: list) -> Change | None:
    """Metric `m`'s paired difference NEW − OLD over the examples both sides scored."""
    ids = [i for i in ids if m in olds[i] and m in news[i]]
    if not ids:
        return None
    v = paired_verdict(m, d := [news[i][m] - olds[i][m] for i in ids])
    binary = {x[i][m] for x in (olds, news) for i in ids} <= {0, 1}
    right, wrong = (sum(x > 0 for x in d), v.fell) if binary else (None, None)
    return Change(
        metric=m,
        n=v.n,
        mean=v.mean,
        lo=v.lo,
        hi=v.hi,
        now_right=right,
        now_wrong=wrong,
        mcnemar_p=None if right is None else mcnemar_exact(right, wrong),  # type: ignore[arg-type]
        words=f"{m} {v.interval_text()}",
    )


def parse_drop(text: str, c: Comparison) -> tuple[str, float]:
    """`--fail-on-drop METRIC:DROP`, of a metric some recipe has paired scores of."""
    metric, _, num = text.partition(":")
    scored = sorted({s.metric for p in c.recipes for s in p.scores})
    hint = f"paired scores here: {', '.join(scored)}" if scored else NO_PAIRS
    try:
        drop = float(num)
    except ValueError:
        drop = -1.0
    if not metric or not 0 <= drop <= 1:
        why = f"{text!r} is not METRIC:DROP (DROP a number from 0 to 1)"
        raise RunnerError(why, field="--fail-on-drop", hint=f"e.g. squad_f1:0.01; {hint}")
    if metric not in scored:
        why = f"no recipe has paired scores of {metric!r}"
        raise RunnerError(why, field="--fail-on-drop", hint=hint)
    return metric, drop


def asked_gates(pct: float | None, drops: Sequence[str] = ()) -> list[str]:
    """The --fail-on conditions given, as the call wrote them."""
    slower = [f"--fail-on-slower {pct:g}"] if pct is not None else []
    return slower + [f"--fail-on-drop {d}" for d in drops]


def gates(
    c: Comparison, pct: float | None, drops: Sequence[str] = ()
) -> tuple[list[str], list[str]]:
    """`--fail-on-slower PCT` and each `--fail-on-drop METRIC:DROP`: the conditions that fail, and
    the recipes a condition cannot fail, in words."""
    if pct is not None and not 0 <= pct < math.inf:
        hint = "PCT is how much slower, in percent, fails: e.g. --fail-on-slower 10"
        raise RunnerError(
            f"{pct:g} is not a finite percent: no run is slower by more than it, so the gate "
            "could never fail"
            if pct == math.inf
            else f"{pct:g} is not a percent at or above 0",
            field="--fail-on-slower",
            hint=hint,
        )
    limits = [(d, *parse_drop(d, c)) for d in drops]
    fails, cannot = [], []
    for p in c.recipes:
        if (pct is not None or limits) and p.new_status != "ok" and p.old_status == "ok":
            gated = (("slower", pct is not None), ("drop", bool(limits)))
            which = " and ".join(f"--fail-on-{w}" for w, on in gated if on)
            fails.append(f"{which}: {p.name} failed in new (a failed run shows no time or score)")
            continue
        if p.name in c.same_runs:  # one run: nothing to gate
            what = asked_gates(pct, drops)
            cannot += [f"{p.name}: the same run on both sides: {w} cannot fail it" for w in what]
            continue
        hi = p.speedup and p.speedup.hi  # NEW/OLD time's lower end: 1 / hi
        if pct is not None and not hi:
            cannot.append(f"{p.name}: {p.time}: --fail-on-slower cannot fail it")
        elif pct is not None and 1 / hi > 1 + pct / 100:  # type: ignore[operator]
            bound = f"NEW/OLD time's lower end {1 / hi:.3f} is above {1 + pct / 100:g}"  # type: ignore[operator]
            fails.append(f"--fail-on-slower {pct:g}: {p.name} is {p.time}; {bound}")
        for drop, metric, limit in limits:
            s = next((s for s in p.scores if s.metric == metric), None)
            if s is None or s.hi is None:
                why = s.words if s else f"no paired {metric}"
                cannot.append(f"{p.name}: {why}: --fail-on-drop {drop} cannot fail it")
            elif s.hi < -limit:
                bound = f"the upper end {signed(s.hi)} is below -{limit:g}"
                fails.append(f"--fail-on-drop {drop}: {p.name}: {s.words}; {bound}")
    return fails, cannot
