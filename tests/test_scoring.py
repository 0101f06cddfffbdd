"""Scores under each named convention, computed by hand, and cross-checked against the formulas
as the source projects write them (transcribed below, then compared on many random strings).

Sources (file@commit):
- JGLUE: yahoojapan/JGLUE@6f071c09316baae89c3d083a90985b4b1cb9968c
  fine-tuning/patch/transformers-4.9.2_jglue-1.3.0.patch, the hunk on transformers v4.9.2
  src/transformers/data/metrics/squad_metrics.py (normalize_answer, compute_exact, compute_f1;
  get_raw_scores keeps the golds whose normalized text is non-empty, else [""], and takes the max).
- llm-jp-eval v1.3.0 as the Swallow leaderboard runs it: swallow-llm/swallow-evaluation@
  57c4ecdf989f708a54e84235621a6afdbcc28ddb llm-jp-eval/src/llm_jp_eval/utils.py
  (get_evaluation_result, normalize) with fuzzywuzzy 0.18.0 (fuzz.py, utils.py,
  string_processing.py) and python-Levenshtein 0.21.1, pinned in llm-jp-eval/poetry.lock.
- flexeval: sbintuitions/flexeval@8a07c3cad7449e4407860af100b3a57fbdda888a
  flexeval/core/metric/char_f1.py, exact_match.py, core/string_processor/aio.py (its own tests
  tests/core/metric/test_char_f1.py pin テスト/テストです = 0.75 and "10"/"Answer: 10" = 0.33).
The llm-jp-eval and flexeval rows were also checked once against fuzzywuzzy 0.18.0 with
python-Levenshtein 0.21.1 installed (not a test dependency).
"""

from __future__ import annotations

import collections
import random
import re
import unicodedata

import pytest
from pydantic import ValidationError

from runner.scoring import (
    ALIASES,
    METRICS,
    PostProcess,
    ScoringSpec,
    conventions,
    get_metric,
    score_sample,
)


def m(name: str, pred: str, golds: list[str], gold: str | None = None) -> float:
    return METRICS[name].score(pred, golds, gold)


# ------------------------------------------------------------------ the sources, transcribed


def _src_normalize_answer(s):  # JGLUE-patched squad_metrics.normalize_answer
    def remove_articles(text):
        return text.rstrip("。")

    def white_space_fix(text):
        return " ".join(text.split())

    def remove_punc(text):
        return text

    def lower(text):
        return text.lower()

    return white_space_fix(remove_articles(remove_punc(lower(s))))


def _src_compute_f1(a_gold, a_pred):  # JGLUE-patched compute_f1 (character-based)
    gold_toks = list(_src_normalize_answer(a_gold))
    pred_toks = list(_src_normalize_answer(a_pred))
    common = collections.Counter(gold_toks) & collections.Counter(pred_toks)
    num_same = sum(common.values())
    if len(gold_toks) == 0 or len(pred_toks) == 0:
        return int(gold_toks == pred_toks)
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(pred_toks)
    recall = 1.0 * num_same / len(gold_toks)
    return (2 * precision * recall) / (precision + recall)


def _src_jglue(pred, answers):  # get_raw_scores: filter, fallback, max
    gold_answers = [a for a in answers if _src_normalize_answer(a)] or [""]
    exact = max(int(_src_normalize_answer(a) == _src_normalize_answer(pred)) for a in gold_answers)
    return exact, max(_src_compute_f1(a, pred) for a in gold_answers)


def _lcs(a, b):
    row = [0] * (len(b) + 1)
    for ca in a:
        prev = 0
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], (prev + 1 if ca == cb else max(row[j], row[j - 1]))
    return row[-1]


def _fw_ratio(s1, s2):  # fuzz.ratio: equivalence, empty, intr(100 * Levenshtein.ratio)
    if s1 == s2:
        return 100
    if len(s1) == 0 or len(s2) == 0:
        return 0
    lensum = len(s1) + len(s2)
    return round(100 * (1.0 - (lensum - 2 * _lcs(s1, s2)) / lensum))


def _fw_full_process(s):  # utils.full_process(s, force_ascii=True)
    s = s.translate({i: None for i in range(128, 256)})
    return re.sub(r"(?ui)\W", " ", s).lower().strip()


def _fw_token_sort_ratio(s1, s2):
    sorted1 = " ".join(sorted(_fw_full_process(s1).split())).strip()
    sorted2 = " ".join(sorted(_fw_full_process(s2).split())).strip()
    return _fw_ratio(sorted1, sorted2)


def _src_llmjp(output, answers):  # get_evaluation_result, gold = answers[0]
    y_pred = unicodedata.normalize("NFKC", output.split("\n\n")[0].strip())
    y_true = unicodedata.normalize("NFKC", answers[0])
    return _fw_token_sort_ratio(y_pred, y_true) / 100.0, float(y_pred == y_true)


def _src_aio(text):  # flexeval AIONormalizer.__call__
    text = unicodedata.normalize("NFKC", text.replace("～", "〜")).lower()
    text = re.sub(r"『(.*?)』", r"\1", re.sub(r"「(.*?)」", r"\1", text))
    text = text.replace("・", "").replace("=", "").replace("-", "")
    return re.sub(r"\((.*?)\)", "", re.sub(r"\s+", "", text).strip())


# ------------------------------------------------------------------ JGLUE, by hand

JGLUE_CASES = [  # pred, golds, exact match, char F1 (hand-computed; see comments)
    ("東京都", ["東京都"], 1, 1.0),
    ("東京都。", ["東京都"], 1, 1.0),  # trailing 。 stripped
    ("東京都。。", ["東京都"], 1, 1.0),  # rstrip strips them all
    ("東京都。 ", ["東京都"], 0, 6 / 7),  # rstrip runs before whitespace collapse: P 3/4, R 1
    ("東京都", ["東京"], 0, 0.8),  # P 2/3, R 1
    ("１９６４年", ["1964年"], 0, 0.2),  # no NFKC: only 年 in common, P = R = 1/5
    ("「東京」", ["東京"], 0, 2 / 3),  # brackets kept: P 2/4, R 1
    ("東京、", ["東京"], 0, 0.8),  # only a trailing 。 is stripped
    ("New  York", ["new york"], 1, 1.0),  # lower-case, collapse whitespace
    ("東京\u3000都", ["東京 都"], 1, 1.0),  # str.split() also splits the ideographic space
    ("ＡＢＣ", ["ａｂｃ"], 1, 1.0),  # Unicode lower-case of full-width letters
    ("ＡＢＣ", ["abc"], 0, 0.0),  # ... but no width folding
    # no article removal, spaces count: 12 common of 16/12
    ("the Eiffel Tower", ["Eiffel Tower"], 0, 6 / 7),
    ("", ["東京"], 0, 0.0),
    ("", ["。"], 1, 1.0),  # the gold normalizes to "": dropped, gold becomes ""
    ("東京", ["。", "東京都"], 0, 0.8),  # the empty gold is dropped, not scored
    ("東京", ["東京都", "東京"], 1, 1.0),  # max over golds
]


@pytest.mark.parametrize(("pred", "golds", "em", "f1"), JGLUE_CASES)
def test_jglue_by_hand(pred, golds, em, f1):
    assert m("jglue_exact_match", pred, golds) == em
    assert m("jglue_char_f1", pred, golds) == pytest.approx(f1)
    assert _src_jglue(pred, golds) == (em, pytest.approx(f1))


def test_jglue_gold_first():
    assert m("jglue_char_f1", "東京", ["東京都", "東京"], "first") == pytest.approx(0.8)
    assert m("jglue_exact_match", "東京", ["東京都", "東京"], "first") == 0.0


# ------------------------------------------------------------------ llm-jp-eval, by hand

LLMJP_CASES = [  # output, golds, char_f1, exact_match
    ("東京都", ["東京都"], 1.0, 1.0),
    ("東京都です", ["東京都"], 0.75, 0.0),  # Indel ratio 2*3/8
    ("東京都。", ["東京都"], 1.0, 0.0),  # full_process turns 。 into a space, stripped
    ("「東京」", ["東京"], 1.0, 0.0),
    ("１９６４年", ["1964年"], 1.0, 1.0),  # NFKC on both
    ("東京都\n\n### 入力:\n文章：", ["東京都"], 1.0, 1.0),  # cut at the first blank line
    ("  東京都  ", ["東京都"], 1.0, 1.0),  # stripped
    ("東京都\n補足", ["東京都"], 0.67, 0.0),  # "東京都 補足" vs "東京都": 2*3/9 = 66.7 -> 67
    ("Tokyo Tower", ["tower tokyo"], 1.0, 0.0),  # lower-cased, tokens sorted
    # first gold only: "二つ名 異名 通り名", 2*3/13
    ("二つ名", ["通り名、二つ名、異名", "二つ名"], 0.46, 0.0),
    ("café", ["cafe"], 0.86, 0.0),  # U+00E9 dropped: "caf" vs "cafe" = 2*3/7 -> 86
    ("x", ["xabcdefghijklmn"], 0.12, 0.0),  # 2*1/16 = 12.5 -> 12 (round half to even)
    ("xyz", ["xyzabcdefghij"], 0.38, 0.0),  # 2*3/16 = 37.5 -> 38 (round half to even)
    ("", ["東京"], 0.0, 0.0),
    ("。", ["、"], 1.0, 0.0),  # both process to "": equal strings score 100
    ("\n\n東京", ["東京"], 0.0, 0.0),  # the answer after a leading blank line is cut away
]


@pytest.mark.parametrize(("out", "golds", "f1", "em"), LLMJP_CASES)
def test_llmjp_by_hand(out, golds, f1, em):
    assert m("llmjp_char_f1", out, golds) == f1  # whole percents: exact, not approx
    assert m("llmjp_exact_match", out, golds) == em
    assert _src_llmjp(out, golds) == (f1, em)


def test_llmjp_gold_max_overrides_first():
    assert m("llmjp_char_f1", "二つ名", ["通り名、二つ名、異名", "二つ名"], "max") == 1.0
    assert m("llmjp_exact_match", "二つ名", ["通り名、二つ名、異名", "二つ名"], "max") == 1.0


# ------------------------------------------------------------------ flexeval, by hand

FLEXEVAL_CASES = [  # output, golds, char_f1, exact_match
    ("テスト", ["テストです"], 0.75, 0.0),  # flexeval's own test
    ("テスト", ["テストです", "テスト"], 1.0, 1.0),
    ("10", ["Answer: 10"], 0.33, 0.0),  # 2*2/12 = 33.3 -> 33, as in flexeval's test
    ("abcd", ["abcd", "ABCD"], 1.0, 1.0),  # flexeval CharF1 docstring
    ("efgh", ["efGH"], 0.5, 0.0),  # case-sensitive
    ("東京都。", ["東京都"], 0.86, 0.0),  # no normalization: 2*3/7 -> 86
    ("１９６４年", ["1964年"], 0.2, 0.0),  # no NFKC: 2*1/10
    (" 東京", ["東京"], 0.8, 0.0),  # whitespace counts: 2*2/5
    ("", ["東京"], 0.0, 0.0),
    ("x", ["xabcdefghijklmn"], 0.12, 0.0),
]


@pytest.mark.parametrize(("out", "golds", "f1", "em"), FLEXEVAL_CASES)
def test_flexeval_by_hand(out, golds, f1, em):
    assert m("flexeval_char_f1", out, golds) == f1
    assert m("flexeval_exact_match", out, golds) == em
    assert max(_fw_ratio(out, g) for g in golds) / 100 == f1


AIO_CASES = [  # output, golds, char_f1, exact_match (AIONormalizer on both sides)
    ("「蛹化（ようか）」", ["蛹化"], 1.0, 1.0),  # NFKC makes （） ASCII, then (…) is removed
    ("レオナルド・ダ・ヴィンチ", ["レオナルド=ダ=ヴィンチ"], 1.0, 1.0),
    ("３回", ["3回"], 1.0, 1.0),
    ("Apple", ["apple"], 1.0, 1.0),
    ("さまぁ～ず", ["さまぁ〜ず"], 1.0, 1.0),
    ("hyper text markup", ["hypertextmarkup"], 1.0, 1.0),
    ("東京都。", ["東京都"], 0.86, 0.0),  # 。 is not removed
]


@pytest.mark.parametrize(("out", "golds", "f1", "em"), AIO_CASES)
def test_flexeval_normalized_by_hand(out, golds, f1, em):
    assert m("flexeval_char_f1_normalized", out, golds) == f1
    assert m("flexeval_exact_match_normalized", out, golds) == em
    assert max(_fw_ratio(_src_aio(out), _src_aio(g)) for g in golds) / 100 == f1


# ------------------------------------------------------------------ the runner's own (unchanged)

RUNNER_CASES = [  # pred, golds, exact_match, char_f1, contains
    ("東京都", ["東京"], 0.0, 0.8, 1.0),
    ("「東京」。", ["東京"], 1.0, 1.0, 1.0),  # punctuation removed
    ("１９６４年", ["1964年"], 1.0, 1.0, 1.0),  # NFKC
    ("京東", ["東京"], 0.0, 1.0, 0.0),  # bag of characters
    ("あああ", ["あ"], 0.0, 0.5, 1.0),  # multiplicity: P 1/3, R 1
    ("", ["東京"], 0.0, 0.0, 0.0),
    ("", ["。"], 1.0, 1.0, 0.0),  # both empty after normalization
    ("大阪", ["東京", "大阪府"], 0.0, 0.8, 0.0),  # max over golds
    ("東京", [], 0.0, 0.0, 0.0),  # no gold answers
]


@pytest.mark.parametrize(("pred", "golds", "em", "f1", "contains"), RUNNER_CASES)
def test_runner_metrics_unchanged(pred, golds, em, f1, contains):
    for prefix in ("", "runner_"):
        assert m(f"{prefix}exact_match", pred, golds) == em
        assert m(f"{prefix}char_f1", pred, golds) == pytest.approx(f1)
        assert m(f"{prefix}contains", pred, golds) == contains
    # old call form: metric(pred, golds)
    assert METRICS["char_f1"](pred, golds) == pytest.approx(f1)


# ------------------------------------------------------------------ cross-check on random strings

_ALPHABET = list("東京都大阪府二つ名。、「」『』（）()・=-ー 　\n\tabcABCé１２３123年!?.,:：") + [
    "\n\n",
    "回答:",
]


def _random_text(rng: random.Random, n: int = 10) -> str:
    return "".join(rng.choice(_ALPHABET) for _ in range(rng.randint(0, n)))


def test_random_strings_agree_with_transcribed_sources():
    rng = random.Random(16)
    for _ in range(3000):
        pred, golds = _random_text(rng), [_random_text(rng) for _ in range(rng.randint(1, 3))]
        em, f1 = _src_jglue(pred, golds)
        assert m("jglue_exact_match", pred, golds) == em
        assert m("jglue_char_f1", pred, golds) == pytest.approx(f1)
        assert (m("llmjp_char_f1", pred, golds), m("llmjp_exact_match", pred, golds)) == _src_llmjp(
            pred, golds
        )
        assert m("flexeval_char_f1", pred, golds) == max(_fw_ratio(pred, g) for g in golds) / 100
        assert (
            m("flexeval_char_f1_normalized", pred, golds)
            == max(_fw_ratio(_src_aio(pred), _src_aio(g)) for g in golds) / 100
        )


# ------------------------------------------------------------------ post-processing

POSTPROCESS_CASES = [  # settings, output, what the metrics see
    ({}, " 東京都\n", " 東京都\n"),  # nothing by default
    ({"cut_at": ["\n\n"]}, "東京都\n\n### 入力:", "東京都"),
    ({"cut_at": ["\n", "。"]}, "東京都。です\nX", "東京都"),  # the earliest stop wins
    ({"strip_prefixes": ["回答:"]}, "回答：東京", "東京"),  # full-width colon
    ({"strip_prefixes": ["答え:"]}, "  答え:  東京", "東京"),  # leading and following space
    ({"strip_prefixes": ["Answer:"]}, "ANSWER：Tokyo", "Tokyo"),  # case-insensitive
    ({"strip_prefixes": ["回答:"]}, "東京 回答: x", "東京 回答: x"),  # only at the start
    ({"strip_prefixes": ["答え:", "回答:"]}, "答え: 回答: 東京", "回答: 東京"),  # one label only
    ({"strip_prefixes": ["Answer", "Answer:"]}, "Answer: Tokyo", "Tokyo"),  # the longest label
    ({"strip": True}, "  東京 \n", "東京"),
    ({"cut_at": ["\n\n"], "strip_prefixes": ["回答:"], "strip": True}, "回答: 東京 \n\n次", "東京"),
]


@pytest.mark.parametrize(("settings", "out", "seen"), POSTPROCESS_CASES)
def test_postprocess(settings, out, seen):
    assert PostProcess(**settings).apply(out) == seen


def test_postprocess_rejects_empty_strings():
    with pytest.raises(ValidationError):
        PostProcess(cut_at=[""])
    with pytest.raises(ValidationError):
        PostProcess(strip_prefixes=[""])


# ------------------------------------------------------------------ score_sample and ScoringSpec


def test_score_sample_default_is_the_metrics_alone():
    names = ["char_f1", "jglue_char_f1", "llmjp_char_f1", "flexeval_char_f1"]
    got = score_sample(" 東京都です", ["東京都", "東京"], names, ScoringSpec())
    assert got == {n: METRICS[n](" 東京都です", ["東京都", "東京"]) for n in names}
    # " 東京都です" vs "東京": 2*2/8 = 50; vs "東京都": 2*3/9 -> 67
    assert got["flexeval_char_f1"] == 0.67
    assert got["llmjp_char_f1"] == 0.75  # stripped, first gold only


def test_score_sample_strips_answer_labels_before_every_metric():
    names = ["jglue_exact_match", "llmjp_char_f1", "flexeval_exact_match"]
    plain = score_sample("回答：東京都", ["東京都"], names, ScoringSpec())
    assert plain == {"jglue_exact_match": 0.0, "llmjp_char_f1": 0.67, "flexeval_exact_match": 0.0}
    spec = ScoringSpec(postprocess=PostProcess(strip_prefixes=["回答:"]))
    assert score_sample("回答：東京都", ["東京都"], names, spec) == dict.fromkeys(names, 1.0)


def test_score_sample_gold_policy_overrides_every_convention():
    golds = ["通り名、二つ名、異名", "二つ名"]
    names = ["llmjp_char_f1", "jglue_char_f1"]
    assert score_sample("二つ名", golds, names, ScoringSpec()) == {
        "llmjp_char_f1": 0.46,
        "jglue_char_f1": 1.0,
    }
    assert score_sample("二つ名", golds, names, ScoringSpec(gold="max"))["llmjp_char_f1"] == 1.0
    first = score_sample("二つ名", golds, names, ScoringSpec(gold="first"))
    # P 1, R 3/10
    assert first["jglue_char_f1"] == pytest.approx(2 * (3 / 3) * (3 / 10) / (3 / 3 + 3 / 10))


def test_score_sample_keeps_the_names_given():
    got = score_sample("東京", ["東京都"], ["char_f1", "runner_char_f1"], ScoringSpec())
    assert got == {"char_f1": pytest.approx(0.8), "runner_char_f1": pytest.approx(0.8)}


def test_score_sample_unknown_metric():
    with pytest.raises(ValueError, match="jsquad_f1"):
        score_sample("東京", ["東京"], ["jsquad_f1"], ScoringSpec())


def test_scoring_spec_is_strict_and_frozen():
    with pytest.raises(ValidationError):
        ScoringSpec(gold="all")
    with pytest.raises(ValidationError):
        ScoringSpec.model_validate({"postprocess": {"cut": ["\n"]}})
    spec = ScoringSpec.model_validate(
        {"gold": "first", "postprocess": {"cut_at": ["\n\n"], "strip": True}}
    )
    assert spec.gold == "first" and spec.postprocess.cut_at == ["\n\n"]
    with pytest.raises(ValidationError):
        spec.gold = "max"


# ------------------------------------------------------------------ conventions as data


def test_every_metric_names_its_convention():
    expected = {
        "runner": "max",
        "JGLUE": "max",
        "llm-jp-eval": "first",
        "flexeval": "max",
        "flexeval+AIO": "max",
    }
    expected |= {"SQuAD v1.1": "max", "runner on SQuAD": "max"}
    seen = set()
    for name, metric in METRICS.items():
        c = metric.convention
        assert expected[c.name] == c.gold and c.formula
        if not c.source.startswith("runner/"):  # another project's formula: its file at a commit
            assert re.search(r"github\.com/.+/blob/[0-9a-f]{40}/", c.source), name
        seen.add(c.name)
    assert seen == set(expected)
    assert set(ALIASES) == {"exact_match", "char_f1", "contains"}
    assert all(METRICS[a] is METRICS[t] for a, t in ALIASES.items())


def test_conventions_for_a_report():
    got = conventions(["char_f1", "llmjp_char_f1", "jglue_char_f1"])
    assert {n: c.name for n, c in got.items()} == {
        "char_f1": "runner",
        "llmjp_char_f1": "llm-jp-eval",
        "jglue_char_f1": "JGLUE",
    }
    assert got["llmjp_char_f1"].gold == "first"
    assert (got["jglue_char_f1"].name, got["jglue_char_f1"].gold) == ("JGLUE", "max")
    assert get_metric("char_f1").name == "runner_char_f1"
