"""`runner tune FILE`: the fastest settings that keep accuracy, searched over the file's `tune:` block (the method is
in runner/tune/spec.py); every run is an ordinary cell under --out, so an interrupted tune continues."""

from __future__ import annotations

import json
from pathlib import Path

import click
from pydantic import ValidationError

from runner.base.errors import RunnerError
from runner.cli import EXIT_FAILED, cli, guard
from runner.cli.loading import MP_HELP, SET_HELP, load_all


@cli.command()
@click.argument("path")
@click.option("--out", default="reports", show_default=True, help="Folder for the runs and the tune report.")
@click.option("--dry-run", is_flag=True, help="List the candidates and the budget; run nothing.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help=SET_HELP)
@click.option("--model-path", "model_paths", multiple=True, metavar="HUB_ID=PATH", help=MP_HELP)
@click.option("--no-progress", is_flag=True, help="No progress bars.")
@click.option("--report-only", is_flag=True, help="Rebuild <out>/<name>-tune.md from the stored runs; run nothing.")
@click.option("--in-process", is_flag=True, hidden=True, help="Run recipes in this process (tests).")
@guard
def tune(path, out, dry_run, sets, model_paths, no_progress, report_only, in_process):
    """Search the `tune:` block of a recipe file for the fastest settings that keep its accuracy: every candidate
    screened on the first examples, the best confirmed on every example with repeats against the recipe as
    written, the gate checked on every example; writes <out>/<name>-tune.md with the trajectory, the winner (or
    the candidates within noise of each other) and its recipe as YAML. Exit 1 when a run failed."""
    from runner.config.loading import read_recipe_file
    from runner.tune.spec import TuneSpec

    f = read_recipe_file(path)
    if f.is_study or "tune" not in f.keys:
        why = "is a study file" if f.is_study else "has no `tune:` block"
        hint = "runner tune takes a recipe file with a `tune:` block (axes, objective, gate, budget); see "
        raise RunnerError(why, file=str(path), field="tune", hint=hint + "docs/recipe-reference.md, section Tune")
    try:
        spec = TuneSpec.model_validate(f.keys["tune"])
    except ValidationError as e:
        first = e.errors()[0]
        loc = ".".join(str(x) for x in ("tune", *first["loc"]))
        raise RunnerError(first["msg"], file=str(path), field=loc) from None
    [base] = load_all((path,), sets, model_paths)
    name = base.recipe.name
    if spec.gate is not None and spec.gate.metric not in base.recipe.metrics:
        why = f"{spec.gate.metric!r} is not among the recipe's metrics ({', '.join(base.recipe.metrics)})"
        raise RunnerError(why, file=str(path), field="tune.gate.metric", hint="gate a metric the recipe scores")
    cands = spec.candidates()
    width = len(str(len(cands)))  # t1..t9, t01..t10, ...: more candidates later rename them (their runs start over)
    names = [f"{name}-t{i:0{width}d}" for i in range(1, len(cands) + 1)]
    invalid = {}  # a combination the recipe's checks refuse (e.g. vLLM's step smaller than its sequences)
    for n, c in zip(names, cands):
        try:
            load_cell(path, sets, model_paths, c, n)
        except RunnerError as e:
            invalid[n] = " ".join(line.strip() for line in e.message.splitlines())[:300]
    valid = [n for n in names if n not in invalid]
    if not valid:
        why = (
            f"all {len(names)} candidates are refused by the recipe's checks; the first: {next(iter(invalid.values()))}"
        )
        raise RunnerError(why, file=str(path), field="tune.axes", hint="fix the axes' keys or values (runner check)")
    screened, confirmed = spec.plan(len(valid))
    if screened == 0:
        need = spec.runs(1, 1)
        why = (
            f"budget.cells {spec.budget.cells} leaves no room for a candidate (one needs {need} measured runs with the "
        )
        why += "baseline's)"
        raise RunnerError(why, file=str(path), field="tune.budget.cells", hint=f"set budget.cells to {need} or more")
    plan = _plan_words(spec, len(cands), screened, confirmed, len(invalid))
    from runner.tune.search import Cell

    cells = [Cell(i + 1, n, c) for i, (n, c) in enumerate(zip(names, cands))]
    for c in cells:
        if c.name in invalid:
            c.verdict = f"invalid: {invalid[c.name]}"
    to_screen = [c for c in cells if c.name not in invalid][:screened]
    if dry_run:
        from runner.base.format import table
        from runner.tune.report import settings_text

        click.echo(f"# Tune: {name} (dry run)\n\n{plan}\n")
        rows = [[c.name, settings_text(c.settings), "screen" if c in to_screen else c.verdict] for c in cells]
        click.echo(table(rows, ["cell", "settings", "stage"]))
        return
    run = dict(progress=not no_progress, in_process=in_process, report_only=report_only)
    _run(path, f, spec, base, cells, to_screen, sets, model_paths, Path(out), plan, run)


def load_cell(path, sets, model_paths, settings: dict, cell: str, repeat: int = 1, interleave: str = "auto"):
    """The recipe file with one candidate's settings, named `cell`."""
    extra = [f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in settings.items()]
    run = (f"name={cell}", f"repeat={repeat}", f"interleave={interleave}")
    [lr] = load_all((path,), (*sets, *extra, *run), model_paths)
    return lr


def _plan_words(spec, n: int, screened: int, confirmed: int, invalid: int = 0) -> str:
    bad = f", {invalid} of them refused by the recipe's checks" if invalid else ""
    cut = f" (the budget of {spec.budget.cells} runs leaves {screened})" if screened < n - invalid else ""
    words = (
        f"{n} candidates{bad}{cut}: each screened once on the first {spec.screen.examples} examples with the recipe "
    )
    words += f"as written (the baseline); the best {confirmed} then run on every example {spec.confirm.repeat} times "
    words += f"each, with the baseline: at most {spec.runs(screened, confirmed)} measured runs. Objective: "
    words += "generation time" if spec.objective == "generate_s" else "output tokens per second"
    gate = spec.gate
    if gate is not None:
        bound = f"drop at most {gate.max_drop}" if gate.max_drop is not None else f"keep {gate.relative:.0%}"
        words += f"; gate: {gate.metric}, {bound} (paired 95% interval, on every example)"
    if spec.budget.minutes:
        words += f"; the screening stops after {spec.budget.minutes:g} minutes of measured runs"
    return words + "."


def _run(path, f, spec, base_lr, every, cells, sets, model_paths, out, plan, run) -> None:
    """Screen `cells` (of `every` candidate), confirm the best, decide, write the report."""
    from runner.base.files import write_text_atomic
    from runner.cli.go import Executor, new_call, run_loaded
    from runner.config.overrides import apply_overrides
    from runner.folder import RunFolder, read_result
    from runner.report.summary import samples_by_id
    from runner.run.job import RunOptions, make_unit
    from runner.tune.report import cost_s, tune_markdown, tune_report_path, winner_yaml
    from runner.tune.search import Cell, decide, keep_after_screen

    name = base_lr.recipe.name
    ex = Executor(kind="local", in_process=run["in_process"])
    samples = lambda r: samples_by_id(out, r) if r is not None else {}

    def load(settings: dict, cell: str, repeat: int = 1):
        return load_cell(path, sets, model_paths, settings, cell, repeat, spec.confirm.interleave)

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
        if spec.budget.minutes and cost_s([base, *cells]) > spec.budget.minutes * 60:
            click.echo(f"tune {name}: the minutes budget is spent; screening stops at {start} of {len(cells)}")
            break
        part = cells[start : start + chunk]
        got = stage([load(c.settings, f"{c.name}-screen") for c in part], lim)
        for c in part:
            c.screen = got.get(f"{c.name}-screen")
    kept = keep_after_screen(cells, base, spec, samples)
    r = spec.confirm.repeat
    got = stage([load({}, name, r), *(load(c.settings, c.name, r) for c in kept)], None)
    base.full = got.get(name)
    for c in kept:
        c.full = got.get(c.name)
    if run["report_only"] and base.screen is None and base.full is None:
        raise RunnerError(f"no stored run of this tune in {out}", field="--report-only", hint="run the tune first")
    decision = decide(kept, base, spec, samples)
    recipe = None
    if decision.winners:  # the file's recipe with this call's --set (as `runner go` applies them), then the winner's
        data = json.loads(json.dumps(f.data))
        apply_overrides(data, list(sets), {}, str(path))
        recipe = winner_yaml(data, decision.winners[0].settings, name)
    report = tune_report_path(out, name)
    write_text_atomic(report, tune_markdown(name, spec, base, every, decision, plan, recipe))
    click.echo(f"tune {name}: {decision.words.replace('**', '')}\ntune report: {report}")
    if any(x.status != "ok" for c in [base, *cells] for x in (c.screen, c.full) if x is not None):
        raise SystemExit(EXIT_FAILED)
