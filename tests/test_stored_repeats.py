"""Stored repeats read back line by line (issue 39): a bad line of repeats.jsonl (index below 1, a
time that is not a positive finite number, not a repeat, not JSON, cut off by an interruption) is
named with its line number, set aside in repeats.rejected.jsonl and left out, while the good repeats
are kept and not measured again; a results.json whose repeats hold a 0 s, negative or NaN time is
left out of `runner report`, which names it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from runner.cli import cli
from runner.folder import RunFolder, load_results
from runner.results import Repeat
from runner.run.resume import load_repeats

LIMIT = "3"


def _fake(base_recipe, name="r"):
    engine = {"kind": "fake", "reply": "{{ answers[0] }}", "delay_s": 0.0}
    return {**base_recipe, "name": name, "model": {"id": "none"}, "engine": engine}


def _go(path: Path, out: Path, repeat: int = 3):
    args = ["go", str(path), "--out", str(out), "--repeat", str(repeat), "--limit", LIMIT]
    return CliRunner().invoke(cli, [*args, "--no-progress", "--in-process"])


def _lines(out: Path, name: str = "r") -> list[str]:
    return (out / name / "repeats.jsonl").read_text().splitlines()


def _rejected(out: Path, name: str = "r") -> list[dict]:
    return [json.loads(x) for x in (out / name / "repeats.rejected.jsonl").read_text().splitlines()]


def _write(out: Path, lines: list[str], name: str = "r", end: str = "\n") -> None:
    (out / name / "repeats.jsonl").write_text("\n".join(lines) + end)


@pytest.fixture
def interrupted(tmp_path, write_recipe, base_recipe):
    """A `--repeat 3` run whose call ended after its second repeat (results.json not yet written,
    repeats 1 and 2 in repeats.jsonl): (recipe path, out, the file's lines: header, repeat 1, repeat
    2, repeat 3)."""
    path, out = write_recipe(_fake(base_recipe)), tmp_path / "out"
    r = _go(path, out)
    assert r.exit_code == 0, r.output
    lines = _lines(out)
    assert [json.loads(x)["index"] for x in lines[1:]] == [1, 2, 3]
    (out / "r" / "results.json").unlink()
    return path, out, lines


def _with(line: str, **changes) -> str:
    d = json.loads(line)
    d.update(changes)
    return json.dumps(d)


def _calls(out: Path) -> list[tuple[int, str]]:
    (res,) = load_results(out)
    return [(x.index, x.call) for x in res.repeats]


def test_index_0_and_minus_1_lines_are_set_aside_and_not_counted(interrupted):
    path, out, lines = interrupted
    head, one, two, _ = lines
    first_call = json.loads(one)["call"]
    zero, minus = _with(one, index=0, generate_s=90.0), _with(one, index=-1, generate_s=90.0)
    _write(out, [head, one, two, zero, minus])
    r = _go(path, out)
    assert r.exit_code == 0, r.output
    (res,) = load_results(out)
    assert [x.index for x in res.repeats] == [1, 2, 3]  # 3 repeats, not 5
    assert res.timings.generate_s < 90.0 / 3  # the 90 s lines are not in the geometric mean
    calls = [x.call for x in res.repeats]
    # 1 and 2 kept; only 3 measured
    assert calls[:2] == [first_call, first_call] and calls[2] != first_call
    stored = out / "r" / "repeats.jsonl"
    assert f"{stored} line 4: has index 0 (repeats are numbered from 1)" in r.output
    assert f"{stored} line 5: has index -1 (repeats are numbered from 1)" in r.output
    assert "set aside in repeats.rejected.jsonl" in r.output
    # and in the result's notes (report.md), not only on the process's stderr (engine.log)
    assert [n for n in res.notes if n.startswith(f"{stored} line ")] == [
        f"{stored} line 4: has index 0 (repeats are numbered from 1); set aside in "
        "repeats.rejected.jsonl, the other repeats kept",
        f"{stored} line 5: has index -1 (repeats are numbered from 1); set aside in "
        "repeats.rejected.jsonl, the other repeats kept",
    ]
    rejected = _rejected(out)
    assert [(x["line"], x["text"]) for x in rejected] == [(4, zero), (5, minus)]
    # the file holds good lines only
    assert [json.loads(x)["index"] for x in _lines(out)[1:]] == [1, 2, 3]


def test_a_nan_time_is_set_aside_and_the_good_repeat_of_that_index_kept(interrupted):
    path, out, lines = interrupted
    head, one, two, _ = lines
    nan = _with(two, generate_s=float("nan"))  # json.dumps writes the literal NaN
    assert "NaN" in nan
    _write(out, [head, one, two, nan])
    r = _go(path, out)
    assert r.exit_code == 0, r.output
    assert "nan s" not in r.output and "Traceback" not in r.output
    (res,) = load_results(out)
    assert [x.index for x in res.repeats] == [1, 2, 3]
    # the good line of index 2, not the NaN one
    assert res.repeats[1].generate_s == json.loads(two)["generate_s"]
    assert all(math.isfinite(x.generate_s) and x.generate_s > 0 for x in res.repeats)
    assert math.isfinite(res.timings.generate_s)
    stored = out / "r" / "repeats.jsonl"
    assert (
        f"{stored} line 4: is not a valid repeat (generate_s: Input should be a finite number, got "
        "nan)" in r.output
    )
    assert [x["line"] for x in _rejected(out)] == [4]
    assert (out / "summary.md").is_file()


def test_a_negative_time_is_set_aside_and_that_repeat_measured_again(interrupted):
    path, out, lines = interrupted
    head, one, two, _ = lines
    negative = _with(two, generate_s=-1.5)
    _write(out, [head, one, negative])
    r = _go(path, out)
    assert r.exit_code == 0, r.output
    stored = out / "r" / "repeats.jsonl"
    assert (
        f"{stored} line 3: is not a valid repeat (generate_s: Input should be greater than 0, got "
        "-1.5)" in r.output
    )
    first_call = json.loads(one)["call"]
    calls = _calls(out)
    assert [i for i, _ in calls] == [1, 2, 3]
    # 2 and 3 measured by this call
    assert calls[0][1] == first_call and calls[1][1] == calls[2][1] != first_call
    assert [x["text"] for x in _rejected(out)] == [negative]
    again = _go(path, out)  # a later call is not failed by it either: skipped, complete
    assert again.exit_code == 0 and "skip r: unchanged since" in again.output, again.output


def test_a_cut_last_line_is_repaired_and_the_intact_repeats_kept(interrupted):
    path, out, lines = interrupted
    head, one, two, three = lines
    cut = three[: len(three) // 2]
    _write(out, [head, one, two, cut], end="")  # the call died while writing repeat 3
    r = _go(path, out)
    assert r.exit_code == 0, r.output
    stored = out / "r" / "repeats.jsonl"
    assert f"{stored} line 4: was cut off (no newline at its end: an interrupted write)" in r.output
    first_call = json.loads(one)["call"]
    calls = _calls(out)
    assert [i for i, _ in calls] == [1, 2, 3]
    assert calls[0][1] == calls[1][1] == first_call != calls[2][1]  # 1 and 2 kept, 3 measured again
    assert [(x["line"], x["text"]) for x in _rejected(out)] == [(4, cut)]
    text = stored.read_text()
    # repaired, then appended to
    assert text.endswith("\n") and text.splitlines()[:3] == [head, one, two]


def test_a_repeat_above_the_count_asked_for_is_kept_but_not_used(interrupted):
    """`repeat` is not in the run key: repeats a call with a larger count measured are kept for a
    later call that asks for them again, and left out of this one's result."""
    path, out, lines = interrupted
    r = _go(path, out, repeat=2)
    assert r.exit_code == 0, r.output
    assert "WARNING" not in r.output and not (out / "r" / "repeats.rejected.jsonl").exists()
    assert [i for i, _ in _calls(out)] == [1, 2]
    assert _lines(out)[3] == lines[3]  # repeat 3 is still there, untouched


@pytest.mark.parametrize(
    "line, why",
    [
        ("{not json", "is not JSON"),
        ("[1, 2]", "is not a repeat (a JSON object)"),
        (
            json.dumps({"index": 2, "generate_s": 1.0, "call": 7}),
            "is not a valid repeat (call: Input should be a ",
        ),
        (
            json.dumps({"index": 2, "generate_s": 1.0, "wall_s": 0}),
            "is not a valid repeat (wall_s: Input should be ",
        ),
        (
            json.dumps({"index": 2, "generate_s": 1.0, "load_s": "Infinity"}),
            "is not a valid repeat (load_s: ",
        ),
        (
            json.dumps({"index": 2, "generate_s": 0.0}),
            "is not a valid repeat (generate_s: Input should be greater",
        ),
        (
            json.dumps({"index": "2", "generate_s": 1.0, "extra": 1}),
            "is not a valid repeat (extra: Extra inputs",
        ),
    ],
)
def test_load_repeats_names_each_bad_line_and_keeps_the_good_ones(tmp_path, line, why):
    folder = RunFolder(tmp_path)
    good = [Repeat(index=i, generate_s=float(i), call="c").model_dump_json() for i in (1, 2)]
    folder.repeats.write_text(
        "\n".join([json.dumps({"_run_key": "k"}), good[0], line, good[1]]) + "\n"
    )
    reps, notes = load_repeats(folder, "k")
    assert [(x.index, x.generate_s) for x in reps] == [(1, 1.0), (2, 2.0)]
    assert len(notes) == 1 and notes[0].startswith(f"{folder.repeats} line 3: {why}"), notes
    assert f"set aside in {folder.repeats_rejected.name}" in notes[0]
    assert [x["text"] for x in _rejected(tmp_path.parent, tmp_path.name)] == [line]
    assert folder.repeats.read_text().splitlines()[1:] == good
    # set aside once: the next read finds nothing to name
    assert load_repeats(folder, "k") == (reps, [])


def test_a_repeats_file_of_another_run_is_set_aside_whole(tmp_path):
    folder = RunFolder(tmp_path)
    rep = Repeat(index=1, generate_s=1.0).model_dump_json()
    folder.repeats.write_text(json.dumps({"_run_key": "other"}) + "\n" + rep + "\n")
    reps, notes = load_repeats(folder, "k")
    assert reps == [] and not folder.repeats.exists()
    assert len(notes) == 1 and "belongs to another run" in notes[0], notes
    assert [x["text"] for x in _rejected(tmp_path.parent, tmp_path.name)] == [
        json.dumps({"_run_key": "other"}),
        rep,
    ]


def test_a_later_line_of_the_same_index_still_supersedes_an_earlier_one(tmp_path):
    """A repeat measured again (a call that ended before reporting) is appended: the newest of an
    index counts."""
    folder = RunFolder(tmp_path)
    lines = [Repeat(index=1, generate_s=s).model_dump_json() for s in (1.0, 2.0)]
    folder.repeats.write_text("\n".join([json.dumps({"_run_key": "k"}), *lines]) + "\n")
    reps, notes = load_repeats(folder, "k")
    assert [(x.index, x.generate_s) for x in reps] == [(1, 2.0)] and notes == []
    assert not folder.repeats_rejected.exists()


@pytest.mark.parametrize("bad", [0.0, -2.0, "NaN"])
def test_report_leaves_out_a_result_with_a_0_s_negative_or_nan_repeat(
    tmp_path, write_recipe, base_recipe, bad
):
    out = tmp_path / "out"
    for name in ("good", "bad"):
        r = _go(write_recipe(_fake(base_recipe, name), f"{name}.yaml"), out, repeat=2)
        assert r.exit_code == 0, r.output
    stored = out / "bad" / "results.json"
    d = json.loads(stored.read_text())
    d["repeats"][0]["generate_s"] = "@@" if bad == "NaN" else bad
    stored.write_text(json.dumps(d).replace('"@@"', "NaN"))
    r = CliRunner().invoke(cli, ["report", str(out)])
    assert r.exit_code == 0, r.output
    assert r.exception is None and "Traceback" not in r.output
    left = next(line for line in r.output.splitlines() if line.startswith("left out:"))
    assert (
        str(stored) in left
        and "not a valid results.json" in left
        and "repeats.0.generate_s" in left
    ), left
    assert "summary: " in r.output and "(1 recipe)" in r.output
    skipped: list[str] = []
    assert [x.name for x in load_results(out, skipped)] == ["good"] and len(skipped) == 1


def test_a_line_set_aside_is_said_on_the_calls_terminal_when_the_job_has_its_own_process(
    interrupted,
):
    """Found by a tester: with the job in its own process (the default), the warning went to its
    engine.log only (its stderr), not to the terminal the call runs on."""
    import subprocess
    import sys

    path, out, lines = interrupted
    head, one, two, _ = lines
    _write(out, [head, one, _with(two, index=0)])
    args = ["go", str(path), "--out", str(out), "--repeat", "3", "--limit", LIMIT, "--no-progress"]
    p = subprocess.run(
        [sys.executable, "-m", "runner", *args], capture_output=True, text=True, timeout=120
    )
    assert p.returncode == 0, p.stderr
    stored = out / "r" / "repeats.jsonl"
    assert f"WARNING: {stored} line 3: has index 0 (repeats are numbered from 1)" in p.stderr
