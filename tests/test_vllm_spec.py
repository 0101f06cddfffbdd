"""The vLLM spec on a CPU, without vLLM: its checks and their messages, what `runner plan` predicts
with, the engine process's environment, and its serving hooks (the `vllm serve` command line; what a
server's log and counters show took effect), the only way the serving wing reaches the engine."""

import sys

import pytest
from pydantic import ValidationError

import runner.engines.gguf as gguf
import runner.engines.vllm.facts as vllm_facts
from runner.base.errors import RunnerError
from runner.base.types import ModelSpec
from runner.engines.vllm import VLLMSpec, parse_engine_log
from runner.engines.vllm.facts import served_facts
from runner.engines.vllm.spec import cli_args

MODEL = ModelSpec(id="Qwen/Q", load_format="dummy")
# a `vllm serve` log as vLLM 0.26.0 writes it: the engine's config line, the weights and KV cache
# lines
VLLM_LOG = (
    "(EngineCore_DP0 pid=9) INFO [core.py:93] Initializing a V1 LLM engine (v0.26.0) with config: "
    "model='m', tokenizer='m', dtype=torch.bfloat16, max_seq_len=32768, load_format=dummy, "
    "tensor_parallel_size=1, quantization=None, enforce_eager=True, kv_cache_dtype=auto, "
    "device_config=cuda, seed=0, served_model_name=m, "
    'enable_prefix_caching=False, chunked_prefill_enabled=True, compilation_config={"level": 0}\n'
    "(EngineCore_DP0 pid=9) INFO Model loading took 14.25 GiB memory and 3.1 seconds\n"
    "(EngineCore_DP0 pid=9) INFO GPU KV cache size: 1,234,567 tokens\n"
)
WORKER = (
    "(EngineCore pid=2032) INFO 12-03 03:36:58 [gpu_worker.py:857] Free memory on device "
    "(139.29/139.8 GiB) on startup. Desired GPU memory utilization is ({}, 125.82 GiB). Actual "
    "usage is 14.29 GiB for weight\n"
)


def spec(**kw):
    return VLLMSpec(kind="vllm", **kw)


def test_a_step_too_small_for_the_sequences_is_refused_naming_both_numbers():
    with pytest.raises(ValidationError) as e:
        spec(engine_args={"max_num_seqs": 256, "max_num_batched_tokens": 128})
    (err,) = e.value.errors()
    assert err["loc"] == ("engine_args",)
    assert err["msg"] == (
        "Value error, max_num_batched_tokens (128) is below max_num_seqs (256); vLLM refuses to "
        "start: raise max_num_batched_tokens or lower max_num_seqs"
    )
    # one token a sequence: vLLM starts
    spec(engine_args={"max_num_seqs": 256, "max_num_batched_tokens": 256})
    spec(engine_args={"max_num_seqs": 256})  # the step left to vLLM


@pytest.mark.parametrize(
    "field,bad,good",
    [
        ("gpu_memory_utilization", 0, 1.0),
        ("gpu_memory_utilization", 1.01, 0.05),
        ("cpu_offload_gb", -1, 0),
        ("cpu_offload_gb", 100_001, 100_000),
        ("tensor_parallel_size", 0, 1),
        ("tensor_parallel_size", 1025, 1024),
        ("max_model_len", 0, 1),
        ("seed", -1, 0),
    ],
)
def test_bounds_of_the_fields(field, bad, good):
    with pytest.raises(ValidationError):
        spec(**{field: bad})
    assert getattr(spec(**{field: good}), field) == good


def test_engine_args_repeating_a_field_are_refused_but_an_unset_optional_one_passes():
    with pytest.raises(RunnerError) as e:
        spec(engine_args={"model": "x", "enforce_eager": True}).llm_kwargs(MODEL)
    assert e.value.field == "engine.engine_args"
    assert (
        e.value.message
        == "engine_args repeats ['enforce_eager', 'model']; set them as engine fields instead"
    )
    # the seed field is unset: not a repeat
    assert spec(engine_args={"seed": 7}).llm_kwargs(MODEL)["seed"] == 7
    with pytest.raises(RunnerError, match=r"repeats \['seed'\]"):
        spec(seed=1, engine_args={"seed": 7}).llm_kwargs(MODEL)


def test_plan_settings_read_the_engine_args_and_vllms_defaults():
    got = spec(
        engine_args={"block_size": 32, "max_num_seqs": 64}, cpu_offload_gb=2.5
    ).plan_settings(MODEL)
    assert got == {
        "dtype": "auto",
        "quantization": None,
        "kv_cache_dtype": "auto",
        "gpu_memory_utilization": 0.9,
        "max_model_len": None,
        "block_size": 32,
        "cpu_offload_gb": 2.5,
        "enable_prefix_caching": True,  # vLLM's default when the recipe leaves it unset
        "enforce_eager": False,
        "max_num_batched_tokens": None,
        "max_num_seqs": 64,
        "device": "gpu",
    }
    off = spec(enable_prefix_caching=False, max_model_len=4096).plan_settings(
        ModelSpec(id="m", dtype="bfloat16")
    )
    assert (
        off["block_size"],
        off["enable_prefix_caching"],
        off["max_model_len"],
        off["dtype"],
    ) == (
        16,
        False,
        4096,
        "bfloat16",
    )
    assert (
        spec(tensor_parallel_size=4).gpus_needed(),
        spec(max_model_len=2048).context_limit(),
    ) == (4, 2048)


def test_engine_env_compile_cache_and_the_users_variables_last(monkeypatch):
    for k in ("VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR", "VLLM_USE_FLASHINFER_SAMPLER"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("RUNNER_CACHE", "/rc")
    assert spec().engine_env() == {
        "VLLM_USE_FLASHINFER_SAMPLER": "0",
        "VLLM_CACHE_ROOT": "/rc/vllm",
        "TORCHINDUCTOR_CACHE_DIR": "/rc/vllm/inductor",
    }
    assert spec(
        compile_cache="/c", env={"VLLM_USE_FLASHINFER_SAMPLER": "1", "X": "y"}
    ).engine_env() == {
        "VLLM_USE_FLASHINFER_SAMPLER": "1",
        "VLLM_CACHE_ROOT": "/c",
        "TORCHINDUCTOR_CACHE_DIR": "/c/inductor",
        "X": "y",
    }


def test_server_command_from_the_recipes_engine_settings():
    args = {
        "max_num_seqs": 8,
        "compilation_config": {"level": 0},
        "cudagraph_capture_sizes": [1, 2],
    }
    s = spec(
        enable_prefix_caching=False,
        enforce_eager=True,
        swap_space=4,
        seed=0,
        engine_args=args,
        env={"A": "b"},
    )
    cmd, env = s.server_command(MODEL, "127.0.0.1", 8001)
    assert cmd == [
        sys.executable,
        *(
            "-m",
            "vllm.entrypoints.cli.main",
            "serve",
            "Qwen/Q",
            "--host",
            "127.0.0.1",
            "--port",
            "8001",
        ),
        *(
            "--tokenizer=Qwen/Q",
            "--dtype=auto",
            "--load-format=dummy",
            "--no-trust-remote-code",
            "--cpu-offload-gb=0",
        ),
        *(
            "--gpu-memory-utilization=0.9",
            "--enforce-eager",
            "--tensor-parallel-size=1",
            "--kv-cache-dtype=auto",
        ),
        *(
            "--no-enable-prefix-caching",
            "--seed=0",
            "--max-num-seqs=8",
            '--compilation-config={"level": 0}',
        ),
        *("--cudagraph-capture-sizes", "1", "2"),
        # no swap space: vLLM 0.26's server has no such flag; disable_log_stats=False: a bare flag,
        # left
        # out
    ]
    assert env == spec().engine_env() | {"A": "b", "VLLM_SERVER_DEV_MODE": "1"}


def test_a_gguf_model_is_served_from_its_copy_under_the_recipes_name(monkeypatch):
    copy = ModelSpec(id="/cache/copy", tokenizer="/cache/copy")
    monkeypatch.setattr(gguf, "vllm_model", lambda m: (copy, {"file": m.id}))
    cmd, _ = spec().server_command(ModelSpec(id="/models/m.Q4_1.gguf"), "h", 1)
    assert cmd[4] == "/cache/copy" and "--tokenizer=/cache/copy" in cmd
    assert "--served-model-name=/models/m.Q4_1.gguf" in cmd  # the name the load generator asks for


def test_cli_flags_of_each_kind_of_value():
    kwargs = {
        "model": "m",
        "disable_log_stats": False,
        "x": [],
        "hf_token": True,
        "y": [1, 2],
        "z": None,
    }
    kwargs |= {"enforce_eager": False, "offset": -3, "hf_overrides": {"a": [1]}}
    assert cli_args(kwargs) == [
        *("--hf-token", "--y", "1", "2", "--no-enforce-eager", "--offset=-3"),
        '--hf-overrides={"a": [1]}',
    ]


def test_served_facts_from_the_config_line_and_the_workers_memory_line(monkeypatch):
    monkeypatch.setattr(
        vllm_facts, "unquantized_gib", lambda *a: pytest.fail("nothing shrinks the weights here")
    )
    f = served_facts(spec(), MODEL, VLLM_LOG + WORKER.format(0.5) + WORKER.format(0.85), "0.26.0")
    assert (f.quantization, f.prefix_caching, f.enforce_eager, f.max_model_len) == (
        None,
        False,
        True,
        32768,
    )
    assert (f.tensor_parallel_size, f.cache_dtype, f.load_format, f.version) == (
        1,
        "auto",
        "dummy",
        "0.26.0",
    )
    assert (f.weights_gib, f.kv_cache_tokens, f.model_runner) == (14.25, 1_234_567, "unknown")
    assert f.gpu_memory_utilization == 0.85  # the last start's line
    assert f.engine_args is None  # a served engine's engine_args are not read back
    assert served_facts(spec(), MODEL, "no config line\n" + WORKER.format(0.9), "") is None


def test_served_facts_of_a_quantized_sharded_server(monkeypatch):
    monkeypatch.setattr(
        vllm_facts, "unquantized_gib", lambda source, trust: 15.2 if source == "Qwen/Q" else None
    )
    line = (
        "Initializing a V1 LLM engine (v0.26.0) with config: model='Qwen/Q', quantization=fp8, "
        "max_seq_len=auto, load_format=LoadFormat.AUTO, tensor_parallel_size=2, "
        "kv_cache_dtype=fp8_e4m3, enable_prefix_caching=True\nUsing V2 Model Runner\n"
    )
    f = served_facts(spec(quantization="fp8"), MODEL, line, "0.26.0")
    assert (f.quantization, f.prefix_caching, f.max_model_len, f.load_format) == (
        "fp8",
        True,
        None,
        "auto",
    )
    assert (f.tensor_parallel_size, f.cache_dtype, f.model_runner, f.unquantized_gib) == (
        2,
        "fp8_e4m3",
        "V2",
        15.2,
    )
    assert f.gpu_memory_utilization is None and f.weights_gib is None


def test_served_evidence_from_the_server_log_and_counters():
    s, grown = (
        spec(enable_prefix_caching=True, enforce_eager=True),
        {"vllm:prefix_cache_queries_total": 1000.0},
    )
    info = s.served_evidence(
        MODEL, VLLM_LOG, grown | {"vllm:prefix_cache_hits_total": 0.0}, "0.26.0"
    )
    knobs = {k.name: k for k in info.knobs}
    assert (
        knobs["enable_prefix_caching"].status == "ignored"
        and knobs["enable_prefix_caching"].effective is False
    )
    assert (
        knobs["enable_prefix_caching"].evidence
        == "0 of 1,000 prompt tokens served from cache (0.0%)"
    )
    assert knobs["enforce_eager"].status == "applied" and knobs["load_format"].status == "applied"
    # no worker memory line in this log
    assert knobs["gpu_memory_utilization"].status == "unverified"
    assert (
        knobs["gpu_memory_utilization"].evidence
        == "not in the server's log; KV cache 1,234,567 tokens"
    )
    assert (info.name, info.weights_gib, info.kv_cache_tokens, info.version) == (
        "vllm",
        14.25,
        1234567,
        "0.26.0",
    )
    info = s.served_evidence(MODEL, VLLM_LOG, grown | {"vllm:prefix_cache_hits_total": 250.0}, "")
    hits = {k.name: k for k in info.knobs}
    assert (
        hits["enable_prefix_caching"].evidence
        == "250 of 1,000 prompt tokens served from cache (25.0%)"
    )
    for asked, logged, status in ((0.9, 0.9, "applied"), (0.9, 0.5, "ignored")):
        info = spec(gpu_memory_utilization=asked).served_evidence(
            MODEL, VLLM_LOG + WORKER.format(logged), {}, ""
        )
        knob = {k.name: k for k in info.knobs}["gpu_memory_utilization"]
        assert (knob.status, knob.effective, knob.evidence) == (
            status,
            logged,
            "KV cache 1,234,567 tokens",
        )


def test_a_server_log_without_the_config_line_verifies_nothing_but_keeps_the_figures():
    info = spec().served_evidence(
        MODEL, "Model loading took 3.5 GiB and 2.0 seconds\n", {}, "0.26.0"
    )
    assert (info.knobs, info.notes) == (
        [],
        ["the server's log has no engine config line: knobs not verified"],
    )
    assert (info.weights_gib, info.kv_cache_tokens, info.version) == (3.5, None, "0.26.0")


def test_every_figure_of_vllms_start_log():
    log = (
        "Model loading took 7.5 GiB memory and 12.25 seconds\n"
        "torch.compile and initial profiling/warmup run together took 31.5 s in total\n"
        "Graph capturing finished in 9 secs, took 0.45 GiB\n"
        "Directly load the compiled graph(s) for compile range (1, 8192) from the cache, took 1.2 "
        "s\nUsing V2 Model Runner\nTotal CPU offloaded parameters: 4.0\nAvailable KV cache memory: "
        "60.25 GiB\n"
    )
    assert parse_engine_log(log) == {
        "weights_gib": 7.5,
        "weights_load_s": 12.25,
        "compile_s": 31.5,
        "capture_s": 9.0,
        "compile_cache_hit": 1.0,
        "v2_runner": 1.0,
        "cpu_offloaded_gib": 4.0,
        "kv_cache_gib": 60.25,
    }
    assert parse_engine_log("torch.compile took 4.5 s in total") == {"compile_s": 4.5}
    assert parse_engine_log("GPU KV cache size: 0 tokens") == {"kv_cache_tokens": 0}
