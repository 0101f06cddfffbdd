"""`runner plan` on the CPU, and predictions next to measurements in reports."""

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from runner.cli import cli
from runner.plan.plan import predicted_vs_measured, roofline
from runner.results import Memory, RunResult, Timings, Tokens
from tests.cli_output import user_error
from tests.test_planning_plan import CONTRACT  # the documented `--json` keys
from tests.wired import a_recipe

SHARED = Path(__file__).resolve().parents[2] / "shared"


VLLM = {"kind": "vllm"}  # planned whole: the other engines get what applies to them


def test_plan_json_keeps_the_contract(write_recipe, base_recipe):
    pytest.importorskip("transformers")
    recipe = write_recipe({**base_recipe, "engine": VLLM})
    r = CliRunner().invoke(cli, ["plan", str(recipe), "--gpu", "H200", "--json"])
    assert r.exit_code == 0, r.output
    [p] = json.loads(r.output)["recipes"]
    assert CONTRACT <= set(p) and p["name"] == "t" and p["gpu"] == "H200" and p["block_size"] == 16
    assert p["prompt_tokens"] > 36 * 20 and p["fits"] is True


def test_plan_markdown_and_unknown_gpu(write_recipe, base_recipe):
    pytest.importorskip("transformers")
    path = str(write_recipe({**base_recipe, "engine": VLLM}))
    r = CliRunner().invoke(cli, ["plan", path, "--gpu", "L4"])
    assert r.exit_code == 0 and r.output.startswith("# Plan (L4") and "| t " in r.output
    r = CliRunner().invoke(cli, ["plan", path, "--gpu", "TPU9"])
    known = "H100 SXM, H200, A100-80G, L40S, L4, RTX 4090, or cpu"
    assert user_error(r) == f"Error: --gpu: unknown GPU 'TPU9'; known: {known}\n"


@pytest.mark.slow
@pytest.mark.skipif(not (SHARED / "data").exists(), reason="../shared absent")
def test_plan_counts_the_context_first_jsquad_cache_hits_exactly():
    """The H200 measured 538,736 (question first) and 999,824 (context first) cached prompt
    tokens."""
    pytest.importorskip("transformers")
    root = Path(__file__).resolve().parents[1]
    args = [
        "plan",
        str(root / "recipes" / "jsquad-study.yaml"),
        "--gpu",
        "H200",
        "--json",
        "--only",
        "jsquad-vllm-oneshot-cache*",
        "--set",
        f"dataset.path={SHARED / 'data/jsquad/valid-v1.3.json'}",
        "--model-path",
        f"Qwen/Qwen2.5-7B-Instruct={SHARED / 'models/qwen2.5-7b-instruct'}",
    ]
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 0, r.output
    got = {p["name"]: p["cached_prompt_tokens"] for p in json.loads(r.output)["recipes"]}
    assert (
        got["jsquad-vllm-oneshot-cache"] == 538_736
        and got["jsquad-vllm-oneshot-cache-ctxfirst"] == 999_824
    )


def _run(**plan):
    return RunResult(
        name="r",
        recipe=a_recipe("r"),
        status="ok",
        plan={"gpu": "H200", **plan},
        tokens=Tokens(prompt=1000, output=10, cached=500),
        timings=Timings(generate_s=10.0),
        memory=Memory(weights_gib=10.0, kv_cache_tokens=1000),
    )


def test_predictions_within_tolerance_show_no_warning():
    md = "\n".join(
        predicted_vs_measured(
            _run(
                cached_prompt_tokens=501,
                weights_gib=10.4,
                kv_capacity_tokens=1090,
                floor_s=5.0,
                bound="compute",
            )
        )
    )
    assert (
        re.search(r"\| cached prompt tokens +\| 501 ", md)
        and "+0.20%" in md
        and "roofline 50%" in md
    )
    assert "Warning" not in md
    assert roofline(_run(floor_s=5.0)) == 0.5


def test_predictions_beyond_tolerance_and_a_floor_above_the_measurement_are_warned():
    md = "\n".join(
        predicted_vs_measured(
            _run(
                cached_prompt_tokens=520,
                weights_gib=11.0,
                kv_capacity_tokens=1200,
                floor_s=12.0,
                bound="memory",
            )
        )
    )
    assert "predicted cached prompt tokens off by +4.0% (tolerance ±0.5%)" in md
    assert "predicted weights on the GPU (GiB) off by +10.0% (tolerance ±5.0%)" in md
    assert "predicted KV capacity (tokens) off by +20.0% (tolerance ±10.0%)" in md
    assert "the predicted floor is above the measured generation time" in md


def test_plan_without_a_gpu_plans_for_the_h200_and_says_so(write_recipe, base_recipe, monkeypatch):
    pytest.importorskip("transformers")
    import runner.plan.plan as rp

    monkeypatch.setattr(rp, "gpu_from_nvml", lambda: None)  # a laptop: NVML finds no GPU
    r = CliRunner().invoke(
        cli, ["plan", str(write_recipe({**base_recipe, "engine": VLLM})), "--json"]
    )
    assert r.exit_code == 0, r.output
    assert r.stderr == "no GPU on this machine: planning for the H200 (--gpu NAME picks another)\n"
    assert json.loads(r.stdout)["recipes"][0]["gpu"] == "H200"


def test_go_makes_each_plan_in_the_background_before_its_job_and_none_for_a_skipped_recipe(
    write_recipe, base_recipe, tmp_path, monkeypatch
):
    """On a GPU `runner go` sets the plan beside the measurement; plans are made in one background
    thread in run order (the next job's while the current one runs), and a recipe skipped as
    unchanged gets none."""
    pytest.importorskip("transformers")
    import threading

    import runner.plan.plan as plan
    import runner.wings as wings
    from runner.plan.floor import find_gpu

    monkeypatch.setattr(plan, "gpu_from_nvml", lambda: find_gpu("H200"))
    made, real = [], wings.plan_for
    monkeypatch.setattr(
        wings,
        "plan_for",
        lambda u: made.append((u.name, threading.current_thread().name)) or real(u),
    )
    for name, reply in (("a", "x"), ("b", "y")):  # two engines: two jobs
        write_recipe(
            {**base_recipe, "name": name, "engine": {"kind": "fake", "reply": reply}},
            f"{name}.yaml",
        )
    out, args = tmp_path / "out", ["--out", str(tmp_path / "out"), "--no-progress", "--in-process"]
    r = CliRunner().invoke(cli, ["go", str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml"), *args])
    assert r.exit_code == 0, r.output
    assert [m[0] for m in made] == ["a", "b"] and all(m[1].startswith("runner-plan") for m in made)
    for name in "ab":
        res = RunResult.model_validate_json((out / name / "results.json").read_bytes())
        # the fake engine runs on the CPU: its plan is the prompt tokens, context and weights, not
        # the H200's
        assert res.plan["gpu"] is None and res.plan["prompt_tokens"] == res.tokens.prompt > 0
        assert res.plan["kv_capacity_tokens"] is None and res.plan["floor_s"] is None
        assert "(`runner plan`, on the CPU)" in (out / name / "report.md").read_text()
    r = CliRunner().invoke(cli, ["go", str(tmp_path / "a.yaml"), *args])
    assert r.exit_code == 0 and "skip a: unchanged" in r.output and len(made) == 2


def test_a_fake_engine_recipe_is_not_planned_and_says_why(write_recipe, base_recipe, tmp_path):
    pytest.importorskip("transformers")
    fake = {**base_recipe, "name": "f", "model": {"id": "none"}, "engine": {"kind": "fake"}}
    path = write_recipe(fake)
    r = CliRunner().invoke(cli, ["plan", str(path), "--gpu", "cpu"])
    assert user_error(r) == (
        "Error: {tmp}/recipe.yaml: nothing to plan: the fake engine makes its replies up; it has "
        "no model to plan\n  hint: plan the recipes of a real engine (vllm, transformers)\n"
    )
    real = tmp_path / "real.yaml"
    real.write_text(json.dumps(base_recipe))
    r = CliRunner().invoke(cli, ["plan", str(path), str(real), "--gpu", "cpu", "--json"])
    assert r.exit_code == 0, r.output
    assert r.stderr == (
        "not planned: f (the fake engine makes its replies up; it has no model to plan)\n"
    )
    assert [p["name"] for p in json.loads(r.stdout)["recipes"]] == ["t"]
