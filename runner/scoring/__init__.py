"""How a recipe scores: post-processing of the model output, then the gold policy, then each metric.

    scoring:
      gold: first                  # or max; unset = each metric's own convention
      postprocess:
        cut_at: ["\\n\\n"]
        strip_prefixes: ["回答:", "答え:", "Answer:"]

Post-processing runs once, before every metric; each metric then applies its own normalization and
names its convention (formula and source, file@commit: see `runner.scoring.metrics`). Nothing is
post-processed by default, so the scores of a recipe without `scoring` are those of the metrics
alone.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

from pydantic import Field, field_validator

from runner.base.types import StrictModel

from .metrics import ALIASES, METRICS, conventions, get_metric
from .normalize import runner_normalize as normalize

__all__ = [
    "ALIASES",
    "METRICS",
    "PostProcess",
    "ScoringSpec",
    "conventions",
    "get_metric",
    "normalize",
    "score_sample",
]


class PostProcess(StrictModel):
    """Clean-up of the model output before any metric sees it."""

    cut_at: list[str] = Field(
        default_factory=list,
        description="Keep only the text before the first occurrence "
        'of any of these strings (e.g. `"\\n\\n"`, `"\\n"`).',
    )
    strip_prefixes: list[str] = Field(
        default_factory=list,
        description="Labels removed from the start of the output (after leading whitespace), with "
        "the whitespace after them, e.g. `回答:`, `答え:`, `Answer:`. Case-insensitive; a `:` also "
        "matches the full-width `：`. At most one label is removed (the longest that matches).",
    )
    strip: bool = Field(
        False, description="Strip leading and trailing whitespace (after cutting and labels)."
    )

    @field_validator("cut_at", "strip_prefixes")
    @classmethod
    def _non_empty(cls, v: list[str]) -> list[str]:
        if "" in v:
            raise ValueError("an empty string cuts or strips nothing; remove it")
        return v

    def apply(self, text: str) -> str:
        for stop in self.cut_at:
            text = text.split(stop, 1)[0]
        if self.strip_prefixes:  # the longest label first; `:` matches the full-width `：` too
            one = lambda label: "".join("[:：]" if ch in ":：" else re.escape(ch) for ch in label)
            alternatives = "|".join(
                one(lb) for lb in sorted(self.strip_prefixes, key=len, reverse=True)
            )
            text = re.sub(rf"^\s*(?:{alternatives})\s*", "", text, count=1, flags=re.IGNORECASE)
        return text.strip() if self.strip else text


class ScoringSpec(StrictModel):
    """How outputs are scored against the gold answers."""

    gold: Literal["max", "first"] | None = Field(
        None,
        description="Which gold answers count: `max` = the best score over all answers, `first` = "
        "the first answer only. Unset: each metric's own convention (JGLUE, flexeval and the "
        "runner's metrics take `max`; llm-jp-eval takes `first`).",
    )
    postprocess: PostProcess = Field(
        default_factory=PostProcess, description="Clean-up of the model output before any metric."
    )


def score_sample(
    pred: str, golds: Sequence[str], metrics: list[str], spec: ScoringSpec
) -> dict[str, float]:
    """Post-process `pred` once, then score it with each named metric under `spec.gold`
    (or each metric's own gold policy). Keys are the names as given (aliases stay aliases)."""
    chosen = [get_metric(m) for m in metrics]  # unknown names fail before any work
    text = spec.postprocess.apply(pred)
    return {name: m.score(text, golds, spec.gold) for name, m in zip(metrics, chosen, strict=True)}
