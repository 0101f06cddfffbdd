"""The shape of a dense decoder-only model from its Hugging Face ``config.json``, and its parameters by kind
(formulas in ``memory``'s docstring)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field

from ..strict import StrictModel


class ModelShape(StrictModel):
    """The dimensions that size a dense decoder-only transformer."""

    model_type: str = Field(description="config.json model_type.")
    hidden: int = Field(description="hidden_size (H).")
    layers: int = Field(description="num_hidden_layers (L).")
    heads: int = Field(description="num_attention_heads (nh).")
    kv_heads: int = Field(description="num_key_value_heads (kv); = heads without GQA.")
    head_dim: int = Field(description="head_dim (d); hidden / heads when absent.")
    intermediate: int = Field(description="intermediate_size (I).")
    vocab: int = Field(description="vocab_size (V).")
    tied: bool = Field(description="tie_word_embeddings: lm_head shares the embedding.")
    qkv_bias: bool = Field(description="q/k/v projections have biases.")
    o_bias: bool = Field(description="o projection has a bias.")
    mlp_bias: bool = Field(description="MLP projections have biases.")
    qk_norm: bool = Field(description="Per-head q/k RMSNorm (Qwen3).")
    max_position: int | None = Field(description="max_position_embeddings.")
    dtype: str = Field(description="Checkpoint dtype (torch_dtype).")


def model_shape(config: Mapping[str, Any]) -> ModelShape:
    """The shape from a config.json dict (a multimodal config's ``text_config`` when the top level has none)."""
    c = config
    if "hidden_size" not in c and isinstance(c.get("text_config"), Mapping):
        c = {**c["text_config"], "quantization_config": config.get("quantization_config")}
    for key in ("num_experts", "num_local_experts", "n_routed_experts"):
        if c.get(key):
            raise ValueError(f"mixture-of-experts configs ({key}={c[key]}) are not modelled")
    mt = str(c.get("model_type", ""))
    heads = int(c["num_attention_heads"])
    return ModelShape(
        model_type=mt,
        hidden=int(c["hidden_size"]),
        layers=int(c["num_hidden_layers"]),
        heads=heads,
        kv_heads=int(c.get("num_key_value_heads") or heads),
        head_dim=int(c.get("head_dim") or c["hidden_size"] // heads),
        intermediate=int(c["intermediate_size"]),
        vocab=int(c["vocab_size"]),
        tied=bool(c.get("tie_word_embeddings", mt.startswith("gemma"))),
        qkv_bias=bool(c.get("attention_bias", False)) or mt == "qwen2",
        o_bias=bool(c.get("attention_bias", False)),
        mlp_bias=bool(c.get("mlp_bias", False)),
        qk_norm=mt.startswith("qwen3"),
        max_position=c.get("max_position_embeddings"),
        dtype=str(c.get("torch_dtype") or c.get("dtype") or "bfloat16"),
    )


def linear_shapes(s: ModelShape) -> list[tuple[int, int]]:
    """(in, out) of one decoder layer's matmuls: q, k, v, o, gate, up, down."""
    q, kv = s.heads * s.head_dim, s.kv_heads * s.head_dim
    h, i = s.hidden, s.intermediate
    return [(h, q), (h, kv), (h, kv), (q, h), (h, i), (h, i), (i, h)]


class ParamCount(StrictModel):
    """Parameters by kind."""

    embedding: int = Field(description="Token embedding, V*H.")
    lm_head: int = Field(description="Output projection, V*H; 0 when tied to the embedding.")
    linear: int = Field(description="Decoder-layer matmul weights (what AWQ/GPTQ/fp8/bitsandbytes quantize).")
    biases: int = Field(description="Bias vectors.")
    norms: int = Field(description="Norm weights.")
    total: int = Field(description="All parameters.")


def count_parameters(config: Mapping[str, Any]) -> ParamCount:
    s = model_shape(config)
    q, kv = s.heads * s.head_dim, s.kv_heads * s.head_dim
    linear = s.layers * sum(a * b for a, b in linear_shapes(s))
    per_layer_bias = (
        ((q + 2 * kv) if s.qkv_bias else 0)
        + (s.hidden if s.o_bias else 0)
        + ((2 * s.intermediate + s.hidden) if s.mlp_bias else 0)
    )
    norms = s.layers * (2 * s.hidden + (2 * s.head_dim if s.qk_norm else 0)) + s.hidden
    emb = s.vocab * s.hidden
    head = 0 if s.tied else emb
    biases = s.layers * per_layer_bias
    return ParamCount(
        embedding=emb,
        lm_head=head,
        linear=linear,
        biases=biases,
        norms=norms,
        total=emb + head + linear + biases + norms,
    )
