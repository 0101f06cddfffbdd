"""`runner compare OLD NEW`: fake-engine runs of two calls, one slowed by a known factor, one whose
answers change on known examples; versions named; run folders matched whatever their names; exit
codes a CI gates on; the bad-input messages; compare.json against its schema."""

from __future__ import annotations

import gzip
import json
import shutil
import statistics
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from jsonschema import Draft202012Validator
from scipy.stats import t

from runner.base.dotted import set_dotted
from runner.cli import cli
from runner.compare.compare import change
from runner.report.spread import ratio_text
from tests.cli_output import normalized, user_error
from tests.conftest import DEMO_DATA, PROJECT

DELAY = 0.02  # s an example: 0.72 s a generation, far above the runner's own time, loaded or not
WRONG = "{% if id[-1] in '12' %}wrong{% else %}{{ answers[0] }}{% endif %}"  # 8 of the 36 ids


def _go(tmp: Path, out: str, delay: float = DELAY, reply: str = "{{ answers[0] }}", **more) -> Path:
    recipe = {
        "name": "fk",
        "model": {"id": "none"},
        "engine": {"kind": "fake", "reply": reply, "delay_s": delay, "jitter": 0.2},
        "dataset": {"format": "squad", "path": str(DEMO_DATA)},
        "prompt": {"template": "jsquad.j2"},
        "sampling": {"temperature": 0, "max_tokens": 16},
        "metrics": ["exact_match", "char_f1"],
        "repeat": 4,
        **more,
    }
    path = tmp / f"{out}.yaml"
    path.write_text(yaml.safe_dump(recipe), encoding="utf-8")
    args = ["go", str(path), "--out", str(tmp / out), "--no-progress", "--in-process"]
    assert CliRunner().invoke(cli, args).exit_code == 0
    # a loaded test machine marks repeats busy (load, CPU pressure), and compare says so on stderr:
    # these calls are made quiet, and the tests of that line set it themselves
    p = tmp / out / "fk" / "results.json"
    d = json.loads(p.read_text())
    for x in d["repeats"]:
        x["noise"]["busy"] = []
    p.write_text(json.dumps(d))
    return tmp / out


@pytest.fixture(scope="module")
def calls(tmp_path_factory) -> dict[str, Path]:
    """Four calls of the same recipe: old, the same again, 3x the per-example delay, and replies
    that are wrong on 8 known examples."""
    tmp = tmp_path_factory.mktemp("compare")
    return {
        "old": _go(tmp, "old"),
        "same": _go(tmp, "same"),
        "slow": _go(tmp, "slow", delay=3 * DELAY),
        "changed": _go(tmp, "changed", reply=WRONG),
    }


def _copy(src: Path, dest: Path, env: dict | None = None) -> Path:
    """A copy of an out folder, its results scored for real (as with real weights), with
    environment facts set (dotted keys), as a run of its own (its start moved: two copies of one
    run are refused as the same run)."""
    shutil.copytree(src, dest)
    p = dest / "fk" / "results.json"
    d = json.loads(p.read_text())
    d["scores_meaningful"] = True
    d["started_at"] += f" ({dest.name})"
    for k, v in (env or {}).items():
        set_dotted(d["environment"], k, v)
    p.write_text(json.dumps(d))
    return dest


def _compare(*args):
    return CliRunner().invoke(cli, ["compare", *map(str, args)])


def _json(tmp: Path, *args) -> dict:
    r = _compare(*args, "--json", "--out", tmp / "cmp")
    assert r.exit_code in (0, 1), r.output
    doc = json.loads(r.stdout)
    assert doc == json.loads((tmp / "cmp" / "compare.json").read_text())
    return doc


def test_the_same_runs_are_no_clear_difference_and_pass_the_gate(calls, tmp_path):
    # one run on both sides (a copy of one artifact, or a call that skipped it as unchanged): said
    shutil.copytree(calls["old"], tmp_path / "twice")
    r = _compare(calls["old"], tmp_path / "twice", "--fail-on-slower", "10", "--json")
    assert r.exit_code == 0, r.output
    assert "the same run on both sides (nothing measured anew): fk\n" in r.stderr
    doc = json.loads(r.stdout)
    assert doc["same_runs"] == ["fk"]
    # found by a tester: its repeats were set against themselves as two samples (an interval, a
    # verdict), and the gate passed as if it had looked; compare.md said none of it
    [p] = doc["recipes"]
    assert (
        p["speedup"] is None and p["time"] == "the same run on both sides (nothing measured anew)"
    )
    assert doc["cannot_fail"] == [
        "fk: the same run on both sides: --fail-on-slower 10 cannot fail it"
    ]
    md = (tmp_path / "twice" / "compare.md").read_text()
    assert "- the same run on both sides (nothing measured anew): fk\n" in md
    assert (
        "## Gates\n\n- asked: --fail-on-slower 10; none failed\n"
        "- fk: the same run on both sides: --fail-on-slower 10 cannot fail it\n"
    ) in md
    # no gate asked: said, not "none failed"
    r = _compare(calls["old"], tmp_path / "twice", "--out", tmp_path / "plain")
    text = (tmp_path / "plain" / "compare.md").read_text()
    assert "## Gates\n\n- none asked (`--fail-on-slower`, `--fail-on-drop`): nothing here" in text
    # on review: --fail-on-drop alone on the same run (the slower gate's text was built from None)
    scored = _copy(calls["old"], tmp_path / "s1")
    shutil.copytree(scored, tmp_path / "s2")
    r = _compare(scored, tmp_path / "s2", "--fail-on-drop", "exact_match:0.01", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["cannot_fail"] == [
        "fk: the same run on both sides: --fail-on-drop exact_match:0.01 cannot fail it"
    ]
    # the same repeats as two runs: no clear difference
    old, copy = _copy(calls["old"], tmp_path / "a"), _copy(calls["old"], tmp_path / "copy")
    r = _compare(old, copy, "--fail-on-slower", "10")
    assert r.exit_code == 0, r.output
    line, written = r.stdout.splitlines()
    assert line.startswith("fk: no clear difference (0.") and line.endswith("×); same answers")
    assert written == f"compare: {copy / 'compare.md'}"
    assert {p.name for p in copy.iterdir()} >= {"compare.md", "compare.json", "compare.png"}
    # a second call of the same recipe: matched across calls, the same answers; its time moves with
    # the load (a shared machine once made it 1.50x (1.16-1.95)): no verdict asserted
    r = _compare(calls["old"], calls["same"], "--out", tmp_path / "o")
    assert r.exit_code == 0, r.output
    line, written = r.stdout.splitlines()
    assert line.startswith("fk: ") and line.endswith(
        "; same answers; scores not comparable (a fake engine)"
    )
    assert written == f"compare: {tmp_path / 'o' / 'compare.md'}"


def test_a_run_3x_slower_per_example_is_clearly_slower_and_fails_the_gate(calls, tmp_path):
    r = _compare(calls["old"], calls["slow"], "--fail-on-slower", "10", "--out", tmp_path)
    assert r.exit_code == 1, r.output
    doc = json.loads((tmp_path / "compare.json").read_text())
    p = doc["recipes"][0]
    sp, low = p["speedup"], 1 / p["speedup"]["hi"]  # NEW/OLD time's lower end
    assert 1.1 < low < 1 / sp["ratio"] < 1 / sp["lo"] and 1.5 < 1 / sp["ratio"] < 4.5
    assert (sp["verdict"], sp["method"], sp["measured"]) == (
        "slower",
        "Welch t on log times",
        "across calls",
    )
    assert p["time"] == f"clearly slower: {ratio_text(1 / sp['ratio'], low, 1 / sp['lo'])}"
    assert p["settings"] == {"engine.delay_s": "0.02 -> 0.06"}
    assert p["old_time"]["n"] == p["new_time"]["n"] == 4
    assert p["new_time"]["s"] / p["old_time"]["s"] == pytest.approx(1 / sp["ratio"])
    assert r.stdout.startswith(f"fk: {p['time']}; same answers")
    # the Markdown a person reads says what the exit code says (found by a tester: it did not)
    md = (tmp_path / "compare.md").read_text()
    gates = "## Gates\n\n- asked: --fail-on-slower 10\n"
    gates += f"- failed --fail-on-slower 10: fk is {p['time']};"
    assert gates in md and doc["gates"] == ["--fail-on-slower 10"]
    assert r.stderr == (
        f"failed --fail-on-slower 10: fk is {p['time']}; NEW/OLD time's lower end {low:.3f} is "
        "above 1.1\n"
    )
    md = (tmp_path / "compare.md").read_text()
    assert "| engine.delay_s 0.02 -> 0.06 " in md and f"{p['time']}; same answers" in md
    # clearly slower, but not by more than 500%: a pass; nothing replaced without a word
    r = _compare(calls["old"], calls["slow"], "--fail-on-slower", "500", "--out", tmp_path)
    assert r.exit_code == 0, r.output
    assert r.stderr == (
        f"replacing the earlier compare.md, compare.json, compare.png in {tmp_path}\n"
    )


def test_changed_answers_count_and_paired_interval(calls, tmp_path):
    old, new = _copy(calls["old"], tmp_path / "a"), _copy(calls["changed"], tmp_path / "b")
    doc = _json(tmp_path, old, new)
    p = doc["recipes"][0]
    assert (p["paired"], p["changed"]) == (36, 8)
    em = next(s for s in p["scores"] if s["metric"] == "exact_match")
    diffs = [-1.0] * 8 + [0.0] * 28
    half = t.ppf(0.975, 35) * statistics.stdev(diffs) / 6
    assert (em["n"], em["mean"]) == (36, pytest.approx(-8 / 36))
    assert (em["lo"], em["hi"]) == pytest.approx((-8 / 36 - half, -8 / 36 + half))
    assert (em["now_right"], em["now_wrong"], em["mcnemar_p"]) == (0, 8, 2 / 2**8)
    assert p["answers"].startswith(
        f"answers changed: 8 of 36, exact_match -0.222 ({-8 / 36 - half:+.3f} to "
        f"{-8 / 36 + half:+.3f}), char_f1 -0.222"
    )
    # the upper end (-0.080) is below -0.05, not below -0.1
    r = _compare(old, new, "--fail-on-drop", "exact_match:0.05", "--out", tmp_path / "c")
    assert r.exit_code == 1, r.output
    assert r.stderr.splitlines()[-1] == (
        f"failed --fail-on-drop exact_match:0.05: fk: {em['words']}; the upper end "
        f"{em['hi']:+.3f} is below -0.05"
    )
    assert _compare(old, new, "--fail-on-drop", "exact_match:0.1").exit_code == 0
    # what tripped is in compare.json too (it was on stderr and in the exit code only)
    doc = _json(tmp_path, old, new, "--fail-on-drop", "exact_match:0.05")
    assert doc["failed"] == [r.stderr.splitlines()[-1].removeprefix("failed ")]
    assert doc["cannot_fail"] == []
    # one per metric, each gating (a second one replaced the first: a dropped gate passed)
    for gates in (["char_f1:0.5", "exact_match:0.05"], ["exact_match:0.05", "char_f1:0.5"]):
        args = [x for g in gates for x in ("--fail-on-drop", g)]
        r = _compare(old, new, *args, "--out", tmp_path / "two")
        assert r.exit_code == 1 and "failed --fail-on-drop exact_match:0.05: fk: " in r.stderr
    r = _compare(old, new, "--fail-on-slower", "10", "--fail-on-slower", "500")
    assert user_error(r).endswith(
        "Error: Invalid value for '--fail-on-slower': given 2 times (10.0, 500.0); give it once\n"
    )
    md = (new / "compare.md").read_text()
    # McNemar where every score is 0 or 1: char_f1 here too (the fake replies are exact or wrong)
    assert "| exact_match 0 / 8 (p=0.00781); char_f1 0 / 8 (p=0.00781) " in md and em["words"] in md


def test_mcnemar_only_where_every_score_is_0_or_1():
    olds = {i: {"em": 1.0, "f1": 1.0} for i in range(4)}
    news = {0: {"em": 0.0, "f1": 0.5}, 1: {"em": 1.0, "f1": 1.0}, 2: {"em": 0.0, "f1": 0.0}}
    news[3] = {"em": 1.0, "f1": 1.0}
    em, f1 = (change(m, olds, news, [0, 1, 2, 3]) for m in ("em", "f1"))
    assert (em.now_right, em.now_wrong, em.mcnemar_p, em.n, em.mean) == (0, 2, 0.5, 4, -0.5)
    assert (f1.now_right, f1.now_wrong, f1.mcnemar_p) == (None, None, None)
    assert f1.words == "f1 -0.375 (too few examples to tell: n=4; 30 needed)"


def test_versions_that_differ_are_named(calls, tmp_path):
    old = _copy(calls["old"], tmp_path / "a", {"packages.vllm": "0.10.0", "driver": "550.1"})
    new = _copy(calls["old"], tmp_path / "b", {"packages.vllm": "0.11.0", "driver": "580.2"})
    set_dotted(
        doc := json.loads((new / "fk" / "results.json").read_text()), "environment.gpu", "H200"
    )
    (new / "fk" / "results.json").write_text(json.dumps(doc))
    doc = _json(tmp_path, old, new)
    want = ["driver 550.1 -> 580.2", "gpu (unset) -> H200", "packages.vllm 0.10.0 -> 0.11.0"]
    assert doc["differs"] == want
    assert doc["recipes"][0]["settings"] == {}
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert f"- versions that differ: {'; '.join(want)}" in md and "| same " in md


def test_run_folders_match_whatever_their_names_and_one_run_has_no_interval(calls, tmp_path):
    """A run folder against the copy a later run set aside in it (replaced/<time>-<key>/, samples
    gzipped), of another name and one repeat: matched, said so, no interval, the gate cannot fail
    it; written into NEW, and refused the other way round (NEW in OLD)."""
    run = tmp_path / "fk"
    shutil.copytree(calls["same"] / "fk", run)
    aside = run / "replaced" / "20250101-000000-abc"
    shutil.copytree(calls["old"] / "fk", aside)
    samples = aside / "samples.jsonl"
    (aside / "samples.jsonl.gz").write_bytes(gzip.compress(samples.read_bytes()))
    samples.unlink()
    d = json.loads((aside / "results.json").read_text())
    (aside / "results.json").write_text(
        json.dumps({**d, "name": "fk0", "repeats": d["repeats"][:1]})
    )
    r = _compare(aside, run, "--fail-on-slower", "10", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["matched"] == "two run folders: whatever their names"
    p = doc["recipes"][0]
    assert (p["name"], p["old_name"], p["speedup"]["lo"], p["speedup"]["verdict"]) == (
        "fk",
        "fk0",
        None,
        "no interval",
    )
    assert (p["paired"], p["changed"]) == (36, 0)
    # a direction from one run is no verdict (it said `faster: 1.90× (1 run: no interval)`)
    assert p["time"] == f"no verdict: {ratio_text(p['speedup']['ratio'], None, None)}"
    assert p["time"].endswith(" (1 run: no interval)")
    assert r.stderr.splitlines() == [
        f"fk: {p['time']}; {p['answers']}",
        f"compare: {run / 'compare.md'}",
        f"fk: {p['time']}: --fail-on-slower cannot fail it",
    ]
    assert "| fk (old: fk0) " in (run / "compare.md").read_text()
    assert user_error(_compare(run, aside)) == normalized(
        f"Error: --out: {aside} is in OLD ({run}): compare never writes into the older runs\n"
        "  hint: name another folder with --out\n"
    )


def test_recipes_on_one_side_are_named(calls, tmp_path):
    old = _copy(calls["old"], tmp_path / "a")
    shutil.copytree(old / "fk", old / "gone")
    d = json.loads((old / "gone" / "results.json").read_text())
    (old / "gone" / "results.json").write_text(json.dumps({**d, "name": "gone"}))
    r = _compare(old, calls["same"], "--out", tmp_path / "out")
    assert r.exit_code == 0, r.output
    assert r.stderr == "only in old: gone\n"
    assert "- only in old: gone\n" in (tmp_path / "out" / "compare.md").read_text()


SIDE = "name a `runner go --out` folder, or one run folder with results.json in it"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["{tmp}/nope", "{old}"], f"{{tmp}}/nope: no such folder\n  hint: {SIDE}"),
        (
            ["{tmp}", "{old}"],
            f"{{tmp}}: no results.json here, nor in */results.json\n  hint: {SIDE}",
        ),
        (
            ["{old}", "{new}", "--fail-on-slower", "-5"],
            "--fail-on-slower: -5 is not a percent at or above 0\n  hint: PCT is how much slower, "
            "in percent, fails: e.g. --fail-on-slower 10",
        ),
        (
            ["{old}", "{new}", "--fail-on-slower", "nan"],
            "--fail-on-slower: nan is not a percent at or above 0\n  hint: PCT is how much "
            "slower, in percent, fails: e.g. --fail-on-slower 10",
        ),
        (  # found by a tester: a gate that can never fail was taken
            ["{old}", "{new}", "--fail-on-slower", "inf"],
            "--fail-on-slower: inf is not a finite percent: no run is slower by more than it, so "
            "the gate could never fail\n"
            "  hint: PCT is how much slower, in percent, fails: e.g. --fail-on-slower 10",
        ),
        (
            ["{old}", "{new}", "--fail-on-drop", "exact_match"],
            "--fail-on-drop: 'exact_match' is not METRIC:DROP (DROP a number from 0 to 1)\n"
            "  hint: e.g. squad_f1:0.01; paired scores here: char_f1, exact_match",
        ),
        (
            ["{old}", "{new}", "--fail-on-drop", "squad_f1:0.01"],
            "--fail-on-drop: no recipe has paired scores of 'squad_f1'\n"
            "  hint: paired scores here: char_f1, exact_match",
        ),
        (
            ["{old}", "{fake}", "--fail-on-drop", "exact_match:0.01"],
            "--fail-on-drop: no recipe has paired scores of 'exact_match'\n  hint: no recipe has "
            "scores on both sides to pair (the fake engine's and random weights' are not "
            "comparable): leave --fail-on-drop out",
        ),
        (
            ["{old}", "{other}"],
            "no recipe is on both sides (old: fk; new: other)\n  hint: name two run folders "
            "(OLD/NAME NEW/NAME) to compare them whatever their names",
        ),
        (
            ["{old}", "{old}"],
            "OLD and NEW are the same folder ({tmp}/a): nothing to compare\n  hint: name as NEW "
            "the --out folder of the call you want to compare with OLD",
        ),
        (
            ["{old}", "{new}", "--out", "{old}/x"],
            "--out: {tmp}/a/x is in OLD ({tmp}/a): compare never writes into the older runs\n"
            "  hint: name another folder with --out",
        ),
    ],
)
def test_bad_input_is_refused_with_a_hint(calls, tmp_path, args, message):
    old = _copy(calls["old"], tmp_path / "a")
    other = tmp_path / "b" / "other"
    shutil.copytree(old / "fk", other)
    d = json.loads((other / "results.json").read_text())
    (other / "results.json").write_text(json.dumps({**d, "name": "other"}))
    new = _copy(calls["old"], tmp_path / "n")
    paths = {
        "tmp": tmp_path,
        "old": old,
        "new": new,
        "fake": calls["same"],
        "other": tmp_path / "b",
    }
    r = _compare(*(a.format(**paths) for a in args))
    assert user_error(r) == f"Error: {message}\n"
    assert not (old / "compare.md").exists()


def test_compare_json_follows_its_schema(calls, tmp_path):
    schema = json.loads((PROJECT / "schema" / "compare.schema.json").read_text())
    Draft202012Validator.check_schema(schema)
    old, new = _copy(calls["old"], tmp_path / "a"), _copy(calls["changed"], tmp_path / "b")
    doc = _json(tmp_path, old, new)
    errors = [e.message for e in Draft202012Validator(schema).iter_errors(doc)]
    assert errors == [] and doc["recipes"][0]["scores"]
    doc["recipes"][0]["speedup"]["ratio"] = "fast"
    assert list(Draft202012Validator(schema).iter_errors(doc))


def test_no_samples_and_no_ratio_say_why(calls, tmp_path):
    """Real weights against a fake engine have no time ratio and say why (it said `not the same
    examples`); a side without samples says `no samples` (it said `0 of 0` outputs changed)."""
    old, new = _copy(calls["old"], tmp_path / "a"), tmp_path / "b"
    shutil.copytree(calls["same"], new)
    (new / "fk" / "samples.jsonl").unlink()
    doc = _json(tmp_path, old, new, "--fail-on-slower", "10")
    p = doc["recipes"][0]
    why = "a fake engine against real weights: their outputs differ in length"
    assert (p["speedup"], p["time"]) == (None, f"no time ratio: {why}")
    assert (p["paired"], p["answers"]) == (
        0,
        "no samples to pair; scores not comparable (a fake engine)",
    )
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert f"| no samples        | {p['time']}; {p['answers']} |" in md


def test_runner_schema_prints_the_compare_schema():
    got = CliRunner().invoke(cli, ["schema", "compare"]).stdout
    assert got == (PROJECT / "schema" / "compare.schema.json").read_text()


def test_a_failed_side_pairs_nothing_and_its_sample_count_is_no_workload(calls, tmp_path):
    """Found by an exploratory tester: a NEW that failed read `changed: 0` beside "no samples",
    and `examples 36 -> 0` among the settings that differ."""
    old, new = _copy(calls["old"], tmp_path / "a"), _copy(calls["old"], tmp_path / "b")
    p = new / "fk" / "results.json"
    d = json.loads(p.read_text())
    d.update(status="failed", error="timed out after 1 s (--timeout); the run was ended")
    d.update(n_samples=0, scores={}, repeats=[])
    p.write_text(json.dumps(d))
    (new / "fk" / "samples.jsonl").unlink()
    doc = _json(tmp_path, old, new)
    [x] = doc["recipes"]
    assert (x["paired"], x["changed"]) == (0, None) and "examples" not in x["settings"]
    assert (x["old_status"], x["new_status"]) == ("ok", "failed")
    # a gate given fails it (it passed: "cannot fail it"), and says why
    r = _compare(old, new, "--fail-on-slower", "10", "--out", tmp_path / "gated")
    assert r.exit_code == 1 and r.stderr.endswith(
        "failed --fail-on-slower: fk failed in new (a failed run shows no time or score)\n"
    )
    r = _compare(old, new, "--fail-on-slower", "0", "--out", tmp_path / "zero")  # 0 is a gate
    assert r.exit_code == 1 and "failed --fail-on-slower: fk failed in new" in r.stderr
    r = _compare(new, old, "--fail-on-slower", "10", "--out", tmp_path / "back")
    assert r.exit_code == 0 and "failed in old" in r.output  # failed before, fixed now: no fail


def test_an_estimate_is_said_to_be_one_beside_its_ratio(calls, tmp_path):
    """Found by a tester: a run projected from 20 of 60 examples was compared with a full run as if
    both were measured (and listed `examples 60 -> 20` as a setting that differs)."""
    est = _go(tmp_path, "est", estimate=12)
    doc = _json(tmp_path, calls["old"], est)
    [p] = doc["recipes"]
    assert "examples" not in p["settings"], p["settings"]
    assert p["time"].endswith(" (~: NEW projected from 12 of 36 examples)"), p["time"]


def test_a_time_measured_on_a_busy_machine_is_said_and_kept_in_the_json(calls, tmp_path):
    """Found by a tester: summary.md marks a busy machine's times; compare (what a CI gates on) and
    summary.json did not."""
    old, new = _copy(calls["old"], tmp_path / "a"), _copy(calls["old"], tmp_path / "b")
    p = new / "fk" / "results.json"
    d = json.loads(p.read_text())
    d["repeats"][1]["noise"]["busy"] = ["load average 9.0 on 2 CPUs"]
    p.write_text(json.dumps(d))
    doc = _json(tmp_path, old, new)
    assert doc["recipes"][0]["new_time"]["busy"] == ["repeat 2: load average 9.0 on 2 CPUs"]
    r = _compare(old, new, "--out", tmp_path / "c")
    assert (
        "fk: measured on a busy machine in new: repeat 2: load average 9.0 on 2 CPUs\n" in r.stderr
    )


def test_the_same_data_elsewhere_is_the_same_examples_and_other_bytes_are_not(calls, tmp_path):
    """Found by a tester: a dataset path written otherwise (`./x` for `x`, a checkout elsewhere)
    made every recipe 'other examples', so `--fail-on-slower` could not fail a 3x slower run.
    The data is matched by the hash of its bytes (results.json's `environment.inputs`)."""
    old, slow = _copy(calls["old"], tmp_path / "a"), _copy(calls["slow"], tmp_path / "b")
    p = slow / "fk" / "results.json"
    d = json.loads(p.read_text())
    [key] = [k for k in d["environment"]["inputs"] if k.startswith("dataset:")]
    d["recipe"]["dataset"]["path"] = "/elsewhere/checkout/squad.json"
    inputs = d["environment"]["inputs"]
    inputs["dataset:/elsewhere/checkout/squad.json"] = inputs.pop(key)
    p.write_text(json.dumps(d))
    r = _compare(old, slow, "--fail-on-slower", "10", "--out", tmp_path / "o1")
    assert r.exit_code == 1 and "failed --fail-on-slower 10: fk is clearly slower" in r.stderr
    # other bytes under the same name: not the same examples, and said so
    inputs["dataset:/elsewhere/checkout/squad.json"] = "0" * 16
    p.write_text(json.dumps(d))
    r = _compare(old, slow, "--fail-on-slower", "10", "--out", tmp_path / "o2")
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith(
        "fk: no time ratio: other examples: as many (36), from another dataset or its settings;"
    )
