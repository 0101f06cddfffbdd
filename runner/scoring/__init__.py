"""Scoring: named metrics that each carry their convention, and the recipe's scoring settings.

`runner.scoring.metrics` documents every convention (formula and source, file@commit);
`runner.scoring.spec` holds `ScoringSpec` (gold policy, output post-processing) and `score_sample`.
"""

from __future__ import annotations

from .metrics import ALIASES, METRICS, Convention, GoldPolicy, Metric, conventions, get_metric
from .normalize import runner_normalize as normalize
from .spec import ANSWER_LABELS, PostProcess, ScoringSpec, postprocess, score_sample

__all__ = [
    "ALIASES",
    "ANSWER_LABELS",
    "METRICS",
    "Convention",
    "GoldPolicy",
    "Metric",
    "PostProcess",
    "ScoringSpec",
    "conventions",
    "get_metric",
    "normalize",
    "postprocess",
    "score_sample",
]
