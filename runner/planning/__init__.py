"""Planning before running: what a recipe will need and can reach on a GPU (``runner plan``).

Pure functions on token ids and a model's config.json: no torch, no vLLM, no GPU.

- ``prefix_cache``: prompt tokens vLLM V1's automatic prefix caching serves, counted exactly.
- ``layout``: which template variables repeat, and what putting them first would save.
- ``memory``: parameters, weight bytes per quantization, KV bytes per token, KV capacity, offload needed
  (the formulas); ``shape`` (a config's dimensions, parameter counts) and ``weights`` (quantization, weight
  bytes) hold its first steps.
- ``gpus``: memory, bandwidth and peak FLOP/s of common GPUs (NVML lookup optional).
- ``floor``: the compute and bandwidth floor of a workload.
- ``plan``: all of it for one recipe, as a ``Plan``.
"""

from .floor import Floor, compute_floor, peak_tflops, workload_flops
from .gpus import GPU, GPUS, find_gpu, get_gpu, gpu_from_nvml
from .layout import LayoutAdvice, LayoutInputs, advise_layout, advise_layout_text, encode_examples
from .memory import MemoryPlan, activation_bytes, batch_defaults, kv_bytes_per_token, plan_memory
from .plan import Plan, TokenStats, make_plan
from .prefix_cache import (
    DEFAULT_BLOCK_SIZE,
    PrefixCacheCount,
    cached_tokens_per_request,
    count_prefix_cache,
    simulate_prefix_cache,
)
from .shape import ModelShape, ParamCount, count_parameters, model_shape
from .weights import Quantization, resolve_quantization, weight_bytes

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "GPU",
    "GPUS",
    "Floor",
    "LayoutAdvice",
    "LayoutInputs",
    "MemoryPlan",
    "ModelShape",
    "ParamCount",
    "Plan",
    "PrefixCacheCount",
    "Quantization",
    "TokenStats",
    "activation_bytes",
    "advise_layout",
    "advise_layout_text",
    "batch_defaults",
    "cached_tokens_per_request",
    "compute_floor",
    "count_parameters",
    "count_prefix_cache",
    "encode_examples",
    "find_gpu",
    "get_gpu",
    "gpu_from_nvml",
    "kv_bytes_per_token",
    "make_plan",
    "model_shape",
    "peak_tflops",
    "plan_memory",
    "resolve_quantization",
    "simulate_prefix_cache",
    "weight_bytes",
    "workload_flops",
]
