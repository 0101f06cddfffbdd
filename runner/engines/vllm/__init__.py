"""vLLM offline inference, the engine this project exists for, one concern a module: spec.py (the recipe's `engine`
section and its pure mappings onto `vllm.LLM` and `vllm serve`), engine.py (`VLLMEngine`: vllm imported only there,
in the recipe's own process), facts.py (what vLLM reports back, as plain data, and each knob's verdict from it). The
names other modules use are here."""

from runner.engines.vllm.engine import (
    VLLMEngine,
    check_args,
    counters_since,
    sampling_params_kwargs,
    warm_up,
    warmup_prompts,
)
from runner.engines.vllm.facts import (
    VLLMFacts,
    compile_cache_knob,
    crash_evidence,
    effective_engine_args,
    engine_arg_knobs,
    parse_engine_log,
    start_parts,
    vllm_knobs,
)
from runner.engines.vllm.spec import VLLMSpec, cli_args

__all__ = ["VLLMEngine", "VLLMFacts", "VLLMSpec", "check_args", "cli_args", "compile_cache_knob", "counters_since"]
__all__ += ["crash_evidence", "effective_engine_args", "engine_arg_knobs", "parse_engine_log", "sampling_params_kwargs"]
__all__ += ["start_parts", "vllm_knobs", "warm_up", "warmup_prompts"]
