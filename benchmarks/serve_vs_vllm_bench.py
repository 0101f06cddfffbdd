"""The runner's serving wing against `vllm bench serve`, on one vLLM server, same prompts, rate and
seed.

    python benchmarks/serve_vs_vllm_bench.py RECIPE [--only CELL] [--model-path ID=PATH] [--set k=v
    ...]
        [--rate 50] [--num-prompts 1000] [--warmups 20] [--seed 0] [--rounds 3] [--out DIR]

The wing sends its requests with vLLM's own request function on `vllm bench serve`'s arrival
schedule (runner/serve/run.py), so the two should agree; this checks what the wing adds around them
(the schedule, the concurrency cap, the warmup, the arithmetic of the figures). The recipe's prompts
are rendered with the runner's own code (chat template applied); the first --num-prompts (cycled) go
to the recipe's engine started as a server, once per round and side, in alternating order, each
after emptying the prefix cache:
- `vllm bench serve --dataset-name custom --skip-chat-template --disable-shuffle` on the same
  prompts as text, same rate, seed and warmups, greedy, `--ignore-eos` when the recipe sets it; the
  server tokenizes the text (the script says how many prompts re-tokenize differently from the
  runner's ids);
- the wing (`run_rate`, `rate_point`) on the runner's token ids.
Prints each round's TTFT p50, TPOT p50 and achieved requests/s of both sides and their ratio
(target: within 5% of 1), then the median of each round's ratio. GPU host only (vLLM importable);
logs and results under --out."""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# the project root is put on the path above
from runner.config.calls import Asked, load_all  # noqa: E402
from runner.engines.hf import encode_prompts, load_tokenizer, uses_chat_template  # noqa: E402
from runner.inputs.prepare import prepare  # noqa: E402
from runner.serve.run import Target, rate_point, run_rate  # noqa: E402
from runner.serve.server import Server, command, free_port  # noqa: E402
from runner.wings import studies  # noqa: E402

KEYS = ("ttft_p50_ms", "tpot_p50_ms", "request_throughput")


# more than five parameters: left for now (issue 40)
def bench(a, r, data: Path, url: str, work: Path, k: int) -> dict:  # noqa: PLR0913
    name, s = f"bench-{k}.json", r.sampling
    cmd = [
        *shlex.split(a.bench_cmd),
        "--backend",
        "vllm",
        "--base-url",
        url,
        "--endpoint",
        "/v1/completions",
    ]
    cmd += ["--model", r.model.id, "--tokenizer", r.model.tokenizer_id, "--dataset-name", "custom"]
    cmd += [
        "--dataset-path",
        str(data),
        "--custom-output-len",
        str(s.max_tokens),
        "--skip-chat-template",
    ]
    cmd += [
        "--disable-shuffle",
        "--num-prompts",
        str(a.num_prompts),
        "--request-rate",
        str(a.rate),
        "--seed",
        str(a.seed),
    ]
    cmd += [
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
    ]
    cmd += ["--save-result", "--result-dir", str(work), "--result-filename", name, "--disable-tqdm"]
    cmd += ["--ignore-eos"] if s.ignore_eos else []
    with open(work / f"bench-{k}.log", "w") as log:
        subprocess.run(
            cmd, stdout=log, stderr=subprocess.STDOUT, timeout=a.bench_timeout, check=True
        )
    res = json.loads((work / name).read_text())
    return {"ttft_p50_ms": res["median_ttft_ms"], "tpot_p50_ms": res["median_tpot_ms"]} | {
        "request_throughput": res["request_throughput"]
    }


def wing(a, r, ids: list[list[int]], url: str) -> dict:
    load = SimpleNamespace(
        warmup_requests=a.warmups, max_concurrency=None, burstiness=1.0, seed=a.seed
    )
    target = Target(f"{url}/v1/completions", r.model.id, r.sampling)
    p = rate_point(run_rate(target, ids, a.rate, load, lambda: None), [], [], {})
    return {
        "ttft_p50_ms": p.ttft_ms.p50,
        "tpot_p50_ms": p.tpot_ms.p50,
        "request_throughput": p.request_throughput,
    }


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("recipe")
    ap.add_argument("--only")
    ap.add_argument("--model-path", action="append", default=[])
    ap.add_argument("--set", dest="sets", action="append", default=[])
    ap.add_argument("--rate", type=float, default=50.0)
    ap.add_argument("--num-prompts", type=int, default=1000)
    ap.add_argument("--warmups", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--bench-timeout", type=float, default=600)
    ap.add_argument(
        "--bench-cmd", default=f"{sys.executable} -m vllm.entrypoints.cli.main bench serve"
    )
    ap.add_argument("--out", default=str(Path(tempfile.gettempdir()) / "serve-bench"))
    a = ap.parse_args()
    work = Path(a.out).resolve()
    work.mkdir(parents=True, exist_ok=True)
    asked = Asked(tuple(a.sets), tuple(a.model_path), a.only)
    lr = load_all((a.recipe,), asked, studies=studies)[0]
    r, tok = lr.recipe, load_tokenizer(lr.recipe.model)
    texts, ids = encode_prompts(
        tok, list(prepare(lr).messages), uses_chat_template(tok, r.prompt.chat_template)
    )
    order = [i % len(ids) for i in range(a.num_prompts)]
    texts, ids = [texts[i] for i in order], [ids[i] for i in order]
    differ = sum(
        list(x) != y for x, y in zip(tok(texts, add_special_tokens=True)["input_ids"], ids)
    )
    print(
        f"{r.name}: {len(ids)} prompts, {sum(map(len, ids)):,} tokens; {differ} re-tokenize "
        "differently",
        flush=True,
    )
    data = work / "prompts.jsonl"
    data.write_text(
        "".join(json.dumps({"prompt": t}, ensure_ascii=False) + "\n" for t in texts),
        encoding="utf-8",
    )
    port = free_port()
    cmd, env = command(r, "127.0.0.1", port)
    ratios: dict[str, list[float]] = {k: [] for k in KEYS}
    with Server(cmd, f"http://127.0.0.1:{port}", work / "server.log", env) as server:
        print(f"server ready in {server.startup_s:.1f} s", flush=True)
        for k in range(1, a.rounds + 1):
            got = {}
            for side in ("bench", "wing") if k % 2 else ("wing", "bench"):
                server.reset_prefix_cache()
                got[side] = (
                    bench(a, r, data, server.base_url, work, k)
                    if side == "bench"
                    else wing(a, r, ids, server.base_url)
                )
            for key in KEYS:
                ratios[key].append(got["wing"][key] / got["bench"][key])
            row = ", ".join(
                f"{key} {got['wing'][key]:.2f} / {got['bench'][key]:.2f}" for key in KEYS
            )
            print(f"round {k} (wing / vllm bench): {row}", flush=True)
    print(
        "median of the rounds' ratios (wing / vllm bench): "
        + ", ".join(f"{k} {statistics.median(v):.3f}" for k, v in ratios.items())
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
