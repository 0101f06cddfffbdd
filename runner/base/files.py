"""Atomic file writes: a reader never sees a half-written file."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from runner.base.errors import RunnerError


class WriteError(RunnerError, OSError):
    """A file the runner writes could not be written (disk full, read-only, ...)."""


_HINT = (
    "free disk space or choose another --out; finished samples are kept, and the same command "
    "continues from them"
)


def write_error(path: Path, e: OSError) -> WriteError:
    return WriteError(f"cannot write it: {e.strerror or e}", file=str(path), hint=_HINT)


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write to a temp file in the same folder, fsync, then rename over `path`; the old file stays
    whole if anything fails (a WriteError then names the file)."""
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)  # mkstemp makes 0600; results are for everyone to read
        os.replace(tmp, path)
    except BaseException as e:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        if isinstance(e, OSError) and not isinstance(e, WriteError):
            raise write_error(path, e) from None
        raise


def write_text_atomic(path: Path, text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))


def save_figure(fig: Any, path: Path) -> None:
    """A matplotlib figure saved atomically (rendered in memory, then renamed over the path): a
    symbolic link at the path is replaced, never written through."""
    buf = io.BytesIO()
    fig.savefig(buf, dpi=110, format=Path(path).suffix.lstrip(".") or "png")
    write_bytes_atomic(path, buf.getvalue())


def write_json_atomic(path: Path, obj: Any) -> None:
    write_text_atomic(path, json.dumps(obj, ensure_ascii=False, indent=2) + "\n")


def write_jsonl_atomic(path: Path, rows: Iterable[dict]) -> None:
    write_text_atomic(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def jsonl_lines(text: str) -> list[str]:
    """The lines of a JSONL text, split at newlines only: `splitlines()` also splits at U+2028,
    U+0085 and the like, which may sit inside a JSON string (`ensure_ascii=False` leaves them)."""
    return text.removesuffix("\n").split("\n") if text else []


def file_sha256(path: Path, digits: int = 16) -> str:
    """The SHA-256 of the file's bytes, read in chunks, as its first `digits` hex digits (64: all of
    it)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:digits]


class PartialWriter:
    """Appends whole lines to a file as they come, made durable (fsync) at most every second
    and on close: an interruption loses at most the last second and a cut last line
    (which resume repairs)."""

    def __init__(self, path: Path):
        self.path, self._f, self._synced = path, None, 0.0

    def __enter__(self) -> PartialWriter:
        self._f = open(self.path, "a", encoding="utf-8")
        return self

    def append(self, lines: list[str]) -> None:
        assert self._f is not None
        try:
            self._f.write("".join(lines))
            self._f.flush()
            now = time.monotonic()
            if now - self._synced >= 1.0:
                os.fsync(self._f.fileno())
                self._synced = now
        except OSError as e:
            raise write_error(self.path, e) from None

    def __exit__(self, *exc) -> None:
        if self._f is not None:
            f, self._f = self._f, None
            try:
                f.flush()
                os.fsync(f.fileno())
            except OSError as e:
                if exc[0] is None:
                    raise write_error(self.path, e) from None
            finally:
                with contextlib.suppress(OSError):
                    f.close()
