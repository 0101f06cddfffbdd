"""Examples from files or the hub, normalized to (id, question, context, answers).

`read_examples` returns the examples together with the sha256 of the bytes they were parsed from:
a local file is read once, hashed and parsed from that same buffer (readers.py), never through a
cache, so what a run uses and what it records are the same file contents."""

from __future__ import annotations

import ast
import contextlib
import difflib
import functools
import hashlib
import json
import math
import random
import re
import tempfile
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.base.errors import DatasetError
from runner.base.files import file_sha256
from runner.base.types import Example
from runner.inputs.readers import Written, parse_rows, read_file


@dataclass(frozen=True)
class LoadedExamples:
    examples: tuple[Example, ...]
    # of the file's bytes as read (16 hex digits, as runner.base.files.file_sha256), or of a local
    # hub folder's files; None: a hub dataset from the hub
    sha256: str | None
    path: str | None  # the file or local folder that was read; a hub dataset: its id
    total: int  # rows in the dataset (only the first `limit` may have been parsed)


_MISSING = object()
_ID_HINT = (
    "give every row an id, or leave fields.id unset and remove the id column to number the rows"
)


def _get(row: dict, dotted: str) -> Any:
    """The value at a dotted key (a column whose own name has dots, as a CSV's `q.text`, first),
    or _MISSING."""
    if dotted in row:
        return row[dotted]
    cur: Any = row
    for part in dotted.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return _MISSING
        cur = cur[part]
    return cur


def _answers(value: Any, nested: bool = False) -> tuple[str, ...]:
    """Gold answers from a string, a list, `{text: ...}` or a list of those. A null at the top means
    "no gold answers"; a null inside (`[null]`, `{"text": null}`) is a broken row (ValueError)."""
    # NaN: a missing cell of a number column
    if value is None or (isinstance(value, float) and math.isnan(value)):
        if nested:
            raise ValueError("null answer")
        return ()
    if isinstance(value, str):
        return _listed(value) if not nested else (value,)
    if isinstance(value, dict) and "text" in value:
        return _answers(value["text"], nested=True)
    if isinstance(value, (list, tuple)):
        return tuple(a for v in value for a in _answers(v, nested=True))
    if isinstance(value, dict):
        raise ValueError("an object without a 'text' key")
    return (as_text(value),)


def _listed(cell: str) -> tuple[str, ...]:
    """A text cell holding a list of strings, in JSON (`["Monday", "Mondays"]`: how a CSV gives
    several answers) or as Python writes one (`['Rhein', 'der Rhein']`: pandas' `to_csv` of a list
    column), as those answers (`[]`: none); any other text as one answer."""
    s = cell.strip()
    if s.startswith("[") and s.endswith("]"):
        for parse in (json.loads, ast.literal_eval):
            with contextlib.suppress(
                ValueError, SyntaxError, TypeError, MemoryError, RecursionError
            ):
                listed = parse(s)
                if isinstance(listed, list) and all(isinstance(a, str) for a in listed):
                    return tuple(listed)
    return (cell,)


def as_text(value: Any) -> str:
    """A cell as text; a whole float as the integer it holds (a number column with a missing cell is
    float: 1945.0 was written 1945)."""
    if isinstance(value, Written) and ("e" in value.text.lower() or not value.is_integer()):
        return value.text  # a JSON number as written (3.50, 1e21); 1945.0 reads 1945 below
    if isinstance(value, bool):  # as JSON writes it
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _hub_rows(spec: Any, where: str, field: str, local: bool) -> tuple[list[dict], int]:
    """The rows of a hub dataset (`local`: a dataset folder) and how many its split holds. With a
    limit and no shuffle, only the first `limit` rows are taken (datasets' split slicing; a
    repeated id after them is not seen) and the split's size comes from its info."""
    import datasets

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    # a split name as datasets names them (not `train[:10]` or `train+test`) can be sliced
    first = not spec.shuffle and re.fullmatch(r"\w+(\.\w+)*", spec.split) and spec.limit
    # a local dataset folder: a private cache, removed afterwards, so no stale copy can serve it
    with (
        tempfile.TemporaryDirectory(prefix="runner-dataset-", ignore_cleanup_errors=True)
        if local
        else nullcontext()
    ) as tmp:
        kwargs = {"cache_dir": tmp, "keep_in_memory": True} if local else {}
        load = lambda split: datasets.load_dataset(spec.path, spec.name, split=split, **kwargs)
        try:
            ds = load(f"{spec.split}[:{first}]" if first else spec.split)
            rows = [dict(r) for r in ds]
            if not first or len(rows) < first:
                return rows, len(rows)
            info = (ds.info.splits or {}).get(spec.split)
            return rows, info.num_examples if info else len(load(spec.split))
        except Exception as e:  # the hub library raises many kinds; all mean "could not load"
            detail = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
            msg = f"could not load hub dataset {spec.path!r} ({type(e).__name__}: {detail})"
            # the dataset is there, the split is not (a folder's files are `train` to datasets)
            if m := re.search(r"Unknown split \"[^\"]*\"\. Should be one of \[(.*?)\]", str(e)):
                splits = ", ".join(x.strip(" '\"") for x in m[1].split(","))
                asked = (
                    f"asked: {spec.split}"
                    if "split" in spec.model_fields_set
                    else "unset, it is validation"
                )
                hint = f"set {field}.split to one of: {splits} ({asked})"
                raise DatasetError(msg, file=where, field=f"{field}.split", hint=hint) from None
            raise DatasetError(
                msg,
                file=where,
                field=f"{field}.path",
                hint="without network access use a local file (format: "
                "squad/json/jsonl/csv/parquet)",
            ) from None


def _column_hint(fmt: str, row: dict, key: str, name: str) -> str | None:
    """A mapped column a row lacks: a near name, or a CSV read as one column (another separator)."""
    if fmt == "csv" and len(row) == 1:
        sep = next((c for c in ";\t|" if c in str(next(iter(row)))), None)
        if sep:
            return f"only commas separate a CSV's fields; this file uses {sep!r}"
    close = difflib.get_close_matches(key, [str(c) for c in row], n=1, cutoff=0.6)
    return f"map fields.{name} to {close[0]!r}" if close else None


def _mapper(rows: list[dict], spec: Any, where: str, prefix: str) -> Callable[[int, dict], Example]:
    """One row -> Example through `fields`; errors name the row and the `<prefix>.fields.<name>` to
    fix."""
    fm = spec.fields
    # whether any row has the key (computed once per key)
    anywhere = functools.cache(lambda key: any(_get(r, key) is not _MISSING for r in rows))
    error = lambda msg, name, hint=None: DatasetError(
        msg, file=where, field=f"{prefix}.fields.{name}", hint=hint
    )

    def need(n: int, row: dict, key: str, name: str) -> Any:
        if (value := _get(row, key)) is not _MISSING:
            return value
        # other rows have it: missing here reads as null (as Arrow reads JSON)
        if anywhere(key):
            return None
        raise error(
            f"row {n} has no column {key!r} (mapped to `{name}`); columns: "
            + ", ".join(map(repr, sorted(row))),
            name,
            _column_hint(spec.format, row, key, name),
        )

    def required(n: int, row: dict, key: str, name: str) -> Any:
        value = need(n, row, key, name)
        if value is None:
            raise error(
                f"row {n} has no value for {key!r} (mapped to `{name}`)",
                name,
                _ID_HINT if name == "id" else None,
            )
        return value

    def text(n: int, value: Any, key: str, name: str) -> str:
        if isinstance(value, (dict, list, tuple)):
            raise error(
                f"row {n}: {key!r} (mapped to `{name}`) holds a {type(value).__name__}, not text",
                name,
                f"map fields.{name} to a column holding text (dotted keys reach inside)",
            )
        return as_text(value)

    def example(n: int, row: dict) -> Example:
        key = fm.id or "id"
        ex_id = (
            text(n, required(n, row, key, "id"), key, "id") if fm.id or anywhere("id") else str(n)
        )
        q = required(n, row, fm.question, "question")
        ctx = need(n, row, fm.context, "context") if fm.context else None
        try:
            ans = _answers(need(n, row, fm.answers, "answers")) if fm.answers else ()
        except ValueError as e:
            raise error(
                f"row {n}: {fm.answers!r} (mapped to `answers`) holds {e}",
                "answers",
                "every answer must be text; delete the broken ones (an empty list means no gold "
                "answers)",
            ) from None
        q = text(n, q, fm.question, "question")
        ctx = "" if ctx is None else text(n, ctx, str(fm.context), "context")
        return Example(id=ex_id, question=q, context=ctx, answers=ans)

    return example


def read_examples(
    spec: Any, base_dir: Path, where: str = "", *, field: str = "dataset"
) -> LoadedExamples:
    """The examples `spec` names (shuffled and limited as it says), with the hash of the file they
    came from. `field`: the recipe field `spec` sits at (`dataset`, or `prompt.shots.source`), named
    by every error."""
    if spec.format == "hub":
        # a dataset folder beside the recipe (as any path in it); its files' bytes hashed like a
        # file's, so a change to them is a change to the run
        folder = base_dir / Path(spec.path).expanduser()
        local = folder.is_dir()
        spec = spec.model_copy(update={"path": str(folder)}) if local else spec
        rows, total = _hub_rows(spec, where, field, local)
        digest = _folder_sha256(folder) if local else None
        return LoadedExamples(_examples(rows, spec, where, field), digest, spec.path, total)
    # a path relative to the recipe file (an absolute one stays itself)
    fb = read_file(base_dir / Path(spec.path).expanduser(), where, field)
    key = (fb.sha256, str(fb.path), spec.model_dump_json(), field)
    if (kept := _READ.get(key)) is None:  # a study's cells read one file many times: parsed once
        if len(_READ) >= 8:
            _READ.clear()
        rows, total = parse_rows(spec, fb, where, field)
        examples = _examples(rows, spec, where, field)
        _READ[key] = kept = LoadedExamples(examples, fb.sha256, str(fb.path), total)
    return kept


def _folder_sha256(folder: Path) -> str:
    """A hash of the files under `folder` (names and bytes; not hidden ones, as `.git/`, nor
    `__pycache__/`), 16 hex digits as a file's."""
    h = hashlib.sha256()
    hidden = lambda p: any(
        x.startswith(".") or x == "__pycache__" for x in p.relative_to(folder).parts
    )
    for p in sorted(x for x in folder.rglob("*") if x.is_file() and not hidden(x)):
        try:
            h.update(f"{p.relative_to(folder)}\0{file_sha256(p, 64)}\n".encode())
        except OSError as e:
            raise DatasetError(f"cannot read {p}: {e.strerror}", field="dataset.path") from None
    return h.hexdigest()[:16]


# (file sha256, path, spec, field) -> examples: files are read, bytes hashed
_READ: dict[tuple, LoadedExamples] = {}


def _examples(rows: list, spec: Any, where: str, field: str) -> tuple[Example, ...]:
    if not rows:
        what = f"hub dataset {spec.path!r} (split {spec.split!r})" if spec.format == "hub" else None
        raise DatasetError(
            f"{what or spec.path} holds no examples",
            file=where,
            field=f"{field}.path",
            hint=f"point {field}.path at a file with at least one example",
        )
    example = _mapper(rows, spec, where, field)
    examples = [example(n, row) for n, row in enumerate(rows)]
    seen: dict[str, int] = {}
    for n, ex in enumerate(examples):
        if (first := seen.setdefault(ex.id, n)) != n:
            col = f"the column {spec.fields.id or 'id'!r} repeats it"
            raise DatasetError(
                f"example id {ex.id!r} appears more than once (rows {first} and {n}); ids must be "
                "unique (they pair samples across runs and recipes)",
                file=where,
                field=f"{field}.fields.id",
                hint=f"{col}: map fields.id to a column whose values are unique, or make the "
                "ids unique in the file",
            )
    if spec.shuffle:
        random.Random(spec.seed).shuffle(examples)
    return tuple(examples[: spec.limit or None])
