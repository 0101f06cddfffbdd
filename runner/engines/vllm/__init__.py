"""vLLM offline inference, the engine this project exists for, one concern a module: spec.py (the
recipe's `engine` section and its pure mappings onto `vllm.LLM` and `vllm serve`), engine.py
(`VLLMEngine`: vllm imported only there, in the recipe's own process), facts.py (what vLLM reports
back, as plain data, and each knob's verdict from it). The names modules outside runner/engines
import from here are re-exported."""

from runner.engines.vllm.engine import sampling_params_kwargs  # noqa: F401
from runner.engines.vllm.facts import (  # noqa: F401
    compile_cache_knob,
    parse_engine_log,
    start_parts,
)
from runner.engines.vllm.spec import VLLMSpec  # noqa: F401
