"""A user's first hour (issue 28): what a new user meets, each with the exact message or behaviour."""

from __future__ import annotations

from click.testing import CliRunner

from runner.cli import cli
from tests.cli_output import user_error


def _fake(base_recipe, name="f"):
    return {
        **base_recipe,
        "name": name,
        "model": {"id": "none"},
        "engine": {"kind": "fake", "reply": "{{ answers[0] }}"},
    }


def _go(*args):
    return CliRunner().invoke(cli, ["go", *map(str, args), "--no-progress", "--in-process"])


def test_a_folder_where_results_json_belongs_is_refused_before_anything_runs(tmp_path, write_recipe, base_recipe):
    path, out = write_recipe(_fake(base_recipe)), tmp_path / "out"
    (out / "f" / "results.json").mkdir(parents=True)
    assert user_error(_go(path, "--out", out, "--limit", "2")) == (
        "Error: {tmp}/out/f/results.json: is not a file\n"
        "  hint: remove it (rm -r '{tmp}/out/f/results.json') and rerun; the run writes a file there\n"
    )


def test_a_skipped_run_writes_its_deleted_report_again(tmp_path, write_recipe, base_recipe):
    path, out = write_recipe(_fake(base_recipe)), tmp_path / "out"
    assert _go(path, "--out", out, "--limit", "2").exit_code == 0
    (out / "f" / "report.md").unlink()
    r = _go(path, "--out", out, "--limit", "2")
    assert "skip f: unchanged since" in r.output and (out / "f" / "report.md").read_text().startswith("# f\n")
