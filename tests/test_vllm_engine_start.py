"""The vLLM engine's start, against a stand-in `vllm` package (vLLM itself is tested on the GPU):
the arguments it hands `vllm.LLM`, which it drops or refuses, and the facts it reads back from the
engine's configs and log, the figures the knob verdicts and the report stand on."""

import copy
import dataclasses
import functools
import json
import pickle
import sys
import time
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

import runner.engines.vllm.engine as vllm_engine
from runner.base.errors import RunnerError
from runner.base.types import EngineSpecBase, ModelSpec
from runner.engines.vllm import VLLMSpec
from runner.engines.vllm.engine import VLLMEngine

LOG = (
    "INFO Model loading took 14.25 GiB memory and 3.50 seconds\n"
    "INFO Available KV cache memory: 101.37 GiB\n"
    "INFO GPU KV cache size: 1,898,208 tokens\n"
    "INFO Using V2 Model Runner\n"
)


def _stand_in(monkeypatch, tmp_path, *, cache=None, quantization=None, accepted=None, log=LOG):
    """A `vllm` package whose LLM() writes `log` to the engine log (as vLLM's own output would land
    there), sleeps 50 ms, and holds a config shaped like vLLM 0.26's VllmConfig."""
    made = {}

    class LLM:
        def __init__(self, **kwargs):
            made.update(kwargs)
            with open(tmp_path / "engine.log", "a") as f:
                f.write(log)
            time.sleep(0.05)
            cc = cache or SimpleNamespace(
                block_size=16,
                num_gpu_blocks=1000,
                enable_prefix_caching=True,
                gpu_memory_utilization=0.85,
                cache_dtype="fp8",
                swap_space=None,
            )
            mc = SimpleNamespace(quantization=quantization, enforce_eager=False, max_model_len=4096)
            self.llm_engine = SimpleNamespace(
                vllm_config=SimpleNamespace(
                    cache_config=cc,
                    model_config=mc,
                    parallel_config=SimpleNamespace(tensor_parallel_size=1),
                    load_config=SimpleNamespace(load_format=SimpleNamespace(value="DUMMY")),
                    scheduler_config=SimpleNamespace(max_num_seqs=256),
                )
            )

    # every argument we pass
    every = VLLMSpec(kind="vllm", enable_prefix_caching=True, seed=0).llm_kwargs(_model())
    names = accepted if accepted is not None else set(every) - {"swap_space"}
    args = dataclasses.make_dataclass("EngineArgs", sorted(names))
    vllm = ModuleType("vllm")
    vllm.__version__, vllm.LLM = "0.26.0", LLM
    arg_utils = ModuleType("vllm.engine.arg_utils")
    arg_utils.EngineArgs = args
    for name, mod in (
        ("vllm", vllm),
        ("vllm.engine", ModuleType("vllm.engine")),
        ("vllm.engine.arg_utils", arg_utils),
    ):
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.setenv("RUNNER_ENGINE_LOG", str(tmp_path / "engine.log"))
    (tmp_path / "engine.log").write_text(
        "earlier recipe: Model loading took 99.0 GiB memory and 1.0 seconds\n"
    )
    monkeypatch.setattr(vllm_engine, "device_facts", lambda: {"gpu": "NVIDIA H200"})
    # the modules a start imports are kept under $RUNNER_CACHE: the test's own
    monkeypatch.setenv("RUNNER_CACHE", str(tmp_path / "runner-cache"))
    return made


def _model():
    return ModelSpec(id="builtin:demo")


def test_facts_come_from_the_engines_config_and_this_starts_part_of_the_log(monkeypatch, tmp_path):
    pytest.importorskip("transformers")
    _stand_in(monkeypatch, tmp_path)
    monkeypatch.setattr(
        vllm_engine, "unquantized_gib", lambda *a: pytest.fail("no knob needs the full size here")
    )
    eng = VLLMEngine(VLLMSpec(kind="vllm", enable_prefix_caching=True), _model(), chat=None)
    f = eng.facts
    assert f.kv_cache_tokens == 16_000  # num_gpu_blocks x block_size, ahead of the log's figure
    # this start's line, not the earlier recipe's 99.0 in the same log
    assert f.weights_gib == 14.25
    assert (f.prefix_caching, f.gpu_memory_utilization, f.cache_dtype) == (True, 0.85, "fp8")
    assert (f.load_format, f.model_runner, f.version, f.max_model_len) == (
        "dummy",
        "V2",
        "0.26.0",
        4096,
    )
    assert (
        eng.info.kv_cache_tokens == 16_000
        and eng.info.weights_gib == 14.25
        and eng.info.device == "NVIDIA H200"
    )
    assert eng.info.extra["kv_cache_gib"] == 101.37 and eng.info.extra["block_size"] == 16
    assert eng.info.batch == 256  # max_num_seqs: a profile's window
    assert 0.05 <= eng.info.load_s < 5  # the LLM() call, timed


def test_kv_capacity_falls_back_to_the_log_and_a_quantized_model_gets_its_full_size(
    monkeypatch, tmp_path
):
    pytest.importorskip("transformers")
    cache = SimpleNamespace(
        block_size=16,
        num_gpu_blocks=None,
        enable_prefix_caching=False,
        gpu_memory_utilization=0.9,
        cache_dtype="auto",
    )
    _stand_in(monkeypatch, tmp_path, cache=cache, quantization="awq")
    monkeypatch.setattr(vllm_engine, "unquantized_gib", lambda source, trust: 14.19)
    f = VLLMEngine(VLLMSpec(kind="vllm"), _model(), chat=None).facts
    assert f.kv_cache_tokens == 1_898_208 and f.quantization == "awq" and f.unquantized_gib == 14.19
    assert f.swap_space is None and f.prefix_caching is False


def test_the_sampler_switch_is_set_only_where_the_user_left_it_unset(monkeypatch, tmp_path):
    pytest.importorskip("transformers")
    import os

    made = _stand_in(monkeypatch, tmp_path)
    monkeypatch.setenv("VLLM_USE_FLASHINFER_SAMPLER", "1")
    monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)
    VLLMEngine(VLLMSpec(kind="vllm", cpu_offload_gb=4), _model(), chat=None)
    assert os.environ["VLLM_USE_FLASHINFER_SAMPLER"] == "1"  # the user's choice kept
    assert os.environ["VLLM_USE_V2_MODEL_RUNNER"] == "0"  # offload needs the V1 runner: always set
    assert made["cpu_offload_gb"] == 4 and made["model"] == "builtin:demo"


def test_swap_space_is_dropped_where_vllm_has_none_and_an_unknown_argument_is_refused(
    monkeypatch, tmp_path
):
    _stand_in(monkeypatch, tmp_path, accepted={"model", "dtype"})
    kept, dropped = vllm_engine._accepted_kwargs({"model": "m", "swap_space": 4}, "0.26.0")
    assert kept == {"model": "m"} and dropped == {"swap_space": 4}
    with pytest.raises(RunnerError) as e:
        vllm_engine._accepted_kwargs({"model": "m", "max_num_seqz": 8}, "0.26.0")
    assert e.value.field == "engine.engine_args"
    assert e.value.message == "vLLM 0.26.0 does not accept max_num_seqz; it accepts: dtype, model"
    with pytest.raises(RunnerError) as e:  # every name it does not accept, sorted
        vllm_engine._accepted_kwargs({"model": "m", "swap_space": 4, "zz": 1, "bogus": 1}, "0.26.0")
    assert e.value.message.startswith("vLLM 0.26.0 does not accept bogus, zz; it accepts")


def test_without_vllm_the_engine_says_how_to_get_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` raises ImportError
    with pytest.raises(RunnerError) as e:
        VLLMEngine(VLLMSpec(kind="vllm"), _model(), chat=None)
    assert (
        e.value.field == "engine.kind" and "vLLM is not installed in this Python" in e.value.message
    )
    assert "use `engine: kind: transformers`" in e.value.message


def test_a_gguf_model_runs_from_its_safetensors_copy_and_says_so(monkeypatch, tmp_path):
    """vLLM has no GGUF loader: it gets the copy's folder as model and tokenizer, and the report a
    note."""
    pytest.importorskip("transformers")
    from runner.engines import gguf
    from runner.engines.builtin import ensure_builtin

    made = _stand_in(monkeypatch, tmp_path)
    # stands in for the converted folder (config, weights, tokenizer)
    copy = ensure_builtin("builtin:demo")
    facts = {
        "file": str(tmp_path / "m.Q4_1.gguf"),
        "sha256": "ab",
        "quantization": "Q4_1",
        "copy": copy,
    }
    facts |= {"converted": True, "convert_s": 12.34}
    (tmp_path / "m.Q4_1.gguf").write_bytes(b"GGUF")
    monkeypatch.setattr(gguf, "safetensors_dir", lambda m: (Path(copy), facts))
    monkeypatch.setattr(gguf, "tokenizer_dir", lambda m: Path(copy))
    eng = VLLMEngine(VLLMSpec(kind="vllm"), ModelSpec(id=str(tmp_path / "m.Q4_1.gguf")), chat=None)
    assert made["model"] == copy and made["tokenizer"] == copy
    assert eng.info.extra["gguf"] == facts
    assert eng.info.notes[-1] == (
        "Weights dequantized from Q4_1 (m.Q4_1.gguf) into a float32 safetensors copy (converted "
        f"in this run, 12.3 s: {copy}); vLLM has no GGUF loader."
    )


def test_the_engine_start_is_the_llm_call_not_the_lazy_import_of_vllm_llm(monkeypatch, tmp_path):
    """vLLM imports `vllm.LLM` on first use (1.5-3 s of modules): resolved before the clock starts,
    so `load_s` is the `LLM(...)` call a plain script times, not the import (its stage says
    "imports included")."""
    pytest.importorskip("transformers")
    _stand_in(monkeypatch, tmp_path)
    vllm = sys.modules["vllm"]
    cls = vllm.__dict__.pop("LLM")

    def lazy(name):  # as vllm/__init__.py's module __getattr__
        if name != "LLM":
            raise AttributeError(name)
        time.sleep(2)
        return cls

    vllm.__getattr__ = lazy
    eng = VLLMEngine(VLLMSpec(kind="vllm"), _model(), chat=None)
    assert 0.05 <= eng.info.load_s < 2


def test_a_worker_started_ahead_imports_what_the_vllm_engine_builds_with(monkeypatch, tmp_path):
    """`preload` (a job's process, before its job comes) imports `vllm.LLM`'s module and the
    arguments' class, not only vLLM's lazy top."""
    for part in ("vllm/engine", "vllm/entrypoints"):
        (tmp_path / part).mkdir(parents=True)
        (tmp_path / part / "__init__.py").write_text("")
    (tmp_path / "vllm/__init__.py").write_text("__version__ = '0.26.0'\n")
    (tmp_path / "vllm/engine/arg_utils.py").write_text("class EngineArgs: pass\n")
    (tmp_path / "vllm/entrypoints/llm.py").write_text("class LLM: pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(VLLMSpec, "set_env", lambda self: None)
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, name)
    try:
        VLLMSpec(kind="vllm").preload()
        loaded = {m for m in sys.modules if m == "vllm" or m.startswith("vllm.")}
    finally:
        for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
            del sys.modules[name]
    assert {"vllm", "vllm.engine.arg_utils", "vllm.entrypoints.llm"} <= loaded


def test_a_worker_started_ahead_loads_the_tokenizer_the_engine_takes_once(monkeypatch, tmp_path):
    """`preload(model)` loads the recipe's tokenizer ahead (outside the engine's start); the engine
    built next takes that one, a later engine of the process loads its own."""
    transformers = pytest.importorskip("transformers")
    _stand_in(monkeypatch, tmp_path)
    monkeypatch.setattr(VLLMSpec, "set_env", lambda self: None)
    monkeypatch.setattr(EngineSpecBase, "preload", lambda self, model=None: None)  # the stand-in's
    real, loads = transformers.AutoTokenizer.from_pretrained, []

    def counted(*a, **kw):
        loads.append(tok := real(*a, **kw))
        return tok

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", counted)
    VLLMSpec(kind="vllm").preload(_model())
    assert len(loads) == 1
    first = VLLMEngine(VLLMSpec(kind="vllm"), _model(), chat=None)
    assert len(loads) == 1 and first.tokenizer is loads[0]
    second = VLLMEngine(VLLMSpec(kind="vllm"), _model(), chat=None)
    assert len(loads) == 2 and second.tokenizer is loads[1]


def test_a_worker_started_ahead_loads_vllms_own_tokenizer_and_the_start_says_it_found_it(
    monkeypatch, tmp_path
):
    """`preload(model)` also loads vLLM's own tokenizer into vLLM's lru_cache, with the key that
    `LLM()`'s front end looks up (vLLM 0.26's `cached_tokenizer_from_config`: the tokenizer, then
    runner_type, tokenizer_mode, revision, trust_remote_code); the start records whether it found
    it loaded."""
    pytest.importorskip("transformers")
    every = VLLMSpec(kind="vllm", enable_prefix_caching=True).llm_kwargs(_model())
    _stand_in(monkeypatch, tmp_path, accepted=set(every) | {"tokenizer_mode", "tokenizer_revision"})
    monkeypatch.setattr(VLLMSpec, "set_env", lambda self: None)
    monkeypatch.setattr(EngineSpecBase, "preload", lambda self, model=None: None)  # the stand-in's
    loads = []

    @functools.lru_cache
    def cached_get_tokenizer(name, **kw):
        loads.append((name, kw))
        return object()

    tokenizers = ModuleType("vllm.tokenizers")
    tokenizers.cached_get_tokenizer = cached_get_tokenizer
    monkeypatch.setitem(sys.modules, "vllm.tokenizers", tokenizers)
    llm_cls = sys.modules["vllm"].LLM

    class LLM(llm_cls):  # the front end's lookup, as vLLM 0.26 makes it (ModelConfig: the
        # tokenizer's revision is the model's unless set; the mode lowercased)
        def __init__(self, **kwargs):
            cached_get_tokenizer(
                kwargs["tokenizer"],
                runner_type="generate",
                tokenizer_mode=kwargs.get("tokenizer_mode", "auto").lower(),
                revision=kwargs.get("tokenizer_revision") or kwargs["revision"],
                trust_remote_code=False,
            )
            super().__init__(**kwargs)

    monkeypatch.setattr(sys.modules["vllm"], "LLM", LLM)
    model = ModelSpec(id="builtin:demo", revision="r1")
    cold = VLLMEngine(VLLMSpec(kind="vllm"), model, chat=None)
    assert cold.info.extra["start"]["tokenizer_ahead"] is False and len(loads) == 1
    cases = [({}, "auto", "r1"), ({"tokenizer_mode": "HF"}, "hf", "r1")]
    cases.append(({"tokenizer_revision": "t2"}, "auto", "t2"))
    for args, mode, revision in cases:
        cached_get_tokenizer.cache_clear()
        loads.clear()
        VLLMSpec(kind="vllm", engine_args=args).preload(model)
        key = {"runner_type": "generate", "tokenizer_mode": mode, "revision": revision}
        assert loads == [("builtin:demo", key | {"trust_remote_code": False})]
        ahead = VLLMEngine(VLLMSpec(kind="vllm", engine_args=args), model, chat=None)
        assert ahead.info.extra["start"]["tokenizer_ahead"] is True and len(loads) == 1
    monkeypatch.setattr(sys.modules["vllm"], "LLM", llm_cls)  # one that looks none up
    unknown = VLLMEngine(VLLMSpec(kind="vllm"), model, chat=None)
    assert unknown.info.extra["start"]["tokenizer_ahead"] is None


def get_cached_tokenizer(tokenizer):
    """vLLM 0.26's `vllm.tokenizers.hf.get_cached_tokenizer`, as far as copying goes: a shallow copy
    whose class caches the vocabulary and rebuilds the wrapper from the original (`__reduce__`)."""
    cached = copy.copy(tokenizer)
    vocab = tokenizer.get_vocab()

    class CachedTokenizer(tokenizer.__class__):
        def get_vocab(self):
            return vocab

        def __reduce__(self):
            return get_cached_tokenizer, (tokenizer,)

    cached.__class__ = CachedTokenizer
    return cached


def _renderer_copies(cached, workers=1):
    """What vLLM 0.26's `HfRenderer.__init__` does with the cached tokenizer: a copy, then
    `maybe_make_thread_pool`'s copy of that and its `workers` + 1 deep copies."""
    og = copy.copy(copy.copy(cached))
    return og, [copy.deepcopy(og) for _ in range(workers + 1)]


def test_the_deep_copies_of_vllms_tokenizer_that_llm_makes_are_made_ahead(monkeypatch):
    """vLLM's front end deep-copies its tokenizer `renderer_num_workers` + 1 times inside `LLM()`
    (~1 s each for Qwen2.5, reports/h100-engine-imports): `copy_tokenizer_ahead` makes them in the
    job's process; each deep copy in the start takes one, distinct and equal to vLLM's own, and
    when none is left (or for a tokenizer vLLM does not wrap so) the copy is made as before."""
    transformers = pytest.importorskip("transformers")
    from runner.engines.builtin import ensure_builtin

    base = transformers.AutoTokenizer.from_pretrained(ensure_builtin("builtin:demo"))
    cached = get_cached_tokenizer(base)
    monkeypatch.setattr(vllm_engine, "_hooks", [])
    deep = []
    real = base.__class__.__reduce_ex__
    monkeypatch.setattr(  # counts the real deep copies of the tokenizer
        base.__class__, "__reduce_ex__", lambda self, p: deep.append(1) or real(self, p)
    )
    _, plain = _renderer_copies(cached)
    made_by_vllm = len(deep)
    assert made_by_vllm >= 2  # (without copies ahead, each deep copy reduces the tokenizer)
    vllm_engine.copy_tokenizer_ahead(cached, {"renderer_num_workers": 1})
    ahead = list(vllm_engine._hooks[0].made)
    assert len(ahead) == 2 and all(type(a).__name__ == "CachedTokenizer" for a in ahead)
    deep.clear()
    og, copies = _renderer_copies(cached)
    copied = len(deep)  # the shallow copies only
    assert [id(c) for c in copies] == [id(a) for a in reversed(ahead)]
    assert vllm_engine.tokenizer_copies_left() == 0 and copies[0] is not copies[1]
    assert copies[0]._tokenizer is not base._tokenizer  # independent, not the same object
    assert (
        copies[0].encode("hello there")
        == base.encode("hello there")
        == plain[0].encode("hello there")
    )
    assert copied < made_by_vllm
    again = copy.deepcopy(og)  # none left: a real copy, not carrying the hook to its own copies
    assert again not in ahead and again.encode("hello") == base.encode("hello")
    assert "__deepcopy__" not in vars(again) and len(deep) > copied
    sent = pickle.loads(pickle.dumps(og))  # to another process: a plain tokenizer there
    assert sent.encode("hello") == base.encode("hello") and vars(sent)["__deepcopy__"] is None
    assert copy.deepcopy(sent).encode("hello") == base.encode("hello")
    # after LLM(): the hook comes off the original and the LLM's own tokenizer; none is left
    vllm_engine.release_tokenizer_copies(SimpleNamespace(get_tokenizer=lambda: og))
    assert "__deepcopy__" not in vars(base) and "__deepcopy__" not in vars(og)
    assert vllm_engine._hooks == [] and "__deepcopy__" not in vars(copy.copy(cached))
    # a tokenizer that vLLM's cache did not wrap, or that vLLM will not copy: nothing made
    other = transformers.AutoTokenizer.from_pretrained(ensure_builtin("builtin:demo"))
    vllm_engine.copy_tokenizer_ahead(other, {})
    vllm_engine.copy_tokenizer_ahead(cached, {"skip_tokenizer_init": True})
    vllm_engine.copy_tokenizer_ahead(cached, {"enable_prompt_embeds": True})
    assert "__deepcopy__" not in vars(other) and vllm_engine._hooks == []


def test_a_tokenizer_changed_after_its_copies_were_made_is_copied_as_it_is_now(monkeypatch):
    """vLLM's renderer adds a token to its tokenizer before it copies it when prompt embeddings
    are on; the copies made before would lack it: a tokenizer whose size changed gets its own."""
    transformers = pytest.importorskip("transformers")
    from runner.engines.builtin import ensure_builtin

    monkeypatch.setattr(vllm_engine, "_hooks", [])
    base = transformers.AutoTokenizer.from_pretrained(ensure_builtin("builtin:demo"))
    cached = get_cached_tokenizer(base)
    vllm_engine.copy_tokenizer_ahead(cached, {})
    ahead = list(vllm_engine._hooks[0].made)
    renderers = copy.copy(cached)
    renderers.add_special_tokens({"additional_special_tokens": ["<|embed|>"]})  # shared Rust side
    og, copies = _renderer_copies(renderers)
    assert (
        not any(c is a for c in copies for a in ahead) and vllm_engine.tokenizer_copies_left() == 0
    )
    assert (
        copies[0].encode("<|embed|>")
        == renderers.encode("<|embed|>")
        != ahead[0].encode("<|embed|>")
    )


def test_the_start_says_how_many_tokenizer_copies_it_took_from_those_made_ahead(
    monkeypatch, tmp_path
):
    transformers = pytest.importorskip("transformers")
    from runner.engines.builtin import ensure_builtin

    every = VLLMSpec(kind="vllm").llm_kwargs(_model())
    _stand_in(monkeypatch, tmp_path, accepted=set(every) | {"renderer_num_workers"})
    monkeypatch.setattr(VLLMSpec, "set_env", lambda self: None)
    monkeypatch.setattr(EngineSpecBase, "preload", lambda self, model=None: None)
    monkeypatch.setattr(vllm_engine, "_hooks", [])
    folder = ensure_builtin("builtin:demo")

    @functools.cache
    def cached_get_tokenizer(name, **kw):  # (the key that LLM() looks up: another test's)
        return get_cached_tokenizer(transformers.AutoTokenizer.from_pretrained(folder))

    tokenizers = ModuleType("vllm.tokenizers")
    tokenizers.cached_get_tokenizer = cached_get_tokenizer
    monkeypatch.setitem(sys.modules, "vllm.tokenizers", tokenizers)
    llm_cls = sys.modules["vllm"].LLM

    class LLM(llm_cls):  # the front end's renderer, as vLLM 0.26 makes it
        def __init__(self, **kwargs):
            key = {"runner_type": "generate", "tokenizer_mode": "auto", "revision": None}
            tokenizer = cached_get_tokenizer(kwargs["tokenizer"], **key, trust_remote_code=False)
            _renderer_copies(tokenizer, kwargs["renderer_num_workers"])
            super().__init__(**kwargs)

    monkeypatch.setattr(sys.modules["vllm"], "LLM", LLM)
    spec = VLLMSpec(kind="vllm", engine_args={"renderer_num_workers": 2})
    spec.preload(_model())
    first = VLLMEngine(spec, _model(), chat=None)
    assert first.info.extra["start"]["tokenizer_copies_ahead"] == 3
    second = VLLMEngine(spec, _model(), chat=None)  # none left: it made its own
    assert second.info.extra["start"]["tokenizer_copies_ahead"] == 0


def test_the_modules_an_earlier_start_imported_are_imported_ahead_of_the_next(
    monkeypatch, tmp_path
):
    """Issue 41: what `LLM()`'s front end imported is kept per vLLM version (under $RUNNER_CACHE);
    the next job's process imports it ahead, and the start says how many it found loaded and how
    many it still imported. A module whose import ahead initializes CUDA (vLLM would spawn) is
    taken off the list; a start that finds CUDA initialized says so and keeps nothing."""
    pytest.importorskip("transformers")
    import torch

    _stand_in(monkeypatch, tmp_path)
    monkeypatch.setattr(VLLMSpec, "set_env", lambda self: None)
    monkeypatch.setattr(EngineSpecBase, "preload", lambda self, model=None: None)
    monkeypatch.setenv("RUNNER_CACHE", str(tmp_path / "cache"))
    pkg = tmp_path / "mods"
    for name in ("front_a", "front_b"):
        (pkg / name).mkdir(parents=True)
        (pkg / name / "__init__.py").write_text("")
    (pkg / "front_a" / "part.py").write_text("")
    monkeypatch.syspath_prepend(str(pkg))
    names = ["front_a", "front_a.part", "front_b"]
    llm_cls = sys.modules["vllm"].LLM

    class LLM(llm_cls):  # a front end that imports lazily
        def __init__(self, **kwargs):
            import front_a.part  # noqa: F401
            import front_b  # noqa: F401

            super().__init__(**kwargs)

    monkeypatch.setattr(sys.modules["vllm"], "LLM", LLM)

    def forget():
        for n in names:
            monkeypatch.delitem(sys.modules, n, raising=False)

    forget()
    first = VLLMEngine(VLLMSpec(kind="vllm"), _model(), chat=None).info.extra["start"]
    kept = vllm_engine.front_modules_file("0.26.0")
    assert json.loads(kept.read_text()) == names
    assert (first["modules_ahead"], first["modules_in_start"]) == (0, 3)
    forget()
    VLLMSpec(kind="vllm").preload(None)  # the next job's process, ahead of its job
    assert all(n in sys.modules for n in names)
    second = VLLMEngine(VLLMSpec(kind="vllm"), _model(), chat=None)
    assert (
        second.info.extra["start"]["modules_ahead"],
        second.info.extra["start"]["modules_in_start"],
    ) == (3, 0)
    assert not any("spawn" in n for n in second.info.notes)
    forget()
    # an import that initializes CUDA after all: taken off the list, nothing after it imported
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: "front_a.part" in sys.modules)
    VLLMSpec(kind="vllm").preload(None)
    assert json.loads(kept.read_text()) == ["front_a", "front_b"]
    assert "front_b" not in sys.modules
    third = VLLMEngine(VLLMSpec(kind="vllm"), _model(), chat=None)
    assert any("by spawn instead of fork" in n for n in third.info.notes)
    assert json.loads(kept.read_text()) == ["front_a", "front_b"]  # nothing kept from a spawn


NOTHING_TO_TUNE = (
    "INFO Using FlashInfer autotune cache file: /c/flashinfer_autotune_cache/0.6.14/90a/ab/"
    "autotune_configs.json\n"
    "WARNING No FlashInfer autotune cache entries found.Falling back to default tactics.\n"
)


def _autotuned(monkeypatch, tmp_path, log):
    every = VLLMSpec(kind="vllm", gpu_memory_utilization=0.8).llm_kwargs(_model())
    names = set(every) | {"enable_flashinfer_autotune", "kernel_config", "kv_cache_memory_bytes"}
    made = _stand_in(monkeypatch, tmp_path, accepted=names, log=log)
    monkeypatch.setattr(VLLMSpec, "set_env", lambda self: None)
    monkeypatch.setattr(EngineSpecBase, "preload", lambda self, model=None: None)

    def start(spec):
        made.clear()
        eng = VLLMEngine(spec, _model(), chat=None)
        return dict(made), eng.info.extra["start"]["autotune_skipped"]

    return start


def test_a_configuration_whose_autotuning_found_nothing_starts_without_it_next_time(
    monkeypatch, tmp_path
):
    """Issue 41: vLLM 0.26 runs FlashInfer's autotuning in every start on Hopper, a forward pass of
    `max_num_batched_tokens` tokens; where an earlier start of the same configuration on the same
    GPU found nothing to tune, the next starts without it, and says so. Another configuration,
    another GPU, or a recipe that sets the switch itself is left as is."""
    pytest.importorskip("transformers")
    start = _autotuned(monkeypatch, tmp_path, LOG + NOTHING_TO_TUNE)
    spec = VLLMSpec(kind="vllm", gpu_memory_utilization=0.8)
    made, skipped = start(spec)
    assert "enable_flashinfer_autotune" not in made and skipped is False
    assert len(json.loads(vllm_engine.autotune_file("0.26.0").read_text())) == 1
    made, skipped = start(spec)  # the same configuration: the pass left out
    assert made["enable_flashinfer_autotune"] is False and skipped is True
    made, skipped = start(
        VLLMSpec(kind="vllm", gpu_memory_utilization=0.8, enforce_eager=True)
    )  # another configuration
    assert "enable_flashinfer_autotune" not in made and skipped is False
    less = VLLMSpec(
        kind="vllm", gpu_memory_utilization=0.4, engine_args={"kv_cache_memory_bytes": 2**32}
    )
    made, skipped = start(less)  # the same one on less of the GPU: nothing tuned depends on it
    assert made["enable_flashinfer_autotune"] is False and skipped is True
    monkeypatch.setattr(vllm_engine, "device_facts", lambda: {"gpu": "NVIDIA H100 80GB HBM3"})
    made, skipped = start(spec)  # another GPU
    assert "enable_flashinfer_autotune" not in made and skipped is False
    monkeypatch.setattr(vllm_engine, "device_facts", lambda: {"gpu": "NVIDIA H200"})
    asked = VLLMSpec(
        kind="vllm", gpu_memory_utilization=0.8, engine_args={"enable_flashinfer_autotune": True}
    )
    for _ in range(2):  # the recipe's own switch wins, also once its configuration is kept
        made, skipped = start(asked)
        assert made["enable_flashinfer_autotune"] is True and skipped is False
    own = VLLMSpec(
        kind="vllm",
        gpu_memory_utilization=0.8,
        engine_args={"kernel_config": {"enable_flashinfer_autotune": True}},
    )
    for _ in range(2):  # ... also set inside a kernel_config (vLLM refuses both at once)
        made, skipped = start(own)
        assert "enable_flashinfer_autotune" not in made and skipped is False
    monkeypatch.setenv("VLLM_FLASHINFER_AUTOTUNE_SKIP_OPS", "fp4_gemm")  # changes what is tuned
    made, skipped = start(spec)
    assert "enable_flashinfer_autotune" not in made and skipped is False


def test_a_configuration_whose_autotuning_loaded_tactics_is_taken_off_the_list(
    monkeypatch, tmp_path
):
    pytest.importorskip("transformers")
    start = _autotuned(monkeypatch, tmp_path, LOG + NOTHING_TO_TUNE)
    spec = VLLMSpec(kind="vllm", gpu_memory_utilization=0.8)
    start(spec)
    [key] = json.loads(vllm_engine.autotune_file("0.26.0").read_text())
    # (a later start of it that found tactics, as vLLM 0.26 logs it)
    loaded = vllm_engine.parse_engine_log(
        "INFO FlashInfer autotune cache loaded on rank 0 from /c/ab/autotune_configs.json.\n"
    )
    vllm_engine.remember_autotune("0.26.0", key, loaded)
    assert json.loads(vllm_engine.autotune_file("0.26.0").read_text()) == []
    made, skipped = start(spec)
    assert "enable_flashinfer_autotune" not in made and skipped is False
    # a start that did not tune (skipped, or no such pass) changes nothing either way
    vllm_engine.remember_autotune("0.26.0", key, {})
    assert len(json.loads(vllm_engine.autotune_file("0.26.0").read_text())) == 1


def test_a_vllm_without_the_autotune_switch_is_never_handed_it(monkeypatch, tmp_path):
    pytest.importorskip("transformers")
    made = _stand_in(monkeypatch, tmp_path, log=LOG + NOTHING_TO_TUNE)  # (EngineArgs without it)
    monkeypatch.setattr(VLLMSpec, "set_env", lambda self: None)
    monkeypatch.setattr(EngineSpecBase, "preload", lambda self, model=None: None)
    VLLMEngine(VLLMSpec(kind="vllm"), _model(), chat=None)
    assert vllm_engine.autotune_file("0.26.0").is_file()  # kept all the same
    again = VLLMEngine(VLLMSpec(kind="vllm"), _model(), chat=None)
    assert "enable_flashinfer_autotune" not in made  # (the real one would refuse it)
    assert again.info.extra["start"]["autotune_skipped"] is False
