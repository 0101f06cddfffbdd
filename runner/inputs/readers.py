"""Local dataset files: read once into memory, hashed, and parsed from those same bytes.

No cache sits between the file and the rows, so a file rewritten with the same modification
time (`cp -p`, `tar x`, `rsync -a`) is read as it is now, and the hash a run records is the hash
of exactly the bytes it parsed. Every problem is a DatasetError naming the file (and the line or
the place in it) and the recipe field to fix (`<prefix>.path`, `<prefix>.format`, ...)."""

from __future__ import annotations

import hashlib
import io
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from runner.errors import DatasetError
from runner.inputs.json_formats import json_doc, json_rows, squad_rows

FORMATS_HINT = "dataset formats: squad, json, jsonl, csv, parquet (a file) or hub (a dataset name or folder)"
COMPRESSED = {b"\x1f\x8b": "gzip", b"BZh": "bzip2", b"\xfd7zXZ\x00": "xz", b"PK\x03\x04": "zip", b"(\xb5/\xfd": "zstd"}


@dataclass(frozen=True)
class FileBytes:
    data: bytes
    sha256: str  # first 16 hex digits, as runner.files.file_sha256
    path: Path


class _Where:
    """Who to blame: the recipe file, the field prefix (`dataset` or `prompt.shots.source`), the data file."""

    def __init__(self, where: str, prefix: str, path: Path, label: str | None = None, fmt: str = ""):
        self.where, self.prefix, self.path, self.fmt = where, prefix, path, fmt
        self.name = label or str(path)  # the path as the recipe writes it

    def error(self, message: str, field: str = "path", hint: str | None = None) -> DatasetError:
        return DatasetError(message, file=self.where, field=f"{self.prefix}.{field}", hint=hint)

    def unreadable(self, detail: str, hint: str | None = None) -> DatasetError:
        """The file cannot be read in the format the recipe names."""
        return self.error(f"cannot read {self.name} as {self.fmt}: {detail}", "format", hint)


def read_file(path: Path, where: str, prefix: str) -> FileBytes:
    """The file's bytes and their hash; refuses a file that changes while it is read."""
    w = _Where(where, prefix, path)
    before = _fingerprint(path, w)
    try:
        data = _slurp(path)
    except OSError as e:
        raise w.error(
            f"cannot read dataset file {path}: {e.strerror or e}",
            hint="check the file's permissions, or copy it somewhere readable",
        ) from None
    if _fingerprint(path, w) != before or len(data) != before[2]:
        raise w.error(
            f"dataset file {path} changed while being read",
            hint="wait until whatever is writing it has finished (or point the recipe at a finished "
            "copy), then run again",
        )
    return FileBytes(data, hashlib.sha256(data).hexdigest()[:16], path)


def _slurp(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _fingerprint(path: Path, w: _Where) -> tuple[int, ...]:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise w.error(
            f"dataset file not found: {path}", hint="paths in a recipe are relative to the recipe file"
        ) from None
    except OSError as e:
        raise w.error(f"cannot read dataset file {path}: {e.strerror or e}") from None
    if stat.S_ISDIR(st.st_mode):
        raise w.error(
            f"dataset path is a folder, not a file: {path}",
            hint=f"point {w.prefix}.path at a file inside it, or read a dataset folder with format: hub",
        )
    if not stat.S_ISREG(st.st_mode):
        raise w.error(f"dataset path is not a regular file: {path}", hint=f"point {w.prefix}.path at a data file")
    if st.st_size == 0:
        raise w.error(
            f"dataset file is empty: {path}", hint=f"point {w.prefix}.path at the file that holds the examples"
        )
    # ctime changes on every write (and cannot be set back), so a rewrite is seen even if mtime is restored
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def parse_rows(
    fmt: str, fb: FileBytes, json_field: str | None, where: str, prefix: str, label: str | None = None
) -> list[dict]:
    """Rows of a local file in format squad/json/jsonl/csv/parquet, as plain dicts. `label`: the
    path as the recipe writes it (what messages call the file)."""
    w = _Where(where, prefix, fb.path, label, fmt)
    data = _decompress(fb.data, w)
    if fmt == "parquet":
        return _parquet(data, w)
    text = _text(data, fmt, w)
    if fmt == "squad":
        return squad_rows(json_doc(text, w), w)
    if fmt == "csv":
        return _csv(text, w)
    return json_rows(text, fmt, json_field, w)


def _decompress(data: bytes, w: _Where) -> bytes:
    kind = next((k for magic, k in COMPRESSED.items() if data.startswith(magic)), None)
    if kind == "bzip2" and not (data[3:4].isdigit() and data[4:10] in (b"1AY&SY", b"\x17rE8P\x90")):
        kind = None  # text that happens to begin with "BZh"
    if kind is None:
        return data
    if kind in ("zip", "zstd"):
        raise w.error(
            f"{w.name} is a {kind} archive, not a data file",
            hint=f"extract it and point {w.prefix}.path at the data file inside",
        )
    import bz2
    import gzip
    import lzma

    try:
        return {"gzip": gzip.decompress, "bzip2": bz2.decompress, "xz": lzma.decompress}[kind](data)
    except (OSError, EOFError, ValueError, lzma.LZMAError) as e:
        raise w.error(
            f"{w.name} looks {kind}-compressed but cannot be decompressed ({e})",
            hint="the file is damaged or cut short; copy it again",
        ) from None


def _text(data: bytes, fmt: str, w: _Where) -> str:
    name = w.name
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        raise w.error(
            f"{name} is UTF-16 text; the runner reads UTF-8",
            hint="save it as UTF-8 (for example: iconv -f UTF-16 -t UTF-8 IN > OUT)",
        )
    if b"\x00" in data:
        raise w.error(
            f"{name} is a binary file, not {fmt} text",
            field="format",
            hint=f"check {w.prefix}.format and {w.prefix}.path ({FORMATS_HINT})",
        )
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        col = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise w.error(
            f"{name} is not UTF-8 text: byte 0x{data[e.start]:02x} at line {line}, column {col} cannot be decoded",
            hint="save the file as UTF-8 (for example, from Shift-JIS: iconv -f CP932 -t UTF-8 IN > OUT)",
        ) from None


def _csv(text: str, w: _Where) -> list[dict]:
    import pandas as pd
    import pyarrow as pa

    if text.lstrip()[:1] in ("{", "["):
        raise w.error(f"{w.name} looks like JSON, not CSV", field="format", hint="set format: json or jsonl")
    try:
        df = pd.read_csv(io.StringIO(text))
    except pd.errors.EmptyDataError:
        return []
    except (pd.errors.ParserError, ValueError, OverflowError) as e:
        raise w.unreadable(
            _first_line(e),
            hint="the first line must name the columns, and every row must have as "
            "many comma-separated fields (quote a field that holds a comma)",
        ) from None
    try:
        return pa.Table.from_pandas(df, preserve_index=False).to_pylist()
    except (pa.ArrowException, ValueError, TypeError) as e:
        raise w.unreadable(_first_line(e)) from None


def _parquet(data: bytes, w: _Where) -> list[dict]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    if len(data) < 12 or data[:4] != b"PAR1" or data[-4:] != b"PAR1":
        raise w.error(
            f"{w.name} is not a Parquet file (Parquet files begin and end with 'PAR1')",
            field="format",
            hint=f"check {w.prefix}.format and {w.prefix}.path ({FORMATS_HINT})",
        )
    try:
        return pq.read_table(pa.BufferReader(data)).to_pylist()
    except (pa.ArrowException, OSError, ValueError) as e:
        raise w.unreadable(_first_line(e), hint="the file is damaged or cut short; write or copy it again") from None


def _first_line(e: BaseException) -> str:
    s = str(e).strip()
    return (s.splitlines()[0] if s else type(e).__name__)[:300]
