"""Engines. The discriminated union below is the registry: a new engine is one
module with a spec class (``kind`` literal + ``build()``) and one union member."""
from __future__ import annotations

from typing import Annotated, Union

from pydantic import Field

from runner.engines.transformers import TransformersSpec
from runner.engines.vllm import VLLMSpec

EngineSpec = Annotated[Union[TransformersSpec, VLLMSpec], Field(discriminator="kind")]

ENGINE_KINDS = ("transformers", "vllm")

__all__ = ["EngineSpec", "TransformersSpec", "VLLMSpec", "ENGINE_KINDS"]
