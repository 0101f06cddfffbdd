"""Where `runner go` runs its jobs: `local` (each job in its own process on this machine, or in this
process with the hidden --in-process) or `ray` (each job, or each data-parallel replica of one, as a
Ray task: runner/execution/ray_executor.py). What either refuses before anything runs is here too."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass

import click

from runner.config.recipe import LoadedRecipe
from runner.errors import RunnerError
from runner.execution.job import Job, RunOptions, Unit, group_by_engine
from runner.execution.layout import RunFolder
from runner.reporting.results import RunResult

EXECUTORS = ("local", "ray")


@dataclass(frozen=True)
class Executor:
    kind: str = "local"
    address: str | None = None  # ray: an existing cluster (None: a local Ray instance for the call)
    in_process: bool = False  # local: run the jobs in this process (tests)

    @property
    def on_ray(self) -> bool:
        return self.kind == "ray"

    def check_options(self, replicas: int | None) -> None:
        """Options that do not go together, and a missing ray: bad input before any recipe is read."""
        if not self.on_ray:
            if replicas is not None:
                raise RunnerError(
                    "only the Ray executor runs data-parallel replicas; add --executor ray", field="--replicas"
                )
            if self.address is not None:
                raise RunnerError(
                    "names a Ray cluster, which only the Ray executor uses; add --executor ray", field="--address"
                )
            return
        if self.in_process:
            raise RunnerError(
                "runs the recipes in this process; the Ray executor runs them in Ray tasks", field="--in-process"
            )
        if importlib.util.find_spec("ray") is None:
            raise RunnerError(
                "ray is not installed in this Python, so `--executor ray` cannot run here",
                field="--executor",
                hint="pip install -e '.[ray]'",
            )

    def check_recipes(self, loaded: list[LoadedRecipe]) -> None:
        """A recipe that asks for replicas runs only on Ray."""
        if self.on_ray:
            return
        for lr in loaded:
            n = lr.recipe.replicas
            if n > 1:
                raise RunnerError(
                    f"{n} data-parallel replicas run only on Ray; the local executor runs one engine per recipe",
                    file=lr.path,
                    field="replicas",
                    hint="add --executor ray, or set replicas: 1",
                )

    def run(self, todo: list[Unit], opts: RunOptions, done: Callable[[RunResult], None]) -> None:
        """Run the units, those that share an engine as one job; `done` gets each result as it is written."""
        groups = group_by_engine(todo)
        if self.on_ray:
            from runner.execution.ray_executor import run_jobs_on_ray

            for n, group in enumerate(groups, 1):
                self._announce(group, n, opts)
            run_jobs_on_ray([Job(units=g, options=opts) for g in groups], address=self.address, on_result=done)
            return
        for n, group in enumerate(groups, 1):
            self._announce(group, n, opts)
            for res in self._run_job(Job(units=group, options=opts)):
                done(res)

    def _announce(self, group: tuple[Unit, ...], n: int, opts: RunOptions) -> None:
        r = group[0].loaded.recipe
        names = ", ".join(u.name for u in group)
        shared = f" ({len(group)} recipes on one engine)" if len(group) > 1 else ""
        reps = f", {r.replicas} replicas" if r.replicas > 1 else ""
        click.echo(f"[{n}] {names} ({r.engine.kind}, {r.model.id}{reps}){shared}", err=True)
        log = RunFolder.of(opts.out, group[0].name).engine_log
        if self.on_ray:
            click.echo(f"  engine output: {log} (from the Ray worker, when the job ends)", err=True)
        elif not self.in_process:  # engine start can take a minute with nothing on screen: say where to look
            click.echo(f"  engine output: {log}", err=True)

    def _run_job(self, job: Job) -> list[RunResult]:
        if self.in_process:
            from runner.execution.run import run_job

            return run_job(job)
        from runner.execution.isolate import run_isolated

        return run_isolated(job)
