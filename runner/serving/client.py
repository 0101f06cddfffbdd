"""A streaming load client for an OpenAI-compatible `/v1/completions` endpoint (vLLM's server).

Each request sends the prompt as token ids (the server sees exactly the ids the offline engine gets; a
prompt given as text is sent as text, which the server tokenizes: the benchmarks compare the two),
`stream: true` and `stream_options: {include_usage: true}`, and reads the server-sent events; every
event is timestamped with `time.perf_counter()` when the bytes that complete it arrive.

Per request (vllm bench serve's convention, vLLM 0.26.0 `vllm/benchmarks/lib/endpoint_request_func.py`,
`async_request_openai_completions`):
- TTFT = arrival of the first event with a non-empty `choices` list - send time;
- ITL = one gap per later content event (chunk), between consecutive content events. A chunk may carry
  several tokens (the server coalesces under load; speculative decoding emits several per step), so an
  ITL is a gap between chunks, not per token; TPOT (latency.py) divides by the token count instead;
- E2E = arrival of the last content event - send time (the trailing usage event and `[DONE]` excluded);
- output tokens = `usage.completion_tokens` of the final usage event when the server sends one, else the
  number of content chunks (a lower bound when chunks carry several tokens).
A request is an error when the HTTP status is not 200, the stream carries an error event, no content
event arrives, or the connection fails; its record keeps the message and the time it was seen.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import inspect
import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from runner.serving.arrivals import arrival_offsets

_EOL = re.compile(r"\r\n|\r|\n")


class SSEParser:
    """Incremental server-sent-events parser: feed bytes, get the `data` payload of each complete event."""

    def __init__(self) -> None:
        self._dec = codecs.getincrementaldecoder("utf-8")("replace")
        self._buf = ""
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[str]:
        buf = self._buf + self._dec.decode(chunk)
        out: list[str] = []
        pos = 0
        while m := _EOL.search(buf, pos):
            if m.group() == "\r" and m.end() == len(buf):
                break  # a CR at the very end may be half of a CRLF: wait for the next bytes
            line, pos = buf[pos : m.start()], m.end()
            if line == "":
                if self._data:  # a blank line ends the event
                    out.append("\n".join(self._data))
                    self._data = []
            elif line.startswith("data:"):
                self._data.append(line[5:].removeprefix(" "))
            # comments (":...") and other fields (event:, id:, retry:) carry nothing we use
        self._buf = buf[pos:]
        return out

    def close(self) -> list[str]:
        """The stream ended: an event cut off before its blank line still counts."""
        return self.feed(b"\n\n")


@dataclass
class RequestRecord:
    """One request. Times are seconds on the client's perf_counter, relative to the rate's start."""

    index: int  # position in the prompts list
    prompt_tokens: int  # tokens sent (the server's usage.prompt_tokens when it reports one)
    scheduled_s: float  # when the arrival schedule made it due
    sent_s: float | None = None  # when the POST went out (later than scheduled under max_concurrency)
    first_token_s: float | None = None
    end_s: float | None = None  # last content chunk (success) or when the error was seen
    itl_s: list[float] = field(default_factory=list)
    output_text: str = ""
    output_tokens: int = 0
    tokens_from: str = "chunks"  # "usage" or "chunks"
    chunks: int = 0
    cached_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens, when the server reports it
    finish_reason: str | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_s is None or self.sent_s is None else self.first_token_s - self.sent_s

    @property
    def e2e_s(self) -> float | None:
        return None if not self.ok or self.end_s is None or self.sent_s is None else self.end_s - self.sent_s

    @property
    def queue_s(self) -> float | None:
        """Client-side wait: send time - scheduled time (the concurrency cap, plus event-loop lag)."""
        return None if self.sent_s is None else self.sent_s - self.scheduled_s


@dataclass
class RateRun:
    """The measured requests of one rate (warmup excluded) and how long the rate took."""

    rate: float
    burstiness: float
    max_concurrency: int | None
    seed: int
    records: list[RequestRecord]
    elapsed_s: float  # from the rate's start to the last request's end
    t0: float = 0.0  # the rate's start on time.perf_counter (records are relative to it)
    warmup: int = 0
    warmup_errors: list[str] = field(default_factory=list)


def build_payload(model: str, prompt: list[int] | str, sampling: dict[str, Any]) -> dict[str, Any]:
    """The request body: the prompt (token ids, or text), sampling keys passed through (None values
    dropped), streaming with usage."""
    body: dict[str, Any] = {"model": model, "prompt": prompt if isinstance(prompt, str) else list(prompt)}
    body.update({k: v for k, v in sampling.items() if v is not None})
    body.update({"stream": True, "stream_options": {"include_usage": True}})
    return body


def _handle_event(rec: RequestRecord, data: dict[str, Any], now: float) -> None:
    if "error" in data or data.get("object") == "error":
        err = data.get("error", data)
        rec.error = "stream error: " + str(err.get("message", err) if isinstance(err, dict) else err)
        rec.end_s = now
        return
    if choices := data.get("choices"):
        c = choices[0]
        if rec.first_token_s is None:
            rec.first_token_s = now
        else:
            rec.itl_s.append(now - rec.end_s)
        rec.end_s = now
        rec.chunks += 1
        rec.output_text += c.get("text") or ""
        rec.finish_reason = c.get("finish_reason") or rec.finish_reason
    if usage := data.get("usage"):
        if usage.get("completion_tokens") is not None:
            rec.output_tokens, rec.tokens_from = int(usage["completion_tokens"]), "usage"
        if usage.get("prompt_tokens") is not None:
            rec.prompt_tokens = int(usage["prompt_tokens"])
        details = usage.get("prompt_tokens_details") or {}
        if details.get("cached_tokens") is not None:
            rec.cached_tokens = int(details["cached_tokens"])


async def _stream(session: Any, url: str, body: dict[str, Any], rec: RequestRecord, t0: float) -> None:
    rec.sent_s = time.perf_counter() - t0
    async with session.post(url, json=body) as resp:
        if resp.status != 200:
            text = (await resp.text())[:300]
            rec.error, rec.end_s = f"HTTP {resp.status}: {text}", time.perf_counter() - t0
            return
        parser = SSEParser()
        async for chunk in resp.content.iter_any():
            now = time.perf_counter() - t0
            for payload in parser.feed(chunk):
                if payload.strip() == "[DONE]":
                    continue
                _handle_event(rec, json.loads(payload), now)
                if rec.error:
                    return
        for payload in parser.close():
            if payload.strip() != "[DONE]":
                _handle_event(rec, json.loads(payload), time.perf_counter() - t0)
    if rec.error:
        return
    if rec.first_token_s is None:
        rec.error, rec.end_s = "the stream ended without any content chunk", time.perf_counter() - t0
    elif rec.tokens_from == "chunks":
        rec.output_tokens = rec.chunks


async def _request(
    session: Any, url: str, body: dict[str, Any], rec: RequestRecord, t0: float, gate: Any
) -> RequestRecord:
    async with gate:
        try:
            await _stream(session, url, body, rec, t0)
        except (
            aiohttp.ClientError,
            OSError,
            ValueError,
            asyncio.TimeoutError,
        ) as e:  # refused, reset, timeout, bad JSON
            rec.error = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
            rec.end_s = time.perf_counter() - t0
            if rec.sent_s is None:
                rec.sent_s = rec.end_s
    return rec


def _known_tokens(prompt: list[int] | str) -> int:
    """The prompt's token count before the server answers: 0 for text (the usage event tells it)."""
    return 0 if isinstance(prompt, str) else len(prompt)


async def _warmup(session: Any, url: str, body: dict[str, Any], n: int, gate: Any) -> list[str]:
    t0 = time.perf_counter()
    recs = [RequestRecord(index=0, prompt_tokens=_known_tokens(body["prompt"]), scheduled_s=0.0) for _ in range(n)]
    await asyncio.gather(*(_request(session, url, body, r, t0, gate) for r in recs))
    return [r.error for r in recs if r.error]


async def arun_rate(
    base_url: str,
    model: str,
    prompts: Sequence[list[int] | str],
    sampling: dict[str, Any],
    rate: float,
    burstiness: float = 1.0,
    max_concurrency: int | None = None,
    seed: int = 0,
    warmup: int = 0,
    *,
    on_warmed: Callable[[], Any] | None = None,
    request_timeout_s: float = 600.0,
    endpoint: str = "/v1/completions",
) -> RateRun:
    """Send every prompt once on the arrival schedule of (rate, burstiness, seed); see `run_rate`."""
    url = base_url.rstrip("/") + endpoint
    cap = max_concurrency or 0  # aiohttp's default pool would silently cap at 100 connections
    connector = aiohttp.TCPConnector(limit=cap, limit_per_host=cap, keepalive_timeout=60)
    timeout = aiohttp.ClientTimeout(total=request_timeout_s)
    gate = asyncio.Semaphore(max_concurrency) if max_concurrency else contextlib.nullcontext()
    async with aiohttp.ClientSession(connector=connector, timeout=timeout, trust_env=False) as session:
        warm_errors: list[str] = []
        if warmup and prompts:
            warm_errors = await _warmup(session, url, build_payload(model, prompts[0], sampling), warmup, gate)
        if on_warmed is not None and inspect.isawaitable(res := on_warmed()):
            await res
        offsets = arrival_offsets(len(prompts), rate, burstiness, seed)
        t0 = time.perf_counter()
        tasks = []
        for i, (prompt, due) in enumerate(zip(prompts, offsets)):
            if (wait := t0 + due - time.perf_counter()) > 0:
                await asyncio.sleep(wait)
            rec = RequestRecord(index=i, prompt_tokens=_known_tokens(prompt), scheduled_s=due)
            body = build_payload(model, prompt, sampling)
            tasks.append(asyncio.create_task(_request(session, url, body, rec, t0, gate)))
        records = list(await asyncio.gather(*tasks))
        elapsed = time.perf_counter() - t0
    return RateRun(
        rate=rate,
        burstiness=burstiness,
        max_concurrency=max_concurrency,
        seed=seed,
        records=records,
        elapsed_s=elapsed,
        t0=t0,
        warmup=warmup,
        warmup_errors=warm_errors,
    )


def run_rate(
    base_url: str,
    model: str,
    prompts: Sequence[list[int] | str],
    sampling: dict[str, Any],
    rate: float,
    burstiness: float = 1.0,
    max_concurrency: int | None = None,
    seed: int = 0,
    warmup: int = 0,
    **kw: Any,
) -> RateRun:
    """Run one rate: `warmup` unmeasured requests (prompts[0], all at once under the cap), then
    `on_warmed()` (e.g. reset the prefix cache; awaited when it returns an awaitable), then each prompt
    in order at its arrival time, at most `max_concurrency` in flight. Blocks; runs its own event loop.

    `sampling`: request-body fields (max_tokens, temperature, top_p, ignore_eos, stop, ...).
    Keywords: on_warmed, request_timeout_s (per request, default 600), endpoint."""
    return asyncio.run(
        arun_rate(base_url, model, prompts, sampling, rate, burstiness, max_concurrency, seed, warmup, **kw)
    )
