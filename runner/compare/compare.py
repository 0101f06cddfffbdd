"""Two sets of stored runs side by side. A side is a `runner go --out` folder (its */results.json)
or one run folder (results.json in it, such as a run's replaced/<time>-<key>/ copy); recipes are
matched by name (two run folders: whatever their names). Per recipe: NEW/OLD generation time with
its 95% interval, each score's paired difference over the examples both stored, the outputs that
changed, verdicts in words, and the conditions a CI exits on."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from runner.base.dotted import flat_dotted, get_dotted
from runner.base.errors import RunnerError
from runner.base.format import short
from runner.base.stats import MIN_PAIRED, PAIRED_CI, TIME_CI, mcnemar_exact, paired_interval
from runner.folder import RunFolder, load_results, load_samples, read_result
from runner.report.markdown import cost_figures
from runner.report.spread import estimate, ratio_text, speedup
from runner.report.summary import signed
from runner.results import RunResult
from runner.run.resume import NOT_IN_KEY

VERSIONS = ("packages.vllm", "packages.torch", "packages.transformers")
VERSIONS += ("driver", "gpu", "runner", "git_commit")
NO_PAIRS = "no recipe has scores on both sides to pair (the fake engine's and random weights' are "
NO_PAIRS += "not comparable): leave --fail-on-drop out"
NOT_SCORED = "; scores not comparable (random weights or the fake engine)"
USD = "usd_per_m_output_tokens"
SIDE = "name a `runner go --out` folder, or one run folder with results.json in it"
METHOD = [
    f"Time: each side's generation time is {TIME_CI}. NEW/OLD is the ratio of the two with its 95% "
    "interval by Welch's t on the log times across calls (t on the turns' log ratios where the two "
    "took turns in one call); an interval that holds 1 is no clear difference; one run on a side "
    "has no interval and is never clearly slower or faster.",
    "Scores: each metric's paired difference NEW − OLD over the examples both sides stored "
    f"(paired by id), with a 95% interval ({PAIRED_CI}); only where both runs' scores mean "
    "something (not random weights or the fake engine). A 0/1 metric adds the examples now right "
    "and now wrong and the exact McNemar test on them.",
    "Energy (J per output token) and dollars (per million output tokens): old -> new, where both "
    "runs have them.",
]


class Score(BaseModel):
    """One metric over the examples both sides scored (paired by id): `difference`, the mean of NEW
    − OLD, with its 95% interval `low`–`high` (null under 30 examples); a 0/1 metric adds the
    examples `now_right` (0 in OLD, 1 in NEW) and `now_wrong`, and the exact McNemar p on them."""

    metric: str
    paired: int
    difference: float
    low: float | None
    high: float | None
    now_right: int | None
    now_wrong: int | None
    mcnemar_p: float | None
    words: str


class Pair(BaseModel):
    """One recipe on both sides: the `settings` (recipe settings, input files' hashes, example
    count) and `versions` that differ, as `old -> new` (no settings: the same workload); each
    side's generation time (s: the geometric mean of its repeats and its 95% interval), NEW/OLD
    `ratio` with its 95% interval `low`–`high` (null with one run on a side; no ratio: a failed run
    or not the same examples) and its verdict `time`; the examples stored on both sides
    (`paired`), those whose output differs (`changed`), each score and the answers' verdict; energy
    (J per output token) and dollars (per million output tokens), old and new, where both have
    them."""

    name: str
    old_name: str
    settings: dict[str, str]
    versions: dict[str, str]
    old_s: tuple[float, float | None, float | None] | None
    new_s: tuple[float, float | None, float | None] | None
    ratio: float | None
    low: float | None
    high: float | None
    time: str
    paired: int
    changed: int
    scores: list[Score]
    j_per_output_token: tuple[float, float] | None
    usd_per_m_output_tokens: tuple[float, float] | None
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
    pairs = [pair(*a[x], *b[y]) for x, y in names]
    return Comparison(
        old=str(old),
        new=str(new),
        matched="two run folders: whatever their names" if one_a and one_b else "by name",
        only_old=[x for x in a if x not in {x for x, _ in names}],
        only_new=[y for y in b if y not in {y for _, y in names}],
        differs=sorted({f"{k} {v}" for p in pairs for k, v in p.versions.items()}),
        recipes=pairs,
        method=METHOD,
    )


def differ(a: dict, b: dict) -> dict[str, str]:
    return {k: f"{short(a.get(k))} -> {short(b.get(k))}" for k in a | b if a.get(k) != b.get(k)}


def workload(r: RunResult) -> dict:
    """What the run did, as dotted keys: the recipe less what changes nothing it produces, the
    hashes of its input files and its example count."""
    recipe = {k: v for k, v in r.recipe.canonical().items() if k not in {*NOT_IN_KEY, "name"}}
    inputs = r.environment.get("inputs", {})
    return flat_dotted({**recipe, "inputs": inputs, "examples": r.n_samples})


def pair(a: RunResult, fa: RunFolder, b: RunResult, fb: RunFolder) -> Pair:
    failed = [f"failed in {s}" for s, r in (("old", a), ("new", b)) if r.status != "ok"]
    ratio, lo, hi = (None if failed else speedup(b, a)) or (None, None, None)  # time(new)/time(old)
    olds, news = ({s["id"]: s for s in load_samples(f)} for f in (fa, fb))
    ids = [i for i in news if i in olds]
    changed = sum(news[i]["output"] != olds[i]["output"] for i in ids)
    scored = a.scores_meaningful and b.scores_meaningful
    scores = [s for m in b.scores if scored and m in a.scores and (s := score(m, olds, news, ids))]
    words = ", ".join([f"answers changed: {changed:,} of {len(ids):,}", *(s.words for s in scores)])
    answers = words if changed else "same answers" if ids else "no samples on both sides"
    both = lambda f: None if None in (f(a), f(b)) else (f(a), f(b))
    env = lambda r: {k: get_dotted(r.environment, k) for k in VERSIONS}
    return Pair(
        name=b.name,
        old_name=a.name,
        settings=differ(workload(a), workload(b)),
        versions=differ(env(a), env(b)),
        old_s=estimate(a),
        new_s=estimate(b),
        ratio=ratio,
        low=lo,
        high=hi,
        time=(failed or [time_words(ratio, lo, hi)])[0],
        paired=len(ids),
        changed=changed,
        scores=scores,
        j_per_output_token=both(lambda r: r.energy and r.energy.j_per_output_token),
        usd_per_m_output_tokens=both(lambda r: (cost_figures(r) or {}).get(USD)),
        answers=answers + ("" if scored else NOT_SCORED),
    )


def time_words(ratio: float | None, lo: float | None, hi: float | None) -> str:
    """`clearly slower: 1.23× (1.10–1.38)` (NEW/OLD time), `clearly faster: 1.25× (1.10–1.41)` (the
    speed-up), `no clear difference (0.95–1.08×)`, `slower: 1.23× (1 run: no interval)`."""
    if ratio is None:
        return "not the same examples: no time ratio"
    if lo is not None and hi is not None and lo <= 1 <= hi:
        return ratio_text(ratio, lo, hi)
    slower = ratio >= 1
    text = ratio_text(*((ratio, lo, hi) if slower else (1 / ratio, hi and 1 / hi, lo and 1 / lo)))
    return f"{'clearly ' * (lo is not None)}{'slower' if slower else 'faster'}: {text}"


def score(m: str, olds: dict, news: dict, ids: list) -> Score | None:
    """Metric `m`'s paired difference NEW − OLD over the examples both sides scored."""
    ids = [i for i in ids if m in olds[i] and m in news[i]]
    if not ids:
        return None
    d = [news[i][m] - olds[i][m] for i in ids]
    mean, lo, hi = paired_interval(d) or (sum(d) / len(d), None, None)
    binary = any(w in m for w in ("exact_match", "contains"))  # a 0/1 metric
    right, wrong = (sum(x > 0 for x in d), sum(x < 0 for x in d)) if binary else (None, None)
    few = f"too few examples to tell: n={len(d)}; {MIN_PAIRED} needed"
    return Score(
        metric=m,
        paired=len(d),
        difference=mean,
        low=lo,
        high=hi,
        now_right=right,
        now_wrong=wrong,
        mcnemar_p=None if right is None else mcnemar_exact(right, wrong),  # type: ignore[arg-type]
        words=f"{m} {signed(mean)} ({few if lo is None else f'{signed(lo)} to {signed(hi)}'})",
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


def gates(c: Comparison, pct: float | None, drop: str | None) -> tuple[list[str], list[str]]:
    """`--fail-on-slower PCT` and `--fail-on-drop METRIC:DROP`: the conditions that fail, and the
    recipes a condition cannot fail, in words."""
    if pct is not None and not pct >= 0:
        hint = "PCT is how much slower, in percent, fails: e.g. --fail-on-slower 10"
        raise RunnerError(f"{pct:g} is below 0", field="--fail-on-slower", hint=hint)
    metric, limit = parse_drop(drop, c) if drop is not None else (None, 0.0)
    fails, cannot = [], []
    for p in c.recipes:
        if pct is not None and p.low is None:
            cannot.append(f"{p.name}: {p.time}: --fail-on-slower cannot fail it")
        elif pct is not None and p.low > 1 + pct / 100:  # type: ignore[operator]
            bound = f"the lower end {p.low:.3f} is above {1 + pct / 100:g}"
            fails.append(f"--fail-on-slower {pct:g}: {p.name} is {p.time}; {bound}")
        s = next((s for s in p.scores if s.metric == metric), None)
        if metric and (s is None or s.high is None):
            why = s.words if s else f"no paired {metric}"
            cannot.append(f"{p.name}: {why}: --fail-on-drop cannot fail it")
        elif s and s.high < -limit:  # type: ignore[operator]
            bound = f"the upper end {signed(s.high)} is below -{limit:g}"  # type: ignore[arg-type]
            fails.append(f"--fail-on-drop {drop}: {p.name}: {s.words}; {bound}")
    return fails, cannot
