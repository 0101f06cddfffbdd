"""GPU tests: run on the GPU host with `pytest -m gpu` (vLLM installed). Never skipped there."""

import json
import os
from pathlib import Path

import pytest

from tests.gpu_helpers import QWEN, recipe_yaml, tiny_qwen

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    if not QWEN.exists():
        pytest.fail("../shared/models/qwen2.5-7b-instruct is needed for GPU tests")
    return tiny_qwen(tmp_path_factory.mktemp("tiny-qwen"))


def _messages():
    from runner.inputs.datasets import read_examples
    from runner.inputs.prompts import PromptBuilder
    from runner.recipe import DatasetSpec, PromptSpec

    root = Path(__file__).resolve().parents[1]
    exs = list(
        read_examples(
            DatasetSpec(format="squad", path=str(root / "runner/demo/demo-ja.json"), limit=5), root
        ).examples
    )
    b = PromptBuilder(PromptSpec(template="jsquad.j2", system_template="jsquad-system.j2"), root)
    return [b.messages(e) for e in exs]


def test_same_prompt_ids_in_vllm_and_transformers(tiny):
    from runner.base.types import ModelSpec, Sampling
    from runner.engines.transformers import TransformersSpec
    from runner.engines.vllm import VLLMSpec

    model = ModelSpec(id=str(tiny), load_format="dummy", dtype="bfloat16")
    msgs = _messages()
    hf = TransformersSpec(kind="transformers", device="cuda").build(model, None)
    hf_ids = hf.encode(msgs)[1]
    hf_text = [
        hf.tokenizer.apply_chat_template(m, add_generation_prompt=True, tokenize=False)
        for m in msgs
    ]
    hf.close()
    eng = VLLMSpec(
        kind="vllm", enforce_eager=True, gpu_memory_utilization=0.3, max_model_len=2048
    ).build(model, None)
    try:
        v_ids = eng.encode(msgs)[1]
        assert v_ids == hf_ids
        # vLLM tokenizing the chat-rendered text itself gives the same ids (no extra BOS/specials)
        from vllm import SamplingParams

        outs = eng.llm.generate(hf_text, SamplingParams(max_tokens=1), use_tqdm=False)
        assert [list(o.prompt_token_ids) for o in outs] == hf_ids
        outs = eng.llm.generate(
            [{"prompt_token_ids": i} for i in hf_ids], SamplingParams(max_tokens=1), use_tqdm=False
        )
        assert [list(o.prompt_token_ids) for o in outs] == hf_ids
        from runner.base.types import Example, Request

        reqs = [
            Request(ids=i, example=Example(id=str(n), question="")) for n, i in enumerate(v_ids)
        ]
        finished = []
        gens = eng.generate(reqs, Sampling(max_tokens=4, ignore_eos=True), sink=finished.extend)
        assert sorted(i for i, _ in finished) == list(range(len(msgs)))  # each handed over once
        assert [g.output_tokens for g in gens] == [4] * len(msgs)
        assert all(g.ttft_s is not None and g.ttft_s > 0 for g in gens)
        assert eng.info.kv_cache_tokens and eng.info.kv_cache_tokens > 1000
    finally:
        eng.close()


def _job(path, out, **opts):
    from runner import load_recipe
    from runner.run.job import Job, RunOptions, make_unit

    o = RunOptions(out=out, progress=False, **opts)
    return Job(units=(make_unit(load_recipe(path), o),), options=o)


def _group_gone(log: Path) -> bool:
    """The recipe's process group (recorded in its engine.log) has no live member (a zombie that a
    PID 1 which never reaps leaves behind does not count, as in run_isolated itself)."""
    import re

    from runner.base.procs import group_alive

    return not group_alive(int(re.findall(r"process group (\d+)", log.read_text())[-1]))


def test_isolated_run_gives_the_gpu_back(tiny, tmp_path, monkeypatch):
    from importlib.metadata import version

    from runner.base.nvml import used_gib
    from runner.engines.builtin import cache_root
    from runner.engines.vllm.engine import front_modules_file
    from runner.run.isolate import run_isolated

    p = tmp_path / "r.yaml"
    p.write_text(recipe_yaml(tiny, "iso", extra_engine="  enable_prefix_caching: true"))
    # a $RUNNER_CACHE of its own, so nothing is kept to import ahead yet (vLLM's cache stays where
    # it was: its model-info cache spares each start ~20 s)
    monkeypatch.setenv(
        "VLLM_CACHE_ROOT", os.environ.get("VLLM_CACHE_ROOT") or f"{cache_root()}/vllm"
    )
    monkeypatch.setenv("RUNNER_CACHE", str(tmp_path / "cache"))
    # vLLM's version without importing it here: the job's process is forked from this one, and what
    # this process imported the job's LLM() would find imported already
    kept = front_modules_file(version("vllm"))
    assert not kept.exists()
    before = used_gib()
    [res] = run_isolated(_job(p, tmp_path / "out"))
    assert res.status == "ok", res.error
    assert res.n_samples == 20 and res.tokens.output == 160
    assert res.memory.peak_gpu_gib > before + 5  # gpu_memory_utilization 0.3 of ~140 GiB was taken
    assert used_gib() < before + 1.0  # ... and given back
    assert _group_gone(tmp_path / "out" / "iso" / "engine.log")
    knobs = {k.name: k for k in res.knobs}
    assert knobs["enable_prefix_caching"].status == "applied"  # shared system prompt -> cache hits
    assert res.prefix.hit_rate and res.prefix.hit_rate > 0
    assert res.latency.ttft_s.p50 > 0 and res.latency.e2e_s.p99 >= res.latency.e2e_s.p50
    # issue 31: NVML energy over the generation, the start split
    e, start = res.energy, res.timings.start
    if e.measured:
        assert e.gpus == 1 and e.joules > 0 and 20 < e.watts < 1500, e
        assert e.j_per_output_token == pytest.approx(e.joules / 160)
    else:  # 20 tiny prompts can finish inside one tick of the counter (an H100, 2026-12-06: 0 J)
        assert "did not move" in e.why_not and e.joules is None, e
    # eager
    assert start is not None and start.load_s > 0 and start.cold is None and start.compile_s is None
    # issue 41: the job's process loaded vLLM's own tokenizer ahead, under the key LLM() looks up
    assert start.tokenizer_ahead is True
    # ... and the deep copies of it that vLLM's renderer makes inside LLM() (renderer_num_workers
    # 1, + 1)
    assert start.tokenizer_copies_ahead == 2, start
    # ... and the front end's modules, kept from that start: the next job's process imports them
    # ahead, and vLLM still forks its engine process (no CUDA initialized by them). How many the
    # start imports itself depends on what the job's process imported ahead: >100 before the
    # tokenizer copies were made ahead, 44 after (an H100, 2026-12-06, reports/h100-tokcopies)
    assert start.modules_ahead == 0 and start.modules_in_start > 0, start
    assert len(json.loads(kept.read_text())) >= start.modules_in_start
    [again] = run_isolated(_job(p, tmp_path / "again"))
    assert again.status == "ok", again.error
    log = (tmp_path / "again" / "iso" / "engine.log").read_text()
    ahead = again.timings.start
    assert ahead.modules_ahead >= 0.9 * start.modules_in_start, ahead
    assert ahead.modules_in_start < start.modules_in_start / 10, ahead
    assert "must use the `spawn`" not in log, log[-3000:]  # vLLM's words when CUDA is initialized
    assert not any("by spawn" in n for n in again.notes)
    # the first start's FlashInfer autotuning (Hopper and later) found nothing to tune in the tiny
    # model: the second, of the same configuration, starts without it
    first_log = (tmp_path / "out" / "iso" / "engine.log").read_text()
    assert "No FlashInfer autotune cache entries found" in first_log, first_log[-3000:]
    assert start.autotune_skipped is False and ahead.autotune_skipped is True, ahead
    assert "Skipping FlashInfer autotune because it is disabled" in log, log[-3000:]


def test_a_compile_cache_folder_makes_the_second_start_warm(tiny, tmp_path):
    """`engine.compile_cache`: the first start of a compiled engine is cold, a second start of the
    same recipe (a fresh process, another --out) loads the compiled graphs from the folder: warm,
    and compiles for less."""
    from runner.run.isolate import run_isolated

    p = tmp_path / "cc.yaml"
    text = recipe_yaml(tiny, "cc", extra_engine=f"  compile_cache: {tmp_path / 'cache'}")
    p.write_text(text.replace("enforce_eager: true", "enforce_eager: false"))
    [cold] = run_isolated(_job(p, tmp_path / "out1"))
    [warm] = run_isolated(_job(p, tmp_path / "out2"))
    assert cold.status == "ok" and warm.status == "ok", (cold.error, warm.error)
    a, b = cold.timings.start, warm.timings.start
    assert a.cold is True and b.cold is False, (a, b)
    assert b.compile_s < a.compile_s and a.capture_s is not None
    assert a.compile_cache == b.compile_cache == str(tmp_path / "cache")
    assert {k.name: k for k in cold.knobs}["compile_cache"].status == "applied"
    assert (tmp_path / "cache" / "torch_compile_cache").is_dir()


def test_transformers_continuous_batching_on_the_gpu_matches_the_static_engine(tiny):
    """`batching: continuous` on CUDA (paged attention): the static-batch engine's greedy outputs,
    in float32 so that no kernel's rounding decides a tie."""
    from runner.base.types import Example, ModelSpec, Request, Sampling
    from runner.engines.transformers import TransformersSpec

    model = ModelSpec(id=str(tiny), load_format="dummy", dtype="float32")
    msgs, s = _messages(), Sampling(max_tokens=8)
    outs = []
    for extra in ({"batch_size": 4}, {"batching": "continuous"}):
        import torch

        torch.manual_seed(0)  # the same random weights for both engines
        eng = TransformersSpec(kind="transformers", device="cuda", **extra).build(model, None)
        try:
            ids = eng.encode(msgs)[1]
            reqs = [
                Request(ids=i, example=Example(id=str(n), question="")) for n, i in enumerate(ids)
            ]
            outs.append([g.text for g in eng.generate(reqs, s)])
            knobs = {k.name: k for k in eng.info.knobs}
        finally:
            eng.close()
    assert outs[0] == outs[1]
    assert knobs["batching"].status == "applied" and knobs["continuous.num_blocks"].effective


def test_timeout_ends_the_engine_and_records_failure(tiny, tmp_path):
    from runner.base.nvml import used_gib
    from runner.run.isolate import run_isolated

    p = tmp_path / "r.yaml"
    p.write_text(
        recipe_yaml(tiny, "slow", timeout="timeout_s: 8", limit=36).replace(
            "max_tokens: 8", "max_tokens: 1500"
        )
    )
    before = used_gib()
    [res] = run_isolated(_job(p, tmp_path / "out", timeout_s=8))
    assert res.status == "failed" and "timed out" in res.error
    assert used_gib() < before + 1.0
    assert _group_gone(tmp_path / "out" / "slow" / "engine.log")
    assert (tmp_path / "out" / "slow" / "results.json").exists()


def test_an_engine_that_dies_starting_is_reported_with_the_cause_from_its_log(tiny, tmp_path):
    """vLLM's engine process dies (a KV cache larger than the GPU); its front end raises "Engine
    core initialization failed. See root cause above.": the failed result names that cause."""
    from runner.run.isolate import run_isolated

    p = tmp_path / "r.yaml"
    big = "  engine_args: {kv_cache_memory_bytes: 1000000000000}"  # 1 TB
    p.write_text(recipe_yaml(tiny, "dies", extra_engine=big))
    [res] = run_isolated(_job(p, tmp_path / "out"))
    assert res.status == "failed"
    assert "root cause" in res.error and "(the engine's log: " in res.error, res.error
    cause = res.error.split("(the engine's log: ", 1)[1]
    assert "root cause" not in cause and ("Error" in cause or "Exception" in cause), cause
    assert res.hint, res.error


def test_unknown_engine_arg_rejected_before_start(tiny):
    from runner.base.errors import RunnerError
    from runner.base.types import ModelSpec
    from runner.engines.vllm import VLLMSpec

    with pytest.raises(
        RunnerError, match="does not accept no_such_arg; it accepts: .*enable_prefix_caching"
    ):
        VLLMSpec(kind="vllm", engine_args={"no_such_arg": 1}).build(
            ModelSpec(id=str(tiny), load_format="dummy"), None
        )


def test_recipes_sharing_an_engine_start_from_an_empty_prefix_cache(tiny, tmp_path):
    """Two recipes on one engine: the second's cache hits are those it gets alone (the cache is
    reset between them), though it asks for exactly the prompts the first just cached."""
    from runner.run.isolate import run_isolated
    from runner.run.job import Job

    paths = []
    for name in ("first", "second"):
        p = tmp_path / f"{name}.yaml"
        p.write_text(recipe_yaml(tiny, name, extra_engine="  enable_prefix_caching: true"))
        paths.append(p)
    a, b = (_job(p, tmp_path / "group") for p in paths)
    together = run_isolated(Job(units=(a.units[0], b.units[0]), options=a.options))
    alone = run_isolated(_job(paths[1], tmp_path / "alone"))[0]
    assert [r.status for r in together] == ["ok", "ok"] and alone.status == "ok"
    assert together[1].tokens.cached == alone.tokens.cached > 0
    # not everything from the first's cache
    assert together[1].tokens.cached < together[1].tokens.prompt * 0.9
    assert together[1].timings.load_s == 0 and together[1].engine_of == "first"


def test_repeats_on_one_vllm_engine_each_start_from_an_empty_prefix_cache(tiny, tmp_path):
    """repeat: 3 on a real engine: three generations, each with the cache hits of the first (the
    cache is emptied before each, though each asks for the prompts the one before just cached); the
    time is their median."""
    import statistics

    from runner.run.isolate import run_isolated

    p = tmp_path / "rep.yaml"
    p.write_text(
        recipe_yaml(tiny, "rep", extra_engine="  enable_prefix_caching: true") + "repeat: 3\n"
    )
    [res] = run_isolated(_job(p, tmp_path / "out"))
    assert res.status == "ok", res.error
    assert [x.index for x in res.repeats] == [1, 2, 3] and res.repeat_order == "back to back"
    cached = [x.cached_tokens for x in res.repeats]
    assert cached[0] and cached[0] < res.tokens.prompt and len(set(cached)) == 1, cached
    # one engine start, counted by the first
    assert res.repeats[0].load_s and res.repeats[1].load_s is None
    assert res.timings.generate_s == pytest.approx(
        statistics.geometric_mean(x.generate_s for x in res.repeats)
    )
    assert all(x.changed is not None for x in res.repeats[1:])


def test_serving_sweep_against_a_real_vllm_server(tiny, tmp_path):
    """The serving wing against `vllm serve` (the tiny model, random weights) under vLLM's own
    benchmark client: every request of both rates completes, the knobs are read back from the
    server's log, the prefix-cache hits from its /metrics, and the server is gone afterwards."""
    from click.testing import CliRunner

    from runner.base.nvml import used_gib
    from runner.cli import cli
    from runner.results import RunResult

    p = tmp_path / "s.yaml"
    load = "load: {request_rate: [4, inf], num_requests: 16, warmup_requests: 2}\n"
    p.write_text(
        recipe_yaml(tiny, "srv", extra_engine="  enable_prefix_caching: true", limit=16) + load
    )
    before = used_gib()
    r = CliRunner().invoke(cli, ["go", str(p), "--out", str(tmp_path / "out"), "--no-progress"])
    res = RunResult.model_validate_json((tmp_path / "out" / "srv" / "results.json").read_bytes())
    assert res.status == "ok", (res.error, r.output)
    assert [pt.completed for pt in res.serving.rates] == [16, 16] and res.serving.headline_rate in (
        4,
        float("inf"),
    )
    first = res.serving.rates[0]
    # shared system prompt
    assert first.ttft_ms.p50 > 0 and first.output_tokens == 16 * 8 and first.cached_tokens > 0
    knobs = {k.name: k.status for k in res.knobs}
    assert (
        knobs["enforce_eager"]
        == knobs["max_model_len"]
        == knobs["enable_prefix_caching"]
        == "applied"
    )
    assert knobs["gpu_memory_utilization"] == "applied"
    assert used_gib() < before + 1.0  # the server's GPU memory is back


def test_profile_true_on_vllm_sorts_the_gpu_kernels_and_keeps_the_workers_trace(tiny, tmp_path):
    """`profile: true` on vLLM (issue 41): its profiler set up at construction, the profiled
    windows' CUDA kernels by class, the GPU idle time, the trace kept in the run folder."""
    from runner.run.isolate import run_isolated

    p = tmp_path / "prof.yaml"
    p.write_text(recipe_yaml(tiny, "prof", limit=8) + "profile: true\n")
    [res] = run_isolated(_job(p, tmp_path / "out"))
    assert res.status == "ok", res.error
    prof = res.profile
    assert prof is not None and prof.examples == 8, prof
    assert prof.full.device == "cuda" and prof.full.busy_s > 0 and prof.full.idle_s is not None
    assert prof.full.classes.get("gemm", 0) > 0 and prof.full.classes.get("attention", 0) > 0
    assert prof.traces and all((tmp_path / "out" / "prof" / t).is_file() for t in prof.traces)
    assert res.n_samples == 8 and res.tokens.output == 64  # the measured run is the recipe's own
    # vLLM emptied its prefix cache before each window (else the repeat's prompts were cached)
    assert prof.cache_emptied is True
