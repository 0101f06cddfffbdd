"""`import runner`: the small public API (load a recipe, run it, read results) as a user's script calls it."""

import subprocess
import sys

import pytest

import runner
from runner.base.errors import RunnerError


def test_import_runner_stays_light():
    """`import runner` pulls in no engine library, so a script that only reads results runs on a laptop."""
    code = "import sys, runner; print(sorted(m for m in ('torch', 'transformers', 'vllm', 'ray') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_load_run_and_read_back_a_recipe(write_recipe, base_recipe, tmp_path):
    d = {**base_recipe, "model": {"id": "none"}, "engine": {"kind": "fake", "reply": "{{ answers[0] }}"}}
    lr = runner.load_recipe(write_recipe(d), overrides=["sampling.max_tokens=8"])
    assert lr.recipe.name == "t" and lr.recipe.sampling.max_tokens == 8
    res = runner.run_recipe(lr, out=tmp_path / "out", limit=5, isolated=False)
    assert res.status == "ok" and res.n_samples == 5 and res.scores["exact_match"] == 1.0  # the fake echoes the gold
    assert (tmp_path / "out" / "t" / "report.md").is_file()
    [back] = runner.read_results(tmp_path / "out")
    assert back.name == "t" and back.run_key == res.run_key and back.scores == res.scores


def test_a_study_file_is_many_recipes_and_not_one(write_recipe, base_recipe):
    study = {"base": str(write_recipe(base_recipe)), "name": "s", "matrix": {"sampling.max_tokens": [4, 8]}}
    path = write_recipe(study, "study.yaml")
    cells = runner.load_recipes(path)
    assert sorted(c.recipe.sampling.max_tokens for c in cells) == [4, 8] and len({c.recipe.name for c in cells}) == 2
    with pytest.raises(RunnerError) as e:
        runner.load_recipe(path)
    assert e.value.message == "is a study of 2 experiments (s-max_tokens-4, s-max_tokens-8); load it with load_recipes"


def test_bad_input_raises_before_anything_runs(tmp_path):
    with pytest.raises(RunnerError) as e:
        runner.run_recipe(tmp_path / "missing.yaml", out=tmp_path / "out")
    assert (
        e.value.message == "file not found"
        and e.value.file.endswith("missing.yaml")
        and not (tmp_path / "out").exists()
    )
