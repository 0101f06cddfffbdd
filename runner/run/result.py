"""The one constructor of RunResult: a prepared unit, its samples, the engine's facts and what the
run measured -> the RunResult that results.json holds. Every result is made here (a finished run, a
failed one, a run that died before it could report, a serving run, replicas merged on Ray), and
nothing changes it after."""

from __future__ import annotations

import contextlib
import datetime as dt
import importlib.metadata as md
import platform
import re
import subprocess
import sys
from collections import ChainMap
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.base import __version__
from runner.base.format import brief
from runner.base.noise import cpus
from runner.base.nvml import device_facts
from runner.base.stats import MIN_PROJECTED, prefix_share, project, summary
from runner.base.types import EngineInfo, Example, Generation, Knob
from runner.engines import engine_packages
from runner.recipe import Recipe
from runner.results import Energy, Estimate, Percentiles, Repeat, RunResult, Sample, Timings
from runner.run.job import Unit
from runner.scoring import score_sample


def now(timespec: str = "seconds") -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec=timespec)


def environment() -> dict:
    """Facts about where a run happened (read without importing torch or vLLM)."""
    root = str(Path(__file__).resolve().parents[2])
    # --no-optional-locks: `status` refreshes the index under .git/index.lock otherwise, outside
    # --out, and a git command the user runs meanwhile fails on the lock
    git = lambda *args: subprocess.run(
        ["git", "--no-optional-locks", "-C", root, *args],
        capture_output=True,
        text=True,
        timeout=5,
    )
    try:
        head = git("rev-parse", "--short", "HEAD")
        commit = head.stdout.strip() if head.returncode == 0 else None
        if (
            commit is not None
            and git("status", "--porcelain", "--untracked-files=no").stdout.strip()
        ):
            commit += "-dirty"
    except (OSError, subprocess.SubprocessError):
        commit = None
    packages = {}
    for p in (*engine_packages(), "datasets", "pydantic", "jinja2", "tabulate"):
        with contextlib.suppress(md.PackageNotFoundError):
            packages[p] = md.version(p)
    env = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "runner": __version__,
        "git_commit": commit,
        "packages": packages,
    }
    # the CPU: its model name, the CPUs this process may use; torch's threads where torch ran
    with contextlib.suppress(OSError, StopIteration):
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            env["cpu"] = next(
                line.split(":", 1)[1].strip() for line in f if line.startswith("model name")
            )
    env["cpus"] = cpus()
    if (torch := sys.modules.get("torch")) is not None:
        with contextlib.suppress(Exception):
            env["torch_threads"] = torch.get_num_threads()
    return env | device_facts()


@dataclass(frozen=True)
class Measured:
    """What the run measured around the engine (all optional: a run that failed measured little)."""

    timings: Timings = field(default_factory=Timings)
    peak_gpu_gib: float | None = None
    baseline_gpu_gib: float | None = None
    per_example: bool = False  # examples finished one by one: their wall times are real
    started_at: str = ""
    # recorded wall time of the samples reused from an interrupted run (in generate_s), and how many
    reused_s: float = 0.0
    reused_samples: int = 0
    peak_rss_gib: float | None = None  # the process's peak resident memory


@dataclass(frozen=True)
class Output:
    """What a run that finished gave: its samples, its engine's facts, notes, and the prompts' token
    ids (the shared prefix is counted on them)."""

    samples: list[Sample]
    engine: EngineInfo
    notes: Sequence[str]
    ids: list[list[int]] | None = None
    shared_prefix: int = 0  # without ids: the tokens every prompt shares at its start


@dataclass(frozen=True)
class Failure:
    """How a run that failed ended: the error, a hint at the fix, what its engine's log shows."""

    error: str
    hint: str | None
    engine: EngineInfo = field(default_factory=EngineInfo)


def make_sample(
    ex: Example, prompt: str, g: Generation, r: Recipe, seconds: float | None
) -> Sample:
    scores = score_sample(g.text, ex.answers, r.metrics, r.scoring) if ex.answers else {}
    facts = {
        k: getattr(g, k)
        for k in ("prompt_tokens", "output_tokens", "cached_tokens", "ttft_s", "latency_s")
    }
    return Sample(
        id=ex.id,
        prompt=prompt,
        output=g.text,
        answers=list(ex.answers),
        scores=scores,
        seconds=seconds,
        **facts,
    )


def merge_samples(examples: Sequence[Example], *parts: dict[str, Sample]) -> list[Sample]:
    """The samples of every example in dataset order, from several sets by id (the first that has it
    wins): an interrupted run's and this run's, or the shares of data-parallel replicas."""
    merged = ChainMap(*parts)
    return [merged[ex.id] for ex in examples if ex.id in merged]


LOG_MARK = "===== runner:"  # the line that opens each run's part of an engine.log

# what an error says (lower case) -> the hint at its fix
_HINTS = (
    (
        ("out of memory", "outofmemory", "less than desired gpu memory", "cuda oom"),
        "GPU memory ran out: lower engine.gpu_memory_utilization or engine.max_model_len, use a "
        "quantized checkpoint (engine.quantization), set engine.cpu_offload_gb, or a smaller "
        "engine.batch_size (transformers)",
    ),
    (
        ("couldn't connect to", "connection error", "offline mode is enabled", "max retries"),
        "this machine cannot reach the model hub: pass a local copy with --model-path HUB_ID=PATH",
    ),
    (
        (
            "not a valid model identifier",
            "repository not found",
            "no such file",
            "can't load",
            "does not appear to have",
            "repo id must be",
            "model folder not found",
        ),
        "check model.id (a hub id needs network access; here pass a local folder with "
        "--set model.id=PATH)",
    ),
    (
        ("alignedallocator", "increase the workspace buffer"),
        "FlashInfer's workspace is too small for this many sequences in a step: lower "
        "engine_args.max_num_seqs, leave the attention backend to vLLM, or raise it in the recipe "
        "with engine.env: {VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE: BYTES} (at least the size the "
        "error asked for) and leave GPU memory for it with a lower engine.gpu_memory_utilization",
    ),
)

# a line of an engine's log after its prefixes: colour codes, torch's `[rank0]:`, vLLM's
# `(EngineCore pid=N)` (a Ray worker's `(Name pid=N, ip=...)`), its logger's `ERROR date time
# [file:line]`
_PREFIXES = re.compile(
    r"^(?:\x1b\[[0-9;]*m)*(?:\[rank\d+\]:\s*)?(?:\([^)]*\bpid=\d+[^)]*\)\s*)?(?:\x1b\[[0-9;]*m)*\s*"
    r"(?:ERROR \S+ \S+ \[[^\]]*\]\s*)?"
)
# an exception's last line, what a traceback ends with
_RAISED = re.compile(r"(?:[A-Za-z_][\w.]*)?(?:Error|Exception|Failed|Failure)(?:: .+)?")


def failure_hint(error: str) -> str | None:
    e = error.lower()
    return next((hint for words, hint in _HINTS if any(w in e for w in words)), None)


def engine_failure(error: str, log: str | Path | None, start: int = 0) -> tuple[str, str | None]:
    """An engine's error and its hint, where the error points at the engine's log for its cause
    (vLLM's "See root cause above": its engine process died): the exception the last traceback in
    that log (where the engine's processes write, read from byte `start`; None: no log of its own)
    ends with, added to the error, and the hint for that cause."""
    if "root cause" not in error.lower() or log is None:
        return error, failure_hint(error)
    log = Path(log)
    try:
        with open(log, "rb") as f:
            f.seek(start)
            text = f.read().decode("utf-8", "replace").rsplit(LOG_MARK, 1)[-1]
    except OSError:
        text = ""
    cause, traced = None, False
    for line in text.splitlines():
        body = _PREFIXES.sub("", line.strip()).strip()
        if body.startswith("Traceback (most recent call last)"):
            traced = True
        elif traced and _RAISED.fullmatch(body) and "root cause" not in body.lower():
            cause, traced = body, False
    if cause is None:
        return error, failure_hint(error) or f"the engine's log says why: {log}"
    hint = failure_hint(cause) or failure_hint(error)
    cut = cause if len(cause) <= 300 else cause[:299] + "…"
    return f"{error} (the engine's log: {cut})", hint or f"the whole traceback: {log}"


def mean_scores(samples: list[Sample], metrics: list[str]) -> dict[str, float]:
    """Each metric averaged over the examples that have gold answers (others are not scored)."""
    scored = [s for s in samples if s.scores]
    return {m: sum(s.scores[m] for s in scored) / len(scored) for m in metrics} if scored else {}


def _pct(xs: list[float | None]) -> Percentiles | None:
    s = summary([x for x in xs if x is not None])
    return Percentiles(**s) if s else None


def project_estimate(
    samples: list[Sample], generate_s: float, per_example: bool, n_target: int
) -> Estimate:
    n = len(samples)
    secs = [s.seconds for s in samples if s.seconds is not None]
    if per_example and len(secs) == n >= 1:
        p = project(secs, n_target)
        method = "per-example wall times of a random sample, mean x N"
        if n >= MIN_PROJECTED:
            p["low_s"] = max(p["low_s"], 0.0)
            method += ", 95% t-interval"
        else:
            p.update(low_s=None, high_s=None)
            method += (
                f"; too few examples to tell (n = {n}, an interval needs {MIN_PROJECTED}): no "
                "interval"
            )
    else:
        per = generate_s / n
        p = {"per_example_s": per, "projected_s": per * n_target}  # no interval
        method = (
            "generation time of a random sample scaled linearly (examples ran in batches: no "
            "per-example times, no interval)"
        )
    return Estimate(n_measured=n, n_total=n_target, method=method, **p)


def ignored_knob_notes(knobs: list[Knob]) -> list[str]:
    """A note per knob the engine did not apply (long values cut as in the knob table)."""
    return [
        f"knob `{k.name}` did NOT take effect: requested {brief(k.requested)}, effective "
        f"{brief(k.effective)} ({k.evidence})"
        for k in knobs
        if k.status == "ignored"
    ]


def energy_of(repeats: Sequence[Repeat], gpus: int, p_tok: int, o_tok: int) -> Energy:
    """The run's GPU energy from its repeats' readings: the mean joules of a generation, the average
    power over all their windows, and per token (the tokens of one generation)."""
    got = [(x.energy_j, x.energy_s) for x in repeats if x.energy_j is not None and x.energy_s]
    if gpus == 0:
        why_not = "no GPU: the engine ran on the CPU"
    elif any(x.reused_samples for x in repeats):
        why_not = "part of the generation ran in an earlier, interrupted call"
    elif not got or len(got) < len(repeats):
        why_not = "no NVML energy counter for the engine's GPUs here"
    elif any(j < 0 for j, _ in got):  # a counter that went back (a driver reload, a reset)
        why_not = "NVML's energy counter went back during a generation (reset)"
    elif still := [s for j, s in got if j == 0]:  # it ticks coarser than the generation
        of = f" ({len(still)} of {len(got)})" if len(got) > 1 else ""
        why_not = (
            f"NVML's energy counter did not move during a {min(still):.2f}-s generation{of} (it "
            "updates less often than that): too short to measure"
        )
    else:
        joules, seconds = zip(*got)
        j = sum(joules) / len(got)
        return Energy(
            measured=True,
            gpus=gpus,
            joules=j,
            watts=sum(joules) / sum(seconds),
            j_per_output_token=j / o_tok if o_tok else None,
            j_per_1k_prompt_tokens=j / p_tok * 1000 if p_tok else None,
        )
    return Energy(measured=False, gpus=gpus, why_not=why_not)


def run_result(
    unit: Unit,
    command: str,
    m: Measured,
    got: Output | Failure,
    env: dict[str, Any] | None = None,
    **facts: Any,
) -> RunResult:
    """`env`: facts of where it ran, beside the host's (`ray`); `facts`: RunResult fields only some
    runs have (engine_of, serving, executor, replicas) or that they know better than the samples
    tell (prefix, tokens). A `Failure` makes a failed result. A run of fewer examples than it
    stands for (an estimate) gets the projection; a serving run never does."""
    r, fail = unit.loaded.recipe, got if isinstance(got, Failure) else None
    out = got if isinstance(got, Output) else Output([], got.engine, ())
    samples, eng, reused = out.samples, out.engine, m.reused_samples
    n, gen_s = len(samples), m.timings.generate_s or 0.0
    extra = {key: v for key, v in eng.extra.items() if key != "metrics"}
    env = {**environment(), **(env or {}), "inputs": unit.prepared.inputs, "engine_extra": extra}
    if eng.extra.get("metrics"):
        env["vllm_metrics"] = eng.extra["metrics"]
    notes = list(dict.fromkeys([*out.notes, *eng.notes, *ignored_knob_notes(eng.knobs)]))
    if reused:
        notes.append(
            f"{reused} of {n} samples were reused from an earlier, interrupted run of the same "
            f"recipe; generation time adds their recorded wall time ({m.reused_s:.1f} s) to this "
            f"run's ({gen_s - m.reused_s:.1f} s)."
        )
    if r.model.trust_remote_code:
        notes.append(
            "trust_remote_code was ON: code shipped with the checkpoint was allowed to run."
        )
    dummy = r.model.load_format == "dummy" or r.model.id.startswith("builtin:") or r.engine.fake
    fields = dict(
        _counted(out, m),
        # the fields that name the run: its recipe, where it came from, how it ended
        name=r.name,
        recipe=r,
        recipe_hash=r.digest(),
        recipe_path=unit.loaded.path,
        cell=unit.loaded.cell,
        command=command,
        status="failed" if fail else "ok",
        error=fail and fail.error,
        hint=fail and fail.hint,
        scores_meaningful=not dummy,
        run_key=unit.run_key,
        n_dataset=unit.prepared.n_dataset,
        plan=unit.plan,
        n_samples=n,
        n_scored=sum(1 for s in samples if s.answers),
        knobs=eng.knobs,
        timings=m.timings,
        scores=mean_scores(samples, r.metrics),
        notes=notes,
        environment=env,
        started_at=m.started_at,
        finished_at=now("milliseconds"),  # as started_at: a study's running time is their span
        reused_samples=reused,
        engine={k: getattr(eng, k) for k in ("name", "version", "device", "quantization")},
    )
    if not fail and "serving" not in facts:  # a serving run's figures are its own
        if "replicas" not in facts:
            tok = fields["tokens"]
            reps = facts.get("repeats") or []
            fields["energy"] = energy_of(reps, eng.gpus, tok["prompt"], tok["output"])
        if 0 < n < unit.prepared.n_target:
            fields["estimate"] = project_estimate(
                samples, gen_s, m.per_example, unit.prepared.n_target
            )
    return RunResult(**(fields | facts))


def _counted(out: Output, m: Measured) -> dict[str, Any]:
    """The parts of a result counted over its samples (tokens, throughput, latency, prefix) and its
    memory, as the nested parts' fields (checked by RunResult). The shared prefix is counted on the
    prompts' token ids, else (replicas merged) `shared_prefix` tokens of every prompt."""
    samples, eng = out.samples, out.engine
    n, gen_s = len(samples), m.timings.generate_s or 0.0
    p_tok, o_tok = sum(s.prompt_tokens for s in samples), sum(s.output_tokens for s in samples)
    cached = [s.cached_tokens for s in samples if s.cached_tokens is not None]
    k = out.shared_prefix
    k, share = prefix_share(out.ids) if out.ids else (k, k * n / p_tok if p_tok else 0.0)
    rate = (lambda x: x / gen_s) if gen_s and n else (lambda x: None)
    return dict(
        tokens=dict(prompt=p_tok, output=o_tok, cached=sum(cached) if cached else None),
        throughput=dict(
            requests_per_s=rate(n),
            output_tokens_per_s=rate(o_tok),
            total_tokens_per_s=rate(p_tok + o_tok),
        ),
        latency=dict(
            ttft_s=_pct([s.ttft_s for s in samples]), e2e_s=_pct([s.latency_s for s in samples])
        ),
        memory=dict(
            peak_gpu_gib=m.peak_gpu_gib,
            baseline_gpu_gib=m.baseline_gpu_gib,
            peak_rss_gib=m.peak_rss_gib,
            weights_gib=eng.weights_gib,
            kv_cache_tokens=eng.kv_cache_tokens,
            kv_cache_gib=eng.extra.get("kv_cache_gib"),
        ),
        prefix=dict(
            shared_prefix_tokens=k,
            shared_prefix_share=share,
            hit_rate=sum(cached) / p_tok if cached and p_tok else None,
        ),
    )


def engine_facts(res: RunResult) -> EngineInfo:
    """What a stored result says of its engine, as the EngineInfo it was made from (for merging
    replicas)."""
    mem = res.memory
    return EngineInfo(
        **res.engine.model_dump(),
        load_s=res.timings.load_s or 0.0,
        weights_gib=mem.weights_gib,
        kv_cache_tokens=mem.kv_cache_tokens,
        knobs=list(res.knobs),
        extra={**res.environment.get("engine_extra", {}), "kv_cache_gib": mem.kv_cache_gib},
    )
