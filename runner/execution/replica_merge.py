"""One recipe's result and samples.jsonl from its data-parallel replicas' runs (see replicas.py).

The shares' samples are merged in dataset order, tokens, scores and latencies recomputed from them,
generation time is the wall time from the first replica's generation start to the last one's end,
engine start the slowest one's."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from runner.execution.assemble import Measured, project_estimate, sample_figures
from runner.execution.job import Unit
from runner.execution.replicas import Replica, UnitFiles
from runner.reporting.results import Memory, Prefix, RunResult, Sample, Timings


@dataclass(frozen=True)
class Part:
    """One replica's run of one recipe, as the driver received it."""

    replica: Replica
    where: dict  # node_id, node_ip, pid, attempts
    result: RunResult
    files: UnitFiles | None  # None when the task itself failed


def replica_info(unit: Unit, p: Part) -> dict:
    """A row of results.json's `replicas`."""
    t = p.result.timings
    return {
        "index": p.replica.index,
        "examples": list(p.replica.bounds[unit.name]),
        **p.where,
        "status": p.result.status,
        "load_s": t.load_s,
        "generate_s": t.generate_s,
        "reused_samples": p.result.reused_samples,
    }


def merge_failed(unit: Unit, parts: list[Part]) -> RunResult:
    """The recipe's failure: the first failed replica's, saying which share of the examples it had."""
    bad = [p for p in parts if p.result.status != "ok"] or [p for p in parts if not (p.files and p.files.samples)]
    first, n = bad[0], bad[0].replica.of
    error = first.result.error or "the run wrote no samples.jsonl"
    if n > 1:
        a, b = first.replica.bounds[unit.name]
        error = f"replica {first.replica.index + 1} of {n} (examples {a + 1}-{b}): {error}"
        error += f" (and {len(bad) - 1} more of its replicas failed)" if len(bad) > 1 else ""
    return first.result.model_copy(
        update={"status": "failed", "error": error, "n_samples": 0, "n_dataset": unit.prepared.n_dataset}
    )


def _window(parts: list[Part], what: str) -> float:
    """From the first replica's start of `what` (generation or the whole run) to the last one's end,
    on each node's own clock; the longest replica's if an end is unknown."""
    ends = [getattr(p.files, "generation_end" if what == "generate_s" else "run_end", None) for p in parts]
    spans = [getattr(p.result.timings, what) or 0.0 for p in parts]
    if any(e is None for e in ends):
        return max(spans)
    return max(ends) - min(e - s for e, s in zip(ends, spans, strict=True))  # type: ignore[operator]


def _knobs(results: list[RunResult]) -> list:
    """The first replica's knobs, except where another replica saw one not take effect."""
    ignored = {k.name: k for res in results for k in res.knobs if k.status == "ignored"}
    return [ignored.get(k.name, k) for k in results[0].knobs]


def _prefix(
    samples: list[Sample], results: list[RunResult], p_tok: int, cached: list[int], shards: list[list[Sample]]
) -> tuple[Prefix, bool]:
    """The shared prefix is the smallest of the replicas' (token ids do not come back): exact when the
    replica with the smallest shares just the text prefix that all prompts share."""
    ks = [r.prefix.shared_prefix_tokens for r in results]
    k, text = min(ks), os.path.commonprefix([s.prompt for s in samples])
    exact = any(
        ki == k and os.path.commonprefix([s.prompt for s in sh]) == text for ki, sh in zip(ks, shards, strict=True)
    )
    return Prefix(
        shared_prefix_tokens=k,
        shared_prefix_share=k * len(samples) / p_tok if p_tok else 0.0,
        hit_rate=sum(cached) / p_tok if cached and p_tok else None,
    ), exact


def _notes(parts: list[Part], exact_prefix: bool) -> list[str]:
    """Notes every replica made once; the others each with the replica that made it."""
    n = parts[0].replica.of
    common = [x for x in parts[0].result.notes if all(x in p.result.notes for p in parts)]
    notes = common + [
        f"replica {p.replica.index + 1} of {n}: {x}" for p in parts for x in p.result.notes if x not in common
    ]
    notes.append(
        f"ran as {n} data-parallel replicas on Ray, each on a contiguous share of the examples: "
        "generation time is the wall time from the first replica's generation start to the last "
        "one's end (each node's clock), engine start the slowest replica's; tokens, scores and "
        "latencies are over the merged samples"
    )
    if not exact_prefix:
        notes.append(
            "shared prefix tokens: the smallest of the replicas' values, an upper bound here (the "
            "replicas' prompts do not all share the text prefix all prompts share)"
        )
    return notes


def _shards(parts: list[Part], metrics: list[str]) -> list[list[Sample]]:
    """Each replica's samples, as its samples.jsonl holds them."""
    return [
        [Sample.from_line(json.loads(x), metrics) for x in (p.files.samples or b"").splitlines() if x.strip()]
        for p in parts
        if p.files
    ]


def _memory(results: list[RunResult]) -> Memory:
    """The first replica's memory record with the highest peak and baseline of all replicas."""
    peaks = [x.memory.peak_gpu_gib for x in results if x.memory.peak_gpu_gib is not None]
    bases = [x.memory.baseline_gpu_gib for x in results if x.memory.baseline_gpu_gib is not None]
    return results[0].memory.model_copy(
        update={"peak_gpu_gib": max(peaks) if peaks else None, "baseline_gpu_gib": max(bases) if bases else None}
    )


def merge_ok(unit: Unit, parts: list[Part]) -> tuple[RunResult, bytes]:
    """The recipe's result and samples.jsonl from its replicas' (all ok), in dataset order."""
    r = unit.loaded.recipe
    results = [p.result for p in parts]
    shards = _shards(parts, r.metrics)
    samples = [s for sh in shards for s in sh]
    p_tok = sum(s.prompt_tokens for s in samples)
    cached = [s.cached_tokens for s in samples if s.cached_tokens is not None]
    gen_s = _window(parts, "generate_s")
    prefix, exact = _prefix(samples, results, p_tok, cached, shards)
    m = Measured(
        generate_s=gen_s, peak_gpu_gib=None, baseline_gpu_gib=None, per_example=False, n_target=unit.prepared.n_target
    )
    res = results[0].model_copy(
        update={
            **sample_figures(samples, r.metrics, gen_s),
            "n_dataset": unit.prepared.n_dataset,
            "memory": _memory(results),
            "timings": Timings(
                load_s=max(x.timings.load_s or 0.0 for x in results),
                generate_s=gen_s,
                total_s=max(_window(parts, "total_s"), gen_s),
            ),  # gen_s counts reused samples' time
            "prefix": prefix,
            "knobs": _knobs(results),
            "estimate": project_estimate(samples, m) if samples and len(samples) < m.n_target else None,
            "notes": _notes(parts, exact),
            "reused_samples": sum(x.reused_samples for x in results),
            "started_at": min(x.started_at for x in results),
            "finished_at": max(x.finished_at for x in results),
        }
    )
    return res, b"".join(p.files.samples or b"" for p in parts if p.files)
