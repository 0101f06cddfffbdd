"""benchmarks/plain_vllm.py runs a plain-vLLM child in a process group of its own and kills the
whole group afterwards (a vLLM engine core can outlive its parent and hold the GPU)."""

import importlib.util
import os
import sys
import time
from pathlib import Path

import pytest

_BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(name: str):
    """A script of benchmarks/ (not a package) as a module."""
    spec = importlib.util.spec_from_file_location(name, _BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


plain, vvr = _load("plain_vllm"), _load("vllm_vs_runner")

CHILD = """
import subprocess, sys
p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # outlives this process
open(sys.argv[1], "w").write(str(p.pid))
print("child done")
raise SystemExit(3)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a killed child of a dead parent may linger as a zombie until init reaps it
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_run_isolated_returns_status_and_kills_what_the_child_left(tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    rc, wall = plain.run_isolated(
        [sys.executable, "-c", CHILD, str(pid_file)], tmp_path / "child.log"
    )
    assert rc == 3 and 0 < wall < 30
    assert "child done" in (tmp_path / "child.log").read_text()
    grandchild = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(grandchild)


STUB_VLLM = """
import sys
from types import SimpleNamespace


class SamplingParams:
    def __init__(self, **kw):
        pass


class LLM:
    def __init__(self, **kw):
        # what the plain script started before the engine: the runner's sampler with --plain-sampler
        open(kw["marker"], "w").write(str("runner.base.nvml" in sys.modules))
        self.llm_engine = SimpleNamespace(engine_core=SimpleNamespace(shutdown=lambda timeout: 0))

    def generate(self, prompts, sp, use_tqdm=False):
        out = SimpleNamespace(token_ids=[1, 2])
        return [SimpleNamespace(outputs=[out]) for _ in prompts]
"""


def test_the_plain_script_runs_the_runners_sampler_only_when_asked(tmp_path):
    """benchmarks/vllm_vs_runner.py --plain-sampler: the plain vLLM script starts the runner's NVML
    sampler before its engine (here a stub vllm: the flag's path, not vLLM, is under test)."""
    import json
    import subprocess

    (tmp_path / "vllm.py").write_text(STUB_VLLM)
    (tmp_path / "plain.py").write_text(vvr.PLAIN)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    for sampler in (False, True):
        marker = tmp_path / f"marker-{sampler}"
        job = {
            "env": {},
            "llm_kwargs": {"marker": str(marker)},
            "sampling": {},
            "prompts": [[1], [2], [3]],
            "sampler": sampler,
            "root": str(vvr.ROOT),
        }
        (tmp_path / "job.json").write_text(json.dumps(job))
        cmd = [sys.executable, "plain.py", "job.json", "plain.json"]
        subprocess.run(cmd, cwd=tmp_path, env=env, check=True, timeout=60)
        assert json.loads((tmp_path / "plain.json").read_text())["n"] == 3
        assert marker.read_text() == str(sampler)


def test_the_benchmark_tells_a_spawned_engine_core_from_a_forked_one(tmp_path):
    """vLLM 0.26 (utils/system_utils.py) warns when it must spawn its engine core (which imports
    vLLM again): the benchmark names which side did."""
    log = tmp_path / "engine.log"
    log.write_text(
        "WARNING 12-05 [system_utils.py:157] We must use the `spawn` multiprocessing start method. "
        "Overriding VLLM_WORKER_MULTIPROC_METHOD to 'spawn'. Reasons: CUDA is initialized\n"
    )
    assert vvr.start_method(log) == "spawned"
    log.write_text("INFO Initializing a V1 LLM engine\n")
    assert vvr.start_method(log) == vvr.start_method(tmp_path / "absent") == "forked"


# two starts of a vLLM 0.26 engine.log on the H200 (reports/h200-repeat, jsquad-vllm-fp8-graphs),
# shortened after each line's message
TWO_STARTS = """\
INFO 12-04 10:40:35 [api_utils.py:273] non-default args: {'load_format': 'dummy'}
(EngineCore pid=3828) INFO 12-04 10:40:39 [core.py:116] Initializing a V1 LLM engine (v0.26.0)
(EngineCore pid=3828) INFO 12-04 10:40:44 [model_runner.py:305] Model loading took 8.2 GiB and \
3.127808 seconds
(EngineCore pid=3828) INFO 12-04 10:40:57 [core.py:340] init engine (profile, create kv cache, \
warmup model) took 12.55 s (compilation: 5.69 s)
===== runner: jsquad-vllm-fp8-graphs started 2026-12-04 10:43:30 =====
runner worker pid 4300 (process group 4300)
INFO 12-04 10:43:33 [api_utils.py:273] non-default args: {'load_format': 'dummy'}
(EngineCore pid=4367) INFO 12-04 10:43:40 [core.py:116] Initializing a V1 LLM engine (v0.26.0)
(EngineCore pid=4367) INFO 12-04 10:43:46 [model_runner.py:305] Model loading took 8.2 GiB and \
4.582422 seconds
(EngineCore pid=4367) INFO 12-04 10:43:54 [monitor.py:53] torch.compile took 7.01 s in total
(EngineCore pid=4367) INFO 12-04 10:43:59 [model_runner.py:747] Graph capturing finished in 3 \
secs, took 0.83 GiB
(EngineCore pid=4367) INFO 12-04 10:44:00 [core.py:340] init engine (profile, create kv cache, \
warmup model) took 14.24 s (compilation: 7.01 s)
"""


def test_the_benchmark_accounts_for_each_engine_start_from_its_log():
    """The last start of a log: LLM()'s first line to the engine core's start (7 s) and to its ready
    line (13 s more) by the log's stamps; the weights, init, compile and graphs by vLLM's own
    figures; the rest of a 28.5-s LLM() outside the stamps; a log without the lines gives None."""
    got = vvr.start_account(TWO_STARTS, 28.5)
    assert got == {
        "to_core": 7.0,
        "core_to_ready": 20.0,
        "weights": 4.582422,
        "init": 14.24,
        "compile": 7.01,
        "graphs": 3.0,
        "outside": 28.5 - 27.0,
    }
    first = vvr.start_account(TWO_STARTS.split("=====")[0], 30.0)
    assert (first["to_core"], first["core_to_ready"], first["compile"]) == (4.0, 18.0, None)
    assert set(vvr.start_account("no vLLM here", 3.0).values()) == {None}
    table = vvr.start_table(got, first).splitlines()
    assert table[1].split()[-3:] == ["7.00", "4.00", "-3.00"]
    assert table[0].endswith(" runner-plain") and len(table[0]) == len(table[1])  # in line
    assert table[5].split()[-2:] == ["7.01", "-"]


def test_the_rest_split_adds_up_to_each_sides_rest():
    """Each side's rows of the rest add up to its wall time less engine start and generation (the
    runner's from its results.json stages of an H100 round, reports/h100-startfix/bench/round-1,
    with a warm-up generation of 0.5 s added)."""
    plain = {"wall_s": 63.21, "import_s": 25.01, "load_s": 15.84, "generate_s": 20.70}
    stages = {
        "wall_s": 47.49,
        "prepare_s": 0.32,
        "process_s": 8.59,
        "start_s": 16.95,
        "warmup_s": 0.5,
        "tokenize_s": 0.53,
        "generate_s": 20.43,
        "write_s": 0.13,
        "other_s": 0.04,
    }
    runner = {"wall_s": 68.66, "load_s": 16.01, "generate_s": 20.42, "stages": stages}
    lines = vvr.rest_split(plain, runner).splitlines()
    figures = [float(line.split()[-1]) for line in lines[1:]]
    assert sum(figures[:2]) == pytest.approx(plain["wall_s"] - 15.84 - 20.70, abs=0.02)
    runner_rest = runner["wall_s"] - runner["load_s"] - runner["generate_s"]
    # the generate stage and timings.generate_s differ by the stage's own bookkeeping (0.01 s)
    assert sum(figures[2:]) == pytest.approx(runner_rest, abs=0.05)
    assert lines[-1].split()[-1] == "21.17"  # the call outside the run: 68.66 - 47.49
