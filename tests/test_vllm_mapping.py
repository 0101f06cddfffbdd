"""Recipe -> vLLM arguments, checked without vLLM installed."""

import sys

import pytest

from runner.base.types import ModelSpec, Sampling
from runner.engines.vllm import VLLMSpec, parse_engine_log, sampling_params_kwargs


def spec(**kw):
    return VLLMSpec(kind="vllm", **kw)


def test_llm_kwargs_map_every_field():
    m = ModelSpec(
        id="Qwen/Qwen2.5-7B-Instruct-AWQ",
        tokenizer="Qwen/Qwen2.5-7B-Instruct",
        revision="main",
        dtype="float16",
        load_format="dummy",
    )
    kw = spec(
        quantization="awq_marlin",
        enable_prefix_caching=True,
        cpu_offload_gb=8,
        swap_space=4,
        gpu_memory_utilization=0.8,
        enforce_eager=True,
        max_model_len=4096,
        tensor_parallel_size=2,
        kv_cache_dtype="fp8",
        engine_args={"max_num_seqs": 128},
    ).llm_kwargs(m)
    assert kw == {
        "model": "Qwen/Qwen2.5-7B-Instruct-AWQ",
        "tokenizer": "Qwen/Qwen2.5-7B-Instruct",
        "revision": "main",
        "dtype": "float16",
        "load_format": "dummy",
        "trust_remote_code": False,
        "quantization": "awq_marlin",
        "enable_prefix_caching": True,
        "cpu_offload_gb": 8,
        "swap_space": 4,
        "gpu_memory_utilization": 0.8,
        "enforce_eager": True,
        "max_model_len": 4096,
        "tensor_parallel_size": 2,
        "kv_cache_dtype": "fp8",
        "disable_log_stats": False,
        "max_num_seqs": 128,
    }


def test_prefix_caching_left_to_vllm_when_unset():
    kw = spec().llm_kwargs(ModelSpec(id="m"))
    assert "enable_prefix_caching" not in kw and "swap_space" not in kw and kw["tokenizer"] == "m"


def test_engine_args_may_not_shadow_fields():
    from runner.base.errors import RunnerError

    with pytest.raises(RunnerError, match="enforce_eager"):
        spec(engine_args={"enforce_eager": True}).llm_kwargs(ModelSpec(id="m"))


def test_offload_selects_v1_runner_unless_user_overrides():
    assert spec(cpu_offload_gb=8).engine_env()["VLLM_USE_V2_MODEL_RUNNER"] == "0"
    assert "VLLM_USE_V2_MODEL_RUNNER" not in spec().engine_env()
    assert (
        spec(cpu_offload_gb=8, env={"VLLM_USE_V2_MODEL_RUNNER": "1"}).engine_env()[
            "VLLM_USE_V2_MODEL_RUNNER"
        ]
        == "1"
    )


def test_sampling_translation():
    assert sampling_params_kwargs(Sampling(max_tokens=16, ignore_eos=True, top_p=0.5, top_k=5)) == {
        "temperature": 0.0,
        "top_p": 1.0,
        "top_k": 0,
        "max_tokens": 16,
        "stop": None,
        "ignore_eos": True,
        "seed": None,
    }
    kw = sampling_params_kwargs(Sampling(temperature=0.7, top_p=0.9, top_k=50, stop=["\n"], seed=3))
    assert (kw["temperature"], kw["top_p"], kw["top_k"], kw["stop"], kw["seed"]) == (
        0.7,
        0.9,
        50,
        ["\n"],
        3,
    )


def test_engine_log_parsing_v1_and_v2_formats():
    log = (
        "(EngineCore pid=1) INFO gpu_model_runner.py: Model loading took 14.25 GiB memory and 3.1 "
        "seconds\n(EngineCore pid=1) INFO kv_cache_utils.py: GPU KV cache size: 1,234,560 tokens\n"
        "Available KV cache memory: 101.5 GiB\n"
    )
    assert parse_engine_log(log) == {
        "weights_gib": 14.25,
        "weights_load_s": 3.1,
        "kv_cache_tokens": 1234560,
        "kv_cache_gib": 101.5,
    }
    assert parse_engine_log("Model loading took 8.2 GiB and 2.0 seconds")["weights_gib"] == 8.2
    assert (
        parse_engine_log("INFO [uva.py:58] Total CPU offloaded parameters: 8.12")[
            "cpu_offloaded_gib"
        ]
        == 8.12
    )


def test_parent_never_imports_engine_libraries():
    """`runner check` must work where torch/vllm/transformers are absent: the parent imports
    none."""
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    code = (
        "import sys\n"
        "from runner.config.calls import Asked, load_all\n"
        "from runner.run.job import make_unit\n"
        "from runner.run.job import RunOptions\n"
        "import runner.run.isolate, runner.report.markdown, runner.cli.inspect, runner.cli.go\n"
        "[make_unit(lr, RunOptions(out='.')) for lr in "
        f"load_all(({str(root / 'recipes' / 'demo.yaml')!r},), Asked((), (), None))]\n"
        "print(sorted(m for m in ('torch', 'vllm', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=root, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_missing_vllm_is_a_clear_error(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def fake(name, *a, **kw):
        if name == "vllm" or name.startswith("vllm."):
            raise ImportError("No module named 'vllm'")
        return real_import(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", fake)
    from runner.base.errors import RunnerError

    with pytest.raises(RunnerError, match="vLLM is not installed"):
        spec().build(ModelSpec(id="m"), None)


def test_warmup_is_off_by_default_and_never_reaches_vllm():
    assert spec().warmup is False and spec(warmup=True).warmup is True
    assert "warmup" not in spec(warmup=True).llm_kwargs(ModelSpec(id="m"))


def test_warmup_batch_fills_the_largest_step_within_the_model_length():
    from runner.engines.vllm.engine import warmup_prompts

    p = warmup_prompts(4096, 16384, 152064, 32768)
    assert len(p) == 4096 and {len(x) for x in p} == {4}  # 4,096 x 4 tokens: one 16,384-token step
    assert len({x[0] for x in p}) == 4096 and all(0 <= t < 152064 for x in p for t in x)
    assert {len(x) for x in warmup_prompts(8, 1_000_000, 152064, 32768)} == {2048}  # capped
    # room for 2 output tokens
    assert {len(x) for x in warmup_prompts(8, 8192, 152064, 100)} == {98}
    assert all(t < 50 for x in warmup_prompts(16, 256, 50, 4096) for t in x)  # a tiny vocabulary
