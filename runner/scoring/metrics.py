"""Scores, looked up by name; every score names its convention (whose formula, from which source).

"JSQuAD char-F1" means three different formulas in the tools people compare against, so each
metric here carries a `Convention`: a short name, a one-line formula, the source (file@commit)
and its default gold policy (`max` over all gold answers, or `first` answer only).

Conventions and metric names (a score in [0, 1] per sample; a run reports the mean):

runner (this project; the names `exact_match`, `char_f1`, `contains` are kept for old recipes,
  `runner_*` are the same metrics under unambiguous names)
  normalize = NFKC, lower-case, drop whitespace and punctuation; EM = equality, char F1 = F1 over
  the bag of characters, contains = normalized gold is a substring of the normalized prediction;
  max over golds.
JGLUE (`jglue_exact_match`, `jglue_char_f1`): the dataset's own evaluation, SQuAD v1.1's
  `squad_metrics.py` as patched by JGLUE: normalize = lower-case, strip trailing `。`, collapse
  whitespace (no NFKC, no punctuation removal); F1 over the bag of characters (spaces count);
  golds whose normalized text is empty are dropped (none left: the gold is ""); max over golds.
llm-jp-eval (`llmjp_exact_match`, `llmjp_char_f1`): v1.3.0, the version the Swallow leaderboard
  runs: pred = NFKC(output.split("\\n\\n")[0].strip()), gold = NFKC(first answer);
  char_f1 = fuzzywuzzy `token_sort_ratio(pred, gold) / 100`, i.e. with fuzzywuzzy's default
  processing (drop U+0080..U+00FF, non-word characters to spaces, lower-case, tokens sorted) and
  the Levenshtein (Indel) ratio rounded to a whole percent; exact_match = pred == gold.
flexeval (`flexeval_char_f1`, `flexeval_exact_match`): `fuzz.ratio(output, gold) / 100` (Indel
  ratio, whole percent, no normalization) and string equality; max over golds.
flexeval+AIO (`flexeval_char_f1_normalized`, `flexeval_exact_match_normalized`): the same after
  flexeval's `AIONormalizer` on both sides.
SQuAD v1.1 (`squad_exact_match`, `squad_f1`): the official evaluation script (evaluate-v1.1.py):
  normalize = lower-case, drop ASCII punctuation, the articles a/an/the become spaces, collapse
  whitespace; EM = equality; F1 over the bags of whitespace tokens (0 when none are shared);
  max over golds. `squad_contains` (this project, for models that answer in sentences): the
  normalized gold's tokens appear, in order and adjacent, among the normalized prediction's tokens.

fuzzywuzzy is not needed: its `ratio` with python-Levenshtein installed (as both llm-jp-eval
v1.3.0 and flexeval pin) is `Levenshtein.ratio`, i.e. rapidfuzz's `Indel.normalized_similarity`,
rounded with `int(round(100 * r))` (Python's round-half-to-even), with two guards applied first:
equal strings score 100, then an empty string scores 0.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from rapidfuzz.distance import Indel

from .normalize import (
    aio_normalize,
    jglue_normalize,
    nfkc,
    runner_normalize,
    sorted_tokens,
    squad_normalize,
)

GoldPolicy = Literal["max", "first"]


@dataclass(frozen=True)
class Convention:
    """Whose formula a score follows: reports print this next to every score."""

    name: str
    formula: str
    source: str
    gold: GoldPolicy


Pair = Callable[[str, str], float]


def _em(norm: Callable[[str], str] = str, norm_gold: Callable[[str], str] | None = None) -> Pair:
    return lambda pred, gold: float(norm(pred) == (norm_gold or norm)(gold))


def _bag_f1(p: list[str], g: list[str]) -> float:
    """F1 over two bags of items (0 when none is shared)."""
    common = sum((Counter(p) & Counter(g)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(p), common / len(g)
    return 2 * precision * recall / (precision + recall)


def _f1(norm: Callable[[str], str]) -> Pair:
    """F1 over the bags of characters of norm(pred) and norm(gold); SQuAD's rule: 1 if both are
    empty, else 0."""

    def f1(pred: str, gold: str) -> float:
        p, g = list(norm(pred)), list(norm(gold))
        return _bag_f1(p, g) if p and g else float(p == g)

    return f1


def _squad_f1(pred: str, gold: str) -> float:
    """evaluate-v1.1.py `f1_score`: F1 over the bags of normalized whitespace tokens (v1.1 has no
    rule for two empty answers: no shared token scores 0)."""
    return _bag_f1(squad_normalize(pred).split(), squad_normalize(gold).split())


def _squad_contains(pred: str, gold: str) -> float:
    p, g = squad_normalize(pred).split(), squad_normalize(gold).split()
    return float(bool(g) and any(p[i : i + len(g)] == g for i in range(len(p) - len(g) + 1)))


def _ratio(norm: Callable[[str], str] = str) -> Pair:
    return lambda pred, gold: fuzzywuzzy_ratio(norm(pred), norm(gold)) / 100


def _contains(pred: str, gold: str) -> float:
    g = runner_normalize(gold)
    return float(bool(g) and g in runner_normalize(pred))


def fuzzywuzzy_ratio(a: str, b: str) -> int:
    """fuzzywuzzy 0.18.0 `fuzz.ratio` with python-Levenshtein: decorators `check_for_equivalence`
    then `check_empty_string`, then `intr(100 * Levenshtein.ratio(a, b))`."""
    if a == b:
        return 100
    if not a or not b:
        return 0
    return round(100 * Indel.normalized_similarity(a, b))  # intr(n) = int(round(n)): half to even


def llmjp_prediction(output: str) -> str:
    """llm-jp-eval v1.3.0: `normalize(output.split("\\n\\n")[0].strip())` with normalize = NFKC."""
    return nfkc(output.split("\n\n")[0].strip())


def _llmjp_char_f1(pred: str, gold: str) -> float:
    # fuzz.token_sort_ratio -> _token_sort(partial=False): full_process + sort both, then fuzz.ratio
    return fuzzywuzzy_ratio(sorted_tokens(llmjp_prediction(pred)), sorted_tokens(nfkc(gold))) / 100


def _jglue_golds(golds: Sequence[str]) -> list[str]:
    """JGLUE `get_raw_scores`: golds that normalize to "" are dropped; none left means the gold is
    ""."""
    return [g for g in golds if jglue_normalize(g)] or [""]


@dataclass(frozen=True)
class Metric:
    """One named score: a (prediction, gold) function, the convention it follows, and how its golds
    are prepared. Calling it as `metric(pred, golds)` scores with the convention's gold policy."""

    name: str
    pair: Pair
    convention: Convention
    prepare_golds: Callable[[Sequence[str]], list[str]] = list

    def score(self, pred: str, golds: Sequence[str], gold: GoldPolicy | None = None) -> float:
        """`gold`: `max` over all answers or the `first` answer; None = the convention's own."""
        chosen = self.prepare_golds(golds)
        if (gold or self.convention.gold) == "first":
            chosen = chosen[:1]
        return max((self.pair(pred, g) for g in chosen), default=0.0)

    def __call__(self, pred: str, golds: Sequence[str]) -> float:
        return self.score(pred, golds)


_FLEXEVAL = "https://github.com/sbintuitions/flexeval/blob/8a07c3cad7449e4407860af100b3a57fbdda888a/flexeval/"
#: Each convention's source and default gold policy; the formula is per metric (see `_METRICS`).
_FAMILIES: dict[str, tuple[str, GoldPolicy]] = {
    "runner": ("runner/scoring/normalize.py (this project)", "max"),
    "JGLUE": (
        "https://github.com/yahoojapan/JGLUE/blob/6f071c09316baae89c3d083a90985b4b1cb9968c/fine-tuning/patch/"
        "transformers-4.9.2_jglue-1.3.0.patch (patch of transformers v4.9.2 "
        "src/transformers/data/metrics/squad_metrics.py: normalize_answer, compute_exact, "
        "compute_f1, get_raw_scores)",
        "max",
    ),
    "llm-jp-eval": (
        "https://github.com/swallow-llm/swallow-evaluation/blob/57c4ecdf989f708a54e84235621a6afdbcc28ddb/"
        "llm-jp-eval/src/llm_jp_eval/utils.py (llm-jp-eval v1.3.0 as run by the Swallow "
        "leaderboard: get_evaluation_result, normalize; fuzzywuzzy 0.18.0 + python-Levenshtein "
        "0.21.1 per its poetry.lock)",
        "first",
    ),
    "flexeval": (f"{_FLEXEVAL}core/metric/char_f1.py and exact_match.py", "max"),
    "flexeval+AIO": (
        f"{_FLEXEVAL}core/string_processor/aio.py (AIONormalizer) with core/metric/char_f1.py",
        "max",
    ),
    "SQuAD v1.1": (
        "https://github.com/huggingface/evaluate/blob/b6e7c3b0ed02444f1b3f4f1eb48a39f27af321ec/metrics/squad/"
        "compute_score.py (the official evaluate-v1.1.py: normalize_answer, exact_match_score, "
        "f1_score, metric_max_over_ground_truths)",
        "max",
    ),
    "runner on SQuAD": (
        "runner/scoring/metrics.py (this project) with SQuAD v1.1's normalize_answer",
        "max",
    ),
}
_RUNNER_NORM = "norm = NFKC, lower-case, no whitespace or punctuation"
_RUNNER_F1 = f"F1 over the bags of characters of norm(pred) and norm(gold), {_RUNNER_NORM}"
_JGLUE_NORM = (
    "norm = lower-case, rstrip '。', collapse whitespace (no NFKC); golds with empty norm dropped"
)
_JGLUE_F1 = (
    f"F1 over the bags of characters (spaces count) of norm(pred) and norm(gold), {_JGLUE_NORM}"
)
_LLMJP_PRED = "NFKC(output cut at the first '\\n\\n', stripped)"
_AIO = (
    "AIONormalizer on both (NFKC, lower-case, 「」『』 unwrapped, ・ = - and whitespace and "
    "(…) removed)"
)
_FUZZ = "fuzzywuzzy ratio(output, gold) / 100"
_SQUAD_NORM = (
    "norm = lower-case, no ASCII punctuation, articles a/an/the removed, whitespace collapsed"
)


def _metric(name: str, pair: Pair, family: str, formula: str) -> Metric:
    source, gold = _FAMILIES[family]
    # JGLUE alone drops the golds that normalize to ""
    golds = _jglue_golds if family == "JGLUE" else list
    return Metric(name, pair, Convention(family, formula, source, gold), golds)


_METRICS = [
    _metric(
        "runner_exact_match",
        _em(runner_normalize),
        "runner",
        f"norm(pred) == norm(gold), {_RUNNER_NORM}",
    ),
    _metric(
        "runner_char_f1",
        _f1(runner_normalize),
        "runner",
        f"{_RUNNER_F1} (not JGLUE's, not llm-jp-eval's char_f1)",
    ),
    _metric(
        "runner_contains",
        _contains,
        "runner",
        f"norm(gold) is a non-empty substring of norm(pred), {_RUNNER_NORM}",
    ),
    _metric(
        "jglue_exact_match",
        _em(jglue_normalize),
        "JGLUE",
        f"norm(pred) == norm(gold), {_JGLUE_NORM}",
    ),
    _metric("jglue_char_f1", _f1(jglue_normalize), "JGLUE", _JGLUE_F1),
    _metric(
        "llmjp_exact_match",
        _em(llmjp_prediction, nfkc),
        "llm-jp-eval",
        f"{_LLMJP_PRED} == NFKC(gold)",
    ),
    _metric(
        "llmjp_char_f1",
        _llmjp_char_f1,
        "llm-jp-eval",
        f"fuzzywuzzy token_sort_ratio({_LLMJP_PRED}, NFKC(gold)) / 100: lower-case, non-word "
        "characters to spaces, tokens sorted, Indel ratio in whole percents",
    ),
    _metric("flexeval_exact_match", _em(), "flexeval", "output == gold (no normalization)"),
    _metric(
        "flexeval_char_f1",
        _ratio(),
        "flexeval",
        f"{_FUZZ}: Indel ratio in whole percents, no normalization",
    ),
    _metric(
        "flexeval_exact_match_normalized",
        _em(aio_normalize),
        "flexeval+AIO",
        f"output == gold after {_AIO}",
    ),
    _metric(
        "flexeval_char_f1_normalized",
        _ratio(aio_normalize),
        "flexeval+AIO",
        f"{_FUZZ} after {_AIO}",
    ),
    _metric(
        "squad_exact_match",
        _em(squad_normalize),
        "SQuAD v1.1",
        f"norm(pred) == norm(gold), {_SQUAD_NORM}",
    ),
    _metric(
        "squad_f1",
        _squad_f1,
        "SQuAD v1.1",
        "F1 over the bags of whitespace tokens of norm(pred) and norm(gold) (0 when none shared), "
        f"{_SQUAD_NORM}",
    ),
    _metric(
        "squad_contains",
        _squad_contains,
        "runner on SQuAD",
        "the tokens of norm(gold) appear in order and adjacent among those of norm(pred) (for "
        f"answers written as sentences; an empty norm(gold) scores 0), {_SQUAD_NORM}",
    ),
]

#: Names kept for recipes written before conventions were named; they are the runner's metrics.
ALIASES = {
    "exact_match": "runner_exact_match",
    "char_f1": "runner_char_f1",
    "contains": "runner_contains",
}

METRICS: dict[str, Metric] = {m.name: m for m in _METRICS}
METRICS.update({alias: METRICS[target] for alias, target in ALIASES.items()})


def get_metric(name: str) -> Metric:
    try:
        return METRICS[name]
    except KeyError:
        raise ValueError(f"unknown metric {name!r}; known: {', '.join(sorted(METRICS))}") from None


def conventions(names: Sequence[str]) -> dict[str, Convention]:
    """The convention of each named metric, for reports (`{name: Convention}`)."""
    return {n: get_metric(n).convention for n in names}
