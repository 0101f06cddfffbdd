"""What `go` and `check` can refuse before anything runs, without importing an engine library."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from runner.config.recipe import LoadedRecipe
from runner.engines.builtin import BUILTIN_PREFIX, BUILTINS, is_builtin
from runner.engines.tokenizing import check_model_source, looks_local
from runner.errors import RunnerError
from runner.inputs.prepare import Prepared


def _named(e: RunnerError, lr: LoadedRecipe) -> RunnerError:
    e.file = e.file or lr.path
    return e


def check_model(lr: LoadedRecipe, host: bool = True) -> None:
    """`host`: also the engine's checks of this machine (e.g. `device: cuda` needs a GPU here)."""
    r = lr.recipe
    if is_builtin(r.model.id) and r.model.id[len(BUILTIN_PREFIX) :] not in BUILTINS:
        raise RunnerError(
            f"unknown builtin model {r.model.id!r}; allowed: " + ", ".join(BUILTIN_PREFIX + b for b in BUILTINS),
            file=lr.path,
            field="model.id",
        )
    try:
        check_model_source(r.model)
        if host:
            r.engine.preflight(r.model)
        check_chat_template(lr)
    except RunnerError as e:
        raise _named(e, lr) from None


def tokenizer_has_chat_template(folder: Path) -> bool | None:
    """Whether a local tokenizer folder ships a chat template (None: cannot tell)."""
    if (folder / "chat_template.jinja").is_file() or (folder / "chat_template.json").is_file():
        return True
    cfg = folder / "tokenizer_config.json"
    if not cfg.is_file():
        return None
    try:
        return bool(json.loads(cfg.read_text(encoding="utf-8")).get("chat_template"))
    except (OSError, ValueError):
        return None


def check_chat_template(lr: LoadedRecipe) -> None:
    r = lr.recipe
    if not r.prompt.chat_template:
        return
    ref = r.model.tokenizer_id
    if is_builtin(ref) or not looks_local(ref):
        return  # builtins have one; a hub tokenizer is not on this machine to look at
    if tokenizer_has_chat_template(Path(ref).expanduser()) is False:
        raise RunnerError(
            f"chat_template is true but the tokenizer in {ref} has no chat template",
            field="prompt.chat_template",
            hint="set prompt.chat_template: false (plain text prompts), or use a tokenizer with a chat template",
        )


def check_runnable(lr: LoadedRecipe, prepared: Prepared, host: bool = True) -> None:
    """What `go` needs beyond `check`. `host`: also what this machine must have to run it (the engine's
    library, the engine's own checks); False where the recipe runs elsewhere (`--executor ray`: the
    worker checks them, see `check_host`)."""
    from runner.inputs.context import check_context

    check_model(lr, host=host)
    check_context(lr, prepared.examples, prepared.messages)
    if host:
        check_library(lr)


def check_library(lr: LoadedRecipe) -> None:
    lib = lr.recipe.engine.library
    if lib and importlib.util.find_spec(lib) is None:
        kind = lr.recipe.engine.kind
        raise RunnerError(
            f"{lib} is not installed in this Python, so `engine: kind: {kind}` cannot run here",
            file=lr.path,
            field="engine.kind",
            hint="run on a host with it installed (`runner check` works anywhere)",
        )


def check_host(lr: LoadedRecipe) -> None:
    """What the machine running the recipe must have: the engine's library and what its checks ask for."""
    check_library(lr)
    try:
        lr.recipe.engine.preflight(lr.recipe.model)
    except RunnerError as e:
        raise _named(e, lr) from None
