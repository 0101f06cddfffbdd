"""The one place the wings are wired into a call (for the CLI and the Python API alike): a study
file's cells, the plan a run's report sets beside its measurement, the sections the plan, serving,
Ray and study wings add to report.md and summary.md, and the wings' keys in the recipe schema.
Deleting a wing's folder means deleting its lines here, its command in cli/ and its recipe field;
nothing below this imports a wing."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.study.load import add_study_keys, study_cells

# one cell as a plain recipe file, for the tune
from runner.study.load import cell_file as cell_file

if TYPE_CHECKING:  # the wings of a run are imported when a call runs: loading a recipe stays light
    from runner.orchestrate import Wings
    from runner.report.markdown import Section
    from runner.report.summary import Sections
    from runner.run.job import Unit

studies = study_cells  # a study file's cells, for runner.config's load_recipes


def plan_for(unit: Unit) -> dict[str, Any] | None:
    """The prediction for this run, made before it starts, for the GPU of this machine (none without
    one)."""
    from runner.plan.plan import plan_for_run

    return plan_for_run(unit.loaded, unit.prepared)


class Plans:
    """The plans of the units about to run, made in one background thread in run order: a plan loads
    the tokenizer (transformers, torch) and encodes every prompt, seconds per recipe, so the next
    job's plans are made while the current job runs and only the first job waits for its own."""

    def __init__(self, units: Sequence[Unit]):
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="runner-plan")
        self._futures = {u.name: self._pool.submit(plan_for, u) for u in units}

    def attach(self, units: Sequence[Unit]) -> tuple[Unit, ...]:
        return tuple(replace(u, plan=self._futures[u.name].result()) for u in units)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def report_sections(out: Path | None) -> list[Section]:
    from runner.cluster.ray import where_it_ran
    from runner.plan.plan import predicted_vs_measured
    from runner.serve.report import serving_section

    return [where_it_ran, serving_section(out), predicted_vs_measured]


def summary_sections() -> list[Sections]:
    from runner.serve.report import serving_summary
    from runner.study.study import study_summary

    return [study_summary, serving_summary]


def study_summaries(results, out: Path, baseline: str | None = None, gate=None) -> list[Path]:
    """Each study's own summary of all its stored cells (`<out>/<study>/summary.md`)."""
    from runner.serve.report import serving_summary
    from runner.study.study import write_study_summaries

    return write_study_summaries(results, out, baseline, gate, [serving_summary])


def call_wings() -> Wings:
    """What the wings add to a call of `runner go`, `runner tune` or `runner.run_recipe`: the plans
    and sections here, the serving route for `load:` recipes and the Ray route for `--executor
    ray`."""
    from runner.cluster.ray import run_jobs_on_ray
    from runner.orchestrate import Wings
    from runner.serve.run import run_serving

    return Wings(
        plans=Plans,
        report_sections=report_sections,
        summary_sections=summary_sections,
        study_summaries=study_summaries,
        run_serving=run_serving,
        run_on_ray=run_jobs_on_ray,
    )


def recipe_schema() -> dict:
    """Recipe files' JSON Schema, the study wing's keys and the tune wing's `tune:` block included
    (schema/recipe.schema.json)."""
    from runner.recipe import Recipe
    from runner.tune.spec import TuneSpec

    out = add_study_keys(Recipe.model_json_schema(by_alias=False))
    tune = TuneSpec.model_json_schema(ref_template="#/$defs/{model}")
    out["$defs"] = {**out.get("$defs", {}), **tune.pop("$defs", {}), "TuneSpec": tune}
    described = (
        "`runner tune`: the settings to search, the objective, the gate and the budget "
        "(runner/tune/spec.py)."
    )
    out["properties"]["tune"] = {"$ref": "#/$defs/TuneSpec", "description": described}
    return {
        **out,
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "runner recipe",
    }
