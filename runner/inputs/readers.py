"""Local dataset files: read once into memory, hashed, and parsed from those same bytes.

No cache sits between the file and the rows, so a file rewritten with the same modification
time (`cp -p`, `tar x`, `rsync -a`) is read as it is now, and the hash a run records is the hash
of exactly the bytes it parsed. Every problem is a DatasetError naming the file (and the line or
the place in it) and the recipe field to fix (`<prefix>.path`, `<prefix>.format`, ...)."""

from __future__ import annotations

import csv
import difflib
import hashlib
import io
import json
import os
import stat
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.base.errors import DatasetError
from runner.base.files import jsonl_lines

FORMATS_HINT = (
    "dataset formats: squad, json, jsonl, csv, parquet (a file) or hub (a dataset name or folder)"
)
COMPRESSED = {
    b"\x1f\x8b": "gzip",
    b"BZh": "bzip2",
    b"\xfd7zXZ\x00": "xz",
    b"PK\x03\x04": "zip",
    b"(\xb5/\xfd": "zstd",
}


@dataclass(frozen=True)
class FileBytes:
    data: bytes
    sha256: str  # first 16 hex digits, as runner.base.files.file_sha256
    path: Path


@dataclass(frozen=True)
class _Where:
    """Who to blame: the recipe file, the field prefix (`dataset` or `prompt.shots.source`), the
    data file."""

    where: str
    prefix: str
    path: Path
    label: str | None = None  # the path as the recipe writes it
    fmt: str = ""

    @property
    def name(self) -> str:
        return self.label or str(self.path)

    def error(self, message: str, field: str = "path", hint: str | None = None) -> DatasetError:
        return DatasetError(message, file=self.where, field=f"{self.prefix}.{field}", hint=hint)

    def unreadable(self, detail: str, hint: str | None = None) -> DatasetError:
        return self.error(f"cannot read {self.name} as {self.fmt}: {detail}", "format", hint)

    def wrong_format(self, message: str) -> DatasetError:
        return self.error(
            message, "format", f"check {self.prefix}.format and {self.prefix}.path ({FORMATS_HINT})"
        )


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
            hint="wait until whatever is writing it has finished (or point the recipe at a "
            "finished copy), then run again",
        )
    return FileBytes(data, hashlib.sha256(data).hexdigest()[:16], path)


def _slurp(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _fingerprint(path: Path, w: _Where) -> tuple[int, ...]:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        hint = (
            "paths in a recipe are relative to the recipe file (typed with --set: to this folder)"
        )
        near = sorted(f.name for f in path.parent.iterdir()) if path.parent.is_dir() else []
        if close := difflib.get_close_matches(path.name, near, n=1, cutoff=0.75):
            hint = f"did you mean {close[0]!r} (in {path.parent})? {hint}"
        raise w.error(f"dataset file not found: {path}", hint=hint) from None
    except OSError as e:
        raise w.error(f"cannot read dataset file {path}: {e.strerror or e}") from None
    if stat.S_ISDIR(st.st_mode):
        raise w.error(
            f"dataset path is a folder, not a file: {path}",
            hint=f"point {w.prefix}.path at a file inside it, or read a dataset folder with "
            f"format: hub (its files are the split `train` unless it names others: set "
            f"{w.prefix}.split)",
        )
    if not stat.S_ISREG(st.st_mode):
        raise w.error(
            f"dataset path is not a regular file: {path}",
            hint=f"point {w.prefix}.path at a data file",
        )
    if st.st_size == 0:
        raise w.error(
            f"dataset file is empty: {path}",
            hint=f"point {w.prefix}.path at the file that holds the examples",
        )
    # ctime changes on every write (and cannot be set back), so a rewrite is seen even if mtime is
    # restored
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def parse_rows(spec: Any, fb: FileBytes, where: str, prefix: str) -> tuple[list[dict], int]:
    """Rows of a local file in format squad/json/jsonl/csv/parquet, as plain dicts, and how many the
    file holds; messages call the file by the path the recipe writes (`spec.path`). With a limit
    and no shuffle, JSON Lines and CSV are parsed up to the limit only: the rest is counted, not
    parsed (a broken JSON line or a repeated id there is not seen)."""
    fmt, w = spec.format, _Where(where, prefix, fb.path, spec.path, spec.format)
    first = None if spec.shuffle else spec.limit
    data = _decompress(fb.data, w)
    if fmt == "parquet":
        return _all(_parquet(data, w))
    text = _text(data, w)
    if fmt == "squad":
        return _all(squad_rows(json_doc(text, w), w))
    if fmt == "csv":
        return _csv(text, w, first)
    return json_rows(text, fmt, spec.json_field, w, first)


def _all(rows: list[dict]) -> tuple[list[dict], int]:
    return rows, len(rows)


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


def _text(data: bytes, w: _Where) -> str:
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        raise w.error(
            f"{w.name} is UTF-16 text; the runner reads UTF-8",
            hint="save it as UTF-8 (for example: iconv -f UTF-16 -t UTF-8 IN > OUT)",
        )
    if b"\x00" in data:
        raise w.wrong_format(f"{w.name} is a binary file, not {w.fmt} text")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        col = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise w.error(
            f"{w.name} is not UTF-8 text: byte 0x{data[e.start]:02x} at line {line}, column {col} "
            "cannot be decoded",
            hint="save the file as UTF-8 (for example, from Shift-JIS: iconv -f CP932 -t UTF-8 IN "
            "> OUT)",
        ) from None


def _csv(text: str, w: _Where, first: int | None = None) -> tuple[list[dict], int]:
    import pandas as pd
    import pyarrow as pa

    if text.lstrip()[:1] in ("{", "["):
        fmt = "squad" if '"paragraphs"' in text else "json or jsonl"
        raise w.error(
            f"{w.name} looks like JSON, not CSV",
            field="format",
            hint=f"set {w.prefix}.format: {fmt}",
        )
    try:
        # every cell as the text it is (`1945` stays "1945", `0012` stays "0012", `NA`/`None`/`null`
        # stay words);
        # only an empty cell is missing
        # (index_col=False: rows of one field more than the header are not read as an index
        # column shifting every other; pandas warns, and that is an error here)
        read = lambda **kw: pd.read_csv(
            io.StringIO(text),
            dtype=str,
            keep_default_na=False,
            na_values=[""],
            index_col=False,
            **kw,
        )
        with warnings.catch_warnings():
            warnings.simplefilter("error", pd.errors.ParserWarning)
            df = read(nrows=first)
            # more rows than the limit: counted by the same parser, reading one column
            total = len(read(usecols=[0])) if first and len(df) == first else len(df)
    except pd.errors.EmptyDataError:
        return [], 0
    except pd.errors.ParserWarning:
        rows = (
            "; a file written with row names (R's write.table) has them one field ahead: drop them"
        )
        raise w.unreadable(_longer_row(text), hint=_CSV_FIELDS + rows) from None
    except (pd.errors.ParserError, ValueError, OverflowError) as e:
        raise w.unreadable(_first_line(e), hint=_CSV_FIELDS) from None
    try:
        return pa.Table.from_pandas(df, preserve_index=False).to_pylist(), total
    except (pa.ArrowException, ValueError, TypeError) as e:
        raise w.unreadable(_first_line(e)) from None


_CSV_FIELDS = (
    "the first line must name the columns, and every row must have as many comma-separated fields "
    "(quote a field that holds a comma)"
)


def _longer_row(text: str) -> str:
    """Which row has more fields than the header names (pandas only warns)."""
    rows = csv.reader(io.StringIO(text))
    head = len(next(rows, []))
    for row in rows:
        if len(row) > head:
            return f"line {rows.line_num} has {len(row)} fields, the header names {head}"
    return f"a row has more fields than the header names ({head})"


def _parquet(data: bytes, w: _Where) -> list[dict]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    if len(data) < 12 or data[:4] != b"PAR1" or data[-4:] != b"PAR1":
        raise w.wrong_format(
            f"{w.name} is not a Parquet file (Parquet files begin and end with 'PAR1')"
        )
    try:
        return pq.read_table(pa.BufferReader(data)).to_pylist()
    except (pa.ArrowException, OSError, ValueError) as e:
        raise w.unreadable(
            _first_line(e), hint="the file is damaged or cut short; write or copy it again"
        ) from None


def _first_line(e: BaseException) -> str:
    s = str(e).strip()
    return (s.splitlines()[0] if s else type(e).__name__)[:300]


class Written(float):
    """A JSON number with a fraction or an exponent, keeping the text it was written as (`3.50`,
    `1e21`): a gold answer is compared as written, as a CSV cell is."""

    text: str

    def __new__(cls, text: str) -> Written:
        number = super().__new__(cls, text)
        number.text = text
        return number


def json_doc(text: str, w: _Where) -> Any:
    try:
        return json.loads(text, parse_float=Written)
    except json.JSONDecodeError as e:
        hint = "fix the file at that place (`python -m json.tool FILE` shows it too)"
        if _json_lines(text):
            hint = "the file holds one JSON object per line (JSON Lines): set "
            hint += f"{w.prefix}.format: jsonl"
        hint = _csv_hint(text, w.prefix) or hint
        raise w.unreadable(
            f"not valid JSON: {e.msg} at line {e.lineno}, column {e.colno}", hint=hint
        ) from None
    except RecursionError:
        raise w.error(f"{w.name} is nested too deeply to read as JSON") from None


def _csv_hint(text: str, prefix: str) -> str | None:
    """Where text read as JSON starts like a CSV file (a first line of comma-separated names, no
    JSON brackets): the format that reads it."""
    first = next((x.strip() for x in text.split("\n") if x.strip()), "")
    if first[:1] in ("{", "[", '"') or "," not in first:
        return None
    return f"the file looks like CSV (its first line: {first[:60]!r}): set {prefix}.format: csv"


def _json_lines(text: str) -> bool:
    """The text reads as JSON Lines: its first two non-empty lines are each a JSON object."""
    lines = [x for x in text.split("\n") if x.strip()][:2]
    try:
        return len(lines) == 2 and all(isinstance(json.loads(x), dict) for x in lines)
    except json.JSONDecodeError:
        return False


def _jsonl_records(text: str, w: _Where, first: int | None) -> tuple[list[dict], int]:
    """The first `first` records (None: all) and the number of non-empty lines."""
    rows: list[dict] = []
    lines = jsonl_lines(text)
    for n, line in enumerate(lines, 1):
        if len(rows) == first:  # the rest counted, not parsed
            return rows, len(rows) + sum(1 for x in lines[n - 1 :] if x.strip())
        s = line.strip()
        if not s:
            continue
        try:
            obj = json.loads(s, parse_float=Written)
        except json.JSONDecodeError as e:
            raise w.unreadable(
                f"line {n} is not valid JSON: {e.msg} (column {e.colno})",
                hint=_csv_hint(text, w.prefix)
                or "each line of a JSONL file must be one complete JSON object; fix or delete "
                "that line",
            ) from None
        except RecursionError:
            raise w.error(f"{w.name} line {n} is nested too deeply to read as JSON") from None
        if not isinstance(obj, dict):
            raise w.unreadable(
                f"line {n} is a JSON {_kind(obj)}, not an object",
                hint='each line must be one record such as {"question": "...", "answers": ["..."]}',
            )
        rows.append(obj)
    return _all(rows)


def json_rows(
    text: str, fmt: str, json_field: str | None, w: _Where, first: int | None = None
) -> tuple[list[dict], int]:
    try:
        doc = json.loads(text, parse_float=Written)
    except json.JSONDecodeError as e:
        if fmt == "jsonl" or (e.msg == "Extra data" and text.lstrip().startswith("{")):
            return _jsonl_records(text, w, first)  # JSON Lines (also accepted as format: json)
        return json_doc(text, w)  # raises, naming the line and column
    except RecursionError:
        raise w.error(f"{w.name} is nested too deeply to read as JSON") from None
    return _all(_records(doc, fmt, json_field, w))


def _records(doc: Any, fmt: str, json_field: str | None, w: _Where) -> list[dict]:
    """The records of a JSON document: the list it is, or the one under `json_field`."""
    if json_field:
        if not isinstance(doc, dict) or json_field not in doc:
            keys = (
                ", ".join(sorted(doc)[:20])
                if isinstance(doc, dict)
                else f"the file holds a JSON {_kind(doc)}"
            )
            raise w.error(
                f"{w.name} has no top-level key {json_field!r} ({keys})",
                field="json_field",
                hint="set json_field to the key that holds the list of records, or remove it",
            )
        doc = _columns_to_records(doc[json_field], w)
    elif isinstance(doc, dict):
        if fmt == "jsonl":
            return [doc]
        squad = "; a SQuAD-style file needs format: squad" if "data" in doc else ""
        raise w.error(
            f"{w.name} holds a JSON object (keys: {', '.join(sorted(doc)[:20])}), not a list of "
            "records",
            field="json_field",
            hint=f"set {w.prefix}.json_field to the key that holds the records{squad}",
        )
    if not isinstance(doc, list):
        raise w.error(
            f"{w.name} holds a JSON {_kind(doc)}, not a list of records",
            hint='a json dataset is a list of records such as [{"question": "...", "answers": '
            '["..."]}]',
        )
    for i, r in enumerate(doc):
        if not isinstance(r, dict):
            raise w.error(
                f"{w.name}: record {i} is a JSON {_kind(r)}, not an object",
                hint='records look like {"question": "...", "answers": ["..."]}',
            )
    return doc


def _columns_to_records(value: Any, w: _Where) -> Any:
    """`{"question": [...], "answers": [...]}` (columns of equal length) as records; anything else
    unchanged."""
    if (
        not isinstance(value, dict)
        or not value
        or not all(isinstance(v, list) for v in value.values())
    ):
        return value
    if len({len(v) for v in value.values()}) != 1:
        lengths = ", ".join(f"{k}: {len(v)}" for k, v in value.items())
        raise w.error(
            f"{w.name}: the columns under the json_field have different lengths ({lengths})",
            field="json_field",
        )
    return [dict(zip(value, vals, strict=True)) for vals in zip(*value.values(), strict=True)]


def squad_rows(doc: Any, w: _Where) -> list[dict]:
    """`data[].paragraphs[].qas[]` as flat rows; every structural problem names its place in the
    file."""
    data = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(data, list):
        raise w.error(
            f'{w.name} is not SQuAD JSON: it has no top-level "data" list',
            field="format",
            hint='SQuAD files look like {"data": [{"title": ..., "paragraphs": [{"context": ..., '
            '"qas": [...]}]}]}; a plain list of records is format: json',
        )
    rows = []
    for i, art in enumerate(data):
        at = f"data[{i}]"
        for j, par in enumerate(_need(art, "paragraphs", list, at, w)):
            at_p = f"{at}.paragraphs[{j}]"
            ctx = _need(par, "context", str, at_p, w)
            for k, qa in enumerate(_need(par, "qas", list, at_p, w)):
                at_q = f"{at_p}.qas[{k}]"
                qid = _need(qa, "id", (str, int), at_q, w)
                rows.append(
                    {
                        "id": qid,
                        "question": _need(qa, "question", str, at_q, w),
                        "context": ctx,
                        "answers": _squad_answers(qa, f"{at_q} (id {qid!r})", w),
                        "title": art.get("title"),
                    }
                )
    return rows


def _squad_answers(qa: dict, at: str, w: _Where) -> list[str]:
    answers = qa.get("answers", None)
    if not isinstance(answers, list):
        got = (
            "has no answers"
            if "answers" not in qa
            else f'has "answers": {json.dumps(answers)[:40]}'
        )
        raise w.error(
            f"{w.name}: {at} {got}",
            hint='give "answers" as a list of {"text": "..."} objects ([] for a question without a '
            "gold answer)",
        )
    out = []
    for m, a in enumerate(answers):
        text = a.get("text") if isinstance(a, dict) else a
        if not isinstance(text, str):
            raise w.error(
                f'{w.name}: {at} answer {m} has "text": {json.dumps(text)[:40]}',
                hint='every answer needs a "text" string; delete answers that have none',
            )
        out.append(text)
    return out


def _need(obj: Any, key: str, types: type | tuple, at: str, w: _Where) -> Any:
    hint = "check that the file is SQuAD JSON (format: squad)"
    if not isinstance(obj, dict):
        raise w.error(
            f"{w.name}: {at} is a JSON {_kind(obj)}, not an object", field="format", hint=hint
        )
    if key not in obj:
        raise w.error(f"{w.name}: {at} has no {key!r}", field="format", hint=f"{hint} and complete")
    if not isinstance(obj[key], types) or isinstance(obj[key], bool):
        raise w.error(
            f"{w.name}: {at}.{key} is a JSON {_kind(obj[key])}, which SQuAD does not allow there",
            hint="fix the file at that place",
        )
    return obj[key]


def _kind(v: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(v), "number"
    )
