"""Examples from files or the hub, normalized to (id, question, context, answers).

`read_examples` returns the examples together with the sha256 of the bytes they were parsed from:
a local file is read once, hashed and parsed from that same buffer (readers.py), never through a
cache, so what a run uses and what it records are the same file contents."""

from __future__ import annotations

import random
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.errors import DatasetError
from runner.inputs.readers import parse_rows, read_file


@dataclass(frozen=True)
class Example:
    id: str
    question: str
    context: str = ""
    answers: tuple[str, ...] = ()


@dataclass(frozen=True)
class LoadedExamples:
    examples: tuple[Example, ...]
    sha256: str | None  # of the file's bytes as read (16 hex digits, as runner.files.file_sha256); None: hub
    path: str | None  # the file that was read; None for a hub dataset


def _get(row: dict, dotted: str) -> Any:
    cur: Any = row
    for part in dotted.split("."):
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        else:
            raise KeyError(dotted)
    return cur


def _has(row: dict, dotted: str) -> bool:
    try:
        _get(row, dotted)
        return True
    except KeyError:
        return False


def _answers(value: Any, nested: bool = False) -> tuple[str, ...]:
    """Gold answers from a string, a list, `{text: ...}` or a list of those. A null at the top means
    "no gold answers"; a null inside (`[null]`, `{"text": null}`) is a broken row (ValueError)."""
    if value is None:
        if nested:
            raise ValueError("null answer")
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, dict) and "text" in value:
        return _answers(value["text"], nested=True)
    if isinstance(value, (list, tuple)):
        out: list[str] = []
        for v in value:
            out.extend(_answers(v, nested=True))
        return tuple(out)
    if isinstance(value, dict):
        raise ValueError("an object without a 'text' key")
    return (str(value),)


def _quiet_datasets() -> None:
    import datasets

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()


def _hub_rows(spec: Any, where: str, field: str) -> list[dict]:
    from datasets import load_dataset

    _quiet_datasets()
    tmp = None
    kwargs: dict[str, Any] = {}
    if Path(spec.path).expanduser().is_dir():
        # a local dataset folder: a private cache, removed afterwards, so no stale copy can serve it
        tmp = tempfile.mkdtemp(prefix="runner-dataset-")
        kwargs = {"cache_dir": tmp, "keep_in_memory": True}
    try:
        ds = load_dataset(spec.path, spec.name, split=spec.split, **kwargs)
        return [dict(r) for r in ds]
    except Exception as e:  # the hub library raises many kinds; all mean "could not load"
        msg = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
        raise DatasetError(
            f"could not load hub dataset {spec.path!r} ({type(e).__name__}: {msg})",
            file=where,
            field=f"{field}.path",
            hint="without network access use a local file (format: squad/json/jsonl/csv/parquet)",
        ) from None
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


def load_rows(spec: Any, base_dir: Path, where: str = "", *, field: str = "dataset") -> list[dict]:
    """The raw rows (see read_examples for the hash of what was read)."""
    return _rows(spec, base_dir, where, field)[0]


def _rows(spec: Any, base_dir: Path, where: str, field: str) -> tuple[list[dict], str | None, str | None]:
    if spec.format == "hub":
        return _hub_rows(spec, where, field), None, None
    fb = read_file(dataset_file(spec, base_dir), where, field)
    return parse_rows(spec.format, fb, spec.json_field, where, field, spec.path), fb.sha256, str(fb.path)


class _Mapper:
    """One row -> Example through `fields`; errors name the row and the `<prefix>.fields.<name>` to fix."""

    def __init__(self, rows: list[dict], spec: Any, where: str, prefix: str):
        self.rows, self.fm, self.where, self.prefix = rows, spec.fields, where, prefix
        self._present: dict[str, bool] = {}

    def error(self, msg: str, name: str, hint: str | None = None) -> DatasetError:
        return DatasetError(msg, file=self.where, field=f"{self.prefix}.fields.{name}", hint=hint)

    def anywhere(self, key: str) -> bool:
        if key not in self._present:
            self._present[key] = any(_has(r, key) for r in self.rows)
        return self._present[key]

    def need(self, n: int, row: dict, key: str | None, name: str) -> Any:
        if key is None:
            return None
        try:
            return _get(row, key)
        except KeyError:
            if self.anywhere(key):  # other rows have it: missing here reads as null (as Arrow reads JSON)
                return None
            cols = ", ".join(sorted(row)) if isinstance(row, dict) else "?"
            raise self.error(f"row {n} has no column {key!r} (mapped to `{name}`); columns: {cols}", name) from None

    def text(self, n: int, value: Any, key: str, name: str) -> str:
        if isinstance(value, (dict, list, tuple)):
            raise self.error(
                f"row {n}: {key!r} (mapped to `{name}`) holds a {type(value).__name__}, not text",
                name,
                hint=f"map fields.{name} to a column holding text (dotted keys reach inside)",
            )
        return str(value)

    def example(self, n: int, row: dict) -> Example:
        fm = self.fm
        if fm.id or self.anywhere("id"):
            key = fm.id or "id"
            ex_id = self.need(n, row, key, "id")
            if ex_id is None:
                raise self.error(
                    f"row {n} has no value for {key!r} (mapped to `id`)",
                    "id",
                    hint="give every row an id, or leave fields.id unset and remove the id column to number the rows",
                )
            ex_id = self.text(n, ex_id, key, "id")
        else:
            ex_id = str(n)
        q = self.need(n, row, fm.question, "question")
        if q is None:
            raise self.error(f"row {n} has no value for {fm.question!r} (mapped to `question`)", "question")
        ctx = self.need(n, row, fm.context, "context") if fm.context else None
        try:
            ans = _answers(self.need(n, row, fm.answers, "answers")) if fm.answers else ()
        except ValueError as e:
            raise self.error(
                f"row {n}: {fm.answers!r} (mapped to `answers`) holds {e}",
                "answers",
                hint="every answer must be text; delete the broken ones (an empty list means no gold answers)",
            ) from None
        return Example(
            id=ex_id,
            question=self.text(n, q, fm.question, "question"),
            context="" if ctx is None else self.text(n, ctx, str(fm.context), "context"),
            answers=ans,
        )


def normalize(rows: list[dict], spec: Any, where: str = "", *, field: str = "dataset") -> list[Example]:
    m = _Mapper(rows, spec, where, field)
    return [m.example(n, row) for n, row in enumerate(rows)]


def read_examples(spec: Any, base_dir: Path, where: str = "", *, field: str = "dataset") -> LoadedExamples:
    """The examples `spec` names (shuffled and limited as it says), with the hash of the file they came from.
    `field`: the recipe field `spec` sits at (`dataset`, or `prompt.shots.source`), named by every error."""
    rows, sha, path = _rows(spec, base_dir, where, field)
    if not rows:
        what = spec.path if path else f"hub dataset {spec.path!r} (split {spec.split!r})"
        raise DatasetError(
            f"{what} holds no examples",
            file=where,
            field=f"{field}.path",
            hint=f"point {field}.path at a file with at least one example",
        )
    examples = normalize(rows, spec, where, field=field)
    seen: set[str] = set()
    for ex in examples:
        if ex.id in seen:
            raise DatasetError(
                f"example id {ex.id!r} appears more than once; ids must be unique (they pair "
                "samples across runs and recipes)",
                file=where,
                field=f"{field}.fields.id",
                hint="map fields.id to a unique column, or leave it unset to number the rows",
            )
        seen.add(ex.id)
    if spec.shuffle:
        random.Random(spec.seed).shuffle(examples)
    if spec.limit:
        examples = examples[: spec.limit]
    return LoadedExamples(tuple(examples), sha, path)


def load_examples(spec: Any, base_dir: Path, where: str = "", *, field: str = "dataset") -> list[Example]:
    """read_examples without the hash (for callers that only need the examples)."""
    return list(read_examples(spec, base_dir, where, field=field).examples)


def dataset_file(spec: Any, base_dir: Path) -> Path | None:
    if spec.format == "hub":
        return None
    p = Path(spec.path).expanduser()
    return p if p.is_absolute() else base_dir / p
