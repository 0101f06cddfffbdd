"""run_recipe: examples -> prompts -> token ids -> generate -> score -> results files.

Runs inside the recipe's own process (see isolate.py); writes samples.jsonl and
results.json into `<out>/<name>/` atomically."""
from __future__ import annotations

import datetime as dt
import json
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.execution import environment
from runner.inputs.datasets import dataset_file, load_examples
from runner.engines.builtin import is_builtin
from runner.errors import RunnerError
from runner.files import append_lines, write_json_atomic, write_jsonl_atomic, write_text_atomic
from runner.metrics import METRICS
from runner.inputs.prompts import PromptBuilder
from runner.config.recipe import LoadedRecipe
from runner.reporting.results import (Estimate, KnobResult, Latency, Memory, Percentiles, Prefix, RunResult, Sample,
                      Throughput, Timings, Tokens, EngineSummary)
from runner.reporting.stats import prefix_share, project, summary


@dataclass
class RunOptions:
    out: Path
    limit: int | None = None
    estimate: int | None = None      # overrides the recipe's `estimate`
    command: str = ""
    progress: bool = True
    progress_file: Any = None        # where the progress bar goes (default: stderr)


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def prepare(lr: LoadedRecipe, opts: RunOptions):
    """Everything before the model: examples and rendered prompt messages."""
    r = lr.recipe
    base = Path(lr.base_dir)
    examples = load_examples(r.dataset.model_copy(update={"limit": None}), base, lr.path)
    n_dataset = len(examples)
    if r.dataset.limit:
        examples = examples[: r.dataset.limit]
    if opts.limit:
        examples = examples[: opts.limit]
    est = opts.estimate or r.estimate
    n_target = len(examples)
    if est and est < len(examples):
        # a random sample (fixed seed), in dataset order: the first N of a file grouped by
        # article are not representative of the rest
        keep = sorted(random.Random(0).sample(range(len(examples)), est))
        examples = [examples[i] for i in keep]
    builder = PromptBuilder(r.prompt, base, lr.path)
    messages = [builder.messages(ex) for ex in examples]
    return examples, messages, n_dataset, n_target


def _progress_bar(total: int, name: str, enabled: bool, stream: Any = None):
    from tqdm import tqdm
    return tqdm(total=total, desc=name, unit="ex", disable=not enabled, file=stream or sys.stderr, dynamic_ncols=True,
                mininterval=0.5)


def run_recipe(lr: LoadedRecipe, opts: RunOptions, prepared: tuple | None = None,
               inputs: dict[str, str] | None = None) -> RunResult:
    """Run one recipe in this process; always returns a RunResult (status failed on error).
    `prepared` and `inputs`: what prepare(lr, opts) and input_hashes(lr) returned, when the caller
    has them already (the data is then what was checked, and the hashes are of that moment)."""
    r = lr.recipe
    out_dir = opts.out / r.name
    out_dir.mkdir(parents=True, exist_ok=True)
    started, t_start = now(), time.perf_counter()
    base = RunResult(name=r.name, recipe=r.canonical(), recipe_hash=r.digest(), recipe_path=lr.path,
                     status="failed", command=opts.command, started_at=started,
                     scores_meaningful=not (r.model.load_format == "dummy" or is_builtin(r.model.id)))
    engine = mem = None
    try:
        examples, messages, n_dataset, n_target = prepared or prepare(lr, opts)
        base.n_dataset = n_dataset
        inputs = inputs or input_hashes(lr)
        key = base.run_key = run_key(lr, opts, inputs)
        partial = out_dir / PARTIAL
        done = load_partial(partial, key, r.metrics)
        todo = [i for i, ex in enumerate(examples) if ex.id not in done]
        from runner.execution.gpumem import PeakSampler
        mem = PeakSampler().__enter__()       # whole device, from before the engine starts
        engine = r.engine.build(r.model, r.prompt.chat_template)
        texts, ids = engine.encode(messages)
        new: dict[int, Sample] = {}
        if not done:
            write_text_atomic(partial, json.dumps({"_run_key": key}) + "\n")

        clock = [time.perf_counter()]
        one_at_a_time = [True]       # per-example wall times are real only when examples finish one by one

        def sink(finished):
            one_at_a_time[0] &= len(finished) == 1
            now_ = time.perf_counter()
            wall, clock[0] = (now_ - clock[0]) / max(len(finished), 1), now_
            lines = []
            for j, g in finished:
                i = todo[j]
                # wall time per example, overheads included (what projections need)
                new[i] = _sample(examples[i], texts[i], g, r.metrics, seconds=wall)
                lines.append(json.dumps(new[i].to_line(), ensure_ascii=False) + "\n")
            append_lines(partial, lines)

        bar = _progress_bar(len(ids), r.name, opts.progress, opts.progress_file)
        bar.update(len(done))
        t0 = clock[0] = time.perf_counter()
        engine.generate([ids[i] for i in todo], r.sampling, progress=bar.update if opts.progress else None,
                        sink=sink)
        # generation ends when the last output is back (the sink's clock), as a plain generate()
        # call would time it: what an engine does after handing over its last outputs (for vLLM:
        # scoring and writing every sample, metrics, knob evidence) counts in total time only;
        # an engine that hands over batch by batch keeps the earlier batches' scoring inside
        gen_s = (clock[0] if new else time.perf_counter()) - t0
        mem.__exit__(None, None, None)
        bar.close()
        samples = [done[ex.id] if ex.id in done else new[i] for i, ex in enumerate(examples)]
        write_jsonl_atomic(out_dir / "samples.jsonl", [s.to_line() for s in samples])
        partial.unlink(missing_ok=True)
        reused_s = sum(d.seconds or 0.0 for d in done.values())
        result = _assemble(base, r, samples, ids, engine.info, gen_s + reused_s, mem, n_target,
                           per_example=one_at_a_time[0])
        result.reused_samples = len(done)
        if done:
            result.notes.append(f"{len(done)} of {len(samples)} samples were reused from an earlier, interrupted "
                                f"run of the same recipe; generation time adds their recorded wall time "
                                f"({reused_s:.1f} s) to this run's ({gen_s:.1f} s).")
    except RunnerError as e:
        base.error, base.hint = e.render(with_hint=False), e.hint
        result = base
    except Exception as e:   # engine crash, OOM, ...: recorded as this recipe's failure
        base.error = f"{type(e).__name__}: {e}"
        base.hint = failure_hint(base.error)
        import traceback
        traceback.print_exc()
        result = base
    finally:
        if mem is not None:
            mem.__exit__(None, None, None)     # idempotent: stops the sampler thread on every path
        if engine is not None:
            engine.close()
    result.timings.total_s = time.perf_counter() - t_start
    result.finished_at = now()
    result.environment = {**environment.collect(), **result.environment}
    if r.model.trust_remote_code:
        result.notes.append("trust_remote_code was ON: code shipped with the checkpoint was allowed to run.")
    result.environment["inputs"] = inputs if inputs is not None else input_hashes(lr)
    write_json_atomic(out_dir / "results.json", result.model_dump(mode="json"))
    return result


PARTIAL = "samples.partial.jsonl"
NOT_IN_KEY = {"description", "baseline", "timeout_s"}   # change nothing a run produces


def run_key(lr: LoadedRecipe, opts: RunOptions, inputs: dict[str, str] | None = None) -> str:
    """`inputs`: input_hashes(lr) when the caller has them already (hashing a dataset is not free)."""
    import hashlib
    recipe = {k: v for k, v in lr.recipe.canonical().items() if k not in NOT_IN_KEY}
    blob = json.dumps({"recipe": recipe, "inputs": inputs if inputs is not None else input_hashes(lr),
                       "limit": opts.limit,
                       "estimate": opts.estimate}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def load_partial(path: Path, key: str, metrics: list[str]) -> dict[str, Sample]:
    """Samples finished by an earlier, interrupted run of the same recipe (same key), by id."""
    if not path.exists():
        return {}
    lines = path.read_text(encoding="utf-8").splitlines()
    try:
        head = json.loads(lines[0]) if lines else {}
    except json.JSONDecodeError:
        head = {}
    if head.get("_run_key") != key:
        path.unlink()
        return {}
    out = {}
    for line in lines[1:]:
        try:
            d = json.loads(line)
        except json.JSONDecodeError:   # a line cut by the interruption
            break
        out[str(d["id"])] = Sample.from_line(d, metrics)
    return out


def _sample(ex: Any, prompt: str, g: Any, metrics: list[str], seconds: float | None) -> Sample:
    scores = {m: METRICS[m](g.text, ex.answers) for m in metrics} if ex.answers else {}
    return Sample(id=ex.id, prompt=prompt, output=g.text, answers=list(ex.answers),
                  prompt_tokens=g.prompt_tokens, output_tokens=g.output_tokens, scores=scores,
                  cached_tokens=g.cached_tokens, ttft_s=g.ttft_s, latency_s=g.latency_s, seconds=seconds)


def input_hashes(lr: LoadedRecipe) -> dict[str, str]:
    from runner.files import file_sha256
    from runner.inputs.prompts import find_template
    base = Path(lr.base_dir)
    r = lr.recipe
    out = {}
    for name in [r.prompt.template, r.prompt.system_template]:
        if name:
            p = find_template(name, base)
            if p:
                out[f"template:{name}"] = file_sha256(p)
    for label, spec in (("dataset", r.dataset), ("shots", r.prompt.shots.source)):
        dsf = dataset_file(spec, base) if spec is not None else None
        if dsf and dsf.exists():
            out[f"{label}:{spec.path}"] = file_sha256(dsf)
    return out


def failure_hint(error: str) -> str | None:
    e = error.lower()
    if "out of memory" in e or "outofmemory" in e or "less than desired gpu memory" in e or "cuda oom" in e:
        return ("GPU memory ran out: lower engine.gpu_memory_utilization or engine.max_model_len, use a "
                "quantized checkpoint (engine.quantization), set engine.cpu_offload_gb, or a smaller "
                "engine.batch_size (transformers)")
    if "not a valid model identifier" in e or "repository not found" in e or "no such file" in e \
            or "can't load" in e or "does not appear to have" in e or "repo id must be" in e \
            or "model folder not found" in e:
        return "check model.id (a hub id needs network access; here pass a local folder with --set model.id=PATH)"
    return None


def _mean_scores(samples: list[Sample], metrics: list[str]) -> dict[str, float]:
    """Each metric averaged over the examples that have gold answers (others are not scored)."""
    scored = [s for s in samples if s.scores]
    if not scored:
        return {}
    return {m: sum(s.scores[m] for s in scored) / len(scored) for m in metrics}


def _pct(xs: list[float | None]) -> Percentiles | None:
    s = summary([x for x in xs if x is not None])
    return Percentiles(**s) if s else None


def _assemble(base: RunResult, r: Any, samples: list[Sample], ids: list[list[int]], info: Any, gen_s: float,
              mem: Any, n_target: int, per_example: bool) -> RunResult:
    n = len(samples)
    p_tok = sum(s.prompt_tokens for s in samples)
    o_tok = sum(s.output_tokens for s in samples)
    cached = [s.cached_tokens for s in samples if s.cached_tokens is not None]
    k, share = prefix_share(ids)
    res = base.model_copy(update=dict(
        status="ok", n_samples=n,
        timings=Timings(load_s=info.load_s, generate_s=gen_s),
        tokens=Tokens(prompt=p_tok, output=o_tok, cached=sum(cached) if cached else None),
        throughput=Throughput(requests_per_s=n / gen_s if gen_s and n else None,
                              output_tokens_per_s=o_tok / gen_s if gen_s and n else None,
                              total_tokens_per_s=(p_tok + o_tok) / gen_s if gen_s and n else None),
        latency=Latency(ttft_s=_pct([s.ttft_s for s in samples]), e2e_s=_pct([s.latency_s for s in samples])),
        scores=_mean_scores(samples, r.metrics),
        memory=Memory(peak_gpu_gib=mem.peak, baseline_gpu_gib=mem.start_gib, weights_gib=info.weights_gib,
                      kv_cache_tokens=info.kv_cache_tokens, kv_cache_gib=info.extra.get("kv_cache_gib")),
        prefix=Prefix(shared_prefix_tokens=k, shared_prefix_share=share,
                      hit_rate=(sum(cached) / p_tok if cached and p_tok else None)),
        knobs=[KnobResult(name=kn.name, requested=kn.requested, effective=kn.effective, status=kn.status,
                          evidence=kn.evidence) for kn in info.knobs],
        engine=EngineSummary(name=info.name, version=info.version, device=info.device, quantization=info.quantization),
        notes=list(info.notes),
    ))
    if n < n_target:
        secs = [s.seconds for s in samples if s.seconds is not None]
        if per_example and len(secs) == n and n >= 2:
            p = project(secs, n_target)
            p["low_s"] = max(p["low_s"], 0.0)
            method = "per-example wall times of a random sample, mean x N, 95% t-interval"
        else:
            per = gen_s / n
            p = {"per_example_s": per, "projected_s": per * n_target, "low_s": None, "high_s": None}
            method = ("generation time of a random sample scaled linearly (examples ran in batches: no "
                      "per-example times, no interval)")
        res.estimate = Estimate(n_measured=n, n_total=n_target, method=method, **p)
    for kn in res.knobs:
        if kn.status == "ignored":
            res.notes.append(f"knob `{kn.name}` did NOT take effect: requested {kn.requested!r}, "
                             f"effective {kn.effective!r} ({kn.evidence})")
    res.environment = {"engine_extra": {k: v for k, v in info.extra.items() if k != "metrics"}}
    if info.extra.get("metrics"):
        res.environment["vllm_metrics"] = info.extra["metrics"]
    return res
