"""make_plan: the JSON contract, and that its parts agree with the pieces they come from."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import pydantic
import pytest

from runner.plan.floor import GPU
from runner.plan.memory import Settings, plan_memory
from runner.plan.plan import Prompts, make_plan
from runner.plan.prefix_cache import LayoutInputs, simulate_prefix_cache

CONTRACT = {
    "name",
    "prompt_tokens",
    "cached_prompt_tokens",
    "block_size",
    "weights_gib",
    "kv_bytes_per_token",
    "kv_capacity_tokens",
    "fits",
    "floor_s",
    "layout_advice",
}
QWEN = (
    Path(__file__).resolve().parents[2]
    / "shared"
    / "models"
    / "qwen2.5-7b-instruct"
    / "config.json"
)


@pytest.fixture
def qwen() -> dict:
    if not QWEN.exists():
        pytest.skip(f"shared model config absent: {QWEN}")
    return json.loads(QWEN.read_text())


def one_shot_prompts(n=200, seed=0, context_first=False):
    """A shared 130-token head, then a question and a passage shared by about 4 questions (or the
    reverse)."""
    rng = random.Random(seed)
    head = [rng.randrange(150000) for _ in range(130)]
    passages = [
        [rng.randrange(150000) for _ in range(rng.randrange(80, 200))] for _ in range(n // 4)
    ]
    rows = [
        {
            "question": [rng.randrange(150000) for _ in range(rng.randrange(10, 30))],
            "context": passages[rng.randrange(len(passages))],
        }
        for _ in range(n)
    ]
    order = ("context", "question") if context_first else ("question", "context")
    return head, rows, [head + r[order[0]] + r[order[1]] for r in rows]


def test_plan_contract_and_consistency(qwen):
    head, rows, prompts = one_shot_prompts()
    layout = LayoutInputs(examples=rows, order=["question", "context"], head_ids=head)
    eager = Settings(enforce_eager=True)
    plan = make_plan(Prompts("oneshot", prompts, 16, layout), qwen, "h200", eager)
    d = plan.model_dump()
    assert CONTRACT <= set(d)
    json.dumps(plan.model_dump(mode="json"))  # serializable as is
    hits, needed, _ = simulate_prefix_cache(prompts, 16)
    assert (d["prompt_tokens"], d["cached_prompt_tokens"], d["kv_blocks_needed"]) == (
        sum(map(len, prompts)),
        sum(hits),
        needed,
    )
    assert d["cached_prompt_tokens"] >= 199 * 128  # the head's 8 full blocks, every prompt but one
    assert not d["cache_upper_bound"] and d["cached_prompt_tokens_lru"] is None and d["notes"] == []
    assert d["gpu"] == "H200" and d["fits"] and d["kv_bytes_per_token"] == 57344
    assert d["kv_capacity_tokens"] == plan.memory.kv_capacity_tokens > 2_000_000
    assert d["batch"] == 200 and d["bound"] == "compute" and d["floor_s"] == plan.floor.floor_s > 0
    assert d["prompt_tokens_per_example"]["max"] == max(map(len, prompts))
    assert d["layout_advice"][0]["variables"] == ["context"]
    assert (
        d["layout_advice"][0]["first_cached_tokens"]
        > d["layout_advice"][0]["current_cached_tokens"]
    )
    with pytest.raises(pydantic.ValidationError):
        plan.name = "other"  # frozen, like every StrictModel


def test_plan_small_cache_is_an_upper_bound(qwen):
    _, _, prompts = one_shot_prompts(context_first=True)
    tiny_gpu = GPU(
        name="toy",
        memory_gib=17.8,
        bandwidth_gbs=1000,
        bf16_tflops=100,
        fp8_tflops=None,
        pcie_gbs=32,
        source="test",
    )
    settings = Settings(enforce_eager=True, max_model_len=512)
    mem = plan_memory(qwen, 17.8, replace(settings, max_num_batched_tokens=8192, max_num_seqs=256))
    plan = make_plan(Prompts("small", prompts, 16), qwen, tiny_gpu, settings)
    assert plan.memory == mem and plan.fits
    assert 0 < mem.kv_capacity_blocks < plan.kv_blocks_needed  # fewer blocks than full reuse needs
    assert plan.cache_upper_bound and "upper bound" in " ".join(plan.notes)
    assert plan.cached_prompt_tokens == sum(simulate_prefix_cache(prompts)[0])
    # the head always stays
    assert 199 * 128 <= plan.cached_prompt_tokens_lru < plan.cached_prompt_tokens


def test_plan_caching_off_and_unknown_gpu(qwen):
    _, _, prompts = one_shot_prompts(40)
    unknown = GPU(
        name="mystery",
        memory_gib=80,
        bandwidth_gbs=None,
        bf16_tflops=None,
        fp8_tflops=None,
        pcie_gbs=None,
        source="NVML",
    )
    off = Settings(enable_prefix_caching=False)
    plan = make_plan(Prompts("nocache", prompts, 8), qwen, unknown, off)
    assert plan.cached_prompt_tokens == 0 and plan.cached_share == 0
    assert plan.kv_blocks_needed > 0 and plan.floor_s is None and plan.bound is None
    assert any("prefix caching is off" in n for n in plan.notes) and any(
        "no floor" in n for n in plan.notes
    )


def test_plan_does_not_fit(qwen):
    _, _, prompts = one_shot_prompts(20)
    plan = make_plan(Prompts("fp32-on-l4", prompts, 8), qwen, "L4", Settings(dtype="float32"))
    assert not plan.fits and plan.cpu_offload_gb_needed > 10 and plan.weights_gib > 28
    assert any("cpu_offload_gb" in n for n in plan.notes)
    over = make_plan(Prompts("short-ctx", prompts, 64), qwen, "h200", Settings(max_model_len=200))
    assert over.over_context == sum(1 for p in prompts if len(p) + 64 > 200) > 0
