"""Generated files (JSON Schemas, recipe reference) against the models, and every committed recipe
and results.json against those schemas. Nothing here loads a model or imports torch."""

from __future__ import annotations

import copy
import importlib.util
import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from jsonschema import Draft202012Validator

from runner.results import SCHEMA_VERSION, RunResult

PROJECT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("generate", PROJECT / "docs" / "generate.py")
gen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen)  # docs/generate.py: the generator of the files checked here
REGEN = "out of date: run `python docs/generate.py` (from the project root) and commit the result"
SCHEMA_LINE = "# yaml-language-server: $schema=../schema/recipe.schema.json"

# every engine of the registry, study keys, ...
RECIPE_MODELS = [m for m, _ in gen._reference_models()]
RECIPE_FILES = sorted((PROJECT / "recipes").glob("*.yaml"))


def _committed_results() -> list[Path]:
    """The results.json files committed as evidence (git's list), not whatever the user's own runs
    left in reports/."""
    try:
        out = subprocess.run(
            ["git", "-C", str(PROJECT), "ls-files", "reports"], capture_output=True, text=True
        )
        files = [PROJECT / p for p in out.stdout.splitlines() if p.endswith("/results.json")]
    except OSError:
        files = []
    return sorted(files) or sorted((PROJECT / "reports").glob("h200-*/**/results.json"))


RESULT_FILES = _committed_results()


def _load_json(rel: str) -> dict:
    return json.loads((PROJECT / rel).read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def recipe_validator() -> Draft202012Validator:
    s = _load_json("schema/recipe.schema.json")
    Draft202012Validator.check_schema(s)
    return Draft202012Validator(s)


@pytest.fixture(scope="module")
def results_validator() -> Draft202012Validator:
    s = _load_json("schema/results.schema.json")
    Draft202012Validator.check_schema(s)
    return Draft202012Validator(s)


def _errors(validator: Draft202012Validator, doc) -> list[str]:
    return [
        f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
        for e in validator.iter_errors(doc)
    ]


# --------------------------------------------------------------------------- generated files are
# current


def _generated() -> dict[str, str]:
    return {
        "docs/recipe-reference.md": gen.reference_markdown(),
        "schema/recipe.schema.json": json.dumps(gen.recipe_schema(), indent=2, ensure_ascii=False)
        + "\n",
        "schema/results.schema.json": json.dumps(gen.results_schema(), indent=2, ensure_ascii=False)
        + "\n",
        "schema/summary.schema.json": json.dumps(gen.summary_schema(), indent=2, ensure_ascii=False)
        + "\n",
        "schema/compare.schema.json": json.dumps(gen.compare_schema(), indent=2, ensure_ascii=False)
        + "\n",
    }


@pytest.mark.parametrize(
    "rel",
    [
        "docs/recipe-reference.md",
        "schema/recipe.schema.json",
        "schema/results.schema.json",
        "schema/summary.schema.json",
        "schema/compare.schema.json",
    ],
)
def test_generated_file_is_current(rel):
    committed = (PROJECT / rel).read_text(encoding="utf-8")
    expected = _generated()[rel]
    if committed != expected:
        import difflib

        diff = "\n".join(
            list(
                difflib.unified_diff(
                    committed.splitlines(),
                    expected.splitlines(),
                    f"{rel} (committed)",
                    f"{rel} (generated)",
                    lineterm="",
                )
            )[:40]
        )
        pytest.fail(f"{rel} is {REGEN}.\n{diff}")


def test_write_all_writes_exactly_the_generated_text(tmp_path):
    """`python docs/generate.py` (write_all) produces the same text the freshness test compares
    against."""
    paths = gen.write_all(tmp_path)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in paths) == sorted(_generated())
    for rel, text in _generated().items():
        assert (tmp_path / rel).read_text(encoding="utf-8") == text


# --------------------------------------------------------------------------- every field documented


def _section(md: str, title: str) -> str:
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", md, flags=re.S | re.M)
    assert m, f"no '## {title}' section in the recipe reference"
    return m.group(1)


@pytest.mark.parametrize("model", RECIPE_MODELS, ids=lambda m: m.__name__)
def test_every_recipe_field_is_in_the_reference_with_a_description(model):
    section = _section(gen.reference_markdown(), model.__name__)
    assert model.model_fields, model
    for name, f in model.model_fields.items():
        assert (f.description or "").strip(), f"{model.__name__}.{name} has no description"
        rows = [ln for ln in section.splitlines() if ln.startswith(f"| `{name}` |")]
        assert len(rows) == 1, (
            f"{model.__name__}.{name}: expected one row in the reference, found {rows}"
        )
        meaning = re.split(r"(?<!\\)\|", rows[0])[-2].strip()
        assert meaning, f"{model.__name__}.{name}: empty meaning column in the reference"


def test_every_link_in_the_reference_has_its_section():
    """Issue 42: the reference linked to GateSpec, CostSpec and ContinuousSpec sections that did
    not exist."""
    md = gen.reference_markdown()
    heads = {h.lower().replace(" ", "-") for h in re.findall(r"^#+ (.+)$", md, flags=re.M)}
    links = set(re.findall(r"\]\(#([^)]+)\)", md))
    assert links and links <= heads, sorted(links - heads)


def test_reference_lists_the_models_in_order():
    md = gen.reference_markdown()
    heads = re.findall(r"^## (\w+)$", md, flags=re.M)
    assert heads == [m.__name__ for m in RECIPE_MODELS] + ["Metrics", "Plan", "Tune"]


# --------------------------------------------------------------------------- recipes against the
# schema


def test_there_are_recipes_to_check():
    assert len(RECIPE_FILES) >= 4


@pytest.mark.parametrize("path", RECIPE_FILES, ids=lambda p: p.name)
def test_recipe_validates_against_schema(path, recipe_validator):
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(doc, dict)
    assert _errors(recipe_validator, doc) == []


@pytest.mark.parametrize("path", RECIPE_FILES, ids=lambda p: p.name)
def test_recipe_first_line_is_the_schema_comment(path):
    first = path.read_text(encoding="utf-8").splitlines()[0]
    assert first == SCHEMA_LINE, f"{path.name}: first line is {first!r}"


@pytest.fixture
def good_recipe() -> dict:
    from runner import load_recipes

    cell = next(
        lr
        for lr in load_recipes(PROJECT / "recipes" / "jsquad-study.yaml")
        if lr.recipe.name == "jsquad-vllm-oneshot-cache"
    )
    return cell.recipe.model_dump(mode="json", exclude_defaults=True)


def _with(doc: dict, dotted: str, value) -> dict:
    d = copy.deepcopy(doc)
    *head, last = dotted.split(".")
    cur = d
    for k in head:
        cur = cur[k]
    cur[last] = value
    return d


@pytest.mark.parametrize(
    "dotted,value",
    [
        ("nmae", "typo"),  # unknown top-level key
        ("engine.enable_prefix_cache", True),  # unknown vllm key
        ("engine.batch_size", 8),  # a transformers-only key on a vllm engine
        ("sampling.top_pp", 0.9),  # unknown nested key
        ("prompt.shots.examples", [{"question": "q", "answer": "a", "extra": 1}]),
    ],
)
def test_recipe_with_unknown_key_fails_schema(good_recipe, recipe_validator, dotted, value):
    assert _errors(recipe_validator, good_recipe) == []
    assert _errors(recipe_validator, _with(good_recipe, dotted, value)), f"{dotted} was accepted"


@pytest.mark.parametrize(
    "dotted,value",
    [
        ("sampling.max_tokens", "many"),
        ("sampling.max_tokens", 0),
        ("sampling.top_p", 1.5),
        ("engine.enforce_eager", "yes"),
        ("engine.gpu_memory_utilization", 1.2),
        ("engine.kind", "tgi"),
        ("model", "Qwen/Qwen2.5-7B-Instruct"),
        ("metrics", ["exact_match", "bleu"]),
        ("dataset.format", "xml"),
        ("name", "has space"),
    ],
)
def test_recipe_with_wrong_type_or_value_fails_schema(good_recipe, recipe_validator, dotted, value):
    assert _errors(recipe_validator, good_recipe) == []
    assert _errors(recipe_validator, _with(good_recipe, dotted, value)), (
        f"{dotted}={value!r} was accepted"
    )


def test_recipe_missing_required_field_fails_schema(good_recipe, recipe_validator):
    d = copy.deepcopy(good_recipe)
    del d["dataset"]
    assert any("dataset" in e for e in _errors(recipe_validator, d))


# --------------------------------------------------------------------------- committed results


def test_there_are_committed_results():
    assert len(RESULT_FILES) >= 1


def test_only_committed_results_are_checked(tmp_path):
    """A user's own runs in reports/ (old, hand-edited) are not the project's evidence: only tracked
    files count."""
    tracked = subprocess.run(
        ["git", "-C", str(PROJECT), "ls-files", "reports"], capture_output=True, text=True
    )
    assert {str(p.relative_to(PROJECT)) for p in RESULT_FILES} <= set(tracked.stdout.splitlines())


@pytest.mark.parametrize(
    "path", RESULT_FILES, ids=lambda p: p.relative_to(PROJECT / "reports").parent.as_posix()
)
def test_committed_results_validate_against_schema(path, results_validator):
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert _errors(results_validator, doc) == []
    assert doc["schema_version"] == SCHEMA_VERSION
    assert doc["name"] == path.parent.name


def test_results_schema_rejects_bad_documents(results_validator):
    doc = json.loads(RESULT_FILES[0].read_text(encoding="utf-8"))
    assert _errors(results_validator, doc) == []
    bad_status = {**doc, "status": "maybe"}
    extra = {**doc, "surprise": 1}
    no_name = {k: v for k, v in doc.items() if k != "name"}
    for bad in (bad_status, extra, no_name):
        assert _errors(results_validator, bad)


def test_a_schema_1_result_reads_its_study_cell_into_one_part():
    """results.json of schema 1 kept a study cell's facts as five top-level fields: read back into
    `cell`, a run that is no study's cell into none."""
    doc = json.loads(RESULT_FILES[0].read_text(encoding="utf-8"))
    flat = {k: v for k, v in doc.items() if k != "cell"} | {
        "schema_version": 1,
        "study": "s",
        "cell_index": 3,
    }
    flat |= {
        "cell": {"variant": "a"},
        "cell_labels": {"variant": "A"},
        "study_axes": {"rows": "variant"},
    }
    r = RunResult.model_validate(flat)
    assert r.cell.model_dump() == {
        "study": "s",
        "settings": {"variant": "a"},
        "labels": {"variant": "A"},
        "axes": {"rows": "variant"},
        "index": 3,
    }
    plain = {
        k: v
        for k, v in flat.items()
        if k not in ("cell", "cell_labels", "study_axes", "cell_index")
    }
    assert RunResult.model_validate({**plain, "study": None, "cell": {}}).cell is None
