"""What a run produced: the typed contract behind results.json (see schema/results.schema.json)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    WithJsonSchema,
    field_serializer,
    model_validator,
)

from runner.base.types import Knob
from runner.recipe import NUMBER_OR_INF, InfFloat, Recipe, StudyCell, read_inf

# 2: a study cell's facts in one part, `cell` (1: five top-level fields, read as before)
SCHEMA_VERSION = 2


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StartParts(_M):
    """The engine start split as the engine accounts for it (vLLM's own log lines); a part it did
    not report is null, and `other_s` is the rest of the start (the front end, the engine process's
    start, its distributed setup; with an engine that does not report its profiling, that too)."""

    load_s: float | None = Field(None, description="Loading the weights onto the device (s).")
    compile_s: float | None = Field(
        None,
        description="torch.compile, or loading its output from the compile cache when warm (s).",
    )
    capture_s: float | None = Field(None, description="CUDA graph capture (s).")
    profile_kv_s: float | None = Field(
        None,
        description="The engine's memory profiling run, KV-cache allocation and its own kernel "
        "warm-up (vLLM's `init engine` time less compile and capture; a first run of new kernels "
        "on a host, their JIT compiling, shows here) (s).",
    )
    warmup_s: float | None = Field(None, description="The recipe's `engine.warmup` batch (s).")
    other_s: float | None = Field(None, description="The rest of the start (s).")
    cold: bool | None = Field(
        None,
        description="true: the engine compiled (nothing for this configuration in the compile "
        "cache); false: it loaded the compiled graphs from the cache (a warm start); null: nothing "
        "compiled (eager).",
    )
    compile_cache: str | None = Field(None, description="The compile cache folder the engine used.")
    profiled: bool | None = Field(
        None,
        description="true: the engine measured the memory it may use (its profiling run); false: "
        "it was given its KV cache size (`kv_cache_memory_bytes`, or vLLM's startup plan from an "
        "earlier start of the same configuration) and skipped that measurement; null: not known.",
    )
    tokenizer_ahead: bool | None = Field(
        None,
        description="true: the engine's own tokenizer was already loaded when the start began "
        "(its job's process loaded it ahead, or an earlier engine of that process did); false: the "
        "start loaded it; null: not known.",
    )
    tokenizer_copies_ahead: int | None = Field(
        None,
        description="How many deep copies of its tokenizer vLLM's front end took from those its "
        "job's process made ahead (vLLM 0.26 makes `renderer_num_workers` + 1 inside `LLM()`); "
        "0: it made its own; null: not known.",
    )
    modules_ahead: int | None = Field(
        None,
        description="Of the modules vLLM's front end imported inside `LLM()` in earlier starts "
        "with this vLLM version (a list kept under $RUNNER_CACHE), how many this process had "
        "loaded when the start began (its job's process imports them ahead); 0: none kept yet.",
    )
    modules_in_start: int | None = Field(
        None, description="Modules the start itself imported into the job's process."
    )
    autotune_skipped: bool | None = Field(
        None,
        description="true: the runner started the engine without FlashInfer's autotuning (vLLM's "
        "`enable_flashinfer_autotune` off), since an earlier start of the same configuration "
        "found nothing to tune (kept under $RUNNER_CACHE/vllm-autotune); false: the runner left "
        "it as vLLM or the recipe set it; null: not known.",
    )


class Energy(_M):
    """GPU energy during generation: NVML's total-energy counter of each GPU the engine ran on, read
    when the prompts are submitted and when the last output is back (whole devices: another process
    on them counts too)."""

    measured: bool = Field(
        description="false where there is no counter (no NVIDIA GPU, no NVML, a CPU run)."
    )
    why_not: str | None = Field(None, description="Why it was not measured.")
    gpus: int = Field(0, description="GPUs whose counters were read.")
    joules: float | None = Field(None, description="Per generation: the mean over the repeats (J).")
    watts: float | None = Field(
        None, description="Average power: the repeats' joules / their windows' seconds (W)."
    )
    j_per_output_token: float | None = None
    j_per_1k_prompt_tokens: float | None = None


class Timings(_M):
    load_s: float | None = Field(
        None, description="Engine start: weights, compile, graph capture (s)."
    )
    start: StartParts | None = Field(
        None,
        description="The run's first engine start, split (engines that account for it; each start: "
        "`repeats`).",
    )
    generate_s: float | None = Field(
        None,
        description="Generation wall time: from submitting the prompts until the last output is "
        "back (s); with repeats, their geometric mean.",
    )
    total_s: float | None = Field(
        None,
        description="The recipe's run: engine start, tokenizing, generation, scoring, writing "
        "samples (s), summed over its repeats and engine starts; loading the data and rendering "
        "the prompts happen before, when `runner go` checks the recipe.",
    )
    gpu_busy: float | None = Field(
        None,
        description="Share of the generation time the GPU was running a kernel: the mean of NVML's "
        "utilization counter, sampled every 50 ms during generation (whole device). 1.0 means a "
        "kernel ran at every sample, not that the GPU's compute was saturated; well below 1 means "
        "the GPU waited (CPU, I/O).",
    )
    gpu_busy_tenths: list[float] | None = Field(
        None,
        description="`gpu_busy` of each tenth of the generation time, in order (where the GPU "
        "waited: at the start, throughout, at the tail); null when a tenth is too short to have 3 "
        "samples. NVML averages over its own window (up to a second), so the tenths lag and the "
        "first reads low.",
    )


class Stages(_M):
    """Where the run's wall time went (s), each stage timed where it happens, summed over the run's
    repeats (and the process and engine starts, warm-ups before each); `other_s` is the wall time
    no stage names. report.md, summary.md and the charts are written after results.json, by the
    call: not in it."""

    wall_s: float = Field(
        0.0,
        description="The run's wall time: input preparation, the process start, then each of its "
        "generations from its start until its repeat is recorded.",
    )
    prepare_s: float = Field(
        0.0,
        description="Loading the data, rendering the prompts and the checks (in `runner go`'s "
        "process, before anything runs).",
    )
    process_s: float = Field(
        0.0,
        description="How long the job waited for its worker process: its start and the engine "
        "library's import, less what was done while the caller still prepared the job (0: in the "
        "caller's process, or ready in time).",
    )
    start_s: float = Field(
        0.0,
        description="Engine start as this process timed it (the engine's own account: "
        "`timings.load_s`).",
    )
    warmup_s: float = Field(0.0, description="The warm-up generations.")
    tokenize_s: float = Field(0.0, description="Encoding the prompts, every generation.")
    generate_s: float = Field(
        0.0, description="The repeats' generate calls, until the engine returns."
    )
    sink_s: float = Field(
        0.0,
        description="Scoring each finished generation and appending it to the partial samples "
        "file: done while the engine generates, so it overlaps `generate_s` and `warmup_s` and "
        "is not subtracted from `other_s`.",
    )
    write_s: float = Field(
        0.0, description="Writing samples.jsonl (later repeats: their outputs compared with it)."
    )
    other_s: float = Field(0.0, description="`wall_s` less the stages above but `sink_s`.")

    @classmethod
    def of(cls, seconds: dict[str, float]) -> Stages:
        """The stages from their seconds; `other_s`: the wall time they leave."""
        named = sum(v for k, v in seconds.items() if k not in ("wall_s", "sink_s"))
        return cls(**{**seconds, "other_s": seconds.get("wall_s", 0.0) - named})


class Tokens(_M):
    prompt: int = 0
    output: int = 0
    cached: int | None = Field(None, description="Prompt tokens served from the prefix cache.")


class Throughput(_M):
    requests_per_s: float | None = None
    output_tokens_per_s: float | None = None
    total_tokens_per_s: float | None = None


class Percentiles(_M):
    p50: float
    p90: float
    p99: float
    mean: float


class Latency(_M):
    ttft_s: Percentiles | None = Field(None, description="Time to first token per request (s).")
    e2e_s: Percentiles | None = Field(None, description="End-to-end latency per request (s).")


class Memory(_M):
    peak_gpu_gib: float | None = Field(
        None, description="Peak used memory of the whole GPU during the run (NVML)."
    )
    peak_rss_gib: float | None = Field(
        None,
        description="Peak resident memory of the run's process (and children it waited for), CPU "
        "side.",
    )
    baseline_gpu_gib: float | None = Field(
        None, description="GPU memory in use before the engine started (NVML)."
    )
    weights_gib: float | None = Field(
        None, description="Model weight memory as the engine reports it."
    )
    kv_cache_tokens: int | None = Field(
        None, description="KV-cache capacity in tokens as the engine reports it."
    )
    kv_cache_gib: float | None = None


class Prefix(_M):
    shared_prefix_tokens: int = Field(0, description="Tokens every prompt starts with.")
    shared_prefix_share: float = Field(0.0, description="Common-prefix tokens / all prompt tokens.")
    hit_rate: float | None = Field(
        None, description="Measured: cached prompt tokens / prompt tokens."
    )


class Estimate(_M):
    n_measured: int
    n_total: int
    per_example_s: float
    projected_s: float
    low_s: float | None = Field(None, description="95% interval; null when the engine ran batches.")
    high_s: float | None = None
    method: str


class EngineSummary(_M):
    name: str = ""
    version: str = ""
    device: str = ""
    quantization: str | None = None


Rate = Annotated[InfFloat, BeforeValidator(read_inf), WithJsonSchema(dict(NUMBER_OR_INF))]


class LatencyMs(_M):
    """One latency over the requests of a rate, in milliseconds (percentiles linearly
    interpolated)."""

    mean: float
    p50: float
    p90: float
    p99: float


class RatePoint(_M):
    """The measured requests of one offered rate (warmup excluded)."""

    rate: Rate = Field(
        description="Offered request rate (req/s); `inf` = every request sent at once."
    )
    requests: int = Field(description="Measured requests sent.")
    completed: int
    errors: int
    wall_s: float = Field(description="W: last response end - first request send (s).")
    request_throughput: float = Field(description="Achieved: completed requests / W (req/s).")
    output_throughput: float = Field(description="Output tokens of completed requests / W (tok/s).")
    total_token_throughput: float = Field(
        description="(Prompt + output tokens) of completed requests / W (tok/s)."
    )
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
        description="Mean of NVML's utilization counter (whole device, sampled every 50 ms) from "
        "this rate's first send to its last response: the share of time a kernel was running; null "
        "without a GPU.",
    )
    ttft_ms: LatencyMs | None = Field(None, description="Time to first token.")
    tpot_ms: LatencyMs | None = Field(
        None,
        description="Time per output token after the first: (E2E - TTFT) / (output tokens - 1).",
    )
    itl_ms: LatencyMs | None = Field(
        None, description="Gaps between consecutive streamed chunks, pooled."
    )
    e2e_ms: LatencyMs | None = Field(None, description="End-to-end latency: last chunk - send.")
    queue_ms: LatencyMs | None = Field(
        None, description="Client-side wait before sending (max_concurrency)."
    )
    scores: dict[str, float] = Field(
        default_factory=dict,
        description="Each metric averaged over the completed "
        "requests with gold answers (a repeated prompt counts once per request).",
    )
    saturated: bool = Field(
        False, description="The sweep found the server saturated at this rate and stopped."
    )
    cache_reset: bool | None = Field(
        None,
        description="The prefix cache was emptied after this rate's warmup (null: the server has "
        "no reset endpoint).",
    )
    warmup_errors: list[str] = Field(default_factory=list)
    error_samples: list[str] = Field(
        default_factory=list, description="Up to 5 distinct error messages."
    )
    server_counters: dict[str, float] = Field(
        default_factory=dict,
        description="Counters of the server's /metrics (`*_total`) that grew during the measured "
        "requests: end minus start.",
    )


class ServingResult(_M):
    """A recipe run against the engine's OpenAI-compatible server at each rate of
    `load.request_rate`."""

    headline_rate: Rate | None = Field(
        None,
        description="The rate whose figures fill the run's top-level fields "
        "and samples.jsonl: the highest rate below saturation.",
    )
    saturated_rate: Rate | None = Field(
        None, description="The first rate at which the server stopped keeping up."
    )
    saturation_reasons: list[str] = Field(default_factory=list)
    skipped_rates: list[Rate] = Field(
        default_factory=list, description="Rates above the saturated one, not run."
    )
    server_start_s: float | None = Field(
        None, description="From launching the server until /health answered (s)."
    )
    command: list[str] = Field(default_factory=list, description="The server's command line.")
    rates: list[RatePoint] = Field(default_factory=list)


class ReplicaRun(_M):
    """One data-parallel replica of a run on Ray (`runner go --executor ray`)."""

    index: int = Field(description="0-based replica number.")
    examples: list[int] = Field(
        description="[start, end) of the recipe's examples this replica ran (dataset order)."
    )
    node_id: str = ""
    node_ip: str = ""
    pid: int | None = Field(None, description="Ray worker process of the last attempt.")
    attempts: int = Field(
        1, description="Times Ray started it; >1 = retried after its worker or node died."
    )
    status: Literal["ok", "failed"]
    load_s: float | None = None
    generate_s: float | None = None
    reused_samples: int = 0


class Noise(_M):
    """How busy the machine was during one measured generation (null: not readable here)."""

    load_avg: float | None = Field(
        None, description="1-minute load average at the end of the generation."
    )
    cpus: int | None = Field(None, description="CPUs this process may run on.")
    cpu_pressure: float | None = Field(
        None,
        description="Share of the generation time some task waited for a CPU (/proc/pressure/cpu "
        "`some`).",
    )
    process_cpu_s: float | None = Field(
        None,
        description="CPU time of the runner's process and the engine's processes during the "
        "generation (s).",
    )
    gpu_other_processes: list[int] | None = Field(
        None,
        description="PIDs of processes of other process groups on the GPU at the end (NVML); null: "
        "none listed were visible from here (another PID namespace) or no NVML.",
    )
    gpu_sm_clock_mhz: int | None = Field(
        None, description="SM clock at the end of the generation (recorded only)."
    )
    gpu_max_sm_clock_mhz: int | None = None
    busy: list[str] = Field(
        default_factory=list,
        description="What made this a busy machine, in words (load, CPU pressure, other GPU use).",
    )


# a stored time is read back as a number a time can be: a repeat with a 0 s, negative or NaN time is
# not a measurement
Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
SecondsOrZero = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class Repeat(_M):
    """One measured generation of all the run's examples (`repeat: N` makes N of them)."""

    index: int = Field(
        ge=1, description="1-based; the first repeat's outputs are the run's samples."
    )
    generate_s: Seconds = Field(description="Generation wall time of this repeat (s).")
    wall_s: Seconds | None = Field(
        None, description="The whole repeat: tokenizing, generation, scoring, writing (s)."
    )
    load_s: SecondsOrZero | None = Field(
        None, description="Engine start before this repeat, when it started one (s)."
    )
    start: StartParts | None = Field(
        None, description="That engine start, split (engines that account for it)."
    )
    started_at: str = ""
    call: str = Field(
        "", description="The `runner go` call that measured it (repeats of one call share it)."
    )
    turns: str | None = Field(
        None,
        description="The turn-taking this repeat was part of: repeats of two recipes with the same "
        "`turns` and `index` were measured side by side (paired); null: it took turns with "
        "nothing.",
    )
    changed: int | None = Field(None, description="Outputs that differ from the first repeat's.")
    cached_tokens: int | None = Field(
        None,
        description="Prompt tokens served from the prefix cache in this repeat (emptied before "
        "each).",
    )
    reused_samples: int = Field(
        0, description="First repeat only: samples reused from an interrupted run."
    )
    reused_s: SecondsOrZero = Field(
        0.0, description="Their recorded wall time, included in generate_s."
    )
    noise: Noise = Field(default_factory=Noise)
    energy_j: float | None = Field(
        None, description="GPU energy of this generation (J; see Energy)."
    )
    energy_s: Seconds | None = Field(None, description="The window the energy was read over (s).")
    stages: Stages | None = Field(
        None, description="Where its wall time went, with what came before it since the last."
    )


FLAT_CELL = {
    "cell": "settings",
    "cell_labels": "labels",
    "study_axes": "axes",
    "cell_index": "index",
}


class ProfileWindow(_M):
    """One generation of the profiled window, under the engine's profiler."""

    wall_s: float = Field(description="Its wall time (the profiler slows it; not a measurement).")
    device: str = Field(
        description="`cuda`: GPU kernel time from the trace; `cpu`: the CPU operators' own time."
    )
    busy_s: float = Field(
        description="The time `classes` share: kernels running (their union) or operators' own."
    )
    classes: dict[str, float] = Field(
        description="Seconds by class: gemm, attention, sampling, norms and elementwise, other."
    )
    idle_s: float | None = Field(
        None, description="GPU: the window's wall time with no kernel running; null on the CPU."
    )


class Profile(_M):
    """`profile: true`: after the measured repeats, the first prompts generated twice more under the
    engine's profiler, untimed: once with one output token (the prefill) and once as the recipe
    asks. Decode is the second less the first."""

    examples: int = Field(0, description="The prompts profiled (the first ones).")
    prefill: ProfileWindow | None = None
    full: ProfileWindow | None = None
    traces: list[str] = Field(
        default_factory=list, description="The full window's trace files, in the run folder."
    )
    note: str | None = Field(None, description="Why there is no profile, or what limits it.")
    cache_emptied: bool | None = Field(
        None,
        description="true: each window began with the prefix cache emptied, as each measured "
        "repeat does; false: the engine emptied none (it keeps none); absent in results written "
        "before: their windows found the prompts the repeats had left cached.",
    )


class RunResult(_M):
    @model_validator(mode="before")
    @classmethod
    def _one_cell_part(cls, data: Any) -> Any:
        """A results.json of schema 1 kept a study cell's facts as five top-level fields: read into
        `cell`."""
        if not isinstance(data, dict) or "study" not in data:
            return data
        d = dict(data)
        study = d.pop("study")
        part = {new: d.pop(old) for old, new in FLAT_CELL.items() if old in d}
        return {**d, "cell": {"study": study, **part} if study else None}

    schema_version: int = SCHEMA_VERSION
    name: str
    recipe: Recipe
    recipe_hash: str = ""
    recipe_path: str = ""
    status: Literal["ok", "failed"]
    error: str | None = None
    hint: str | None = None
    n_samples: int = 0
    n_dataset: int = 0
    # samples with gold answers (the scores' mean is over these); None in older results
    n_scored: int | None = None
    scores_meaningful: bool = True
    timings: Timings = Field(default_factory=Timings)
    tokens: Tokens = Field(default_factory=Tokens)
    throughput: Throughput = Field(default_factory=Throughput)
    latency: Latency = Field(default_factory=Latency)
    scores: dict[str, float] = Field(default_factory=dict)
    memory: Memory = Field(default_factory=Memory)
    energy: Energy | None = Field(
        None,
        description="GPU energy during generation; null in a failed run, a serving run or a Ray "
        "run.",
    )
    prefix: Prefix = Field(default_factory=Prefix)
    estimate: Estimate | None = None
    knobs: list[Knob] = Field(default_factory=list)
    engine: EngineSummary = Field(default_factory=EngineSummary)
    environment: dict[str, Any] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)
    command: str = ""
    started_at: str = ""
    finished_at: str = ""
    reused_samples: int = Field(0, description="Samples taken from an earlier, interrupted run.")
    cell: StudyCell | None = Field(
        None, description="The run's place in its study; null: not a study's cell."
    )
    plan: dict[str, Any] | None = Field(
        None,
        description="What `runner plan` predicted for this run before the engine started (see "
        "`runner plan --json`); the report sets it next to the measurement.",
    )
    run_key: str = Field(
        "",
        description="Hash of the resolved recipe, its templates, dataset file and "
        "limits: an unchanged recipe with complete results is skipped.",
    )
    serving: ServingResult | None = Field(
        None,
        description="A recipe with `load:`: the figures of every request "
        "rate; the top-level fields describe its `headline_rate`.",
    )
    executor: Literal["local", "ray"] = Field("local", description="Where the run ran.")
    replicas: list[ReplicaRun] = Field(
        default_factory=list, description="Ray only: each data-parallel replica."
    )
    repeats: list[Repeat] = Field(
        default_factory=list,
        description="Every measured generation; `timings.generate_s` is their geometric mean (exp "
        "of the mean log time). Empty in results stored before repeats existed (one run: "
        "`timings.generate_s`).",
    )
    repeat_order: str | None = Field(
        None,
        description="How the repeats were ordered: `interleaved` (taking turns with other recipes "
        "on one engine), `interleaved with restarts` (taking turns, a fresh engine each turn), "
        "`back to back`, or null for one run.",
    )
    stages: Stages | None = Field(
        None,
        description="Where the run's wall time went, summed over its repeats; null: a failed, "
        "serving or Ray run, or a repeat stored before stages were recorded.",
    )
    engine_of: str | None = Field(
        None,
        description="The recipe whose engine this run used (cells that share one engine); null: "
        "its own.",
    )
    profile: Profile | None = Field(
        None, description="Where the generation's time goes (`profile: true`); null: not asked."
    )

    @field_serializer("recipe")
    def _canonical(self, recipe: Recipe) -> dict[str, Any]:
        return recipe.canonical()

    @property
    def times(self) -> list[float]:
        """The measured generation times (one for a run stored before repeats existed)."""
        if self.repeats:
            return [r.generate_s for r in self.repeats]
        return [self.timings.generate_s] if self.timings.generate_s else []

    @property
    def projected_s(self) -> float | None:
        """Generation time, projected to the full dataset for an estimate (the time summaries
        compare)."""
        return self.estimate.projected_s if self.estimate else self.timings.generate_s


class Sample(_M):
    id: str
    prompt: str
    output: str
    answers: list[str]
    prompt_tokens: int
    output_tokens: int
    scores: dict[str, float] = Field(default_factory=dict)
    cached_tokens: int | None = None
    ttft_s: float | None = None
    latency_s: float | None = None
    seconds: float | None = None

    @classmethod
    def from_line(cls, d: dict[str, Any], metrics: list[str]) -> Sample:
        scores = {m: d[m] for m in metrics if m in d}  # no metric is named as a field
        return cls(**{k: v for k, v in d.items() if k in cls.model_fields}, scores=scores)

    def to_line(self) -> dict[str, Any]:
        """samples.jsonl layout: one key per metric at the top level."""
        return {**self.model_dump(exclude={"scores"}), **self.scores}
