"""`runner go --executor ray`: each job (or each data-parallel replica of one) runs as a Ray task.

Inside the task the job runs exactly as the local executor runs it (`run_isolated`: its own
process group, GPU memory checked, knobs verified), with `--out` pointed at a folder on the
worker node named after the job (so a retry on the same node finds its finished samples there).
The task hands back every file it wrote; the driver writes them all under its own `--out`, so a
cluster needs no shared disk. While a task runs, its finished samples stream to the driver (the
progress bars, and `<out>/<name>/samples.partial.jsonl`): a task whose worker dies is retried by
Ray and continues from them, on whatever node it lands; a call that ends early leaves them for
the next call. The task is in ray_task.py, the driver's side in ray_driver.py; Ray is imported in
those three modules only, and only inside the functions that run a call."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runner.errors import RunnerError
from runner.execution.job import Job
from runner.execution.ray_driver import Call
from runner.reporting.results import RunResult

EventFn = Callable[[dict[str, Any]], None]


def run_jobs_on_ray(
    jobs: list[Job],
    *,
    address: str | None = None,
    replicas: int | None = None,
    on_result: Callable[[RunResult], None] | None = None,
    on_event: EventFn | None = None,
    runtime_env: dict | None = None,
) -> list[RunResult]:
    """Run the jobs as Ray tasks, as many at once as the cluster holds; one result per recipe, in
    the jobs' order. `replicas` overrides each recipe's `replicas`. Without `address` (and with no
    Ray connection in this process) a local Ray instance is started for the call and stopped after
    it. `on_result` gets each recipe's result as it is written; `on_event` the tasks' reports
    (`started`: a task began, with its pid and node; `samples`: a recipe's finished count)."""
    import ray

    started = not ray.is_initialized()
    if started:
        on_term = signal.getsignal(signal.SIGTERM)
        _connect(address, runtime_env)
        if callable(on_term) and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, on_term)  # Ray's own handler would abort the call, not end it
    try:
        return Call(jobs, replicas, on_result, on_event, address).run()
    finally:
        if started:
            ray.shutdown()


def _connect(address: str | None, runtime_env: dict | None) -> None:
    import ray

    if address is None:
        ray.init(include_dashboard=False, log_to_driver=False, runtime_env=runtime_env)
        return
    if runtime_env is None and "RAY_JOB_CONFIG_JSON_ENV_VAR" not in os.environ:  # not a `ray job submit` driver
        runtime_env = {"py_modules": [str(Path(__file__).resolve().parents[1])], "excludes": ["__pycache__/"]}
    try:
        ray.init(address=address, log_to_driver=False, runtime_env=runtime_env)
    except ConnectionError as e:
        raise RunnerError(
            f"cannot connect to the Ray cluster: {e}",
            field="--address",
            hint="check the address (`ray status` on the head node prints it); a cluster with token "
            "authentication needs RAY_AUTH_MODE=token here and its token in RAY_AUTH_TOKEN or "
            "~/.ray/auth_token (`ray get-auth-token` on the head node)",
        ) from None
