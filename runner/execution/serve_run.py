"""Serving runs: a recipe with `load:` runs against its engine's OpenAI-compatible server, rate by rate.

One server per recipe, from `recipe.engine.serve_command(model, host, port)` with `serve_env()`, its
output appended to the run's engine.log. While it runs, its process group is written to the run folder
(`RunFolder.server_pgid`, by the server's own first process, before it starts loading anything): the
server runs in a session of its own, out of reach of the kill that ends this recipe's process group, so
the parent (isolate.py) kills the recorded group after the recipe's process has ended, in case this
process was killed before it could stop the server itself. On every other path (done, error, timeout,
Ctrl-C, SIGTERM) `Server` ends the group, and the file is removed once the group is gone. After the
server stops, GPU memory is checked to be back where it was before it started (NVML).

The prompts are the token ids the offline engine would get (the recipe's tokenizer and chat template,
runner.engines.tokenizing) and go to the server as ids. The sweep itself is in serve_sweep.py.

Top-level numbers of the result (timings.generate_s, throughput, latency, tokens, scores, samples.jsonl)
describe the *headline rate*: the highest rate below saturation (the last rate when none saturated).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterator
from typing import IO, TYPE_CHECKING, Any

from runner.errors import RunnerError
from runner.execution.layout import RunFolder

if TYPE_CHECKING:
    from runner.config.common import Sampling
    from runner.config.recipe import Recipe
    from runner.execution.job import RunOptions, Unit
    from runner.reporting.results import RunResult
    from runner.serving.server import Server

HOST = "127.0.0.1"
_RECORD = 'echo $$ > "$0" && exec "$@"'  # sh -c: write our pid (the new group's id), become the server


def end_recorded_server(folder: RunFolder) -> None:
    """SIGKILL the server process group a serving run recorded and did not get to end (its process was
    killed first); no-op when nothing is recorded. Never this process's own group."""
    try:
        pgid = int(folder.server_pgid.read_text().strip())
    except (OSError, ValueError):
        return
    if pgid > 1 and pgid != os.getpgrp():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
    folder.server_pgid.unlink(missing_ok=True)


@contextlib.contextmanager
def recorded_server(command: list[str], port: int, folder: RunFolder, env: dict[str, str]) -> Iterator[Server]:
    """`Server` (healthy inside the block, its whole group ended on leaving), with its process group
    written to `folder.server_pgid` by the server's first process and removed once the group is gone."""
    from runner.serving.server import Server

    folder.server_pgid.unlink(missing_ok=True)
    wrapped = ["/bin/sh", "-c", _RECORD, str(folder.server_pgid), *command]
    try:
        with Server(wrapped, f"http://{HOST}:{port}", folder.engine_log, env=env) as server:
            yield server
    finally:
        folder.server_pgid.unlink(missing_ok=True)


def request_sampling(s: Sampling) -> dict[str, Any]:
    """The recipe's sampling as /v1/completions fields, equal to the offline SamplingParams: greedy at
    temperature 0 (top_p 1, top_k 0 = off); top_k, min_p and repetition_penalty always sent, so the
    server's defaults from the model's generation_config do not apply; None fields are left out."""
    greedy = s.temperature == 0
    return {
        "max_tokens": s.max_tokens,
        "temperature": s.temperature,
        "top_p": 1.0 if greedy else s.top_p,
        "top_k": 0 if greedy else s.top_k,
        "min_p": 0.0,
        "repetition_penalty": 1.0,
        "stop": list(s.stop) or None,
        "ignore_eos": s.ignore_eos or None,
        "seed": s.seed,
    }


def recipe_tokenizer(r: Recipe) -> tuple[Any, bool]:
    """The tokenizer the offline engines use for this recipe (`model.tokenizer`, else the model's, a
    builtin model's own) and whether its chat template applies."""
    from runner.engines.tokenizing import load_tokenizer, uses_chat_template

    tok = load_tokenizer(r.model)
    return tok, uses_chat_template(tok, r.prompt.chat_template)


def encode(unit: Unit) -> tuple[list[str], list[list[int]]]:
    """Prompt texts and token ids exactly as the offline engines make them."""
    from runner.engines.tokenizing import encode_prompts

    tok, chat = recipe_tokenizer(unit.loaded.recipe)
    return encode_prompts(tok, list(unit.prepared.messages), chat)


def server_version(base_url: str) -> str:
    """GET /version (vLLM answers {"version": ...}); "" when the server has none."""
    import json
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(base_url + "/version", timeout=10) as r:
            return str(json.loads(r.read()).get("version", ""))
    except (OSError, ValueError, AttributeError):
        return ""


def _log_size(folder: RunFolder) -> int:
    try:
        return folder.engine_log.stat().st_size
    except OSError:
        return 0


def _log_since(folder: RunFolder, start: int) -> str:
    try:
        with open(folder.engine_log, "rb") as f:
            f.seek(start)
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _say(progress: bool, stream: IO[str] | None):
    def say(line: str) -> None:
        print(line, flush=True)  # engine.log (the recipe's stdout)
        if progress and stream is not None and stream is not sys.stdout:
            print(line, file=stream, flush=True)

    return say


def run_serving(unit: Unit, opts: RunOptions, base: RunResult, progress_file: IO[str] | None = None) -> RunResult:
    """Run one `load:` recipe: start the server, sweep the rates, stop the server, assemble the result
    and write samples.jsonl (the headline rate's requests). Raises on failure (run_unit records it)."""
    from runner.execution.gpumem import PeakSampler, used_gib, wait_for_release
    from runner.execution.serve_result import finish
    from runner.execution.serve_sweep import sweep
    from runner.serving.server import free_port

    r = unit.loaded.recipe
    folder = RunFolder.of(opts.out, unit.name)
    texts, ids = encode(unit)
    port = free_port(HOST)
    command = r.engine.serve_command(r.model, HOST, port)
    if command is None:
        raise RunnerError(f"engine kind {r.engine.kind!r} has no server mode", field="load")
    env = r.engine.serve_env()
    say = _say(opts.progress, progress_file)
    say(f"{unit.name}: starting the server: {' '.join(command)}")
    log_start, baseline = _log_size(folder), used_gib()
    with PeakSampler() as sampler:
        with recorded_server(command, port, folder, env) as server:
            say(f"{unit.name}: server ready in {server.startup_s:.1f} s")
            version = server_version(server.base_url)
            outcome = sweep(server, unit, texts, ids, say)
            start_s = server.startup_s
        busy = [sampler.busy_share(o.run.t0, o.run.t0 + o.run.elapsed_s) for o in outcome.outcomes]
    after = wait_for_release(baseline)
    log_text = _log_since(folder, log_start)
    result = finish(
        unit,
        base,
        outcome,
        ids,
        log_text,
        folder=folder,
        server={
            "command": command,
            "env": env,
            "version": version,
            "start_s": start_s,
            "peak_gib": sampler.peak,
            "start_gib": sampler.start_gib,
            "gpu_busy": busy,
        },
    )
    if baseline is not None and after is not None and after > baseline + 1.0:
        result.notes.append(
            f"GPU memory not fully released after the server stopped: {after:.1f} GiB used vs "
            f"{baseline:.1f} GiB before it started"
        )
    return result
