"""Faults: failing recipes, interruption and resume, timeouts, atomic files."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from runner.cli import cli

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "recipes" / "demo.yaml"
pytestmark = pytest.mark.skipif(pytest.importorskip("torch") is None, reason="needs torch")


def _ps_args() -> str:
    return subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True).stdout


def test_failing_recipe_does_not_lose_the_others(tmp_path):
    not_a_model = tmp_path / "not-a-model"          # exists, so it passes the checks, but holds no model
    not_a_model.mkdir()
    bad = tmp_path / "bad.yaml"
    bad.write_text(DEMO.read_text().replace("name: demo", "name: bad-model")
                   .replace("id: builtin:demo", f"id: {not_a_model}")
                   .replace("../runner/demo/demo-ja.json", str(ROOT / "runner/demo/demo-ja.json")))
    out = tmp_path / "out"
    res = CliRunner().invoke(cli, ["go", str(bad), str(DEMO), "--out", str(out), "--no-progress",
                                   "--set", "dataset.limit=4"])
    assert res.exit_code == 1, res.output
    failed = json.loads((out / "bad-model" / "results.json").read_text())
    assert failed["status"] == "failed" and "tokenizer" in failed["error"]      # the engine's own error, kept
    ok = json.loads((out / "demo" / "results.json").read_text())
    assert ok["status"] == "ok" and ok["n_samples"] == 4
    summary = (out / "summary.md").read_text()
    assert "## Failures" in summary and "bad-model" in summary and "| demo" in summary
    assert "FAILED bad-model" in res.output and "Traceback" not in res.output
    # where each recipe's engine output goes is said before its engine starts
    assert f"[1/2] bad-model (transformers, {not_a_model})\n  engine output: {out / 'bad-model' / 'engine.log'}\n" \
        in res.stderr
    assert f"  engine output: {out / 'demo' / 'engine.log'}\n" in res.stderr


def test_missing_model_folder_is_bad_input_before_anything_runs(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(DEMO.read_text().replace("id: builtin:demo", "id: ./no-such-model")
                   .replace("../runner/demo/demo-ja.json", str(ROOT / "runner/demo/demo-ja.json")))
    res = CliRunner().invoke(cli, ["go", str(bad), "--out", str(tmp_path / "out")])
    assert res.exit_code == 2
    assert f"model.id: model folder not found: {tmp_path / 'no-such-model'}" in res.output   # relative to the recipe
    assert "--model-path" in res.output and not (tmp_path / "out" / "demo").exists()


def test_killed_midway_then_resumed(tmp_path):
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "runner", "go", str(DEMO), "--out", str(out), "--no-progress",
           "--set", "engine.batch_size=1", "--set", "sampling.max_tokens=48", "--set", "sampling.ignore_eos=true"]
    parent = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    partial = out / "demo" / "samples.partial.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if partial.exists() and len(partial.read_text().splitlines()) >= 4:
            break
        time.sleep(0.02)
    os.kill(parent.pid, signal.SIGKILL)        # the runner itself dies, no cleanup possible
    parent.wait()
    lines = partial.read_text().splitlines()
    assert 4 <= len(lines) < 37
    assert not (out / "demo" / "results.json").exists()     # never a half-written result
    time.sleep(2)                                           # the worker notices its parent is gone
    assert "runner.execution.worker" not in _ps_args()
    done = len(lines) - 1
    res = CliRunner().invoke(cli, ["go", str(DEMO), "--out", str(out), "--no-progress",
                                   "--set", "engine.batch_size=1", "--set", "sampling.max_tokens=48",
                                   "--set", "sampling.ignore_eos=true"])
    assert res.exit_code == 0, res.output
    r = json.loads((out / "demo" / "results.json").read_text())
    assert r["n_samples"] == 36 and r["reused_samples"] >= done
    rows = [json.loads(x) for x in (out / "demo" / "samples.jsonl").read_text().splitlines()]
    assert [x["id"] for x in rows] == [f"demo-{i:04d}" for i in range(1, 37)]
    assert not partial.exists()
    assert "reused from an earlier, interrupted run" in (out / "demo" / "report.md").read_text()
    # unchanged + complete -> skipped; a changed recipe -> rerun
    again = CliRunner().invoke(cli, ["go", str(DEMO), "--out", str(out), "--no-progress",
                                     "--set", "engine.batch_size=1", "--set", "sampling.max_tokens=48",
                                     "--set", "sampling.ignore_eos=true"])
    assert again.exit_code == 0 and "skip demo: unchanged" in again.output


def test_timeout_ends_the_run_and_records_failure(tmp_path):
    out = tmp_path / "out"
    res = CliRunner().invoke(cli, ["go", str(DEMO), "--out", str(out), "--no-progress", "--timeout", "3",
                                   "--set", "engine.batch_size=1", "--set", "sampling.max_tokens=2000",
                                   "--set", "sampling.ignore_eos=true"])
    assert res.exit_code == 1
    r = json.loads((out / "demo" / "results.json").read_text())
    assert r["status"] == "failed" and "timed out after 3 s" in r["error"]
    assert "runner.execution.worker" not in _ps_args()


def test_atomic_write_keeps_the_old_file_on_failure(tmp_path, monkeypatch):
    from runner import files
    p = tmp_path / "results.json"
    files.write_json_atomic(p, {"status": "ok"})

    def boom(*a, **kw):
        raise OSError("disk gone")
    monkeypatch.setattr(files.os, "fsync", boom)
    with pytest.raises(OSError):
        files.write_json_atomic(p, {"status": "half"})
    assert json.loads(p.read_text()) == {"status": "ok"}
    assert [x.name for x in tmp_path.iterdir()] == ["results.json"]     # no temp file left behind


@pytest.mark.parametrize("error, needle", [
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "gpu_memory_utilization"),
    ("ValueError: Free memory on device (10.1/139.8 GiB) is less than desired GPU memory utilization", "cpu_offload_gb"),
    ("OSError: foo is not a valid model identifier listed on 'https://huggingface.co/models'", "--set model.id"),
])
def test_failure_hints(error, needle):
    from runner.execution.run import failure_hint
    assert needle in failure_hint(error)
