"""The vLLM engine object: `vllm.LLM` built from a `VLLMSpec`, the facts read back from it, and the
streaming generation loop.

vllm is imported only inside VLLMEngine, in the recipe's child process."""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from runner.config.common import ModelSpec, Sampling
from runner.engines.base import EngineInfo, Generation, Messages, ProgressFn, Request, SinkFn
from runner.engines.vllm import (
    VLLMSpec,
    accepted_args,
    check_args,
    sampling_params_kwargs,
    unquantized_gib,
    warmup_prompts,
)
from runner.engines.vllm_args import effective_engine_args
from runner.engines.vllm_knobs import VLLMFacts, parse_engine_log, vllm_knobs
from runner.errors import RunnerError

_KEPT_METRICS = (
    "vllm:prefix_cache_queries",
    "vllm:prefix_cache_hits",
    "vllm:prompt_tokens",
    "vllm:generation_tokens",
    "vllm:num_preemptions",
)


class VLLMEngine:
    def __init__(self, spec: VLLMSpec, model: ModelSpec, chat: bool | None):
        _apply_env(spec.engine_env())
        vllm = _import_vllm()
        from vllm import LLM

        from runner.engines.tokenizing import load_tokenizer, uses_chat_template

        self.spec, self.model_spec = spec, model
        self.kwargs, self.dropped = _accepted_kwargs(spec.llm_kwargs(model), vllm.__version__)
        self.tokenizer = load_tokenizer(model)
        self.chat = uses_chat_template(self.tokenizer, chat)
        log_path = os.environ.get("RUNNER_ENGINE_LOG")
        log_start = Path(log_path).stat().st_size if log_path and Path(log_path).exists() else 0
        t0 = time.perf_counter()
        self.llm = LLM(**self.kwargs)
        self.facts, parsed = self._read_facts(vllm.__version__, _log_since(log_path, log_start))
        warm = warm_up(self.llm) if spec.warmup else None
        self.info = self._engine_info(vllm.__version__, time.perf_counter() - t0, parsed)
        if warm:
            self.info.extra["warmup"] = warm

    def _engine_info(self, version: str, load_s: float, parsed: dict[str, float]) -> EngineInfo:
        import torch

        from runner.execution.gpumem import device_facts

        info = EngineInfo(
            name="vllm",
            version=version,
            device=device_facts().get("gpu", ""),  # NVML: no CUDA context in this process
            load_s=load_s,
            weights_gib=self.facts.weights_gib,
            kv_cache_tokens=self.facts.kv_cache_tokens,
            quantization=self.facts.quantization,
        )
        info.extra.update(
            {
                "torch": torch.__version__,
                "kv_cache_gib": parsed.get("kv_cache_gib"),
                "model_runner": self.facts.model_runner,
                "env": self.spec.engine_env(),
                "block_size": self._block_size,
            }
        )
        return info

    def _read_facts(self, version: str, log: str) -> tuple[VLLMFacts, dict[str, float]]:
        parsed = parse_engine_log(log)
        vc = self.llm.llm_engine.vllm_config
        cc, mc = vc.cache_config, vc.model_config
        self._block_size = getattr(cc, "block_size", None)
        kv_tokens = (
            getattr(cc, "kv_cache_size_tokens", None)
            or (cc.num_gpu_blocks * cc.block_size if cc.num_gpu_blocks else None)
            or parsed.get("kv_cache_tokens")
        )
        spec, model = self.spec, self.model_spec
        # the full-size reference only matters for knobs that shrink the weights on the GPU
        full = (
            unquantized_gib(model.id, model.trust_remote_code)
            if spec.quantization or mc.quantization or spec.cpu_offload_gb > 0
            else None
        )
        lf = getattr(vc.load_config, "load_format", "")
        facts = VLLMFacts(
            quantization=mc.quantization,
            prefix_caching=bool(cc.enable_prefix_caching),
            gpu_memory_utilization=cc.gpu_memory_utilization,
            enforce_eager=bool(mc.enforce_eager),
            max_model_len=mc.max_model_len,
            tensor_parallel_size=vc.parallel_config.tensor_parallel_size,
            cache_dtype=str(cc.cache_dtype),
            load_format=str(getattr(lf, "value", lf)).lower(),
            weights_gib=parsed.get("weights_gib"),
            unquantized_gib=full,
            model_runner=_model_runner(parsed),
            kv_cache_tokens=int(kv_tokens) if kv_tokens else None,
            version=version,
            swap_space=getattr(cc, "swap_space", None),
            dropped=dict(self.dropped),
            engine_args=effective_engine_args(vc, spec.engine_args),
        )
        return facts, parsed

    def encode(self, messages: Sequence[Messages]) -> tuple[list[str], list[list[int]]]:
        from runner.engines.tokenizing import encode_prompts

        return encode_prompts(self.tokenizer, list(messages), self.chat)

    def generate(
        self,
        requests: Sequence[Request],
        sampling: Sampling,
        progress: ProgressFn | None = None,
        sink: SinkFn | None = None,
    ) -> list[Generation]:
        """All requests go to the engine at once (as `LLM.generate` does); finished outputs are
        handed to `sink` step by step, so an interrupted run keeps every sample it finished."""
        from vllm import SamplingParams

        sp = SamplingParams(**sampling_params_kwargs(sampling))
        before = self._read_metrics()
        t0 = time.perf_counter()
        ids = self.llm.enqueue([{"prompt_token_ids": r.ids} for r in requests], sp, use_tqdm=False)
        self.info.extra["enqueue_s"] = round(time.perf_counter() - t0, 3)  # handing the requests over
        gens = self._stream(requests, ids, progress, sink)
        missing = [i for i, g in enumerate(gens) if g is None]
        if missing:
            raise RuntimeError(f"vLLM finished without outputs for {len(missing)} requests (first: {missing[0]})")
        out: list[Generation] = gens  # type: ignore[assignment]
        self._collect_metrics(before)
        self.info.knobs = vllm_knobs(
            self.spec,
            self.model_spec.load_format,
            self.facts,
            cached=sum(g.cached_tokens or 0 for g in out),
            prompt=sum(g.prompt_tokens for g in out),
        )
        return out

    def _stream(
        self, requests: Sequence[Request], ids: list[str], progress: ProgressFn | None, sink: SinkFn | None
    ) -> list[Generation | None]:
        """Step the engine until every enqueued request is done, handing each step's finished ones on."""
        # enqueue() returns vLLM's internal ids ("<n>-<8 random chars>"); outputs carry the external "<n>"
        index = {key: i for i, rid in enumerate(ids) for key in (rid, rid.split("-", 1)[0])}
        gens: list[Generation | None] = [None] * len(requests)
        engine = self.llm.llm_engine
        while engine.has_unfinished_requests():
            done = [(index[o.request_id], o) for o in engine.step() if o.finished]
            done = [(i, _generation(o, len(requests[i].ids))) for i, o in done]
            if not done:
                continue
            for i, g in done:
                gens[i] = g
            if sink:
                sink(done)
            if progress:
                progress(len(done))
        return gens

    def reset_prefix_cache(self) -> bool:
        """Empty the prefix cache (between cells that share this engine)."""
        return bool(self.llm.reset_prefix_cache())

    def _read_metrics(self) -> dict[str, float] | None:
        """vLLM's counters kept for the report, summed over their labels (None where unavailable)."""
        metrics: dict[str, float] = {}
        try:
            for mt in self.llm.get_metrics():
                if hasattr(mt, "value") and mt.name in _KEPT_METRICS:
                    metrics[mt.name] = metrics.get(mt.name, 0) + mt.value
        except Exception as e:  # metrics are evidence, not the result: record and go on
            note = f"vLLM metrics unavailable: {e}"
            if note not in self.info.notes:
                self.info.notes.append(note)
            return None
        return metrics

    def _collect_metrics(self, before: dict[str, float] | None) -> None:
        """The counters' growth over this generate call (not the warm-up's, nor an earlier cell's on a
        shared engine); none where either reading failed."""
        after = None if before is None else self._read_metrics()
        self.info.extra["metrics"] = {} if before is None or after is None else counters_since(before, after)

    def close(self) -> None:
        if getattr(self, "llm", None) is None:
            return
        try:
            core = self.llm.llm_engine.engine_core
            try:
                core.shutdown(timeout=10)
            except TypeError:
                core.shutdown()
        except Exception:  # best effort: the isolating parent kills the process group anyway
            pass
        del self.llm
        gc.collect()


def _apply_env(env: dict[str, str]) -> None:
    """The engine's environment variables, set before vllm is imported (the sampler switch only where unset)."""
    for k, v in env.items():
        os.environ.setdefault(k, v) if k == "VLLM_USE_FLASHINFER_SAMPLER" else os.environ.__setitem__(k, v)


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError as e:
        raise RunnerError(
            f"vLLM is not installed in this Python ({e}); install vllm on a GPU host "
            "or use `engine: kind: transformers`",
            field="engine.kind",
        ) from None
    return vllm


def _accepted_kwargs(kwargs: dict[str, Any], version: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """`vllm.LLM` kwargs the installed vLLM accepts, and those dropped (`swap_space` where it has no such
    argument: reported as ignored); any other argument it does not accept is an error."""
    accepted = accepted_args()
    dropped: dict[str, Any] = {}
    if "swap_space" in kwargs and "swap_space" not in accepted:
        dropped["swap_space"] = kwargs.pop("swap_space")
    bad = check_args(kwargs, accepted)
    if bad:
        raise RunnerError(
            f"vLLM {version} does not accept {', '.join(bad)}; it accepts: " + ", ".join(sorted(accepted)),
            field="engine.engine_args",
        )
    return kwargs, dropped


def _model_runner(parsed: dict[str, float]) -> str:
    if parsed.get("v2_runner"):
        return "V2"
    return "V1" if os.environ.get("VLLM_USE_V2_MODEL_RUNNER") == "0" else "unknown"


def _generation(o: Any, prompt_tokens: int) -> Generation:
    c, m = o.outputs[0], o.metrics
    ttft = getattr(m, "first_token_latency", None) if m is not None else None
    e2e = None
    if m is not None and ttft is not None and getattr(m, "last_token_ts", None) and m.first_token_ts:
        e2e = ttft + (m.last_token_ts - m.first_token_ts)
    return Generation(
        text=c.text,
        prompt_tokens=prompt_tokens,
        output_tokens=len(c.token_ids),
        cached_tokens=o.num_cached_tokens,
        ttft_s=ttft,
        latency_s=e2e,
    )


def _log_since(log_path: str | None, start: int) -> str:
    if not log_path or not Path(log_path).exists():
        return ""
    with open(log_path, "rb") as f:
        f.seek(start)
        return f.read().decode("utf-8", "replace")


def warm_up(llm: Any) -> str:
    """One synthetic batch at a `vllm.LLM`'s limits (`warmup_prompts`), 2 output tokens each, then its
    prefix cache emptied; what ran, for the report. `engine.warmup` (part of the engine start), and
    benchmarks/step_probe_child.py's `warmup` on plain vLLM."""
    from vllm import SamplingParams

    sc, mc = llm.llm_engine.vllm_config.scheduler_config, llm.llm_engine.vllm_config.model_config
    prompts = warmup_prompts(sc.max_num_seqs, sc.max_num_batched_tokens, mc.get_vocab_size(), mc.max_model_len)
    t0 = time.perf_counter()
    sp = SamplingParams(max_tokens=2, ignore_eos=True, temperature=0.0)
    llm.generate([{"prompt_token_ids": p} for p in prompts], sp, use_tqdm=False)
    emptied = llm.reset_prefix_cache()
    return (
        f"{len(prompts):,} prompts of {len(prompts[0]):,} tokens, 2 output tokens each, "
        f"{time.perf_counter() - t0:.1f} s (part of the engine start)"
        + ("" if emptied else "; vLLM did not empty the prefix cache after it")
    )


def counters_since(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Each counter's growth from `before` to `after` (a counter absent before counts from 0)."""
    return {k: v - before.get(k, 0) for k, v in after.items()}
