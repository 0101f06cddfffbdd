"""benchmarks/plain_vllm.py runs a plain-vLLM child in a process group of its own and kills the
whole group afterwards (a vLLM engine core can outlive its parent and hold the GPU)."""

import importlib.util
import os
import sys
import time
from pathlib import Path

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "plain_vllm.py"
_spec = importlib.util.spec_from_file_location("plain_vllm", _PATH)
plain = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(plain)

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

    spec = importlib.util.spec_from_file_location("vvr", _PATH.parent / "vllm_vs_runner.py")
    vvr = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(vvr)
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
    spec = importlib.util.spec_from_file_location("vvr2", _PATH.parent / "vllm_vs_runner.py")
    vvr = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(vvr)
    log = tmp_path / "engine.log"
    log.write_text(
        "WARNING 12-05 [system_utils.py:157] We must use the `spawn` multiprocessing start method. "
        "Overriding VLLM_WORKER_MULTIPROC_METHOD to 'spawn'. Reasons: CUDA is initialized\n"
    )
    assert vvr.start_method(log) == "spawned"
    log.write_text("INFO Initializing a V1 LLM engine\n")
    assert vvr.start_method(log) == vvr.start_method(tmp_path / "absent") == "forked"
