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
