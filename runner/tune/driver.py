"""A tune from its file to its report, for `runner tune` and any other caller: the candidates of the
`tune:` block (each the start recipe with its settings set into the data, checked as a recipe), the
screen, the confirmation and the decision; every run goes through the orchestrator, as an ordinary
cell under `out`, so an interrupted tune continues. The caller hands in what it wires (the wings, a
study file's cells, messages): nothing here imports the CLI or another wing."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from time import monotonic
from typing import Any

from pydantic import ValidationError

from runner.base.dotted import overlaps
from runner.base.errors import RunnerError
from runner.base.files import write_text_atomic
from runner.base.format import secs, table
from runner.config.calls import Asked, check_model_paths, load_all, parse_model_paths
from runner.config.loading import RecipeFile, Studies, load_file, read_recipe_file, with_settings
from runner.config.overrides import apply_overrides, parse_set
from runner.folder import RunFolder, check_name, read_result
from runner.orchestrate import Executor, Say, Wings, new_call, run_loaded
from runner.recipe import LoadedRecipe
from runner.report.plots import Accuracy, accuracy_chart
from runner.report.summary import samples_by_id, score_interval
from runner.results import RunResult
from runner.run.job import RunOptions, make_unit

from .report import (
    Ran,
    confirm_examples,
    confirm_s,
    cost_s,
    hand_words,
    run_s_at,
    settings_text,
    tune_markdown,
    winner_yaml,
)
from .search import Cell, against_hand_written, decide, keep_after_screen
from .spec import TuneSpec

# a study's cell as a plain recipe file (the study wing's)
CellFile = Callable[[Path, str, str], RecipeFile]


@dataclass(frozen=True)
class Wiring:
    """What the caller wires into a tune: the wings of its runs, a study file's cells and one cell
    as a file (the study wing's), where messages go."""

    wings: Wings
    studies: Studies
    cell_file: CellFile
    say: Say


@dataclass(frozen=True)
class Call:
    """One tune as asked for: the file, the folder, the call's `--set` items and `--model-path`
    mappings."""

    path: Path
    out: Path
    sets: tuple[str, ...] = ()
    model_paths: tuple[str, ...] = ()
    progress: bool = True
    in_process: bool = False
    report_only: bool = False


@dataclass
class Tune:
    """A tune ready to run: its spec, the recipe the candidates change and the candidates."""

    call: Call
    spec: TuneSpec
    src: RecipeFile  # the recipe the candidates change (a study: its start cell)
    cell: str | None  # the start cell's name (None: not a study)
    base: LoadedRecipe
    cells: list[Cell]  # every candidate, refused ones included
    to_screen: list[Cell]
    plan: str

    @property
    def name(self) -> str:
        return self.base.recipe.name

    def load(self, settings: dict[str, Any], cell: str | None, repeat: int = 1) -> LoadedRecipe:
        run = (repeat, self.spec.confirm.interleave)
        return load_cell(self.src, self.call, settings, cell, run)


def _refused(path: Path, field: str, why: str, hint: str | None = None) -> RunnerError:
    return RunnerError(why, file=str(path), field=field, hint=hint)


def read_spec(path: Path) -> tuple[RecipeFile, TuneSpec]:
    f = read_recipe_file(path)
    if "tune" not in f.keys:
        hint = (
            "runner tune takes a recipe or study file with a `tune:` block (axes, objective, "
            "gate, budget); see docs/recipe-reference.md, section Tune"
        )
        raise _refused(path, "tune", "has no `tune:` block", hint)
    try:
        spec = TuneSpec.model_validate(f.keys["tune"])
    except ValidationError as e:
        first = e.errors()[0]
        loc = ".".join(str(x) for x in ("tune", *first["loc"]))
        raise _refused(path, loc, first["msg"]) from None
    return f, spec


def prepare(call: Call, wiring: Wiring) -> Tune:
    """The tune `call` asks for, checked before anything runs: its spec, the recipe as written,
    every candidate (a combination the recipe's checks refuse is listed, not run) and the plan in
    words."""
    f, spec = read_spec(call.path)
    for k in parse_set(list(call.sets)):
        if clash := next((a for a in spec.axes if overlaps(a, k)), None):
            why = (
                f"the tune varies {clash!r} across its candidates; setting it for every one "
                "makes them the same"
            )
            raise _refused(call.path, f"--set {k}", why, "change the tune's axes in the file")
    src, start = _source(call.path, f, spec, wiring.cell_file)
    base = load_cell(src, call, {}, None)
    if spec.gate is not None and spec.gate.metric not in base.recipe.metrics:
        why = (
            f"{spec.gate.metric!r} is not among the recipe's metrics "
            f"({', '.join(base.recipe.metrics)})"
        )
        raise _refused(call.path, "tune.gate.metric", why, "gate a metric the recipe scores")
    cells = _candidates(src, call, spec, base)
    if not (valid := [c for c in cells if c.verdict == Cell.verdict]):
        why = "every candidate is the recipe as written: the axes change nothing"
        if first := next((c.verdict for c in cells if c.verdict.startswith("invalid")), None):
            why = (
                f"all {len(cells)} candidates are refused by the recipe's checks; "
                f"the first: {first.removeprefix('invalid: ')}"
            )
        hint = "fix the axes' keys or values (runner check)"
        raise _refused(call.path, "tune.axes", why, hint)
    screened = spec.plan(len(valid))[0]
    if screened == 0:
        need = spec.runs(1, 1)
        why = (
            f"budget.cells {spec.budget.cells} leaves no room for a candidate (one needs {need} "
            "measured runs "
        )
        why += "with the baseline's" + (" and the compared cells'" if spec.compare else "") + ")"
        hint = f"set budget.cells to {need} or more"
        raise _refused(call.path, "tune.budget.cells", why, hint)
    plan = _plan_words(spec, cells, screened, base.recipe.name)
    return Tune(call, spec, src, start, base, cells, valid[:screened], plan)


def _candidates(src: RecipeFile, call: Call, spec: TuneSpec, base: LoadedRecipe) -> list[Cell]:
    """Every candidate, named `<name>-tNN`; one the recipe's checks refuse (e.g. vLLM's step
    smaller than its sequences) or that is the recipe as written has its verdict already."""
    cands = spec.candidates()
    # t1..t9, t01..t10, ...: more candidates later rename them (their runs start over)
    width = len(str(len(cands)))
    name, as_written = base.recipe.name, base.recipe.model_dump(exclude={"name"})
    cells = [Cell(i, f"{name}-t{i:0{width}d}", *c) for i, c in enumerate(cands, 1)]
    for c in cells:
        try:
            lr = load_cell(src, call, c.settings, c.name)
        except RunnerError as e:
            c.verdict = "invalid: " + " ".join(x.strip() for x in e.message.splitlines())[:300]
            continue
        if lr.recipe.model_dump(exclude={"name"}) == as_written:
            c.verdict = "the recipe as written (not run: it is the baseline)"
    return cells


def dry_run(t: Tune) -> str:
    """The candidates, their stage and the budget, with a time estimate from a stored screen:
    nothing runs."""
    rows = [
        [c.name, settings_text(c.settings, c.labels), "screen" if c in t.to_screen else c.verdict]
        for c in t.cells
    ]
    rows += [[h, "hand-written cell of the study", "confirm"] for h in t.spec.compare]
    head = f"# Tune: {t.name} (dry run)\n\n{t.plan}\n\n{_estimate(t)}\n\n"
    return head + table(rows, ["cell", "settings", "stage"])


def _estimate(t: Tune) -> str:
    """The dry run's time estimate, from the stored screen of the recipe as written (a measurement,
    scaled: each screen as long as it, each confirmation run as long as it on every example);
    without one, says so."""
    screen = read_result(RunFolder.of(t.call.out, f"{t.name}-screen"))
    one = run_s_at(screen)
    if one is None or screen is None:
        return (
            "Estimated time: not known yet (no finished screen of the recipe as written in this "
            "--out; the tune's first run measures it, and `--dry-run` then estimates from it)."
        )
    n = len(t.to_screen)
    rest = confirm_s(screen, t.spec, t.spec.confirmed(n))
    return (
        f"Estimated time: about {secs(one * n + rest)} ({n} screens of ~{secs(one)} each, as "
        f"the stored screen of the recipe as written took, then a confirmation of ~{secs(rest)} "
        f"on {confirm_examples(screen) or 0:,} examples)."
    )


def _source(
    path: Path, f: RecipeFile, spec: TuneSpec, cell_file: CellFile
) -> tuple[RecipeFile, str | None]:
    """The recipe the candidates change (a study: its `tune.start` cell, else its baseline cell)
    and the start cell's name (None: not a study), the hand-written cells of `compare` checked to
    exist."""
    if not f.is_study:
        if spec.start or spec.compare:
            why = "only a study file has cells to start from or compare with"
            key = "tune.start" if spec.start else "tune.compare"
            raise _refused(path, key, why, "remove it, or move the tune: block into the study")
        return f, None
    start = spec.start or (
        f.data.get("baseline") if isinstance(f.data.get("baseline"), str) else None
    )
    if start is None:
        hint = (
            "name the cell the candidates change: `tune: {start: CELL, ...}` (runner check "
            "FILE lists the cells)"
        )
        raise _refused(path, "tune.start", "a study's tune starts from one cell", hint)
    src = cell_file(path, start, "tune.start")
    for h in spec.compare:
        cell_file(path, h, "tune.compare")
    if start in spec.compare:
        why = f"{start!r} is the cell the tune starts from: it is confirmed already"
        raise _refused(path, "tune.compare", why, "compare other cells")
    return src, start


def load_cell(
    src: RecipeFile,
    call: Call,
    settings: dict[str, Any],
    cell: str | None,
    run: tuple[int, str] = (1, "auto"),
) -> LoadedRecipe:
    """The recipe `src` with one candidate's settings set into its data (as a study's matrix
    values are), named `cell` (None: its own name), with `run`'s repeat and interleave, then the
    call's --set items and --model-path mappings, validated."""
    run = {**({"name": cell} if cell else {}), "repeat": run[0], "interleave": run[1]}
    fresh = dataclasses.replace(src, data=with_settings(src, {**settings, **run}))
    [lr] = load_file(fresh, list(call.sets), model_paths=parse_model_paths(call.model_paths))
    check_name(lr.recipe.name, lr.path)
    if cell is None:
        check_model_paths(call.model_paths, [lr])
    return lr


def _front_chart(t: Tune, cells: list[Cell]) -> str | None:
    """The confirmed cells' gate score against time (intervals; the front green, gate failures red),
    beside the tune report; its file name, or None (no gate, scores not meaningful, fewer than two
    cells)."""
    if t.spec.gate is None:
        return None
    runs = [c.full for c in cells if c.full is not None]
    m, failed = t.spec.gate.metric, {c.name for c in cells if c.passed is False}
    score_ci = {r.name: ci for r in runs if (ci := score_interval(t.call.out, r, m)) is not None}
    path = t.call.out / f"{t.name}-tune-front.png"
    title = f"{m} against time, every example (green: the front; red: failed the gate)"
    return (
        path.name
        if accuracy_chart(runs, Accuracy(m, failed, score_ci), path, title=title)
        else None
    )


def _plan_words(spec: TuneSpec, cells: list[Cell], screened: int, name: str) -> str:
    n, confirmed = len(cells), spec.confirmed(screened)
    invalid = sum(c.verdict.startswith("invalid") for c in cells)
    valid = sum(c.verdict == Cell.verdict for c in cells)
    same = n - invalid - valid
    bad = f", {invalid} of them refused by the recipe's checks" if invalid else ""
    bad += f", {same} the recipe as written" if same else ""
    cut = f" (the budget of {spec.budget.cells} runs leaves {screened})" if screened < valid else ""
    words = (
        f"{n} candidates{bad}{cut}: each screened once on the first {spec.screen.examples} "
        f"examples with the recipe as written ({name}, the baseline); the best {confirmed} then "
        f"run on every example {spec.confirm.repeat} times each, with the baseline"
    )
    words += f" and the hand-written {', '.join(spec.compare)}" if spec.compare else ""
    words += f": at most {spec.runs(screened, confirmed)} measured runs. Objective: "
    words += "generation time" if spec.objective == "generate_s" else "output tokens per second"
    gate = spec.gate
    if gate is not None:
        bound = (
            f"drop at most {gate.max_drop}"
            if gate.max_drop is not None
            else f"keep {gate.relative:.0%}"
        )
        words += f"; gate: {gate.metric}, {bound} (paired 95% interval, on every example)"
    if spec.budget.minutes:
        words += (
            f"; the {spec.budget.minutes:g}-minute budget covers the screen and the "
            "confirmation: screening stops when the time spent plus the confirmation's projected "
            "time would pass it"
        )
    return words + "."


# (runs, limit, the stage in words) -> results by name
Stages = Callable[[list[LoadedRecipe], int | None, str], dict[str, RunResult]]


def _stages(t: Tune, wiring: Wiring) -> Stages:
    """The tune's runs, stage by stage, through the orchestrator (`report_only`: what is stored of
    these very runs). Each stage is said before it runs, with the tune's time so far."""
    c, ex = t.call, Executor(kind="local", in_process=t.call.in_process)
    begun: list[float] = []  # when each stage started

    def run(loaded: list[LoadedRecipe], limit: int | None, what: str) -> dict[str, RunResult]:
        opts = RunOptions(out=c.out, command="", progress=c.progress, call=new_call(), limit=limit)
        if c.report_only:  # a stored run of other settings is not theirs
            keys = {
                lr.recipe.name: make_unit(lr, opts, host=False, library=False).run_key
                for lr in loaded
            }
            got = {n: read_result(RunFolder.of(c.out, n)) for n in keys}
            return {n: r for n, r in got.items() if r is not None and r.run_key == keys[n]}
        so_far = f"; {secs(monotonic() - begun[0])} into the tune" if begun else ""
        begun.append(monotonic())
        wiring.say(f"tune {t.name}: {what}{so_far}", True)
        return {r.name: r for r in run_loaded(loaded, opts, ex, wings=wiring.wings, say=wiring.say)}

    return run


def run(t: Tune, wiring: Wiring) -> Ran:
    """Screen the candidates (the budget's share, the baseline's screen first: the gate's
    reference), confirm the best with the baseline and the hand-written cells, decide, write the
    report."""
    spec, out, name, stages = t.spec, t.call.out, t.name, _stages(t, wiring)
    screen = f"{name}-screen"
    base = Cell(
        0, name, {}, screen=stages([t.load({}, screen)], spec.screen.examples, _BASE).get(screen)
    )
    _screen(t, base, stages, wiring.say)
    samples = lambda r: samples_by_id(out, r)  # noqa: E731  (search reads only runs that exist)
    kept = keep_after_screen(t.to_screen, base, spec, samples)
    hand = [Cell(-1, h, {}, verdict="hand-written") for h in spec.compare]
    confirm = [t.load(c.settings, c.name, spec.confirm.repeat) for c in kept]
    both = [*_as_written(t, wiring), *confirm]
    got = stages(both, None, f"confirmation ({sum(lr.recipe.repeat for lr in both)} runs)")
    for c in [base, *kept, *hand]:
        c.full = got.get(c.name)
    if t.call.report_only and base.screen is None and base.full is None:
        raise RunnerError(
            f"no stored run of this tune in {out}", field="--report-only", hint="run the tune first"
        )
    decision = decide(kept, base, spec, samples, hand)
    pick = decision.winners[0] if decision.winners else base
    tied = len(decision.winners) > 1
    vs = against_hand_written(pick, hand, spec)
    versus = hand_words(pick, base, *vs, tied=tied) if vs else None
    recipe = None
    # the file's recipe with this call's --set (as `runner go` applies them), then the winner's
    if decision.winners:
        data = copy.deepcopy(t.src.data)
        apply_overrides(data, list(t.call.sets), {}, str(t.call.path))
        recipe = winner_yaml(data, decision.winners[0].settings, name)
    chart = _front_chart(t, [base, *t.cells, *hand])
    report = out / f"{check_name(name)}-tune.md"
    words = decision.words + ("\n" + versus if versus else "")
    runs = (x for c in [base, *t.to_screen, *hand] for x in (c.screen, c.full))
    failed = any(x is not None and x.status != "ok" for x in runs)
    ran = Ran(base, t.cells, hand, decision, versus, recipe, chart, report, words, failed)
    write_text_atomic(report, tune_markdown(name, spec, t.plan, ran))
    return ran


_BASE = "screen of the recipe as written (the baseline)"


def _screen(t: Tune, base: Cell, stages: Stages, say: Say) -> None:
    """The candidates' screens, `screen.chunk` at a time, until the minutes budget (spent + the
    confirmation's projected time) would be passed."""
    spec, cells = t.spec, t.to_screen
    for start in range(0, len(cells), spec.screen.chunk):
        if spec.budget.minutes:
            ahead = confirm_s(base.screen, spec, spec.confirmed(max(start, 1)))
            if (spent_s := cost_s([base, *cells])) + ahead > spec.budget.minutes * 60:
                spent = f"{secs(spent_s)} spent + {secs(ahead)} projected for the confirmation"
                stop = f"screening stops at {start} of {len(cells)}"
                say(f"tune {t.name}: the minutes budget is reached ({spent}); {stop}", False)
                return
        part, k = cells[start : start + spec.screen.chunk], start // spec.screen.chunk + 1
        span = f"cells {start + 1}-{start + len(part)}" if len(part) > 1 else f"cell {start + 1}"
        what = f"screen {k} of {-(-len(cells) // spec.screen.chunk)} ({span} of {len(cells)})"
        got = stages(
            [t.load(c.settings, f"{c.name}-screen") for c in part], spec.screen.examples, what
        )
        for c in part:
            c.screen = got.get(f"{c.name}-screen")


def _as_written(t: Tune, wiring: Wiring) -> list[LoadedRecipe]:
    """The recipe as written and the hand-written cells, for the confirmation. A study's start and
    hand-written cells run as its own cells with the confirmation's repeats: the study's summary
    counts them, and a later `runner go` of the study finds them done."""
    r = t.spec.confirm.repeat
    if t.cell is None:
        return [t.load({}, t.name, r)]
    sets = (*t.call.sets, f"repeat={r}", f"interleave={t.spec.confirm.interleave}")
    asked = Asked(sets, t.call.model_paths, ",".join([t.cell, *t.spec.compare]))
    loaded = load_all((str(t.call.path),), asked, unused_ok=True, studies=wiring.studies)
    by = {lr.recipe.name: lr for lr in loaded}
    return [by[n] for n in (t.cell, *t.spec.compare)]
