"""What benchmarks/serve_vs_vllm_bench.py computes from the two sides' results (no GPU, no vLLM): per-request
figures of each side, their request-by-request differences, the per-round table and the figures pooled
over rounds (the median of each round's ratio), and `--combine` over earlier runs' summary files."""

from __future__ import annotations

import json
import statistics


def say(*a: object) -> None:
    print(*a, flush=True)


ROWS = [
    ("TTFT p50 (ms)", "ttft_p50_ms"),
    ("TPOT p50 (ms)", "tpot_p50_ms"),
    ("requests/s", "request_throughput"),
    ("TTFT p99 (ms)", "ttft_p99_ms"),
    ("output tok/s", "output_throughput"),
]
TARGET = 0.05
TARGETED = {key for _, key in ROWS[:3]}  # the figures the target applies to
# per-request figures compared request by request: key, label, scale to ms
FIGURES = (("start_s", "send time", 1000.0), ("ttft_ms", "TTFT", 1.0), ("tpot_ms", "TPOT", 1.0))


def verdict(ratio: float) -> str:
    return "ok" if abs(ratio - 1) <= TARGET else "MISSED"


def differences(pairs: list[tuple[dict, dict]], key: str, scale: float) -> list[float]:
    """(side - bench) * scale of one per-request figure, request by request over (bench, side) details,
    where both have it."""
    return [
        (q - b) * scale
        for bench, side in pairs
        for b, q in zip(bench.get(key) or [], side.get(key) or [])
        if b is not None and q is not None
    ]


def bench_detail(res: dict) -> dict:
    """Per request, in the order sent: send time (s, from the first send), TTFT and TPOT (ms), from the
    `--save-detailed` fields of vllm bench's result (TPOT = sum of a request's ITLs / (output tokens - 1),
    its own definition, since its E2E is TTFT plus those gaps)."""
    starts = res.get("start_times") or []
    if not starts:
        return {}
    t0 = min(starts)
    tpot = [
        sum(itl) * 1000 / (n - 1) if n and n > 1 and ttft else None
        for itl, n, ttft in zip(res["itls"], res["output_lens"], res["ttfts"], strict=True)
    ]
    return {
        "start_s": [t - t0 for t in starts],
        "ttft_ms": [t * 1000 if t else None for t in res["ttfts"]],
        "tpot_ms": tpot,
    }


def runner_detail(records: list) -> dict:
    """The same per-request figures from the runner's records (sent_s is relative to the rate's start)."""
    from runner.serving.latency import tpot_s

    sent = [r.sent_s for r in records if r.sent_s is not None]
    t0 = min(sent) if sent else 0.0
    return {
        "start_s": [None if r.sent_s is None else r.sent_s - t0 for r in records],
        "ttft_ms": [None if r.ttft_s is None else r.ttft_s * 1000 for r in records],
        "tpot_ms": [None if (t := tpot_s(r)) is None else t * 1000 for r in records],
    }


def paired(bench: dict, runner: dict) -> str:
    """Request by request (both sides send the same prompts in the same order on the same schedule): the
    median difference runner - bench of send time, TTFT and TPOT. A schedule that differs shows in the
    first; a client that measures late shows as a difference in every request, noise as a spread."""
    if not bench or not runner or len(bench["start_s"]) != len(runner["start_s"]):
        return "paired: no per-request data on one side (or different counts)"
    out = []
    for key, label, scale in FIGURES:
        d = differences([(bench, runner)], key, scale)
        if not d:
            continue
        qs = statistics.quantiles(d, n=10) if len(d) > 1 else [d[0]] * 9
        out.append(
            f"  {label}: runner - bench median {statistics.median(d):+.2f} ms"
            f" (10th {qs[0]:+.2f}, 90th {qs[-1]:+.2f}; {sum(x > 0 for x in d)}/{len(d)} requests later/higher)"
        )
    return "paired, request by request:\n" + "\n".join(out)


def table(bench: dict, runner: dict, side: str = "runner") -> str:
    lines = [f"{'':16}{'vllm bench':>12}{side:>12}{'ratio':>9}  target: within {TARGET:.0%}"]
    for label, key in ROWS:
        b, q = bench[key], runner[key]
        ratio = q / b if b else float("nan")
        ok = verdict(ratio) if key in TARGETED else ""
        lines.append(f"{label:16}{b:12.2f}{q:12.2f}{ratio:9.3f}  {ok}")
    lines.append(f"{'completed':16}{bench['completed']:12.0f}{runner['completed']:12.0f}")
    lines.append(f"{'output tokens':16}{bench['output_tokens']:12.0f}{runner['output_tokens']:12.0f}")
    return "\n".join(lines)


def median(runs: list[dict]) -> dict:
    return {k: statistics.median(x[k] for x in runs) for k in runs[0] if k != "detail"}


def pooled(done: dict[str, list[dict]]) -> str:
    """Per side: the median over rounds of the round's ratio to vllm bench, and the request-by-request
    differences (side - bench) pooled over all rounds."""
    lines = []
    for who in [k for k in done if k != "bench" and isinstance(done[k], list)]:
        pairs = list(zip(done["bench"], done[who]))
        if not pairs:
            continue
        lines.append(f"{who}: median over {len(pairs)} rounds of the round's ratio to vllm bench (target within 5%)")
        for label, key in ROWS[:3]:
            ratios = [q[key] / b[key] for b, q in pairs if b[key]]
            med = statistics.median(ratios)
            lines.append(f"  {label:16}{med:9.3f}  {verdict(med)}   rounds: {' '.join(f'{x:.3f}' for x in ratios)}")
        details = [(b.get("detail") or {}, q.get("detail") or {}) for b, q in pairs]
        for key, label, scale in FIGURES:
            d = differences(details, key, scale)
            if d:
                lines.append(f"  {label}: {who} - bench, median over {len(d)} requests {statistics.median(d):+.2f} ms")
    return "\n".join(lines)


def combine(paths: list[str]) -> int:
    """Pool the rounds of earlier runs' summary.json files (plain or gzipped) and print `pooled`."""
    import gzip

    done: dict[str, list[dict]] = {}
    for path in paths:
        raw = gzip.open(path, "rt") if path.endswith(".gz") else open(path)
        with raw as f:
            one = json.load(f)
        for k, v in one.items():
            if isinstance(v, list):
                done.setdefault(k, []).extend(v)
    if not done.get("bench"):
        say("no rounds in " + ", ".join(paths))
        return 1
    say(pooled(done))
    return 0
