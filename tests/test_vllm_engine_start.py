"""The vLLM engine's start, against a stand-in `vllm` package (vLLM itself is tested on the GPU):
the arguments it hands `vllm.LLM`, which it drops or refuses, and the facts it reads back from the
engine's configs and log, the figures the knob verdicts and the report stand on."""

import dataclasses
import functools
import json
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
