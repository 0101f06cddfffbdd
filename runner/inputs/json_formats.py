"""Rows of JSON, JSON Lines and SQuAD dataset files (readers.py reads and decodes them first).

Every structural problem is a DatasetError naming the file and the place in it: the line and column,
the record, or the path inside a SQuAD document (`data[0].paragraphs[2].qas[1]`)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runner.inputs.readers import _Where


def json_doc(text: str, w: _Where) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise w.unreadable(
            f"not valid JSON: {e.msg} at line {e.lineno}, column {e.colno}",
            hint="fix the file at that place (`python -m json.tool FILE` shows it too)",
        ) from None
    except RecursionError:
        raise w.error(f"{w.name} is nested too deeply to read as JSON") from None


def _jsonl_records(text: str, w: _Where) -> list[dict]:
    rows = []
    for n, line in enumerate(text.split("\n"), 1):  # not splitlines(): U+2028 may sit inside a JSON string
        s = line.strip()
        if not s:
            continue
        try:
            obj = json.loads(s)
        except json.JSONDecodeError as e:
            raise w.unreadable(
                f"line {n} is not valid JSON: {e.msg} (column {e.colno})",
                hint="each line of a JSONL file must be one complete JSON object; fix or delete that line",
            ) from None
        except RecursionError:
            raise w.error(f"{w.name} line {n} is nested too deeply to read as JSON") from None
        if not isinstance(obj, dict):
            raise w.unreadable(
                f"line {n} is a JSON {_kind(obj)}, not an object",
                hint='each line must be one record such as {"question": "...", "answers": ["..."]}',
            )
        rows.append(obj)
    return rows


def json_rows(text: str, fmt: str, json_field: str | None, w: _Where) -> list[dict]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        if fmt == "jsonl" or (e.msg == "Extra data" and text.lstrip().startswith("{")):
            return _jsonl_records(text, w)  # JSON Lines (also accepted as format: json)
        return json_doc(text, w)  # raises, naming the line and column
    except RecursionError:
        raise w.error(f"{w.name} is nested too deeply to read as JSON") from None
    if json_field:
        if not isinstance(doc, dict) or json_field not in doc:
            keys = ", ".join(sorted(doc)[:20]) if isinstance(doc, dict) else f"the file holds a JSON {_kind(doc)}"
            raise w.error(
                f"{w.name} has no top-level key {json_field!r} ({keys})",
                field="json_field",
                hint="set json_field to the key that holds the list of records, or remove it",
            )
        doc = _columns_to_records(doc[json_field], w)
    elif isinstance(doc, dict):
        if fmt == "jsonl":
            return [doc]
        keys = ", ".join(sorted(doc)[:20])
        raise w.error(
            f"{w.name} holds a JSON object (keys: {keys}), not a list of records",
            field="json_field",
            hint=f"set {w.prefix}.json_field to the key that holds the records"
            + ("; a SQuAD-style file needs format: squad" if "data" in doc else ""),
        )
    return _records(doc, w)


def _records(doc: Any, w: _Where) -> list[dict]:
    """`doc` itself, once it is seen to be a list of JSON objects."""
    if not isinstance(doc, list):
        raise w.error(
            f"{w.name} holds a JSON {_kind(doc)}, not a list of records",
            hint='a json dataset is a list of records such as [{"question": "...", "answers": ["..."]}]',
        )
    for i, r in enumerate(doc):
        if not isinstance(r, dict):
            raise w.error(
                f"{w.name}: record {i} is a JSON {_kind(r)}, not an object",
                hint='records look like {"question": "...", "answers": ["..."]}',
            )
    return doc


def _columns_to_records(value: Any, w: _Where) -> Any:
    """`{"question": [...], "answers": [...]}` (columns of equal length) as records; anything else unchanged."""
    if not isinstance(value, dict) or not value or not all(isinstance(v, list) for v in value.values()):
        return value
    lengths = {len(v) for v in value.values()}
    if len(lengths) != 1:
        raise w.error(
            f"{w.name}: the columns under the json_field have different lengths "
            f"({', '.join(f'{k}: {len(v)}' for k, v in value.items())})",
            field="json_field",
        )
    return [dict(zip(value, vals, strict=True)) for vals in zip(*value.values(), strict=True)]


def squad_rows(doc: Any, w: _Where) -> list[dict]:
    """`data[].paragraphs[].qas[]` as flat rows; every structural problem names its place in the file."""
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
        got = "has no answers" if "answers" not in qa else f'has "answers": {json.dumps(answers)[:40]}'
        raise w.error(
            f"{w.name}: {at} {got}",
            hint='give "answers" as a list of {"text": "..."} objects ([] for a question without a gold answer)',
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
    if not isinstance(obj, dict):
        raise w.error(
            f"{w.name}: {at} is a JSON {_kind(obj)}, not an object",
            field="format",
            hint="check that the file is SQuAD JSON (format: squad)",
        )
    if key not in obj:
        raise w.error(
            f"{w.name}: {at} has no {key!r}",
            field="format",
            hint="check that the file is SQuAD JSON (format: squad) and complete",
        )
    if not isinstance(obj[key], types) or isinstance(obj[key], bool):
        raise w.error(
            f"{w.name}: {at}.{key} is a JSON {_kind(obj[key])}, which SQuAD does not allow there",
            hint="fix the file at that place",
        )
    return obj[key]


def _kind(v: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(type(v), "number")
