"""Hugging Face transformers `generate`: the baseline engine.

`batch_size: 1` is the plain one-prompt-at-a-time loop; larger batches pad on the
left and run length-sorted. torch/transformers are imported only when built."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import Field, PositiveInt

from runner.config.common import ModelSpec, Sampling
from runner.engines.base import EngineInfo, EngineSpecBase, Generation, Knob, Messages, ProgressFn, Request, SinkFn
from runner.errors import RunnerError


class TransformersSpec(EngineSpecBase):
    """Hugging Face transformers `generate` (the baseline)."""

    library: ClassVar[str | None] = "transformers"
    packages: ClassVar[tuple[str, ...]] = ("torch", "transformers", "tokenizers")
    label: ClassVar[str] = "transformers"

    kind: Literal["transformers"] = Field(description="Engine selector.")
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto",
        description="`auto` = cuda when available, else cpu. "
        "On Ray (`--executor ray`) `cuda` reserves a GPU; `auto` "
        "reserves none.",
    )
    batch_size: PositiveInt = Field(
        1, le=65536, description="1 = one prompt at a time; larger = left-padded, length-sorted batches."
    )
    attn_implementation: Literal["sdpa", "eager", "flash_attention_2"] | None = Field(
        None, description="Attention kernel; default is transformers' choice (sdpa where supported)."
    )
    quantization: Literal["bitsandbytes-4bit", "bitsandbytes-8bit"] | None = Field(
        None,
        description="Quantize on load with bitsandbytes. Pre-quantized AWQ/GPTQ checkpoints need "
        "nothing here: transformers loads them as their config says.",
    )
    warmup: bool = Field(
        True,
        description="Run one short generation at engine start, so kernel selection "
        "and JIT stay out of the generation time.",
    )

    def build(self, model: ModelSpec, chat: bool | None) -> TransformersEngine:
        return TransformersEngine(self, model, chat)

    def gpus_needed(self) -> int:
        """`cuda`: one GPU. `auto` asks for none (it must also run on a CPU-only node): Ray then reserves no
        GPU for it, yet on a node with GPUs it may still use one, as Ray 2.60 leaves CUDA_VISIBLE_DEVICES as
        it is for tasks that ask for none; set `device: cuda` to have one reserved."""
        return 1 if self.device == "cuda" else 0

    def preflight(self, model: ModelSpec) -> None:
        from runner.execution.gpumem import has_cuda_device

        if self.device == "cuda" and not has_cuda_device():
            raise RunnerError(
                "device is cuda but this machine has no NVIDIA GPU",
                field="engine.device",
                hint="use `device: auto` (cuda when there is one, else cpu) or `device: cpu`",
            )


@dataclass(frozen=True)
class TransformersFacts:
    """What the loaded model shows: where its parameters are and in what dtype, its attention kernel
    and quantization method."""

    device: str
    param_device: str
    dtype: str
    attn: str | None
    quantization: str | None
    weights_gib: float


def transformers_knobs(spec: TransformersSpec, model: ModelSpec, f: TransformersFacts) -> list[Knob]:
    """Every knob of a transformers recipe with its verdict (pure: facts given as data)."""

    def knob(name: str, requested: Any, effective: Any, status: str, evidence: str) -> Knob:
        return Knob(name=name, requested=requested, effective=effective, status=status, evidence=evidence)

    return [
        knob(
            "device",
            spec.device,
            f.device,
            "applied" if spec.device in ("auto", f.device) else "ignored",
            f"parameters on {f.param_device}",
        ),
        knob(
            "dtype",
            model.dtype,
            f.dtype,
            "applied" if model.dtype in ("auto", f.dtype) else "ignored",
            "dtype of the loaded parameters",
        ),
        knob("batch_size", spec.batch_size, spec.batch_size, "applied", "batches built by the runner"),
        knob(
            "attn_implementation",
            spec.attn_implementation,
            f.attn,
            "default"
            if spec.attn_implementation is None
            else ("applied" if f.attn == spec.attn_implementation else "ignored"),
            "model.config._attn_implementation",
        ),
        knob(
            "quantization",
            spec.quantization,
            f.quantization,
            "default" if spec.quantization is None else ("applied" if f.quantization else "ignored"),
            f"model.config.quantization_config; weights {f.weights_gib:.2f} GiB",
        ),
    ]


_DTYPES = {"float16": "float16", "bfloat16": "bfloat16", "float32": "float32"}


class TransformersEngine:
    def __init__(self, spec: TransformersSpec, model: ModelSpec, chat: bool | None):
        import torch
        import transformers
        from transformers import AutoConfig, AutoModelForCausalLM

        from runner.engines.builtin import SMOKE_NOTE, ensure_builtin, is_builtin
        from runner.engines.tokenizing import load_tokenizer, uses_chat_template

        self.spec, self.model_spec, self.torch = spec, model, torch
        t0 = time.perf_counter()
        device = spec.device
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if device == "cuda" and not torch.cuda.is_available():
            raise RunnerError("device is cuda but torch sees no CUDA device", field="engine.device")
        self.device = device
        builtin_dir = ensure_builtin(model.id) if is_builtin(model.id) else None
        source = builtin_dir or model.id
        self.tokenizer = load_tokenizer(model, builtin_dir)
        self.chat = uses_chat_template(self.tokenizer, chat)
        dtype = model.dtype
        if dtype == "auto":
            dtype = "float32" if device == "cpu" else "auto"
        torch_dtype = "auto" if dtype == "auto" else getattr(torch, _DTYPES[dtype])
        kwargs: dict[str, Any] = {"trust_remote_code": model.trust_remote_code}
        if spec.attn_implementation:
            kwargs["attn_implementation"] = spec.attn_implementation
        if spec.quantization:
            from transformers import BitsAndBytesConfig

            kwargs["quantization_config"] = BitsAndBytesConfig(
                load_in_4bit=spec.quantization == "bitsandbytes-4bit",
                load_in_8bit=spec.quantization == "bitsandbytes-8bit",
            )
        if model.load_format == "dummy":
            config = AutoConfig.from_pretrained(
                source, revision=None if builtin_dir else model.revision, trust_remote_code=model.trust_remote_code
            )
            with torch.device(device):
                self.model = AutoModelForCausalLM.from_config(
                    config,
                    dtype=(config.dtype if torch_dtype == "auto" else torch_dtype) or torch.float32,
                    **{k: v for k, v in kwargs.items() if k != "quantization_config"},
                )
        else:
            self.model = AutoModelForCausalLM.from_pretrained(
                source,
                revision=None if builtin_dir else model.revision,
                dtype=torch_dtype,
                device_map=device if device == "cuda" else None,
                **kwargs,
            )
            if device == "cpu":
                self.model.to("cpu")
        self.model.eval()
        if device == "cuda":
            torch.cuda.synchronize()
        load_s = time.perf_counter() - t0
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        eos = self.model.generation_config.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, list) else ([eos] if eos is not None else []))
        if self.tokenizer.eos_token_id is not None:
            self.eos_ids.add(self.tokenizer.eos_token_id)
        qcfg = getattr(self.model.config, "quantization_config", None)
        qmethod = None
        if qcfg is not None:
            qmethod = qcfg.get("quant_method") if isinstance(qcfg, dict) else str(getattr(qcfg, "quant_method", qcfg))
            qmethod = getattr(qmethod, "value", qmethod)
        weights = self.model.get_memory_footprint() / 2**30
        self.info = EngineInfo(
            name="transformers",
            version=transformers.__version__,
            device=self._device_name(),
            load_s=load_s,
            weights_gib=weights,
            quantization=qmethod,
        )
        self.info.extra["torch"] = torch.__version__
        if builtin_dir:
            self.info.notes.append(SMOKE_NOTE)
        self.info.knobs = transformers_knobs(
            spec,
            model,
            TransformersFacts(
                device=device,
                param_device=str(next(self.model.parameters()).device),
                dtype=str(self.model.dtype).replace("torch.", ""),
                attn=getattr(self.model.config, "_attn_implementation", None),
                quantization=qmethod,
                weights_gib=weights,
            ),
        )
        if spec.warmup:  # part of engine start: first-call kernel selection/JIT stays out of generation time
            warm = self.tokenizer("Hello", add_special_tokens=True)["input_ids"] or [self.tokenizer.pad_token_id]
            with torch.inference_mode():
                self.model.generate(
                    torch.tensor([warm], device=device),
                    attention_mask=torch.ones(1, len(warm), dtype=torch.long, device=device),
                    max_new_tokens=2,
                    do_sample=False,
                    pad_token_id=self.tokenizer.pad_token_id,
                )
            if device == "cuda":
                torch.cuda.synchronize()
            self.info.load_s = time.perf_counter() - t0
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()

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
        order = (
            sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
            if self.spec.batch_size > 1
            else list(range(len(prompts)))
        )
        bs = self.spec.batch_size
        pad = self.tokenizer.pad_token_id
        for start in range(0, len(order), bs):
            idx = order[start : start + bs]
            width = max(len(prompts[i]) for i in idx)
            ids = torch.full((len(idx), width), pad, dtype=torch.long)
            mask = torch.zeros((len(idx), width), dtype=torch.long)
            for r, i in enumerate(idx):
                p = prompts[i]
                ids[r, width - len(p) :] = torch.tensor(p)
                mask[r, width - len(p) :] = 1
            t0 = time.perf_counter()
            with torch.inference_mode():
                gen = self.model.generate(ids.to(self.device), attention_mask=mask.to(self.device), **kw)
            if self.device == "cuda":
                torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            new = gen[:, width:].tolist()
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
