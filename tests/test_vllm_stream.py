"""The vLLM engine's streaming loop, against a stand-in for `vllm.LLM` (vLLM itself is tested on the GPU)."""

from types import SimpleNamespace

from runner.config.common import ModelSpec, Sampling
from runner.engines.base import EngineInfo, Request
from runner.engines.vllm import VLLMSpec
from runner.engines.vllm_engine import VLLMEngine
from runner.engines.vllm_knobs import VLLMFacts
from runner.inputs.datasets import Example


class _StandInLLM:
    """Finishes requests in a scrambled order, a few per step, like a continuous-batching engine."""

    def __init__(self, finish_order):
        self.finish_order = list(finish_order)
        self.ids = []
        self.llm_engine = self
        self.steps = 0

    def enqueue(self, prompts, sp, use_tqdm=False):
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
    gens = eng.generate(reqs, Sampling(max_tokens=4), progress=progress.append, sink=lambda d: seen.append(d))
    assert [g.text for g in gens] == [f"out{i}" for i in range(5)]
    assert [g.prompt_tokens for g in gens] == [2, 3, 4, 5, 6]
    assert [g.output_tokens for g in gens] == [1, 2, 3, 4, 5]
    assert [[i for i, _ in d] for d in seen] == [[3, 0], [4, 1], [2]]  # as they finished, step by step
    assert progress == [2, 2, 1]
    assert {k.name: k.status for k in eng.info.knobs}["enable_prefix_caching"] == "default"
