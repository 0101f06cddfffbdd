"""Guards added after review: inputs that used to slip through or mislead."""

import json
import os
import stat

import pytest
from click.testing import CliRunner

from runner.cli import cli
from tests.cli_output import user_error


def _check(path):
    return CliRunner().invoke(cli, ["check", str(path), "--no-tokens"])


def test_duplicate_yaml_key_is_an_error_with_both_lines(write_recipe):
    p = write_recipe("name: t\nsampling: {max_tokens: 3}\nsampling: {temperature: 0.5}\n")
    r = _check(p)
    assert user_error(r) == (
        "Error: {tmp}/recipe.yaml:3: key 'sampling' appears twice (first on line 2); the second "
        "would silently replace the first\n"
    )
    assert "recipe.yaml:3: key 'sampling' appears twice (first on line 2)" in r.output


def test_duplicate_example_ids_are_rejected(write_recipe, base_recipe, tmp_path):
    (tmp_path / "d.jsonl").write_text(
        '{"id": 1, "question": "a", "context": "", "answers": "x"}\n'
        '{"id": 1, "question": "b", "context": "", "answers": "y"}\n'
    )
    base_recipe["dataset"] = {"format": "jsonl", "path": "d.jsonl", "fields": {"id": "id"}}
    r = _check(write_recipe(base_recipe))
    said = (
        "Error: {tmp}/recipe.yaml: dataset.fields.id: example id '1' appears more than once (rows "
        "0 and 1); ids must be unique (they pair samples across runs and recipes)\n"
        "  hint: the column 'id' repeats it: map fields.id to a column whose values are unique, "
        "or make the ids unique in the file\n"
    )
    assert user_error(r) == said
    # unset, the rows' own `id` column is read all the same (the hint said to leave it unset)
    base_recipe["dataset"]["fields"] = {}
    assert user_error(_check(write_recipe(base_recipe))) == said


def test_include_in_a_template_is_a_clear_error(write_recipe, base_recipe, tmp_path):
    (tmp_path / "t.j2").write_text('{% include "other.j2" %}{{ question }}')
    base_recipe["prompt"]["template"] = str(tmp_path / "t.j2")
    r = _check(write_recipe(base_recipe))
    assert user_error(r) == (
        "Error: {tmp}/recipe.yaml: prompt.template: {tmp}/t.j2: templates cannot include, import "
        "or extend other files; put the whole prompt in one template\n"
    )


@pytest.mark.parametrize("name", ["summary.md", "time.png"])
def test_names_of_summary_files_are_reserved(write_recipe, base_recipe, name):
    base_recipe["name"] = name
    r = _check(write_recipe(base_recipe))
    rules = (
        "letters, digits, `._-`, at most 100 characters, not starting with `.` or `-`, not one of "
    )
    rules += "accuracy_vs_time.png, memory.png, summary.json, summary.md, time.png"
    assert (
        user_error(r)
        == f"Error: {{tmp}}/recipe.yaml: name: {name!r} is not a valid run name ({rules})\n"
    )


def test_out_that_is_a_file_is_bad_input(write_recipe, base_recipe, tmp_path):
    (tmp_path / "afile").write_text("x")
    r = CliRunner().invoke(
        cli, ["go", str(write_recipe(base_recipe)), "--out", str(tmp_path / "afile" / "sub")]
    )
    assert user_error(r) == (
        "Error: {tmp}/afile/sub: --out: cannot create the report folder: Not a directory\n"
    )


def test_unknown_builtin_model_is_bad_input_for_go(write_recipe, base_recipe, tmp_path):
    base_recipe["model"]["id"] = "builtin:nope"
    r = CliRunner().invoke(
        cli, ["go", str(write_recipe(base_recipe)), "--out", str(tmp_path / "o")]
    )
    assert user_error(r) == (
        "Error: {tmp}/recipe.yaml: model.id: unknown builtin model 'builtin:nope'; allowed: "
        "builtin:demo\n"
    )


def test_run_key_ignores_description_but_not_sampling(write_recipe, base_recipe, tmp_path):
    from runner import load_recipe
    from runner.run.resume import run_key

    def key(d, name, inputs=None, limit=None):
        return run_key(
            load_recipe(write_recipe(d, name)).recipe.canonical(),
            inputs or {"dataset": "a"},
            limit,
            None,
        )

    k1 = key(base_recipe, "a.yaml")
    assert k1 == key({**base_recipe, "description": "new words", "timeout_s": 9}, "b.yaml")
    assert k1 != key({**base_recipe, "sampling": {"max_tokens": 5}}, "c.yaml")
    assert k1 != key(base_recipe, "a.yaml", inputs={"dataset": "b"})  # the data changed
    assert k1 != key(base_recipe, "a.yaml", limit=3)


def test_scores_average_only_examples_with_gold_answers():
    from runner.results import Sample
    from runner.run.result import mean_scores

    s = [
        Sample(id="a", prompt="", output="", answers=[], prompt_tokens=1, output_tokens=1),
        Sample(
            id="b",
            prompt="",
            output="",
            answers=["x"],
            prompt_tokens=1,
            output_tokens=1,
            scores={"exact_match": 1.0},
        ),
        Sample(
            id="c",
            prompt="",
            output="",
            answers=["y"],
            prompt_tokens=1,
            output_tokens=1,
            scores={"exact_match": 0.0},
        ),
    ]
    assert mean_scores(s, ["exact_match"]) == {"exact_match": 0.5}
    assert mean_scores(s[:1], ["exact_match"]) == {}


def test_written_files_are_readable_by_others(tmp_path):
    from runner.base.files import write_json_atomic

    old = os.umask(0o022)
    try:
        write_json_atomic(tmp_path / "r.json", {"a": 1})
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "r.json").stat().st_mode) == 0o644
    assert json.loads((tmp_path / "r.json").read_text()) == {"a": 1}


def test_set_paths_are_relative_to_the_current_directory(
    write_recipe, base_recipe, tmp_path, monkeypatch
):
    from runner import load_recipe

    sub = tmp_path / "recipes"
    p = write_recipe(base_recipe, "recipes/r.yaml")
    (tmp_path / "models" / "m").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    lr = load_recipe(p, ["model.id=./models/m"])
    assert lr.recipe.model.id == str(tmp_path / "models" / "m")
    assert (
        load_recipe(p, ["model.id=Qwen/Qwen2.5-7B-Instruct"]).recipe.model.id
        == "Qwen/Qwen2.5-7B-Instruct"
    )
    assert sub.exists()
