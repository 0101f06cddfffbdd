"""Scores computed by hand: character-level F1 and exact match after JGLUE-style normalization."""

from __future__ import annotations

import pytest

from runner.scoring import METRICS, normalize

em = METRICS["exact_match"]
f1 = METRICS["char_f1"]
contains = METRICS["contains"]


def test_metric_names():
    assert {"exact_match", "char_f1", "contains"} <= set(METRICS)  # the original names keep working


# --------------------------------------------------------------------------- char_f1 by hand


def test_char_f1_partial_overlap():
    # pred 東京都 (3 chars), gold 東京 (2 chars): common 2, P = 2/3, R = 1
    expected = 2 * (2 / 3 * 1) / (2 / 3 + 1)
    assert expected == pytest.approx(0.8)
    assert f1("東京都", ["東京"]) == pytest.approx(0.8)
    # symmetric case: P = 1, R = 2/3
    assert f1("東京", ["東京都"]) == pytest.approx(0.8)


def test_char_f1_counts_multiplicity():
    # あああ vs あ: common 1 (not 3), P = 1/3, R = 1 -> 0.5
    assert f1("あああ", ["あ"]) == pytest.approx(0.5)
    # ああい vs あい: common 2, P = 2/3, R = 1 -> 0.8
    assert f1("ああい", ["あい"]) == pytest.approx(0.8)


def test_char_f1_order_insensitive_bag_of_characters():
    assert f1("京東", ["東京"]) == pytest.approx(1.0)
    assert em("京東", ["東京"]) == 0.0


def test_char_f1_no_overlap_and_exact():
    assert f1("大阪", ["東京"]) == 0.0
    assert f1("小笠原諸島", ["小笠原諸島"]) == 1.0


def test_char_f1_hand_computed_longer():
    # pred 小笠原諸島を除く日本 (10 chars), gold 小笠原諸島 (5 chars): common 5, P = 1/2, R = 1 ->
    # 2/3
    assert f1("小笠原諸島を除く日本", ["小笠原諸島"]) == pytest.approx(2 / 3)


# --------------------------------------------------------------------------- max over golds


def test_max_over_golds():
    assert f1("東京都", ["大阪", "東京", "東京都"]) == 1.0
    assert f1("東京都", ["大阪", "東京"]) == pytest.approx(0.8)
    assert em("b", ["a", "b", "c"]) == 1.0
    assert em("d", ["a", "b", "c"]) == 0.0
    # order of golds does not matter
    assert f1("東京都", ["東京", "大阪"]) == f1("東京都", ["大阪", "東京"])


def test_no_golds_scores_zero():
    assert em("x", []) == 0.0
    assert f1("x", []) == 0.0
    assert contains("x", []) == 0.0


# --------------------------------------------------------------------------- normalization


def test_nfkc_fullwidth_equals_halfwidth():
    assert normalize("ＡＢＣ１") == "abc1"
    assert em("ＡＢＣ１", ["abc1"]) == 1.0
    assert em("ABC1", ["ａｂｃ１"]) == 1.0
    assert f1("ＡＢＣ１", ["abc1"]) == 1.0


def test_halfwidth_katakana_normalized():
    assert em("ｹｰｷ", ["ケーキ"]) == 1.0


def test_case_and_whitespace():
    assert em("  Tokyo ", ["TOKYO"]) == 1.0
    assert em("滋賀 県", ["滋賀県"]) == 1.0
    assert em("滋賀\u3000県", ["滋賀県"]) == 1.0


@pytest.mark.parametrize(
    "pred", ["滋賀県。", "「滋賀県」", "滋賀県、", "『滋賀県』", "滋賀県!", "滋賀県．", "(滋賀県)"]
)
def test_punctuation_removed(pred):
    assert em(pred, ["滋賀県"]) == 1.0
    assert f1(pred, ["滋賀県"]) == 1.0


def test_middle_dot_removed():
    assert em("レオナルド・ダ・ヴィンチ", ["レオナルドダヴィンチ"]) == 1.0


def test_long_vowel_mark_is_kept():
    assert normalize("ケーキ") == "ケーキ"
    assert em("ケーキ", ["ケキ"]) == 0.0
    # ケ, キ shared; ー is an extra character: P = 2/3, R = 1 -> 0.8
    assert f1("ケーキ", ["ケキ"]) == pytest.approx(0.8)


def test_digits_and_letters_kept():
    assert normalize("第3回") == "第3回"
    assert em("3", ["4"]) == 0.0


# --------------------------------------------------------------------------- empty prediction


def test_empty_prediction_scores_zero():
    assert em("", ["滋賀県"]) == 0.0
    assert f1("", ["滋賀県"]) == 0.0
    assert contains("", ["滋賀県"]) == 0.0


def test_punctuation_only_prediction_scores_zero():
    assert em("。", ["滋賀県"]) == 0.0
    assert f1("「」、", ["滋賀県"]) == 0.0


# --------------------------------------------------------------------------- contains


def test_contains():
    assert contains("答えは滋賀県です。", ["滋賀県"]) == 1.0
    assert contains("答えは滋賀です", ["滋賀県"]) == 0.0
    assert contains("ＡＢＣ", ["abc"]) == 1.0
    # an empty (after normalization) gold never counts as contained
    assert contains("anything", ["。"]) == 0.0
