"""The runner's serving client against vllm bench's own request function, on a stand-in batching server (CPU).

    python benchmarks/client_vs_vllm_client.py --vllm-func PATH [--rate 50] [--num 500] [--rounds 2]

Separates what a client measures from what a server does: both clients send the same requests on the same
seeded Poisson schedule (runner/serving/arrivals.py, which is vllm bench's) to one stand-in server, in
alternating order, and their TTFT and TPOT percentiles are compared. The server (aiohttp, in a child
process so it shares no event loop or GIL with the clients) imitates continuous batching: one engine step
after another, each emitting one token to every request in flight and lasting
`--step-ms + --per-seq-ms x in flight + --prefill-ms x requests admitted in that step`, so latencies depend
on load as vLLM's do. 16 tokens per request, then a usage event and [DONE], as vLLM streams them.

vllm bench's side is `async_request_openai_completions` from vLLM 0.26.0's
`vllm/benchmarks/lib/endpoint_request_func.py` (`--vllm-func`: that file, e.g. unzipped from the vLLM wheel;
it needs only aiohttp, regex and tqdm), driven the way `vllm bench serve` drives it: sleep until each
request is due, then create its task; TPOT = (latency - TTFT) / (output tokens - 1), its definition.
Prints both sides per round and the ratios runner / vllm; exit 0 when TTFT p50 and TPOT p50 agree within
--target (default 2%) in the median of the rounds."""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import multiprocessing as mp
import socket
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TOKENS = 16


def serve(port: int, step_ms: float, per_seq_ms: float, prefill_ms: float) -> None:
    """The stand-in server (child process): a step loop feeding one token per step to each active request."""
    from aiohttp import web

    active: dict[int, asyncio.Queue] = {}
    admitted: list[int] = []
    counter = iter(range(10**9))

    async def engine(app: web.Application) -> None:
        while True:
            new, n = len(admitted), len(active)
            admitted.clear()
            await asyncio.sleep((step_ms + per_seq_ms * n + prefill_ms * new) / 1000)
            for q in list(active.values()):
                q.put_nowait(1)

    async def start_engine(app: web.Application) -> None:
        app["engine"] = asyncio.get_running_loop().create_task(engine(app))

    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        rid, q = next(counter), asyncio.Queue()
        active[rid] = q
        admitted.append(rid)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        try:
            for _ in range(int(body.get("max_tokens") or TOKENS)):
                await q.get()
                ev = {"id": str(rid), "object": "text_completion", "choices": [{"index": 0, "text": " x"}]}
                await resp.write(f"data: {json.dumps(ev)}\n\n".encode())
        finally:
            active.pop(rid, None)
        usage = {"choices": [], "usage": {"prompt_tokens": 100, "completion_tokens": TOKENS, "total_tokens": 116}}
        await resp.write(f"data: {json.dumps(usage)}\n\n".encode() + b"data: [DONE]\n\n")
        return resp

    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    app.on_startup.append(start_engine)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


def load_vllm_func(path: str):
    spec = importlib.util.spec_from_file_location("endpoint_request_func", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


async def vllm_side(mod, url: str, n: int, rate: float, seed: int, trust_env: bool = True) -> dict:
    import aiohttp

    from runner.serving.arrivals import arrival_offsets

    offsets = arrival_offsets(n, rate, 1.0, seed)
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, keepalive_timeout=60, enable_cleanup_closed=True)
    async with aiohttp.ClientSession(
        connector=connector, trust_env=trust_env, timeout=aiohttp.ClientTimeout(6 * 3600)
    ) as s:
        t0, tasks = time.perf_counter(), []
        for i, due in enumerate(offsets):
            if (wait := t0 + due - time.perf_counter()) > 0:
                await asyncio.sleep(wait)
            inp = mod.RequestFuncInput(
                prompt=f"prompt {i}", api_url=url + "/v1/completions", prompt_len=100, output_len=TOKENS, model="m"
            )
            tasks.append(asyncio.create_task(mod.async_request_openai_completions(inp, s)))
        outs = await asyncio.gather(*tasks)
    ok = [o for o in outs if o.success]
    ttft = [o.ttft * 1000 for o in ok]
    tpot = [(o.latency - o.ttft) * 1000 / (o.output_tokens - 1) for o in ok if (o.output_tokens or 0) > 1]
    return _figures(ttft, tpot, len(ok))


def runner_side(url: str, n: int, rate: float, seed: int) -> dict:
    from runner.serving.client import run_rate
    from runner.serving.latency import tpot_s

    run = run_rate(url, "m", [[1] * 100] * n, {"max_tokens": TOKENS}, rate, 1.0, None, seed, 0)
    ok = [r for r in run.records if r.ok]
    ttft = [r.ttft_s * 1000 for r in ok]
    tpot = [t * 1000 for r in ok if (t := tpot_s(r)) is not None]
    return _figures(ttft, tpot, len(ok))


def _figures(ttft: list[float], tpot: list[float], completed: int) -> dict:
    q = statistics.quantiles
    return {
        "ttft_p50": statistics.median(ttft),
        "ttft_p99": q(ttft, n=100)[98],
        "tpot_p50": statistics.median(tpot),
        "tpot_p99": q(tpot, n=100)[98],
        "completed": completed,
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--vllm-func", required=True, help="vllm/benchmarks/lib/endpoint_request_func.py of vLLM 0.26.0")
    ap.add_argument("--rate", type=float, default=50.0)
    ap.add_argument("--num", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--step-ms", type=float, default=12.0)
    ap.add_argument("--per-seq-ms", type=float, default=0.2)
    ap.add_argument("--prefill-ms", type=float, default=3.0)
    ap.add_argument("--target", type=float, default=0.02)
    ap.add_argument(
        "--vllm-no-trust-env",
        action="store_true",
        help="open vllm's session with trust_env=False, as the runner's (vllm bench serve: True)",
    )
    a = ap.parse_args()
    from runner.serving.server import free_port

    mod = load_vllm_func(a.vllm_func)
    port = free_port()
    proc = mp.get_context("spawn").Process(target=serve, args=(port, a.step_ms, a.per_seq_ms, a.prefill_ms))
    proc.start()
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_for(port)
        rows = []
        for k in range(a.rounds):
            order = ("vllm", "runner") if k % 2 == 0 else ("runner", "vllm")
            got = {}
            for who in order:
                got[who] = (
                    asyncio.run(vllm_side(mod, url, a.num, a.rate, a.seed, not a.vllm_no_trust_env))
                    if who == "vllm"
                    else runner_side(url, a.num, a.rate, a.seed)
                )
            rows.append(got)
            print(f"round {k + 1} ({order[0]} first): " + _line(got["vllm"], got["runner"]), flush=True)
        med = {w: {key: statistics.median(r[w][key] for r in rows) for key in rows[0][w]} for w in ("vllm", "runner")}
        print("median:            " + _line(med["vllm"], med["runner"]), flush=True)
        ok = all(abs(med["runner"][k] / med["vllm"][k] - 1) <= a.target for k in ("ttft_p50", "tpot_p50"))
        print(f"TTFT p50 and TPOT p50 within {a.target:.0%}: {'PASS' if ok else 'FAIL'}", flush=True)
        return 0 if ok else 1
    finally:
        proc.terminate()
        proc.join(10)


def _line(v: dict, r: dict) -> str:
    parts = [f"{k} vllm {v[k]:.2f} runner {r[k]:.2f} ({r[k] / v[k]:.3f})" for k in ("ttft_p50", "tpot_p50", "tpot_p99")]
    return "; ".join(parts) + f"; completed {v['completed']}/{r['completed']}"


def _wait_for(port: int, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("the stand-in server did not start")


if __name__ == "__main__":
    sys.exit(main())
