"""Ending a process group (a recipe's process, a model server): SIGTERM, then SIGKILL, until no
member is left; Ctrl-C and SIGTERM arriving meanwhile wait until it is gone."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any


def group_alive(pgid: int) -> bool:
    """Whether the process group has a member that is not a zombie. Orphans of the group that a PID
    1 which never reaps (common in containers) leaves as zombies keep `killpg(pgid, 0)` succeeding,
    so on Linux the members of this one group are looked up in /proc and zombies are not counted."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return any(fields[2] == str(pgid) for _, fields in _live_procs())
    except OSError:
        return True


def _stat_fields(path: str) -> list[str]:
    """The fields of a /proc stat file after `pid (comm)`: state, ppid, pgrp, session, ...; [] when
    it is gone."""
    try:
        stat = Path(path).read_text()
    except OSError:
        return []
    return stat[stat.rindex(")") + 2 :].split()


def _threads_running(pid: str) -> bool:
    """Whether a process whose first thread is a zombie still has a thread that is not: after a
    SIGKILL its threads exit one by one, and until the last has, /proc/PID/stat already says Z but
    the process can be neither reaped nor counted as gone."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    return any(
        f[0] not in ("Z", "X") for t in tids if (f := _stat_fields(f"/proc/{pid}/task/{t}/stat"))
    )


def _live_procs() -> Iterator[tuple[int, list[str]]]:
    """Each live process (not a zombie, nor a zombie first thread whose other threads have all
    exited) with the fields of its /proc/PID/stat after `pid (comm)`: state, ppid, pgrp, session,
    ...; OSError where /proc cannot be listed (not Linux)."""
    for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
        fields = _stat_fields(f"/proc/{pid}/stat")
        if fields and (fields[0] not in ("Z", "X") or _threads_running(pid)):
            yield int(pid), fields


def cmdline(pid: int) -> bytes:
    """The process's command line, NUL-separated (b"" when it is gone or unreadable)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def kill_group(pgid: int, grace_s: float = 10.0, proc: subprocess.Popen | None = None) -> None:
    """SIGTERM the process group, SIGKILL what is left after grace_s; return once no member is alive
    (zombies left by a PID 1 that never reaps do not count), or 60 s after the SIGKILL (a process
    stuck in the kernel). `proc`: the group's leader, reaped before it returns."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 60.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait_s
        while True:
            # reaping the leader (a zombie leader keeps the group alive) and waiting until it is:
            # after a SIGKILL the group can look gone a moment before its leader can be reaped
            leader = proc is not None and proc.poll() is None
            if not (alive := leader or group_alive(pgid)) or time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        if not alive:
            break
    if proc is not None:
        proc.poll()


@contextlib.contextmanager
def signals_held() -> Iterator[list[int]]:
    """Ctrl-C and SIGTERM (main thread) held: the list of those that came, to raise once the
    handlers from before are back. An alarm is cancelled with each (the abort Ray's C++ SIGTERM
    handler arms: see cli.sigterm_as_ctrl_c)."""
    pending: list[int] = []
    held: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            held[sig] = signal.signal(sig, lambda n, frame: (signal.alarm(0), pending.append(n)))
    try:
        yield pending
    finally:
        for sig, handler in held.items():
            signal.signal(sig, handler or signal.SIG_DFL)  # None: not set from Python


def stop_group(proc: subprocess.Popen | None, grace_s: float, then: Callable[[], None]) -> None:
    """kill_group (nothing without a process); Ctrl-C or SIGTERM arriving meanwhile (main thread) is
    held until the group is gone, then raised, after the handlers from before are back and `then`
    has run."""
    try:
        with signals_held() as pending:
            if proc is not None:
                kill_group(proc.pid, grace_s, proc)
    finally:
        then()
    if signal.SIGINT in pending:
        raise KeyboardInterrupt
    if pending:
        raise SystemExit(128 + signal.SIGTERM)


def session_members(sid: int) -> list[int]:
    """The live processes of session `sid` (Linux /proc; none elsewhere)."""
    try:
        return [pid for pid, fields in _live_procs() if fields[3] == str(sid)]
    except OSError:
        return []


def descendants(pid: int) -> list[int]:
    """The live processes below `pid` (children, theirs, ...), from /proc (none elsewhere)."""
    children: dict[int, list[int]] = {}
    try:
        for child, fields in _live_procs():
            children.setdefault(int(fields[1]), []).append(child)
    except OSError:
        return []
    out = list(children.get(pid, []))
    for p in out:  # the list grows as it is read: breadth first
        out += children.get(p, [])
    return out


def end_stragglers(pids: list[int]) -> None:
    """SIGKILL those of `pids` still alive (processes a shutdown left behind)."""
    for p in pids:
        with contextlib.suppress(OSError):  # gone already
            os.kill(p, signal.SIGKILL)
