"""Automatic prefix caching, counted the way vLLM V1 counts it.

Read from vLLM's source (vllm-project/vllm, main at commit 003df29; the runner's H200 runs used
0.26.0):

- ``vllm/v1/core/kv_cache_utils.py``: a request's block hashes cover FULL blocks only; block i's
  hash is ``hash((hash of block i-1, the block's token ids, extra keys))``, a chain, so equal hashes
  mean equal prefixes.
- ``vllm/v1/core/kv_cache_manager.py`` ``KVCacheManager.get_computed_blocks``:
  ``max_cache_hit_length = request.num_tokens - 1`` ("when all tokens hit the cache, we must
  recompute the last token to obtain logits").
- ``vllm/v1/core/single_type_kv_cache_manager.py`` ``FullAttentionManager.find_longest_cache_hit``:
  ``max_num_blocks = max_length // block_size``; walk the hash chain from the first block and stop
  at the first block not in the cache. So a request's hits are ``block_size * k`` tokens, k = the
  longest run of leading full blocks already cached, at most ``(n - 1) // block_size``.
- ``KVCacheManager.allocate_slots`` caches the request's full blocks when it allocates them (before
  the forward pass), so a request scheduled later in the same step already hits them: in prompt
  order, every request sees the full blocks of all requests before it.

The counter below replays that: for each prompt in the order the engine receives it, hits = leading
run of cached full blocks (capped as above), then all its full blocks enter the cache; cached tokens
= sum of hits. This is what vLLM reports as ``vllm:prefix_cache_hits`` over
``vllm:prefix_cache_queries`` (= prompt tokens).

Assumptions (each makes the count an upper bound if broken): the cache never evicts (the KV cache
holds all ``kv_blocks_needed`` distinct blocks, see ``capacity_blocks`` for an LRU estimate when it
does not); prompts are not split by chunked prefill across a later request's lookup (only prompts
longer than the step's token budget, 16,384 on an H200, are); no LoRA, multimodal inputs or cache
salt (their extra keys would split the hashes).
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from runner.base.types import StrictModel

DEFAULT_BLOCK_SIZE = 16  # vLLM's default block size for CUDA attention backends
MIN_MEAN_REPEATS = 1.5  # examples per distinct value from which a variable counts as repeating


def simulate_prefix_cache(
    prompts: Sequence[Sequence[int]],
    block_size: int = DEFAULT_BLOCK_SIZE,
    capacity_blocks: int | None = None,
) -> tuple[list[int], int, int]:
    """(hits per request in tokens, distinct full blocks, evicted blocks): the prompt tokens vLLM's
    automatic prefix caching serves each request, prompts in engine order (as the module docstring
    says). ``capacity_blocks`` None: the cache never evicts (exact under the module's assumptions);
    given: an LRU cache of that many blocks (an estimate: vLLM also holds the running requests'
    blocks, which this ignores); a capacity >= the distinct blocks gives the same count as None.

    ``chain`` plays vLLM's hash function without collisions: (id of the parent block, block tokens)
    -> id, so an id stands for a whole prefix. It never forgets; ``cache`` holds the ids currently
    cached. With a capacity, blocks are evicted least recently used first, and a request's blocks
    are refreshed tail first (vLLM frees a finished request's blocks in reverse order so its tail is
    evicted before its head)."""
    if block_size < 1:
        raise ValueError("block_size must be at least 1")
    if capacity_blocks is not None and capacity_blocks < 1:
        raise ValueError(
            "capacity_blocks must be at least 1 (or None for a cache that never evicts)"
        )
    chain: dict[tuple[int, tuple[int, ...]], int] = {}
    cache: OrderedDict[int, None] = OrderedDict()
    hits, evicted = [], 0
    for prompt in prompts:
        p, n = tuple(prompt), len(prompt)
        max_hit_blocks = (n - 1) // block_size if n else 0
        parent, hit_blocks, hitting, ids = 0, 0, True, []
        for b in range(n // block_size):
            parent = chain.setdefault(
                (parent, p[b * block_size : (b + 1) * block_size]), len(chain) + 1
            )
            # the leading run of cached blocks
            hitting = hitting and b < max_hit_blocks and parent in cache
            hit_blocks += hitting
            ids.append(parent)
        hits.append(hit_blocks * block_size)
        for bid in reversed(ids):
            cache[bid] = None
            cache.move_to_end(bid)
        while capacity_blocks is not None and len(cache) > capacity_blocks:
            cache.popitem(last=False)
            evicted += 1
    return hits, len(chain), evicted


@dataclass(frozen=True)
class LayoutInputs:
    """Examples as token ids per template variable, for the layout advice."""

    # Per example (in engine order), each template variable's value as token ids.
    examples: list[dict[str, list[int]]]
    order: list[str]  # The variables in the order the current template puts them.
    # Token ids every prompt starts with (system prompt, worked examples).
    head_ids: Sequence[int] = ()


class LayoutAdvice(StrictModel):
    """What moving repeating variables to the front of the template is predicted to change."""

    variables: list[str]  # The repeating variables proposed first, in this order.
    order: list[str]  # The full proposed variable order.
    distinct_values: int  # Distinct values (tuples of values for several variables).
    mean_repeats: float  # Examples per distinct value.
    prompt_tokens: int  # Tokens of the simulated prompts (head + concatenated variables).
    current_cached_tokens: int  # Predicted cache hits with the current order.
    first_cached_tokens: int  # Predicted cache hits with these variables first.
    # Predicted cache hits with these variables first and the examples grouped by their values.
    grouped_cached_tokens: int
    current_share: float  # current_cached_tokens / prompt_tokens.
    first_share: float  # first_cached_tokens / prompt_tokens.
    grouped_share: float  # grouped_cached_tokens / prompt_tokens.
    capacity_blocks: int | None  # Cache capacity simulated (LRU); None = never evicts.
    text: str  # The advice in one paragraph.


def encode_examples(
    examples: Sequence[Mapping[str, str]],
    encode: Callable[[str], list[int]],
    variables: Sequence[str],
) -> list[dict[str, list[int]]]:
    """Token ids of each example's variables; each distinct value is encoded once."""
    ids = functools.cache(lambda value: list(encode(value)))
    return [{v: ids(str(ex[v])) for v in variables} for ex in examples]


def _prompts(inputs: LayoutInputs, order: Sequence[str], index: Sequence[int]) -> list[list[int]]:
    return [
        [*inputs.head_ids, *(t for var in order for t in inputs.examples[i][var])] for i in index
    ]


def _cached(prompts: list[list[int]], block_size: int, capacity: int | None) -> int:
    return sum(simulate_prefix_cache(prompts, block_size, capacity)[0])


def _value_keys(inputs: LayoutInputs, var: str) -> list[int]:
    """Per example, the index of its value's first appearance (equal values, equal keys)."""
    first: dict[tuple[int, ...], int] = {}
    return [first.setdefault(tuple(ex[var]), len(first)) for ex in inputs.examples]


def _advise(
    inputs: LayoutInputs, lead: list[str], block_size: int, capacity: int | None, current: int
) -> LayoutAdvice:
    """The advice to put `lead` first; `current`: the cached tokens with the current order."""
    n = len(inputs.examples)
    order = lead + [v for v in inputs.order if v not in lead]
    combos = list(zip(*[_value_keys(inputs, v) for v in lead], strict=True))
    distinct = len(set(combos))
    # stable: groups by first appearance, then arrival
    grouped_index = sorted(range(n), key=combos.__getitem__)
    prompts = _prompts(inputs, order, range(n))
    grouped_prompts = _prompts(inputs, order, grouped_index)
    first, grouped = (_cached(x, block_size, capacity) for x in (prompts, grouped_prompts))
    total = sum(map(len, prompts))
    cur, fst, grp = (x / total if total else 0.0 for x in (current, first, grouped))
    names = ", ".join(f"`{v}`" for v in lead)
    text = (
        f"{names} repeat{'s' if len(lead) == 1 else ''}: {distinct:,} distinct "
        f"value{'s' if distinct != 1 else ''} over {n:,} examples ({n / distinct:.1f} uses each). "
        f"Predicted share of prompt tokens served from the prefix cache: {cur:.1%} with the "
        f"current order, {fst:.1%} with {names} first, {grp:.1%} with the examples also grouped by "
        f"{'it' if len(lead) == 1 else 'them'}."
    )
    if capacity is None:
        text += (
            " (Grouping only matters when the KV cache cannot hold every block; here it never "
            "evicts.)"
        )
    text += (
        " Approximate: the variables' tokens are concatenated without the template's text between "
        "them; count the rendered prompts for the exact figure."
    )
    return LayoutAdvice(
        variables=lead,
        order=order,
        distinct_values=distinct,
        mean_repeats=n / distinct,
        prompt_tokens=total,
        current_cached_tokens=current,
        first_cached_tokens=first,
        grouped_cached_tokens=grouped,
        current_share=cur,
        first_share=fst,
        grouped_share=grp,
        capacity_blocks=capacity,
        text=text,
    )


def advise_layout(
    inputs: LayoutInputs,
    block_size: int = DEFAULT_BLOCK_SIZE,
    capacity_blocks: int | None = None,
) -> list[LayoutAdvice]:
    """Which template variables repeat across examples, and what putting them first buys: a prefix
    cache reuses a shared value (a passage asked about by several questions) only if everything
    before it is shared too.

    One item per variable of ``inputs.order`` whose values repeat (examples / distinct values >=
    ``MIN_MEAN_REPEATS``), plus, when several repeat, one putting all of them first (fewest distinct
    values first); best grouped prediction first. Each counts three layouts: the current order, the
    variables first, and first with the examples grouped by their values, each prompt approximated
    as ``head_ids + ids(var_1) + ...`` (no template text between the variables). Grouping matters
    only to a cache that evicts: ``capacity_blocks`` simulates an LRU cache of that many blocks,
    None one that never evicts."""
    n = len(inputs.examples)
    if n == 0:
        return []
    missing = {v for ex in inputs.examples for v in inputs.order if v not in ex}
    if missing:
        raise ValueError(f"examples lack template variables: {sorted(missing)}")
    distinct = {v: len(set(_value_keys(inputs, v))) for v in inputs.order}
    repeating = sorted(
        (v for v in inputs.order if n / distinct[v] >= MIN_MEAN_REPEATS),
        key=lambda v: (distinct[v], v),
    )
    if not repeating:
        return []
    current = _cached(_prompts(inputs, inputs.order, range(n)), block_size, capacity_blocks)
    leads = [[v] for v in repeating] + ([repeating] if len(repeating) > 1 else [])
    items = [_advise(inputs, lead, block_size, capacity_blocks, current) for lead in leads]
    return sorted(items, key=lambda a: -a.grouped_cached_tokens)
