"""The vLLM engine's streaming loop, against a stand-in for `vllm.LLM` (vLLM itself is tested on the
GPU)."""

import time
from types import SimpleNamespace

import pytest

from runner.base.types import EngineInfo, Example, ModelSpec, Request, Sampling
from runner.engines.vllm import VLLMSpec
from runner.engines.vllm.engine import VLLMEngine, warm_up
from runner.engines.vllm.facts import VLLMFacts


class _StandInLLM:
    """Finishes requests in a scrambled order, a few per step, like a continuous-batching engine."""

    def __init__(self, finish_order):
        self.finish_order = list(finish_order)
        self.ids = []
        self.llm_engine = self
        self.steps = 0

    def enqueue(self, prompts, sp, use_tqdm=False):
        time.sleep(0.02)  # handing requests over takes time; the engine reports how long
        self.prompts = prompts
        self.ids = [str(100 + i) for i in range(len(prompts))]
        return [f"{x}-a1b2c3d4" for x in self.ids]  # internal ids, as vLLM 0.26 returns them

    def has_unfinished_requests(self):
        return bool(self.finish_order)

    def step(self):
        self.steps += 1
        if self.steps % 2:  # some steps finish nothing
            return [SimpleNamespace(request_id="x", finished=False)]
        batch, self.finish_order = self.finish_order[:2], self.finish_order[2:]
        return [
            SimpleNamespace(
                request_id=self.ids[i],
                finished=True,
                num_cached_tokens=i,
                metrics=None,
                outputs=[SimpleNamespace(text=f"out{i}", token_ids=[1] * (i + 1))],
            )
            for i in batch
        ]

    def get_metrics(self):
        return []


def _engine(order):
    eng = object.__new__(VLLMEngine)
    eng.llm = _StandInLLM(order)
    eng.spec, eng.model_spec = VLLMSpec(kind="vllm"), ModelSpec(id="m")
    eng.facts = VLLMFacts(prefix_caching=True)
    eng.info = EngineInfo(name="vllm", version="test")
    return eng


def test_outputs_in_request_order_and_each_handed_to_the_sink_once_as_it_finishes(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "vllm", SimpleNamespace(SamplingParams=lambda **kw: kw))
    order = [3, 0, 4, 1, 2]
    eng = _engine(order)
    reqs = [Request(ids=[7] * (i + 2), example=Example(id=str(i), question="q")) for i in range(5)]
    seen, progress = [], []
    gens = eng.generate(
        reqs, Sampling(max_tokens=4), progress=progress.append, sink=lambda d: seen.append(d)
    )
    assert [g.text for g in gens] == [f"out{i}" for i in range(5)]
    assert [g.prompt_tokens for g in gens] == [2, 3, 4, 5, 6]
    assert [g.output_tokens for g in gens] == [1, 2, 3, 4, 5]
    # as they finished, step by step
    assert [[i for i, _ in d] for d in seen] == [[3, 0], [4, 1], [2]]
    assert progress == [2, 2, 1]
    assert {k.name: k.status for k in eng.info.knobs}["enable_prefix_caching"] == "default"
    assert 0.02 <= eng.info.extra["enqueue_s"] < 1  # the hand-over, timed on its own


class _Counter:
    def __init__(self, name, value):
        self.name, self.value = name, value


class _CountingLLM(_StandInLLM):
    """Counters that grow with every engine step, from a start left by earlier work (a warm-up, a
    cell)."""

    def get_metrics(self):
        tokens = 5000.0 + 1000.0 * self.steps
        return [
            _Counter("vllm:prompt_tokens", tokens),
            _Counter("vllm:prompt_tokens", 5.0),
            _Counter("other", 1.0),
        ]


class _NoMetricsLLM(_StandInLLM):
    def get_metrics(self):
        raise AssertionError("stats logging is off")


def _two_requests():
    return [Request(ids=[7, 7], example=Example(id=str(i), question="q")) for i in range(2)]


def test_metrics_are_the_counters_growth_over_the_call(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "vllm", SimpleNamespace(SamplingParams=lambda **kw: kw))
    eng = _engine([])
    eng.llm = _CountingLLM([0, 1])
    eng.generate(_two_requests(), Sampling(max_tokens=4))
    # two steps (one finishes nothing, one finishes both): 2,000 tokens over the call, labels
    # summed,
    # names the report does not keep dropped; not the 5,005 counted before it
    assert eng.llm.steps == 2 and eng.info.extra["metrics"] == {"vllm:prompt_tokens": 2000.0}


class _GrowingLLM(_StandInLLM):
    """Counters read before the call and after it, one of them first seen after it."""

    def get_metrics(self):
        if not self.steps:
            return [
                _Counter("vllm:prompt_tokens", 16384.0),
                _Counter("vllm:prefix_cache_hits", 0.0),
            ]
        return [
            _Counter("vllm:prompt_tokens", 1_253_925.0),
            _Counter("vllm:prefix_cache_hits", 999_824.0),
            _Counter("vllm:num_preemptions", 0.0),
        ]


def test_metrics_count_from_the_start_of_the_call(monkeypatch):
    """Each counter's growth over the call; a counter absent before counts from 0."""
    import sys

    monkeypatch.setitem(sys.modules, "vllm", SimpleNamespace(SamplingParams=lambda **kw: kw))
    eng = _engine([])
    eng.llm = _GrowingLLM([0, 1])
    eng.generate(_two_requests(), Sampling(max_tokens=4))
    assert eng.info.extra["metrics"] == {
        "vllm:prompt_tokens": 1_237_541.0,
        "vllm:prefix_cache_hits": 999_824.0,
        "vllm:num_preemptions": 0.0,
    }


def test_unavailable_metrics_leave_one_note_and_no_figures(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "vllm", SimpleNamespace(SamplingParams=lambda **kw: kw))
    eng = _engine([])
    for _ in range(2):  # two cells on one engine
        eng.llm = _NoMetricsLLM([0, 1])
        eng.generate(_two_requests(), Sampling(max_tokens=4))
    assert eng.info.extra["metrics"] == {}
    assert eng.info.notes == ["vLLM metrics unavailable: stats logging is off"]


def test_warm_up_runs_one_batch_at_the_engines_limits_then_empties_the_prefix_cache(monkeypatch):
    import sys

    calls = []
    monkeypatch.setitem(sys.modules, "vllm", SimpleNamespace(SamplingParams=lambda **kw: kw))
    eng = _engine([])
    llm = eng.llm
    llm.vllm_config = SimpleNamespace(
        scheduler_config=SimpleNamespace(max_num_seqs=8, max_num_batched_tokens=64),
        model_config=SimpleNamespace(get_vocab_size=lambda: 1000, max_model_len=4096),
    )
    llm.generate = lambda prompts, sp, use_tqdm=True: calls.append(
        ("generate", prompts, sp, use_tqdm)
    )
    llm.reset_prefix_cache = lambda: calls.append(("reset",)) or True
    text = warm_up(llm)
    assert [c[0] for c in calls] == ["generate", "reset"]
    _, prompts, sp, use_tqdm = calls[0]
    # 8 x 8 = one 64-token step
    assert len(prompts) == 8 and all(len(p["prompt_token_ids"]) == 8 for p in prompts)
    assert sp == {"max_tokens": 2, "ignore_eos": True, "temperature": 0.0} and use_tqdm is False
    assert text.startswith("8 prompts of 8 tokens, 2 output tokens each, ")
    assert text.endswith("(part of the engine start)")
    llm.reset_prefix_cache = lambda: False  # vLLM refuses while requests are still running
    assert warm_up(llm).endswith("; vLLM did not empty the prefix cache after it")


def test_emptying_the_prefix_cache_tries_again_while_vllm_refuses(monkeypatch):
    """vLLM refuses to empty its prefix cache while a request still holds blocks (an aborted one
    frees them a step later): the engine tries again, 50 ms apart, up to 20 times."""
    import runner.engines.vllm.engine as vllm_engine

    naps = []
    monkeypatch.setattr(vllm_engine.time, "sleep", naps.append)
    eng = _engine([])
    answers = iter([False, False, True])
    eng.llm.reset_prefix_cache = lambda: next(answers)
    assert eng.reset_prefix_cache() is True and naps == [0.05, 0.05]
    naps.clear()
    eng.llm.reset_prefix_cache = lambda: False
    assert eng.reset_prefix_cache() is False and naps == [0.05] * 19
    eng.facts = VLLMFacts(prefix_caching=False)  # vLLM runs it without one: nothing to empty
    eng.llm.reset_prefix_cache = lambda: pytest.fail("no cache to empty")
    assert eng.reset_prefix_cache() is None


def test_a_generation_that_fails_midway_takes_its_requests_back_from_vllm(monkeypatch):
    """Where the sink fails (scoring, writing) the requests still in vLLM are aborted, so they
    neither hold blocks nor hand their outputs to the next generation."""
    import sys

    monkeypatch.setitem(sys.modules, "vllm", SimpleNamespace(SamplingParams=lambda **kw: kw))
    eng = _engine([3, 0, 4, 1, 2])
    aborted = []
    eng.llm.abort_request = lambda ids, internal=False: aborted.append((ids, internal))
    reqs = [Request(ids=[7] * 3, example=Example(id=str(i), question="q")) for i in range(5)]

    def sink(done):
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        eng.generate(reqs, Sampling(max_tokens=4), sink=sink)
    assert aborted == [([f"{100 + i}-a1b2c3d4" for i in range(5)], True)]
