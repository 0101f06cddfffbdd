"""Recipes: one YAML file = one experiment. The models here are the reference: every field is
documented once, in its `Field(description=...)`; the recipe reference (docs/recipe-reference.md)
and the JSON Schema (schema/recipe.schema.json) are generated from them."""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    NonNegativeInt,
    PlainSerializer,
    PositiveInt,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from runner.base.types import MAX_SEED, PROFILE_MAX_WINDOW, ModelSpec, Sampling, StrictModel
from runner.engines import ENGINES, EngineSpec
from runner.scoring import METRICS, ScoringSpec

MAX_EXAMPLES = 100_000_000
MAX_TIMEOUT_S = 30 * 24 * 3600
MAX_REPEAT = 100
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"


class FieldMap(StrictModel):
    """Where each part of a normalized example comes from in a dataset row (dotted keys reach
    inside nested records; a column whose own name has dots, as a CSV's `q.text`, comes first)."""

    id: str | None = Field(
        None,
        description="Column holding a unique id; unset: the rows' `id` column where they have one, "
        "else the row number.",
    )
    question: str = Field("question", description="Column holding the question.")
    context: str | None = Field("context", description="Column holding the passage; null for none.")
    answers: str | None = Field(
        "answers",
        description="Column holding gold answers: a string, a list of strings, `{text: [...]}` "
        "or a list of `{text: ...}`; null for none. A text cell holding a list of strings, in JSON "
        "(`[\"Monday\", \"Mondays\"]`) or as Python writes one (`['Rhein', 'der Rhein']`: pandas' "
        "`to_csv`), gives several answers (`[]`: none): how a CSV lists them.",
    )


class DatasetSpec(StrictModel):
    """Where the examples come from."""

    format: Literal["squad", "json", "jsonl", "csv", "parquet", "hub"] = Field(
        description="`squad` = nested SQuAD/JGLUE JSON (`data[].paragraphs[].qas[]`); `json` = a "
        "list of records (or records under `json_field`); `jsonl`, `csv`, `parquet` = one row per "
        "example; `hub` = a Hugging Face dataset by name."
    )
    path: str = Field(
        description="File path (relative to the recipe file) or, for `hub`, the dataset name."
    )
    name: str | None = Field(None, description="Hub dataset configuration name (`hub` only).")
    split: str = Field("validation", description="Split to read (`hub`), or a label for files.")
    json_field: str | None = Field(
        None, description="For `json`: the top-level key that holds the records."
    )
    fields: FieldMap = Field(
        default_factory=FieldMap,
        description="Mapping from dataset columns onto id/question/context/answers.",
    )
    limit: PositiveInt | None = Field(
        None, le=MAX_EXAMPLES, description="Use only the first N examples (after shuffling)."
    )
    shuffle: bool = Field(False, description="Shuffle the examples before `limit`.")
    seed: int = Field(0, ge=0, le=MAX_SEED, description="Seed for `shuffle`.")


class ShotExample(StrictModel):
    question: str = Field(description="Worked example question.")
    context: str = Field("", description="Worked example passage.")
    answer: str = Field(description="Worked example answer.")


class ShotsSpec(StrictModel):
    """Worked examples shown to the model before the question."""

    examples: list[ShotExample] = Field(default_factory=list, description="Inline worked examples.")
    k: NonNegativeInt = Field(
        0, le=1000, description="Also draw k examples from `source` (fixed `seed`)."
    )
    source: DatasetSpec | None = Field(
        None, description="Dataset to draw the k examples from (e.g. a train split)."
    )
    seed: int = Field(0, ge=0, le=MAX_SEED, description="Seed for drawing the k examples.")
    placement: Literal["turns", "system"] = Field(
        "turns",
        description="`turns`: each shot is a user/assistant exchange rendered with `template`; "
        "`system`: shots are only given to the system template as `shots`.",
    )

    @model_validator(mode="after")
    def _source_when_k(self) -> ShotsSpec:
        if self.k and self.source is None:
            raise ValueError("k > 0 needs `source`, the dataset the shots are drawn from")
        return self


class PromptSpec(StrictModel):
    """How an example becomes a prompt."""

    template: str = Field(
        description="Jinja template file for the user message (relative to the recipe file, or a "
        "name in the project's `templates/`). Variables: `question`, `context`, `answers`, `id`, "
        "`example`, `shots`."
    )
    system: str | None = Field(
        None, description="System prompt text (itself a Jinja template; may use `shots`)."
    )
    system_template: str | None = Field(
        None, description="System prompt from a template file instead of `system`."
    )
    shots: ShotsSpec = Field(default_factory=ShotsSpec, description="Worked examples (few-shot).")
    chat_template: bool | None = Field(
        None,
        description="Apply the tokenizer's chat template; default: yes when the tokenizer has one.",
    )
    truncate: bool = Field(
        False,
        description="A prompt that does not fit the model's context with `max_tokens` is cut from "
        "the left to fit (its start is lost). Off: such a recipe is refused before it runs (exit "
        "2), naming the example.",
    )

    @model_validator(mode="after")
    def _one_system(self) -> PromptSpec:
        if self.system is not None and self.system_template is not None:
            raise ValueError("give either `system` or `system_template`, not both")
        return self


SLO_METRICS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")
# numpy's legacy RandomState (what vllm bench serve seeds) takes 0..2**32-1
LOAD_MAX_SEED = 2**32 - 1
MAX_REQUESTS = 10_000_000
NUMBER_OR_INF = {"anyOf": [{"type": "number", "exclusiveMinimum": 0}, {"const": "inf"}]}
INF_WORDS = ("inf", ".inf", "+inf", "infinity")
InfFloat = Annotated[
    float, PlainSerializer(lambda x: "inf" if math.isinf(x) else x, when_used="json")
]


def read_inf(v: Any) -> Any:
    """`inf` written as a string -> math.inf; anything else as it is."""
    return math.inf if isinstance(v, str) and v.strip().lower() in INF_WORDS else v


class LoadSpec(StrictModel):
    """Serving-mode load: the recipe runs against vLLM's OpenAI-compatible server at each request
    rate."""

    request_rate: Annotated[
        list[InfFloat],
        WithJsonSchema(
            {"anyOf": [{"type": "array", "minItems": 1}, NUMBER_OR_INF], "items": NUMBER_OR_INF}
        ),
    ] = Field(
        description="Offered load in requests/s, one measured run per value, in increasing order; "
        "`inf` (YAML `.inf` or the string `inf`) sends every request at once. A single number is "
        "one rate.",
    )
    max_concurrency: PositiveInt | None = Field(
        None,
        le=MAX_REQUESTS,
        description="Most requests in flight at once; a request due while the cap is reached waits "
        "on the client (its queue time is recorded). Default: no cap.",
    )
    burstiness: Annotated[InfFloat, WithJsonSchema(NUMBER_OR_INF)] = Field(
        1.0,
        gt=0,
        description="Shape of the gamma distribution of the gaps between arrivals, > 0: 1 = "
        "Poisson arrivals, < 1 burstier, > 1 more even, `inf` = evenly spaced.",
    )
    num_requests: PositiveInt | None = Field(
        None,
        le=MAX_REQUESTS,
        description="Requests measured per rate (prompts reused in order when the dataset is "
        "smaller); default: the whole dataset once.",
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
        le=LOAD_MAX_SEED,
        description="Seed of the arrival schedule, 0 to 2**32-1 (numpy's legacy "
        "generator, as `vllm bench serve --seed`); the same seed gives the same schedule at every "
        "rate.",
    )

    @field_validator("request_rate", mode="before")
    @classmethod
    def _rates(cls, v: Any) -> list[float]:
        vals = v if isinstance(v, (list, tuple)) else [v]
        if not vals:
            raise ValueError("give at least one request rate (requests/s > 0, or `inf`)")
        rates = []
        # a number, or `inf` written as a string (booleans are not numbers), > 0
        for x in map(read_inf, vals):
            try:
                r = (
                    float(x)
                    if isinstance(x, (int, float, str)) and not isinstance(x, bool)
                    else None
                )
            except ValueError:
                r = None
            if r is None:
                raise ValueError(
                    f"a request rate is a number of requests per second or `inf`, not {x!r}"
                )
            if not r > 0:  # NaN too
                raise ValueError(
                    f"request rate {x!r} is out of range: each rate must be > 0 requests/s, or "
                    "`inf`"
                )
            rates.append(r)
        for a, b in itertools.pairwise(rates):
            if not b > a:
                why = "request rates must increase strictly (the sweep stops at saturation)"
                raise ValueError(f"{why}; got {a:g} then {b:g}")
        return rates

    @field_validator("burstiness", mode="before")
    @classmethod
    def _burstiness(cls, v: Any) -> Any:
        v = read_inf(v)
        if isinstance(v, float) and math.isnan(v):
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
        """Which prompt each measured request sends: the first `num_requests`, cycling when there
        are fewer (a dataset holds at least one: runner.inputs refuses an empty one)."""
        return [i % n_prompts for i in range(self.num_requests or n_prompts)]


MetricName = Literal[tuple(METRICS)]  # type: ignore[valid-type]


class CostSpec(StrictModel):
    """What GPU time costs, for the reports' dollars (nothing a run measures depends on it)."""

    usd_per_gpu_hour: float = Field(
        gt=0,
        le=1_000_000,
        allow_inf_nan=False,
        description="Price of one GPU for one hour, in US dollars.",
    )


class GateSpec(StrictModel):
    """The accuracy a recipe must keep against the baseline to count as a candidate: it passes when
    the lower end of the 95% interval of its paired difference from the baseline (this recipe's
    score minus the baseline's, over the same examples) is above the allowed drop."""

    metric: MetricName = Field(
        description="The score the gate checks (one of the recipe's `metrics`)."
    )
    max_drop: float | None = Field(
        None,
        ge=0,
        le=1,
        allow_inf_nan=False,
        description="Largest allowed drop, in absolute points (0.01 on 0-1).",
    )
    relative: float | None = Field(
        None,
        gt=0,
        le=1,
        allow_inf_nan=False,
        description="Keep at least this share of the baseline's score (0.99: 99%, as MLPerf's "
        "accuracy targets).",
    )

    @model_validator(mode="after")
    def _one_bound(self) -> GateSpec:
        if (self.max_drop is None) == (self.relative is None):
            raise ValueError("give either `max_drop` or `relative`")
        return self

    def allowed_drop(self, baseline_score: float) -> float:
        return (
            self.max_drop
            if self.max_drop is not None
            else (1 - (self.relative or 1)) * baseline_score
        )


class Recipe(StrictModel):
    """One experiment."""

    name: str = Field(
        pattern=NAME_PATTERN,
        max_length=100,
        description="Unique name; the report folder is `<out>/<name>/`. Letters, digits, `._-`.",
    )
    description: str = Field("", description="One line saying what this recipe tests.")
    model: ModelSpec = Field(description="Which model to load.")
    engine: EngineSpec = Field(description="Which engine runs the model, chosen by `kind`.")
    replicas: PositiveInt = Field(
        1,
        le=1024,
        description="Data-parallel copies of the engine (`runner go --executor ray`): the examples "
        "are split into this many contiguous shares, each run by its own engine; outputs are one "
        "engine's, generation time is the wall time over all.",
    )
    dataset: DatasetSpec = Field(description="Where the examples come from.")
    prompt: PromptSpec = Field(description="How an example becomes a prompt.")
    sampling: Sampling = Field(
        default_factory=Sampling, description="Decoding settings, engine-neutral."
    )
    metrics: list[MetricName] = Field(
        default_factory=lambda: ["exact_match", "char_f1"],
        description="Scores to compute; each metric names its convention (formula, "
        "normalization, gold policy): see the Metrics section.",
    )
    scoring: ScoringSpec = Field(
        default_factory=ScoringSpec,
        description="Gold policy and clean-up of the model output before scoring.",
    )
    load: LoadSpec | None = Field(
        None,
        description="Run the recipe under serving load instead of as an offline batch: the "
        "engine's OpenAI-compatible server at each request rate, with latency percentiles, goodput "
        "and accuracy under load.",
    )
    baseline: bool = Field(
        False,
        description="This recipe is the reference the summary compares against. A study file may "
        "instead name its one baseline cell (`baseline: study-variant-label`).",
    )
    gate: GateSpec | None = Field(
        None,
        description="Accuracy to keep against the baseline: the summary ranks speed only among "
        "recipes that pass.",
    )
    cost: CostSpec | None = Field(
        None,
        description="What a GPU-hour costs: reports add dollars per million tokens and the cost of "
        "the run (`runner go --usd-per-gpu-hour X` sets it for every recipe).",
    )
    estimate: int | None = Field(
        None,
        ge=2,
        le=MAX_EXAMPLES,
        description="Run only N examples (at least 2, as `runner go --estimate`: the projection's "
        "interval needs two) and project the full-dataset time (reported as an estimate).",
    )
    repeat: PositiveInt = Field(
        1,
        le=MAX_REPEAT,
        description="Measure the generation this many times on its engine (the prefix cache "
        "emptied before each): reports give the geometric mean time with a 95% interval. Samples "
        "and scores are the first repeat's; the others count the outputs that changed. `runner go "
        "--repeat N` sets it for every recipe.",
    )
    warmup: int = Field(
        0,
        ge=0,
        le=MAX_REPEAT,
        description="Uncounted generations of all the examples after each engine start, before the "
        "measured ones.",
    )
    interleave: Literal["auto", "restarts", "off"] = Field(
        "auto",
        description="How repeats of several recipes are ordered. Recipes on one engine always take "
        "turns (A B A B). `auto`: recipes on different engines run their repeats back to back, "
        "unless every engine starts in seconds (the fake engine, builtin models); then they take "
        "turns, each turn on a freshly started engine. `restarts`: take turns with a fresh engine "
        "per turn however long it takes to start. `off`: back to back.",
    )
    timeout_s: PositiveInt | None = Field(
        None,
        le=MAX_TIMEOUT_S,
        description="End the run and record it failed after this many seconds (at most 30 days), "
        "all its repeats included (recipes that share one engine share the sum of theirs). A "
        "`load:` recipe's sweep looks at it after each rate and stops there, keeping the rates.",
    )
    profile: bool = Field(
        False,
        description="After the measured repeats, generate the first prompts (as many as one "
        f"engine step holds, at most {PROFILE_MAX_WINDOW:,}) twice more under the engine's "
        "profiler (untimed; vLLM's and torch's profilers; each time on an emptied prefix cache, "
        "as the repeats): report.md then says where the "
        "generation's time goes (GPU kernels by class, GPU idle, prefill against decode); the "
        "trace is kept in the run folder. The fake engine has no profiler.",
    )

    @model_validator(mode="after")
    def _parts_agree(self) -> Recipe:
        """`load` needs an engine with a server and one replica; `gate.metric` is a scored one;
        `profile` an offline run in one process."""
        if self.load is not None and not self.engine.serves:
            kinds = ", ".join(e.kind_name() for e in ENGINES if e.serves)
            why = (
                f"`load` runs the engine as a server; engine kind {self.engine.kind!r} has no "
                "server mode"
            )
            raise ValueError(f"{why} (kinds with one: {kinds})")
        # the sweep of one server would report one replica's load
        if self.load is not None and self.replicas > 1:
            why = (
                f"`load` measures one server under load; replicas: {self.replicas} would offer "
                "each replica the rates"
            )
            raise ValueError(
                f"{why} and report one replica's requests: set replicas: 1 (one server per serving "
                "run)"
            )
        if self.gate is not None and self.gate.metric not in self.metrics:
            raise ValueError(
                f"gate.metric {self.gate.metric!r} is not among `metrics` "
                f"({', '.join(self.metrics)})"
            )
        if self.profile and (self.load is not None or self.replicas > 1):
            why = "`load` (a server under load)" if self.load else f"replicas: {self.replicas}"
            raise ValueError(f"profile: true profiles one offline run in one process, not {why}")
        return self

    @field_validator("metrics")
    @classmethod
    def _unique_metrics(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError("metrics are listed twice")
        return v

    def canonical(self) -> dict[str, Any]:
        """The recipe as results record it and its hashes see it; `replicas: 1` and `profile: false`
        (the defaults) are left out, so results stored before the fields existed keep their run
        keys."""
        d = self.model_dump(mode="json")
        for key, default in (("replicas", 1), ("profile", False)):
            if d.get(key) == default:
                del d[key]
        return d

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.canonical(), sort_keys=True).encode()).hexdigest()[
            :16
        ]


class StudyCell(StrictModel):
    """A recipe's place in its study, when it is a study's cell (LoadedRecipe.cell,
    RunResult.cell)."""

    study: str = Field(description="The study this is a cell of (the study file's `name`).")
    settings: dict[str, Any] = Field(
        default_factory=dict,
        description="The cell's settings that vary across its study (dotted key -> value; "
        "`variant` -> the variant's name).",
    )
    labels: dict[str, str] = Field(
        default_factory=dict,
        description="The study file's short labels of those values, where it gives them.",
    )
    axes: dict[str, Any] | None = Field(
        None, description="The study's `report: {rows, columns}` pivot axes."
    )
    index: int | None = Field(
        None,
        description="The cell's place in its study's order of cells (0 first): reports list values "
        "in that order.",
    )


class LoadedRecipe(StrictModel):
    """A validated recipe with where it came from (paths resolve against `base_dir`)."""

    recipe: Recipe
    path: str
    base_dir: str
    overrides: list[str] = Field(default_factory=list)
    cell: StudyCell | None = Field(
        None, description="The recipe's place in its study; null: not a study's cell."
    )

    def resolve(self, p: str) -> Path:
        return Path(self.base_dir) / Path(p).expanduser()  # an absolute path stays itself
