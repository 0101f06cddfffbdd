"""What a serving run (a recipe with `load:`) adds to results.json: the figures of every request rate.

`RunResult.serving` holds a `ServingResult`; the top-level fields of that RunResult (timings, throughput,
latency, tokens, scores, samples.jsonl) describe one of its rates, `headline_rate`. Rates are requests per
second; `inf` (every request sent at once) is written as the string "inf" in JSON. Latencies are in
milliseconds; their definitions are in runner/serving/latency.py and in each report."""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer, WithJsonSchema


def _read_rate(v: Any) -> Any:
    if isinstance(v, str) and v.strip().lower() in ("inf", "+inf", ".inf", "infinity"):
        return math.inf
    return v


Rate = Annotated[
    float,
    BeforeValidator(_read_rate),
    PlainSerializer(lambda x: "inf" if math.isinf(x) else x, when_used="json"),
    WithJsonSchema({"anyOf": [{"type": "number", "exclusiveMinimum": 0}, {"const": "inf"}]}),
]


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LatencyMs(_M):
    """One latency over the requests of a rate, in milliseconds (percentiles linearly interpolated)."""

    mean: float
    p50: float
    p90: float
    p99: float


class RatePoint(_M):
    """The measured requests of one offered rate (warmup excluded)."""

    rate: Rate = Field(description="Offered request rate (req/s); `inf` = every request sent at once.")
    requests: int = Field(description="Measured requests sent.")
    completed: int
    errors: int
    wall_s: float = Field(description="W: last response end - first request send (s).")
    request_throughput: float = Field(description="Achieved: completed requests / W (req/s).")
    output_throughput: float = Field(description="Output tokens of completed requests / W (tok/s).")
    total_token_throughput: float = Field(description="(Prompt + output tokens) of completed requests / W (tok/s).")
    prompt_tokens: int = Field(description="Prompt tokens of the completed requests.")
    output_tokens: int = Field(description="Output tokens of the completed requests.")
    cached_tokens: int | None = Field(
        None,
        description="Prompt tokens served from the prefix cache during the "
        "measured requests, as the server reports them; null when it does not.",
    )
    goodput: float | None = Field(
        None, description="Completed requests meeting every SLO / W (req/s); null without SLOs."
    )
    good: int | None = None
    peak_concurrency: int = Field(description="Most requests in flight at once (client side).")
    gpu_busy: float | None = Field(
        None,
        description="Mean of NVML's utilization counter (whole device, sampled every 50 ms) from this rate's "
        "first send to its last response: the share of time a kernel was running; null without a GPU.",
    )
    ttft_ms: LatencyMs | None = Field(None, description="Time to first token.")
    tpot_ms: LatencyMs | None = Field(
        None, description="Time per output token after the first: (E2E - TTFT) / (output tokens - 1)."
    )
    itl_ms: LatencyMs | None = Field(None, description="Gaps between consecutive streamed chunks, pooled.")
    e2e_ms: LatencyMs | None = Field(None, description="End-to-end latency: last chunk - send.")
    queue_ms: LatencyMs | None = Field(None, description="Client-side wait before sending (max_concurrency).")
    scores: dict[str, float] = Field(
        default_factory=dict,
        description="Each metric averaged over the completed "
        "requests with gold answers (a repeated prompt counts once per request).",
    )
    saturated: bool = Field(False, description="The sweep found the server saturated at this rate and stopped.")
    cache_reset: bool | None = Field(
        None,
        description="The prefix cache was emptied after this rate's warmup (null: the server has no reset endpoint).",
    )
    warmup_errors: list[str] = Field(default_factory=list)
    error_samples: list[str] = Field(default_factory=list, description="Up to 5 distinct error messages.")
    server_counters: dict[str, float] = Field(
        default_factory=dict,
        description="Counters of the server's "
        "/metrics (`*_total`) that grew during the measured requests: "
        "end minus start.",
    )


class ServingResult(_M):
    """A recipe run against the engine's OpenAI-compatible server at each rate of `load.request_rate`."""

    headline_rate: Rate | None = Field(
        None,
        description="The rate whose figures fill the run's top-level fields "
        "and samples.jsonl: the highest rate below saturation.",
    )
    saturated_rate: Rate | None = Field(None, description="The first rate at which the server stopped keeping up.")
    saturation_reasons: list[str] = Field(default_factory=list)
    skipped_rates: list[Rate] = Field(default_factory=list, description="Rates above the saturated one, not run.")
    server_start_s: float | None = Field(None, description="From launching the server until /health answered (s).")
    command: list[str] = Field(default_factory=list, description="The server's command line.")
    rates: list[RatePoint] = Field(default_factory=list)

    def point(self, rate: float | None) -> RatePoint | None:
        return next((p for p in self.rates if rate is not None and p.rate == rate), None)
