"""One summary reads each run's samples once: the gates, the answers that change, summary.json's
intervals and the accuracy chart share the read."""

from __future__ import annotations

import json
from collections import Counter

from runner.folder import load_results
from runner.report import summary
from tests.test_report import recipe, result, samples, store, table_with, vllm
from tests.wired import write_summary


def test_a_summary_reads_each_runs_samples_once(tmp_path, monkeypatch):
    gate = {"gate": {"metric": "char_f1", "max_drop": 0.05}}
    runs = [
        (recipe("base", baseline=True), [1] * 40),
        (recipe("fp8", engine=vllm(quantization="fp8"), **gate), [1] * 30 + [0] * 10),
        (recipe("eager", engine=vllm(enforce_eager=True), **gate), [1] * 40),
    ]
    for rec, em in runs:
        mean = sum(em) / len(em)
        r = result(rec.name, rec, scores={"exact_match": mean, "char_f1": mean}, n=len(em))
        store(tmp_path, r, samples(rec.name, em))
    read, load = Counter(), summary.load_samples
    monkeypatch.setattr(summary, "load_samples", lambda f: read.update([f.root.name]) or load(f))

    md = write_summary(load_results(tmp_path), tmp_path).read_text(encoding="utf-8")

    assert read == {"base": 1, "fp8": 1, "eager": 1}
    changed = {r["recipe"]: r["EM now wrong"] for r in table_with(md, "McNemar p (EM)")}
    gates = {r["recipe"]: r["gate"] for r in table_with(md, "allowed")}
    assert (changed, gates) == ({"fp8": "10", "eager": "0"}, {"fp8": "fail", "eager": "pass"})
    doc = json.loads((tmp_path / "summary.json").read_text(encoding="utf-8"))
    ci = {r["name"]: r["scores"]["char_f1"]["lo"] for r in doc["recipes"]}
    assert ci["fp8"] < 0.75 < ci["base"] == 1.0
