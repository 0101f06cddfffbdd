"""Resuming a run: the run key that says whether stored results or finished samples belong to this
very run, the partial samples file (`samples.partial.jsonl`, its first line the key) that an
interrupted run left behind, and the repeats an earlier call measured (`repeats.jsonl`, read back
line by line: a bad line is set aside, the others kept)."""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from runner.base.errors import RunnerError
from runner.base.files import jsonl_lines, write_bytes_atomic, write_error, write_jsonl_atomic
from runner.folder import RunFolder
from runner.results import Repeat, Sample

# change nothing a run produces (repeats are kept one by one: asking for more runs only the missing
# ones)
NOT_IN_KEY = {
    "description",
    "baseline",
    "gate",
    "timeout_s",
    "repeat",
    "warmup",
    "interleave",
    "cost",
}


def run_key(
    recipe: dict[str, Any], inputs: dict[str, str], limit: int | None, estimate: int | None
) -> str:
    """A hash of the resolved recipe (canonical dict) less the fields that change nothing it
    produces, the hashes of its input files as read, and the call's limits. A complete result with
    the same key is skipped; a partial samples file whose first line carries the same key is
    continued: its finished samples are kept and only the rest run."""
    kept = {k: v for k, v in recipe.items() if k not in NOT_IN_KEY}
    blob = json.dumps(
        {"recipe": kept, "inputs": inputs, "limit": limit, "estimate": estimate}, sort_keys=True
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _bad_line(path: Path, n: int, why: str) -> RunnerError:
    why = f"line {n} {why}, so the finished samples of the interrupted run cannot be trusted"
    return RunnerError(
        why, file=str(path), hint=f"delete {path} (its samples run again), or rerun with --force"
    )


def repair_cut_line(path: Path, data: bytes) -> bytes:
    """`data` (the bytes of `path`, a file appended to line by line) less a last line cut off by an
    interruption (no newline at its end), which is cut from the file too, so that the next append
    starts on a line of its own."""
    if not data or data.endswith(b"\n"):
        return data
    data = data[: data.rfind(b"\n") + 1]
    with open(path, "r+b") as f:
        f.truncate(len(data))
        f.flush()
        os.fsync(f.fileno())
    return data


def load_partial(path: Path, key: str, metrics: list[str]) -> dict[str, Sample]:
    """Samples finished by an earlier, interrupted run of the same recipe (same key), by id.
    A file of another run (other key) is removed; a cut last line is repaired in place."""
    if not path.is_file():
        return {}
    data = repair_cut_line(path, path.read_bytes())
    lines = jsonl_lines(data.decode("utf-8", errors="replace"))
    if _key(lines) != key:
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


def start_partial(path: Path, key: str, samples: Sequence[Sample] = ()) -> None:
    """A partial samples file (or repeats.jsonl) begun: the run's key, then the samples given."""
    write_jsonl_atomic(path, [{"_run_key": key}, *(s.to_line() for s in samples)])


def load_repeats(folder: RunFolder, key: str) -> tuple[list[Repeat], list[str]]:
    """The repeats an earlier call measured of this very run (repeats.jsonl, its first line the
    run's key), by index, the newest line of an index counting; and a line naming each line that was
    set aside. Each line is checked on its own: one that is not a well-formed repeat (not JSON, an
    index below 1, a time that is not a positive finite number, a `call` that is not text, ...) is
    set aside in repeats.rejected.jsonl (with its line number and why) and left out of
    repeats.jsonl, while the good lines are kept; a last line cut off by an interruption is set
    aside and cut the same way, and so is every line of a file of another run (or without its
    key)."""
    path = folder.repeats
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return [], []
    except OSError as e:
        return [], [f"{path}: cannot be read ({e.strerror or e}); its repeats are measured again"]
    if not data.strip():  # nothing but an empty file: nothing to keep
        path.unlink(missing_ok=True)
        return [], []
    *lines, cut = data.split(b"\n")  # cut: b"" where the file ends with its newline
    last = (
        [(len(lines) + 1, cut, "was cut off (no newline at its end: an interrupted write)")]
        if cut
        else []
    )
    # another run's repeats, or a file without its key: none of its lines is this run's
    if (other := _key(lines)) != key:
        why = (
            f"belongs to another run (run key {other}, this run's is {key})"
            if other
            else "has no run key"
        )
        bad = [
            (n, line, f"is in a file that {why}") for n, line in enumerate(lines, 1) if line.strip()
        ] + last
        _set_aside(folder, bad)
        path.unlink()
        return [], [
            f"{path}: {why}; its {len(bad)} line(s) set aside in {folder.repeats_rejected.name}, "
            "its repeats are measured again"
        ]
    reps: dict[int, Repeat] = {}
    good, bad = [lines[0]], []
    for n, line in enumerate(lines[1:], 2):
        if not line.strip():
            continue
        rep, why = _repeat(line)
        if rep is None:
            bad.append((n, line, why))
        else:
            reps[rep.index] = rep
            good.append(line)
    if bad or last:
        # first, so that no line is lost if what follows is interrupted
        _set_aside(folder, bad + last)
        if bad:  # the good lines only (a cut last line is not among them)
            write_bytes_atomic(path, b"".join(line + b"\n" for line in good))
        else:
            repair_cut_line(path, data)
    return [reps[i] for i in sorted(reps)], [
        f"{path} line {n}: {why}; set aside in {folder.repeats_rejected.name}, the other repeats "
        "kept"
        for n, _, why in bad + last
    ]


def stored_repeats(folder: RunFolder, key: str) -> set[int]:
    """The indices of the repeats of this very run that `load_repeats` would keep, read without
    changing anything; none where the first repeat's samples are not there (then every repeat is
    measured again)."""
    try:
        data = folder.repeats.read_bytes() if folder.samples.is_file() else b""
    except OSError:
        return set()
    *lines, _ = data.split(b"\n")  # a last line cut off is no repeat
    if _key(lines) != key:
        return set()
    return {rep.index for line in lines[1:] if line.strip() and (rep := _repeat(line)[0])}


def _json(line: bytes | str) -> Any:
    try:
        return json.loads(line)
    except ValueError:  # not JSON, or not UTF-8
        return None


def _key(lines: Sequence[bytes | str]) -> Any:
    """The run key a partial samples or repeats file's first line carries (None: none)."""
    head = _json(lines[0]) if lines else None
    return head.get("_run_key") if isinstance(head, dict) else None


def _repeat(line: bytes) -> tuple[Repeat | None, str]:
    """A stored line as a repeat, or None and why it is not one."""
    d = _json(line)
    if d is None:
        return None, "is not JSON"
    if not isinstance(d, dict):
        return None, "is not a repeat (a JSON object)"
    if isinstance(d.get("index"), int) and d["index"] < 1:
        return None, f"has index {d['index']} (repeats are numbered from 1)"
    try:
        return Repeat.model_validate(d), ""
    except ValidationError as e:
        first = e.errors()[0]
        loc = ".".join(str(x) for x in first["loc"]) or "(top level)"
        got = f", got {first['input']!r}" if first["type"] != "extra_forbidden" else ""
        return None, f"is not a valid repeat ({loc}: {first['msg']}{got})"


def _set_aside(folder: RunFolder, bad: list[tuple[int, bytes, str]]) -> None:
    """Append the bad lines of repeats.jsonl to repeats.rejected.jsonl, one record each: the line's
    number, why it was set aside, when, and its text as it was."""
    at = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    text = "".join(
        json.dumps(
            {
                "line": n,
                "why": why,
                "set_aside_at": at,
                "text": line.decode("utf-8", errors="replace"),
            }
        )
        + "\n"
        for n, line, why in bad
    )
    try:
        _append(folder.repeats_rejected, text)
    except OSError as e:  # nothing was taken out of repeats.jsonl yet
        raise write_error(folder.repeats_rejected, e) from None


def add_repeat(path: Path, key: str, rep: Repeat) -> None:
    """Append a finished repeat (the file started with the run's key when it has none)."""
    if not path.is_file():
        start_partial(path, key)
    _append(path, rep.model_dump_json() + "\n")


def _append(path: Path, text: str) -> None:
    """`text` appended to `path`, made durable (fsync)."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
