"""Prompts against the model's context: a prompt that does not fit with `max_tokens` is refused
before anything runs (or, with `prompt.truncate: true`, cut from the left)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from runner.base.errors import RunnerError
from runner.base.types import Messages
from runner.recipe import LoadedRecipe

# chat-template text around each message (role markers, separators), in tokens: generous
PER_MESSAGE, PER_PROMPT = 16, 16


def context_length(lr: LoadedRecipe) -> int | None:
    """The engine's context limit if the recipe sets one, else the model config's; None if unknown
    here."""
    if limit := lr.recipe.engine.context_limit():
        return limit
    try:
        from runner.engines.hf import model_config

        cfg = model_config(lr.recipe.model, lr.path)
    except (RunnerError, OSError, ValueError) as e:
        if isinstance(e, RunnerError) and lr.recipe.model.gguf_path is not None:
            e.file = e.file or lr.path  # read from the file itself: the file is damaged
            raise
        return None
    n = (
        cfg.get("max_position_embeddings")
        or cfg.get("n_positions")
        or cfg.get("max_sequence_length")
    )
    # else: plan names the bad key
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None


def token_bound(messages: Messages) -> int:
    """An upper bound on the prompt's tokens: every token covers at least one byte of text."""
    return sum(len(m["content"].encode("utf-8")) + PER_MESSAGE for m in messages) + PER_PROMPT


def check_context(lr: LoadedRecipe, examples: Sequence[Any], messages: Sequence[Messages]) -> None:
    """Refuses the prompts whose token count + max_tokens exceeds the context, counted with the
    tokenizer for the few whose byte bound does not already prove they fit."""
    r, limit = lr.recipe, context_length(lr)
    if r.prompt.truncate and limit and r.sampling.max_tokens >= limit:
        raise RunnerError(
            f"sampling.max_tokens {r.sampling.max_tokens:,} leaves no room for a prompt in the "
            f"model's context of {limit:,} tokens, so prompt.truncate would cut every prompt to "
            "nothing",
            file=lr.path,
            field="sampling.max_tokens",
            hint=f"lower sampling.max_tokens below {limit:,} (the answer and the prompt share the "
            "context)",
        )
    if r.prompt.truncate or not limit:
        return
    room = limit - r.sampling.max_tokens
    if not (maybe := [i for i, m in enumerate(messages) if token_bound(m) > room]):
        return
    from runner.engines.hf import count_prompts

    try:
        _, ids = count_prompts(r.model, [messages[i] for i in maybe], r.prompt.chat_template)
    except Exception:  # no tokenizer on this machine: the byte bound cannot be refined
        return
    if over := [i for i, x in zip(maybe, ids) if len(x) > room]:
        names = ", ".join(str(examples[i].id) for i in over[:5]) + (
            f" and {len(over) - 5} more" if len(over) > 5 else ""
        )
        # only an engine with the field can be given a longer context; otherwise it is the model's
        longer = (
            "raise engine.max_model_len"
            if "max_model_len" in type(r.engine).model_fields
            else "use a model with a longer context"
        )
        raise RunnerError(
            f"{len(over)} prompt(s) do not fit the model's context of {limit:,} tokens with "
            f"max_tokens {r.sampling.max_tokens:,}: example {names}",
            file=lr.path,
            field="prompt",
            hint=f"shorten the template or shots, lower sampling.max_tokens, {longer}, or set "
            "prompt.truncate: true to cut such prompts from the left",
        )


def truncate_left(
    ids: list[list[int]], limit: int | None, max_tokens: int
) -> tuple[list[list[int]], int]:
    """Each prompt cut to its last `limit - max_tokens` tokens; the count of prompts cut."""
    if not limit:
        return ids, 0
    room = max(limit - max_tokens, 1)
    return [x[-room:] if len(x) > room else x for x in ids], sum(len(x) > room for x in ids)
