"""GPU memory of a dense decoder-only model under vLLM, from its Hugging Face ``config.json`` alone.

Parameters (H hidden, L layers, nh attention heads, kv KV heads, d head dim, I intermediate, V
vocab):
  embedding V*H; lm_head V*H unless ``tie_word_embeddings``; per layer: q H*nh*d, k and v H*kv*d
  each, o nh*d*H, MLP gate, up H*I each and down I*H; biases: q/k/v (nh*d + 2*kv*d) when
  ``attention_bias`` or Qwen2 style (model_type qwen2: q/k/v biases, none on o), o (H) with
  ``attention_bias``, MLP (2I + H) with ``mlp_bias``; norms 2H per layer + H final (+ 2d per layer
  for Qwen3's q/k norms). Qwen2.5-7B: 7,615,616,512 (published: 7.62B).

Weight bytes: the decoder-layer matmul weights ("linear") are what quantization shrinks; embedding,
lm_head, biases and norms stay 16-bit (vLLM quantizes neither the embedding nor, unless asked, the
lm_head):
  none: all parameters * dtype bytes (bf16/fp16 2, fp32 4);
  fp8 (vLLM online or fp8 checkpoint): linear * 1 byte (per-tensor scales negligible);
  awq/gptq, b bits, group g (-1 = whole input row): per matrix in*out*b/8 + out*ceil(in/g)*(2 + b/8)
    (an fp16 scale and a b-bit zero point per group; AWQ without ``zero_point`` drops the zero);
  bitsandbytes 8-bit: linear * 1 + 4 bytes per output row; 4-bit (NF4, blocks of 64): linear / 2 +
    4 bytes per block, or with double quantization 1 byte per block + 4 bytes per 256 blocks.
  Against vLLM on the H200 (Qwen2.5-7B, "Model loading took"): bf16 14.18 GiB predicted vs 14.29
  measured, fp8 8.11 vs 8.2, AWQ 5.19 vs 5.38 (vLLM's figure also holds a few non-parameter
  buffers).

KV cache per token: L * kv * d * 2 (K and V) * kv dtype bytes (``auto`` = model dtype; fp8 = 1).

KV capacity, as vLLM sizes it (``gpu_worker.py``: "Desired GPU memory utilization is (u, X GiB).
Actual usage is W for weight, A for peak activation, N for non-torch memory, G for CUDAGraph
memory"):
  KV bytes = u * total - weights on GPU - A - N - G;  tokens = floor(KV bytes / (block_size *
  kv/token))
  * block_size.  vLLM measures A by profiling a forward pass of ``max_num_batched_tokens`` tokens;
    here:
  A = max(T * (3I + 4H) * a [+ T * I for fp8's quantized copy of the down-projection input],
          max_num_seqs * V * 4 * 2)
  (T = max_num_batched_tokens, a = activation bytes: gate_up output 2I, its activation I, and about
  four hidden-sized buffers per token; the second term is the sampler's fp32 logits and one working
  copy). Qwen2.5-7B at T = 16,384: 2.17 GiB (measured: bf16 2.2, AWQ 2.17), fp8 2.46 (measured
  2.46). N = 0.25 GiB (measured 0.22-0.25 on the H200). G = 0 with ``enforce_eager``, else 0.5 GiB:
  a guess, not measured here (vLLM logs a few tenths of a GiB to about 1 GiB of CUDA graphs for 7B
  models).
vLLM refuses to start when the KV cache cannot hold one ``max_model_len`` sequence: the model "fits"
when
  u * total >= weights + A + N + G + max_model_len * kv/token; otherwise ``cpu_offload_gb`` must
  cover the difference (vLLM's cpu_offload_gb counts GiB, and offloads whole parameters, so it may
  overshoot slightly).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from runner.base.types import StrictModel

GIB = 2**30
NON_TORCH_GIB = 0.25
CUDA_GRAPH_GIB = 0.5
DTYPE_BYTES = {"float16": 2, "half": 2, "bfloat16": 2, "float32": 4, "float": 4}


@dataclass(frozen=True)
class ModelShape:
    """The dimensions that size a dense decoder-only transformer."""

    hidden: int  # hidden_size (H).
    layers: int  # num_hidden_layers (L).
    heads: int  # num_attention_heads (nh).
    kv_heads: int  # num_key_value_heads (kv); = heads without GQA.
    head_dim: int  # head_dim (d); hidden / heads when absent.
    intermediate: int  # intermediate_size (I).
    vocab: int  # vocab_size (V).
    tied: bool  # tie_word_embeddings: lm_head shares the embedding.
    qkv_bias: bool  # q/k/v projections have biases.
    o_bias: bool  # o projection has a bias.
    mlp_bias: bool  # MLP projections have biases.
    qk_norm: bool  # Per-head q/k RMSNorm (Qwen3).
    max_position: int | None  # max_position_embeddings.
    dtype: str  # Checkpoint dtype (torch_dtype).


def model_shape(config: Mapping[str, Any]) -> ModelShape:
    """The shape from a config.json dict (a multimodal config's ``text_config`` when the top level
    has none)."""
    c = config
    if "hidden_size" not in c and isinstance(c.get("text_config"), Mapping):
        c = {**c["text_config"], "quantization_config": config.get("quantization_config")}
    for key in ("num_experts", "num_local_experts", "n_routed_experts"):
        if c.get(key):
            raise ValueError(f"mixture-of-experts configs ({key}={c[key]}) are not modelled")
    mt, bias = str(c.get("model_type", "")), bool(c.get("attention_bias"))
    heads, hidden = _size(c, "num_attention_heads", 1 << 14), _size(c, "hidden_size", 1 << 20)
    max_position = (
        _size(c, "max_position_embeddings", 1 << 26)
        if c.get("max_position_embeddings") is not None
        else None
    )
    return ModelShape(
        hidden=hidden,
        layers=_size(c, "num_hidden_layers", 10_000),
        heads=heads,
        kv_heads=_size(c, "num_key_value_heads", heads) if c.get("num_key_value_heads") else heads,
        head_dim=_size(c, "head_dim", 1 << 16) if c.get("head_dim") else max(1, hidden // heads),
        intermediate=_size(c, "intermediate_size", 1 << 24),
        vocab=_size(c, "vocab_size", 1 << 24),
        tied=bool(c.get("tie_word_embeddings", mt.startswith("gemma"))),
        qkv_bias=bias or mt == "qwen2",
        o_bias=bias,
        mlp_bias=bool(c.get("mlp_bias")),
        qk_norm=mt.startswith("qwen3"),
        max_position=max_position,
        dtype=str(c.get("torch_dtype") or c.get("dtype") or "bfloat16"),
    )


def _size(c: Mapping[str, Any], key: str, most: int) -> int:
    """A size from config.json: a whole number from 1 to `most` (ValueError naming the key
    otherwise)."""
    v = c.get(key)
    whole = (
        isinstance(v, int) and not isinstance(v, bool) or isinstance(v, float) and v.is_integer()
    )
    if not whole or not 1 <= v <= most:
        what = "missing" if v is None else f"{v!r}"
        raise ValueError(
            f"config.json's {key} is {what}: a whole number from 1 to {most:,} is expected"
        )
    return int(v)


def linear_shapes(s: ModelShape) -> list[tuple[int, int]]:
    """(in, out) of one decoder layer's matmuls: q, k, v, o, gate, up, down."""
    q, kv, h, i = s.heads * s.head_dim, s.kv_heads * s.head_dim, s.hidden, s.intermediate
    return [(h, q), (h, kv), (h, kv), (q, h), (h, i), (h, i), (i, h)]


@dataclass(frozen=True)
class ParamCount:
    """Parameters by kind."""

    embedding: int  # Token embedding, V*H.
    lm_head: int  # Output projection, V*H; 0 when tied to the embedding.
    linear: int  # Decoder-layer matmul weights (what AWQ/GPTQ/fp8/bitsandbytes quantize).
    biases: int  # Bias vectors.
    norms: int  # Norm weights.
    total: int  # All parameters.


def count_parameters(config: Mapping[str, Any]) -> ParamCount:
    s = model_shape(config)
    q, kv, h, i = s.heads * s.head_dim, s.kv_heads * s.head_dim, s.hidden, s.intermediate
    linear = s.layers * sum(a * b for a, b in linear_shapes(s))
    biases = s.layers * (
        (q + 2 * kv if s.qkv_bias else 0)
        + (h if s.o_bias else 0)
        + (2 * i + h if s.mlp_bias else 0)
    )
    norms = s.layers * (2 * h + (2 * s.head_dim if s.qk_norm else 0)) + h
    emb, head = s.vocab * h, 0 if s.tied else s.vocab * h
    total = emb + head + linear + biases + norms
    return ParamCount(emb, head, linear, biases, norms, total)


@dataclass(frozen=True)
class Quantization:
    """How the linear weights are stored."""

    method: str  # none, fp8, awq, gptq or bitsandbytes.
    bits: int  # Bits per linear weight.
    group_size: int = -1  # AWQ/GPTQ group size along the input; -1 = one group per row.
    zero_point: bool = True  # AWQ/GPTQ store a zero point per group.
    double_quant: bool = False  # bitsandbytes 4-bit double quantization.


# vLLM's names (fp8_per_*: its online fp8 with per-tensor, 128x128-block or per-channel weight
# scales, whose scales the weights' bytes leave out) and the transformers engine's
# (bitsandbytes-4bit, -8bit), each to its method: the name before any `_` or `-`
_NAMES = (
    "awq awq_marlin gptq gptq_marlin fp8 fp8_per_tensor fp8_per_block fp8_per_channel "
    "bitsandbytes bitsandbytes-4bit bitsandbytes-8bit"
)
_ALIASES = {name: re.split("[_-]", name)[0] for name in _NAMES.split()}


def resolve_quantization(
    config: Mapping[str, Any], quantization: str | None = None
) -> Quantization:
    """The recipe's ``engine.quantization`` (vLLM's name), else the checkpoint's
    ``quantization_config``."""
    qc = config.get("quantization_config") or {}
    name = quantization or qc.get("quant_method")
    if name is None:
        return Quantization("none", 16)
    method = _ALIASES.get(str(name).lower())
    if method is None:
        raise ValueError(
            f"quantization {name!r} is not modelled (known: {', '.join(sorted(set(_ALIASES)))})"
        )
    if method == "fp8":
        return Quantization("fp8", 8)
    if method == "bitsandbytes":
        eight = str(name).lower().endswith("-8bit") or qc.get("load_in_8bit")
        double = bool(qc.get("bnb_4bit_use_double_quant"))
        return Quantization(method, 8 if eight else 4, double_quant=double)
    if qc.get("quant_method") not in ("awq", "gptq"):
        raise ValueError(
            f"{method} needs a checkpoint whose config.json has an {method} quantization_config"
        )
    zero = bool(qc.get("zero_point", True)) if method == "awq" else True
    bits, group = (
        int(qc.get("bits", qc.get("w_bit", 4))),
        int(qc.get("group_size", qc.get("q_group_size", 128))),
    )
    return Quantization(method, bits, group, zero)


def resolve_dtype(config: Mapping[str, Any], dtype: str) -> str:
    """vLLM's ``dtype=auto``: the checkpoint's dtype, float32 checkpoints run in bfloat16."""
    d = model_shape(config).dtype if dtype == "auto" else dtype
    if d not in DTYPE_BYTES:
        raise ValueError(f"dtype {d!r} is not modelled")
    return "bfloat16" if dtype == "auto" and DTYPE_BYTES[d] == 4 else d


def weight_bytes(
    config: Mapping[str, Any], dtype: str = "auto", quantization: str | None = None
) -> int:
    """Bytes of the weights on the GPU (formulas in the module docstring)."""
    s, p, q = (
        model_shape(config),
        count_parameters(config),
        resolve_quantization(config, quantization),
    )
    dtype_bytes, mats = DTYPE_BYTES[resolve_dtype(config, dtype)], linear_shapes(s)
    n = p.linear // s.layers  # the matmul weights of one layer
    if q.method == "none":
        per_layer = n * dtype_bytes
    elif q.method == "fp8":
        per_layer = n
    elif q.method in ("awq", "gptq"):
        per_layer = 0.0
        for fan_in, fan_out in mats:
            groups = fan_out * math.ceil(fan_in / (q.group_size if q.group_size > 0 else fan_in))
            per_layer += fan_in * fan_out * q.bits / 8 + groups * (
                2 + (q.bits / 8 if q.zero_point else 0)
            )
    elif q.bits == 8:  # bitsandbytes LLM.int8: int8 weights + an fp32 scale per output row
        per_layer = n + 4 * sum(out for _, out in mats)
    else:  # bitsandbytes NF4, blocks of 64 weights
        blocks = sum(math.ceil(a * b / 64) for a, b in mats)
        per_layer = n / 2 + (blocks + 4 * math.ceil(blocks / 256) if q.double_quant else 4 * blocks)
    return round(s.layers * per_layer + (p.total - p.linear) * dtype_bytes)


def kv_bytes_per_token(
    config: Mapping[str, Any], kv_cache_dtype: str = "auto", dtype: str = "auto"
) -> int:
    """L * kv heads * head dim * 2 * bytes (``auto`` = the model dtype, ``fp8*`` = 1)."""
    s = model_shape(config)
    kv_dtype = resolve_dtype(config, dtype) if kv_cache_dtype == "auto" else kv_cache_dtype
    b = 1 if kv_dtype.startswith("fp8") else DTYPE_BYTES.get(kv_dtype)
    if b is None:
        raise ValueError(f"kv_cache_dtype {kv_cache_dtype!r} is not modelled")
    return s.layers * s.kv_heads * s.head_dim * 2 * b


def activation_bytes(
    config: Mapping[str, Any],
    max_num_batched_tokens: int,
    max_num_seqs: int,
    dtype: str = "auto",
    quantization: str | None = None,
) -> int:
    """Peak activation estimate of vLLM's profiling pass (formula in the module docstring)."""
    s, t = model_shape(config), max_num_batched_tokens
    forward = t * (3 * s.intermediate + 4 * s.hidden) * DTYPE_BYTES[resolve_dtype(config, dtype)]
    if resolve_quantization(config, quantization).method == "fp8":
        forward += t * s.intermediate
    return max(forward, max_num_seqs * s.vocab * 4 * 2)


@dataclass(frozen=True)
class Settings:
    """The engine settings a plan reads (an engine's `plan_settings` but `device` and `cpu_dtype`),
    vLLM's defaults; max_num_batched_tokens and max_num_seqs None: vLLM's defaults for the GPU
    (`batch`)."""

    dtype: str = "auto"
    quantization: str | None = None
    kv_cache_dtype: str = "auto"
    gpu_memory_utilization: float = 0.9
    max_model_len: int | None = None
    block_size: int = 16
    cpu_offload_gb: float = 0.0
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    enforce_eager: bool = False
    enable_prefix_caching: bool = True

    def batch(self, gpu_memory_gib: float, gpu_name: str = "") -> tuple[int, int]:
        """(max_num_batched_tokens, max_num_seqs): these settings, else vLLM's offline (LLM class)
        defaults for the GPU: (16384, 1024) on GPUs of at least 70 GiB other than the A100, else
        (8192, 256) (``EngineArgs.get_batch_defaults``)."""
        big = gpu_memory_gib >= 70 and "a100" not in gpu_name.lower()
        tokens, seqs = (16384, 1024) if big else (8192, 256)
        return self.max_num_batched_tokens or tokens, self.max_num_seqs or seqs


class MemoryPlan(StrictModel):
    """Where the GPU's memory goes under vLLM, and what is left for the KV cache."""

    quantization: str  # Resolved method: none, fp8, awq, gptq, bitsandbytes.
    dtype: str  # Resolved model dtype.
    weights_gib: float  # All weights, GiB.
    weights_gpu_gib: float  # Weights left on the GPU after cpu_offload_gb, GiB.
    activation_gib: float  # Peak activation estimate (vLLM's profiling pass), GiB.
    non_torch_gib: float  # Non-torch allowance, GiB.
    cuda_graph_gib: float  # CUDA-graph allowance (0 with enforce_eager), GiB.
    budget_gib: float  # gpu_memory_utilization * GPU memory, GiB.
    kv_bytes_per_token: int  # KV-cache bytes per token, all layers.
    kv_cache_gib: float  # Memory left for the KV cache, GiB (0 when negative).
    kv_capacity_blocks: int  # KV blocks that fit.
    kv_capacity_tokens: int  # KV tokens that fit (blocks * block size).
    max_model_len: int  # Context length the engine must hold one sequence of.
    fits: bool  # Without offload: weights, overheads and one max_model_len sequence fit.
    # cpu_offload_gb (vLLM's unit: GiB) needed to fit; 0 if it fits; more than weights_gib: offload
    # alone cannot make it fit.
    cpu_offload_gb_needed: float
    starts: bool  # With the given cpu_offload_gb, the KV cache holds one max_model_len sequence.


def plan_memory(
    config: Mapping[str, Any], gpu_memory_gib: float, s: Settings = Settings(), gpu_name: str = ""
) -> MemoryPlan:
    """vLLM's memory budget for one GPU (formulas in the module docstring)."""
    weights = weight_bytes(config, s.dtype, s.quantization)
    gpu_weights = max(0, weights - int(s.cpu_offload_gb * GIB))
    act = activation_bytes(config, *s.batch(gpu_memory_gib, gpu_name), s.dtype, s.quantization)
    graph = 0.0 if s.enforce_eager else CUDA_GRAPH_GIB
    extra, budget = (NON_TORCH_GIB + graph) * GIB, s.gpu_memory_utilization * gpu_memory_gib * GIB
    kvb = kv_bytes_per_token(config, s.kv_cache_dtype, s.dtype)
    mml = s.max_model_len or model_shape(config).max_position or 0
    kv = max(0.0, budget - gpu_weights - act - extra)
    blocks = int(kv // (s.block_size * kvb))
    tokens, short = blocks * s.block_size, weights + act + extra + mml * kvb - budget
    return MemoryPlan(
        quantization=resolve_quantization(config, s.quantization).method,
        dtype=resolve_dtype(config, s.dtype),
        weights_gib=weights / GIB,
        weights_gpu_gib=gpu_weights / GIB,
        activation_gib=act / GIB,
        non_torch_gib=NON_TORCH_GIB,
        cuda_graph_gib=graph,
        budget_gib=budget / GIB,
        kv_bytes_per_token=kvb,
        kv_cache_gib=kv / GIB,
        kv_capacity_blocks=blocks,
        kv_capacity_tokens=tokens,
        max_model_len=mml,
        fits=short <= 0,
        cpu_offload_gb_needed=math.ceil(max(0.0, short) / GIB * 10) / 10,
        starts=tokens >= mml,
    )
