"""How a model's weights are stored: the quantization method and dtype a recipe resolves to, and the weight bytes
they make (formulas in ``memory``'s docstring)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from pydantic import Field

from ..strict import StrictModel
from .shape import ModelShape, count_parameters, linear_shapes, model_shape

DTYPE_BYTES = {"float16": 2, "half": 2, "bfloat16": 2, "float32": 4, "float": 4}


class Quantization(StrictModel):
    """How the linear weights are stored."""

    method: str = Field(description="none, fp8, awq, gptq or bitsandbytes.")
    bits: int = Field(description="Bits per linear weight.")
    group_size: int = Field(-1, description="AWQ/GPTQ group size along the input; -1 = one group per row.")
    zero_point: bool = Field(True, description="AWQ/GPTQ store a zero point per group.")
    double_quant: bool = Field(False, description="bitsandbytes 4-bit double quantization.")


_ALIASES = {
    "awq": "awq",
    "awq_marlin": "awq",
    "gptq": "gptq",
    "gptq_marlin": "gptq",
    "fp8": "fp8",
    "bitsandbytes": "bitsandbytes",
}


def resolve_quantization(config: Mapping[str, Any], quantization: str | None = None) -> Quantization:
    """The recipe's ``engine.quantization`` (vLLM's name), else the checkpoint's ``quantization_config``."""
    qc = config.get("quantization_config") or {}
    name = quantization or qc.get("quant_method")
    if name is None:
        return Quantization(method="none", bits=16)
    method = _ALIASES.get(str(name).lower())
    if method is None:
        raise ValueError(f"quantization {name!r} is not modelled (known: {', '.join(sorted(set(_ALIASES)))})")
    if method == "fp8":
        return Quantization(method="fp8", bits=8)
    if method == "bitsandbytes":
        eight = bool(qc.get("load_in_8bit", False))
        return Quantization(
            method=method, bits=8 if eight else 4, double_quant=bool(qc.get("bnb_4bit_use_double_quant", False))
        )
    if qc.get("quant_method") not in ("awq", "gptq"):
        raise ValueError(f"{method} needs a checkpoint whose config.json has an {method} quantization_config")
    zero = bool(qc.get("zero_point", True)) if method == "awq" else True
    return Quantization(
        method=method,
        bits=int(qc.get("bits", qc.get("w_bit", 4))),
        group_size=int(qc.get("group_size", qc.get("q_group_size", 128))),
        zero_point=zero,
    )


def resolve_dtype(config: Mapping[str, Any], dtype: str = "auto") -> str:
    """vLLM's ``dtype=auto``: the checkpoint's dtype, float32 checkpoints run in bfloat16."""
    d = model_shape(config).dtype if dtype == "auto" else dtype
    if d not in DTYPE_BYTES:
        raise ValueError(f"dtype {d!r} is not modelled")
    return "bfloat16" if dtype == "auto" and DTYPE_BYTES[d] == 4 else d


def _linear_bytes(s: ModelShape, q: Quantization, dtype_bytes: int) -> float:
    mats = linear_shapes(s)
    n = sum(a * b for a, b in mats)
    if q.method == "none":
        per_layer = n * dtype_bytes
    elif q.method == "fp8":
        per_layer = n
    elif q.method in ("awq", "gptq"):
        per_layer = 0.0
        for fan_in, fan_out in mats:
            groups = fan_out * math.ceil(fan_in / (q.group_size if q.group_size > 0 else fan_in))
            per_layer += fan_in * fan_out * q.bits / 8 + groups * (2 + (q.bits / 8 if q.zero_point else 0))
    elif q.bits == 8:  # bitsandbytes LLM.int8: int8 weights + an fp32 scale per output row
        per_layer = n + 4 * sum(out for _, out in mats)
    else:  # bitsandbytes NF4, blocks of 64 weights
        blocks = sum(math.ceil(a * b / 64) for a, b in mats)
        per_layer = n / 2 + (blocks + 4 * math.ceil(blocks / 256) if q.double_quant else 4 * blocks)
    return s.layers * per_layer


def weight_bytes(config: Mapping[str, Any], dtype: str = "auto", quantization: str | None = None) -> int:
    """Bytes of the weights on the GPU (formulas in ``memory``'s docstring)."""
    s, p = model_shape(config), count_parameters(config)
    q = resolve_quantization(config, quantization)
    b = DTYPE_BYTES[resolve_dtype(config, dtype)]
    other = p.embedding + p.lm_head + p.biases + p.norms
    return round(_linear_bytes(s, q, b) + other * b)
