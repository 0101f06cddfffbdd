"""Template layout advice: which template variables repeat across examples, and what putting them first buys.

A prefix cache only reuses the START of a prompt. A variable whose value is shared by several examples (a
passage asked about by several questions, a document title) is reused only if everything before it is shared
too. For each repeating variable the advice simulates three layouts with the exact counter of
``prefix_cache.count_prefix_cache``: the current variable order; the variable moved first (the other variables
keep their order); and moved first with the examples also grouped by its value. Each simulated prompt is
``head_ids + ids(var_1) + ids(var_2) + ...``: the variables' token ids simply concatenated behind a fixed head
(system prompt, worked examples). That is an approximation: the real template has text between the variables and
a tokenizer may merge across their boundaries. The exact count for a given template comes from
``count_prefix_cache`` on the real rendered prompts.

Grouping matters only to a cache that evicts: a cache that never evicts serves the same tokens in any order
(the only exception is the last-token rule of ``prefix_cache``), so without ``capacity_blocks`` the grouped
figure equals the "first" figure up to a block per prompt.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from pydantic import Field

from ..strict import StrictModel
from .prefix_cache import DEFAULT_BLOCK_SIZE, count_prefix_cache


class LayoutInputs(StrictModel):
    """Examples as token ids per template variable, for the layout advice."""

    examples: list[dict[str, list[int]]] = Field(
        description="Per example (in engine order), each template variable's value as token ids."
    )
    order: list[str] = Field(description="The variables in the order the current template puts them.")
    head_ids: list[int] = Field(
        default_factory=list, description="Token ids every prompt starts with (system prompt, worked examples)."
    )


class LayoutAdvice(StrictModel):
    """What moving repeating variables to the front of the template is predicted to change."""

    variables: list[str] = Field(description="The repeating variables proposed first, in this order.")
    order: list[str] = Field(description="The full proposed variable order.")
    distinct_values: int = Field(description="Distinct values (tuples of values for several variables).")
    mean_repeats: float = Field(description="Examples per distinct value.")
    prompt_tokens: int = Field(description="Tokens of the simulated prompts (head + concatenated variables).")
    current_cached_tokens: int = Field(description="Predicted cache hits with the current order.")
    first_cached_tokens: int = Field(description="Predicted cache hits with these variables first.")
    grouped_cached_tokens: int = Field(
        description="Predicted cache hits with these variables first and the examples grouped by their values."
    )
    current_share: float = Field(description="current_cached_tokens / prompt_tokens.")
    first_share: float = Field(description="first_cached_tokens / prompt_tokens.")
    grouped_share: float = Field(description="grouped_cached_tokens / prompt_tokens.")
    capacity_blocks: int | None = Field(description="Cache capacity simulated (LRU); None = never evicts.")
    text: str = Field(description="The advice in one paragraph.")


def encode_examples(
    examples: Sequence[Mapping[str, str]], encode: Callable[[str], list[int]], variables: Sequence[str] | None = None
) -> list[dict[str, list[int]]]:
    """Token ids of each example's variables; each distinct value is encoded once."""
    memo: dict[str, list[int]] = {}
    out = []
    for ex in examples:
        row = {}
        for var in variables if variables is not None else ex.keys():
            value = str(ex[var])
            if value not in memo:
                memo[value] = list(encode(value))
            row[var] = memo[value]
        out.append(row)
    return out


def _prompts(inputs: LayoutInputs, order: Sequence[str], index: Sequence[int]) -> list[list[int]]:
    head = inputs.head_ids
    out = []
    for i in index:
        ex = inputs.examples[i]
        ids = list(head)
        for var in order:
            ids.extend(ex[var])
        out.append(ids)
    return out


def _value_keys(inputs: LayoutInputs, var: str) -> list[int]:
    """Per example, the index of its value's first appearance (equal values, equal keys)."""
    first: dict[tuple[int, ...], int] = {}
    return [first.setdefault(tuple(ex[var]), len(first)) for ex in inputs.examples]


def _text(
    lead: list[str], n: int, distinct: int, cur: float, first: float, grouped: float, capacity: int | None
) -> str:
    names = ", ".join(f"`{v}`" for v in lead)
    s = (
        f"{names} repeat{'s' if len(lead) == 1 else ''}: {distinct:,} distinct value{'s' if distinct != 1 else ''}"
        f" over {n:,} examples ({n / distinct:.1f} uses each). Predicted share of prompt tokens served from the "
        f"prefix cache: {cur:.1%} with the current order, {first:.1%} with {names} first, {grouped:.1%} with the "
        f"examples also grouped by {'it' if len(lead) == 1 else 'them'}."
    )
    if capacity is None:
        s += " (Grouping only matters when the KV cache cannot hold every block; here it never evicts.)"
    return s + (
        " Approximate: the variables' tokens are concatenated without the template's text between them; "
        "count the rendered prompts for the exact figure."
    )


def _advise(inputs: LayoutInputs, lead: list[str], block_size: int, capacity: int | None, current: int) -> LayoutAdvice:
    n = len(inputs.examples)
    order = lead + [v for v in inputs.order if v not in lead]
    keys = [_value_keys(inputs, v) for v in lead]
    combos = list(zip(*keys, strict=True))
    distinct = len(set(combos))
    natural = range(n)
    grouped_index = sorted(natural, key=lambda i: combos[i])  # stable: groups by first appearance, then arrival
    first = count_prefix_cache(_prompts(inputs, order, natural), block_size, capacity)
    grouped = count_prefix_cache(_prompts(inputs, order, grouped_index), block_size, capacity)
    total = first.prompt_tokens

    def share(x: int) -> float:
        return x / total if total else 0.0

    return LayoutAdvice(
        variables=lead,
        order=order,
        distinct_values=distinct,
        mean_repeats=n / distinct,
        prompt_tokens=total,
        current_cached_tokens=current,
        first_cached_tokens=first.cached_tokens,
        grouped_cached_tokens=grouped.cached_tokens,
        current_share=share(current),
        first_share=share(first.cached_tokens),
        grouped_share=share(grouped.cached_tokens),
        capacity_blocks=capacity,
        text=_text(
            lead, n, distinct, share(current), share(first.cached_tokens), share(grouped.cached_tokens), capacity
        ),
    )


def advise_layout(
    inputs: LayoutInputs,
    block_size: int = DEFAULT_BLOCK_SIZE,
    capacity_blocks: int | None = None,
    min_mean_repeats: float = 1.5,
) -> list[LayoutAdvice]:
    """One item per variable of ``inputs.order`` whose values repeat (examples / distinct values >=
    ``min_mean_repeats``; a few duplicate questions do not make a shared prefix), plus, when several repeat,
    one item putting all of them first (fewest distinct values first). Sorted by the grouped prediction, best
    first. Variables outside ``order`` (not in the template) are ignored. ``capacity_blocks``: simulate an LRU
    cache of that many blocks instead of one that never evicts."""
    n = len(inputs.examples)
    if n == 0:
        return []
    missing = {v for ex in inputs.examples for v in inputs.order if v not in ex}
    if missing:
        raise ValueError(f"examples lack template variables: {sorted(missing)}")
    distinct = {v: len(set(_value_keys(inputs, v))) for v in inputs.order}
    repeating = sorted((v for v in inputs.order if n / distinct[v] >= min_mean_repeats), key=lambda v: (distinct[v], v))
    if not repeating:
        return []
    current = count_prefix_cache(_prompts(inputs, inputs.order, range(n)), block_size, capacity_blocks).cached_tokens
    leads = [[v] for v in repeating] + ([repeating] if len(repeating) > 1 else [])
    items = [_advise(inputs, lead, block_size, capacity_blocks, current) for lead in leads]
    return sorted(items, key=lambda a: -a.grouped_cached_tokens)


def advise_layout_text(
    examples: Sequence[Mapping[str, str]],
    encode: Callable[[str], list[int]],
    order: Sequence[str],
    *,
    head_ids: Sequence[int] = (),
    block_size: int = DEFAULT_BLOCK_SIZE,
    capacity_blocks: int | None = None,
    min_mean_repeats: float = 1.5,
) -> list[LayoutAdvice]:
    """``advise_layout`` from text: examples as dicts of template variables, ``encode`` = str -> token ids."""
    inputs = LayoutInputs(examples=encode_examples(examples, encode, order), order=list(order), head_ids=list(head_ids))
    return advise_layout(inputs, block_size, capacity_blocks, min_mean_repeats)
