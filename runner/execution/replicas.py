"""Data-parallel replicas of a job, and what their runs hand back (no Ray here: see ray_executor.py).

Each replica runs a contiguous share of every recipe's examples; the shares' results are merged into
the recipe's in replica_merge.py. A replica's finished samples are followed while it runs
(`PartialTail`), so a retry continues them."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from runner.execution.job import Job, Unit
from runner.execution.layout import RunFolder
from runner.files import write_text_atomic

Lines = dict[str, str]  # sample id -> its samples.jsonl line (no newline)
WORKER_ROOT = "runner-ray"  # under the node's temp folder
OWNER = ".owner"  # in a replica's folder: the pid of the Ray worker running it


@dataclass(frozen=True)
class Replica:
    """One replica's share of a job: its units cut to their shards, and where each shard lies."""

    index: int
    of: int
    job: Job
    bounds: dict[str, tuple[int, int]]  # unit name -> [start, end) in the unit's examples
    key: str  # names the worker-side folder (same on a retry)

    @property
    def tag(self) -> str:
        return f"{self.key}-r{self.index}of{self.of}"


@dataclass(frozen=True)
class UnitFiles:
    """What one recipe's run left in the worker-side folder."""

    name: str
    result_json: bytes
    samples: bytes | None
    partial: bytes | None
    engine_log: bytes
    generation_end: float | None  # when samples.jsonl was written (epoch s, the worker's clock)
    run_end: float | None  # when results.json was written


@dataclass(frozen=True)
class TaskOutput:
    tag: str
    node_id: str
    node_ip: str
    pid: int
    worker_dir: str
    units: tuple[UnitFiles, ...]


def _cut(unit: Unit, a: int, b: int) -> Unit:
    p = unit.prepared
    shard = replace(p, examples=p.examples[a:b], messages=p.messages[a:b], n_target=b - a)
    return replace(unit, prepared=shard)


def split(job: Job, n: int) -> list[Replica]:
    """The job as at most `n` replicas (never more than a recipe has examples); a recipe too small to
    be in every replica is only in the first ones."""
    named = [str(Path(job.options.out).resolve()), *(u.run_key for u in job.units)]  # two --out: two folders
    key = hashlib.sha256("+".join(named).encode()).hexdigest()[:16]
    n = max(1, min(n, max(len(u.prepared.examples) for u in job.units)))
    out = []
    for k in range(n):
        units, bounds = [], {}
        for u in job.units:
            m = len(u.prepared.examples)
            a, b = -(-k * m // n), -(-(k + 1) * m // n)  # ceilings: larger shards first
            if b > a or n == 1:
                units.append(u if n == 1 else _cut(u, a, b))
                bounds[u.name] = (a, b)
        if units:
            out.append(Replica(k, n, job if n == 1 else replace(job, units=tuple(units)), bounds, key))
    return out


def worker_dir(tag: str) -> Path:
    """The replica's folder on the node running it: the same for a retry."""
    return Path(tempfile.gettempdir()) / WORKER_ROOT / tag


def claim(wdir: Path) -> None:
    """A folder left by a worker that died: let the process group of its run end first (it ends
    itself within a second of its parent's death, see worker.watch_parent)."""
    owner = wdir / OWNER
    try:
        pid = int(owner.read_text())
    except (OSError, ValueError):
        pid = None
    if pid is not None and pid != os.getpid():
        deadline = time.monotonic() + 30
        with contextlib.suppress(ProcessLookupError):
            while time.monotonic() < deadline:
                os.kill(pid, 0)  # raises once it is gone
                time.sleep(0.2)
        time.sleep(1.0)
    owner.write_text(str(os.getpid()))


def unit_files(wdir: Path, name: str) -> UnitFiles:
    """What the run of one recipe left in the worker-side folder."""
    f = RunFolder.of(wdir, name)

    def read(p: Path) -> bytes | None:
        return p.read_bytes() if p.is_file() else None

    def mtime(p: Path) -> float | None:
        return p.stat().st_mtime if p.is_file() else None

    return UnitFiles(
        name=name,
        result_json=read(f.results) or b"",
        samples=read(f.samples),
        partial=read(f.partial),
        engine_log=read(f.engine_log) or b"",
        generation_end=mtime(f.samples),
        run_end=mtime(f.results),
    )


def line_ids(data: bytes) -> Lines:
    """Sample lines of a samples file by id; the header (`_run_key`) and unreadable lines are skipped."""
    out: Lines = {}
    for raw in data.splitlines():
        try:
            d = json.loads(raw)
        except ValueError:
            continue
        if isinstance(d, dict) and "id" in d:
            out[str(d["id"])] = raw.decode("utf-8", errors="replace")
    return out


def seed_partial(path: Path, key: str, seeds: Lines) -> None:
    """Add samples finished elsewhere to the partial file the run will continue from (its own
    lines win; a file of another run is replaced)."""
    have: Lines = {}
    if path.is_file():
        data = path.read_bytes()
        try:
            head = json.loads(data.split(b"\n", 1)[0])
        except ValueError:
            head = None
        if isinstance(head, dict) and head.get("_run_key") == key:
            have = line_ids(data)
    merged = {**seeds, **have}
    if merged and len(merged) > len(have):
        body = "".join(line + "\n" for line in merged.values())
        write_text_atomic(path, json.dumps({"_run_key": key}) + "\n" + body)


class PartialTail:
    """Follows the partial-samples files of a running job in a thread, handing new lines to `send`."""

    def __init__(self, paths: dict[str, Path], send: Callable[[str, Lines], object], every_s: float = 0.5):
        self.paths, self.send, self.every_s = paths, send, every_s
        self.pos: dict[str, tuple[int, int]] = {}  # name -> (inode, offset read)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="partial-tail")

    def _read(self, name: str, path: Path) -> Lines:
        try:
            with open(path, "rb") as f:
                ino = os.fstat(f.fileno()).st_ino
                old_ino, off = self.pos.get(name, (ino, 0))
                if ino != old_ino or os.fstat(f.fileno()).st_size < off:  # rewritten or repaired: read again
                    off = 0
                f.seek(off)
                data = f.read()
        except OSError:
            return {}
        end = data.rfind(b"\n") + 1
        self.pos[name] = (ino, off + end)
        return line_ids(data[:end])

    def poll(self) -> None:
        for name, path in self.paths.items():
            lines = self._read(name, path)
            if lines:
                with contextlib.suppress(Exception):  # progress is best effort; the run's own files count
                    self.send(name, lines)

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            self.poll()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop following, after a last look."""
        self._stop.set()
        self._thread.join()
        self.poll()


class Board:
    """Shared by a call's tasks and its driver (a Ray actor): what each task reports as it runs,
    and every finished sample by recipe, which a retried task continues from."""

    def __init__(self, seeds: dict[str, Lines]):
        self.seeds = seeds
        self.events: list[tuple] = []

    def started(self, tag: str, info: dict) -> None:
        self.events.append(("started", tag, info))

    def lines(self, tag: str, name: str, lines: Lines) -> None:
        self.seeds.setdefault(name, {}).update(lines)
        self.events.append(("lines", tag, name, lines))

    def seed(self, name: str, ids: list[str]) -> Lines:
        have = self.seeds.get(name, {})
        return {i: have[i] for i in ids if i in have}

    def take(self) -> list[tuple]:
        out, self.events = self.events, []
        return out

    def forget(self, names: list[str]) -> None:
        for name in names:
            self.seeds.pop(name, None)
