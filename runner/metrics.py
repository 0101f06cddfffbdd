"""Scores, looked up by name. Each is the max over all gold answers.

Normalization (both prediction and gold): Unicode NFKC (full-width ASCII and
digits become half-width), lower-case, strip, then remove whitespace and
punctuation (ASCII and Japanese: 、。「」『』・ etc.). This follows the JGLUE/
JSQuAD evaluation convention of character-level comparison, where Japanese has
no word boundaries.
"""
from __future__ import annotations

import unicodedata
from collections import Counter
from functools import lru_cache
from typing import Callable, Sequence

_PUNCT_EXTRA = set("、。，．・「」『』【】（）〔〕［］｛｝〈〉《》〜～！？：；…‥―\u3000")


@lru_cache(maxsize=4096)    # else a prediction is normalized again for every gold and metric
def normalize(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).lower().strip()
    return "".join(ch for ch in text if not ch.isspace() and ch not in _PUNCT_EXTRA
                   and not unicodedata.category(ch).startswith("P"))


def _em(pred: str, gold: str) -> float:
    return float(normalize(pred) == normalize(gold))


def _char_f1(pred: str, gold: str) -> float:
    p, g = list(normalize(pred)), list(normalize(gold))
    if not p and not g:
        return 1.0
    if not p or not g:
        return 0.0
    common = sum((Counter(p) & Counter(g)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(p), common / len(g)
    return 2 * precision * recall / (precision + recall)


def _contains(pred: str, gold: str) -> float:
    g = normalize(gold)
    return float(bool(g) and g in normalize(pred))


def best_over_golds(fn: Callable[[str, str], float]) -> Callable[[str, Sequence[str]], float]:
    def score(pred: str, golds: Sequence[str]) -> float:
        return max((fn(pred, g) for g in golds), default=0.0)
    score.__doc__ = fn.__doc__
    return score


METRICS: dict[str, Callable[[str, Sequence[str]], float]] = {
    "exact_match": best_over_golds(_em),
    "char_f1": best_over_golds(_char_f1),
    "contains": best_over_golds(_contains),
}
