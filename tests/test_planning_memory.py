"""Parameter counts, weight bytes, KV sizes and capacity against published and measured figures; the
GPU table."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

from runner.plan.floor import GPUS, find_gpu, get_gpu, gpu_from_nvml
from runner.plan.memory import (
    Settings,
    activation_bytes,
    count_parameters,
    kv_bytes_per_token,
    model_shape,
    plan_memory,
    resolve_quantization,
    weight_bytes,
)

MODELS = Path(__file__).resolve().parents[2] / "shared" / "models"
GIB = 2**30


def _config(name: str) -> dict:
    path = MODELS / name / "config.json"
    if not path.exists():
        pytest.skip(f"shared model config absent: {path}")
    return json.loads(path.read_text())


@pytest.fixture
def qwen() -> dict:
    return _config("qwen2.5-7b-instruct")


@pytest.fixture
def qwen_awq() -> dict:
    return _config("qwen2.5-7b-instruct-awq")


TINY = {
    "model_type": "qwen2",
    "hidden_size": 8,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "intermediate_size": 16,
    "vocab_size": 10,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "max_position_embeddings": 64,
}


def test_tiny_count_by_hand():
    # head_dim 4; q 8x8, k 8x4, v 8x4, o 8x8 = 192; MLP 3 x 8 x 16 = 384; per layer 576, two layers
    # 1152
    # qwen2 biases q 8 + k 4 + v 4 = 16 per layer; norms 2 x 8 per layer + 8 final = 40; embedding
    # and head 80 each
    p = count_parameters(TINY)
    assert (p.linear, p.biases, p.norms, p.embedding, p.lm_head) == (1152, 32, 40, 80, 80)
    assert p.total == 1152 + 32 + 40 + 160
    tied = count_parameters({**TINY, "tie_word_embeddings": True, "model_type": "llama"})
    assert tied.lm_head == 0 and tied.biases == 0  # llama: no biases unless attention_bias
    assert count_parameters({**TINY, "model_type": "llama", "attention_bias": True}).biases == 2 * (
        16 + 8
    )
    assert model_shape({**TINY, "head_dim": 6}).head_dim == 6
    with pytest.raises(ValueError, match="mixture-of-experts"):
        model_shape({**TINY, "num_local_experts": 8})


def test_quantized_bytes_by_hand():
    gptq = {**TINY, "quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": -1}}
    # per matrix: in*out/2 bytes of 4-bit weights + one group per output row (group_size -1), each
    # with an
    # fp16 scale and a 4-bit zero: out * (2 + 0.5); the rest (biases, norms, embedding, lm_head) in
    # bf16
    outs = 8 + 4 + 4 + 8 + 16 + 16 + 8
    linear = 2 * (576 / 2 + outs * 2.5)
    assert weight_bytes(gptq) == round(linear + (32 + 40 + 160) * 2)
    assert weight_bytes(TINY, quantization="fp8") == 1152 + (32 + 40 + 160) * 2
    assert weight_bytes(TINY, dtype="float32") == count_parameters(TINY).total * 4
    # auto -> bf16
    assert weight_bytes({**TINY, "torch_dtype": "float32"}) == count_parameters(TINY).total * 2


def test_quantization_resolution(qwen, qwen_awq):
    assert resolve_quantization(qwen).method == "none"
    q = resolve_quantization(qwen_awq)
    assert (q.method, q.bits, q.group_size, q.zero_point) == ("awq", 4, 128, True)
    assert resolve_quantization(qwen_awq, "awq_marlin").method == "awq"
    assert resolve_quantization(qwen, "bitsandbytes").bits == 4
    # vLLM 0.26's online fp8 schemes: 8-bit weights, the fp8 peak (plan/floor.py keys on the method)
    for name in ("fp8_per_tensor", "fp8_per_block", "fp8_per_channel"):
        assert resolve_quantization(qwen, name) == resolve_quantization(qwen, "fp8")
    with pytest.raises(ValueError, match="needs a checkpoint"):
        resolve_quantization(qwen, "gptq")
    with pytest.raises(ValueError, match="not modelled"):
        resolve_quantization(qwen, "compressed-tensors")


def test_qwen25_7b_published_sizes(qwen, qwen_awq):
    p = count_parameters(qwen)
    assert p.total == 7_615_616_512 and round(p.total / 1e9, 2) == 7.62  # model card: 7.62B
    assert weight_bytes(qwen) / 1e9 == pytest.approx(15.23, abs=0.01)  # bf16 ~15.2 GB
    assert weight_bytes(qwen_awq) / 1e9 == pytest.approx(5.5, rel=0.03)  # AWQ safetensors ~5.5 GB


@pytest.mark.parametrize(
    "which,quant,measured_gib", [("bf16", None, 14.29), ("bf16", "fp8", 8.2), ("awq", None, 5.38)]
)
def test_weights_against_vllm_on_h200(qwen, qwen_awq, which, quant, measured_gib):
    cfg = qwen_awq if which == "awq" else qwen
    got = weight_bytes(cfg, quantization=quant) / GIB
    assert got == pytest.approx(measured_gib, rel=0.05)
    assert got <= measured_gib  # vLLM's figure also holds non-parameter buffers


def test_kv_bytes(qwen, qwen_awq):
    assert kv_bytes_per_token(qwen) == 28 * 4 * 128 * 2 * 2 == 57_344
    assert kv_bytes_per_token(qwen, "fp8") == 28_672
    assert kv_bytes_per_token(qwen_awq) == 57_344  # fp16 model, 2 bytes
    assert kv_bytes_per_token(qwen, dtype="float32") == 2 * 57_344


def test_activation_estimate(qwen):
    bf16 = activation_bytes(qwen, 16384, 1024) / GIB
    fp8 = activation_bytes(qwen, 16384, 1024, quantization="fp8") / GIB
    # vLLM's profile on the H200: 2.2 (bf16), 2.17 (AWQ)
    assert bf16 == pytest.approx(2.2, rel=0.05)
    assert fp8 == pytest.approx(2.46, rel=0.02)  # and 2.46 for fp8
    assert fp8 - bf16 == pytest.approx(16384 * 18944 / GIB)


@pytest.mark.parametrize(
    "which,quant,kv_tokens",
    [("bf16", None, 2_042_880), ("bf16", "fp8", 2_152_048), ("awq", None, 2_210_400)],
)
def test_kv_capacity_against_vllm_on_h200(qwen, qwen_awq, which, quant, kv_tokens):
    settings = Settings(gpu_memory_utilization=0.9, quantization=quant, enforce_eager=True)
    config = qwen_awq if which == "awq" else qwen
    m = plan_memory(config, get_gpu("H200").memory_gib, settings, "H200")
    assert m.kv_capacity_tokens == pytest.approx(kv_tokens, rel=0.01)
    assert m.kv_capacity_tokens % 16 == 0 and m.fits and m.starts and m.cpu_offload_gb_needed == 0


def test_offload_needed_is_just_enough(qwen):
    gib = get_gpu("L4").memory_gib

    def plan(offload=0.0):
        batch = {"max_num_batched_tokens": 8192, "max_num_seqs": 256}
        settings = Settings(gpu_memory_utilization=0.5, cpu_offload_gb=offload, **batch)
        return plan_memory(qwen, gib, settings)

    m = plan()
    assert not m.fits and not m.starts and m.cpu_offload_gb_needed > 0
    need = m.cpu_offload_gb_needed
    assert plan(need).starts
    assert not plan(need - 0.2).starts
    assert plan(need).weights_gpu_gib == pytest.approx(m.weights_gib - need)


def test_gpu_table_lookup():
    assert set(GPUS) == {"H100 SXM", "H200", "A100-80G", "L40S", "L4", "RTX 4090"}
    assert find_gpu("h200") is find_gpu("NVIDIA H200") is GPUS["H200"]
    assert find_gpu("a100-80g").fp8_tflops is None
    assert find_gpu("rtx4090").name == find_gpu("NVIDIA GeForce RTX 4090").name == "RTX 4090"
    assert find_gpu("H100").name == "H100 SXM"
    assert find_gpu("tpu-v5") is None
    with pytest.raises(ValueError, match="known"):
        get_gpu("tpu-v5")
    # CUDA's total on the project's H200
    assert GPUS["H200"].memory_gib == pytest.approx(139.8, abs=0.01)
    for g in GPUS.values():
        assert g.source.startswith("https://") and g.bf16_tflops and g.bandwidth_gbs
        assert g.fp8_tflops is None or g.fp8_tflops == pytest.approx(2 * g.bf16_tflops, rel=0.02)
    assert Settings().batch(GPUS["H200"].memory_gib, "H200") == (16384, 1024)
    assert Settings().batch(GPUS["A100-80G"].memory_gib, "A100-80G") == (8192, 256)
    assert Settings().batch(GPUS["L4"].memory_gib, "L4") == (8192, 256)
    assert Settings(max_num_seqs=64).batch(GPUS["H200"].memory_gib, "H200") == (16384, 64)


def _fake_nvml(name, total):
    m = types.ModuleType("pynvml")
    m.nvmlInit = lambda: None
    m.nvmlDeviceGetHandleByIndex = lambda i: object()
    m.nvmlDeviceGetName = lambda h: name
    m.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(total=total)
    return m


def test_gpu_from_nvml(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails: no NVML, no error
    assert gpu_from_nvml() is None
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml(b"NVIDIA H200", 143771 * 2**20))
    g = gpu_from_nvml()
    assert g.name == "H200" and g.bf16_tflops == GPUS["H200"].bf16_tflops
    assert g.memory_gib == pytest.approx(139.8, abs=0.01)
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml("NVIDIA H100 PCIe", 81559 * 2**20))
    g = gpu_from_nvml()
    assert g.name == "NVIDIA H100 PCIe" and g.bf16_tflops is None and g.memory_gib > 79
