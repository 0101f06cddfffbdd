"""The run folder: its layout (the one place its file names are spelled) and reading a stored run
back; below the pipeline, so the run writes it and the reports read it without the reports importing
the run.

    <out>/summary.md, <out>/*.png          the call's summary and charts
    <out>/<study>-pareto.png               a study's accuracy-vs-time chart
    <out>/<study>/summary.md               a study's summary of all its stored cells (every call)
    <out>/<name>/results.json              what the run produced (schema/results.schema.json)
    <out>/<name>/samples.jsonl[.gz]        one line per example, written when the run completes
    <out>/<name>/samples.partial.jsonl     finished samples of a run in progress (resume reads it)
    <out>/<name>/repeats.jsonl             each measured repeat as it finishes (resume skips those)
    <out>/<name>/repeats.rejected.jsonl    lines of repeats.jsonl set aside when read back
    <out>/<name>/engine.log                the engine's own output
    <out>/<name>/report.md                 the recipe's report
    <out>/<name>/profile/                  the traces of `profile: true` (runner/run/profile.py)
    <out>/<name>/.runner.lock              held by the one `runner go` writing this folder
    <out>/<name>/replaced/<time>-<key>/    what an earlier, different run of this name left (kept)
    <out>/<name>/.server-session.json      a serving run's server session while it runs
    <out>/<name>-tune.md                   `runner tune`'s report (runner/tune/report.py)

Every name read back from disk goes through `RunFolder.of`, which checks it like a recipe name,
so a `results.json` that says `name: ../../x` cannot make the runner write outside `--out`."""

from __future__ import annotations

import gzip
import json
import os
import re
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from runner.base.errors import RunnerError
from runner.base.files import jsonl_lines, write_json_atomic
from runner.recipe import NAME_PATTERN
from runner.results import RunResult

NAME_MAX = 100
SUMMARY, SUMMARY_JSON = "summary.md", "summary.json"
CHARTS = {"time": "time.png", "accuracy": "accuracy_vs_time.png", "memory": "memory.png"}
RESERVED = frozenset({SUMMARY, SUMMARY_JSON, *CHARTS.values()})
RERUN = "delete the file and rerun the recipe (runner go ... --force)"


def check_name(name: object, where: str = "") -> str:
    """A run name that is safe as one folder under --out (no separators, no `..`, not reserved)."""
    if (
        not isinstance(name, str)
        or not re.match(NAME_PATTERN, name)
        or len(name) > NAME_MAX
        or name in RESERVED
    ):
        rules = (
            f"letters, digits, `._-`, at most {NAME_MAX} characters, not starting with `.` or "
            "`-`, not one of"
        )
        why = f"{name!r} is not a valid run name ({rules} {', '.join(sorted(RESERVED))})"
        raise RunnerError(why, file=where or None, field="name")
    return name


def _file(filename: str) -> property:
    """A file of the run folder: `folder.results` is `folder.root / "results.json"`."""
    return property(lambda folder: folder.root / filename)


@dataclass(frozen=True)
class RunFolder:
    root: Path

    results = _file("results.json")
    samples = _file("samples.jsonl")
    samples_gz = _file("samples.jsonl.gz")
    partial = _file("samples.partial.jsonl")
    repeats = _file("repeats.jsonl")
    repeats_rejected = _file("repeats.rejected.jsonl")
    engine_log = _file("engine.log")
    report = _file("report.md")
    profile = _file("profile")  # a folder: the traces of `profile: true` (runner/run/profile.py)
    lock = _file(".runner.lock")

    @classmethod
    def of(cls, out: Path, name: str) -> RunFolder:
        return cls(Path(out) / check_name(name))

    def write(self, res: RunResult) -> None:
        """results.json, written atomically."""
        write_json_atomic(self.results, res.model_dump(mode="json"))

    def set_aside(self, key: str, force: bool = False) -> Path | None:
        """Before a run: what another run of this name left here (complete results of another run
        key, or finished samples or repeats of another key), or with `force` any complete results
        and finished samples, moved into `replaced/<time>-<key>/` so that nothing finished is lost;
        returns that folder when something moved."""
        prev = _key_of(self.results, ok_only=True)
        stale = lambda k: bool(k) and (force or k != key)
        own = [self.results, self.samples, self.samples_gz, self.report, self.profile]
        moving = own if stale(prev) else []
        moving += [p for p in (self.partial, self.repeats) if stale(_key_of(p))]
        return self._move_aside(moving, prev or _key_of(moving[0]) if moving else None)

    def set_aside_unreadable(self) -> Path | None:
        """Before a run: a results.json that is no run's (damaged, or edited into something without
        a run key) moved into `replaced/<time>-unreadable/` rather than overwritten."""
        return (
            self._move_aside([self.results], "unreadable")
            if _key_of(self.results) is None
            else None
        )

    def set_aside_foreign(self) -> Path | None:
        """Before a run: a report.md that no run's results.json stands beside (not the runner's,
        or its results deleted) moved into `replaced/<time>-no-results/` rather than overwritten."""
        return None if self.results.exists() else self._move_aside([self.report], "no-results")

    def _move_aside(self, paths: list[Path], key: str | None) -> Path | None:
        """Move the files (and the profile folder) of `paths` that exist into
        `replaced/<time>-<key>/`; that folder, or None when none did."""
        moving = [p for p in paths if p.exists()]
        if not moving:
            return None
        dest = self.root / "replaced" / f"{time.strftime('%Y%m%d-%H%M%S')}-{key or 'unknown'}"
        dest.mkdir(parents=True, exist_ok=True)
        for path in moving:
            path.rename(dest / path.name)
        return dest

    def take_back(self, key: str) -> tuple[Path, list[Path]] | None:
        """Before a run: the newest files an earlier call set aside for this very run key (a quick
        `--limit 2` or `--set` run in between moved them to `replaced/`) come back, so the run
        resumes or is skipped as before; what this folder holds of another key is set aside first.
        Returns the folder they came from, and those what was here went to (none: nothing was)."""
        if _key_of(self.results, ok_only=True) == key or _key_of(self.partial) == key:
            return None
        kept = sorted(self.root.glob(f"replaced/*-{key}"), reverse=True)
        src = next(
            (d for d in kept if any((d / f.name).is_file() for f in (self.results, self.partial))),
            None,
        )
        if (src and (_key_of(src / self.results.name) or _key_of(src / self.partial.name))) != key:
            return None
        aside = [self.set_aside(key)]
        # a failed run of another key: set_aside leaves those (a run overwrites them), but the
        # results coming back must not be blocked
        if self.results.is_file() and (other := _key_of(self.results)) != key:
            aside.append(self._move_aside([self.results, self.report], other))
        self.put_back(src)
        return src, list(dict.fromkeys(p for p in aside if p is not None))

    def put_back(self, src: Path) -> None:
        """The files set aside into `src` back in this folder (where nothing took their place)."""
        for f in src.iterdir():
            if not (self.root / f.name).exists():
                f.rename(self.root / f.name)
        if not any(src.iterdir()):
            src.rmdir()
            if src.parent.name == "replaced" and not any(src.parent.iterdir()):
                src.parent.rmdir()

    def samples_short(self, n_samples: int) -> str | None:
        """Why complete results cannot stand: their samples file is gone or holds fewer lines than
        `n_samples` (deleted or cut short since); None when it holds them all."""
        path = self.samples if self.samples.is_file() else self.samples_gz
        if not path.is_file():
            return f"its {self.samples.name} is gone"
        try:
            lines = _unzipped(path).count(b"\n")
        except (OSError, EOFError, zlib.error):
            return f"its {path.name} cannot be read"
        return (
            None if lines >= n_samples else f"its {path.name} holds {lines} of {n_samples} samples"
        )

    def check_files(self) -> None:
        """Each file the run writes is a file or absent: a folder (or other non-file) in its place
        is refused, and so is a symbolic link (the run would write through it, outside --out)."""
        for path in (
            self.results,
            self.samples,
            self.partial,
            self.repeats,
            self.repeats_rejected,
            self.report,
            self.engine_log,
            self.lock,
        ):
            if path.is_symlink():
                why = f"is a symbolic link (to {os.readlink(path)}): the run would write through it"
                hint = f"remove the link (rm '{path}') and rerun; the run writes its own file there"
                raise RunnerError(why, file=str(path), hint=hint)
            if path.exists() and not path.is_file():
                hint = f"remove it (rm -r '{path}') and rerun; the run writes a file there"
                raise RunnerError("is not a file", file=str(path), hint=hint)


def study_chart_path(out: Path, study: str) -> Path:
    """A study's accuracy-vs-time chart: `<out>/<study>-pareto.png` (the study's name checked like a
    run name)."""
    return Path(out) / f"{check_name(study)}-pareto.png"


def _key_of(path: Path, ok_only: bool = False) -> str | None:
    """The run key a stored file belongs to: results.json's `run_key` (only an ok run's with
    `ok_only`), or the first line's `_run_key` of a partial samples or repeats file; None when
    absent or unreadable."""
    try:
        if path.suffix == ".json":
            d = json.loads(path.read_bytes())
            return (d.get("run_key") or None) if (d.get("status") == "ok" or not ok_only) else None
        with open(path, encoding="utf-8") as f:
            return json.loads(f.readline()).get("_run_key") or None
    except (OSError, ValueError, AttributeError):
        return None


def set_aside_foreign_summary(out: Path) -> str | None:
    """Before a call's summary.md is written: one that no summary.json stands beside (the runner
    writes both) is renamed `summary.<time>.md` rather than overwritten; what was done, in words
    (`runner go` and `runner report` say it), or None."""
    path = Path(out) / SUMMARY
    if not path.is_file() or (Path(out) / SUMMARY_JSON).exists():
        return None
    stamp, n = time.strftime("%Y%m%d-%H%M%S"), 1
    while (dest := path.with_name(f"summary.{stamp}{f'-{n}' if n > 1 else ''}.md")).exists():
        n += 1
    path.rename(dest)
    return f"kept the summary.md in {out}, beside no summary.json, as {dest}"


def study_summary_path(out: Path, study: str) -> Path:
    """A study's own summary, of every stored cell whichever call ran it:
    `<out>/<study>/summary.md`."""
    return Path(out) / check_name(study) / SUMMARY


def read_result(folder: RunFolder) -> RunResult | None:
    """The stored results.json, or None when absent or unreadable."""
    try:
        return RunResult.model_validate_json(folder.results.read_bytes())
    except (OSError, ValueError):
        return None


def stored_ok(folder: RunFolder, key: str) -> RunResult | None:
    """The stored result of this very run (same key) when it ended ok, complete or not."""
    prev = read_result(folder)
    return prev if prev is not None and prev.status == "ok" and prev.run_key == key else None


def previous_result(folder: RunFolder, key: str, repeat: int = 1) -> RunResult | None:
    """The stored result of this very run (same key) when it is complete: ok, with at least `repeat`
    repeats and every sample."""
    prev = stored_ok(folder, key)
    if prev is None or len(prev.times) < repeat or folder.samples_short(prev.n_samples):
        return None
    return prev


def load_samples(folder: RunFolder) -> list[dict]:
    """samples.jsonl, or samples.jsonl.gz where an archive was compressed to keep it small."""
    path = folder.samples if folder.samples.is_file() else folder.samples_gz
    if not path.is_file():
        return []
    try:
        text = _unzipped(path).decode("utf-8")
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise RunnerError(
            f"cannot read the samples ({type(e).__name__}: {e})", file=str(path), hint=RERUN
        ) from None
    out = []
    for n, line in enumerate(jsonl_lines(text), 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
        except json.JSONDecodeError:
            d = None
        if not isinstance(d, dict) or not isinstance(d.get("id"), (str, int)):
            raise RunnerError(f"line {n} is not a sample", file=str(path), hint=RERUN)
        out.append(d)
    return out


def _unzipped(path: Path) -> bytes:
    raw = path.read_bytes()
    return gzip.decompress(raw) if path.suffix == ".gz" else raw


def stored(out: Path) -> list[Path]:
    """Every stored `<out>/*/results.json`, in name order."""
    return sorted(Path(out).glob("*/results.json"))


def load_results(out: Path, skipped: list[str] | None = None) -> list[RunResult]:
    """Every stored `<out>/*/results.json`, in name order, each checked (schema, finite numbers, and
    a name that is its folder's). A bad one raises, or with `skipped` is left out and its error
    appended there (one bad file does not stop the report of the others)."""
    res = []
    for p in stored(out):
        try:
            res.append(_load_result(p))
        except RunnerError as e:
            if skipped is None:
                raise
            skipped.append(e.render())
    return res


def _not_finite(constant: str) -> float:
    raise ValueError(
        f'holds {constant}, which results.json never does (it writes an infinite rate as "inf")'
    )


def _load_result(p: Path) -> RunResult:
    if not p.is_file():
        raise RunnerError("is not a file", file=str(p), hint="remove it, or rerun that recipe")
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise RunnerError(f"cannot read it: {e.strerror}", file=str(p)) from None
    try:
        r = RunResult.model_validate_json(raw)
        json.loads(raw, parse_constant=_not_finite)
    except ValueError as e:  # not JSON, Infinity/NaN, or not the schema
        why = str(e).splitlines()[0][:200]
        if isinstance(e, ValidationError):
            first = e.errors()[0]
            loc = ".".join(str(x) for x in first["loc"]) or "(top level)"
            why = f"{e.error_count()} problem(s); first: {loc}: {first['msg']}"
        hint = "rerun that recipe, or remove its folder"
        raise RunnerError(f"not a valid results.json ({why})", file=str(p), hint=hint) from None
    check_name(r.name, str(p))
    if r.name != p.parent.name:
        why = f"names the run {r.name!r} but lies in the folder {p.parent.name!r}"
        hint = "move the folder back to its run's name, or remove it"
        raise RunnerError(why, file=str(p), field="name", hint=hint)
    return r
