"""The recipe's `load:` section: the request rates, arrival process and SLOs of a serving run."""

from __future__ import annotations

import itertools
import math
from typing import Any

from pydantic import Field, NonNegativeInt, PositiveInt, field_serializer, field_validator

from runner.strict import StrictModel

SLO_METRICS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")
MAX_SEED = 2**32 - 1  # numpy's legacy RandomState (what vllm bench serve seeds) takes 0..2**32-1
MAX_REQUESTS = 10_000_000
_NUMBER_OR_INF = {"anyOf": [{"type": "number", "exclusiveMinimum": 0}, {"const": "inf"}]}


def _rates_schema(schema: dict[str, Any]) -> None:
    schema["items"] = dict(_NUMBER_OR_INF)
    schema.pop("type", None)
    schema["anyOf"] = [{"type": "array", "minItems": 1}, _NUMBER_OR_INF]


def _burstiness_schema(schema: dict[str, Any]) -> None:
    schema.pop("type", None)
    schema.pop("exclusiveMinimum", None)
    schema.update(_NUMBER_OR_INF)


_INF_WORDS = ("inf", ".inf", "+inf", "infinity")


def _as_float(v: Any) -> float | None:
    """A number, or `inf` written as a string; None for anything else (booleans included)."""
    if isinstance(v, str) and v.strip().lower() in _INF_WORDS:
        return math.inf
    if isinstance(v, (int, float, str)) and not isinstance(v, bool):
        try:
            return float(v)
        except ValueError:
            return None
    return None


def _rate(v: Any) -> float:
    x = _as_float(v)
    if x is None:
        raise ValueError(f"a request rate is a number of requests per second or `inf`, not {v!r}")
    if math.isnan(x) or x <= 0:
        raise ValueError(f"request rate {v!r} is out of range: each rate must be > 0 requests/s, or `inf`")
    return x


class LoadSpec(StrictModel):
    """Serving-mode load: the recipe runs against vLLM's OpenAI-compatible server at each request rate."""

    request_rate: list[float] = Field(
        json_schema_extra=_rates_schema,
        description="Offered load in requests/s, one measured run per value, in increasing order; `inf` "
        "(YAML `.inf` or the string `inf`) sends every request at once. A single number is one rate.",
    )
    max_concurrency: PositiveInt | None = Field(
        None,
        le=MAX_REQUESTS,
        description="Most requests in flight at once; a request due while the cap is reached waits on "
        "the client (its queue time is recorded). Default: no cap.",
    )
    burstiness: float = Field(
        1.0,
        gt=0,
        json_schema_extra=_burstiness_schema,
        description="Shape of the gamma distribution of the gaps between arrivals, > 0: 1 = Poisson "
        "arrivals, < 1 burstier, > 1 more even, `inf` = evenly spaced.",
    )
    num_requests: PositiveInt | None = Field(
        None,
        le=MAX_REQUESTS,
        description="Requests measured per rate (prompts reused in order when the dataset is smaller); "
        "default: the whole dataset once.",
    )
    warmup_requests: NonNegativeInt = Field(
        20,
        le=MAX_REQUESTS,
        description="Unmeasured requests sent before each rate's measured ones (the first prompt, "
        "repeated, under `max_concurrency`).",
    )
    slo: dict[str, float] = Field(
        default_factory=dict,
        json_schema_extra={"propertyNames": {"enum": list(SLO_METRICS)}},
        description="Service-level objectives in milliseconds for goodput (requests "
        "meeting every SLO per second); keys: " + ", ".join(SLO_METRICS) + ".",
    )
    seed: int = Field(
        0,
        ge=0,
        le=MAX_SEED,
        description="Seed of the arrival schedule, 0 to 2**32-1 (numpy's legacy "
        "generator, as `vllm bench serve --seed`); the same seed gives the same schedule at every rate.",
    )

    @field_validator("request_rate", mode="before")
    @classmethod
    def _rates(cls, v: Any) -> list[float]:
        vals = v if isinstance(v, (list, tuple)) else [v]
        if not vals:
            raise ValueError("give at least one request rate (requests/s > 0, or `inf`)")
        rates = [_rate(x) for x in vals]
        for a, b in itertools.pairwise(rates):
            if not b > a:
                raise ValueError(
                    f"request rates must increase strictly (the sweep stops at saturation); "
                    f"got {_fmt(a)} then {_fmt(b)}"
                )
        return rates

    @field_validator("burstiness", mode="before")
    @classmethod
    def _burstiness(cls, v: Any) -> Any:
        if isinstance(v, str) and v.strip().lower() in _INF_WORDS:
            return math.inf
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isnan(v):
            raise ValueError("burstiness must be > 0 (1 = Poisson, `inf` = evenly spaced), not NaN")
        return v

    @field_validator("slo")
    @classmethod
    def _slo(cls, v: dict[str, float]) -> dict[str, float]:
        for k, x in v.items():
            if k not in SLO_METRICS:
                raise ValueError(f"unknown SLO metric {k!r}; allowed: {', '.join(SLO_METRICS)}")
            if not (x > 0 and math.isfinite(x)):
                raise ValueError(f"SLO {k} must be a finite number of milliseconds > 0, not {x!r}")
        return v

    def request_indices(self, n_prompts: int) -> list[int]:
        """Which prompt each measured request sends: the first `num_requests`, cycling when there are fewer."""
        if n_prompts <= 0:
            raise ValueError("no prompts to send")
        n = self.num_requests or n_prompts
        return [i % n_prompts for i in range(n)]

    @field_serializer("request_rate", when_used="json")
    def _rates_json(self, v: list[float]) -> list[float | str]:
        return [("inf" if math.isinf(x) else x) for x in v]

    @field_serializer("burstiness", when_used="json")
    def _burstiness_json(self, v: float) -> float | str:
        return "inf" if math.isinf(v) else v


def _fmt(rate: float) -> str:
    return "inf" if math.isinf(rate) else f"{rate:g}"
