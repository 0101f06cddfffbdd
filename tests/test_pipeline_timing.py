"""The run pipeline around the engine: batch prompt encoding, what counts as generation time,
and the parent's prepared examples reaching the isolated run."""

import json
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
QWEN = SHARED / "models" / "qwen2.5-7b-instruct"
DEMO = ROOT / "recipes" / "demo.yaml"


def _messages(n=12):
    from runner.inputs.datasets import read_examples
    from runner.inputs.prompts import PromptBuilder
    from runner.recipe import DatasetSpec, PromptSpec

    exs = list(
        read_examples(
            DatasetSpec(format="squad", path=str(ROOT / "runner/demo/demo-ja.json"), limit=n), ROOT
        ).examples
    )
    b = PromptBuilder(
        PromptSpec(template="jsquad.j2", system_template="jsquad-system-oneshot.j2"), ROOT
    )
    return [b.messages(e) for e in exs]


@pytest.mark.skipif(not QWEN.exists(), reason="../shared/models/qwen2.5-7b-instruct absent")
@pytest.mark.parametrize("chat", [True, False])
def test_batch_encode_gives_each_prompts_own_ids(chat):
    pytest.importorskip("transformers")
    from transformers import AutoTokenizer

    from runner.engines.hf import encode_prompts, messages_to_text

    tok = AutoTokenizer.from_pretrained(str(QWEN))
    msgs = _messages()
    texts, ids = encode_prompts(tok, msgs, chat)
    for m, t, i in zip(msgs, texts, ids):
        want_text = (
            tok.apply_chat_template(m, add_generation_prompt=True, tokenize=False)
            if chat
            else messages_to_text(m)
        )
        assert t == want_text
        assert i == tok(t, add_special_tokens=not chat)["input_ids"]
    assert len({len(i) for i in ids}) > 1  # really different prompts, not one repeated
    assert encode_prompts(tok, [], chat) == ([], [])


class _SlowScoringEngine:
    """An engine whose outputs arrive after `gen_s`, then keeps busy for `after_s` (as vLLM does
    reading metrics and knobs) before returning."""

    def __init__(self, gen_s, after_s):
        from runner.base.types import EngineInfo

        self.gen_s, self.after_s = gen_s, after_s
        self.info = EngineInfo(name="slow", version="0")

    def encode(self, messages):
        return [f"p{i}" for i in range(len(messages))], [[1, 2, 3]] * len(messages)

    def generate(self, requests, sampling, progress=None, sink=None):
        from runner.base.types import Generation

        time.sleep(self.gen_s)
        gens = [Generation(text="x", prompt_tokens=3, output_tokens=1) for _ in requests]
        sink(list(enumerate(gens)))
        time.sleep(self.after_s)
        return gens

    def reset_prefix_cache(self):
        return False

    def close(self):
        pass


def _unit(path, out, limit=None, **kw):
    from runner import load_recipe
    from runner.run.job import RunOptions, make_unit

    opts = RunOptions(out=out, limit=limit, progress=False, **kw)
    return make_unit(load_recipe(path), opts), opts


def test_generation_time_ends_when_the_last_output_is_back(tmp_path):
    from runner.run.job import Job
    from runner.run.loop import SharedEngine, run_rounds

    unit, opts = _unit(DEMO, tmp_path, limit=4)
    shared = SharedEngine(unit)
    shared.engine = _SlowScoringEngine(0.3, 1.5)
    [res] = run_rounds(Job(units=(unit,), options=opts), shared)
    assert res.status == "ok", res.error
    # the engine's 1.5 s of work after the outputs is not generation
    assert 0.3 <= res.timings.generate_s < 1.0
    assert res.timings.total_s >= 1.8  # ... but it is in the total
    samples = [
        json.loads(x) for x in (tmp_path / "demo" / "samples.jsonl").read_text().splitlines()
    ]
    # the engine's own prompt texts
    assert [s["prompt"] for s in samples] == ["p0", "p1", "p2", "p3"]


def _fake_recipe(write_recipe, base_recipe, **engine):
    return write_recipe(
        {
            **base_recipe,
            "name": "fake",
            "model": {"id": "none"},
            "engine": {"kind": "fake", "reply": "{{ answers[0] }}", **engine},
        },
        "fake.yaml",
    )


def test_isolated_run_uses_the_examples_the_parent_prepared(tmp_path, write_recipe, base_recipe):
    import dataclasses

    from runner.run.isolate import run_isolated
    from runner.run.job import Job, Unit

    unit, opts = _unit(_fake_recipe(write_recipe, base_recipe), tmp_path / "out", limit=5)
    pick = [1, 3]  # a selection the worker could not come up with by loading the dataset itself
    p = unit.prepared
    chosen = dataclasses.replace(
        p,
        examples=tuple(p.examples[i] for i in pick),
        messages=tuple(p.messages[i] for i in pick),
        n_target=2,
    )
    [res] = run_isolated(
        Job(units=(Unit(loaded=unit.loaded, prepared=chosen, run_key=unit.run_key),), options=opts)
    )
    assert res.status == "ok", res.error
    lines = (tmp_path / "out" / "fake" / "samples.jsonl").read_text().splitlines()
    assert [json.loads(x)["id"] for x in lines] == [p.examples[i].id for i in pick]
    assert [json.loads(x)["output"] for x in lines] == [p.examples[i].answers[0] for i in pick]
    assert res.n_dataset == p.n_dataset and res.engine.name == "fake"


def test_a_recipe_whose_process_cannot_start_fails_alone_and_leaves_no_temp_files(
    tmp_path, monkeypatch, write_recipe, base_recipe
):
    import tempfile

    import runner.run.isolate as iso
    from runner.run.job import Job

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    unit, opts = _unit(_fake_recipe(write_recipe, base_recipe), tmp_path / "out", limit=2)

    def no_process(*a, **kw):
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(iso.subprocess, "Popen", no_process)
    [res] = iso.run_isolated(Job(units=(unit,), options=opts))
    assert res.status == "failed"
    assert (
        res.error == "could not start the recipe's process: OSError: [Errno 24] Too many open files"
    )
    assert (
        json.loads((tmp_path / "out" / "fake" / "results.json").read_text())["status"] == "failed"
    )
    assert list((tmp_path / "tmp").iterdir()) == []


def test_input_hashes_taken_at_check_time_are_the_ones_recorded(
    tmp_path, write_recipe, base_recipe
):
    import dataclasses

    from runner.run.job import Job
    from runner.run.loop import run_job

    unit, opts = _unit(_fake_recipe(write_recipe, base_recipe), tmp_path, limit=2)
    unit = dataclasses.replace(
        unit, prepared=dataclasses.replace(unit.prepared, inputs={"dataset:x.json": "0" * 16})
    )
    [res] = run_job(Job(units=(unit,), options=opts))
    assert res.status == "ok", res.error
    assert res.environment["inputs"] == {"dataset:x.json": "0" * 16}
