"""The embedded default through the real CLI, in an isolated child process."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from runner.cli import cli

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow  # the real demo model in a real child process: ~15 s


@pytest.fixture(scope="module")
def demo_out(tmp_path_factory):
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("reports")
    res = CliRunner().invoke(
        cli, ["go", str(ROOT / "recipes" / "demo.yaml"), "--out", str(out), "--no-progress"]
    )
    assert res.exit_code == 0, res.output
    return out, res.output


def test_demo_writes_the_contract_files(demo_out):
    out, output = demo_out
    d = out / "demo"
    results = json.loads((d / "results.json").read_text())
    assert results["status"] == "ok" and results["error"] is None
    assert results["n_samples"] == 36
    for k in ("load_s", "generate_s", "total_s"):
        assert results["timings"][k] > 0
    assert results["tokens"]["prompt"] > 36 * 50 and results["tokens"]["output"] > 0
    tp = results["throughput"]
    assert tp["requests_per_s"] == pytest.approx(36 / results["timings"]["generate_s"], rel=1e-6)
    assert set(results["scores"]) == {"exact_match", "char_f1"}
    assert all(0 <= v <= 1 for v in results["scores"].values())
    assert results["scores_meaningful"] is False
    lines = [json.loads(x) for x in (d / "samples.jsonl").read_text().splitlines()]
    assert len(lines) == 36
    for row in lines:
        assert {
            "id",
            "prompt",
            "output",
            "answers",
            "exact_match",
            "char_f1",
            "prompt_tokens",
            "output_tokens",
        } <= set(row)
    assert sum(r["prompt_tokens"] for r in lines) == results["tokens"]["prompt"]
    assert lines[0]["id"] == "demo-0001" and lines[0]["answers"] == ["8月15日"]
    assert "Contextを参考にして、問題に回答してください。" in lines[0]["prompt"]
    report = (d / "report.md").read_text()
    assert "- Scores: not meaningful (random weights)" in report and "Smoke-test model" in report
    assert "## Knobs: requested and effective" in report and "## Resolved recipe" in report
    summary = (out / "summary.md").read_text()
    assert (
        "| demo" in summary
        and "Scores are left out: every recipe here ran with random weights" in summary
    )
    assert "report:" in output and "ok demo: 36 examples" in output


def test_report_rebuilds_from_results(demo_out):
    out, _ = demo_out
    (out / "summary.md").unlink()
    (out / "demo" / "report.md").unlink()
    res = CliRunner().invoke(cli, ["report", str(out)])
    assert res.exit_code == 0, res.output
    assert (out / "summary.md").exists() and (out / "demo" / "report.md").exists()
    assert "| demo" in (out / "summary.md").read_text()


def test_trust_remote_code_is_off_by_default_and_reported_when_on(tmp_path):
    pytest.importorskip("torch")
    from runner import load_recipe

    assert load_recipe(ROOT / "recipes" / "demo.yaml").recipe.model.trust_remote_code is False
    res = CliRunner().invoke(
        cli,
        [
            "go",
            str(ROOT / "recipes" / "demo.yaml"),
            "--out",
            str(tmp_path),
            "--no-progress",
            "--in-process",
            "--set",
            "model.trust_remote_code=true",
            "--set",
            "dataset.limit=2",
        ],
    )
    assert res.exit_code == 0, res.output
    r = json.loads((tmp_path / "demo" / "results.json").read_text())
    assert any("trust_remote_code was ON" in n for n in r["notes"])
    assert "trust_remote_code was ON" in (tmp_path / "demo" / "report.md").read_text()
