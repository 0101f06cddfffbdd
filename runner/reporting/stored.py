"""Reading stored runs back: results.json and samples files, every one checked."""

from __future__ import annotations

import json
from pathlib import Path

from runner.errors import RunnerError
from runner.execution.layout import RunFolder, check_name, stored_results
from runner.reporting.results import RunResult


def load_samples(folder: RunFolder) -> list[dict]:
    """samples.jsonl, or samples.jsonl.gz where an archive was compressed to keep it small."""
    import gzip

    path = folder.samples if folder.samples.is_file() else folder.samples_gz
    if not path.is_file():
        return []
    try:
        raw = path.read_bytes()
        text = (gzip.decompress(raw) if path.suffix == ".gz" else raw).decode("utf-8")
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise RunnerError(
            f"cannot read the samples ({type(e).__name__}: {e})",
            file=str(path),
            hint="delete the file and rerun the recipe (runner go ... --force)",
        ) from None
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
        except json.JSONDecodeError:
            d = None
        if not isinstance(d, dict) or not isinstance(d.get("id"), (str, int)):
            raise RunnerError(
                f"line {n} is not a sample",
                file=str(path),
                hint="delete the file and rerun the recipe (runner go ... --force)",
            )
        out.append(d)
    return out


def load_results(out: Path) -> list[RunResult]:
    """Every stored results.json under `out`, each checked (schema, and a name that is its folder's)."""
    from pydantic import ValidationError

    res = []
    for p in stored_results(out):
        if not p.is_file():
            raise RunnerError("is not a file", file=str(p), hint="remove it, or rerun that recipe")
        try:
            r = RunResult.model_validate_json(p.read_bytes())
        except ValidationError as e:
            first = e.errors()[0]
            loc = ".".join(str(x) for x in first["loc"]) or "(top level)"
            raise RunnerError(
                f"not a valid results.json ({e.error_count()} problem(s); first: {loc}: {first['msg']})",
                file=str(p),
                hint="rerun that recipe, or remove its folder",
            ) from None
        except OSError as e:
            raise RunnerError(f"cannot read it: {e.strerror}", file=str(p)) from None
        check_name(r.name, str(p))
        if r.name != p.parent.name:
            raise RunnerError(
                f"names the run {r.name!r} but lies in the folder {p.parent.name!r}",
                file=str(p),
                field="name",
                hint="move the folder back to its run's name, or remove it",
            )
        res.append(r)
    return res
