"""A serving run: a recipe with `load:` against its engine's server, rate by rate, as one RunResult.

One server per recipe (server.py), its output appended to the run's engine.log. Per rate, in
increasing order: `load.warmup_requests` unmeasured requests, the prefix cache emptied (POST
/reset_prefix_cache) so no rate starts with the cache of the one before, the server's counters read,
then every measured request on the seeded schedule (below) with the recipe's sampling, as the token
ids the offline engines get; the counters' growth covers the measured requests only. The sweep stops
at the first saturated rate (`saturation`). The top-level figures of the result (time, throughput,
latency, tokens, scores, samples.jsonl) are those of the headline rate, the highest rate below
saturation at which a request completed; every rate is in `serving`. A server that dies fails the
run as its death (when, its exit code or signal, its log), not as its clients' errors; the rates
measured before it stay in the failed result's `serving`.

The load: vLLM's own benchmark client, the request function `vllm bench serve` uses (vLLM 0.26.0
`vllm/benchmarks/lib/endpoint_request_func.py`, `async_request_openai_completions`), on `vllm bench
serve`'s arrival schedule. The client is loaded from the installed vLLM by its file, without
importing the `vllm` package (that would bring torch into the runner's own process).

It records per request the send time, TTFT, every gap between chunks, E2E, the generated text, the
server's usage and the error (report.py's FORMULAS define each). Schedule (vLLM 0.26.0
`vllm/benchmarks/serve.py`, `get_request`, after `np.random.seed(seed)`): per request gap_i =
gamma(shape=b, scale=1/(r·b)) (b = 1: Poisson arrivals), request i is due at gap_0 + … + gap_i, and
every due time is rescaled so the last is n/r; r = inf sends everything at once, b = inf spaces them
evenly. `vllm bench serve --seed S` gives the same schedule."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from itertools import accumulate
from pathlib import Path
from typing import Any

from runner.base.errors import RunnerError
from runner.base.files import write_jsonl_atomic
from runner.base.nvml import PeakSampler, device_facts, used_gib, wait_for_release
from runner.base.stats import prefix_share, summary
from runner.base.types import EngineInfo, Generation, Sampling
from runner.engines.hf import encode_prompts, load_tokenizer, uses_chat_template
from runner.folder import RunFolder
from runner.recipe import Recipe
from runner.results import (
    LatencyMs,
    Prefix,
    RatePoint,
    RunResult,
    Sample,
    ServingResult,
    Timings,
    Tokens,
)
from runner.run.job import RunOptions, Unit
from runner.run.result import Failure, Measured, Output, make_sample, mean_scores, now, run_result
from runner.serve.server import Server, ServerError, free_port

CLIENT = Path("benchmarks", "lib", "endpoint_request_func.py")  # in the vllm package


@cache
def client() -> Any:
    """vLLM's endpoint_request_func module, loaded by its file from the installed vllm package."""
    spec = importlib.util.find_spec("vllm")
    where = spec and spec.submodule_search_locations
    path = Path(where[0], CLIENT) if where else None
    if path is None or not path.is_file():
        raise RunnerError(
            "a serving run sends its requests with vLLM's own benchmark client, and vLLM is not "
            "installed here",
            field="load",
            hint="run serving recipes on a host with vLLM (`pip install vllm`), which also serves "
            "the model",
        )
    mod_spec = importlib.util.spec_from_file_location("runner_vllm_bench_client", path)
    module = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(module)
    return module


def arrival_offsets(n: int, rate: float, burstiness: float = 1.0, seed: int = 0) -> list[float]:
    """Due time of each of n requests, seconds from the rate's start (see the module docstring)."""
    import numpy as np

    if math.isinf(rate) or n == 0:
        return [0.0] * n
    gaps = (
        [1.0 / rate] * n
        if math.isinf(burstiness)
        else np.random.RandomState(seed).gamma(burstiness, 1.0 / (rate * burstiness), n)
    )
    due = np.cumsum(gaps).tolist()
    factor = (n / rate) / due[-1] if due[-1] else 1.0
    return [t * factor for t in due]


def request_body(s: Sampling) -> dict[str, Any]:
    """The recipe's sampling as /v1/completions fields, equal to the offline SamplingParams: greedy
    at temperature 0 (top_p 1, top_k 0 = off); top_k, min_p and repetition_penalty always sent, so
    the server's defaults from the model's generation_config do not apply; None fields left out."""
    greedy = s.temperature == 0
    body = dict(
        max_tokens=s.max_tokens,
        temperature=s.temperature,
        top_p=1.0 if greedy else s.top_p,
        top_k=0 if greedy else s.top_k,
        min_p=0.0,
        repetition_penalty=1.0,
        stop=list(s.stop) or None,
        ignore_eos=s.ignore_eos or None,
        seed=s.seed,
    )
    return {k: v for k, v in body.items() if v is not None}


@dataclass
class Record:
    """One request: vLLM's RequestFuncOutput (`out`), when it was due and sent (seconds from the
    rate's start), and what follows: ok, error (the last line of the client's message), end_s,
    ttft_s, e2e_s and tpot_s = (E2E − TTFT) / (output tokens − 1), vllm bench serve's TPOT (None for
    1 or 0 output tokens)."""

    index: int  # position in the prompts list
    due_s: float
    sent_s: float
    out: Any

    def __post_init__(self) -> None:
        o, self.ok = self.out, bool(self.out.success)
        self.error = None if self.ok else (o.error.strip().splitlines() or ["failed"])[-1][:300]
        self.end_s, n = self.sent_s + o.latency, o.output_tokens or 0
        self.ttft_s, self.e2e_s = (o.ttft, o.latency) if self.ok else (None, None)
        self.tpot_s = (o.latency - o.ttft) / (n - 1) if self.ok and n > 1 else None


@dataclass
class RateRun:
    rate: float
    records: list[Record]
    t0: float  # the rate's start on time.perf_counter
    warmup_errors: list[str] = field(default_factory=list)

    @property
    def wall_s(self) -> float:
        """Last response end − first send over all measured requests."""
        return (
            max(r.end_s for r in self.records) - min(r.sent_s for r in self.records)
            if self.records
            else 0.0
        )


def run_rate(url: str, r: Recipe, prompts: Sequence[list[int]], rate: float, warmed) -> RateRun:
    """`load.warmup_requests` unmeasured requests (the first prompt, under the concurrency cap),
    `warmed()`, then every prompt at its due time (`load`: the recipe's LoadSpec: burstiness,
    max_concurrency, seed), each to the completions `url` with the recipe's model id and
    sampling."""
    import aiohttp

    c, body, load = client(), request_body(r.sampling), r.load

    async def sweep() -> RateRun:
        gate = asyncio.Semaphore(load.max_concurrency or len(prompts) + load.warmup_requests + 1)

        async def send(session: Any, ids: list[int]) -> Any:
            async with gate:
                args = c.RequestFuncInput(
                    prompt=ids,
                    api_url=url,
                    prompt_len=len(ids),
                    output_len=r.sampling.max_tokens,
                    model=r.model.id,
                    extra_body=body,
                )
                return await c.async_request_openai_completions(args, session)

        async with aiohttp.ClientSession(timeout=c.AIOHTTP_TIMEOUT) as session:
            warm = await asyncio.gather(
                *(send(session, prompts[0]) for _ in range(load.warmup_requests))
            )
            warmed()
            t0 = time.perf_counter()

            async def one(i: int, due: float) -> Record:
                await asyncio.sleep(max(0.0, t0 + due - time.perf_counter()))
                out = await send(session, prompts[i])
                return Record(i, due, out.start_time - t0, out)

            due = arrival_offsets(len(prompts), rate, load.burstiness, load.seed)
            records = await asyncio.gather(*(one(i, d) for i, d in enumerate(due)))
        return RateRun(
            rate, list(records), t0, [Record(-1, 0, 0, w).error for w in warm if not w.success]
        )

    return asyncio.run(sweep())


HOST = "127.0.0.1"  # where the server listens


def rate_label(rate: float | None) -> str:
    return "–" if rate is None else "inf" if math.isinf(rate) else f"{rate:g}"


def _ms(xs: list[float]) -> LatencyMs | None:
    s = summary([x * 1000 for x in xs])
    return LatencyMs(**s) if s else None


def _good(rec: Record, slo: dict[str, float]) -> bool:
    """Whether a completed request meets every SLO."""
    value = {
        "ttft_ms": rec.ttft_s,
        "e2e_ms": rec.e2e_s,
        "tpot_ms": rec.tpot_s or 0.0,
        "itl_ms": max(rec.out.itl, default=0.0),
    }
    return all(value[k] * 1000 <= limit for k, limit in slo.items())


def peak_concurrency(records: list[Record]) -> int:
    """Most requests in flight at once over [send, end) (an end before a start at equal times)."""
    events = sorted([(r.sent_s, 1) for r in records] + [(r.end_s, -1) for r in records])
    return max(accumulate(d for _, d in events), default=0)


def rate_point(
    run: RateRun, samples: list[Sample], metrics: list[str], slo: dict, **facts: Any
) -> RatePoint:
    """Every per-rate figure of the module docstring, from one rate's measured requests and their
    samples."""
    ok, wall, n = [r for r in run.records if r.ok], run.wall_s, len(run.records)
    tokens, prompt = sum(r.out.output_tokens or 0 for r in ok), sum(r.out.prompt_len for r in ok)
    per_s = (lambda x: x / wall) if wall > 0 else (lambda x: 0.0)
    good = sum(_good(r, slo) for r in ok) if slo else None
    return RatePoint(
        rate=run.rate,
        requests=n,
        completed=len(ok),
        errors=n - len(ok),
        wall_s=wall,
        prompt_tokens=prompt,
        output_tokens=tokens,
        good=good,
        request_throughput=per_s(len(ok)),
        output_throughput=per_s(tokens),
        total_token_throughput=per_s(prompt + tokens),
        goodput=None if good is None else per_s(good),
        peak_concurrency=peak_concurrency(run.records),
        ttft_ms=_ms([r.ttft_s for r in ok]),
        tpot_ms=_ms([r.tpot_s for r in ok if r.tpot_s is not None]),
        itl_ms=_ms([g for r in ok for g in r.out.itl]),
        e2e_ms=_ms([r.e2e_s for r in ok]),
        queue_ms=_ms([r.sent_s - r.due_s for r in run.records]),
        scores=mean_scores([s for r, s in zip(run.records, samples) if r.ok], metrics),
        warmup_errors=sorted(set(run.warmup_errors))[:5],
        error_samples=sorted({r.error for r in run.records if r.error})[:5],
        **facts,
    )


def saturation(points: list[RatePoint]) -> list[str]:
    """Why the last rate saturated the server ([] when it did not). Rate i > 0 is saturated when
    throughput stalls (achieved < 0.9 × offered for a finite rate, or < 1.05 × the achieved rate
    before it) *and* TTFT p50 grew beyond 2 × the lowest TTFT p50 before it. The TTFT test keeps
    short runs (whose drain after the last arrival lowers achieved) and client-side caps (whose wait
    is in the client's queue) from reading as it."""
    if len(points) < 2:
        return []
    p, prev, stall = points[-1], points[-2], []
    if math.isfinite(p.rate) and p.request_throughput < 0.9 * p.rate:
        stall.append(f"achieved {p.request_throughput:.2f} req/s < 0.9 x offered {p.rate:g} req/s")
    if p.request_throughput < 1.05 * prev.request_throughput:
        at = f"{prev.rate:g} req/s" if math.isfinite(prev.rate) else "inf"
        stall.append(
            f"achieved {p.request_throughput:.2f} req/s gains less than 5% on "
            f"{prev.request_throughput:.2f} req/s at {at}"
        )
    base = [q.ttft_ms.p50 for q in points[:-1] if q.ttft_ms]
    if stall and base and p.ttft_ms and p.ttft_ms.p50 > 2 * min(base):
        return [*stall, f"TTFT p50 {p.ttft_ms.p50:.1f} ms > 2 x {min(base):.1f} ms (lowest before)"]
    return []


@dataclass
class Sweep:
    """One recipe's rates against its server, in increasing order (`run`): what they measured and
    why it stopped."""

    server: Server
    unit: Unit
    texts: list[str]  # every prompt as rendered
    ids: list[list[int]]  # and as token ids
    sampler: PeakSampler
    # per rate: its requests and their samples, and its figures
    runs: list[tuple[RateRun, list[Sample]]] = field(default_factory=list)
    points: list[RatePoint] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)  # why the last rate is saturated
    skipped: list[float] = field(default_factory=list)
    # the counters' growth over every measured request
    grown: dict[str, float] = field(default_factory=dict)

    def rate(self, rate: float) -> RatePoint:
        """One rate: warmup, prefix-cache reset, the counters read, the measured requests; scored
        and summarized."""
        server, r, state = self.server, self.unit.loaded.recipe, {"reset": None}
        indices = r.load.request_indices(len(self.ids))

        def warmed() -> None:
            try:
                state["reset"] = server.reset_prefix_cache()
            except ServerError as e:
                self.notes.append(f"prefix cache not reset: {e.message}")
            state["before"] = server.counters()

        url = f"{server.base_url}/v1/completions"
        try:
            run = run_rate(url, r, [self.ids[i] for i in indices], rate, warmed)
        except OSError:  # refused or reset (the cache reset after the warm-up): the server died?
            if not server.exits_within_2s():
                raise
            raise self.died(f"during the warm-up of rate {rate_label(rate)} req/s") from None
        ok = sum(x.ok for x in run.records)
        # a request failed: the server's death, if it died, says why (its clients say `refused`)
        if (run.warmup_errors or ok < len(run.records)) and server.exits_within_2s():
            done = f"{ok} of {len(run.records)} measured requests completed"
            raise self.died(f"at rate {rate_label(rate)} req/s ({done})")
        before, after = state["before"], server.counters()
        grown = {n: v - before.get(n, 0.0) for n, v in after.items() if v > before.get(n, 0.0)}
        self.grown |= {n: self.grown.get(n, 0.0) + v for n, v in grown.items()}
        samples = []
        for x in run.records:
            i, o = indices[x.index], x.out
            g = (o.generated_text, o.prompt_len, o.output_tokens or 0, None, x.ttft_s, x.e2e_s)
            s = make_sample(self.unit.prepared.examples[i], self.texts[i], Generation(*g), r, None)
            failed = {"scores": {}, "ttft_s": None, "latency_s": None}
            samples.append(s if x.ok else s.model_copy(update=failed))
        hits = grown.get("vllm:prefix_cache_hits_total")
        busy = self.sampler.busy_share(run.t0, run.t0 + run.wall_s)
        self.runs.append((run, samples))
        return rate_point(
            run,
            samples,
            list(r.metrics),
            dict(r.load.slo),
            gpu_busy=busy,
            cache_reset=state["reset"],
            cached_tokens=None if hits is None else int(hits),
            server_counters=grown,
        )

    def run(self, say, call_timeout_s: float | None = None) -> Sweep:
        """Every rate in increasing order until the server saturates (or every request fails, or
        the timeout passes: the recipe's `timeout_s`, else the call's --timeout, looked at after
        each rate); raises if the server dies."""
        r = self.unit.loaded.recipe
        limit = self.unit.timeout(call_timeout_s)
        src = "the recipe's timeout_s" if r.timeout_s else "--timeout"
        deadline = time.monotonic() + (limit or math.inf)
        for k, rate in enumerate(r.load.request_rate):
            p, at = self.rate(rate), rate_label(rate)
            self.reasons = saturation([*self.points, p])
            self.points.append(p.model_copy(update={"saturated": bool(self.reasons)}))
            done = f"{p.completed}/{p.requests} completed, {p.request_throughput:.2f} req/s"
            say(f"{self.unit.name}: rate {at}: {done}")
            if not self.server.alive():
                raise self.died(f"after rate {at} req/s")
            stop = (
                f"saturated at {at} req/s: " + "; ".join(self.reasons)
                if self.reasons
                else f"every request failed at {at} req/s"
                if p.completed == 0
                else f"{src} ({limit:.0f} s) ends the sweep after {at} req/s"
                if time.monotonic() > deadline
                else None
            )
            if stop:
                self.skipped = list(r.load.request_rate[k + 1 :])
                higher = ", ".join(map(rate_label, self.skipped))
                self.notes.append(stop + (f"; higher rates not run ({higher})" if higher else ""))
                say(f"{self.unit.name}: {self.notes[-1]}")
                break
        return self

    def serving(self, headline: float | None = None) -> ServingResult:
        return ServingResult(
            headline_rate=headline,
            saturated_rate=self.points[-1].rate if self.reasons else None,
            saturation_reasons=self.reasons,
            skipped_rates=self.skipped,
            server_start_s=self.server.startup_s,
            command=self.server.cmd,
            rates=self.points,
        )

    def died(self, when: str) -> ServerError:
        """The server's death, with the rates measured before it (kept in the failed result)."""
        kept = ", ".join(rate_label(p.rate) for p in self.points)
        e = self.server.died(when, kept and f" (the rates before it are kept: {kept} req/s)")
        e.serving = self.serving()
        return e

    def result(self, command: str, folder: RunFolder, info: EngineInfo, m: Measured) -> RunResult:
        """The headline rate's result (the highest rate below saturation at which a request
        completed), every rate in `serving`; samples.jsonl holds the headline rate's requests with
        their timings."""
        points = self.points
        last = len(points) - 1 if self.reasons else len(points)
        h = next((k for k in reversed(range(last)) if points[k].completed), None)
        if h is None:
            errors = " | ".join(sorted({e for p in points for e in p.error_samples})[:3])
            errors = f"; errors: {errors}" if errors else ""
            raise RunnerError("no rate below saturation completed any request" + errors)
        hp, (run, samples) = points[h], self.runs[h]
        rate = rate_label(hp.rate)
        lines = [
            {
                **s.to_line(),
                "request": x.index,
                "rate": rate,
                "e2e_s": x.e2e_s,
                "tpot_s": x.tpot_s,
                "sent_s": x.sent_s,
                "queue_s": x.sent_s - x.due_s,
                "error": x.error,
            }
            for x, s in zip(run.records, samples)
        ]
        write_jsonl_atomic(folder.samples, lines)
        notes = [
            "serving run: the figures outside the serving section (time, throughput, latency, "
            f"tokens, scores, samples.jsonl) are those of {rate} req/s, the highest rate below "
            "saturation",
            *self.notes,
        ]
        if hp.errors:
            failed = f"{hp.errors} of {hp.requests} requests failed at {rate} req/s: "
            notes.append(failed + " | ".join(hp.error_samples))
        serving = self.serving(hp.rate)
        load = self.unit.loaded.recipe.load
        k, share = prefix_share([self.ids[i] for i in load.request_indices(len(self.ids))])
        cached, prompt = hp.cached_tokens, hp.prompt_tokens
        hit = cached / prompt if cached is not None and prompt else None
        prefix = Prefix(shared_prefix_tokens=k, shared_prefix_share=share, hit_rate=hit)
        tokens = Tokens(prompt=prompt, output=hp.output_tokens, cached=cached)
        timings = m.timings.model_copy(update={"generate_s": hp.wall_s, "gpu_busy": hp.gpu_busy})
        done = [s for x, s in zip(run.records, samples) if x.ok]
        m, out = replace(m, timings=timings), Output(done, info, notes)
        return run_result(self.unit, command, m, out, serving=serving, tokens=tokens, prefix=prefix)


def run_serving(unit: Unit, opts: RunOptions) -> RunResult:
    """Run one `load:` recipe in this process: start the server, sweep the rates, stop the server;
    the result and samples.jsonl (the headline rate's requests) are written. A failure is a failed
    result."""
    folder, started, t_start = opts.folder(unit.name), now(), time.perf_counter()
    folder.root.mkdir(parents=True, exist_ok=True)
    try:
        res = _serve(unit, opts, folder, started, t_start)
    except (RunnerError, OSError) as e:
        error = (
            e.render(with_hint=False) if isinstance(e, RunnerError) else f"{type(e).__name__}: {e}"
        )
        m = Measured(Timings(total_s=time.perf_counter() - t_start), started_at=started)
        failed = Failure(error, getattr(e, "hint", None))
        res = run_result(unit, opts.command, m, failed, serving=getattr(e, "serving", None))
    folder.write(res)
    return res


def _serve(
    unit: Unit, opts: RunOptions, folder: RunFolder, started: str, t_start: float
) -> RunResult:
    r = unit.loaded.recipe
    tok = load_tokenizer(r.model)
    texts, ids = encode_prompts(
        tok, list(unit.prepared.messages), uses_chat_template(tok, r.prompt.chat_template)
    )
    port = free_port(HOST)
    cmd, env = r.engine.server_command(r.model, HOST, port)  # recipe.py: `load` needs `serves`
    say = print if opts.progress else (lambda line: None)
    say(f"{unit.name}: starting the server: {' '.join(cmd)}")
    log_start, baseline = (
        folder.engine_log.stat().st_size if folder.engine_log.exists() else 0,
        used_gib(),
    )
    with (
        PeakSampler() as sampler,
        Server(cmd, f"http://{HOST}:{port}", folder.engine_log, env) as server,
    ):
        say(f"{unit.name}: server ready in {server.startup_s:.1f} s")
        status, body = server.request("GET", "/version")
        version = str(json.loads(body).get("version", "")) if status == 200 else ""
        sw = Sweep(server, unit, texts, ids, sampler).run(say, opts.timeout_s)
    after = wait_for_release(baseline)
    if None not in (baseline, after) and after > baseline + 1.0:
        used = f"{after:.1f} GiB used vs {baseline:.1f} GiB before it started"
        sw.notes.append(f"GPU memory not fully released after the server stopped: {used}")
    with open(folder.engine_log, "rb") as f:
        f.seek(log_start)
        info = r.engine.served_evidence(
            r.model, f.read().decode("utf-8", "replace"), sw.grown, version
        )
    info.device, info.load_s, info.extra = (
        device_facts().get("gpu", ""),
        server.startup_s or 0.0,
        {"env": env},
    )
    timings = Timings(load_s=server.startup_s, total_s=time.perf_counter() - t_start)
    m = Measured(timings, sampler.peak, sampler.start_gib, False, started)
    return sw.result(opts.command, folder, info, m)
