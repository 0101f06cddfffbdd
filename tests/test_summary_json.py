"""summary.json beside every summary.md (issue 43): the same figures as the Markdown, valid against
schema/summary.schema.json; `--fail-on-gate` on go and report; `--json` on check, go, report and
tune (one JSON document on stdout, every message on stderr)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from jsonschema import Draft202012Validator

from runner.base.format import secs
from runner.cli import cli
from runner.report.spread import ratio_text
from runner.report.summary import SummaryJson, signed
from runner.results import Repeat
from tests.test_report import recipe, result, store, summary_rows, table_with, vllm
from tests.test_tune import _tune_file
from tests.wired import write_summary

PROJECT = Path(__file__).resolve().parents[1]
SCHEMA = PROJECT / "schema" / "summary.schema.json"
GATE = {"gate": {"metric": "char_f1", "max_drop": 0.05}}


def _valid(doc: dict) -> SummaryJson:
    Draft202012Validator(json.loads(SCHEMA.read_text(encoding="utf-8"))).validate(doc)
    return SummaryJson.model_validate(doc)


def _stored(out: Path) -> None:
    """A baseline and four gated recipes: one passes (faster, a little less accurate), one fails,
    one has random weights, one too few examples; and one that failed to run."""
    reps = lambda *ts: [Repeat(index=i + 1, generate_s=t) for i, t in enumerate(ts)]
    rows = lambda f, n=40: [
        {"id": f"q{i}", "prompt": "p", "output": "o", "answers": ["g"], "char_f1": f(i)}
        for i in range(n)
    ]
    runs = [
        ("base", {"baseline": True}, [2.0, 2.2, 1.9], 0.6, rows(lambda i: 0.6)),
        ("fast", {"engine": vllm()}, [1.0, 1.1, 0.95], 0.59, rows(lambda i: 0.6 - (i % 2) / 50)),
        ("worse", {"engine": vllm(quantization="fp8")}, [0.5, 0.55, 0.5], 0.5, rows(lambda i: 0.5)),
        ("few", {"engine": vllm(enforce_eager=True)}, [1.5], 0.6, rows(lambda i: 0.6, 5)),
    ]
    for name, over, times, score, samples in runs:
        r = result(
            name,
            recipe(name, **GATE, **over),
            generate_s=times[0],
            repeats=reps(*times),
            scores={"char_f1": score},
        )
        store(out, r, samples)
    dummy = recipe("dummy", **GATE)
    store(out, result("dummy", dummy, meaningful=False), rows(lambda i: 0.0))
    store(out, result("broken", recipe("broken", engine=vllm(), **GATE), status="failed"))


def test_summary_json_validates_and_has_the_markdowns_figures(tmp_path):
    from runner.folder import load_results

    _stored(tmp_path)
    md = write_summary(load_results(tmp_path), tmp_path).read_text(encoding="utf-8")
    doc = _valid(json.loads((tmp_path / "summary.json").read_text(encoding="utf-8")))
    rows, gates = summary_rows(md), {g["recipe"]: g for g in table_with(md, "allowed")}
    assert (doc.baseline, doc.fastest, doc.front_metric) == ("base", "fast", "char_f1")
    assert f"Fastest that passed its gate: **{doc.fastest}**" in md
    # the chart's green points: worse is stopped, dummy has random weights, few and base are slower
    # than fast but base is more accurate
    assert doc.front == ["base", "fast"]
    by = {r.name: r for r in doc.recipes}
    assert list(rows) == list(by) and by["broken"].status == "failed" and by["broken"].time is None
    for name, r in by.items():
        row = rows[name]
        if (t := r.time) is not None:
            interval = f" ({secs(t.lo)}–{secs(t.hi)}, n={t.n})" if t.lo is not None else ""
            assert row["generation time"].startswith(secs(t.s) + interval), (name, row)
        if (sp := r.speedup) is not None:
            assert row["speed-up"].startswith(ratio_text(sp.ratio, sp.lo, sp.hi)), (name, row)
        for m, s in r.scores.items():
            assert row[m] == f"{s.mean:.3f}" and (s.lo is None or s.lo <= s.mean <= s.hi)
        if (g := r.gate) is not None:
            assert (gates[name]["gate"], gates[name]["why"]) == (g.verdict, g.why)
            if g.lo is not None:
                ci = f"{signed(g.mean)} ({signed(g.lo)} to {signed(g.hi)})"
                assert gates[name]["difference from the baseline (95% CI)"] == ci
    assert by["base"].speedup is None and by["base"].gate is None
    assert (by["fast"].speedup.verdict, by["fast"].speedup.method) == (
        "faster",
        "Welch t on log times",
    )
    assert by["few"].speedup.verdict == "no interval"  # one repeat
    assert [by[n].gate.verdict for n in ("fast", "worse", "few", "dummy", "broken")] == [
        "pass",
        "fail",
        "too few to tell",
        "not scored",
        "not scored",
    ]
    assert by["dummy"].scores == {} and by["fast"].scores["char_f1"].lo is not None


def test_runner_schema_prints_the_summary_schema():
    """(tests/test_schema.py keeps the file current)"""
    assert CliRunner().invoke(cli, ["schema", "summary"]).stdout == SCHEMA.read_text("utf-8")


def test_report_fails_on_a_clearly_failed_gate_only_and_prints_json(tmp_path):
    _stored(tmp_path)
    plain = CliRunner().invoke(cli, ["report", str(tmp_path)])
    assert plain.exit_code == 0 and "gate" not in plain.stderr
    r = CliRunner().invoke(cli, ["report", str(tmp_path), "--fail-on-gate", "--json"])
    assert r.exit_code == 1, r.output
    doc = _valid(json.loads(r.stdout))
    assert doc.path == str(tmp_path / "summary.md")
    worse = next(x.gate for x in doc.recipes if x.name == "worse")
    not_failing = "; not a failure for --fail-on-gate"
    assert r.stderr.splitlines()[-4:] == [
        f"gate not checked: broken — char_f1: status failed{not_failing}",
        f"gate not checked: dummy — char_f1: random weights or the fake engine{not_failing}",
        "gate not decided: few — char_f1: too few examples to tell (n=5; 30 needed)" + not_failing,
        f"gate failed: worse — char_f1: lower end {worse.lo:+.3f} at or below -0.050",
    ]
    assert f"summary: {tmp_path / 'summary.md'} (6 recipes)" in r.stderr


def _fake(base_recipe: dict, **over) -> dict:
    engine = {"kind": "fake", "reply": "{{ answers[0] }}"}
    return {**base_recipe, "model": {"id": "none"}, "engine": engine, **over}


def test_go_json_prints_the_summary_and_each_study_gets_its_summary_json(
    write_recipe, base_recipe, tmp_path
):
    study = _fake(base_recipe, name="s", matrix={"sampling.max_tokens": {"a": 16, "b": 8}})
    path, out = write_recipe(study), tmp_path / "out"
    args = ["go", str(path), "--out", str(out), "--limit", "3", "--in-process", "--no-progress"]
    r = CliRunner().invoke(cli, [*args, "--json", "--fail-on-gate"])
    assert r.exit_code == 0, r.output
    doc = _valid(json.loads(r.stdout))
    assert [x.name for x in doc.recipes] == ["s-a", "s-b"] and doc.path == str(out / "summary.md")
    assert r.stderr.startswith("[job 1 of 1] s-a, s-b (fake, none)")
    assert f"summary: {out / 'summary.md'}\n" in r.stderr and "{" not in r.stderr
    own = _valid(json.loads((out / "s" / "summary.json").read_text(encoding="utf-8")))
    assert own.title == "Study s: every stored cell" and len(own.recipes) == 2


def test_check_json_lists_the_recipes_and_each_files_error_then_exits_2(write_recipe, base_recipe):
    good = write_recipe(_fake(base_recipe, name="good"), "good.yaml")
    bad = _fake(base_recipe, name="bad", sampling={"max_tokens": 0})
    bad = write_recipe(bad, "bad.yaml")
    r = CliRunner().invoke(cli, ["check", str(good), str(bad), "--no-tokens", "--json"])
    assert r.exit_code == 2
    got = json.loads(r.stdout)
    [rec] = got["recipes"]
    assert rec == {
        "path": str(good),
        "name": "good",
        "engine": "fake",
        "model": "none",
        "examples": 36,
        "dataset_examples": 36,
        "runs": 36,
        "notes": [],
    }
    [err] = got["errors"]
    assert err["path"] == str(bad) and "sampling.max_tokens" in err["error"]
    assert f"ok {good}: good — fake, none, 36 of 36 examples" in r.stderr
    assert r.stderr.endswith("\n\n1 of 2 files have errors\n") and "Error: " not in r.stdout


@pytest.mark.parametrize("dry", [False, True])
def test_tune_json_prints_the_outcome(tmp_path, write_recipe, base_recipe, dry):
    path = _tune_file(write_recipe, base_recipe, {"engine.delay_s": [0.002, 0.001]})
    args = ["tune", str(path), "--out", str(tmp_path / "out"), "--no-progress", "--in-process"]
    r = CliRunner().invoke(cli, [*args, "--json", *(["--dry-run"] if dry else [])])
    if dry:
        assert r.exit_code == 2 and r.stderr == (
            "Error: --json with --dry-run: lists the candidates as Markdown: it has no JSON\n"
            "  hint: leave out --json\n"
        )
        return
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    assert got["tune"] == "tu" and got["report"] == str(tmp_path / "out" / "tu-tune.md")
    assert [c["name"] for c in got["cells"]][0] == "tu" and got["cells"][0]["verdict"] == "baseline"
    assert all(w in [c["name"] for c in got["cells"]] for w in got["winners"])
    assert got["cells"][0]["time"]["n"] == 3 and f"tune tu: {got['words']}" in r.stderr
