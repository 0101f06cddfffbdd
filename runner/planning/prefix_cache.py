"""Automatic prefix caching, counted the way vLLM V1 counts it.

Read from vLLM's source (vllm-project/vllm, main at commit 003df29; the runner's H200 runs used 0.26.0):

- ``vllm/v1/core/kv_cache_utils.py``: a request's block hashes cover FULL blocks only; block i's hash is
  ``hash((hash of block i-1, the block's token ids, extra keys))``, a chain, so equal hashes mean equal prefixes.
- ``vllm/v1/core/kv_cache_manager.py`` ``KVCacheManager.get_computed_blocks``: ``max_cache_hit_length =
  request.num_tokens - 1`` ("when all tokens hit the cache, we must recompute the last token to obtain logits").
- ``vllm/v1/core/single_type_kv_cache_manager.py`` ``FullAttentionManager.find_longest_cache_hit``:
  ``max_num_blocks = max_length // block_size``; walk the hash chain from the first block and stop at the first
  block not in the cache. So a request's hits are ``block_size * k`` tokens, k = the longest run of leading full
  blocks already cached, at most ``(n - 1) // block_size``.
- ``KVCacheManager.allocate_slots`` caches the request's full blocks when it allocates them (before the forward
  pass), so a request scheduled later in the same step already hits them: in prompt order, every request sees
  the full blocks of all requests before it.

The counter below replays that: for each prompt in the order the engine receives it, hits = leading run of
cached full blocks (capped as above), then all its full blocks enter the cache; cached tokens = sum of hits. This
is what vLLM reports as ``vllm:prefix_cache_hits`` over ``vllm:prefix_cache_queries`` (= prompt tokens).

Assumptions (each makes the count an upper bound if broken): the cache never evicts (the KV cache holds all
``kv_blocks_needed`` distinct blocks, see ``capacity_blocks`` for an LRU estimate when it does not); prompts are
not split by chunked prefill across a later request's lookup (only prompts longer than the step's token budget,
16,384 on an H200, are); no LoRA, multimodal inputs or cache salt (their extra keys would split the hashes).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from pydantic import Field

from ..strict import StrictModel

DEFAULT_BLOCK_SIZE = 16  # vLLM's default block size for CUDA attention backends


class PrefixCacheCount(StrictModel):
    """Prompt tokens a prefix cache serves for a list of prompts in engine order."""

    requests: int = Field(description="Number of prompts.")
    prompt_tokens: int = Field(description="All prompt tokens (what vLLM counts as prefix-cache queries).")
    cached_tokens: int = Field(description="Prompt tokens served from the cache (vLLM's prefix-cache hits).")
    block_size: int = Field(description="KV-cache block size in tokens.")
    kv_blocks_needed: int = Field(
        description="Distinct full prompt blocks: what a cache that never evicts holds "
        "at the end, the capacity needed for all of the reuse."
    )
    capacity_blocks: int | None = Field(description="Cache capacity simulated (LRU); None = never evicts.")
    evicted_blocks: int = Field(description="Blocks the LRU simulation evicted (0 when it never evicts).")

    @property
    def cached_share(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


def simulate_prefix_cache(
    prompts: Sequence[Sequence[int]], block_size: int, capacity_blocks: int | None
) -> tuple[list[int], int, int]:
    """(hits per request in tokens, distinct full blocks, evicted blocks).

    ``chain`` plays vLLM's hash function without collisions: (id of the parent block, block tokens) -> id, so an
    id stands for a whole prefix. It never forgets; ``cache`` holds the ids currently cached. With a capacity,
    blocks are evicted least recently used first, and a request's blocks are refreshed tail first (vLLM frees a
    finished request's blocks in reverse order so its tail is evicted before its head)."""
    if block_size < 1:
        raise ValueError("block_size must be at least 1")
    if capacity_blocks is not None and capacity_blocks < 1:
        raise ValueError("capacity_blocks must be at least 1 (or None for a cache that never evicts)")
    chain: dict[tuple[int, tuple[int, ...]], int] = {}
    cache: OrderedDict[int, None] = OrderedDict()
    hits: list[int] = []
    evicted = 0
    for prompt in prompts:
        p = tuple(prompt)
        n = len(p)
        max_hit_blocks = (n - 1) // block_size if n else 0
        parent, hit_blocks, hitting, ids = 0, 0, True, []
        for b in range(n // block_size):
            key = (parent, p[b * block_size : (b + 1) * block_size])
            bid = chain.get(key)
            if bid is None:
                bid = chain[key] = len(chain) + 1
            if hitting and b < max_hit_blocks and bid in cache:
                hit_blocks += 1
            else:
                hitting = False
            ids.append(bid)
            parent = bid
        hits.append(hit_blocks * block_size)
        for bid in reversed(ids):
            cache[bid] = None
            cache.move_to_end(bid)
        if capacity_blocks is not None:
            while len(cache) > capacity_blocks:
                cache.popitem(last=False)
                evicted += 1
    return hits, len(chain), evicted


def cached_tokens_per_request(
    prompts: Sequence[Sequence[int]], block_size: int = DEFAULT_BLOCK_SIZE, capacity_blocks: int | None = None
) -> list[int]:
    """Prompt tokens served from the cache for each request, in the given order."""
    return simulate_prefix_cache(prompts, block_size, capacity_blocks)[0]


def count_prefix_cache(
    prompts: Sequence[Sequence[int]], block_size: int = DEFAULT_BLOCK_SIZE, capacity_blocks: int | None = None
) -> PrefixCacheCount:
    """Count the prompt tokens vLLM's automatic prefix caching serves, prompts in engine order.

    Per request of n tokens: hits = block_size * k, k = the longest run of leading full blocks already cached,
    k <= (n - 1) // block_size; then its n // block_size full blocks enter the cache. cached_tokens = sum of hits.
    ``capacity_blocks`` = None: the cache never evicts (exact under the module's assumptions). Given: an LRU
    cache of that many blocks (an estimate: vLLM also holds the running requests' blocks, which this ignores);
    a capacity >= ``kv_blocks_needed`` gives the same count as None."""
    hits, distinct, evicted = simulate_prefix_cache(prompts, block_size, capacity_blocks)
    return PrefixCacheCount(
        requests=len(hits),
        prompt_tokens=sum(len(p) for p in prompts),
        cached_tokens=sum(hits),
        block_size=block_size,
        kv_blocks_needed=distinct,
        capacity_blocks=capacity_blocks,
        evicted_blocks=evicted,
    )
