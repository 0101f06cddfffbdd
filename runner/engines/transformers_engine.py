"""The transformers engine object: the model loaded from a `TransformersSpec`, its facts, and the batched
`generate` loop. torch/transformers are imported only when it is built."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from runner.config.common import ModelSpec, Sampling
from runner.engines.base import EngineInfo, Generation, Messages, ProgressFn, Request, SinkFn
from runner.engines.builtin import SMOKE_NOTE, ensure_builtin, is_builtin
from runner.engines.transformers import TransformersFacts, TransformersSpec, transformers_knobs
from runner.errors import RunnerError

_DTYPES = {"float16": "float16", "bfloat16": "bfloat16", "float32": "float32"}


class TransformersEngine:
    def __init__(self, spec: TransformersSpec, model: ModelSpec, chat: bool | None):
        import torch
        import transformers

        from runner.engines.tokenizing import load_tokenizer, uses_chat_template

        self.spec, self.model_spec, self.torch = spec, model, torch
        t0 = time.perf_counter()
        self.device = _resolve_device(spec.device, torch)
        builtin_dir = ensure_builtin(model.id) if is_builtin(model.id) else None
        self.tokenizer = load_tokenizer(model, builtin_dir)
        self.chat = uses_chat_template(self.tokenizer, chat)
        self.model = self._load_model(builtin_dir)
        if self.device == "cuda":
            torch.cuda.synchronize()
        load_s = time.perf_counter() - t0
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.eos_ids = _eos_ids(self.model, self.tokenizer)
        self.info = self._engine_info(transformers.__version__, load_s, builtin_dir is not None)
        if spec.warmup:  # part of engine start: first-call kernel selection/JIT stays out of generation time
            self._warm_up()
            self.info.load_s = time.perf_counter() - t0
        if self.device == "cuda":
            torch.cuda.reset_peak_memory_stats()

    def _load_model(self, builtin_dir: str | None) -> Any:
        """The model, in eval mode on self.device: random weights from its config (`load_format: dummy`),
        else the checkpoint's."""
        from transformers import AutoConfig, AutoModelForCausalLM

        torch, model, device = self.torch, self.model_spec, self.device
        source, revision = builtin_dir or model.id, None if builtin_dir else model.revision
        torch_dtype = _torch_dtype(model.dtype, device, torch)
        kwargs = _load_kwargs(self.spec, model)
        if model.load_format == "dummy":
            config = AutoConfig.from_pretrained(source, revision=revision, trust_remote_code=model.trust_remote_code)
            with torch.device(device):
                loaded = AutoModelForCausalLM.from_config(
                    config,
                    dtype=(config.dtype if torch_dtype == "auto" else torch_dtype) or torch.float32,
                    **{k: v for k, v in kwargs.items() if k != "quantization_config"},
                )
        else:
            loaded = AutoModelForCausalLM.from_pretrained(
                source,
                revision=revision,
                dtype=torch_dtype,
                device_map=device if device == "cuda" else None,
                **kwargs,
            )
            if device == "cpu":
                loaded.to("cpu")
        loaded.eval()
        return loaded

    def _engine_info(self, version: str, load_s: float, builtin: bool) -> EngineInfo:
        qmethod = _quant_method(self.model.config)
        weights = self.model.get_memory_footprint() / 2**30
        info = EngineInfo(
            name="transformers",
            version=version,
            device=self._device_name(),
            load_s=load_s,
            weights_gib=weights,
            quantization=qmethod,
        )
        info.extra["torch"] = self.torch.__version__
        if builtin:
            info.notes.append(SMOKE_NOTE)
        info.knobs = transformers_knobs(
            self.spec,
            self.model_spec,
            TransformersFacts(
                device=self.device,
                param_device=str(next(self.model.parameters()).device),
                dtype=str(self.model.dtype).replace("torch.", ""),
                attn=getattr(self.model.config, "_attn_implementation", None),
                quantization=qmethod,
                weights_gib=weights,
            ),
        )
        return info

    def _warm_up(self) -> None:
        torch, device = self.torch, self.device
        warm = self.tokenizer("Hello", add_special_tokens=True)["input_ids"] or [self.tokenizer.pad_token_id]
        self._model_generate(
            torch.tensor([warm], device=device),
            torch.ones(1, len(warm), dtype=torch.long, device=device),
            max_new_tokens=2,
            do_sample=False,
            pad_token_id=self.tokenizer.pad_token_id,
        )

    def _model_generate(self, ids: Any, mask: Any, **kw: Any) -> Any:
        """`model.generate` on self.device, finished (synchronized) when it returns."""
        with self.torch.inference_mode():
            gen = self.model.generate(ids.to(self.device), attention_mask=mask.to(self.device), **kw)
        if self.device == "cuda":
            self.torch.cuda.synchronize()
        return gen

    def _device_name(self) -> str:
        if self.device == "cuda":
            return self.torch.cuda.get_device_name(0)
        import platform

        return f"cpu ({platform.processor() or platform.machine()})"

    def encode(self, messages: Sequence[Messages]) -> tuple[list[str], list[list[int]]]:
        from runner.engines.tokenizing import encode_prompts

        return encode_prompts(self.tokenizer, list(messages), self.chat)

    def _gen_kwargs(self, sampling: Sampling) -> dict[str, Any]:
        from transformers import GenerationConfig

        # a fresh config: the checkpoint's generation_config.json (e.g. repetition_penalty 1.05) must not
        # change decoding behind the recipe's back; vLLM gets exactly the recipe's settings too
        kw: dict[str, Any] = {
            "generation_config": GenerationConfig(
                eos_token_id=sorted(self.eos_ids) or None, pad_token_id=self.tokenizer.pad_token_id
            ),
            "max_new_tokens": sampling.max_tokens,
        }
        if sampling.temperature > 0:
            kw.update(
                do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k or None
            )
        else:
            kw.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        if sampling.ignore_eos:
            kw["min_new_tokens"] = sampling.max_tokens
        if sampling.stop:
            kw["stop_strings"] = list(sampling.stop)
            kw["tokenizer"] = self.tokenizer
        return kw

    def _finish(self, ids: list[int], sampling: Sampling) -> tuple[str, int]:
        from runner.engines.tokenizing import truncate_at_stop

        n = len(ids)
        if not sampling.ignore_eos:
            for i, t in enumerate(ids):
                if t in self.eos_ids:
                    n = i + 1
                    break
        text = self.tokenizer.decode(ids[:n], skip_special_tokens=True)
        text, _ = truncate_at_stop(text, sampling.stop)
        return text, n

    def _padded(self, prompts: Sequence[list[int]], idx: list[int]) -> tuple[Any, Any]:
        """The prompts at idx, padded on the left to the longest, and their attention mask."""
        torch = self.torch
        width = max(len(prompts[i]) for i in idx)
        ids = torch.full((len(idx), width), self.tokenizer.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(idx), width), dtype=torch.long)
        for r, i in enumerate(idx):
            p = prompts[i]
            ids[r, width - len(p) :] = torch.tensor(p)
            mask[r, width - len(p) :] = 1
        return ids, mask

    def generate(
        self,
        requests: Sequence[Request],
        sampling: Sampling,
        progress: ProgressFn | None = None,
        sink: SinkFn | None = None,
    ) -> list[Generation]:
        torch = self.torch
        prompts = [r.ids for r in requests]
        if sampling.seed is not None:
            torch.manual_seed(sampling.seed)
        kw = self._gen_kwargs(sampling)
        out: list[Generation | None] = [None] * len(prompts)
        bs = self.spec.batch_size
        order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i])) if bs > 1 else list(range(len(prompts)))
        for start in range(0, len(order), bs):
            idx = order[start : start + bs]
            ids, mask = self._padded(prompts, idx)
            t0 = time.perf_counter()
            gen = self._model_generate(ids, mask, **kw)
            dt = time.perf_counter() - t0
            new = gen[:, ids.shape[1] :].tolist()
            for r, i in enumerate(idx):
                text, n = self._finish(new[r], sampling)
                out[i] = Generation(text=text, prompt_tokens=len(prompts[i]), output_tokens=n, latency_s=dt)
            if sink:
                sink([(i, out[i]) for i in idx])
            if progress:
                progress(len(idx))
        if self.device == "cuda":
            self.info.extra["torch_peak_allocated_gib"] = torch.cuda.max_memory_allocated() / 2**30
        return out  # type: ignore[return-value]

    def reset_prefix_cache(self) -> bool:
        return False  # no prefix cache

    def close(self) -> None:
        del self.model
        import gc

        gc.collect()
        if self.device == "cuda":
            self.torch.cuda.empty_cache()


def _resolve_device(device: str, torch: Any) -> str:
    """`auto` -> cuda when torch sees a CUDA device, else cpu; `cuda` without one is an error."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise RunnerError("device is cuda but torch sees no CUDA device", field="engine.device")
    return device


def _torch_dtype(dtype: str, device: str, torch: Any) -> Any:
    """The recipe's dtype as torch's (`auto`: float32 on the CPU, else the checkpoint's)."""
    if dtype == "auto":
        dtype = "float32" if device == "cpu" else "auto"
    return "auto" if dtype == "auto" else getattr(torch, _DTYPES[dtype])


def _load_kwargs(spec: TransformersSpec, model: ModelSpec) -> dict[str, Any]:
    """`from_pretrained` keyword arguments from the spec: attention kernel and bitsandbytes quantization."""
    kwargs: dict[str, Any] = {"trust_remote_code": model.trust_remote_code}
    if spec.attn_implementation:
        kwargs["attn_implementation"] = spec.attn_implementation
    if spec.quantization:
        from transformers import BitsAndBytesConfig

        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=spec.quantization == "bitsandbytes-4bit",
            load_in_8bit=spec.quantization == "bitsandbytes-8bit",
        )
    return kwargs


def _eos_ids(model: Any, tokenizer: Any) -> set[int]:
    """The generation config's end-of-sequence ids and the tokenizer's."""
    eos = model.generation_config.eos_token_id
    ids = set(eos if isinstance(eos, list) else ([eos] if eos is not None else []))
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return ids


def _quant_method(config: Any) -> str | None:
    """The loaded model's quantization method (`quantization_config.quant_method`), None when unquantized."""
    qcfg = getattr(config, "quantization_config", None)
    if qcfg is None:
        return None
    qmethod = qcfg.get("quant_method") if isinstance(qcfg, dict) else str(getattr(qcfg, "quant_method", qcfg))
    return getattr(qmethod, "value", qmethod)
