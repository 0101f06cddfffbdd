"""Compute floor: closed forms against token-by-token sums, peaks per dtype, which bound applies."""

from __future__ import annotations

import pytest

from runner.plan.floor import GPU, Workload, compute_floor, get_gpu, peak_tflops, workload_flops
from runner.plan.memory import GIB, MemoryPlan, count_parameters

TINY = {
    "model_type": "llama",
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "vocab_size": 100,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "max_position_embeddings": 4096,
}


def token_by_token(cfg, lens, cached, m):
    """The same FLOPs summed one forward position at a time."""
    p = count_parameters(cfg).linear
    att = (
        4
        * cfg["num_hidden_layers"]
        * cfg["num_attention_heads"]
        * (cfg["hidden_size"] // cfg["num_attention_heads"])
    )
    logits = 2 * cfg["hidden_size"] * cfg["vocab_size"]
    prefill = decode = 0
    for n, c in zip(lens, cached, strict=True):
        for pos in range(c, n):  # uncached prompt positions
            prefill += 2 * p + att * (pos + 1)
        prefill += logits  # logits of the last prompt position only
        for pos in range(n, n + m - 1):  # decode steps feed outputs 1..m-1
            decode += 2 * p + att * (pos + 1) + logits
    return prefill, decode


@pytest.mark.parametrize(
    "lens,cached,m", [([10, 37, 5], [0, 16, 0], 8), ([1], [0], 1), ([300, 300], [0, 288], 33)]
)
def test_flops_closed_form(lens, cached, m):
    assert workload_flops(TINY, lens, cached, m) == pytest.approx(
        token_by_token(TINY, lens, cached, m), rel=1e-12
    )


def test_cache_removes_prefill_flops():
    full, _ = workload_flops(TINY, [100], [0], 1)
    half, _ = workload_flops(TINY, [100], [64], 1)
    p = count_parameters(TINY).linear
    att = 4 * 2 * 4 * 16
    assert full - half == pytest.approx(2 * p * 64 + att * 64 * 65 / 2)


def test_peaks_per_dtype():
    h200, a100 = get_gpu("H200"), get_gpu("A100-80G")
    assert peak_tflops(h200, "fp8", "bfloat16") == h200.fp8_tflops
    # no fp8 tensor cores: weight-only
    assert peak_tflops(a100, "fp8", "bfloat16") == a100.bf16_tflops
    assert peak_tflops(h200, "awq", "float16") == h200.bf16_tflops
    assert peak_tflops(h200, "none", "float32") == h200.bf16_tflops / 2  # TF32
    unknown = GPU(
        name="x",
        memory_gib=10,
        bandwidth_gbs=None,
        bf16_tflops=None,
        fp8_tflops=None,
        pcie_gbs=None,
        source="test",
    )
    assert peak_tflops(unknown, "none", "bfloat16") is None
    assert compute_floor(TINY, Workload([10], [], 4, 1, 8192), unknown, _weights(1e6, 100)) is None


def _weights(gpu_bytes, kv_bytes_per_token, offload_bytes=0.0):
    """The memory plan's parts the floor reads: bf16 weights, so many bytes on the GPU and so many
    offloaded."""
    gib = {"weights_gib": (gpu_bytes + offload_bytes) / GIB, "weights_gpu_gib": gpu_bytes / GIB}
    return MemoryPlan.model_construct(
        quantization="none", dtype="bfloat16", kv_bytes_per_token=kv_bytes_per_token, **gib
    )


def _floor(lens, m, batch, offload_bytes=0.0):
    work = Workload(lens, [], m, batch, 16384)
    return compute_floor(TINY, work, get_gpu("H200"), _weights(15e9, 57344, offload_bytes))


def test_bounds():
    # one short prompt, long output, batch 1: every step reads 15 GB of weights -> memory bound
    f = _floor([4], 257, 1)
    assert f.bound == "memory" and f.decode_steps == 256 and f.prefill_steps == 1
    assert f.memory_s == pytest.approx((257 * 15e9 + f.kv_read_bytes) / 4.8e12)
    assert f.floor_s == f.memory_s > f.compute_s
    # batching divides the weight reads: 64 requests in one batch read them as often as one request
    f64 = _floor([4] * 64, 257, 64)
    assert f64.decode_steps == 256 and f64.weight_read_bytes == f.weight_read_bytes
    assert _floor([4] * 64, 257, 8).decode_steps == 8 * 256
    # long prompts, one output token, on a big weight matrix count: compute bound
    big = {
        **TINY,
        "hidden_size": 4096,
        "intermediate_size": 16384,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
    }
    work = Workload([2000] * 100, [], 1, 100, 16384)
    c = compute_floor(big, work, get_gpu("H200"), _weights(1e9, 57344))
    assert c.bound == "compute" and c.decode_steps == 0 and c.prefill_steps == 13
    assert c.compute_s == pytest.approx((c.prefill_flops + c.decode_flops) / 989.5e12)


def test_offload_pcie_bound():
    f = _floor([4], 17, 1, offload_bytes=8 * 2**30)
    assert f.bound == "pcie" and f.pcie_s == pytest.approx(17 * 8 * 2**30 / 64e9)
    assert _floor([4], 17, 1).pcie_s == 0
