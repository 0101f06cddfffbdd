"""Engines. `ENGINES` is the registry: a new engine is one module with a spec class (a `kind`
literal, its fields, `build()` and the class facts of `EngineSpecBase`) and one entry in this tuple.
The recipe's discriminated union, the allowed kinds, error messages, the reference, reports and the
environment record are all derived from it."""

from __future__ import annotations

from typing import Annotated, Union

from pydantic import Field

from runner.base.types import EngineSpecBase
from runner.engines.fake import FakeSpec
from runner.engines.transformers import TransformersSpec
from runner.engines.vllm import VLLMSpec

ENGINES: tuple[type[EngineSpecBase], ...] = (TransformersSpec, VLLMSpec, FakeSpec)
EngineSpec = Annotated[Union[ENGINES], Field(discriminator="kind")]  # type: ignore[valid-type]  # noqa: UP007
ENGINE_KINDS: tuple[str, ...] = tuple(e.kind_name() for e in ENGINES)


def spec_class(kind: object) -> type[EngineSpecBase] | None:
    return next((e for e in ENGINES if e.kind_name() == kind), None)


def engine_packages() -> tuple[str, ...]:
    return tuple(dict.fromkeys(p for e in ENGINES for p in e.packages))
