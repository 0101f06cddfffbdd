"""The generated files, from the models (never by hand): schema/recipe.schema.json,
schema/results.schema.json and schema/summary.schema.json (what `runner schema` prints),
schema/compare.schema.json (`runner compare`'s compare.json) and docs/recipe-reference.md (the
recipe's models, the study wing's keys, the metrics and the plan wing's contract). `python
docs/generate.py` rewrites them; tests/test_schema.py and tests/test_summary_json.py fail when they
are out of date."""

from __future__ import annotations

import json
import sys
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere: the runner beside this folder
    sys.path.insert(0, str(ROOT))

from runner.cli.inspect import compare_schema, results_schema, summary_schema  # noqa: E402
from runner.wings import recipe_schema  # noqa: E402


def first_paragraph(doc: str | None) -> str:
    """A docstring's first paragraph on one line (the reference's summary of a model)."""
    return " ".join((doc or "").strip().split("\n\n")[0].split())


def _type_name(ann: Any) -> str:
    origin = typing.get_origin(ann)
    args = typing.get_args(ann)
    if origin is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin in (typing.Union, types.UnionType):
        parts = [a for a in args if a is not type(None)]
        s = " \\| ".join(_type_name(a) for a in parts)
        return s + (" \\| null" if len(parts) < len(args) else "")
    if origin is typing.Annotated:
        return _type_name(args[0])
    if origin in (list, tuple):
        return f"list of {_type_name(args[0])}" if args else "list"
    if origin is dict:
        return "mapping"
    if isinstance(ann, type):
        if issubclass(ann, BaseModel):
            return f"[{ann.__name__}](#{ann.__name__.lower()})"
        return {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}.get(
            ann.__name__, ann.__name__
        )
    return str(ann).replace("typing.", "")


def _default(f: Any) -> str:
    if f.default is PydanticUndefined and f.default_factory is None:
        return "**required**"
    if f.default_factory is not None:
        v = f.default_factory()
        if isinstance(v, BaseModel):
            return "(see section)"
        return f"`{json.dumps(v)}`"
    return f"`{json.dumps(f.default)}`"


def _constraints(f: Any) -> str:
    bits = []
    for m in f.metadata:
        for attr, sym in (("gt", ">"), ("ge", "≥"), ("lt", "<"), ("le", "≤")):
            v = getattr(m, attr, None)
            if v is not None:
                bits.append(f"{sym} {v}")
        if getattr(m, "pattern", None):
            bits.append(f"pattern `{m.pattern}`")
    return (" (" + ", ".join(bits) + ")") if bits else ""


def _reference_models() -> list[tuple[type[BaseModel], str]]:
    """Every model a recipe can hold, with where it sits; the engines come from the registry."""
    from runner.engines import ENGINES
    from runner.engines.transformers import ContinuousSpec
    from runner.recipe import (
        CostSpec,
        DatasetSpec,
        FieldMap,
        GateSpec,
        LoadSpec,
        ModelSpec,
        PromptSpec,
        Recipe,
        Sampling,
        ShotExample,
        ShotsSpec,
    )
    from runner.scoring import PostProcess, ScoringSpec
    from runner.study.load import ReportAxes, StudyKeys

    engines = [(e, f"`engine` with `kind: {e.kind_name()}`") for e in ENGINES]
    return [
        (Recipe, "top level"),
        (StudyKeys, "top level, in study files and files other files build on"),
        (ReportAxes, "`report`"),
        (ModelSpec, "`model`"),
        *engines,
        (ContinuousSpec, "`engine.continuous` (transformers)"),
        (DatasetSpec, "`dataset`"),
        (FieldMap, "`dataset.fields`"),
        (PromptSpec, "`prompt`"),
        (ShotsSpec, "`prompt.shots`"),
        (ShotExample, "`prompt.shots.examples[]`"),
        (Sampling, "`sampling`"),
        (ScoringSpec, "`scoring`"),
        (PostProcess, "`scoring.postprocess`"),
        (LoadSpec, "`load`"),
        (GateSpec, "`gate`, `tune.gate`"),
        (CostSpec, "`cost`"),
    ]


def reference_markdown() -> str:
    models = _reference_models()
    out = [
        "# Recipe reference",
        "",
        "Generated from the Pydantic models in `runner/` by `python docs/generate.py`; do not edit "
        "by hand.",
        "Unknown keys are errors. Paths are relative to the recipe file. Editors validate recipes "
        "with",
        "`schema/recipe.schema.json` (first line of a recipe: "
        "`# yaml-language-server: $schema=../schema/recipe.schema.json`).",
        "",
    ]
    for m, where in models:
        doc = first_paragraph(m.__doc__)
        out += [f"## {m.__name__}", ""]
        if where:
            out.append(f"Where: {where}.")
        if doc:
            out.append(doc)
        out += ["", "| field | type | default | meaning |", "| --- | --- | --- | --- |"]
        for name, f in m.model_fields.items():
            desc = (f.description or "").replace("|", "\\|")
            out.append(
                f"| `{name}` | {_type_name(f.annotation)}{_constraints(f)} | {_default(f)} | "
                f"{desc} |"
            )
        out.append("")
    from runner.scoring import ALIASES, METRICS, conventions, metrics

    out += [
        "## Metrics",
        "",
        "Names allowed in `metrics`, each with its convention (the formula, normalization "
        "and default gold policy it follows, and where that comes from):",
        "",
        "| metric | convention | gold | formula | source |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, c in conventions(list(METRICS)).items():
        alias = f" (alias of `{ALIASES[name]}`)" if name in ALIASES else ""
        formula = c.formula.replace("|", "\\|")
        out.append(f"| `{name}`{alias} | {c.name} | {c.gold} | {formula} | {c.source} |")
    out += ["", (metrics.__doc__ or "").strip(), ""]
    out += plan_reference()
    out += tune_reference()
    return "\n".join(out)


def tune_reference() -> list[str]:
    """`runner tune`'s block and its method (runner/tune/spec.py)."""
    from runner.tune import spec

    head = (
        "`runner tune FILE [--out DIR] [--dry-run]` searches the `tune:` block of a recipe or "
        "study file."
    )
    out = ["## Tune", "", head, ""]
    out += [(spec.__doc__ or "").strip(), ""]
    for m in (spec.TuneSpec, spec.Range, spec.Screen, spec.Confirm, spec.Budget):
        out += [
            f"### {m.__name__}",
            "",
            first_paragraph(m.__doc__),
            "",
        ]
        out += ["| field | type | default | meaning |", "| --- | --- | --- | --- |"]
        for name, f in m.model_fields.items():
            desc = (f.description or "").replace("|", "\\|")
            out.append(
                f"| `{name}` | {_type_name(f.annotation)}{_constraints(f)} | {_default(f)} | "
                f"{desc} |"
            )
        out.append("")
    return out


def plan_reference() -> list[str]:
    """`runner plan --json`'s keys (the contract) and the formulas behind them."""
    from runner.plan import floor, memory, prefix_cache
    from runner.plan.plan import Plan

    out = [
        "## Plan",
        "",
        "`runner plan RECIPES... [--gpu NAME|cpu] [--json]` prints, per recipe or study cell, what "
        "it predicts before any GPU time, for the named GPU, else this machine's (NVML), else the "
        "H200. vLLM recipes on a GPU get every key; a recipe of another engine (no paged KV-cache "
        "pool) gets its prompt tokens, context fit, weights and KV bytes per token, and a recipe "
        "on the CPU (`engine.device: cpu`, or `--gpu cpu`) the same with `gpu` null; keys that do "
        "not apply are null and a note says why (a note shared by several recipes is printed "
        "once). Token counts are those of the engines' tokenizer (transformers), kept by the hash "
        "of their inputs under `$RUNNER_CACHE/prompt-tokens`, so a later `check` or `plan` of the "
        "same prompts counts without loading transformers. "
        '`--json` prints `{"recipes": [PLAN, ...]}` with these keys (the contract; more may be '
        "added):",
        "",
        "| key | meaning |",
        "| --- | --- |",
    ]
    for name, f in Plan.model_fields.items():
        out.append(f"| `{name}` | {(f.description or '').replace('|', chr(92) + '|')} |")
    for title, mod in (
        ("Prefix caching", prefix_cache),
        ("Memory", memory),
        ("Compute floor", floor),
    ):
        out += ["", f"### {title}", "", (mod.__doc__ or "").strip()]
    return out + [""]


def write_all(root: Path = ROOT) -> list[Path]:
    from runner.base.files import write_text_atomic

    paths = []
    for rel, text in (
        (
            "schema/recipe.schema.json",
            json.dumps(recipe_schema(), indent=2, ensure_ascii=False) + "\n",
        ),
        (
            "schema/results.schema.json",
            json.dumps(results_schema(), indent=2, ensure_ascii=False) + "\n",
        ),
        (
            "schema/summary.schema.json",
            json.dumps(summary_schema(), indent=2, ensure_ascii=False) + "\n",
        ),
        (
            "schema/compare.schema.json",
            json.dumps(compare_schema(), indent=2, ensure_ascii=False) + "\n",
        ),
        ("docs/recipe-reference.md", reference_markdown()),
    ):
        p = root / rel
        write_text_atomic(p, text)
        paths.append(p)
    return paths


if __name__ == "__main__":
    for p in write_all():
        print(p)
