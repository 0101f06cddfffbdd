"""Hugging Face transformers: the baseline engine.

`batching: static` (default) is `generate`: `batch_size: 1` is the plain one-prompt-at-a-time loop;
larger batches pad on the left and run length-sorted. `batching: continuous` is transformers' own
continuous batching (`generate_batch`'s manager, paged attention, prefix sharing): what a
transformers user would try first for throughput. It is a setting of this engine, not a kind of its
own, because everything but the generation loop (model loading, tokenizer, dtype, device, attention
and quantization knobs, the prompt ids) is the same. torch/transformers are imported only when the
engine is built."""

from __future__ import annotations

import contextlib
import gc
import platform
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, PositiveInt, model_validator

import runner.engines.gguf as gguf  # the module, not the package: tests patch its functions
from runner.base.errors import RunnerError
from runner.base.nvml import has_cuda_device
from runner.base.types import EngineInfo, EngineSpecBase, Generation, Knob, StrictModel
from runner.engines.builtin import SMOKE_NOTE, ensure_builtin, is_builtin
from runner.engines.hf import encode_prompts, load_tokenizer, truncate_at_stop, uses_chat_template

if TYPE_CHECKING:
    from runner.base.types import Advance, Messages, ModelSpec, Request, Sampling, Sink


class ContinuousSpec(StrictModel):
    """Limits of transformers' continuous batching (`batching: continuous`); unset: transformers
    sizes them from the free memory and the workload. Each is read back from the running manager
    (the report's knob table)."""

    num_blocks: PositiveInt | None = Field(None, le=10_000_000, description="KV-cache blocks.")
    block_size: PositiveInt | None = Field(
        None,
        le=65536,
        description="Tokens per KV-cache block (transformers 5.17: `block_size`; later: "
        "`page_size`).",
    )
    max_batch_tokens: PositiveInt | None = Field(
        None, le=10_000_000, description="Most tokens in one step."
    )
    max_requests_per_batch: PositiveInt | None = Field(
        None, le=1_000_000, description="Most requests in one step."
    )
    prefix_sharing: bool = Field(
        True,
        description="Share KV blocks of common prompt prefixes (transformers' "
        "`allow_block_sharing`).",
    )
    cuda_graphs: bool | None = Field(
        None, description="CUDA graphs for its steps; default: transformers' choice."
    )


class TransformersSpec(EngineSpecBase):
    """Hugging Face transformers: `generate` in padded batches, or its continuous batching."""

    library = "transformers"
    # what `build` takes from it: the Auto classes it loads the tokenizer and model with, the
    # quantization configs
    preloads = (
        "transformers.models.auto.modeling_auto",
        "transformers.models.auto.tokenization_auto",
        "transformers.utils.quantization_config",
    )
    packages = ("torch", "transformers", "tokenizers")
    label = "transformers"

    kind: Literal["transformers"] = Field(description="Engine selector.")
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto",
        description="`auto` = cuda when available, else cpu. On Ray (`--executor ray`) `cuda` "
        "reserves a GPU; `auto` reserves none.",
    )
    batch_size: PositiveInt = Field(
        1,
        le=65536,
        description="1 = one prompt at a time; larger = left-padded, length-sorted batches.",
    )
    attn_implementation: Literal["sdpa", "eager", "flash_attention_2"] | None = Field(
        None,
        description="Attention kernel; default is transformers' choice (sdpa where supported).",
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
    batching: Literal["static", "continuous"] = Field(
        "static",
        description="`static`: `generate` on padded batches of `batch_size`; `continuous`: "
        "transformers' continuous batching (paged attention; requests join and leave each step; "
        "limits in `continuous`).",
    )
    continuous: ContinuousSpec = Field(
        default_factory=ContinuousSpec,
        description="Continuous batching's limits (`batching: continuous` only).",
    )

    @model_validator(mode="after")
    def _continuous_only(self) -> TransformersSpec:
        if self.batching == "static" and self.continuous != ContinuousSpec():
            raise ValueError(
                "`continuous` sets continuous batching's limits: add `batching: continuous`"
            )
        if self.batching == "continuous" and self.batch_size != 1:
            raise ValueError(
                "batch_size is for `batching: static`; continuous batching sizes its steps itself"
            )
        return self

    def build(self, model: ModelSpec, chat: bool | None) -> TransformersEngine:
        return TransformersEngine(self, model, chat)

    def gpus_needed(self) -> int:
        """`cuda`: one GPU. `auto` asks for none (it must also run on a CPU-only node): Ray then
        reserves no GPU for it, yet on a node with GPUs it may still use one, as Ray 2.60 leaves
        CUDA_VISIBLE_DEVICES as it is for tasks that ask for none; set `device: cuda` to have one
        reserved."""
        return 1 if self.device == "cuda" else 0

    def plan_settings(self, model: ModelSpec) -> dict[str, Any]:
        return {
            "dtype": model.dtype,
            # as build() loads it on a CPU
            "cpu_dtype": "float32" if model.dtype == "auto" else model.dtype,
            "quantization": self.quantization,
            # auto: the machine planned for
            "device": {"cpu": "cpu", "cuda": "gpu"}.get(self.device),
        }

    def preflight(self, model: ModelSpec) -> None:
        if self.device == "cuda" and not has_cuda_device():
            hint = "use `device: auto` (cuda when there is one, else cpu) or `device: cpu`"
            raise RunnerError(
                "device is cuda but this machine has no NVIDIA GPU",
                field="engine.device",
                hint=hint,
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


def transformers_knobs(
    spec: TransformersSpec, model: ModelSpec, f: TransformersFacts
) -> list[Knob]:
    """Every knob of a transformers recipe with its verdict (pure: facts given as data)."""
    attn, quant, size = spec.attn_implementation, spec.quantization, spec.batch_size
    weights = f"model.config.quantization_config; weights {f.weights_gib:.2f} GiB"
    on = f"parameters on {f.param_device}"
    dtype_ok = model.dtype in ("auto", f.dtype)
    held = "model.config._attn_implementation"
    # ok None: left to transformers
    rows = [
        ("device", spec.device, f.device, spec.device in ("auto", f.device), on),
        ("dtype", model.dtype, f.dtype, dtype_ok, "dtype of the loaded parameters"),
        ("attn_implementation", attn, f.attn, attn and f.attn == attn, held),
        ("quantization", quant, f.quantization, quant and bool(f.quantization), weights),
    ]
    if spec.batching == "static":
        rows.insert(2, ("batch_size", size, size, True, "batches built by the runner"))
    status = {True: "applied", False: "ignored", None: "default"}
    return [
        Knob(name=n, requested=r, effective=e, status=status[ok], evidence=ev)
        for n, r, e, ok, ev in rows
    ]


def continuous_knobs(c: ContinuousSpec, manager: Any, attn: str | None) -> list[Knob]:
    """Continuous batching's knobs, each read back from the running manager (its resolved config and
    KV cache, the attention its model ran with: transformers pages it, or switches to flash
    attention where it can; `attn`: the recipe's); before a generation started one: unverified.
    `manager` may be any object with those attributes."""
    eff = getattr(manager, "continuous_batching_config", None)
    cache = getattr(getattr(manager, "batch_processor", None), "cache", None)
    model_config = getattr(getattr(manager, "model", None), "config", None)
    config_held = ("num_blocks", "max_batch_tokens", "max_requests_per_batch")
    held = {k: getattr(eff, k, None) for k in config_held}
    held["block_size"] = getattr(eff, "block_size", None) or getattr(eff, "page_size", None)
    held["prefix_sharing"] = getattr(cache, "use_prefix_sharing", None)
    held["attn_implementation"] = getattr(model_config, "_attn_implementation", None)
    kv, seen = "the manager's KV cache", "the manager's model.config._attn_implementation"
    where = {"num_blocks": kv, "block_size": kv, "prefix_sharing": "cache.use_prefix_sharing"}
    where["attn_implementation"] = seen  # any other: "its config"
    asked = c.model_dump(exclude={"cuda_graphs"}) | {"attn_implementation": attn}  # the rows' order
    ran = None if manager is None else "continuous"
    rows = [("batching", "continuous", ran, "the manager's loop ran")]
    rows += [(f"continuous.{k}", v, held[k], where.get(k, "its config")) for k, v in asked.items()]
    out = []
    for name, want, got, where in rows:
        if manager is None:
            status = "unverified"
        elif want is None:
            status = "default"
        # an attention transformers pages for continuous batching (paged|sdpa) is the one asked for
        else:
            status = "applied" if got in (want, f"paged|{want}") else "ignored"
        out.append(Knob(name=name, requested=want, effective=got, status=status, evidence=where))
    return out


class TransformersEngine:
    def __init__(self, spec: TransformersSpec, model: ModelSpec, chat: bool | None):
        import torch
        import transformers

        self.spec, self.model_spec, self.torch = spec, model, torch
        # continuous batching: (sampling key, its running manager)
        self._cb: tuple[Any, Any] | None = None
        t0 = time.perf_counter()
        self.device = (
            ("cuda" if torch.cuda.is_available() else "cpu")
            if spec.device == "auto"
            else spec.device
        )
        if self.device == "cuda" and not torch.cuda.is_available():
            raise RunnerError("device is cuda but torch sees no CUDA device", field="engine.device")
        builtin_dir = ensure_builtin(model.id) if is_builtin(model.id) else None
        self.tokenizer = load_tokenizer(model, builtin_dir)
        self.chat = uses_chat_template(self.tokenizer, chat)
        self.model = self._load_model(builtin_dir)
        if self.device == "cuda":
            torch.cuda.synchronize()
        load_s = time.perf_counter() - t0
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        # its end-of-sequence ids and the tokenizer's
        eos = self.model.generation_config.eos_token_id
        self.eos_ids = {*(eos if isinstance(eos, list) else [eos]), self.tokenizer.eos_token_id}
        self.eos_ids -= {None}
        self.info = self._engine_info(transformers.__version__, load_s, builtin_dir is not None)
        # part of engine start: first-call kernel selection/JIT stays out of generation time
        if spec.warmup:
            pad = self.tokenizer.pad_token_id
            ids, mask = self._padded([self.tokenizer("Hello")["input_ids"] or [pad]], [0])
            self._model_generate(ids, mask, max_new_tokens=2, do_sample=False, pad_token_id=pad)
            self.info.load_s = time.perf_counter() - t0
        if self.device == "cuda":
            torch.cuda.reset_peak_memory_stats()

    def _load_model(self, builtin_dir: str | None) -> Any:
        """The model, in eval mode on self.device: random weights from its config (`load_format:
        dummy`), else the checkpoint's."""
        from transformers import AutoConfig, AutoModelForCausalLM, BitsAndBytesConfig

        torch, model, device, spec = self.torch, self.model_spec, self.device, self.spec
        source, revision = builtin_dir or model.id, None if builtin_dir else model.revision
        file = {}
        if model.gguf_path is not None:  # transformers reads the file itself, dequantizing on load
            path = gguf.readable(model)
            source, file = str(path.parent), {"gguf_file": path.name}
        # auto: the checkpoint's
        dtype = "float32" if model.dtype == "auto" and device == "cpu" else model.dtype
        torch_dtype = "auto" if dtype == "auto" else getattr(torch, dtype)
        # and the spec's kernel, bitsandbytes
        kwargs: dict[str, Any] = {"trust_remote_code": model.trust_remote_code}
        if spec.attn_implementation:
            kwargs["attn_implementation"] = spec.attn_implementation
        if model.load_format == "dummy":  # unquantized
            config = AutoConfig.from_pretrained(
                source, revision=revision, trust_remote_code=model.trust_remote_code, **file
            )
            with torch.device(device):
                random_dtype = (
                    config.dtype if torch_dtype == "auto" else torch_dtype
                ) or torch.float32
                loaded = AutoModelForCausalLM.from_config(config, dtype=random_dtype, **kwargs)
        else:
            if spec.quantization:
                bits = spec.quantization.removeprefix("bitsandbytes-")
                kwargs["quantization_config"] = BitsAndBytesConfig(
                    load_in_4bit=bits == "4bit", load_in_8bit=bits == "8bit"
                )
            loaded = AutoModelForCausalLM.from_pretrained(
                source,
                revision=revision,
                dtype=torch_dtype,
                device_map=device if device == "cuda" else None,
                **kwargs,
                **file,
            )
            if device == "cpu":
                loaded.to("cpu")
        return loaded.eval()

    def _engine_info(self, version: str, load_s: float, builtin: bool) -> EngineInfo:
        # its quant_method; None: unquantized
        q = qcfg = getattr(self.model.config, "quantization_config", None)
        if qcfg is not None:
            q = (
                qcfg.get("quant_method")
                if isinstance(qcfg, dict)
                else getattr(qcfg, "quant_method", qcfg)
            )
            q = str(getattr(q, "value", q))
        weights, m = self.model.get_memory_footprint() / 2**30, self.model
        cuda, cpu = self.device == "cuda", f"cpu ({platform.processor() or platform.machine()})"
        device = self.torch.cuda.get_device_name(0) if cuda else cpu
        info = EngineInfo("transformers", version, device, load_s, weights, quantization=q)
        info.gpus = int(cuda)
        info.batch = self.spec.batch_size if self.spec.batching == "static" else None
        info.extra["torch"] = self.torch.__version__
        info.notes += [SMOKE_NOTE] if builtin else []
        if (path := self.model_spec.gguf_path) is not None:
            info.extra["gguf"] = gguf.facts(path)
            info.notes.append(gguf.note(info.extra["gguf"], "transformers"))
        facts = TransformersFacts(
            self.device,
            str(next(m.parameters()).device),
            str(m.dtype).replace("torch.", ""),
            getattr(m.config, "_attn_implementation", None),
            q,
            weights,
        )
        info.knobs = self._static_knobs = transformers_knobs(self.spec, self.model_spec, facts)
        # read back after the first generation started the manager
        if self.spec.batching == "continuous":
            info.knobs = info.knobs + continuous_knobs(
                self.spec.continuous, None, self.spec.attn_implementation
            )
        return info

    def _model_generate(self, ids: Any, mask: Any, **kw: Any) -> Any:
        with self.torch.inference_mode():
            gen = self.model.generate(
                ids.to(self.device), attention_mask=mask.to(self.device), **kw
            )
        if self.device == "cuda":
            self.torch.cuda.synchronize()
        return gen

    def encode(self, messages: Sequence[Messages]) -> tuple[list[str], list[list[int]]]:
        return encode_prompts(self.tokenizer, list(messages), self.chat)

    def _gen_kwargs(self, s: Sampling) -> dict[str, Any]:
        from transformers import GenerationConfig

        # a fresh config: the checkpoint's generation_config.json (e.g. repetition_penalty 1.05)
        # must not
        # change decoding behind the recipe's back; vLLM gets exactly the recipe's settings too
        config = GenerationConfig(
            eos_token_id=sorted(self.eos_ids) or None, pad_token_id=self.tokenizer.pad_token_id
        )
        kw: dict[str, Any] = {"generation_config": config, "max_new_tokens": s.max_tokens}
        if s.temperature > 0:
            kw.update(
                do_sample=True, temperature=s.temperature, top_p=s.top_p, top_k=s.top_k or None
            )
        else:
            kw.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        if s.ignore_eos:
            kw["min_new_tokens"] = s.max_tokens
        if s.stop:
            kw.update(stop_strings=list(s.stop), tokenizer=self.tokenizer)
        return kw

    def _generation(self, toks: list[int], prompt: int, s: Sampling, took: float) -> Generation:
        n = len(toks)
        if not s.ignore_eos:  # up to and including the first end-of-sequence token
            n = next((k + 1 for k, t in enumerate(toks) if t in self.eos_ids), n)
        text = self.tokenizer.decode(toks[:n], skip_special_tokens=True)
        text, _ = truncate_at_stop(text, s.stop)
        return Generation(text=text, prompt_tokens=prompt, output_tokens=n, latency_s=took)

    def _padded(self, prompts: Sequence[list[int]], idx: list[int]) -> tuple[Any, Any]:
        """The prompts at idx, padded on the left to the longest, and their attention mask."""
        from torch.nn.utils.rnn import pad_sequence

        rows = [self.torch.tensor(prompts[i], dtype=self.torch.long) for i in idx]
        pad = self.tokenizer.pad_token_id
        ids = pad_sequence(rows, batch_first=True, padding_value=pad, padding_side="left")
        ones = [self.torch.ones_like(r) for r in rows]
        return ids, pad_sequence(ones, batch_first=True, padding_side="left")

    @contextlib.contextmanager
    def profiled(self, folder: Path) -> Iterator[None]:
        """torch's profiler over what runs inside (CPU operators; CUDA kernels on a GPU), its
        Chrome trace written to `folder`."""
        prof = self.torch.profiler
        acts = [prof.ProfilerActivity.CPU]
        acts += [prof.ProfilerActivity.CUDA] if self.device == "cuda" else []
        with prof.profile(activities=acts) as p:
            yield
            if self.device == "cuda":
                self.torch.cuda.synchronize()
        p.export_chrome_trace(str(folder / "trace.json"))

    def generate(
        self,
        requests: Sequence[Request],
        sampling: Sampling,
        progress: Advance | None = None,
        sink: Sink | None = None,
    ) -> list[Generation]:
        prompts = [r.ids for r in requests]
        if sampling.seed is not None:
            self.torch.manual_seed(sampling.seed)
        if self.spec.batching == "continuous":
            return self._generate_continuous(prompts, sampling, progress, sink)
        kw = self._gen_kwargs(sampling)
        out: list[Generation | None] = [None] * len(prompts)
        bs = self.spec.batch_size  # batches of several prompts: length-sorted (a stable sort)
        order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]) if bs > 1 else 0)
        for start in range(0, len(order), bs):
            idx = order[start : start + bs]
            ids, mask = self._padded(prompts, idx)
            t0 = time.perf_counter()
            gen = self._model_generate(ids, mask, **kw)
            dt = time.perf_counter() - t0
            for i, toks in zip(idx, gen[:, ids.shape[1] :].tolist()):
                out[i] = self._generation(toks, len(prompts[i]), sampling, dt)
            if sink:
                sink([(i, out[i]) for i in idx])
            if progress:
                progress(len(idx))
        if self.device == "cuda":
            self.info.extra["torch_peak_allocated_gib"] = (
                self.torch.cuda.max_memory_allocated() / 2**30
            )
        return out  # type: ignore[return-value]

    def prepare(self, sampling: Sampling) -> None:
        """Before the generation is timed: continuous batching's manager for these sampling settings
        (its KV cache allocated, warmed up, its loop started), kept across generations with the same
        settings."""
        if self.spec.batching != "continuous":
            return
        key = (sampling.temperature, sampling.top_p, sampling.top_k, sampling.ignore_eos)
        if self._cb is not None and self._cb[0] == key:
            return
        self._stop_manager()
        from transformers.generation.configuration_utils import ContinuousBatchingConfig

        t0 = time.perf_counter()
        kw = self._gen_kwargs(sampling)
        config = kw.pop("generation_config")
        config.update(
            **{k: v for k, v in kw.items() if k in ("do_sample", "temperature", "top_p", "top_k")}
        )
        if sampling.ignore_eos:
            # continuous batching's way to run every request to max_new_tokens
            config.eos_token_id = -1
        fields_ = set(getattr(ContinuousBatchingConfig, "__dataclass_fields__", {}))
        names = {"prefix_sharing": "allow_block_sharing", "cuda_graphs": "use_cuda_graph"}
        names["block_size"] = "block_size" if "block_size" in fields_ else "page_size"
        asked = self.spec.continuous.model_dump(exclude_none=True)
        cb = ContinuousBatchingConfig(
            **{names.get(k, k): v for k, v in asked.items() if names.get(k, k) in fields_}
        )
        manager = self.model.init_continuous_batching(
            generation_config=config, continuous_batching_config=cb
        )
        if self.spec.warmup and not manager.warmed_up:
            manager.warmup()
        manager.start()
        self._cb = (key, manager)
        setup = time.perf_counter() - t0
        # the first: part of the engine start (KV cache, warm-up)
        if "continuous_setup_s" not in self.info.extra:
            # (a later one, between generations, is in neither start nor generation)
            self.info.load_s += setup
        self.info.extra["continuous_setup_s"] = setup

    def _stop_manager(self) -> None:
        if self._cb is not None:
            manager, self._cb = self._cb[1], None
            manager.stop(block=True, timeout=30)
            if hasattr(manager, "destroy"):
                manager.destroy()

    def _generate_continuous(
        self,
        prompts: list[list[int]],
        sampling: Sampling,
        progress: Advance | None,
        sink: Sink | None,
    ) -> list[Generation]:
        self.prepare(sampling)
        manager = self._cb[1]  # type: ignore[index]
        t0 = time.perf_counter()
        ids = manager.add_requests(inputs=prompts, max_new_tokens=sampling.max_tokens)
        where = {rid: i for i, rid in enumerate(ids)}
        out: list[Generation | None] = [None] * len(prompts)
        while where:
            got = manager.get_result(timeout=1)
            if got is None:
                if not manager.is_running():
                    raise RunnerError(
                        "transformers' continuous batching loop stopped before every request "
                        "finished"
                    )
                continue
            if not got.is_finished() or got.request_id not in where:
                continue
            if got.error is not None:
                raise RunnerError(f"continuous batching: request failed: {got.error}")
            i = where.pop(got.request_id)
            toks, took = list(got.generated_tokens), time.perf_counter() - t0
            out[i] = self._generation(toks, len(prompts[i]), sampling, took)
            if sink:
                sink([(i, out[i])])
            if progress:
                progress(1)
        knobs = continuous_knobs(self.spec.continuous, manager, self.spec.attn_implementation)
        self.info.knobs = self._static_knobs + knobs
        ran = knobs[-1].effective  # continuous.attn_implementation
        if ran and "flash" not in str(ran):
            note = (
                f"Continuous batching ran with {ran} attention: without flash attention "
                "transformers builds an attention mask for every step (it says continuous "
                "batching is much better with flash attention)."
            )
            self.info.notes += [note] if note not in self.info.notes else []
        return out  # type: ignore[return-value]

    def reset_prefix_cache(self) -> bool | None:
        """Static batches keep no cache. Continuous batching may keep shared prefix blocks in its
        manager: the manager is ended, and the next generation's `prepare` builds a fresh one
        (outside the timed window)."""
        if self.spec.batching != "continuous":
            return None
        self._stop_manager()
        return True

    def close(self) -> None:
        self._stop_manager()
        del self.model
        gc.collect()
        if self.device == "cuda":
            self.torch.cuda.empty_cache()
