"""`import runner`: the small public API (load a recipe, run it, read results) as a user's script
calls it."""

import subprocess
import sys

import pytest

import runner
from runner.base.errors import RunnerError


def test_import_runner_stays_light():
    """`import runner` pulls in no engine library, so a script that only reads results runs on a
    laptop."""
    code = (
        "import sys, runner; print(sorted(m for m in ('torch', 'transformers', 'vllm', 'ray') "
        "if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_load_run_and_read_back_a_recipe(write_recipe, base_recipe, tmp_path):
    d = {
        **base_recipe,
        "model": {"id": "none"},
        "engine": {"kind": "fake", "reply": "{{ answers[0] }}"},
    }
    lr = runner.load_recipe(write_recipe(d), overrides=["sampling.max_tokens=8"])
    assert lr.recipe.name == "t" and lr.recipe.sampling.max_tokens == 8
    res = runner.run_recipe(lr, out=tmp_path / "out", limit=5, isolated=False)
    # the fake echoes the gold
    assert res.status == "ok" and res.n_samples == 5 and res.scores["exact_match"] == 1.0
    assert (tmp_path / "out" / "t" / "report.md").is_file()
    [back] = runner.read_results(tmp_path / "out")
    assert back.name == "t" and back.run_key == res.run_key and back.scores == res.scores


def test_a_study_file_is_many_recipes_and_not_one(write_recipe, base_recipe):
    study = {
        "base": str(write_recipe(base_recipe)),
        "name": "s",
        "matrix": {"sampling.max_tokens": [4, 8]},
    }
    path = write_recipe(study, "study.yaml")
    cells = runner.load_recipes(path)
    assert (
        sorted(c.recipe.sampling.max_tokens for c in cells) == [4, 8]
        and len({c.recipe.name for c in cells}) == 2
    )
    with pytest.raises(RunnerError) as e:
        runner.load_recipe(path)
    assert (
        e.value.message
        == "is a study of 2 experiments (s-max_tokens-4, s-max_tokens-8); load it with load_recipes"
    )


def test_bad_input_raises_before_anything_runs(tmp_path):
    with pytest.raises(RunnerError) as e:
        runner.run_recipe(tmp_path / "missing.yaml", out=tmp_path / "out")
    assert (
        e.value.message == "file not found"
        and e.value.file.endswith("missing.yaml")
        and not (tmp_path / "out").exists()
    )


# --------------------------------------------------------------------------- run_recipe goes
# through the orchestrator


def _fake_recipe(write_recipe, base_recipe):
    d = {
        **base_recipe,
        "model": {"id": "none"},
        "engine": {"kind": "fake", "reply": "{{ answers[0] }}"},
    }
    return runner.load_recipe(write_recipe(d))


def test_another_runs_results_are_set_aside_not_overwritten(write_recipe, base_recipe, tmp_path):
    lr, out = _fake_recipe(write_recipe, base_recipe), tmp_path / "out"
    first = runner.run_recipe(lr, out=out, limit=3, isolated=False)
    old = (out / "t" / "results.json").read_text()
    second = runner.run_recipe(lr, out=out, limit=5, isolated=False)  # another run key: another run
    assert first.run_key != second.run_key and second.n_samples == 5
    [kept] = (out / "t" / "replaced").iterdir()
    assert (kept / "results.json").read_text() == old and kept.name.endswith(first.run_key)
    assert runner.read_results(out)[0].run_key == second.run_key


def test_an_unchanged_complete_run_is_skipped_and_its_stored_result_returned(
    write_recipe, base_recipe, tmp_path, caplog
):
    lr, out = _fake_recipe(write_recipe, base_recipe), tmp_path / "out"
    first = runner.run_recipe(lr, out=out, limit=3, isolated=False)
    results = out / "t" / "results.json"
    before = results.stat().st_mtime_ns
    with caplog.at_level("INFO", logger="runner"):
        again = runner.run_recipe(lr, out=out, limit=3, isolated=False)
    assert again.finished_at == first.finished_at and again.run_key == first.run_key
    assert results.stat().st_mtime_ns == before  # nothing re-run, nothing rewritten
    assert (
        f"skip t: unchanged since {first.finished_at} (results complete; --force reruns)"
        in caplog.messages
    )
    forced = runner.run_recipe(lr, out=out, limit=3, isolated=False, force=True)
    # --force: old set aside
    assert forced.run_key == first.run_key and list((out / "t" / "replaced").iterdir())


@pytest.mark.parametrize("limit", [0, -1, True, 2.5])
def test_limit_must_be_none_or_a_positive_whole_number(write_recipe, base_recipe, tmp_path, limit):
    lr = _fake_recipe(write_recipe, base_recipe)
    with pytest.raises(RunnerError) as e:
        runner.run_recipe(lr, out=tmp_path / "out", limit=limit, isolated=False)
    assert (
        e.value.field == "limit"
        and f"is {limit!r}; give None (every example) or a positive" in e.value.message
    )
    assert not (tmp_path / "out").exists()


def test_a_dict_is_not_a_recipe(base_recipe, tmp_path):
    with pytest.raises(RunnerError) as e:
        runner.run_recipe(base_recipe, out=tmp_path / "out", isolated=False)
    assert e.value.field == "recipe" and e.value.message == "is a dict, not a recipe"
    assert "runner.load_recipe(path)" in e.value.hint and not (tmp_path / "out").exists()


def test_a_string_of_overrides_and_an_out_that_is_no_path_are_refused(
    write_recipe, base_recipe, tmp_path, monkeypatch
):
    path = write_recipe({**base_recipe, "name": "t"})
    with pytest.raises(RunnerError) as e:
        runner.load_recipe(path, "sampling.max_tokens=4")
    assert (e.value.field, e.value.message, e.value.hint) == (
        "overrides",
        "is the string 'sampling.max_tokens=4'; give a list of `key.path=value` items",
        "overrides=['sampling.max_tokens=4']",
    )
    assert runner.load_recipe(path, ["sampling.max_tokens=4"]).recipe.sampling.max_tokens == 4
    monkeypatch.chdir(tmp_path)
    with pytest.raises(RunnerError) as e:
        runner.run_recipe(path, 123, isolated=False)
    assert (e.value.field, e.value.message) == (
        "out",
        "is 123, not a path; give the reports' folder",
    )
    assert not (tmp_path / "123").exists()


def test_read_results_of_a_folder_that_is_not_there_is_an_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(RunnerError) as e:
        runner.read_results("no-such-folder")
    assert e.value.file == "no-such-folder" and e.value.message.startswith("does not exist")
    (tmp_path / "empty").mkdir()
    assert runner.read_results("empty") == []  # a folder with no results yet holds none


def test_a_folder_another_writer_holds_is_refused(write_recipe, base_recipe, tmp_path):
    from filelock import FileLock

    from runner.folder import RunFolder

    lr, out = _fake_recipe(write_recipe, base_recipe), tmp_path / "out"
    folder = RunFolder.of(out, "t")
    folder.root.mkdir(parents=True)
    with FileLock(str(folder.lock), timeout=0):
        with pytest.raises(RunnerError) as e:
            runner.run_recipe(lr, out=out, limit=3, isolated=False)
    assert (
        e.value.file == str(folder.root)
        and "is writing this recipe's folder right now" in e.value.message
    )
    assert not folder.results.exists()
    # the lock released: it runs
    assert runner.run_recipe(lr, out=out, limit=3, isolated=False).status == "ok"


def test_the_knobs_of_stored_results_can_be_edited_as_the_results_can():
    """A Knob is a results model like the others (mutable), not a frozen configuration model."""
    from runner.base.types import Knob

    k = Knob(name="x", requested=1, effective=1, status="applied")
    k.evidence = "set by a script"
    assert k.evidence == "set by a script"


def test_a_runs_span_covers_its_whole_wall_time_to_the_millisecond(
    write_recipe, base_recipe, tmp_path
):
    """started_at and finished_at both carry milliseconds: a study's running time (the union of its
    cells' spans) is not cut by up to a second a cell, below the engine starts it holds."""
    import datetime as dt

    res = runner.run_recipe(_fake_recipe(write_recipe, base_recipe), out=tmp_path / "o", limit=2)
    span = dt.datetime.fromisoformat(res.finished_at) - dt.datetime.fromisoformat(res.started_at)
    assert res.finished_at[19] == "." and res.started_at[19] == "."
    assert span.total_seconds() >= res.timings.total_s - 0.002


def test_a_failed_recipe_is_logged_as_a_warning(
    write_recipe, base_recipe, tmp_path, caplog, monkeypatch
):
    """A script that logs at WARNING (the usual level) heard nothing of a failed recipe."""
    from runner.engines.fake import FakeEngine

    def boom(self, *a, **kw):
        raise RuntimeError("the engine fell over")

    monkeypatch.setattr(FakeEngine, "generate", boom)
    d = {**base_recipe, "model": {"id": "none"}, "engine": {"kind": "fake", "reply": "x"}}
    lr = runner.load_recipe(write_recipe(d))
    with caplog.at_level("WARNING", logger="runner"):
        res = runner.run_recipe(lr, tmp_path / "out", limit=2, isolated=False)
    assert res.status == "failed"
    assert any(m.startswith("FAILED t: ") for m in caplog.messages)
