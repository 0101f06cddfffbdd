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
   sends the ids. Each round also runs the runner's client on the text (side `runner-text`; leave it
   out with --no-text-side), so a difference that comes from ids vs text shows on its own. Why the JSQuAD
   prompts rather than vllm bench's `random` dataset: the runner cannot send `random`'s prompts, and
   JSQuAD's shared one-shot head is what prefix caching works on in the study.
4. Prints each round as it ends (TTFT p50, TPOT p50, request throughput of each side and runner / vllm
   bench, with per-request paired differences), then the medians over rounds. Target: every ratio
   within 5% of 1.
5. Prints the median over rounds of each round's ratio (side / vllm bench in the same round) and the
   request-by-request differences pooled over all rounds: the server's latency drifts between rounds by
   far more than 5% (its own TTFT p50 under vllm bench moved 45-81 ms on one server), so a round's ratio
   is the figure that holds that drift fixed.

GPU host only (vLLM importable); every line is flushed as it is written. Logs and results under --out.
`--combine A/summary.json B/summary.json.gz ...` pools the rounds of earlier runs instead (no GPU).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from serve_pairing import (  # noqa: E402  (benchmarks/ is not a package)
    bench_detail,
    combine,
    median,
    paired,
    pooled,
    runner_detail,
    say,
    table,
)

HOST = "127.0.0.1"


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


def run_runner(a: argparse.Namespace, r, prompts: list, base_url: str) -> dict:
    """The runner's client on `prompts` (token ids, or the same prompts as text)."""
    from runner.execution.serve_run import request_sampling
    from runner.serving.client import run_rate
    from runner.serving.latency import summarize

    sampling = request_sampling(r.sampling)
    run = run_rate(base_url, r.model.id, prompts, sampling, a.rate, 1.0, None, a.seed, a.warmups + 1)
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


def run_round(a, r, data: Path, port: int, work: Path, k: int, order: list[str], prompts: dict, server) -> dict:
    """One run per side, in `order`, each after emptying the prefix cache; a failed side is reported."""
    got = {}
    for who in order:
        server.reset_prefix_cache()
        t = time.perf_counter()
        try:
            got[who] = (
                run_bench(a, r, data, port, work, k)
                if who == "bench"
                else run_runner(a, r, prompts[who], server.base_url)
            )
        except Exception:  # one failed side: report it, keep the server and the other rounds
            say(f"round {k}: {who} failed:\n{traceback.format_exc()}")
            continue
        say(f"round {k}: {who} done in {time.perf_counter() - t:.1f} s")
    return got


def args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("recipe", nargs="?", help="the recipe (not with --combine)")
    ap.add_argument("--combine", nargs="+", metavar="SUMMARY", help="pool earlier runs' summary.json files")
    ap.add_argument("--only", help="the study cell to use (default: the file's first)")
    ap.add_argument("--model-path", action="append", default=[])
    ap.add_argument("--set", dest="sets", action="append", default=[])
    ap.add_argument("--rate", type=float, default=50.0, help="offered requests/s (default 50)")
    ap.add_argument("--num-prompts", type=int, default=1000)
    ap.add_argument("--warmups", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=3, help="rounds of one run per side, rotating which goes first")
    ap.add_argument(
        "--no-text-side",
        dest="text_side",
        action="store_false",
        help="leave out the runner's client on the text prompts (side runner-text)",
    )
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
    if a.combine:
        return combine(a.combine)
    if not a.recipe:
        say("a recipe is needed (or --combine SUMMARY ...)")
        return 2
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
    sides = ["bench", "runner"] + (["runner-text"] if a.text_side else [])
    prompts = {"runner": ids, "runner-text": texts}
    done: dict[str, list[dict]] = {k: [] for k in sides}
    t0 = time.perf_counter()
    with Server(cmd, f"http://{HOST}:{port}", work / "server.log", env=r.engine.serve_env()) as server:
        say(f"server ready in {server.startup_s:.1f} s")
        for k in range(1, a.rounds + 1):
            order = sides[(k - 1) % len(sides) :] + sides[: (k - 1) % len(sides)]
            got = run_round(a, r, data, port, work, k, order, prompts, server)
            if len(got) < len(sides):  # the pooled figures pair sides round by round
                say(f"round {k}: {', '.join(w for w in sides if w not in got)} failed; left out of the medians")
            else:
                for who in sides:
                    done[who].append(got[who])
            if "bench" not in got:
                continue
            say(f"\nround {k} (order: {', '.join(order)}), {a.rate:g} req/s offered")
            for who in sides[1:]:
                if who in got:
                    say(table(got["bench"], got[who], who))
                    say(paired(got["bench"]["detail"], got[who]["detail"]) + "\n")
    say(f"server stopped; {time.perf_counter() - t0:.0f} s in all")
    if not done["bench"]:
        say("no round completed")
        return 1
    if len(done["bench"]) > 1:
        for who in sides[1:]:
            if done[who]:
                say(f"\nmedian of {len(done[who])} rounds\n{table(median(done['bench']), median(done[who]), who)}")
    say("\n" + pooled(done))
    (work / "summary.json").write_text(json.dumps({**done, "rate": a.rate}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
