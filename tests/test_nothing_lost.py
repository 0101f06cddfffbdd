"""Nothing lost, nothing mis-scored (issue 29): each case with the exact message or behaviour."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from runner.cli import cli
from tests.cli_output import user_error

CSV = "id,question,context,answer\n1,Q1,C1,1945\n2,Q2,C2,NA\n3,Q3,C3,\n"


def _csv_recipe(tmp_path, base_recipe, **kw):
    (tmp_path / "d.csv").write_text(CSV, encoding="utf-8")
    fields = {"id": "id", "question": "question", "context": "context", "answers": "answer"}
    return {
        **base_recipe,
        "name": "c",
        "model": {"id": "none"},
        "engine": {"kind": "fake", "reply": "{{ answers[0] if answers else 'x' }}"},
        "dataset": {"format": "csv", "path": str(tmp_path / "d.csv"), "fields": fields},
        "metrics": ["exact_match"],
        **kw,
    }


def _go(*args):
    return CliRunner().invoke(cli, ["go", *map(str, args), "--no-progress", "--in-process"])


def test_csv_numbers_and_na_words_score_as_written_and_examples_without_gold_are_named(
    tmp_path, write_recipe, base_recipe
):
    path, out = write_recipe(_csv_recipe(tmp_path, base_recipe)), tmp_path / "out"
    r = CliRunner().invoke(cli, ["check", str(path), "--no-tokens"])
    assert (
        r.exit_code == 0
        and "  note: 1 of 3 examples have no gold answers: they are left out of every score\n" in r.output
    )
    assert _go(path, "--out", out).exit_code == 0
    res = json.loads((out / "c" / "results.json").read_text())
    assert res["scores"] == {"exact_match": 1.0} and res["n_scored"] == 2  # "1945" and "NA" both right
    report = (out / "c" / "report.md").read_text()
    note = "1 of 3 examples have no gold answers: they are left out of every score (scores are over the other 2)."
    assert f"> **Note**: {note}" in report


def test_truncate_with_max_tokens_over_the_context_is_refused(tmp_path, write_recipe, base_recipe):
    recipe = {**base_recipe, "sampling": {"temperature": 0, "max_tokens": 4096}}
    path = write_recipe({**recipe, "prompt": {**base_recipe["prompt"], "truncate": True}})
    expected = (
        "Error: {tmp}/recipe.yaml: sampling.max_tokens: sampling.max_tokens 4,096 leaves no room for a prompt in the"
        " model's context of 2,048 tokens, so prompt.truncate would cut every prompt to nothing\n"
        "  hint: lower sampling.max_tokens below 2,048 (the answer and the prompt share the context)\n"
    )
    assert user_error(CliRunner().invoke(cli, ["check", str(path), "--no-tokens"])) == expected
    assert user_error(_go(path, "--out", tmp_path / "out")) == expected


def _fake(base_recipe, name="f"):
    return {
        **base_recipe,
        "name": name,
        "model": {"id": "none"},
        "engine": {"kind": "fake", "reply": "{{ answers[0] }}"},
    }


def test_a_quick_run_in_between_does_not_cost_the_full_run_its_results(tmp_path, write_recipe, base_recipe):
    path, out = write_recipe(_fake(base_recipe)), tmp_path / "out"
    assert _go(path, "--out", out).exit_code == 0
    full = (out / "f" / "results.json").read_bytes()
    r = _go(path, "--out", out, "--limit", "2")
    assert r.exit_code == 0 and "kept f's earlier results in " in r.output
    r = _go(path, "--out", out)
    assert "took f's results of this very run back from " in r.output and "skip f: unchanged since" in r.output
    assert (out / "f" / "results.json").read_bytes() == full and len(list((out / "f" / "replaced").iterdir())) == 1


def test_samples_deleted_or_cut_short_after_a_complete_run_are_run_again(tmp_path, write_recipe, base_recipe):
    path, out = write_recipe(_fake(base_recipe)), tmp_path / "out"
    assert _go(path, "--out", out).exit_code == 0
    samples = out / "f" / "samples.jsonl"
    samples.write_text("".join(samples.read_text().splitlines(keepends=True)[:2]))
    r = CliRunner().invoke(cli, ["report", str(out)])
    assert (
        "f: its samples.jsonl holds 2 of 36 samples (deleted or cut short since the run): `runner go` runs it again"
        in r.output
    )
    r = _go(path, "--out", out)
    assert "rerun f: its results were complete but its samples.jsonl holds 2 of 36 samples (kept in " in r.output
    assert len(samples.read_text().splitlines()) == 36 and "skip f" not in r.output
    samples.unlink()
    assert "rerun f: its results were complete but its samples.jsonl is gone" in _go(path, "--out", out).output


def test_a_study_interrupted_in_its_second_cell_reports_the_first(tmp_path, write_recipe, base_recipe, monkeypatch):
    from runner.engines.fake import FakeEngine

    calls, real = [], FakeEngine.generate

    def generate(self, *a, **kw):
        calls.append(1)
        if len(calls) == 2:  # the second cell, on the same engine (one job)
            raise KeyboardInterrupt
        return real(self, *a, **kw)

    monkeypatch.setattr(FakeEngine, "generate", generate)
    path = write_recipe({**_fake(base_recipe, "s"), "matrix": {"sampling.max_tokens": {"a": 16, "b": 8}}})
    out = tmp_path / "out"
    r = _go(path, "--out", out)
    assert r.exit_code == 130 and "ok s-a: 36 examples" in r.output
    assert "interrupted: 1 of 2 recipes finished;" in r.stderr
    assert (out / "s-a" / "report.md").is_file() and (out / "summary.md").is_file()
    assert "s-a" in (out / "s" / "summary.md").read_text()


def test_a_recipe_with_a_timeout_does_not_share_an_engine_with_one_without(write_recipe, base_recipe, tmp_path):
    """A shared job's timeout is the sum of its recipes'; one recipe without would have left the other unbounded."""
    from types import SimpleNamespace

    from runner.cli.loading import load_all
    from runner.run.job import Job, RunOptions, group_by_engine

    a = write_recipe({**_fake(base_recipe, "a"), "timeout_s": 60}, "a.yaml")
    b = write_recipe(_fake(base_recipe, "b"), "b.yaml")
    units = [SimpleNamespace(loaded=lr, name=lr.recipe.name) for lr in load_all((str(a), str(b)), (), (), None)]
    assert [[u.name for u in g] for g in group_by_engine(units)] == [["a"], ["b"]]
    [both] = group_by_engine(units, call_timeout_s=30)
    assert Job(both, RunOptions(out=tmp_path, timeout_s=30)).timeout_s() == 90.0
    assert Job(tuple(units[:1]), RunOptions(out=tmp_path)).timeout_s() == 60.0


def test_links_planted_inside_out_are_never_written_through(tmp_path, write_recipe, base_recipe):
    path, out, outside = write_recipe(_fake(base_recipe)), tmp_path / "out", tmp_path / "outside.txt"
    outside.write_text("keep me")
    (out / "f").mkdir(parents=True)
    (out / "f" / "engine.log").symlink_to(outside)
    assert user_error(_go(path, "--out", out)) == (
        "Error: {tmp}/out/f/engine.log: is a symbolic link (to {tmp}/outside.txt): the run would write through it\n"
        "  hint: remove the link (rm '{tmp}/out/f/engine.log') and rerun; the run writes its own file there\n"
    )
    (out / "f" / "engine.log").unlink()
    (out / "time.png").symlink_to(outside)  # a chart: replaced by the run's own file, not written through
    assert _go(path, "--out", out).exit_code == 0
    assert outside.read_text() == "keep me" and not (out / "time.png").is_symlink()
    (out / "time.png").unlink()
    (out / "time.png").symlink_to(outside)
    assert CliRunner().invoke(cli, ["report", str(out)]).exit_code == 0
    assert outside.read_text() == "keep me" and not (out / "time.png").is_symlink()


def test_a_large_study_raises_the_open_files_limit_for_its_locks(monkeypatch):
    import resource

    from runner.cli import go

    set_to = []
    monkeypatch.setattr(resource, "getrlimit", lambda _: (256, 4096))
    monkeypatch.setattr(resource, "setrlimit", lambda _, v: set_to.append(v))
    go._room_for_locks(1000)
    assert set_to == [(1256, 4096)]
    monkeypatch.setattr(resource, "getrlimit", lambda _: (256, 512))
    with pytest.raises(Exception, match="1000 recipes hold 1000 lock files open, and this shell allows 512"):
        go._room_for_locks(1000)
