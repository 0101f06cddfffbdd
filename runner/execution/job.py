"""What travels from `runner go` to a recipe's process: the options of the call and, per recipe,
its validated recipe and prepared inputs. Several recipes that share an engine (study cells that
differ only in request-side settings) travel in one job and run on one engine, in order."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.config.recipe import LoadedRecipe
from runner.inputs.prepare import Prepared

# what a recipe may change and still run on the same engine (the request side)
REQUEST_SIDE = {
    "name",
    "description",
    "prompt",
    "sampling",
    "dataset",
    "metrics",
    "scoring",
    "baseline",
    "estimate",
    "timeout_s",
}


@dataclass(frozen=True)
class RunOptions:
    out: Path
    limit: int | None = None
    estimate: int | None = None  # overrides the recipe's `estimate`
    command: str = ""
    progress: bool = True
    timeout_s: float | None = None  # the call's --timeout (a recipe's own timeout_s wins)


@dataclass(frozen=True)
class Unit:
    loaded: LoadedRecipe
    prepared: Prepared
    run_key: str

    @property
    def name(self) -> str:
        return self.loaded.recipe.name


@dataclass(frozen=True)
class Job:
    units: tuple[Unit, ...]
    options: RunOptions
    env: dict[str, str] = field(default_factory=dict)

    def timeout_s(self) -> float | None:
        """The sum of the units' timeouts (each its recipe's, else the call's); none if any has none."""
        each = [u.loaded.recipe.timeout_s or self.options.timeout_s for u in self.units]
        return None if any(t is None for t in each) else float(sum(each))  # type: ignore[arg-type]


def engine_key(lr: LoadedRecipe) -> str:
    """Recipes with the same key can share one engine: same model, engine settings and chat template.
    A serving run (`load:`) starts a server of its own, so it shares with no other recipe."""
    import json

    rec: dict[str, Any] = lr.recipe.canonical()
    shared = {k: v for k, v in rec.items() if k not in REQUEST_SIDE}
    shared["chat_template"] = rec["prompt"].get("chat_template")
    if lr.recipe.load is not None:
        shared["serving_run"] = lr.recipe.name
    return json.dumps(shared, sort_keys=True)


def group_by_engine(units: list[Unit]) -> list[tuple[Unit, ...]]:
    """Units in groups that share an engine, in the order each group first appears."""
    groups: dict[str, list[Unit]] = {}
    for u in units:
        groups.setdefault(engine_key(u.loaded), []).append(u)
    return [tuple(g) for g in groups.values()]
