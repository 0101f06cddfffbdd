"""A stand-in for vLLM's streaming `/v1/completions`, for the serving tests (aiohttp.web in a thread).

What each request does is given by `plan(body) -> Plan`. The server notes, per request, the body,
when it arrived and when each content chunk was handed to the socket (time.perf_counter: the same clock as the
client's, since both run in this process), and the most requests it had in flight at once."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from typing_extensions import Self


@dataclass
class Plan:
    first_delay_s: float = 0.05  # before the first chunk
    gap_s: float = 0.01  # between chunks
    chunks: int = 4
    tokens_per_chunk: int = 1
    text: str = "あ"  # per token: multi-byte UTF-8 on purpose
    status: int = 200
    usage: bool = True
    error_after: int | None = None  # send an error event after this many chunks


@dataclass
class Seen:
    body: dict[str, Any]
    received: float
    writes: list[float] = field(default_factory=list)


class SSEServer:
    def __init__(self, plan: Callable[[dict[str, Any]], Plan] = lambda body: Plan()):
        self.plan = plan
        self.seen: list[Seen] = []
        self.in_flight = self.peak = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        seen = Seen(body=body, received=time.perf_counter())
        self.seen.append(seen)
        plan = self.plan(body)
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            if plan.status != 200:
                return web.Response(status=plan.status, text="injected failure")
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            await asyncio.sleep(plan.first_delay_s)
            for k in range(plan.chunks):
                if k:
                    await asyncio.sleep(plan.gap_s)
                if plan.error_after is not None and k == plan.error_after:
                    err = {"error": {"message": "injected mid-stream error", "type": "InternalServerError"}}
                    await resp.write(f"data: {json.dumps(err)}\n\n".encode())
                    break
                last = k == plan.chunks - 1
                choice = {
                    "index": 0,
                    "text": plan.text * plan.tokens_per_chunk,
                    "finish_reason": "length" if last else None,
                }
                data = json.dumps({"id": "x", "object": "text_completion", "choices": [choice]}, ensure_ascii=False)
                seen.writes.append(time.perf_counter())  # before the write: the client sees it later
                await resp.write(f"data: {data}\n\n".encode())
            if plan.usage and plan.error_after is None:
                n = plan.chunks * plan.tokens_per_chunk
                usage = {
                    "prompt_tokens": len(body["prompt"]),
                    "completion_tokens": n,
                    "total_tokens": len(body["prompt"]) + n,
                }
                await resp.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
            return resp
        finally:
            self.in_flight -= 1

    def _serve(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        app = web.Application()
        app.router.add_post("/v1/completions", self._completions)
        runner = web.AppRunner(app, access_log=None)
        loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]
        self._ready.set()
        loop.run_forever()
        loop.run_until_complete(runner.cleanup())
        loop.close()

    def __enter__(self) -> Self:
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the test SSE server did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)
