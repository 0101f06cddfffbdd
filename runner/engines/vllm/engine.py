"""`VLLMEngine`: `vllm.LLM` built from a `VLLMSpec` in the recipe's own process (vllm and torch are
imported only there), the facts read back from its configs and its part of engine.log, the streaming
generation loop, vLLM's counters over each call, the optional warm-up batch."""

from __future__ import annotations

import contextlib
import copy
import gc
import hashlib
import importlib
import importlib.metadata
import json
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from filelock import FileLock

import runner.engines.gguf as gguf  # the module, not the package: tests patch its functions
from runner.base.errors import RunnerError
from runner.base.nvml import device_facts
from runner.base.types import PROFILE_ENV, EngineInfo, Generation
from runner.engines.builtin import cache_root
from runner.engines.hf import encode_prompts, take_tokenizer, uses_chat_template
from runner.engines.vllm.facts import (
    VLLMFacts,
    compile_cache_dir,
    effective_engine_args,
    parse_engine_log,
    start_parts,
    unquantized_gib,
    vllm_knobs,
)

if TYPE_CHECKING:
    from runner.base.types import Advance, Messages, ModelSpec, Request, Sampling, Sink


def load_vllm_tokenizer_ahead(kwargs: dict[str, Any]) -> Any:
    """Load vLLM's own tokenizer now (a job's process, while the job before it runs). `LLM()`'s
    front end loads it through an lru_cache, `vllm.tokenizers.cached_get_tokenizer`, which vLLM
    0.26's `cached_tokenizer_from_config` calls with the model config's tokenizer and these keywords
    in this order (the cache's key); the engine process, forked, inherits the cache. A key that
    differs (a hub id under HF_HUB_OFFLINE=1, which vLLM turns into its snapshot's path; a model
    type for which vLLM picks its own tokenizer mode) only costs vLLM its own load, as before."""
    from vllm.tokenizers import cached_get_tokenizer

    revision = kwargs.get("tokenizer_revision")
    return cached_get_tokenizer(
        kwargs.get("tokenizer") or kwargs["model"],
        runner_type="generate",
        tokenizer_mode=str(kwargs.get("tokenizer_mode") or "auto").lower(),
        revision=kwargs.get("revision") if revision is None else revision,
        trust_remote_code=kwargs.get("trust_remote_code", False),
    )


def copy_tokenizer_ahead(tokenizer: Any, kwargs: dict[str, Any]) -> None:
    """Make now (a job's process, while the job before it runs) the deep copies of vLLM's cached
    tokenizer that `LLM()` would make. vLLM 0.26's renderer makes its tokenizer thread-safe for the
    server's workers by deep-copying it `renderer_num_workers` + 1 times inside `LLM()`, each copy
    rebuilt through `get_cached_tokenizer` (`__reduce__`): ~1 s a copy for Qwen2.5's 151k-token
    vocabulary, ~2.2 s of every start (reports/h100-engine-imports). Each deep copy made during the
    start takes one made here, never one given before, and only while the tokenizer is as it was
    when they were made (a renderer that adds a token, `enable_prompt_embeds`, gets its own); else
    it copies as before. `release_tokenizer_copies` ends it after `LLM()`. A tokenizer vLLM does
    not wrap that way, or one it does not copy, is left alone."""
    if kwargs.get("enable_prompt_embeds") or kwargs.get("skip_tokenizer_init"):
        return
    rebuild, args, *_ = tokenizer.__reduce__()
    if getattr(rebuild, "__name__", "") != "get_cached_tokenizer" or len(args) != 1:
        return
    base = args[0]
    if not isinstance(tokenizer, type(base)) or "__deepcopy__" in vars(base):
        return
    n = int(kwargs.get("renderer_num_workers", 1)) + 1
    hook = _CopiesAhead(base, rebuild, [copy.deepcopy(tokenizer) for _ in range(n)])
    _hooks.append(hook)
    # an instance attribute, found on every copy of `base` (copy.copy copies its __dict__)
    vars(base)["__deepcopy__"] = hook


class _CopiesAhead:
    """A tokenizer's `__deepcopy__`: the copies made ahead while the tokenizer keeps its size, then
    copies made as before. Pickled (a tokenizer sent to another process), it becomes None, and
    `copy.deepcopy` there copies as before."""

    def __init__(self, base: Any, rebuild: Callable[[Any], Any], made: list[Any]):
        self.base, self.rebuild, self.made, self.size = base, rebuild, made, len(base)

    def __call__(self, memo: dict) -> Any:
        if self.made and len(self.base) == self.size:
            return self.made.pop()
        self.made.clear()  # (none left, or a token was added since: none of them fits)
        plain = copy.copy(self.base)
        vars(plain).pop("__deepcopy__", None)
        return self.rebuild(copy.deepcopy(plain, memo))

    def __reduce__(self) -> tuple[type[None], tuple[()]]:
        return type(None), ()


# the hooks `copy_tokenizer_ahead` set in this process that `release_tokenizer_copies` has not ended
_hooks: list[_CopiesAhead] = []


def tokenizer_copies_left() -> int:
    return sum(len(h.made) for h in _hooks)


def release_tokenizer_copies(llm: Any = None) -> None:
    """After `LLM()` (made, or failed: None): the copies it did not take are dropped, and the hook
    taken off the tokenizers it was set on and off `llm`'s own (a copy of the original that still
    carries it), so a later deep copy of them is vLLM's own again."""
    for h in _hooks:
        h.made.clear()
        vars(h.base).pop("__deepcopy__", None)
    _hooks.clear()
    if llm is not None:
        with contextlib.suppress(Exception):  # (none: `skip_tokenizer_init`)
            vars(llm.get_tokenizer()).pop("__deepcopy__", None)


def front_modules_file(version: str) -> Path:
    """Where the modules `LLM()`'s front end imported in earlier starts with this vLLM version are
    kept (a list in import order, under $RUNNER_CACHE)."""
    return cache_root() / "vllm-front" / f"{version}.json"


def _kept(path: Path) -> list[str]:
    """A list of names kept under $RUNNER_CACHE (none: not kept yet, or unreadable)."""
    with contextlib.suppress(OSError, ValueError):
        names = json.loads(path.read_text())
        if isinstance(names, list):
            return [n for n in names if isinstance(n, str)]
    return []


def _kept_front(version: str) -> list[str]:
    return _kept(front_modules_file(version))


def load_front_modules_ahead() -> None:
    """Import now (a job's process, while the job before it runs) the modules `LLM()`'s front end
    imported in earlier starts with this vLLM version, in that order: vLLM imports lazily, and the
    ~600 of an fp8 start would otherwise be imported inside it (1.5-2.3 s ahead on an H100,
    reports/h100-front). Each was imported by a front end that left CUDA alone (only such starts
    add to the list), so vLLM still forks its engine process instead of spawning it; one whose
    import here initializes CUDA all the same is taken off the list, and none after it imported."""
    import torch
    import vllm

    names = _kept_front(vllm.__version__)
    for name in names if not torch.cuda.is_initialized() else ():
        with contextlib.suppress(Exception):  # a loader-made name is not importable
            importlib.import_module(name)
        if torch.cuda.is_initialized():  # this start will spawn; the next need not
            _update_front(vllm.__version__, lambda kept, bad=name: [n for n in kept if n != bad])
            return


def _keep_front(version: str, names: list[str]) -> None:
    """Add to the kept list what this start's front end imported that it lacks (not a checkpoint's
    own code, `trust_remote_code`: it belongs to one model)."""
    mine = [n for n in names if not n.startswith("transformers_modules")]

    def add(kept: list[str]) -> list[str]:
        have = set(kept)
        return kept + [n for n in mine if n not in have]

    _update_front(version, add)


def _update_front(version: str, change: Callable[[list[str]], list[str]]) -> None:
    _update_kept(front_modules_file(version), change)


def _update_kept(path: Path, change: Callable[[list[str]], list[str]]) -> None:
    """A kept list read, changed and written whole under a lock: the job running and the next
    job's process, started ahead, may both change it."""
    with contextlib.suppress(OSError):  # (a lock not had in time is a TimeoutError)
        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(f"{path}.lock", timeout=10):
            if (names := change(kept := _kept(path))) != kept:
                tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
                tmp.write_text(json.dumps(names))
                os.replace(tmp, path)


def autotune_file(version: str) -> Path:
    """Where the configurations whose FlashInfer autotuning found nothing to tune are kept, for
    this vLLM version (a list of `autotune_key`s under $RUNNER_CACHE)."""
    return cache_root() / "vllm-autotune" / f"{version}.json"


# how much GPU memory the engine takes: no shape the autotuning tunes (vLLM's compile hash leaves
# them out too), so a start with another share of the GPU is the same configuration
_AUTOTUNE_MEMORY = ("gpu_memory_utilization", "kv_cache_memory_bytes", "num_gpu_blocks_override")


def autotune_key(kwargs: dict[str, Any], gpu: str) -> str | None:
    """A configuration as the autotuning sees it: `LLM()`'s arguments less the memory it takes, the
    GPU's name, the model's config.json, the engine's environment (`VLLM_*`, `FLASHINFER_*`,
    `CUDA_VISIBLE_DEVICES`: some change what is tuned) and the versions of torch, CUDA and
    FlashInfer (None: not expressible)."""
    kwargs = {k: v for k, v in kwargs.items() if k not in _AUTOTUNE_MEMORY}
    config, config_hash = Path(str(kwargs.get("model", ""))) / "config.json", None
    with contextlib.suppress(OSError):  # (a hub id: its name is in the arguments)
        config_hash = hashlib.sha256(config.read_bytes()).hexdigest()
    env = {
        k: v
        for k, v in os.environ.items()
        if k.startswith(("VLLM_", "FLASHINFER_")) or k == "CUDA_VISIBLE_DEVICES"
    }
    libs = []
    for name in ("torch", "flashinfer-python", "flashinfer-cubin", "nvidia-cublas-cu13"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            libs.append(f"{name} {importlib.metadata.version(name)}")
    try:
        text = json.dumps([kwargs, gpu, config_hash, env, libs], sort_keys=True, default=str)
    except TypeError:  # (keys of mixed types)
        return None
    return hashlib.sha256(text.encode()).hexdigest()


def skip_autotune(
    kwargs: dict[str, Any], key: str | None, version: str, accepted: set[str]
) -> bool:
    """Whether to start without FlashInfer's autotuning: an earlier start of this configuration
    found nothing to tune, and the recipe set neither `enable_flashinfer_autotune` nor a
    `kernel_config` itself. vLLM 0.26 autotunes in every start at its default optimization level
    on Hopper and later with FlashInfer installed, a forward pass of `max_num_batched_tokens`
    tokens: ~12-14 s of a CPU-offload start, none visible in others (reports/h100-second-run)."""
    return (
        key is not None
        and "enable_flashinfer_autotune" in accepted
        and not {"enable_flashinfer_autotune", "kernel_config"} & set(kwargs)
        and key in _kept(autotune_file(version))
    )


def remember_autotune(version: str, key: str | None, parsed: dict[str, float]) -> None:
    """After a start: a configuration whose autotuning found nothing is kept, one that loaded
    tactics is taken off; a start without autotuning (left out, tensor parallel: vLLM logs
    neither) changes nothing."""
    if key is None:
        return
    if parsed.get("autotune_found_none"):
        _update_kept(autotune_file(version), lambda kept: [*kept, key] if key not in kept else kept)
    elif parsed.get("autotune_loaded"):
        _update_kept(autotune_file(version), lambda kept: [k for k in kept if k != key])


def _tokenizer_lookups() -> tuple[int, int] | None:
    """vLLM's tokenizer cache's hits and misses so far (None: a vLLM without it)."""
    with contextlib.suppress(Exception):
        from vllm.tokenizers import cached_get_tokenizer

        info = cached_get_tokenizer.cache_info()
        return info.hits, info.misses
    return None


def _tokenizer_ahead(before: tuple[int, int] | None, after: tuple[int, int] | None) -> bool | None:
    """Whether `LLM()` found its tokenizer loaded (a hit, no load); None where it looked none up
    (`skip_tokenizer_init`) or the cache is unknown."""
    if before is None or after is None or after == before:
        return None
    return after[1] == before[1]


def warmup_prompts(
    max_num_seqs: int, max_num_batched_tokens: int, vocab_size: int, max_model_len: int
) -> list[list[int]]:
    """The warm-up batch: as many prompts as the engine runs at once, together as long as its
    largest step (at least one token each; at most 2,048, and room for 2 output tokens within
    `max_model_len`), of token ids below `vocab_size`, the first token different for each where the
    vocabulary allows."""
    n = max(1, max_num_seqs)
    length = max(1, min(max_num_batched_tokens // n, 2048, max_model_len - 2))
    top = max(2, min(vocab_size, 100_000))
    return [[(i * 7919 + j * 104_729 + 1) % top for j in range(length)] for i in range(n)]


def sampling_params_kwargs(s: Sampling) -> dict[str, Any]:
    return {
        "temperature": s.temperature,
        "top_p": s.top_p if s.temperature > 0 else 1.0,
        "top_k": s.top_k if s.temperature > 0 else 0,
        "max_tokens": s.max_tokens,
        "stop": list(s.stop) or None,
        "ignore_eos": s.ignore_eos,
        "seed": s.seed,
    }


_CUDA_BEFORE = (
    "CUDA was initialized in the job's process before the engine started, so vLLM started its "
    "engine process by spawn instead of fork (a slower start: it imports everything again)"
)
_KEPT_METRICS = {
    "vllm:prefix_cache_queries",
    "vllm:prefix_cache_hits",
    "vllm:prompt_tokens",
    "vllm:generation_tokens",
    "vllm:num_preemptions",
}


class VLLMEngine:
    # a VLLMSpec (spec.py imports this module)
    def __init__(self, spec: Any, model: ModelSpec, chat: bool | None):
        spec.set_env()
        try:
            import vllm
            from vllm import LLM  # vLLM loads it lazily: its import stays out of the start's time
        except ImportError as e:
            fix = "install vllm on a GPU host or use `engine: kind: transformers`"
            raise RunnerError(
                f"vLLM is not installed in this Python ({e}); {fix}", field="engine.kind"
            ) from None
        import torch

        self.spec, self.model_spec = spec, model
        # a GGUF file: its safetensors copy, made once
        self.loaded, converted = gguf.vllm_model(model)
        kwargs, self.dropped = _accepted_kwargs(spec.llm_kwargs(self.loaded), vllm.__version__)
        gpu = device_facts().get("gpu", "")  # NVML: no CUDA context in this process
        tune_key = autotune_key(kwargs, gpu)
        if no_tune := skip_autotune(kwargs, tune_key, vllm.__version__, _engine_fields()):
            kwargs["enable_flashinfer_autotune"] = False
        self._traces = None
        if os.environ.get(PROFILE_ENV):  # a recipe of this job profiles: the profiler is set up now
            self._traces = tempfile.mkdtemp(prefix="runner-vllm-profile-")
            kwargs["profiler_config"] = {
                "profiler": "torch",
                "torch_profiler_dir": self._traces,
                "torch_profiler_with_stack": False,
            }
        self.tokenizer = take_tokenizer(model)
        self.chat = uses_chat_template(self.tokenizer, chat)
        log = Path(os.environ.get("RUNNER_ENGINE_LOG", ""))
        log_start = log.stat().st_size if log.is_file() else 0
        looked = _tokenizer_lookups()
        copies = tokenizer_copies_left()
        kept = _kept_front(vllm.__version__)
        before = set(sys.modules.copy())  # (a copy: another thread may import meanwhile)
        notes = [gguf.note(converted, "vllm")] if converted else []
        if torch.cuda.is_initialized():  # vLLM will spawn its engine process, not fork it
            notes.append(_CUDA_BEFORE)
        t0 = time.perf_counter()
        llm = None
        try:
            self.llm = llm = LLM(**kwargs)
            copies -= tokenizer_copies_left()
        finally:
            release_tokenizer_copies(llm)
        ahead = _tokenizer_ahead(looked, _tokenizer_lookups())
        front = [n for n in sys.modules.copy() if n not in before]
        if not torch.cuda.is_initialized():
            _keep_front(vllm.__version__, front)
        # the engine's part of the log: what it wrote since
        since = log.read_bytes()[log_start:].decode("utf-8", "replace") if log.is_file() else ""
        self.facts, parsed = self._read_facts(vllm.__version__, since)
        remember_autotune(vllm.__version__, tune_key, parsed)
        t_warm = time.perf_counter()
        warm = warm_up(self.llm) if spec.warmup else None
        warm_s = time.perf_counter() - t_warm if warm else None
        f, load_s = self.facts, time.perf_counter() - t0
        extra = {
            "torch": torch.__version__,
            "kv_cache_gib": parsed.get("kv_cache_gib"),
            "model_runner": f.model_runner,
            "env": spec.engine_env(),
            "block_size": self._block_size,
            "start": start_parts(parsed, f.compile_cache_dir, load_s, warm_s)
            | {
                "tokenizer_ahead": ahead,
                "tokenizer_copies_ahead": copies,
                "modules_ahead": sum(n in before for n in kept),
                "modules_in_start": len(front),
                "autotune_skipped": no_tune,
            },
        }
        if warm:
            extra["warmup"] = warm
        if converted:
            extra["gguf"] = converted
        self.info = EngineInfo(
            "vllm",
            vllm.__version__,
            gpu,
            load_s,
            f.weights_gib,
            f.kv_cache_tokens,
            f.quantization,
            notes=notes,
            extra=extra,
            gpus=f.tensor_parallel_size or spec.tensor_parallel_size,
            batch=self.llm.llm_engine.vllm_config.scheduler_config.max_num_seqs,
        )

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
        shrinks = spec.quantization or mc.quantization or spec.cpu_offload_gb > 0
        full = unquantized_gib(self.loaded.id, model.trust_remote_code) if shrinks else None
        lf = getattr(vc.load_config, "load_format", "")
        # unless the log says V2
        env_runner = "V1" if os.environ.get("VLLM_USE_V2_MODEL_RUNNER") == "0" else "unknown"
        return VLLMFacts(
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
            model_runner="V2" if parsed.get("v2_runner") else env_runner,
            kv_cache_tokens=int(kv_tokens) if kv_tokens else None,
            version=version,
            swap_space=getattr(cc, "swap_space", None),
            dropped=dict(self.dropped),
            engine_args=effective_engine_args(vc, spec.engine_args),
            compile_cache_dir=compile_cache_dir(log),
            profiling_skipped=bool(parsed.get("profiling_skipped")),
        ), parsed

    def encode(self, messages: Sequence[Messages]) -> tuple[list[str], list[list[int]]]:
        return encode_prompts(self.tokenizer, list(messages), self.chat)

    def generate(
        self,
        requests: Sequence[Request],
        sampling: Sampling,
        progress: Advance | None = None,
        sink: Sink | None = None,
    ) -> list[Generation]:
        """All requests go to the engine at once (as `LLM.generate` does); finished outputs are
        handed to `sink` step by step, so an interrupted run keeps every sample it finished."""
        from vllm import SamplingParams

        sp = SamplingParams(**sampling_params_kwargs(sampling))
        before = self._read_metrics()
        t0 = time.perf_counter()
        ids = self.llm.enqueue([{"prompt_token_ids": r.ids} for r in requests], sp, use_tqdm=False)
        # handing the requests over
        self.info.extra["enqueue_s"] = round(time.perf_counter() - t0, 3)
        # enqueue() returns vLLM's internal ids ("<n>-<8 random chars>"); outputs carry the external
        # "<n>"
        index = {key: i for i, rid in enumerate(ids) for key in (rid, rid.split("-", 1)[0])}
        gens: list[Generation | None] = [None] * len(requests)
        engine = self.llm.llm_engine
        try:
            while engine.has_unfinished_requests():  # each step's finished requests handed on
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
        except BaseException:
            # (the sink's scoring or writing failed, or an interrupt): the requests left would
            # go on holding blocks, and their outputs would reach the next generation
            with contextlib.suppress(Exception):
                engine.abort_request(list(ids), internal=True)
            raise
        if missing := [i for i, g in enumerate(gens) if g is None]:
            raise RuntimeError(
                f"vLLM finished without outputs for {len(missing)} requests (first: {missing[0]})"
            )
        # the counters' growth over this call, not the warm-up's nor an earlier cell's ({} where a
        # reading failed)
        # (a counter absent before counts from 0)
        after = None if before is None else self._read_metrics()
        self.info.extra["metrics"] = (
            {}
            if before is None or after is None
            else {k: v - before.get(k, 0) for k, v in after.items()}
        )
        cached = sum(g.cached_tokens or 0 for g in gens)  # type: ignore[union-attr]
        prompt = sum(g.prompt_tokens for g in gens)  # type: ignore[union-attr]
        self.info.knobs = vllm_knobs(
            self.spec, self.model_spec.load_format, self.facts, cached, prompt
        )
        return gens  # type: ignore[return-value]

    def reset_prefix_cache(self) -> bool | None:
        """None without a prefix cache (vLLM's own setting: it turns it off for some models);
        vLLM refuses while a request still holds blocks (an aborted one frees them a step later):
        up to 20 tries, 50 ms apart."""
        if not self.facts.prefix_caching:
            return None
        for attempt in range(20):
            if self.llm.reset_prefix_cache():
                return True
            if attempt < 19:
                time.sleep(0.05)
        return False

    def _read_metrics(self) -> dict[str, float] | None:
        """vLLM's counters kept for the report, summed over their labels (None where
        unavailable)."""
        metrics: Counter = Counter()
        try:
            for mt in self.llm.get_metrics():
                if hasattr(mt, "value") and mt.name in _KEPT_METRICS:
                    metrics[mt.name] += mt.value
        except Exception as e:  # metrics are evidence, not the result: record and go on
            note = f"vLLM metrics unavailable: {e}"
            if note not in self.info.notes:
                self.info.notes.append(note)
            return None
        return metrics

    @contextlib.contextmanager
    def profiled(self, folder: Path) -> Iterator[None]:
        """vLLM's torch profiler in its workers (`LLM.start_profile`/`stop_profile`), their traces
        moved to `folder` once written."""
        if self._traces is None:
            raise RunnerError("the engine was started without its profiler", field="profile")
        self.llm.start_profile()
        yield
        self.llm.stop_profile()
        deadline = time.monotonic() + 120  # the workers write the traces after stopping
        while not any(Path(self._traces).rglob("*.json*")) and time.monotonic() < deadline:
            time.sleep(0.5)
        time.sleep(1.0)
        for p in Path(self._traces).iterdir():
            shutil.move(str(p), folder / p.name)

    def close(self) -> None:
        if getattr(self, "llm", None) is None:
            return
        # best effort: the isolating parent kills the process group anyway
        with contextlib.suppress(Exception):
            core = self.llm.llm_engine.engine_core
            try:
                core.shutdown(timeout=10)
            except TypeError:
                core.shutdown()
        del self.llm
        gc.collect()


def _engine_fields() -> set[str]:
    """The arguments the installed vLLM's `LLM()` accepts (its EngineArgs)."""
    from vllm.engine.arg_utils import EngineArgs

    return {f.name for f in fields(EngineArgs)}


def _accepted_kwargs(kwargs: dict[str, Any], version: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """`vllm.LLM` kwargs the installed vLLM accepts, and those dropped (`swap_space` where it has no
    such argument: reported as ignored); any other argument it does not accept is an error."""
    accepted = _engine_fields()
    dropped: dict[str, Any] = {}
    if "swap_space" in kwargs and "swap_space" not in accepted:
        dropped["swap_space"] = kwargs.pop("swap_space")
    if bad := sorted(set(kwargs) - accepted):
        msg = f"vLLM {version} does not accept {', '.join(bad)}; it accepts: " + ", ".join(
            sorted(accepted)
        )
        raise RunnerError(msg, field="engine.engine_args")
    return kwargs, dropped


def _generation(o: Any, prompt_tokens: int) -> Generation:
    c, m = o.outputs[0], o.metrics
    ttft, e2e = getattr(m, "first_token_latency", None), None
    if ttft is not None and getattr(m, "last_token_ts", None) and m.first_token_ts:
        e2e = ttft + (m.last_token_ts - m.first_token_ts)
    return Generation(c.text, prompt_tokens, len(c.token_ids), o.num_cached_tokens, ttft, e2e)


def warm_up(llm: Any) -> str:
    """`engine.warmup`: one synthetic batch at a `vllm.LLM`'s limits (`warmup_prompts`), 2 output
    tokens each, then its prefix cache emptied (part of the engine start); what ran, for the
    report."""
    from vllm import SamplingParams

    vc = llm.llm_engine.vllm_config
    sc, mc = vc.scheduler_config, vc.model_config
    prompts = warmup_prompts(
        sc.max_num_seqs, sc.max_num_batched_tokens, mc.get_vocab_size(), mc.max_model_len
    )
    t0 = time.perf_counter()
    sp = SamplingParams(max_tokens=2, ignore_eos=True, temperature=0.0)
    llm.generate([{"prompt_token_ids": p} for p in prompts], sp, use_tqdm=False)
    emptied = llm.reset_prefix_cache()
    took_s = time.perf_counter() - t0
    kept = "" if emptied else "; vLLM did not empty the prefix cache after it"
    return (
        f"{len(prompts):,} prompts of {len(prompts[0]):,} tokens, 2 output tokens each, "
        f"{took_s:.1f} s (part of the engine start){kept}"
    )
