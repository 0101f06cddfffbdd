"""The command line. The only place errors become exit codes:
0 = every recipe succeeded, 1 = some recipe failed, 2 = bad input (nothing run)."""
from __future__ import annotations

import glob
import shlex
import sys
from pathlib import Path

import click

from runner import __version__
from runner.errors import RunnerError

EXIT_FAILED, EXIT_BAD_INPUT = 1, 2


class UserError(click.ClickException):
    exit_code = EXIT_BAD_INPUT

    def format_message(self) -> str:
        return self.message


def expand_paths(paths: tuple[str, ...]) -> list[Path]:
    """Files, folders (their *.yaml / *.yml) and globs the shell did not expand."""
    out: list[Path] = []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            found = sorted([*path.glob("*.yaml"), *path.glob("*.yml")])
            if not found:
                raise RunnerError("folder has no .yaml/.yml recipes", file=p)
            out += found
        elif path.exists():
            out.append(path)
        elif any(ch in p for ch in "*?["):
            found = sorted(Path(x) for x in glob.glob(p))
            if not found:
                raise RunnerError("glob matches no file", file=p)
            out += found
        else:
            raise RunnerError("file not found", file=p)
    seen, unique = set(), []
    for p in out:
        if p.resolve() not in seen:
            seen.add(p.resolve())
            unique.append(p)
    return unique


RESERVED_NAMES = {"summary.md", "time.png", "memory.png", "accuracy_vs_time.png"}


def parse_model_paths(items: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for it in items:
        if "=" not in it:
            raise RunnerError(f"--model-path {it!r}: expected HUB_ID=PATH", field="--model-path")
        k, v = it.split("=", 1)
        out[k] = str(Path(v).expanduser().resolve())
    return out


def load_all(paths: tuple[str, ...], sets: tuple[str, ...], model_paths: tuple[str, ...] = ()):
    from runner.config.loading import load_recipe
    mp = parse_model_paths(model_paths)
    loaded = []
    for p in expand_paths(paths):
        lr = load_recipe(p, list(sets))
        extra = [f"model.{k}={mp[v]}" for k, v in (("id", lr.recipe.model.id), ("tokenizer", lr.recipe.model.tokenizer))
                 if v in mp]
        if lr.recipe.model.tokenizer is None and lr.recipe.model.id in mp:
            extra.append(f"model.tokenizer={mp[lr.recipe.model.id]}")
        if extra:
            lr = load_recipe(p, list(sets) + extra)
        loaded.append(lr)
    names: dict[str, str] = {}
    for lr in loaded:
        n = lr.recipe.name
        if n in RESERVED_NAMES:
            raise RunnerError(f"{n!r} is the name of a file the summary writes; choose another name",
                              file=lr.path, field="name")
        if n in names:
            raise RunnerError(f"two recipes are named {n!r}: {names[n]} and {lr.path}; names must be unique "
                              "in one call (they name the report folders)", field="name")
        names[n] = lr.path
    return loaded


def guard(fn):
    """Turn user errors into one-screen messages with exit code 2."""
    import functools

    @functools.wraps(fn)
    def wrapper(*a, **kw):
        try:
            return fn(*a, **kw)
        except RunnerError as e:
            raise UserError(e.render())
    return wrapper


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="runner")
def cli():
    """Declarative experiment runner for LLM inference speed-ups.

    Write one YAML recipe per experiment (model, engine, dataset, prompt,
    sampling, metrics), then `runner go recipes/*.yaml`. Each recipe runs in
    its own process; reports go to reports/<name>/ and reports/summary.md.
    The recipe reference is docs/recipe-reference.md.
    """


MP_HELP = ("Load a hub model from a local folder instead: HUB_ID=PATH (repeatable; applies to model.id and "
           "model.tokenizer of every recipe that names HUB_ID).")
SET_HELP = "Override a recipe field, e.g. --set model.id=../shared/models/x (repeatable; value parsed as YAML)."


@cli.command()
@click.argument("paths", nargs=-1, required=True)
@click.option("--out", "out", default="reports", show_default=True, type=click.Path(file_okay=False),
              help="Folder for the reports.")
@click.option("--limit", type=click.IntRange(min=1), help="Run only the first N examples of each recipe.")
@click.option("--estimate", type=click.IntRange(min=2),
              help="Run N randomly chosen examples (fixed seed) and project the full-dataset time, with a 95% "
              "interval; marked as an estimate everywhere it is shown.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help=SET_HELP)
@click.option("--model-path", "model_paths", multiple=True, metavar="HUB_ID=PATH", help=MP_HELP)
@click.option("--timeout", type=click.IntRange(min=1), help="Seconds per recipe before it is ended and "
              "recorded failed (a recipe's own timeout_s wins).")
@click.option("--baseline", help="Name of the recipe the summary compares against (default: the recipe "
              "with `baseline: true`).")
@click.option("--force", is_flag=True, help="Rerun recipes whose complete results are already in --out "
              "(default: an unchanged recipe is skipped; an interrupted one continues from its finished samples).")
@click.option("--in-process", is_flag=True, hidden=True, help="Run recipes in this process (tests).")
@click.option("--no-progress", is_flag=True, help="No progress bars.")
@guard
def go(paths, out, limit, estimate, sets, model_paths, timeout, baseline, force, in_process, no_progress):
    """Run recipes (files, folders or globs) and write Markdown reports.

    Each recipe runs in its own process; an unchanged recipe whose results are
    complete in --out is skipped, an interrupted one continues from its
    finished samples. Exit code 0 when every recipe succeeded, 1 when any
    failed (the others still run and report), 2 for bad input (nothing is
    run), 130 when interrupted."""
    from runner.reporting.markdown import write_summary
    loaded = load_all(paths, sets, model_paths)
    if baseline and baseline not in {lr.recipe.name for lr in loaded}:
        raise RunnerError(f"--baseline {baseline!r} names no recipe of this call; recipes: "
                          + ", ".join(lr.recipe.name for lr in loaded))
    from runner.execution.run import input_hashes
    prepared = []
    for lr in loaded:
        # handed to the run: it runs (and records the hashes of) what was checked here
        prepared.append((preflight(lr, limit, estimate), input_hashes(lr)))
        runnable(lr)
    try:
        Path(out).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise RunnerError(f"cannot create the report folder: {e.strerror}", file=out, field="--out")
    import signal
    old_handler = signal.signal(signal.SIGTERM, _sigterm)
    out_dir = Path(out)
    command = "runner go " + " ".join(shlex.quote(a) for a in sys.argv[2:]) if sys.argv[1:2] == ["go"] else ""
    results = []
    try:
        _run_all(loaded, prepared, results, out_dir, limit, estimate, timeout, force, in_process, no_progress,
                 command)
    except KeyboardInterrupt:
        if results:
            write_summary(results, out_dir, baseline)
        click.echo(f"interrupted: {len(results)} of {len(loaded)} recipes finished; finished samples of the "
                   "interrupted recipe are kept, and the same command resumes", err=True)
        sys.exit(130)
    finally:
        signal.signal(signal.SIGTERM, old_handler)
    summary = write_summary(results, out_dir, baseline)
    click.echo(f"summary: {summary}")
    if any(r.status != "ok" for r in results):
        sys.exit(EXIT_FAILED)


def _sigterm(signum, frame):
    raise KeyboardInterrupt


def _run_all(loaded, prepared, results, out_dir, limit, estimate, timeout, force, in_process, no_progress,
             command):
    from runner.reporting.markdown import write_report
    for i, (lr, (prep, inputs)) in enumerate(zip(loaded, prepared), 1):
        r = lr.recipe
        click.echo(f"[{i}/{len(loaded)}] {r.name} ({r.engine.kind}, {r.model.id})", err=True)
        t = r.timeout_s or timeout
        prev = None if force else previous_result(out_dir, lr, limit, estimate)
        if prev is not None:
            results.append(prev)
            click.echo(f"skip {r.name}: unchanged since {prev.finished_at} (results complete; --force reruns)")
            continue
        if force:
            (out_dir / r.name / "samples.partial.jsonl").unlink(missing_ok=True)
        if not in_process:      # engine start can take a minute with nothing on screen: say where to look
            click.echo(f"  engine output: {out_dir / r.name / 'engine.log'}", err=True)
        if in_process:
            from runner.execution.run import RunOptions, run_recipe
            res = run_recipe(lr, RunOptions(out=out_dir, limit=limit, estimate=estimate, command=command,
                                            progress=not no_progress), prep, inputs)
        else:
            from runner.execution.isolate import run_isolated
            res = run_isolated(lr, out_dir, limit=limit, estimate=estimate, timeout_s=t, command=command,
                               progress=not no_progress, prepared=prep, inputs=inputs)
        path = write_report(res, out_dir)
        results.append(res)
        click.echo(one_line(res, path))


def previous_result(out_dir: Path, lr, limit, estimate):
    """The stored result of this exact recipe (same run key) if it completed, else None."""
    from runner.reporting.results import RunResult
    from runner.execution.run import RunOptions, run_key
    p = out_dir / lr.recipe.name / "results.json"
    if not p.exists():
        return None
    try:
        prev = RunResult.model_validate_json(p.read_text(encoding="utf-8"))
    except ValueError:
        return None
    key = run_key(lr, RunOptions(out=out_dir, limit=limit, estimate=estimate))
    return prev if prev.status == "ok" and prev.run_key == key else None


def one_line(res, path) -> str:
    if res.status != "ok":
        line = f"FAILED {res.name}: {res.error}"
        if res.hint:
            line += f"\n  hint: {res.hint}"
        return line + f"\n  report: {path}"
    from runner.reporting.markdown import secs
    t = res.timings
    bits = [f"ok {res.name}: {res.n_samples} examples", f"generation {secs(t.generate_s)}",
            f"start {secs(t.load_s)}", f"{res.throughput.requests_per_s:.2f} req/s"]
    if res.estimate:
        bits.append(f"projected full run ~{secs(res.estimate.projected_s)} (estimate)")
    if res.scores:
        sc = ", ".join(f"{k} {v:.3f}" for k, v in res.scores.items())
        bits.append(sc + ("" if res.scores_meaningful else " (random weights: not meaningful)"))
    line = "; ".join(bits)
    for k in res.knobs:
        if k.status == "ignored":
            line += f"\n  WARNING: knob {k.name} did not take effect (requested {k.requested!r}, " \
                    f"effective {k.effective!r}): {k.evidence}"
    return line + f"\n  report: {path}"


def runnable(lr) -> None:
    """What `go` needs beyond `check`, found without importing an engine library."""
    import importlib.util

    from runner.engines.builtin import BUILTIN_PREFIX, BUILTINS, is_builtin
    from runner.engines.tokenizing import check_model_source
    r = lr.recipe
    if is_builtin(r.model.id) and r.model.id[len(BUILTIN_PREFIX):] not in BUILTINS:
        raise RunnerError(f"unknown builtin model {r.model.id!r}; allowed: "
                          + ", ".join(BUILTIN_PREFIX + b for b in BUILTINS), file=lr.path, field="model.id")
    try:
        check_model_source(r.model)
    except RunnerError as e:
        e.file = lr.path
        raise
    lib = r.engine.kind                  # each engine kind is named after its library
    if importlib.util.find_spec(lib) is None:
        raise RunnerError(f"{lib} is not installed in this Python, so `engine: kind: {r.engine.kind}` cannot run "
                          "here", file=lr.path, field="engine.kind",
                          hint="run on a host with it installed (`runner check` works anywhere)")


def preflight(lr, limit: int | None = None, estimate: int | None = None):
    """Everything that can be checked without a model: dataset, templates, prompts."""
    from runner.execution.run import RunOptions, prepare
    return prepare(lr, RunOptions(out=Path("."), limit=limit, estimate=estimate))


@cli.command()
@click.argument("paths", nargs=-1, required=True)
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help=SET_HELP)
@click.option("--model-path", "model_paths", multiple=True, metavar="HUB_ID=PATH", help=MP_HELP)
@click.option("--no-tokens", is_flag=True, help="Skip prompt-token statistics (they need the tokenizer).")
@guard
def check(paths, sets, model_paths, no_tokens):
    """Validate recipes without loading a model; show the first prompt and token statistics."""
    for lr in load_all(paths, sets, model_paths):
        examples, messages, n_dataset, n_target = preflight(lr)
        r = lr.recipe
        est = f" (an estimate: runs {len(examples)}, projects {n_target})" if len(examples) < n_target else ""
        click.echo(f"ok {lr.path}: {r.name} — {r.engine.kind}, {r.model.id}, {n_target} of {n_dataset} examples{est}")
        click.echo("first prompt:")
        for m in messages[0]:
            click.echo(f"  [{m['role']}] " + m["content"].replace("\n", "\n    "))
        if not no_tokens:
            click.echo("  " + token_stats(r, messages))


def token_stats(r, messages) -> str:
    try:
        from runner.engines.builtin import ensure_builtin, is_builtin
        from runner.engines.tokenizing import (
            encode_prompts,
            load_tokenizer,
            uses_chat_template,
        )
        builtin = ensure_builtin(r.model.id) if is_builtin(r.model.id) else None
        tok = load_tokenizer(r.model, builtin, local_only=True)   # no hub retries: check is a quick look
        chat = uses_chat_template(tok, r.prompt.chat_template)
        lens = [len(i) for i in encode_prompts(tok, messages, chat)[1]]
    except Exception as e:   # no transformers here, or the tokenizer is not on this machine
        return f"prompt tokens: unavailable ({type(e).__name__}: {str(e).splitlines()[0][:120]})"
    from runner.reporting.stats import percentile
    return (f"prompt tokens over {len(lens)} prompts: mean {sum(lens) / len(lens):.1f}, "
            f"p50 {percentile(lens, 50):.0f}, p90 {percentile(lens, 90):.0f}, max {max(lens)}, "
            f"total {sum(lens):,}; chat template: {'yes' if chat else 'no'}")


@cli.command()
@click.argument("out", type=click.Path(exists=True, file_okay=False))
@click.option("--baseline", help="Recipe name to compare against.")
@guard
def report(out, baseline):
    """Rebuild every report.md and summary.md from stored results.json files (runs nothing)."""
    from runner.reporting.markdown import load_results, write_report, write_summary
    out_dir = Path(out)
    results = load_results(out_dir)
    if not results:
        raise RunnerError("no */results.json here", file=out)
    if baseline and baseline not in {r.name for r in results}:
        raise RunnerError(f"--baseline {baseline!r} names no stored result; results: "
                          + ", ".join(r.name for r in results))
    for r in results:
        write_report(r, out_dir)
    click.echo(f"summary: {write_summary(results, out_dir, baseline)} ({len(results)} recipes)")


@cli.command()
@click.argument("what", type=click.Choice(["recipe", "results"]), default="recipe")
def schema(what):
    """Print the JSON Schema of recipe files or of results.json."""
    import json

    from runner.config.schema import recipe_schema, results_schema
    click.echo(json.dumps(recipe_schema() if what == "recipe" else results_schema(), indent=2, ensure_ascii=False))


def main():
    cli()
