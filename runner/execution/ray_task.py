"""The Ray task of `runner go --executor ray` (see ray_executor.py): one replica of a job, run on a
worker node with run_isolated in a folder on that node, handing back every file it wrote. Its
finished samples stream to the driver's board while it runs; a retry starts from the board's.
Ray is imported only inside the task, when it runs."""

from __future__ import annotations

import os
import shutil
from dataclasses import replace
from typing import Any

from runner.errors import RunnerError
from runner.execution import replicas as dp
from runner.execution.isolate import failed_result
from runner.execution.job import Job
from runner.execution.layout import RunFolder
from runner.files import write_json_atomic


def run_replica(rep: dp.Replica, board: Any) -> dp.TaskOutput:
    """The Ray task: run the replica's job with run_isolated in a folder on this node."""
    import ray

    wdir = dp.worker_dir(rep.tag)
    wdir.mkdir(parents=True, exist_ok=True)
    dp.claim(wdir)
    where = {
        "node_id": ray.get_runtime_context().get_node_id(),
        "node_ip": ray.util.get_node_ip_address(),
        "pid": os.getpid(),
    }
    try:
        board.started.remote(rep.tag, where)
        job = replace(rep.job, options=replace(rep.job.options, out=wdir, progress=False))
        for u in job.units:
            folder = RunFolder.of(wdir, u.name)
            folder.root.mkdir(parents=True, exist_ok=True)
            folder.samples.unlink(missing_ok=True)
            seeds = ray.get(board.seed.remote(u.name, [ex.id for ex in u.prepared.examples]))
            dp.seed_partial(folder.partial, u.run_key, seeds)
        paths = {u.name: RunFolder.of(wdir, u.name).partial for u in job.units}
        tail = dp.PartialTail(paths, lambda name, lines: board.lines.remote(rep.tag, name, lines))
        tail.start()
        try:
            _run_here(job, where["node_ip"])
        finally:
            tail.stop()
        files = tuple(dp.unit_files(wdir, u.name) for u in job.units)
        out = dp.TaskOutput(tag=rep.tag, worker_dir=str(wdir), units=files, **where)
    finally:
        (wdir / dp.OWNER).unlink(missing_ok=True)
    shutil.rmtree(wdir, ignore_errors=True)  # everything it holds goes back to the driver
    return out


def _run_here(job: Job, node_ip: str) -> None:
    """run_isolated, where this node can run the job's engine (what `runner go` left to the workers to
    check); where not, each recipe's results.json says why."""
    from runner.cli.preflight import check_host
    from runner.execution.isolate import run_isolated

    try:
        check_host(job.units[0].loaded)
    except RunnerError as e:
        why = f"Ray node {node_ip} cannot run it: {e.render(with_hint=False)}"
        for u in job.units:
            res = failed_result(u, why, e.hint, job.options.command)
            write_json_atomic(RunFolder.of(job.options.out, u.name).results, res.model_dump(mode="json"))
        return
    run_isolated(job)
