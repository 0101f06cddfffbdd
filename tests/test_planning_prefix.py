"""Prefix-cache counting (vLLM V1 semantics) against a brute-force reference, and layout advice."""

from __future__ import annotations

import random

import pytest

from runner.plan.prefix_cache import (
    LayoutInputs,
    advise_layout,
    encode_examples,
    simulate_prefix_cache,
)


def brute_force(prompts, bs):
    """Obviously correct: the cache is the set of full-block-length prefixes seen so far."""
    seen: set[tuple[int, ...]] = set()
    hits = []
    for p in prompts:
        n = len(p)
        cap = (n - 1) // bs if n else 0
        k = 0
        while k < cap and tuple(p[: (k + 1) * bs]) in seen:
            k += 1
        hits.append(k * bs)
        seen.update(tuple(p[: j * bs]) for j in range(1, n // bs + 1))
    return hits, len(seen)


def served(prompts, bs):
    return simulate_prefix_cache(prompts, bs)[0]


def random_prompts(seed: int, n: int = 150):
    """Prompts built from shared heads, shared passages and own questions, with exact duplicates and
    prompts that are prefixes of others; a vocabulary of 3 tokens so that blocks collide by
    content."""
    rng = random.Random(seed)

    def tok(k):
        return [rng.randrange(3) for _ in range(k)]

    heads = [tok(rng.randrange(0, 70)) for _ in range(3)]
    passages = [tok(rng.randrange(0, 90)) for _ in range(8)]
    out = []
    for _ in range(n):
        r = rng.random()
        if out and r < 0.1:
            out.append(list(rng.choice(out)))  # an exact duplicate
        elif out and r < 0.2:
            p = rng.choice(out)
            out.append(p[: rng.randrange(0, len(p) + 1)])  # a prefix of an earlier prompt
        else:
            out.append(rng.choice(heads) + rng.choice(passages) + tok(rng.randrange(0, 40)))
    return out


@pytest.mark.parametrize("bs", [1, 16, 32])
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_matches_brute_force(seed, bs):
    prompts = random_prompts(seed)
    hits, distinct = brute_force(prompts, bs)
    got, needed, evicted = simulate_prefix_cache(prompts, bs)
    assert got == hits and needed == distinct and evicted == 0
    assert sum(got) > 0  # the generator does share prefixes
    # a capacity that holds every block never evicts: same count as the unbounded cache
    assert simulate_prefix_cache(prompts, bs, capacity_blocks=distinct) == (hits, distinct, 0)


def test_last_token_is_always_computed():
    p = list(range(32))  # n a multiple of the block size
    assert served([p, p], 16) == [0, 16]  # (32 - 1) // 16 = 1 block, not 2
    q = list(range(40))
    assert served([q, q, q], 16) == [0, 32, 32]  # (40 - 1) // 16 = 2 blocks
    one = list(range(16))
    assert simulate_prefix_cache([one, one], 16) == ([0, 0], 1, 0)  # a one-block prompt never hits
    assert served([[7, 8, 9], [7, 8, 9]], 1) == [0, 2]


def test_short_and_empty_prompts():
    short = [5] * 10
    assert simulate_prefix_cache([short, short, short, []], 16) == ([0, 0, 0, 0], 0, 0)


def test_only_full_leading_blocks_hit():
    head = list(range(100, 120))  # 20 tokens: one full block + 4 tokens of the next
    a, b = head + [1] * 30, head + [2] * 30
    assert served([a, b], 16) == [0, 16]
    # the same block content after a different first block is a different chain: no hit
    x, y, z = [1] * 16, [2] * 16, [3] * 16
    assert served([x + z + [0], y + z + [0]], 16) == [0, 0]
    assert served([x + z + [0], x + z + [9]], 16) == [0, 32]


def test_order_matters_only_through_the_last_token_rule():
    a = list(range(16))
    b = a + list(range(50, 66))
    assert served([a, b], 16) == [0, 16]
    assert served([b, a], 16) == [0, 0]  # a's only block is its last token's


def test_lru_capacity_evicts_tail_first():
    p = list(range(32))
    q = p + [99]
    assert sum(simulate_prefix_cache([p, q], 16)[0]) == 32
    hits, _, evicted = simulate_prefix_cache([p, q], 16, capacity_blocks=1)
    # p's blocks are refreshed tail first, so its tail block is evicted and its head block stays
    assert sum(hits) == 16 and evicted >= 1
    with pytest.raises(ValueError):
        simulate_prefix_cache([p], 0)


def _jsquad_like(n_passages=4, uses=3, passage_len=32, question_len=8, interleave=True):
    rng = random.Random(7)
    passages = [[1000 + 100 * i + j for j in range(passage_len)] for i in range(n_passages)]
    examples = []
    order = (
        [(u, i) for u in range(uses) for i in range(n_passages)]
        if interleave
        else [(u, i) for i in range(n_passages) for u in range(uses)]
    )
    for _u, i in order:
        examples.append(
            {
                "question": [rng.randrange(10**6) for _ in range(question_len)],
                "context": passages[i],
            }
        )
    return LayoutInputs(examples=examples, order=["question", "context"], head_ids=[])


def test_layout_advice_context_first():
    adv = advise_layout(_jsquad_like(), 16)
    assert [a.variables for a in adv] == [["context"]]  # unique questions are not advised
    a = adv[0]
    assert a.distinct_values == 4 and a.mean_repeats == 3
    assert a.order == ["context", "question"]
    assert a.current_cached_tokens == 0  # question first: no shared start
    # context first: each later use hits (40 - 1) // 16 = 2 blocks of its passage
    assert a.first_cached_tokens == 4 * 2 * 32
    # never evicts: grouping changes nothing
    assert a.grouped_cached_tokens == a.first_cached_tokens
    assert a.prompt_tokens == 12 * 40 and a.first_share == pytest.approx(256 / 480)
    assert "Approximate" in a.text and "`context`" in a.text


def test_layout_grouping_helps_an_evicting_cache():
    a = advise_layout(_jsquad_like(), 16, capacity_blocks=2)[0]
    assert a.first_cached_tokens == 0  # interleaved: each passage is evicted before its next use
    assert a.grouped_cached_tokens == 256  # grouped: every later use follows the first at once


def test_layout_from_text_and_head():
    examples = [
        {"question": f"q{i}?", "context": "passage " + "ab" * 20 + str(i % 2), "title": "t"}
        for i in range(6)
    ]
    calls = []

    def encode(s):
        calls.append(s)
        return [ord(ch) for ch in s]

    rows = encode_examples(examples, encode, ["question", "context"])
    assert len(calls) == 6 + 2  # each distinct value encoded once; title never (not asked)
    assert rows[0]["context"] == [ord(ch) for ch in examples[0]["context"]]
    order = ["question", "context"]
    rows = encode_examples(examples, lambda s: [ord(ch) for ch in s], order)
    adv = advise_layout(LayoutInputs(examples=rows, order=order, head_ids=list(range(16))))
    assert adv[0].variables == ["context"] and adv[0].distinct_values == 2
    # the head alone hits
    assert adv[0].first_cached_tokens > adv[0].current_cached_tokens >= 4 * 16
    with pytest.raises(ValueError, match="lack"):
        advise_layout(LayoutInputs(examples=[{"question": [1]}], order=["question", "context"]))
