"""Ending a process group (runner.base.procs) where the kernel is in between: a process whose first
thread has exited (/proc/PID/stat already says Z) while another thread still runs is alive, and
kill_group waits for it and reaps it."""

from __future__ import annotations

import platform
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from runner.base.procs import group_alive, kill_group

# the exit(2) system call, which ends one thread (the main thread here), not the process
SYS_EXIT = {"x86_64": 60, "aarch64": 93}.get(platform.machine())

CHILD = textwrap.dedent(
    """
    import ctypes, signal, sys, threading, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    threading.Thread(target=time.sleep, args=(600,)).start()
    print("ready", flush=True)
    ctypes.CDLL(None).syscall({nr}, 0)
    """
)


def _state(pid: int) -> str:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2]


@pytest.mark.skipif(
    sys.platform != "linux" or SYS_EXIT is None, reason="Linux /proc and exit(2) on x86_64/aarch64"
)
def test_a_process_whose_first_thread_is_a_zombie_is_alive_until_its_last_thread_ends():
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD.format(nr=SYS_EXIT)],
        start_new_session=True,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline() == "ready\n"
        deadline = time.monotonic() + 30
        while _state(proc.pid) != "Z" and time.monotonic() < deadline:
            time.sleep(0.01)
        # the first thread is a zombie, the sleeping thread runs: not reapable, not gone
        assert _state(proc.pid) == "Z" and proc.poll() is None
        assert group_alive(proc.pid)
        # SIGTERM is ignored: only the SIGKILL after the grace ends it, and kill_group reaps it
        kill_group(proc.pid, grace_s=0.2, proc=proc)
        assert proc.returncode == -9 and not group_alive(proc.pid)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_ctrl_c_while_the_cli_loads_is_interrupted_not_a_traceback():
    """Found by a tester: Ctrl-C in the first ~0.3 s of `runner ...` (its modules importing, before
    a command's guard) printed a KeyboardInterrupt traceback and exited -2."""
    code = (
        "import builtins, sys\n"
        "real = builtins.__import__\n"
        "def ctrl_c(name, *a, **kw):\n"
        "    if name == 'runner.cli':\n"
        "        raise KeyboardInterrupt\n"
        "    return real(name, *a, **kw)\n"
        "builtins.__import__ = ctrl_c\n"
        "from runner.__main__ import main\n"
        "main()\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (p.returncode, p.stderr) == (130, "interrupted\n")
