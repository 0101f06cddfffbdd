"""What travels from `runner go` to a recipe's process: the options of the call and, per recipe, its
validated recipe, prepared inputs, run key and the plan made for it. Several recipes that share an
engine (study cells that differ only in request-side settings) travel in one job and run on one
engine, in order. Before that, what `go` and `check` can refuse before anything runs, without
importing an engine library."""

from __future__ import annotations

import importlib.util
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.base.errors import RunnerError
from runner.engines.builtin import BUILTIN_PREFIX, BUILTINS, is_builtin
from runner.engines.hf import check_model_files, check_model_source, counting_tokenizer, looks_local
from runner.folder import RunFolder
from runner.inputs.context import check_context
from runner.inputs.prepare import Prepared, prepare
from runner.recipe import LoadedRecipe
from runner.run.resume import NOT_IN_KEY, run_key

# what a recipe may change and still run on the same engine (the request side)
REQUEST_SIDE = {
    *NOT_IN_KEY,
    "name",
    "prompt",
    "sampling",
    "dataset",
    "metrics",
    "scoring",
    "estimate",
}


@dataclass(frozen=True)
class RunOptions:
    out: Path
    limit: int | None = None
    estimate: int | None = None  # overrides the recipe's `estimate`
    command: str = ""
    progress: bool = True
    timeout_s: float | None = None  # the call's --timeout (a recipe's own timeout_s wins)
    call: str = ""  # names this `runner go` call in every repeat it measures
    force: bool = False  # rerun recipes whose complete results are stored
    # the recipe the summary compares against (None: the recipes' choice)
    baseline: str | None = None

    def folder(self, name: str) -> RunFolder:
        return RunFolder.of(self.out, name)


@dataclass(frozen=True)
class Unit:
    loaded: LoadedRecipe
    prepared: Prepared
    run_key: str
    # what `runner plan` predicted for it, made in the parent (JSON)
    plan: dict[str, Any] | None = None
    prepare_s: float = 0.0  # make_unit's time: the data loaded, the prompts rendered, the checks

    @property
    def name(self) -> str:
        return self.loaded.recipe.name

    def timeout(self, call_s: float | None) -> float | None:
        """Its recipe's timeout_s, else the call's --timeout (None: neither)."""
        return self.loaded.recipe.timeout_s or call_s


@dataclass(frozen=True)
class Job:
    units: tuple[Unit, ...]
    options: RunOptions
    # the repeats to measure (1-based); None: all each recipe asks for
    rounds: tuple[int, ...] | None = None
    # one turn of an interleaving with engine restarts (the other turns in other jobs)
    restarts: bool = False
    spawned_at: float | None = None  # time.time() when its worker process was asked to start
    # seconds of each recipe's timeout its earlier turns of this call used (by name)
    spent: tuple[tuple[str, float], ...] = ()

    def timeout_s(self) -> float | None:
        """The sum of the units' timeouts (each its recipe's, else the call's), less what their
        earlier turns used; none if any has none. A recipe's timeout covers all its repeats."""
        each = [u.timeout(self.options.timeout_s) for u in self.units]
        if any(t is None for t in each):
            return None
        used = dict(self.spent)
        return float(sum(max(0.0, t - used.get(u.name, 0.0)) for u, t in zip(self.units, each)))  # type: ignore[operator]

    def timeout_from(self) -> tuple[str, str]:
        """Where `timeout_s()` comes from, in words: the timed-out run's message says the first,
        its hint names the second to raise."""
        own = {u.loaded.recipe.timeout_s is not None for u in self.units}
        said, more = (
            ("--timeout", "--timeout")
            if own == {False}
            else ("timeout_s", "the recipe's timeout_s")
            if own == {True}
            else ("timeout_s, --timeout", "the recipes' timeout_s or --timeout")
        )
        said += ", summed over the job's recipes" if len(self.units) > 1 else ""
        return said + (", less what its earlier turns took" if self.spent else ""), more


def make_unit(lr: LoadedRecipe, opts: RunOptions, host: bool = True, library: bool = True) -> Unit:
    """Everything checkable without a model, done now: bad input stops the call before anything
    runs. `host`: also what this machine needs to run it (the engine's library, the engine's own
    checks); False where the recipe runs elsewhere (`--executor ray`: the worker checks them, see
    `check_host`). `library`: False where the caller checks the engine's library itself (`runner
    go`: a missing one fails that recipe only)."""
    t0 = time.perf_counter()
    prepared = prepare(lr, opts.limit, opts.estimate)
    check_model(lr, host=host)
    check_context(lr, prepared.examples, prepared.messages)
    check_engine_examples(lr, prepared.examples)
    if host and library:
        check_library(lr)
    # an --estimate not fewer than the examples runs them all: the same run as without it, unless
    # without it the recipe's own estimate would sample
    n, est = prepared.n_target, opts.estimate
    if est and est >= n and not (lr.recipe.estimate and lr.recipe.estimate < n):
        est = None
    key = run_key(lr.recipe.canonical(), prepared.inputs, opts.limit, est)
    return Unit(lr, prepared, key, prepare_s=time.perf_counter() - t0)


def engine_key(lr: LoadedRecipe) -> str:
    """Recipes with the same key can share one engine: same model, engine settings and chat
    template. A serving run (`load:`) starts a server of its own, so it shares with no other
    recipe."""
    rec: dict[str, Any] = lr.recipe.canonical()
    shared = {k: v for k, v in rec.items() if k not in REQUEST_SIDE}
    shared["chat_template"] = rec["prompt"].get("chat_template")
    if lr.recipe.load is not None:
        shared["serving_run"] = lr.recipe.name
    return json.dumps(shared, sort_keys=True)


def group_by_engine(
    units: list[Unit], call_timeout_s: float | None = None
) -> list[tuple[Unit, ...]]:
    """Units in groups that share an engine, in the order each group first appears. A recipe with a
    timeout (its own, else the call's) does not share with one without: a shared job's timeout is
    the sum of its recipes', so one without would leave the other's unbounded."""
    groups: dict[tuple[str, bool], list[Unit]] = {}
    for u in units:
        bounded = u.timeout(call_timeout_s) is not None
        groups.setdefault((engine_key(u.loaded), bounded), []).append(u)
    return [tuple(g) for g in groups.values()]


@contextmanager
def _named(lr: LoadedRecipe) -> Iterator[None]:
    """A RunnerError raised inside names the recipe's file where it names none."""
    try:
        yield
    except RunnerError as e:
        e.file = e.file or lr.path
        # a value the call gave (--set, or --model-path's mapping), not the file: said so
        if e.field and (given := [o for o in lr.overrides if o.partition("=")[0] == e.field]):
            e.message += f" (given by this call: {given[-1]})"
        raise e from None


def check_model(lr: LoadedRecipe, host: bool = True, weights: bool = True) -> None:
    """`host`: also the engine's checks of this machine (e.g. `device: cuda` needs a GPU here);
    `weights`: a local model folder must hold a config.json and weights (False for `runner plan`,
    which reads config.json only)."""
    r = lr.recipe
    if is_builtin(r.model.id) and r.model.id[len(BUILTIN_PREFIX) :] not in BUILTINS:
        allowed = ", ".join(BUILTIN_PREFIX + b for b in BUILTINS)
        raise RunnerError(
            f"unknown builtin model {r.model.id!r}; allowed: {allowed}",
            file=lr.path,
            field="model.id",
        )
    with _named(lr):
        check_model_source(r.model)
        if weights and not r.engine.fake:
            check_model_files(r.model)
        if host:
            r.engine.preflight(r.model)
        check_chat_template(lr)


def check_serving_tokenizer(model) -> None:
    """A serving run tokenizes its prompts in the runner (token counts, the benchmark client): its
    tokenizer must be on this machine, checked now rather than found missing after the server
    started (or asked of the hub)."""
    try:
        counting_tokenizer(model)
    except RunnerError as e:
        raise RunnerError(
            "a serving run (`load`) counts its prompts with the model's tokenizer, and "
            + e.message,
            field=e.field,
            hint="set model.tokenizer to a local tokenizer folder (the fake engine can use "
            "builtin:demo), or map the hub id with --model-path ID=PATH",
        ) from None


def check_chat_template(lr: LoadedRecipe) -> None:
    """A chat template asked of a local tokenizer folder that ships none (a builtin has one; a hub
    tokenizer is not on this machine to look at)."""
    r, ref = lr.recipe, lr.recipe.model.tokenizer_id
    if not r.prompt.chat_template or is_builtin(ref) or not looks_local(ref):
        return
    folder = Path(ref).expanduser()
    if any((folder / f"chat_template.{ext}").is_file() for ext in ("jinja", "json")):
        return
    try:
        config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return  # cannot tell
    if not config.get("chat_template"):
        raise RunnerError(
            f"chat_template is true but the tokenizer in {ref} has no chat template",
            field="prompt.chat_template",
            hint="set prompt.chat_template: false (plain text prompts), or use a tokenizer with a "
            "chat template",
        )


def check_engine_examples(lr: LoadedRecipe, examples) -> None:
    """What the engine would fail on for some example (the fake engine's reply template), named by
    the recipe."""
    with _named(lr):
        lr.recipe.engine.check_examples(examples)


def check_library(lr: LoadedRecipe) -> None:
    """What this machine lacks to run the recipe (`runner check` notes it, `runner go` records the
    recipe failed and runs the others): the engine's library, a serving run's tokenizer."""
    lib, kind = lr.recipe.engine.library, lr.recipe.engine.kind
    if lib and importlib.util.find_spec(lib) is None:
        raise RunnerError(
            f"{lib} is not installed in this Python, so `engine: kind: {kind}` cannot run here",
            file=lr.path,
            field="engine.kind",
            hint="run on a host with it installed (`runner check` works anywhere)",
        )
    if lr.recipe.load is not None:
        with _named(lr):
            check_serving_tokenizer(lr.recipe.model)


def check_host(lr: LoadedRecipe) -> None:
    """What the machine running the recipe must have: the engine's library and what its checks ask
    for."""
    check_library(lr)
    with _named(lr):
        lr.recipe.engine.preflight(lr.recipe.model)
