"""What the benchmarks that run plain vLLM beside the runner share: a study cell's workload as plain
`vllm.LLM` arguments and token ids (the runner's own rendering), and a child process run in a
process group of its own, killed whole afterwards, with the GPU memory back before the next one
starts."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any


def cell_job(
    recipe: str, sets: list[str], model_paths: list[str], only: str | None
) -> tuple[Any, dict]:
    """The recipe (or study cell `only`) and its job: `llm_kwargs`, `env`, `sampling`
    (SamplingParams keyword arguments) and `prompts` (token ids, rendered and encoded as `runner go`
    does)."""
    from runner.config.calls import Asked, load_all
    from runner.engines.hf import encode_prompts, load_tokenizer, uses_chat_template
    from runner.engines.vllm import sampling_params_kwargs
    from runner.inputs.prepare import prepare
    from runner.wings import studies

    loaded = load_all((recipe,), Asked(tuple(sets), tuple(model_paths), only), studies=studies)
    lr = next(x for x in loaded if only is None or x.recipe.name == only)
    r = lr.recipe
    tok = load_tokenizer(r.model)
    ids = encode_prompts(
        tok, list(prepare(lr).messages), uses_chat_template(tok, r.prompt.chat_template)
    )[1]
    job = {
        "llm_kwargs": r.engine.llm_kwargs(r.model),
        "env": r.engine.engine_env(),
        "sampling": sampling_params_kwargs(r.sampling),
        "prompts": ids,
    }
    return r, job


def run_isolated(cmd: list[str], log_path: Path) -> tuple[int, float]:
    """Run `cmd` with stdout and stderr to `log_path` in a new session; then kill whatever it left
    in its process group (a vLLM engine core can outlive its parent, holding the GPU) and wait for
    the GPU memory used before it to come back. Its exit status and its wall time (start to exit:
    the cleanup after it does not count)."""
    from runner.base.nvml import used_gib, wait_for_release

    before = used_gib()
    t0 = time.perf_counter()
    with open(log_path, "w") as log:
        p = subprocess.Popen(cmd, stdout=log, stderr=log, start_new_session=True)
        rc = p.wait()
    wall = time.perf_counter() - t0
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    wait_for_release(before)
    return rc, wall
