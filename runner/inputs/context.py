"""Prompts against the model's context: a prompt that does not fit with `max_tokens` is refused
before anything runs (or, with `prompt.truncate: true`, cut from the left)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from runner.config.recipe import LoadedRecipe
from runner.engines.base import Messages
from runner.errors import RunnerError

# chat-template text around each message (role markers, separators), in tokens: generous
PER_MESSAGE, PER_PROMPT = 16, 16


def context_length(lr: LoadedRecipe) -> int | None:
    """The engine's context limit if the recipe sets one, else the model config's; None if unknown here."""
    limit = lr.recipe.engine.context_limit()
    if limit:
        return limit
    try:
        from runner.planning.recipe_plan import model_config

        cfg = model_config(lr)
    except (RunnerError, OSError, ValueError):
        return None
    n = cfg.get("max_position_embeddings") or cfg.get("n_positions") or cfg.get("max_sequence_length")
    return int(n) if n else None


def token_bound(messages: Messages) -> int:
    """An upper bound on the prompt's tokens: every token covers at least one byte of text."""
    return sum(len(m["content"].encode("utf-8")) + PER_MESSAGE for m in messages) + PER_PROMPT


def too_long(lr: LoadedRecipe, messages: Sequence[Messages], limit: int) -> list[int]:
    """Indices of the prompts whose token count + max_tokens exceeds `limit`, counted with the
    tokenizer for the few whose byte bound does not already prove they fit."""
    room = limit - lr.recipe.sampling.max_tokens
    maybe = [i for i, m in enumerate(messages) if token_bound(m) > room]
    if not maybe:
        return []
    from runner.engines.tokenizing import encode_prompts, load_tokenizer, uses_chat_template

    r = lr.recipe
    try:
        tok = load_tokenizer(r.model, local_only=True)
    except Exception:  # no tokenizer on this machine: the byte bound cannot be refined
        return []
    _, ids = encode_prompts(tok, [messages[i] for i in maybe], uses_chat_template(tok, r.prompt.chat_template))
    return [i for i, x in zip(maybe, ids) if len(x) > room]


def check_context(lr: LoadedRecipe, examples: Sequence[Any], messages: Sequence[Messages]) -> None:
    if lr.recipe.prompt.truncate:
        return
    limit = context_length(lr)
    if not limit:
        return
    over = too_long(lr, messages, limit)
    if over:
        ids = ", ".join(str(examples[i].id) for i in over[:5]) + (f" and {len(over) - 5} more" if len(over) > 5 else "")
        raise RunnerError(
            f"{len(over)} prompt(s) do not fit the model's context of {limit:,} tokens with "
            f"max_tokens {lr.recipe.sampling.max_tokens:,}: example {ids}",
            file=lr.path,
            field="prompt",
            hint="shorten the template or shots, lower sampling.max_tokens, raise "
            "engine.max_model_len, or set prompt.truncate: true to cut such prompts from the left",
        )


def truncate_left(ids: list[list[int]], limit: int | None, max_tokens: int) -> tuple[list[list[int]], int]:
    """Each prompt cut to its last `limit - max_tokens` tokens; the count of prompts cut."""
    if not limit:
        return ids, 0
    room = max(limit - max_tokens, 1)
    return [x[-room:] if len(x) > room else x for x in ids], sum(len(x) > room for x in ids)
