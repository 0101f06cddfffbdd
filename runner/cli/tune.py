"""`runner tune FILE`: the fastest settings that keep accuracy, searched over the file's `tune:` block (the method is
in runner/tune/spec.py); every run is an ordinary cell under --out, so an interrupted tune continues."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import click
from pydantic import ValidationError

from runner.base.errors import RunnerError
from runner.cli.app import EXIT_FAILED, cli, guard
from runner.cli.loading import MP_HELP, SET_HELP, load_all


@cli.command()
@click.argument("path")
@click.option("--out", default="reports", show_default=True, help="Folder for the runs and the tune report.")
@click.option("--dry-run", is_flag=True, help="List the candidates and the budget; run nothing.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help=SET_HELP)
@click.option("--model-path", "model_paths", multiple=True, metavar="HUB_ID=PATH", help=MP_HELP)
@click.option("--no-progress", is_flag=True, help="No progress bars.")
@click.option("--report-only", is_flag=True, help="Rebuild <out>/<name>-tune.md from the stored runs; run nothing.")
@click.option(
    "--usd-per-gpu-hour",
    type=click.FloatRange(min=0, min_open=True, max=1_000_000),
    metavar="X",
    help="Price of one GPU-hour in US dollars (the same as --set cost.usd_per_gpu_hour=X): reports add dollars.",
)
@click.option("--in-process", is_flag=True, hidden=True, help="Run recipes in this process (tests).")
@guard
def tune(path, out, dry_run, sets, model_paths, no_progress, report_only, usd_per_gpu_hour, in_process):
    """Search the `tune:` block of a recipe or study file for the fastest settings that keep its accuracy: every
    candidate screened on the first examples, the best confirmed on every example with repeats against the recipe
    as written (a study: its `tune.start` cell; the cells in `tune.compare` confirmed with them), the gate checked
    on every example; writes <out>/<name>-tune.md with the trajectory, the winner (or
    the candidates within noise of each other) and its recipe as YAML. Exit 1 when a run failed."""
    from runner.config.loading import read_recipe_file
    from runner.tune.spec import TuneSpec

    if usd_per_gpu_hour is not None:
        sets = (*sets, f"cost.usd_per_gpu_hour={usd_per_gpu_hour}")
    f = read_recipe_file(path)
    if "tune" not in f.keys:
        hint = "runner tune takes a recipe or study file with a `tune:` block (axes, objective, gate, budget); see "
        raise RunnerError("has no `tune:` block", file=str(path), field="tune", hint=hint + _DOCS)
    try:
        spec = TuneSpec.model_validate(f.keys["tune"])
    except ValidationError as e:
        first = e.errors()[0]
        loc = ".".join(str(x) for x in ("tune", *first["loc"]))
        raise RunnerError(first["msg"], file=str(path), field=loc) from None
    src, hand, cell = _source(path, f, spec)
    base = load_cell(src, sets, model_paths, {}, None)
    name = base.recipe.name
    if spec.gate is not None and spec.gate.metric not in base.recipe.metrics:
        why = f"{spec.gate.metric!r} is not among the recipe's metrics ({', '.join(base.recipe.metrics)})"
        raise RunnerError(why, file=str(path), field="tune.gate.metric", hint="gate a metric the recipe scores")
    cands, labels = spec.candidates(), spec.candidate_labels()
    width = len(str(len(cands)))  # t1..t9, t01..t10, ...: more candidates later rename them (their runs start over)
    names = [f"{name}-t{i:0{width}d}" for i in range(1, len(cands) + 1)]
    invalid, same = {}, set()  # a combination the recipe's checks refuse (e.g. vLLM's step smaller than its sequences)
    as_written = base.recipe.model_dump(exclude={"name"})
    for n, c in zip(names, cands):
        try:
            lr = load_cell(src, sets, model_paths, c, n)
        except RunnerError as e:
            invalid[n] = " ".join(line.strip() for line in e.message.splitlines())[:300]
            continue
        if lr.recipe.model_dump(exclude={"name"}) == as_written:
            same.add(n)
    valid = [n for n in names if n not in invalid and n not in same]
    if not valid:
        first = next(iter(invalid.values()), "")
        why = f"all {len(names)} candidates are refused by the recipe's checks; the first: {first}"
        if not invalid or len(same) == len(names):
            why = "every candidate is the recipe as written: the axes change nothing"
        raise RunnerError(why, file=str(path), field="tune.axes", hint="fix the axes' keys or values (runner check)")
    screened, confirmed = spec.plan(len(valid))
    if screened == 0:
        need = spec.runs(1, 1)
        why = (
            f"budget.cells {spec.budget.cells} leaves no room for a candidate (one needs {need} measured runs with the "
        )
        why += "baseline's" + (" and the compared cells'" if hand else "") + ")"
        raise RunnerError(why, file=str(path), field="tune.budget.cells", hint=f"set budget.cells to {need} or more")
    plan = _plan_words(spec, len(cands), screened, confirmed, len(invalid), len(same), name)
    from runner.tune.search import Cell

    cells = [Cell(i + 1, n, c, lab) for i, (n, c, lab) in enumerate(zip(names, cands, labels))]
    for c in cells:
        if c.name in invalid:
            c.verdict = f"invalid: {invalid[c.name]}"
        elif c.name in same:
            c.verdict = "the recipe as written (not run: it is the baseline)"
    to_screen = [c for c in cells if c.name in valid][:screened]
    if dry_run:
        from runner.base.format import table
        from runner.tune.report import settings_text

        click.echo(f"# Tune: {name} (dry run)\n\n{plan}\n\n{_estimate(out, name, spec, len(to_screen), hand)}\n")
        rows = [[c.name, settings_text(c.settings, c.labels), "screen" if c in to_screen else c.verdict] for c in cells]
        rows += [[h, "hand-written cell of the study", "confirm"] for h in hand]
        click.echo(table(rows, ["cell", "settings", "stage"]))
        return
    run = dict(progress=not no_progress, in_process=in_process, report_only=report_only, cell=cell)
    _run(path, src, spec, base, cells, to_screen, hand, sets, model_paths, Path(out), plan, run)


_DOCS = "docs/recipe-reference.md, section Tune"


def _estimate(out: str, name: str, spec, screened: int, hand: list[str]) -> str:
    """The dry run's time estimate, from the stored screen of the recipe as written (a measurement, scaled: each
    screen as long as it, each confirmation run as long as it on every example); without one, says so."""
    from runner.base.format import secs
    from runner.folder import RunFolder, read_result
    from runner.tune.report import confirm_s, run_s_at

    screen = read_result(RunFolder.of(Path(out), f"{name}-screen"))
    one = run_s_at(screen)
    if one is None or screen is None:
        return (
            "Estimated time: not known yet (no finished screen of the recipe as written in this --out; the tune's "
            "first run measures it, and `--dry-run` then estimates from it)."
        )
    rest = confirm_s(screen, spec, spec.confirmed(screened), len(hand)) or 0.0
    total = one * screened + rest
    words = f"Estimated time: about {secs(total)} ({screened} screens of ~{secs(one)} each, as the stored screen of "
    return (
        words + f"the recipe as written took, then a confirmation of ~{secs(rest)} on {screen.n_dataset:,} examples)."
    )


def _source(path, f, spec):
    """The recipe the candidates change (a study: its `tune.start` cell, else its baseline cell), the study's
    hand-written cells to compare (checked to exist) and the start cell's name (None: not a study)."""
    from runner.study.load import cell_file

    if not f.is_study:
        if spec.start or spec.compare:
            why = "only a study file has cells to start from or compare with"
            key = "tune.start" if spec.start else "tune.compare"
            raise RunnerError(why, file=str(path), field=key, hint="remove it, or move the tune: block into the study")
        return f, [], None
    start = spec.start or (f.data.get("baseline") if isinstance(f.data.get("baseline"), str) else None)
    if start is None:
        hint = "name the cell the candidates change: `tune: {start: CELL, ...}` (runner check FILE lists the cells)"
        raise RunnerError("a study's tune starts from one cell", file=str(path), field="tune.start", hint=hint)
    src = cell_file(path, start, "tune.start")
    for h in spec.compare:
        cell_file(path, h, "tune.compare")
    if start in spec.compare:
        why = f"{start!r} is the cell the tune starts from: it is confirmed already"
        raise RunnerError(why, file=str(path), field="tune.compare", hint="compare other cells")
    return src, list(spec.compare), start


def load_cell(src, sets, model_paths, settings: dict, cell: str | None, repeat: int = 1, interleave: str = "auto"):
    """The recipe `src` (a RecipeFile) with one candidate's settings, named `cell` (None: its own name)."""
    from runner.cli.loading import check_model_paths, parse_model_paths
    from runner.config.loading import load_file
    from runner.folder import check_name

    # as `--set` reads them: text fields take the text as written, others YAML (JSON is YAML)
    extra = [f"{k}={v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)}" for k, v in settings.items()]
    run = (*((f"name={cell}",) if cell else ()), f"repeat={repeat}", f"interleave={interleave}")
    fresh = dataclasses.replace(src, data=copy.deepcopy(src.data))  # the overrides are set into the data
    [lr] = load_file(fresh, [*sets, *extra, *run], model_paths=parse_model_paths(model_paths))
    check_name(lr.recipe.name, lr.path)
    if cell is None:
        check_model_paths(model_paths, [lr])
    return lr


def _front_chart(out: Path, name: str, spec, cells) -> str | None:
    """The confirmed cells' gate score against time (intervals; the front green, gate failures red), beside the tune
    report; its file name, or None (no gate, scores not meaningful, fewer than two cells)."""
    from runner.report.plots import accuracy_chart
    from runner.report.summary import score_interval

    runs = [c.full for c in cells if c.full is not None]
    if spec.gate is None:
        return None
    m, failed = spec.gate.metric, {c.name for c in cells if c.passed is False}
    score_ci = {r.name: ci for r in runs if (ci := score_interval(out, r, m)) is not None}
    path = Path(out) / f"{name}-tune-front.png"
    title = f"{m} against time, every example (green: the front; red: failed the gate)"
    return path.name if accuracy_chart(runs, m, path, title=title, failed=failed, score_ci=score_ci) else None


def _plan_words(spec, n: int, screened: int, confirmed: int, invalid: int, same: int, name: str) -> str:
    bad = f", {invalid} of them refused by the recipe's checks" if invalid else ""
    bad += f", {same} the recipe as written" if same else ""
    cut = f" (the budget of {spec.budget.cells} runs leaves {screened})" if screened < n - invalid - same else ""
    words = f"{n} candidates{bad}{cut}: each screened once on the first {spec.screen.examples} examples with the "
    words += f"recipe as written ({name}, the baseline); the best {confirmed} then run on every example "
    words += f"{spec.confirm.repeat} times each, with the baseline"
    words += f" and the hand-written {', '.join(spec.compare)}" if spec.compare else ""
    words += f": at most {spec.runs(screened, confirmed)} measured runs. Objective: "
    words += "generation time" if spec.objective == "generate_s" else "output tokens per second"
    gate = spec.gate
    if gate is not None:
        bound = f"drop at most {gate.max_drop}" if gate.max_drop is not None else f"keep {gate.relative:.0%}"
        words += f"; gate: {gate.metric}, {bound} (paired 95% interval, on every example)"
    if spec.budget.minutes:
        words += f"; the {spec.budget.minutes:g}-minute budget covers the screen and the confirmation: screening "
        words += "stops when the time spent plus the confirmation's projected time would pass it"
    return words + "."


def _run(path, src, spec, base_lr, every, cells, hand, sets, model_paths, out, plan, run) -> None:
    """Screen `cells` (of `every` candidate), confirm the best with the baseline and the `hand`-written cells,
    decide, write the report."""
    from runner.base.files import write_text_atomic
    from runner.base.format import secs
    from runner.cli.go import run_loaded
    from runner.config.overrides import apply_overrides
    from runner.folder import RunFolder, read_result
    from runner.orchestrate import Executor, new_call
    from runner.report.summary import samples_by_id
    from runner.run.job import RunOptions, make_unit
    from runner.tune.report import confirm_s, cost_s, hand_words, tune_markdown, tune_report_path, winner_yaml
    from runner.tune.search import Cell, against_hand_written, decide, keep_after_screen

    name = base_lr.recipe.name
    ex = Executor(kind="local", in_process=run["in_process"])
    samples = lambda r: samples_by_id(out, r) if r is not None else {}
    r, interleave = spec.confirm.repeat, spec.confirm.interleave

    def load(settings: dict, cell: str, repeat: int = 1):
        return load_cell(src, sets, model_paths, settings, cell, repeat, interleave)

    def stage(loaded, limit):
        opts = RunOptions(out=out, command="", progress=run["progress"], call=new_call(), limit=limit)
        if run["report_only"]:  # what is stored of these very runs (a stored run of other settings is not theirs)
            keys = {lr.recipe.name: make_unit(lr, opts, host=False, library=False).run_key for lr in loaded}
            return {n: r for n in keys if (r := read_result(RunFolder.of(out, n))) is not None and r.run_key == keys[n]}
        return {r.name: r for r in run_loaded(loaded, opts, ex)}

    base = Cell(0, name, {})
    lim, chunk = spec.screen.examples, spec.screen.chunk
    got = stage([load({}, f"{name}-screen")], lim)  # the baseline's screen first: the gate's reference
    base.screen = got.get(f"{name}-screen")
    for start in range(0, len(cells), chunk):
        if spec.budget.minutes:
            ahead = confirm_s(base.screen, spec, spec.confirmed(max(start, 1)), len(hand)) or 0.0
            if (spent_s := cost_s([base, *cells])) + ahead > spec.budget.minutes * 60:
                spent = f"{secs(spent_s)} spent + {secs(ahead)} projected for the confirmation"
                click.echo(
                    f"tune {name}: the minutes budget is reached ({spent}); screening stops at {start} of {len(cells)}"
                )
                break
        part = cells[start : start + chunk]
        got = stage([load(c.settings, f"{c.name}-screen") for c in part], lim)
        for c in part:
            c.screen = got.get(f"{c.name}-screen")
    kept = keep_after_screen(cells, base, spec, samples)
    hand_cells = [Cell(-1, h, {}, verdict="hand-written") for h in hand]
    if run["cell"] is None:
        as_written, hand_lr = [load({}, name, r)], []
    else:  # a study's start and hand-written cells run as its own cells with the confirmation's repeats: the
        # study's summary counts them, and a later `runner go` of the study finds them done
        only, run_sets = ",".join([run["cell"], *hand]), (*sets, f"repeat={r}", f"interleave={interleave}")
        by = {lr.recipe.name: lr for lr in load_all((path,), run_sets, model_paths, only=only, unused_ok=True)}
        as_written, hand_lr = [by[run["cell"]]], [by[h] for h in hand]
    got = stage([*as_written, *(load(c.settings, c.name, r) for c in kept), *hand_lr], None)
    base.full = got.get(name)
    for c in [*kept, *hand_cells]:
        c.full = got.get(c.name)
    if run["report_only"] and base.screen is None and base.full is None:
        raise RunnerError(f"no stored run of this tune in {out}", field="--report-only", hint="run the tune first")
    decision = decide(kept, base, spec, samples, hand_cells)
    pick = decision.winners[0] if decision.winners else base
    vs_hand = against_hand_written(pick, hand_cells, spec)
    recipe = None
    if decision.winners:  # the file's recipe with this call's --set (as `runner go` applies them), then the winner's
        data = json.loads(json.dumps(src.data))
        apply_overrides(data, list(sets), {}, str(path))
        recipe = winner_yaml(data, decision.winners[0].settings, name)
    report = tune_report_path(out, name)
    chart = _front_chart(out, name, spec, [base, *every, *hand_cells])
    text = tune_markdown(name, spec, base, every, decision, plan, recipe, hand_cells, pick, vs_hand, chart)
    write_text_atomic(report, text)
    words = decision.words + ("\n" + hand_words(pick, base, *vs_hand) if vs_hand else "")
    click.echo(f"tune {name}: {words.replace('**', '')}\ntune report: {report}")
    if any(x.status != "ok" for c in [base, *cells, *hand_cells] for x in (c.screen, c.full) if x is not None):
        raise SystemExit(EXIT_FAILED)
