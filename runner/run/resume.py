"""Resuming a run: the run key that says whether stored results or finished samples belong to this very run, and the
partial samples file (`samples.partial.jsonl`, its first line the key) that an interrupted run left behind."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from runner.base.errors import RunnerError
from runner.base.files import write_text_atomic
from runner.results import Repeat, Sample

# change nothing a run produces (repeats are kept one by one: asking for more runs only the missing ones)
NOT_IN_KEY = {"description", "baseline", "gate", "timeout_s", "repeat", "warmup", "interleave", "cost"}


def run_key(recipe: dict[str, Any], inputs: dict[str, str], limit: int | None, estimate: int | None) -> str:
    """A hash of the resolved recipe (canonical dict) less the fields that change nothing it produces, the hashes of its
    input files as read, and the call's limits. A complete result with the same key is skipped; a partial samples file
    whose first line carries the same key is continued: its finished samples are kept and only the rest run."""
    kept = {k: v for k, v in recipe.items() if k not in NOT_IN_KEY}
    blob = json.dumps({"recipe": kept, "inputs": inputs, "limit": limit, "estimate": estimate}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _bad_line(path: Path, n: int, why: str) -> RunnerError:
    why = f"line {n} {why}, so the finished samples of the interrupted run cannot be trusted"
    return RunnerError(why, file=str(path), hint=f"delete {path} (its samples run again), or rerun with --force")


def load_partial(path: Path, key: str, metrics: list[str]) -> dict[str, Sample]:
    """Samples finished by an earlier, interrupted run of the same recipe (same key), by id.
    A file of another run (other key) is removed; a cut last line is repaired in place."""
    if not path.is_file():
        return {}
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):  # cut off by an interruption: dropped, so the next append starts afresh
        data = data[: data.rfind(b"\n") + 1]
        with open(path, "r+b") as f:
            f.truncate(len(data))
            f.flush()
            os.fsync(f.fileno())
    lines = data.decode("utf-8", errors="replace").splitlines()
    try:
        head = json.loads(lines[0]) if lines else {}
    except json.JSONDecodeError:
        head = {}
    if not isinstance(head, dict) or head.get("_run_key") != key:
        path.unlink()
        return {}
    out: dict[str, Sample] = {}
    for n, line in enumerate(lines[1:], 2):
        try:
            d = json.loads(line)
        except json.JSONDecodeError:
            raise _bad_line(path, n, "is not JSON") from None
        if not isinstance(d, dict) or "id" not in d:
            raise _bad_line(path, n, "is JSON but not a sample")
        try:
            out[str(d["id"])] = Sample.from_line(d, metrics)
        except ValueError as e:
            raise _bad_line(path, n, f"is not a valid sample ({str(e).splitlines()[0]})") from None
    return out


def start_partial(path: Path, key: str) -> None:
    write_text_atomic(path, json.dumps({"_run_key": key}) + "\n")


def load_repeats(path: Path, key: str) -> list[Repeat]:
    """The repeats an earlier call measured of this very run (first line: its key), by index; a file of another
    run, or one unreadable, is removed (those repeats run again)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
        if not lines or json.loads(lines[0]).get("_run_key") != key:
            raise ValueError("another run")
        reps = {r.index: r for r in (Repeat.model_validate_json(x) for x in lines[1:] if x.strip())}
    except FileNotFoundError:
        return []
    except (OSError, ValueError, AttributeError):
        path.unlink(missing_ok=True)
        return []
    return [reps[i] for i in sorted(reps)]


def add_repeat(path: Path, key: str, rep: Repeat) -> None:
    """Append a finished repeat (the file started with the run's key when it has none)."""
    if not path.is_file():
        start_partial(path, key)
    with open(path, "a", encoding="utf-8") as f:
        f.write(rep.model_dump_json() + "\n")
        f.flush()
        os.fsync(f.fileno())
