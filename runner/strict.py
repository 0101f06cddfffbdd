"""The base of every configuration model: strict, frozen, documented."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """Unknown keys are errors; instances are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=False)
