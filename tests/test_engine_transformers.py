"""The transformers engine on a real tiny model with a known greedy output."""

from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2] / "shared"
STORIES = SHARED / "models" / "stories260K"
pytestmark = [
    pytest.mark.skipif(not STORIES.exists(), reason="../shared/models/stories260K absent"),
    pytest.mark.slow,
]  # a real model through transformers: seconds


@pytest.fixture(scope="module")
def engine():
    pytest.importorskip("torch")
    from runner.base.types import ModelSpec
    from runner.engines.transformers import TransformersSpec

    eng = TransformersSpec(kind="transformers", device="cpu").build(
        ModelSpec(id=str(STORIES)), None
    )
    yield eng
    eng.close()


def _reqs(prompts):
    from runner.base.types import Example, Request

    return [Request(ids=p, example=Example(id=str(i), question="")) for i, p in enumerate(prompts)]


def test_greedy_from_bos_reproduces_reference(engine):
    from runner.base.types import Sampling

    ref = (STORIES / "reference_greedy_from_bos.txt").read_text()
    ids = engine.encode([[{"role": "user", "content": ""}]])[1][0]
    assert ids == [1]  # BOS only: no chat template on this tokenizer
    g = engine.generate(_reqs([ids]), Sampling(max_tokens=256, temperature=0))[0]
    assert g.output_tokens == 256
    assert g.text.strip() == ref.strip()


def test_batched_equals_sequential_greedy(engine):
    """Left padding + length sorting must not change greedy outputs."""
    from runner.base.types import Sampling

    prompts = [
        engine.tokenizer(t)["input_ids"]
        for t in ["Once upon a time", "Tom had a red ball. One day", "The cat"]
    ]
    s = Sampling(max_tokens=12)
    seq = engine.generate(_reqs(prompts), s)
    engine.spec = engine.spec.model_copy(update={"batch_size": 3})
    try:
        bat = engine.generate(_reqs(prompts), s)
    finally:
        engine.spec = engine.spec.model_copy(update={"batch_size": 1})
    assert [g.text for g in bat] == [g.text for g in seq]
    assert [g.prompt_tokens for g in bat] == [len(p) for p in prompts]


def test_ignore_eos_and_stop(engine):
    from runner.base.types import Sampling

    ids = [1]
    g = engine.generate(_reqs([ids]), Sampling(max_tokens=40, ignore_eos=True))[0]
    assert g.output_tokens == 40
    g2 = engine.generate(_reqs([ids]), Sampling(max_tokens=40, stop=["."]))[0]
    assert "." not in g2.text and g2.text.startswith(
        "Once upon a time, there was a little girl named Lily"
    )


def test_knobs_report_effective_values(engine):
    knobs = {k.name: k for k in engine.info.knobs}
    assert knobs["device"].effective == "cpu" and knobs["device"].status == "applied"
    assert knobs["dtype"].effective == "float32"
    assert knobs["quantization"].status == "default"


def test_continuous_batching_gives_the_static_engines_greedy_answers_and_checks_its_limits(engine):
    """`batching: continuous` (transformers' paged continuous batching) on the same prompt ids: the
    same greedy outputs as the static-batch engine, the ignore_eos length, its limits read back from
    the running manager."""
    from runner.base.types import ModelSpec, Sampling
    from runner.engines.transformers import TransformersSpec

    texts = [
        "Once upon a time",
        "Tom had a red ball. One day",
        "The cat",
        "Lily went to the park and",
    ]
    prompts = [engine.tokenizer(t)["input_ids"] for t in texts]
    s = Sampling(max_tokens=24)
    static = engine.generate(_reqs(prompts), s)
    spec = TransformersSpec(
        kind="transformers",
        device="cpu",
        batching="continuous",
        continuous={"num_blocks": 48, "max_batch_tokens": 128, "max_requests_per_batch": 4},
    )
    cont = spec.build(ModelSpec(id=str(STORIES)), None)
    try:
        before = {k.name: k.status for k in cont.info.knobs}
        assert before["continuous.num_blocks"] == "unverified"  # no manager yet
        got, finished = cont.generate(_reqs(prompts), s, sink=lambda pairs: None), []
        assert [g.text for g in got] == [g.text for g in static]
        assert [g.output_tokens for g in got] == [g.output_tokens for g in static]
        knobs = {k.name: k for k in cont.info.knobs}
        assert (
            knobs["continuous.num_blocks"].effective == 48
            and knobs["continuous.num_blocks"].status == "applied"
        )
        assert knobs["continuous.max_batch_tokens"].status == "applied"
        assert (
            knobs["continuous.block_size"].status == "default"
            and knobs["continuous.block_size"].effective
        )
        assert knobs["continuous.prefix_sharing"].status == "applied" and "batch_size" not in knobs
        # what the manager's model ran: sdpa, paged|sdpa (tf 5.17)
        attn = knobs["continuous.attn_implementation"]
        assert attn.status == "default" and attn.effective in (
            "sdpa",
            "paged|sdpa",
            "paged|eager",
        ), attn
        assert any(
            n.startswith(f"Continuous batching ran with {attn.effective} attention")
            for n in cont.info.notes
        )
        assert cont.info.extra["continuous_setup_s"] > 0
        # between generations: a fresh manager
        assert cont.reset_prefix_cache() is True and cont._cb is None
        assert [g.text for g in cont.generate(_reqs(prompts), s)] == [g.text for g in static]
        long = cont.generate(
            _reqs(prompts[:1]), Sampling(max_tokens=40, ignore_eos=True), sink=finished.extend
        )
        # a new manager for ignore_eos
        assert long[0].output_tokens == 40 and [i for i, _ in finished] == [0]
    finally:
        cont.close()


def test_continuous_limits_need_continuous_batching():
    import pydantic

    from runner.engines.transformers import TransformersSpec

    with pytest.raises(pydantic.ValidationError, match="add `batching: continuous`"):
        TransformersSpec(kind="transformers", continuous={"num_blocks": 8})
    with pytest.raises(pydantic.ValidationError, match="batch_size is for `batching: static`"):
        TransformersSpec(kind="transformers", batching="continuous", batch_size=8)
