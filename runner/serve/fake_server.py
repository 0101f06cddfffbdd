"""The fake engine's server mode, so the serving wing runs end to end on a CPU: an OpenAI-compatible
completions server that streams the same reply to every request, word by word, vLLM's way (`choices`
chunks, a usage chunk when `stream_options.include_usage`, then `data: [DONE]`), cut at the first
`stop` string and to `max_tokens` words (a word, with the spaces before it, is a token). Requests
are served one at a time, each taking `delay_s` spread over its words, so offered rates above 1 /
delay_s queue up and saturate it. `/health`, `/version`, `POST /reset_prefix_cache` (there is no
cache) and `/metrics` (`fake:*_total` counters) answer as vLLM's do; `--fail-start` exits with code
1 before listening. A test knob: with `RUNNER_FAKE_SERVER_DIE_AT=N` in its environment it kills
itself with SIGKILL on its Nth completions request (as the kernel's OOM killer would). It prints its
pid, process group and settings.

    python -m runner.serve.fake_server --host H --port P [--reply TEXT] [--delay-s S]
    [--fail-start]"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import sys
from collections import Counter
from typing import Any

from aiohttp import web

from runner.engines.fake import SETTINGS_MARK
from runner.engines.hf import truncate_at_stop


def reply_words(reply: str, body: dict[str, Any]) -> tuple[list[str], str]:
    """The reply's words after `stop` and `max_tokens`, and the finish reason (`stop` or
    `length`)."""
    stop = body.get("stop") or []
    text, stopped = truncate_at_stop(reply, [stop] if isinstance(stop, str) else list(stop))
    words, limit = re.findall(r"\s*\S+", text) or [text], body.get("max_tokens")
    if isinstance(limit, int) and 0 < limit < len(words):
        return words[:limit], "length"
    return words, "stop" if stopped or limit is None or len(words) < limit else "length"


def app(reply: str, delay_s: float) -> web.Application:
    counts: Counter[str] = Counter()
    lock, die_at = asyncio.Lock(), int(os.environ.get("RUNNER_FAKE_SERVER_DIE_AT", 0))

    async def metrics(request: web.Request) -> web.Response:
        names = ("requests", "prompt_tokens", "generation_tokens", "prefix_cache_resets")
        text = "".join(
            f"# TYPE fake:{n} counter\nfake:{n}_total {float(counts[n])}\n" for n in names
        )
        return web.Response(text=text, content_type="text/plain")

    async def reset(request: web.Request) -> web.Response:
        counts["prefix_cache_resets"] += 1
        return web.json_response({"success": True})

    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        prompt = body.get("prompt")
        n_prompt = len(prompt) if isinstance(prompt, list) else len(str(prompt or "").split())
        words, finish = reply_words(reply, body)
        counts.update(requests=1, prompt_tokens=n_prompt, generation_tokens=len(words))
        if counts["requests"] == die_at:
            print(f"fake server: killing itself on request {die_at}, as asked", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        usage = {
            "prompt_tokens": n_prompt,
            "completion_tokens": len(words),
            "total_tokens": n_prompt + len(words),
        }
        base = {
            "id": f"cmpl-{counts['requests']}",
            "object": "text_completion",
            "model": body.get("model", "fake"),
        }
        async with lock:  # one request at a time
            resp = web.StreamResponse(
                headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
            )
            await resp.prepare(request)
            for i, w in enumerate(words):
                await asyncio.sleep(delay_s / len(words))
                last = finish if i == len(words) - 1 else None
                await resp.write(
                    _event({**base, "choices": [{"index": 0, "text": w, "finish_reason": last}]})
                )
            if (body.get("stream_options") or {}).get("include_usage"):
                await resp.write(_event({**base, "choices": [], "usage": usage}))
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
            return resp

    a = web.Application()
    a.router.add_get("/health", lambda r: web.Response(text=""))
    a.router.add_get("/version", lambda r: web.json_response({"version": "fake"}))
    a.router.add_get("/metrics", metrics)
    a.router.add_post("/reset_prefix_cache", reset)
    a.router.add_post("/v1/completions", completions)
    return a


def _event(data: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


def main() -> int:
    ap = argparse.ArgumentParser(description="the fake engine's OpenAI-compatible server")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--reply", default="fake reply")
    ap.add_argument("--delay-s", type=float, default=0.0)
    ap.add_argument("--fail-start", action="store_true")
    a = ap.parse_args()
    print(f"fake server pid {os.getpid()} (process group {os.getpgrp()})", flush=True)
    print(
        SETTINGS_MARK + json.dumps({"reply": a.reply, "delay_s": a.delay_s}, ensure_ascii=False),
        flush=True,
    )
    if a.fail_start:
        print("fake server: failing before it is ready, as asked (engine.serve_fail)", flush=True)
        return 1
    print(f"fake server listening on http://{a.host}:{a.port}", flush=True)
    web.run_app(
        app(a.reply, a.delay_s),
        host=a.host,
        port=a.port,
        print=None,
        access_log=None,
        shutdown_timeout=1.0,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
