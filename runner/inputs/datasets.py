"""Examples from files or the hub, normalized to (id, question, context, answers)."""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.errors import DatasetError


@dataclass(frozen=True)
class Example:
    id: str
    question: str
    context: str = ""
    answers: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)


def _get(row: dict, dotted: str) -> Any:
    cur: Any = row
    for part in dotted.split("."):
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        else:
            raise KeyError(dotted)
    return cur


def _answers(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, dict) and "text" in value:
        return _answers(value["text"])
    if isinstance(value, (list, tuple)):
        out: list[str] = []
        for v in value:
            out.extend(_answers(v))
        return tuple(out)
    return (str(value),)


def _squad_rows(path: Path, label: str) -> list[dict]:
    from datasets import load_dataset

    ds = load_dataset("json", data_files=str(path), field="data", split="train")
    rows = []
    for art in ds:
        for par in art["paragraphs"]:
            for qa in par["qas"]:
                rows.append({"id": qa["id"], "question": qa["question"], "context": par["context"],
                             "answers": [a["text"] for a in qa["answers"]], "title": art.get("title")})
    return rows


def _file_rows(spec: Any, path: Path) -> list[dict]:
    from datasets import load_dataset

    fmt = spec.format
    builder = {"jsonl": "json", "json": "json", "csv": "csv", "parquet": "parquet"}[fmt]
    kwargs: dict[str, Any] = {}
    if fmt == "json" and spec.json_field:
        kwargs["field"] = spec.json_field
    ds = load_dataset(builder, data_files=str(path), split="train", **kwargs)
    return [dict(r) for r in ds]


def _check_file(spec: Any, path: Path, where: str) -> None:
    if not path.exists():
        raise DatasetError(f"dataset file not found: {path}", file=where, field="dataset.path")
    if path.is_dir():
        raise DatasetError(f"dataset path is a folder, not a file: {path}", file=where, field="dataset.path")
    if path.stat().st_size == 0:
        raise DatasetError(f"dataset file is empty: {path}", file=where, field="dataset.path")


def _quiet_datasets() -> None:
    import datasets
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()


def load_rows(spec: Any, base_dir: Path, where: str = "") -> list[dict]:
    _quiet_datasets()
    if spec.format == "hub":
        from datasets import load_dataset
        try:
            ds = load_dataset(spec.path, spec.name, split=spec.split)
        except Exception as e:   # the hub library raises many kinds; all mean "could not load"
            raise DatasetError(f"could not load hub dataset {spec.path!r} ({type(e).__name__}: {e})".strip(),
                               file=where, field="dataset.path",
                               hint="without network access use a local file (format: squad/json/jsonl/csv/parquet)")
        return [dict(r) for r in ds]
    path = Path(spec.path).expanduser()
    if not path.is_absolute():
        path = base_dir / path
    _check_file(spec, path, where)
    try:
        if spec.format == "squad":
            return _squad_rows(path, spec.split)
        return _file_rows(spec, path)
    except DatasetError:
        raise
    except Exception as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise DatasetError(f"cannot read {path.name} as {spec.format}: {msg[:300]}", file=where,
                           field="dataset.format",
                           hint="allowed formats: squad, json, jsonl, csv, parquet, hub")


def normalize(rows: list[dict], spec: Any, where: str = "") -> list[Example]:
    fm = spec.fields
    out = []
    for n, row in enumerate(rows):
        def need(key: str | None, name: str) -> Any:
            if key is None:
                return None
            try:
                return _get(row, key)
            except KeyError:
                cols = ", ".join(sorted(row)) if isinstance(row, dict) else "?"
                raise DatasetError(f"row {n} has no column {key!r} (mapped to `{name}`); columns: {cols}",
                                   file=where, field=f"dataset.fields.{name}")
        ex_id = str(need(fm.id, "id")) if fm.id else (str(row["id"]) if "id" in row else str(n))
        q = need(fm.question, "question")
        if q is None:
            raise DatasetError(f"row {n} has no value for {fm.question!r} (mapped to `question`)", file=where,
                               field="dataset.fields.question")
        ctx = need(fm.context, "context") if fm.context else ""
        ans = _answers(need(fm.answers, "answers")) if fm.answers else ()
        out.append(Example(id=ex_id, question=str(q), context="" if ctx is None else str(ctx), answers=ans))
    return out


def load_examples(spec: Any, base_dir: Path, where: str = "") -> list[Example]:
    rows = load_rows(spec, base_dir, where)
    if not rows:
        raise DatasetError("dataset has no examples", file=where, field="dataset.path")
    examples = normalize(rows, spec, where)
    seen: set[str] = set()
    for ex in examples:
        if ex.id in seen:
            raise DatasetError(f"example id {ex.id!r} appears more than once; ids must be unique (they pair "
                               "samples across runs and recipes)", file=where, field="dataset.fields.id",
                               hint="map fields.id to a unique column, or leave it unset to number the rows")
        seen.add(ex.id)
    if spec.shuffle:
        random.Random(spec.seed).shuffle(examples)
    if spec.limit:
        examples = examples[: spec.limit]
    return examples


def dataset_file(spec: Any, base_dir: Path) -> Path | None:
    if spec.format == "hub":
        return None
    p = Path(spec.path).expanduser()
    return p if p.is_absolute() else base_dir / p
