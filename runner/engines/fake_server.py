"""The fake engine's server mode: a small OpenAI-compatible completions server, so the serving pipeline
(`load:` recipes) runs end to end on a CPU. No model: every request gets the same reply.

    python -m runner.engines.fake_server --host H --port P [--reply TEXT] [--delay-s S] [--fail-start]

- `GET /health` answers 200 once it listens; `GET /version` answers `{"version": "fake"}`.
- `POST /v1/completions` (prompt: token ids or text) streams the reply word by word as server-sent events,
  vLLM's way (`data: {...choices: [{text, finish_reason}]}` chunks, a usage chunk when
  `stream_options.include_usage`, then `data: [DONE]`); without `stream` it answers one JSON body. The
  reply is cut at the first `stop` string and to `max_tokens` words; a word (with the spaces before it)
  counts as one token.
- Requests are served one at a time, as the offline fake engine runs them: each takes `delay_s`, spread
  evenly over its words (the first after delay_s / words), so offered rates above 1 / delay_s queue up
  and saturate it.
- `POST /reset_prefix_cache` answers `{"success": true}` (there is no cache; resets are counted).
- `GET /metrics`: Prometheus counters `fake:requests_total`, `fake:prompt_tokens_total`,
  `fake:generation_tokens_total`, `fake:prefix_cache_resets_total`.
- `--fail-start` exits with code 1 before listening (tests of a server that crashes before it is ready).
It prints its pid, process group and settings to its output (the run's engine.log).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import time
from collections import Counter
from typing import Any

from aiohttp import web

from runner.engines.fake import SETTINGS_MARK
from runner.engines.tokenizing import truncate_at_stop


def reply_words(reply: str, body: dict[str, Any]) -> tuple[list[str], str]:
    """The reply's words after `stop` and `max_tokens`, and the finish reason (`stop` or `length`)."""
    stop = body.get("stop") or []
    text, stopped = truncate_at_stop(reply, [stop] if isinstance(stop, str) else list(stop))
    words = re.findall(r"\s*\S+", text) or [text]
    limit = body.get("max_tokens")
    if isinstance(limit, int) and 0 < limit < len(words):
        return words[:limit], "length"
    return words, "stop" if stopped or limit is None or len(words) < limit else "length"


class FakeServer:
    def __init__(self, reply: str, delay_s: float):
        self.reply, self.delay_s = reply, delay_s
        self.counts: Counter[str] = Counter()
        self.lock = asyncio.Lock()

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/health", lambda r: web.Response(text=""))
        app.router.add_get("/version", lambda r: web.json_response({"version": "fake"}))
        app.router.add_get("/metrics", self.metrics)
        app.router.add_post("/reset_prefix_cache", self.reset)
        app.router.add_post("/v1/completions", self.completions)
        return app

    async def metrics(self, request: web.Request) -> web.Response:
        lines = []
        for name in ("requests", "prompt_tokens", "generation_tokens", "prefix_cache_resets"):
            lines += [f"# TYPE fake:{name} counter", f"fake:{name}_total {float(self.counts[name])}"]
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")

    async def reset(self, request: web.Request) -> web.Response:
        self.counts["prefix_cache_resets"] += 1
        return web.json_response({"success": True})

    async def completions(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except ValueError:
            return web.json_response({"error": {"message": "the body is not JSON"}}, status=400)
        prompt = body.get("prompt")
        n_prompt = len(prompt) if isinstance(prompt, list) else len(str(prompt or "").split())
        words, finish = reply_words(self.reply, body)
        self.counts.update(requests=1, prompt_tokens=n_prompt, generation_tokens=len(words))
        usage = {"prompt_tokens": n_prompt, "completion_tokens": len(words), "total_tokens": n_prompt + len(words)}
        base = {
            "id": f"cmpl-{self.counts['requests']}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": body.get("model", "fake"),
        }
        async with self.lock:  # one request at a time
            if not body.get("stream"):
                await asyncio.sleep(self.delay_s)
                choice = {"index": 0, "text": "".join(words), "logprobs": None, "finish_reason": finish}
                return web.json_response({**base, "choices": [choice], "usage": usage})
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
            await resp.prepare(request)
            gap = self.delay_s / len(words)
            for i, w in enumerate(words):
                await asyncio.sleep(gap)
                choice = {
                    "index": 0,
                    "text": w,
                    "logprobs": None,
                    "finish_reason": finish if i == len(words) - 1 else None,
                }
                await resp.write(_event({**base, "choices": [choice]}))
            if (body.get("stream_options") or {}).get("include_usage"):
                await resp.write(_event({**base, "choices": [], "usage": usage}))
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
            return resp


def _event(data: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="the fake engine's OpenAI-compatible server")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--reply", default="fake reply")
    ap.add_argument("--delay-s", type=float, default=0.0)
    ap.add_argument("--fail-start", action="store_true")
    a = ap.parse_args(argv)
    print(f"fake server pid {os.getpid()} (process group {os.getpgrp()})", flush=True)
    print(SETTINGS_MARK + json.dumps({"reply": a.reply, "delay_s": a.delay_s}, ensure_ascii=False), flush=True)
    if a.fail_start:
        print("fake server: failing before it is ready, as asked (engine.serve_fail)", flush=True)
        return 1
    print(f"fake server listening on http://{a.host}:{a.port}", flush=True)
    web.run_app(
        FakeServer(a.reply, a.delay_s).app(),
        host=a.host,
        port=a.port,
        print=None,
        access_log=None,
        shutdown_timeout=1.0,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
