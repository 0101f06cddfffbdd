"""The runner's serving client against `vllm bench serve`, on one vLLM server, same prompts, rate and seed.

    python benchmarks/serve_vs_vllm_bench.py RECIPE [--only CELL] [--model-path ID=PATH] [--set k=v ...]
        [--rate 50] [--num-prompts 1000] [--warmups 20] [--seed 0] [--rounds 2] [--out DIR]

1. Renders the recipe's prompts and token ids with the runner's own code (chat template applied), takes the
   first --num-prompts (cycled when the dataset is smaller, as `load.num_requests` does).
2. Starts the recipe's engine as a server (`recipe.engine.serve_command`, runner.serving.server.Server)
   and keeps it for every round.
3. Per round, in alternating order (a warm cache or a noisy neighbour should not always favour one side),
   each after emptying the prefix cache (POST /reset_prefix_cache):
   - `vllm bench serve --backend vllm --dataset-name custom --skip-chat-template --disable-shuffle`
     on a JSONL file of the same rendered prompts, in the same order, `--custom-output-len` = the
     recipe's max_tokens, `--request-rate R --seed S --num-warmups W`, greedy (`--temperature 0
     --top-p 1 --top-k 0 --min-p 0`), `--ignore-eos` when the recipe sets it;
   - the runner's client (runner.serving.client.run_rate) on the token ids of those prompts, same rate,
     seed and sampling, W + 1 warmup requests (vllm bench sends one test request before its W warmups).
   Both draw the same arrival schedule (numpy's legacy generator seeded with S; runner/serving/arrivals.py)
   and send the same prompts in the same order; the one difference is that vllm bench sends text, which
   the server tokenizes (the script checks the text re-tokenizes to the runner's ids), while the runner
   sends the ids. Why the JSQuAD prompts rather than vllm bench's `random` dataset: the runner cannot send
   `random`'s prompts, and JSQuAD's shared one-shot head is what prefix caching works on in the study.
4. Prints each round as it ends (TTFT p50, TPOT p50, request throughput of both and runner / vllm bench),
   then the medians over rounds. Target: every ratio within 5% of 1.

GPU host only (vLLM importable); every line is flushed as it is written. Logs and results under --out.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ROWS = [
    ("TTFT p50 (ms)", "ttft_p50_ms"),
    ("TPOT p50 (ms)", "tpot_p50_ms"),
    ("requests/s", "request_throughput"),
    ("TTFT p99 (ms)", "ttft_p99_ms"),
    ("output tok/s", "output_throughput"),
]
TARGET = 0.05
HOST = "127.0.0.1"


def say(*a: object) -> None:
    print(*a, flush=True)


def workload(a: argparse.Namespace):
    """The recipe, the measured prompts as text (chat template applied) and as the runner's token ids."""
    from runner.cli.loading import load_all
    from runner.engines.tokenizing import encode_prompts
    from runner.execution.serve_run import recipe_tokenizer
    from runner.inputs.prepare import prepare

    lr = load_all((a.recipe,), tuple(a.sets), tuple(a.model_path), a.only)[0]
    r = lr.recipe
    tok, chat = recipe_tokenizer(r)  # as `runner go` tokenizes a serving run's prompts
    texts, ids = encode_prompts(tok, list(prepare(lr).messages), chat)
    order = [i % len(ids) for i in range(a.num_prompts or len(ids))]
    texts, ids = [texts[i] for i in order], [ids[i] for i in order]
    again = tok(texts, add_special_tokens=True)["input_ids"]  # what the server makes of vllm bench's text
    differ = sum(list(x) != y for x, y in zip(again, ids, strict=True))
    say(
        f"workload: {r.name}, {len(ids)} prompts, {sum(map(len, ids)):,} prompt tokens, max_tokens "
        f"{r.sampling.max_tokens}, ignore_eos {r.sampling.ignore_eos}; the text of {differ} prompts tokenizes "
        f"differently from the runner's ids" + (" (compare with care)" if differ else "")
    )
    return r, texts, ids


def run_bench(a: argparse.Namespace, r, data: Path, port: int, work: Path, k: int) -> dict:
    name = f"bench-{k}.json"
    cmd = [
        *shlex.split(a.bench_cmd),
        "--backend",
        "vllm",
        "--base-url",
        f"http://{HOST}:{port}",
        "--endpoint",
        "/v1/completions",
        "--model",
        r.model.id,
        "--tokenizer",
        r.model.tokenizer_id,
        "--dataset-name",
        "custom",
        "--dataset-path",
        str(data),
        "--custom-output-len",
        str(r.sampling.max_tokens),
        "--skip-chat-template",
        "--disable-shuffle",
        "--num-prompts",
        str(a.num_prompts),
        "--request-rate",
        str(a.rate),
        "--burstiness",
        "1",
        "--seed",
        str(a.seed),
        "--num-warmups",
        str(a.warmups),
        "--temperature",
        "0",
        "--top-p",
        "1",
        "--top-k",
        "0",
        "--min-p",
        "0",
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--metric-percentiles",
        "50,90,99",
        "--save-result",
        "--result-dir",
        str(work),
        "--result-filename",
        name,
        "--disable-tqdm",
        "--save-detailed",
    ]
    if r.sampling.ignore_eos:
        cmd.append("--ignore-eos")
    with open(work / f"bench-{k}.log", "w") as log:
        log.write(" ".join(cmd) + "\n")
        log.flush()
        rc = subprocess.run(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            timeout=a.bench_timeout,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        ).returncode
    if rc != 0:
        tail = (work / f"bench-{k}.log").read_text(errors="replace").splitlines()[-15:]
        raise RuntimeError(f"vllm bench serve exited with {rc}:\n" + "\n".join(tail))
    res = json.loads((work / name).read_text())
    return {
        "ttft_p50_ms": res["median_ttft_ms"],
        "tpot_p50_ms": res["median_tpot_ms"],
        "request_throughput": res["request_throughput"],
        "ttft_p99_ms": res["p99_ttft_ms"],
        "output_throughput": res["output_throughput"],
        "completed": res["completed"],
        "output_tokens": res["total_output_tokens"],
        "detail": bench_detail(res),
    }


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
    for key, label, scale in (("start_s", "send time", 1000.0), ("ttft_ms", "TTFT", 1.0), ("tpot_ms", "TPOT", 1.0)):
        d = [(q - b) * scale for b, q in zip(bench[key], runner[key]) if b is not None and q is not None]
        if not d:
            continue
        qs = statistics.quantiles(d, n=10) if len(d) > 1 else [d[0]] * 9
        out.append(
            f"  {label}: runner - bench median {statistics.median(d):+.2f} ms"
            f" (10th {qs[0]:+.2f}, 90th {qs[-1]:+.2f}; {sum(x > 0 for x in d)}/{len(d)} requests later/higher)"
        )
    return "paired, request by request:\n" + "\n".join(out)


def run_runner(a: argparse.Namespace, r, ids: list[list[int]], base_url: str) -> dict:
    from runner.execution.serve_run import request_sampling
    from runner.serving.client import run_rate
    from runner.serving.latency import summarize

    run = run_rate(base_url, r.model.id, ids, request_sampling(r.sampling), a.rate, 1.0, None, a.seed, a.warmups + 1)
    s = summarize(run.records, a.rate)
    if s.errors:
        say(f"  runner: {s.errors} failed requests, e.g. {s.error_samples[:2]}")
    return {
        "ttft_p50_ms": s.ttft_ms["p50"] if s.ttft_ms else float("nan"),
        "tpot_p50_ms": s.tpot_ms["p50"] if s.tpot_ms else float("nan"),
        "request_throughput": s.request_throughput,
        "ttft_p99_ms": s.ttft_ms["p99"] if s.ttft_ms else float("nan"),
        "output_throughput": s.output_throughput,
        "completed": s.completed,
        "output_tokens": s.output_tokens,
        "detail": runner_detail(run.records),
    }


def table(bench: dict, runner: dict) -> str:
    lines = [f"{'':16}{'vllm bench':>12}{'runner':>12}{'ratio':>9}  target: within {TARGET:.0%}"]
    for label, key in ROWS:
        b, q = bench[key], runner[key]
        ratio = q / b if b else float("nan")
        ok = ("ok" if abs(ratio - 1) <= TARGET else "MISSED") if key in dict(ROWS[:3]).values() else ""
        lines.append(f"{label:16}{b:12.2f}{q:12.2f}{ratio:9.3f}  {ok}")
    lines.append(f"{'completed':16}{bench['completed']:12.0f}{runner['completed']:12.0f}")
    lines.append(f"{'output tokens':16}{bench['output_tokens']:12.0f}{runner['output_tokens']:12.0f}")
    return "\n".join(lines)


def median(runs: list[dict]) -> dict:
    return {k: statistics.median(x[k] for x in runs) for k in runs[0] if k != "detail"}


def args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("recipe")
    ap.add_argument("--only", help="the study cell to use (default: the file's first)")
    ap.add_argument("--model-path", action="append", default=[])
    ap.add_argument("--set", dest="sets", action="append", default=[])
    ap.add_argument("--rate", type=float, default=50.0, help="offered requests/s (default 50)")
    ap.add_argument("--num-prompts", type=int, default=1000)
    ap.add_argument("--warmups", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=2, help="pairs of runs, alternating which goes first")
    ap.add_argument("--bench-timeout", type=float, default=600)
    ap.add_argument(
        "--bench-cmd",
        default=f"{sys.executable} -m vllm.entrypoints.cli.main bench serve",
        help="the command that runs `vllm bench serve` (default: this Python's vLLM)",
    )
    ap.add_argument("--out", default=str(Path(tempfile.gettempdir()) / "serve-bench"))
    return ap.parse_args()


def main() -> int:
    a = args()
    from runner.serving.server import Server, free_port

    work = Path(a.out).resolve()
    work.mkdir(parents=True, exist_ok=True)
    r, texts, ids = workload(a)
    data = work / "prompts.jsonl"
    data.write_text(
        "".join(
            json.dumps({"prompt": t, "output_tokens": r.sampling.max_tokens}, ensure_ascii=False) + "\n" for t in texts
        ),
        encoding="utf-8",
    )
    port = free_port(HOST)
    cmd = r.engine.serve_command(r.model, HOST, port)
    say(f"server: {' '.join(cmd)}\n  log: {work / 'server.log'}")
    benches, runners = [], []
    t0 = time.perf_counter()
    with Server(cmd, f"http://{HOST}:{port}", work / "server.log", env=r.engine.serve_env()) as server:
        say(f"server ready in {server.startup_s:.1f} s")
        for k in range(1, a.rounds + 1):
            order = ("bench", "runner") if k % 2 else ("runner", "bench")
            got = {}
            for who in order:
                server.reset_prefix_cache()
                t = time.perf_counter()
                try:
                    got[who] = (
                        run_bench(a, r, data, port, work, k)
                        if who == "bench"
                        else run_runner(a, r, ids, server.base_url)
                    )
                except Exception:  # one failed side: report it, keep the server and the other rounds
                    say(f"round {k}: {who} failed:\n{traceback.format_exc()}")
                    continue
                say(f"round {k}: {who} done in {time.perf_counter() - t:.1f} s")
            if len(got) == 2:
                benches.append(got["bench"])
                runners.append(got["runner"])
                say(f"\nround {k} ({order[0]} first), {a.rate:g} req/s offered\n{table(got['bench'], got['runner'])}")
                say(paired(got["bench"].pop("detail"), got["runner"].pop("detail")) + "\n")
    say(f"server stopped; {time.perf_counter() - t0:.0f} s in all")
    if not benches:
        say("no round completed on both sides")
        return 1
    if len(benches) > 1:
        say(f"\nmedian of {len(benches)} rounds\n{table(median(benches), median(runners))}")
    (work / "summary.json").write_text(json.dumps({"bench": benches, "runner": runners, "rate": a.rate}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
