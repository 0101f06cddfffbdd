"""Text normalizations, one per scoring convention, each written as its source writes it; the
sources (file@commit) are in `runner.scoring.metrics`, on each metric's `Convention`."""

from __future__ import annotations

import re
import string
import unicodedata
from functools import lru_cache

_PUNCT_EXTRA = set("、。，．・「」『』【】（）〔〕［］｛｝〈〉《》〜～！？：；…‥―\u3000")
# fuzzywuzzy's `asciidammit` on Python 3: drop U+0080..U+00FF
_LATIN1 = dict.fromkeys(range(128, 256))
_NON_WORD = re.compile(r"(?ui)\W")


@lru_cache(maxsize=4096)  # else a prediction is normalized again for every gold and metric
def runner_normalize(text: str) -> str:
    """The runner's own: NFKC (full-width ASCII and digits become half-width), lower-case, strip,
    then drop whitespace and punctuation (Unicode category P plus common Japanese marks)."""
    text = unicodedata.normalize("NFKC", text).lower().strip()
    return "".join(
        ch
        for ch in text
        if not (ch.isspace() or ch in _PUNCT_EXTRA or unicodedata.category(ch)[0] == "P")
    )


def jglue_normalize(s: str) -> str:
    """JGLUE's patched SQuAD `normalize_answer`:
    `white_space_fix(remove_articles(remove_punc(lower(s))))` where `remove_punc` is a no-op and
    `remove_articles` is `rstrip("。")` (no NFKC).

    The order matters: the trailing `。` is stripped *before* whitespace is collapsed, so `"東京。
    "` keeps its `。` (the string ends with a space when `rstrip` runs)."""
    return " ".join(s.lower().rstrip("。").split())


def fuzzywuzzy_full_process(s: str) -> str:
    """fuzzywuzzy 0.18.0 `full_process(s, force_ascii=True)`, the default processing inside
    `fuzz.token_sort_ratio` (what llm-jp-eval's char_f1 calls): drop U+0080..U+00FF (so `é`
    vanishes, while kana and kanji stay), replace every non-word character (`\\W`: punctuation,
    symbols, whitespace) with a space, lower-case, strip."""
    return _NON_WORD.sub(" ", s.translate(_LATIN1)).lower().strip()


def sorted_tokens(s: str) -> str:
    """fuzzywuzzy `_process_and_sort` after `full_process`: whitespace tokens, sorted, joined by a
    space."""
    return " ".join(sorted(fuzzywuzzy_full_process(s).split())).strip()


def nfkc(text: str) -> str:
    return unicodedata.normalize("NFKC", text)


def aio_normalize(text: str) -> str:
    """flexeval `AIONormalizer` (after the AI王 official scorer): `～`→`〜`, NFKC, lower-case,
    unwrap 「…」 and 『…』, drop `・ = -`, drop all whitespace, then drop `(…)` with its content
    (after NFKC, full-width （） are ASCII)."""
    text = nfkc(text.replace("～", "〜")).lower()
    text = re.sub(r"『(.*?)』", r"\1", re.sub(r"「(.*?)」", r"\1", text))
    text = re.sub(r"\s+", "", text.replace("・", "").replace("=", "").replace("-", "")).strip()
    return re.sub(r"\((.*?)\)", "", text)


_SQUAD_PUNCT = set(string.punctuation)
_SQUAD_ARTICLES = re.compile(r"\b(a|an|the)\b")


def squad_normalize(s: str) -> str:
    """SQuAD v1.1's official `normalize_answer`:
    `white_space_fix(remove_articles(remove_punc(lower(s))))`, where punctuation is ASCII
    `string.punctuation` and the articles `a`, `an`, `the` become spaces (whole words only)."""
    s = "".join(ch for ch in s.lower() if ch not in _SQUAD_PUNCT)
    return " ".join(_SQUAD_ARTICLES.sub(" ", s).split())
