"""SQuAD v1.1 scoring against the official evaluation script's formulas (evaluate-v1.1.py), written
out here as that script writes them, on hand-picked cases and on XQuAD's own golds."""

from __future__ import annotations

import json
import random
import re
import string
from collections import Counter
from pathlib import Path

import pytest

from runner.scoring.metrics import METRICS, get_metric

SHARED = Path(__file__).resolve().parents[2] / "shared"
XQUAD = SHARED / "data" / "xquad" / "xquad.en.json"


# ---- evaluate-v1.1.py, as published (the reference; not the code under test) ----
def normalize_answer(s):
    def remove_articles(text):
        return re.sub(r"\b(a|an|the)\b", " ", text)

    def white_space_fix(text):
        return " ".join(text.split())

    def remove_punc(text):
        exclude = set(string.punctuation)
        return "".join(ch for ch in text if ch not in exclude)

    def lower(text):
        return text.lower()

    return white_space_fix(remove_articles(remove_punc(lower(s))))


def f1_score(prediction, ground_truth):
    prediction_tokens = normalize_answer(prediction).split()
    ground_truth_tokens = normalize_answer(ground_truth).split()
    common = Counter(prediction_tokens) & Counter(ground_truth_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(prediction_tokens)
    recall = 1.0 * num_same / len(ground_truth_tokens)
    f1 = (2 * precision * recall) / (precision + recall)
    return f1


def exact_match_score(prediction, ground_truth):
    return normalize_answer(prediction) == normalize_answer(ground_truth)


def metric_max_over_ground_truths(metric_fn, prediction, ground_truths):
    scores_for_ground_truths = []
    for ground_truth in ground_truths:
        score = metric_fn(prediction, ground_truth)
        scores_for_ground_truths.append(score)
    return max(scores_for_ground_truths)


# ---- end of the reference ----

CASES = [
    ("Paris", ["Paris"]),
    ("The capital of France is Paris.", ["Paris", "Paris, France"]),
    ("the Eiffel Tower", ["Eiffel Tower"]),
    ("An apple a day", ["apple"]),
    ("theory", ["the"]),  # `the` inside a word is no article
    ("", ["Denver Broncos"]),
    ("Denver Broncos", [""]),
    ("   ", ["  "]),  # both normalize to nothing: v1.1 scores F1 0 (v2.0 would score 1), EM 1
    # bag of tokens: repeats count once per gold token
    ("Broncos Broncos Broncos", ["Denver Broncos"]),
    ("1,000 people", ["1000 people"]),  # the comma is punctuation and goes
    ("café", ["cafe"]),  # no Unicode folding in v1.1
    ("“Super Bowl L”", ['"Super Bowl L"']),  # curly quotes are not ASCII punctuation
    ("Santa Clara, California", ["Levi's Stadium", "Santa Clara", "Santa Clara, California"]),
]


@pytest.mark.parametrize(("pred", "golds"), CASES)
def test_squad_metrics_equal_the_official_formulas(pred, golds):
    assert METRICS["squad_exact_match"](pred, golds) == float(
        metric_max_over_ground_truths(exact_match_score, pred, golds)
    )
    assert METRICS["squad_f1"](pred, golds) == pytest.approx(
        metric_max_over_ground_truths(f1_score, pred, golds)
    )


def test_known_values():
    f1 = METRICS["squad_f1"]
    assert f1("The capital of France is Paris.", ["Paris"]) == pytest.approx(
        2 * (1 / 5) * 1 / (1 / 5 + 1)
    )
    assert f1("   ", ["  "]) == 0.0 and METRICS["squad_exact_match"]("   ", ["  "]) == 1.0
    assert METRICS["squad_exact_match"]("the Eiffel Tower!", ["Eiffel Tower"]) == 1.0


def test_contains_is_a_whole_token_match():
    c = METRICS["squad_contains"]
    assert c("It was played in Santa Clara, California.", ["Santa Clara"]) == 1.0
    # a substring of a word is no match (runner_contains would match)
    assert c("Parisian cafes", ["Paris"]) == 0.0
    assert c("Clara Santa", ["Santa Clara"]) == 0.0  # in order
    assert c("anything", ["the"]) == 0.0  # a gold that normalizes to nothing never matches
    assert METRICS["runner_contains"]("Parisian cafes", ["Paris"]) == 1.0


def test_conventions_are_named():
    for name in ("squad_exact_match", "squad_f1"):
        conv = get_metric(name).convention
        assert (
            conv.name == "SQuAD v1.1" and conv.gold == "max" and "evaluate-v1.1.py" in conv.source
        )
    assert get_metric("squad_contains").convention.name == "runner on SQuAD"


@pytest.mark.skipif(not XQUAD.is_file(), reason="../shared/data/xquad is not here")
def test_agrees_with_the_official_formulas_on_xquad_golds():
    """Predictions made from XQuAD's own contexts (the gold, a window around it, a wrong span, a
    sentence) score as the official script scores them, for all 1,190 questions."""
    data = json.loads(XQUAD.read_text(encoding="utf-8"))
    rng, n = random.Random(0), 0
    for par in (p for art in data["data"] for p in art["paragraphs"]):
        ctx = par["context"]
        for qa in par["qas"]:
            golds = [a["text"] for a in qa["answers"]]
            start = qa["answers"][0]["answer_start"]
            a, b = max(0, start - rng.randint(0, 30)), start + len(golds[0]) + rng.randint(0, 30)
            for pred in (
                golds[0],
                ctx[a:b],
                ctx[rng.randint(0, len(ctx) - 1) :][:40],
                f"The answer is {golds[0]}.",
            ):
                assert METRICS["squad_exact_match"](pred, golds) == float(
                    metric_max_over_ground_truths(exact_match_score, pred, golds)
                )
                assert METRICS["squad_f1"](pred, golds) == pytest.approx(
                    metric_max_over_ground_truths(f1_score, pred, golds)
                )
                n += 1
    assert n == 4 * 1190
