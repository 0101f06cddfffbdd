"""Knob verdicts are pure functions of (spec, facts, generations): every row checked with plain
data."""

from enum import Enum
from pathlib import Path
from types import SimpleNamespace

import pytest

from runner.base.types import ModelSpec
from runner.engines.transformers import TransformersFacts, TransformersSpec, transformers_knobs
from runner.engines.vllm import VLLMSpec
from runner.engines.vllm.facts import (
    VLLMFacts,
    crash_evidence,
    effective_engine_args,
    engine_arg_knobs,
    vllm_knobs,
)


def verdicts(spec, facts, cached=0, prompt=100, load_format="auto"):
    return {k.name: k.status for k in vllm_knobs(spec, load_format, facts, cached, prompt)}


@pytest.mark.parametrize(
    "requested,effective,status",
    [
        ("awq", "auto_awq", "applied"),  # vLLM renames AWQ to the kernel it picks
        ("awq_marlin", "auto_awq", "applied"),
        ("gptq", "auto_gptq", "applied"),
        ("fp8", "fp8", "applied"),
        ("fp8", None, "ignored"),
        ("awq", "fp8", "ignored"),
        (None, "auto_awq", "default"),  # from the checkpoint's config
    ],
)
def test_quantization_aliases(requested, effective, status):
    assert (
        verdicts(VLLMSpec(kind="vllm", quantization=requested), VLLMFacts(quantization=effective))[
            "quantization"
        ]
        == status
    )


@pytest.mark.parametrize(
    "requested,on,cached,status",
    [
        (True, True, 50, "applied"),
        (True, True, 0, "unverified"),  # on, but nothing was reused: cannot tell
        (True, False, 0, "ignored"),
        (False, False, 0, "applied"),
        (False, False, 7, "ignored"),  # off, yet tokens came from a cache
        (None, True, 50, "default"),
    ],
)
def test_prefix_caching(requested, on, cached, status):
    spec = VLLMSpec(kind="vllm", enable_prefix_caching=requested)
    assert (
        verdicts(spec, VLLMFacts(prefix_caching=on), cached=cached)["enable_prefix_caching"]
        == status
    )


@pytest.mark.parametrize(
    "weights,status", [(6.1, "applied"), (14.2, "ignored"), (10.2, "applied"), (10.3, "ignored")]
)
def test_offload_threshold_is_half_the_asked_amount(weights, status):
    # full model 14.2 GiB, 8 GiB asked: applied when at least 4 GiB left the GPU (weights <= 10.2)
    facts = VLLMFacts(weights_gib=weights, unquantized_gib=14.2, model_runner="V1")
    knobs = {
        k.name: k for k in vllm_knobs(VLLMSpec(kind="vllm", cpu_offload_gb=8), "auto", facts, 0, 1)
    }
    assert knobs["cpu_offload_gb"].status == status
    assert knobs["cpu_offload_gb"].effective == round(14.2 - weights, 2)


def test_offload_unverified_without_weight_memory():
    assert (
        verdicts(VLLMSpec(kind="vllm", cpu_offload_gb=8), VLLMFacts())["cpu_offload_gb"]
        == "unverified"
    )


def test_kv_cache_dtype():
    assert (
        verdicts(VLLMSpec(kind="vllm", kv_cache_dtype="fp8"), VLLMFacts(cache_dtype="fp8_e4m3"))[
            "kv_cache_dtype"
        ]
        == "applied"
    )
    assert (
        verdicts(VLLMSpec(kind="vllm", kv_cache_dtype="fp8"), VLLMFacts(cache_dtype="auto"))[
            "kv_cache_dtype"
        ]
        == "ignored"
    )
    assert (
        verdicts(VLLMSpec(kind="vllm"), VLLMFacts(cache_dtype="auto"))["kv_cache_dtype"]
        == "default"
    )


def test_dropped_swap_space_is_reported_ignored():
    spec = VLLMSpec(kind="vllm", swap_space=4)
    knobs = {
        k.name: k
        for k in vllm_knobs(
            spec, "auto", VLLMFacts(dropped={"swap_space": 4}, version="0.26.0"), 0, 1
        )
    }
    assert (
        knobs["swap_space"].status == "ignored"
        and "0.26.0 has no swap_space" in knobs["swap_space"].evidence
    )
    assert verdicts(spec, VLLMFacts(swap_space=4))["swap_space"] == "unverified"
    assert "swap_space" not in verdicts(VLLMSpec(kind="vllm"), VLLMFacts())


def test_engine_settings_compared_with_effective():
    spec = VLLMSpec(
        kind="vllm",
        enforce_eager=True,
        max_model_len=4096,
        tensor_parallel_size=2,
        gpu_memory_utilization=0.8,
    )
    ok = VLLMFacts(
        enforce_eager=True,
        max_model_len=4096,
        tensor_parallel_size=2,
        gpu_memory_utilization=0.8,
        load_format="dummy",
    )
    v = verdicts(spec, ok, load_format="dummy")
    assert [
        v[k]
        for k in (
            "enforce_eager",
            "max_model_len",
            "tensor_parallel_size",
            "gpu_memory_utilization",
            "load_format",
        )
    ] == ["applied"] * 5
    bad = VLLMFacts(
        enforce_eager=False,
        max_model_len=2048,
        tensor_parallel_size=1,
        gpu_memory_utilization=0.9,
        load_format="auto",
    )
    v = verdicts(spec, bad, load_format="dummy")
    assert [
        v[k]
        for k in (
            "enforce_eager",
            "max_model_len",
            "tensor_parallel_size",
            "gpu_memory_utilization",
            "load_format",
        )
    ] == ["ignored"] * 5


def test_crash_evidence_from_a_vllm_log():
    ev = crash_evidence(
        "Model loading took 6.10 GiB memory and 40.2 seconds\n"
        "Total CPU offloaded parameters: 8.09\nGPU KV cache size: 1,000 tokens\n"
    )
    assert (ev.weights_gib, ev.kv_cache_tokens) == (6.1, 1000)
    assert any("8.09 GiB of parameters were offloaded" in n for n in ev.notes)
    assert VLLMSpec.crash_evidence("nothing here").notes == []


def _tf(**kw):
    base = dict(
        device="cpu",
        param_device="cpu",
        dtype="float32",
        attn="sdpa",
        quantization=None,
        weights_gib=1.0,
    )
    return TransformersFacts(**{**base, **kw})


def test_transformers_knobs():
    m = ModelSpec(id="m")
    v = {
        k.name: k.status
        for k in transformers_knobs(TransformersSpec(kind="transformers"), m, _tf())
    }
    assert v == {
        "device": "applied",
        "dtype": "applied",
        "batch_size": "applied",
        "attn_implementation": "default",
        "quantization": "default",
    }
    spec = TransformersSpec(
        kind="transformers",
        device="cuda",
        attn_implementation="eager",
        quantization="bitsandbytes-4bit",
    )
    v = {
        k.name: k.status
        for k in transformers_knobs(spec, ModelSpec(id="m", dtype="bfloat16"), _tf())
    }
    assert v["device"] == v["dtype"] == v["attn_implementation"] == v["quantization"] == "ignored"
    v = {
        k.name: k.status
        for k in transformers_knobs(
            spec,
            ModelSpec(id="m", dtype="float32"),
            _tf(device="cuda", attn="eager", quantization="bitsandbytes"),
        )
    }
    assert v["device"] == v["dtype"] == v["attn_implementation"] == v["quantization"] == "applied"


class _Mode(Enum):
    FULL_AND_PIECEWISE = (2, 1)


class _Cfg(SimpleNamespace):
    def with_hf_config(self):  # a method named like a config is not one
        return None


def _vllm_config(**compilation):
    return _Cfg(
        scheduler_config=SimpleNamespace(
            max_model_len=4096, max_num_seqs=4096, max_num_batched_tokens=8192
        ),
        compilation_config=SimpleNamespace(cudagraph_mode=_Mode.FULL_AND_PIECEWISE, **compilation),
        # a name that recurs: the scheduler's is the one meant
        speculative_config=SimpleNamespace(max_model_len=1),
        model_config=SimpleNamespace(hf_overrides={"rope_theta": 5.0}),
        cache_config=SimpleNamespace(block_size=16),
        lora_config=None,
        optimization_level=2,  # VllmConfig's own field
    )


def _knobs(args, held):
    spec = VLLMSpec(kind="vllm", engine_args=args)
    return {
        k.name: k
        for k in vllm_knobs(spec, "auto", VLLMFacts(engine_args=held), 0, 1)
        if k.name.startswith("engine_args.")
    }


def test_engine_args_are_read_back_from_the_config_that_holds_them():
    args = {
        "max_model_len": 4096,
        "max_num_seqs": 4096,
        "max_num_batched_tokens": 16384,  # asked for, not what the engine holds
        "compilation_config": {
            "cudagraph_capture_sizes": [1, 2, 8192],
            "cudagraph_mode": "full_and_piecewise",
        },
        "hf_overrides": {"rope_theta": 5.0},  # a mapping field, walked key by key
        "optimization_level": 2,
        "no_such_arg": 1,
    }
    found = effective_engine_args(_vllm_config(cudagraph_capture_sizes=(1, 2, 8192)), args)
    assert (
        found
        == {
            "max_model_len": ("scheduler_config", 4096),
            "max_num_seqs": ("scheduler_config", 4096),
            "max_num_batched_tokens": ("scheduler_config", 8192),
            "compilation_config.cudagraph_capture_sizes": ("compilation_config", (1, 2, 8192)),
            "compilation_config.cudagraph_mode": ("compilation_config", _Mode.FULL_AND_PIECEWISE),
            "hf_overrides.rope_theta": ("hf_overrides", 5.0),
            "optimization_level": ("vllm_config", 2),
        }
        or found
    )
    knobs = _knobs(args, found)
    assert {n: k.status for n, k in knobs.items()} == {
        "engine_args.max_model_len": "applied",
        "engine_args.max_num_seqs": "applied",
        "engine_args.max_num_batched_tokens": "ignored",
        "engine_args.compilation_config.cudagraph_capture_sizes": "applied",
        "engine_args.compilation_config.cudagraph_mode": "applied",
        "engine_args.hf_overrides.rope_theta": "applied",
        "engine_args.optimization_level": "applied",
        "engine_args.no_such_arg": "unverified",
    }
    sizes = knobs["engine_args.compilation_config.cudagraph_capture_sizes"]
    assert (
        sizes.effective == [1, 2, 8192]
        and sizes.evidence == "compilation_config, as the front end holds it"
    )
    assert knobs["engine_args.compilation_config.cudagraph_mode"].effective == "FULL_AND_PIECEWISE"
    assert knobs["engine_args.max_num_batched_tokens"].effective == 8192
    assert knobs["engine_args.no_such_arg"].evidence == "not found in the engine's config"


@pytest.mark.parametrize(
    "requested,held,status,note",
    [
        # vLLM sorts, drops repeats
        ([8, 4, 2, 1, 1], [1, 2, 4, 8], "applied", "the same values, in vLLM's order"),
        (["+quant_fp8"], ["none", "+quant_fp8"], "applied", "vLLM added ['none']"),
        ([1, 2, 3], [1, 2], "ignored", ""),
        (None, 256, "default", "left to vLLM"),
        ("/tmp/d", Path("/tmp/d"), "applied", ""),
        ([[1, 2]], [(1, 2)], "applied", ""),
        ("piecewise", _Mode.FULL_AND_PIECEWISE, "ignored", ""),
    ],
)
def test_engine_arg_verdicts_see_through_vllms_forms(requested, held, status, note):
    (k,) = engine_arg_knobs({"x": requested}, {"x": ("scheduler_config", held)})
    assert k.status == status and k.evidence == "scheduler_config" + (f"; {note}" if note else "")


def test_engine_args_of_a_served_engine_and_ones_the_engine_lacks_are_unverified():
    args = {"compilation_config": {"no_such_field": 3}, "speculative": {"x": 1}}
    assert effective_engine_args(_vllm_config(), args) == {}
    assert _knobs(args, {})["engine_args.compilation_config.no_such_field"].status == "unverified"
    served = _knobs({"max_num_seqs": 8}, None)["engine_args.max_num_seqs"]
    assert served.status == "unverified" and served.evidence == "not read back (a served engine)"


def test_an_empty_nested_engine_arg_asks_for_nothing():
    # `compilation_config: {}` names no setting: no row (it was once compared whole with the config
    # object)
    held = effective_engine_args(_vllm_config(), {"compilation_config": {}, "max_num_seqs": 4096})
    assert held == {"max_num_seqs": ("scheduler_config", 4096)}
    assert [
        k.name for k in engine_arg_knobs({"compilation_config": {}, "max_num_seqs": 4096}, held)
    ] == ["engine_args.max_num_seqs"]


@pytest.mark.parametrize(
    ("asked", "ran", "status"),
    [
        ("sdpa", "paged|sdpa", "applied"),
        ("sdpa", "sdpa", "applied"),
        ("sdpa", "flash_attention_3", "ignored"),
        (None, "paged|eager", "default"),
    ],
)
def test_continuous_batchings_attention_is_what_its_manager_ran(asked, ran, status):
    """transformers pages the asked attention for continuous batching (sdpa -> paged|sdpa), or
    switches to flash attention where it finds it: the knob reads the manager's model, not the model
    as loaded."""
    from runner.engines.transformers import ContinuousSpec, continuous_knobs

    manager = SimpleNamespace(
        model=SimpleNamespace(config=SimpleNamespace(_attn_implementation=ran))
    )
    [knob] = [
        k
        for k in continuous_knobs(ContinuousSpec(), manager, asked)
        if k.name.endswith("attn_implementation")
    ]
    assert (knob.requested, knob.effective, knob.status) == (asked, ran, status)
    [before] = [
        k
        for k in continuous_knobs(ContinuousSpec(), None, asked)
        if k.name.endswith("attn_implementation")
    ]
    assert before.status == "unverified" and before.effective is None
