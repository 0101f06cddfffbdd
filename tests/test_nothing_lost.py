"""Nothing lost, nothing mis-scored (issue 29): each case with the exact message or behaviour."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from runner.cli import cli
from tests.cli_output import user_error

CSV = "id,question,context,answer\n1,Q1,C1,1945\n2,Q2,C2,NA\n3,Q3,C3,\n"


def _csv_recipe(tmp_path, base_recipe, **kw):
    (tmp_path / "d.csv").write_text(CSV, encoding="utf-8")
    fields = {"id": "id", "question": "question", "context": "context", "answers": "answer"}
    return {
        **base_recipe,
        "name": "c",
        "model": {"id": "none"},
        "engine": {"kind": "fake", "reply": "{{ answers[0] if answers else 'x' }}"},
        "dataset": {"format": "csv", "path": str(tmp_path / "d.csv"), "fields": fields},
        "metrics": ["exact_match"],
        **kw,
    }


def _go(*args):
    return CliRunner().invoke(cli, ["go", *map(str, args), "--no-progress", "--in-process"])


def test_csv_numbers_and_na_words_score_as_written_and_examples_without_gold_are_named(
    tmp_path, write_recipe, base_recipe
):
    path, out = write_recipe(_csv_recipe(tmp_path, base_recipe)), tmp_path / "out"
    r = CliRunner().invoke(cli, ["check", str(path), "--no-tokens"])
    assert (
        r.exit_code == 0
        and "  note: 1 of 3 examples have no gold answers: they are left out of every score\n"
        in r.output
    )
    assert _go(path, "--out", out).exit_code == 0
    res = json.loads((out / "c" / "results.json").read_text())
    # "1945" and "NA" both right
    assert res["scores"] == {"exact_match": 1.0} and res["n_scored"] == 2
    report = (out / "c" / "report.md").read_text()
    note = (
        "1 of 3 examples have no gold answers: they are left out of every score (scores are "
        "over the other 2)."
    )
    assert f"> **Note**: {note}" in report


def test_truncate_with_max_tokens_over_the_context_is_refused(tmp_path, write_recipe, base_recipe):
    recipe = {**base_recipe, "sampling": {"temperature": 0, "max_tokens": 4096}}
    path = write_recipe({**recipe, "prompt": {**base_recipe["prompt"], "truncate": True}})
    expected = (
        "Error: {tmp}/recipe.yaml: sampling.max_tokens: sampling.max_tokens 4,096 leaves no room "
        "for a prompt in the model's context of 2,048 tokens, so prompt.truncate would cut every "
        "prompt to nothing\n  hint: lower sampling.max_tokens below 2,048 (the answer and the "
        "prompt share the context)\n"
    )
    assert user_error(CliRunner().invoke(cli, ["check", str(path), "--no-tokens"])) == expected
    assert user_error(_go(path, "--out", tmp_path / "out")) == expected


def _fake(base_recipe, name="f"):
    return {
        **base_recipe,
        "name": name,
        "model": {"id": "none"},
        "engine": {"kind": "fake", "reply": "{{ answers[0] }}"},
    }


def test_a_quick_run_in_between_does_not_cost_the_full_run_its_results(
    tmp_path, write_recipe, base_recipe
):
    path, out = write_recipe(_fake(base_recipe)), tmp_path / "out"
    assert _go(path, "--out", out).exit_code == 0
    full = (out / "f" / "results.json").read_bytes()
    r = _go(path, "--out", out, "--limit", "2")
    assert r.exit_code == 0 and "kept f's earlier results in " in r.output
    r = _go(path, "--out", out)
    assert (
        "took f's results of this very run back from " in r.output
        and "skip f: unchanged since" in r.output
    )
    [aside] = (out / "f" / "replaced").iterdir()
    assert (out / "f" / "results.json").read_bytes() == full
    # the --limit 2 run it replaces: where it went is said (found by a tester: it was not)
    assert f"kept what f's folder held of another run in {aside}\n" in r.output
    assert (aside / "results.json").is_file()


def test_samples_deleted_or_cut_short_after_a_complete_run_are_run_again(
    tmp_path, write_recipe, base_recipe
):
    path, out = write_recipe(_fake(base_recipe)), tmp_path / "out"
    assert _go(path, "--out", out).exit_code == 0
    samples = out / "f" / "samples.jsonl"
    samples.write_text("".join(samples.read_text().splitlines(keepends=True)[:2]))
    r = CliRunner().invoke(cli, ["report", str(out)])
    assert (
        "f: its samples.jsonl holds 2 of 36 samples (deleted or cut short since the run): `runner "
        "go` runs it again" in r.output
    )
    r = _go(path, "--out", out)
    assert (
        "rerun f: its results were complete but its samples.jsonl holds 2 of 36 samples (kept in "
        in r.output
    )
    assert len(samples.read_text().splitlines()) == 36 and "skip f" not in r.output
    samples.unlink()
    assert (
        "rerun f: its results were complete but its samples.jsonl is gone"
        in _go(path, "--out", out).output
    )


def test_a_study_interrupted_in_its_second_cell_reports_the_first(
    tmp_path, write_recipe, base_recipe, ctrl_c_in_the_second_generation
):
    path = write_recipe(
        {**_fake(base_recipe, "s"), "matrix": {"sampling.max_tokens": {"a": 16, "b": 8}}}
    )
    out = tmp_path / "out"
    r = _go(path, "--out", out)
    assert r.exit_code == 130 and "ok s-a: 36 examples" in r.output
    assert "interrupted: 1 of 2 recipes finished;" in r.stderr
    assert (out / "s-a" / "report.md").is_file() and (out / "summary.md").is_file()
    assert "s-a" in (out / "s" / "summary.md").read_text()
    # the summary of what finished says what did not (it read as the whole call)
    assert (
        "> **Interrupted**: 1 recipe(s) of this call did not finish and are not in this summary "
        "(s-b); the same command again runs them, keeping what they finished."
    ) in (out / "summary.md").read_text()


def test_a_recipe_with_a_timeout_does_not_share_an_engine_with_one_without(
    write_recipe, base_recipe, tmp_path
):
    """A shared job's timeout is the sum of its recipes'; one recipe without would have left the
    other unbounded."""
    from runner.run.job import Job, RunOptions, Unit, group_by_engine
    from tests.wired import load_all

    a = write_recipe({**_fake(base_recipe, "a"), "timeout_s": 60}, "a.yaml")
    b = write_recipe(_fake(base_recipe, "b"), "b.yaml")
    # (no examples prepared: only the recipes matter here)
    units = [Unit(lr, None, "") for lr in load_all((str(a), str(b)), (), (), None)]
    assert [[u.name for u in g] for g in group_by_engine(units)] == [["a"], ["b"]]
    [both] = group_by_engine(units, call_timeout_s=30)
    assert Job(both, RunOptions(out=tmp_path, timeout_s=30)).timeout_s() == 90.0
    assert Job(tuple(units[:1]), RunOptions(out=tmp_path)).timeout_s() == 60.0


def test_links_planted_inside_out_are_never_written_through(tmp_path, write_recipe, base_recipe):
    path, out, outside = (
        write_recipe(_fake(base_recipe)),
        tmp_path / "out",
        tmp_path / "outside.txt",
    )
    outside.write_text("keep me")
    (out / "f").mkdir(parents=True)
    (out / "f" / "engine.log").symlink_to(outside)
    assert user_error(_go(path, "--out", out)) == (
        "Error: {tmp}/out/f/engine.log: is a symbolic link (to {tmp}/outside.txt): the run would "
        "write through it\n  hint: remove the link (rm '{tmp}/out/f/engine.log') and rerun; the "
        "run writes its own file there\n"
    )
    (out / "f" / "engine.log").unlink()
    # a chart: replaced by the run's own file, not written through
    (out / "time.png").symlink_to(outside)
    assert _go(path, "--out", out).exit_code == 0
    assert outside.read_text() == "keep me" and not (out / "time.png").is_symlink()
    (out / "time.png").unlink()
    (out / "time.png").symlink_to(outside)
    assert CliRunner().invoke(cli, ["report", str(out)]).exit_code == 0
    assert outside.read_text() == "keep me" and not (out / "time.png").is_symlink()


def test_a_large_study_raises_the_open_files_limit_for_its_locks(monkeypatch):
    import resource

    from runner import orchestrate as go

    set_to = []
    monkeypatch.setattr(resource, "getrlimit", lambda _: (256, 4096))
    monkeypatch.setattr(resource, "setrlimit", lambda _, v: set_to.append(v))
    go._room_for_locks(1000)
    assert set_to == [(1256, 4096)]
    monkeypatch.setattr(resource, "getrlimit", lambda _: (256, 512))
    with pytest.raises(
        Exception, match="1000 recipes hold 1000 lock files open, and this shell allows 512"
    ):
        go._room_for_locks(1000)


# --------------------------------------------------------------------------- 12, 13: one-screen
# errors, not tracebacks


def test_a_control_character_in_a_recipe_is_named_with_its_place(write_recipe):
    path = write_recipe('name: f\ndescription: "\x1b[31mred\x1b[0m"\n')
    assert user_error(CliRunner().invoke(cli, ["check", str(path)])) == (
        "Error: {tmp}/recipe.yaml:2: a control character (0x1b) at column 15: YAML allows none "
        "there\n  hint: delete it (text pasted from a colored terminal carries them; `cat -v FILE` "
        "shows them as ^[)\n"
    )


def _model_folder(tmp_path, config: dict | None, tokenizer: bool = True):
    import shutil
    from pathlib import Path

    from runner.engines.builtin import ensure_builtin

    src, dst = Path(ensure_builtin("builtin:demo")), tmp_path / "m"
    dst.mkdir()
    for f in (
        ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja") if tokenizer else ()
    ):
        shutil.copy(src / f, dst / f)
    if config is not None:
        (dst / "config.json").write_text(json.dumps(config))
    return dst


@pytest.mark.parametrize(
    "change, says",
    [
        (
            {"num_hidden_layers": 0},
            "config.json's num_hidden_layers is 0: a whole number from 1 to 10,000 is expected",
        ),
        (
            {"hidden_size": "big"},
            "config.json's hidden_size is 'big': a whole number from 1 to 1,048,576 is expected",
        ),
        (
            {"vocab_size": 10**15},
            "config.json's vocab_size is 1000000000000000: a whole number from 1 to 16,777,216 is",
        ),
    ],
)
def test_plan_on_a_config_with_wrong_types_zeros_or_absurd_sizes_names_the_key(
    tmp_path, write_recipe, base_recipe, change, says
):
    pytest.importorskip("transformers")
    from pathlib import Path

    from runner.engines.builtin import ensure_builtin

    config = {
        **json.loads((Path(ensure_builtin("builtin:demo")) / "config.json").read_text()),
        **change,
    }
    folder = _model_folder(tmp_path, config)
    err = user_error(
        CliRunner().invoke(
            cli, ["plan", str(write_recipe({**base_recipe, "model": {"id": str(folder)}}))]
        )
    )
    assert (
        err.startswith(f"Error: {{tmp}}/recipe.yaml: model.id: {says}")
        and "hint: fix the model's config.json" in err
    )


def test_a_folder_without_a_tokenizer_or_without_weights_is_named_by_check_and_plan(
    tmp_path, write_recipe, base_recipe
):
    pytest.importorskip("transformers")
    from pathlib import Path

    from runner.engines.builtin import ensure_builtin

    config = json.loads((Path(ensure_builtin("builtin:demo")) / "config.json").read_text())
    folder = _model_folder(tmp_path, config, tokenizer=False)
    path = write_recipe({**base_recipe, "model": {"id": str(folder)}})
    no_tok = (
        "Error: {tmp}/recipe.yaml: model.id: {tmp}/m holds no tokenizer (none of tokenizer.json,"
        " tokenizer_config.json, tokenizer.model, vocab.json, spiece.model)\n"
        "  hint: set model.tokenizer to the folder (or hub id) of the model's tokenizer\n"
    )
    assert user_error(CliRunner().invoke(cli, ["plan", str(path)])) == no_tok
    assert user_error(CliRunner().invoke(cli, ["check", str(path)])) == no_tok
    path = write_recipe({**base_recipe, "model": {"id": str(folder), "tokenizer": "builtin:demo"}})
    assert user_error(CliRunner().invoke(cli, ["check", str(path)])) == (
        "Error: {tmp}/recipe.yaml: model.id: {tmp}/m holds no weights (no *.safetensors, *.bin, "
        "*.pt, *.pth files)\n  hint: point model.id at the folder with the weights, or set "
        "model.load_format: dummy for random weights\n"
    )
    # plan reads config.json only
    assert CliRunner().invoke(cli, ["plan", str(path)]).exit_code == 0


def test_report_leaves_out_a_results_json_with_infinity_or_a_wrong_section_and_reports_the_others(
    tmp_path, write_recipe, base_recipe
):
    out = tmp_path / "out"
    for name in ("a", "b", "c"):
        assert (
            _go(write_recipe(_fake(base_recipe, name), f"{name}.yaml"), "--out", out).exit_code == 0
        )
    a, b = (
        json.loads((out / "a" / "results.json").read_text()),
        json.loads((out / "b" / "results.json").read_text()),
    )
    a["timings"]["generate_s"] = float("inf")
    b["recipe"] = "oops"
    (out / "a" / "results.json").write_text(json.dumps(a))
    (out / "b" / "results.json").write_text(json.dumps(b))
    r = CliRunner().invoke(cli, ["report", str(out)])
    assert r.exit_code == 0 and "summary: " in r.output and "(1 recipe)" in r.output
    assert (
        "left out: " in r.stderr
        and "a/results.json: not a valid results.json (holds Infinity" in r.stderr
    )
    assert (
        "b/results.json: not a valid results.json (1 problem(s); first: recipe: Input should be an "
        "object)" in r.stderr
    )
    assert "no results.json in" not in r.output


def test_a_model_path_that_maps_no_recipe_is_refused_with_the_id_it_likely_meant(
    write_recipe, base_recipe, tmp_path
):
    path = write_recipe({**base_recipe, "model": {"id": "Org/Model-7B"}})
    args = ["--model-path", f"org/model-7b={tmp_path}", "--no-tokens"]
    assert user_error(CliRunner().invoke(cli, ["check", str(path), *args])).endswith(
        "Error: --model-path: org/model-7b=...: no recipe here names 'org/model-7b' (model.id or "
        "model.tokenizer)\n  hint: did you mean 'Org/Model-7B'? (hub ids match exactly, case "
        "included)\n"
    )
    assert "no recipe here names 'org/model-7b'" in user_error(
        _go(path, "--out", tmp_path / "out", *args[:2])
    )


def test_a_model_path_for_a_recipe_only_leaves_out_is_accepted_and_a_typo_still_refused(
    write_recipe, base_recipe, tmp_path
):
    """One command line for every cell of a study, called cell by cell with --only: a mapping for a
    model only the left-out recipes name is no typo (found on the GPU host, where the AWQ cell's
    mapping refused the calls of the other cells)."""
    fake = {**base_recipe, "engine": {"kind": "fake"}}
    a = write_recipe({**fake, "name": "a", "model": {"id": "none"}}, "a.yaml")
    b = write_recipe({**fake, "name": "b", "model": {"id": "org/model-b"}}, "b.yaml")
    # a left-out file that does not load (no dataset) does not hide the others' model ids
    bad = {k: v for k, v in fake.items() if k != "dataset"}
    c = write_recipe({**bad, "name": "c", "model": {"id": "org/model-c"}}, "c.yaml")
    out, mapping = tmp_path / "out", ["--model-path", f"org/model-b={b}"]
    r = _go(a, b, c, "--only", "a", "--out", out, "--limit", "2", *mapping)
    assert r.exit_code == 0, r.output
    assert (out / "a" / "results.json").is_file() and not (out / "b").exists()
    checked = CliRunner().invoke(
        cli, ["check", str(a), str(b), "--only", "a", "--no-tokens", *mapping]
    )
    assert checked.exit_code == 0, checked.output
    typo = _go(a, b, "--only", "a", "--out", out, "--model-path", f"org/Model-B={b}")
    assert user_error(typo).endswith(
        "Error: --model-path: org/Model-B=...: no recipe here names 'org/Model-B' (model.id or "
        "model.tokenizer)\n  hint: did you mean 'org/model-b'? (hub ids match exactly, case "
        "included)\n"
    )


def test_a_serving_recipe_without_a_tokenizer_is_noted_by_check_and_fails_alone_in_go(
    write_recipe, base_recipe, tmp_path
):
    """Issue 42: what this machine lacks (here a serving run's tokenizer) is a note in `check`, as
    a hub id not in the cache or a missing engine library is, and `go` records that recipe failed
    without running it; the others run."""
    load = {"request_rate": [10], "num_requests": 4, "warmup_requests": 1}
    path = write_recipe({**_fake(base_recipe), "load": load})
    other = write_recipe({**_fake(base_recipe), "name": "other"}, "other.yaml")
    why = (
        "a serving run (`load`) counts its prompts with the model's tokenizer, and no tokenizer "
        "for none on this machine: a hub id that is not in the Hugging Face cache (read from "
        "local files only)"
    )
    r = CliRunner().invoke(cli, ["check", str(path), "--no-tokens"])
    assert r.exit_code == 0 and f"  note: cannot run on this machine: {why}\n" in r.output
    r = _go(path, other, "--out", tmp_path / "out")
    assert r.exit_code == 1, r.output
    assert f"FAILED f: {path}: model.id: {why}\n  hint: set model.tokenizer" in r.output
    assert "ok other: " in r.output


# --------------------------------------------------------------------------- 11: signals


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_ctrl_c_or_sigterm_while_the_datasets_load_exits_130(
    write_recipe, base_recipe, tmp_path, monkeypatch, how
):
    import os
    import signal

    import runner.run.job as job

    def interrupted(*a, **kw):
        if how == "sigterm":
            os.kill(os.getpid(), signal.SIGTERM)  # the handler turns it into KeyboardInterrupt here
        raise KeyboardInterrupt

    monkeypatch.setattr(job, "prepare", interrupted)
    before = signal.getsignal(signal.SIGTERM)
    r = _go(write_recipe(_fake(base_recipe)), "--out", tmp_path / "out")
    assert (
        r.exit_code == 130
        and r.stderr == "interrupted\n"
        and not (tmp_path / "out" / "f" / "results.json").exists()
    )
    assert signal.getsignal(signal.SIGTERM) is before  # put back


def test_sigterm_while_ray_starts_is_held_until_it_is_up_then_ends_the_call(monkeypatch):
    """Interrupted midway, Ray's start left its agents running or exited 15 through Ray's own
    handler: the signal is held, Ray shut down whole, and the call interrupted (exit 130 upstream);
    the handlers from before are back."""
    import os
    import signal

    pytest.importorskip("ray")
    import runner.cluster.ray as cr

    shut = []
    monkeypatch.setattr(cr, "shutdown", lambda: shut.append(1))
    before = signal.getsignal(signal.SIGTERM)

    def connect(address):
        # arrives while Ray starts: held, not raised inside the start
        os.kill(os.getpid(), signal.SIGTERM)
        shut.append("still starting")

    monkeypatch.setattr(cr, "_connect", connect)
    with pytest.raises(KeyboardInterrupt):
        cr._start_ray(None)
    assert shut == ["still starting", 1] and signal.getsignal(signal.SIGTERM) is before

    def ray_handler_exits(address):  # Ray's own SIGTERM handler: sys.exit(15)
        raise SystemExit(signal.SIGTERM)

    monkeypatch.setattr(cr, "_connect", ray_handler_exits)
    with pytest.raises(KeyboardInterrupt):
        cr._start_ray(None)


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_ctrl_c_or_sigterm_while_a_group_stops_is_held_until_it_is_gone(sig, monkeypatch):
    """runner.base.procs.stop_group: the signal waits for the group's end and `then`, with the
    handlers from before back; Ctrl-C is raised as KeyboardInterrupt, SIGTERM as exit 143."""
    import os
    import signal
    import time
    from types import SimpleNamespace

    from runner.base import procs

    seen, before = [], signal.getsignal(signal.SIGTERM)

    def kill_group(*a):
        os.kill(os.getpid(), getattr(signal, sig))
        time.sleep(0.05)
        seen.append("gone")

    monkeypatch.setattr(procs, "kill_group", kill_group)
    with pytest.raises(KeyboardInterrupt if sig == "SIGINT" else SystemExit) as e:
        procs.stop_group(SimpleNamespace(pid=0), 1, then=lambda: seen.append("then"))
    assert seen == ["gone", "then"] and signal.getsignal(signal.SIGTERM) is before
    assert sig == "SIGINT" or e.value.code == 143


def test_sigterm_cancels_the_abort_alarm_ray_arms():
    import signal

    from runner.cli.app import sigterm_as_ctrl_c

    signal.alarm(30)
    with pytest.raises(KeyboardInterrupt):
        sigterm_as_ctrl_c(signal.SIGTERM, None)
    assert signal.alarm(0) == 0  # no alarm was left pending


@pytest.mark.slow
def test_a_failed_quick_run_in_between_does_not_block_taking_the_full_results_back(
    tmp_path, write_recipe, base_recipe
):
    """Found in review: a quick run that failed left its results.json, so the full run's came back
    without it and the full run ran again."""
    path, out = write_recipe(_fake(base_recipe)), tmp_path / "out"
    assert _go(path, "--out", out).exit_code == 0
    full = (out / "f" / "results.json").read_bytes()
    quick = ["--limit", "2", "--set", "engine.delay_s=3", "--timeout", "1", "--no-progress"]
    # a real process: the timeout ends it
    r = CliRunner().invoke(cli, ["go", str(path), "--out", str(out), *quick])
    failed = json.loads((out / "f" / "results.json").read_text())
    assert r.exit_code == 1 and failed["status"] == "failed"
    # the limit came from the command line: the message and the hint say so
    assert failed["error"] == "timed out after 1 s (--timeout); the run was ended"
    assert (
        failed["hint"] == f"if it needs longer, raise --timeout; what it wrote: {out}/f/engine.log"
    )
    r = _go(path, "--out", out)
    assert (
        "took f's results of this very run back" in r.output
        and "skip f: unchanged since" in r.output
    )
    assert (out / "f" / "results.json").read_bytes() == full


def test_a_corrupt_compressed_samples_file_is_named_not_a_traceback(
    tmp_path, write_recipe, base_recipe
):
    path, out = write_recipe(_fake(base_recipe)), tmp_path / "out"
    assert _go(path, "--out", out).exit_code == 0
    (out / "f" / "samples.jsonl").unlink()
    (out / "f" / "samples.jsonl.gz").write_bytes(b"\x1f\x8b\x08\x00garbage")
    r = _go(path, "--out", out)
    assert "rerun f: its results were complete but its samples.jsonl.gz cannot be read" in r.output


def test_a_damaged_results_json_is_set_aside_not_overwritten(tmp_path, write_recipe, base_recipe):
    path, out = write_recipe(_fake(base_recipe)), tmp_path / "out"
    (out / "f").mkdir(parents=True)
    (out / "f" / "results.json").write_text('{"name": "f", "status": "ok", "scores": {', "utf-8")
    r = _go(path, "--out", out)
    [kept] = (out / "f" / "replaced").iterdir()
    assert r.exit_code == 0, r.output
    assert f"kept f's unreadable results.json in {kept}; this run writes another\n" in r.output
    assert kept.name.endswith("-unreadable")
    assert (kept / "results.json").read_text("utf-8") == '{"name": "f", "status": "ok", "scores": {'
    assert json.loads((out / "f" / "results.json").read_text())["status"] == "ok"
    r = _go(path, "--out", out)  # a readable one stays
    assert "unreadable" not in r.output and "skip f: unchanged since" in r.output


def test_line_and_paragraph_separators_in_a_reply_or_prompt_survive_the_samples_file(
    tmp_path, write_recipe, base_recipe
):
    """Found by a tester: U+2028 or U+0085 in a reply (or a question) is written as is to
    samples.jsonl, and reading it back with splitlines() cut the line in two: the call stopped
    with 'line 1 is not a sample' and the recipes after it never ran."""
    odd = {**_fake(base_recipe, "odd"), "engine": {"kind": "fake", "reply": "a\u2028b \x85 c"}}
    paths = [write_recipe(odd, "odd.yaml"), write_recipe(_fake(base_recipe, "next"), "next.yaml")]
    out = tmp_path / "out"
    r = _go(*paths, "--out", out, "--limit", "3")
    assert r.exit_code == 0, r.output
    assert (out / "odd" / "report.md").is_file() and (out / "next" / "report.md").is_file()
    assert CliRunner().invoke(cli, ["report", str(out)]).exit_code == 0
    from runner.results import Sample
    from runner.run.resume import load_partial, start_partial

    line = {"id": "a\u2029", "prompt": "p\u2028", "output": "o\x85", "answers": ["x"]}
    part = tmp_path / "samples.partial.jsonl"
    start_partial(
        part, "k", [Sample.from_line(line | {"prompt_tokens": 1, "output_tokens": 1}, [])]
    )
    [got] = load_partial(part, "k", []).values()
    assert (got.prompt, got.output) == ("p\u2028", "o\x85")


def test_an_interrupted_force_call_puts_back_what_it_set_aside_for_runs_that_never_began(
    tmp_path, write_recipe, base_recipe, ctrl_c_in_the_second_generation
):
    """Found by a tester: Ctrl-C during a --force call left the complete results of recipes it
    never started in replaced/, and `runner report` called them runs that did not finish."""
    paths = [
        write_recipe(
            {**_fake(base_recipe, n), "engine": {"kind": "fake", "delay_s": d}}, f"{n}.yaml"
        )
        for n, d in (("a", 0.0), ("b", 1e-6), ("c", 2e-6))  # three engines: three jobs
    ]
    out = tmp_path / "out"
    ctrl_c_in_the_second_generation.clear()  # the first call runs whole
    ctrl_c_in_the_second_generation.extend([1, 1])
    assert _go(*paths, "--out", out).exit_code == 0
    ctrl_c_in_the_second_generation.clear()
    stored = (out / "c" / "results.json").read_bytes()
    r = _go(*paths, "--out", out, "--force")
    assert r.exit_code == 130
    assert "put c's earlier results back (its run never began)\n" in r.stderr
    assert "interrupted: 1 of 3 recipes finished;" in r.stderr  # c is not counted as this call's
    assert (out / "c" / "results.json").read_bytes() == stored
    assert not (out / "c" / "replaced").exists()
    assert not (out / "b" / "results.json").exists()  # b began: its earlier results stay aside
    assert "skip c: unchanged since" in _go(*paths, "--out", out).output


def test_an_interrupted_call_with_json_prints_the_summary_of_what_finished(
    tmp_path, write_recipe, base_recipe, ctrl_c_in_the_second_generation
):
    """Found by a tester: with --json, stdout was empty after Ctrl-C (summary.json was written)."""
    path = write_recipe(
        {**_fake(base_recipe, "s"), "matrix": {"sampling.max_tokens": {"a": 16, "b": 8}}}
    )
    r = _go(path, "--out", tmp_path / "out", "--json")
    assert r.exit_code == 130
    doc = json.loads(r.stdout)
    assert [x["name"] for x in doc["recipes"]] == ["s-a"] and doc["path"].endswith("summary.md")


def test_a_report_or_summary_the_runner_did_not_write_is_kept_not_overwritten(
    tmp_path, write_recipe, base_recipe
):
    """A summary.md without the summary.json the runner writes beside it, or a report.md in a run
    folder without results.json (hand-written, or its results deleted), is moved aside and said,
    by `runner go` and `runner report` alike (found by a tester: both were overwritten silently)."""
    path, out = write_recipe(_fake(base_recipe)), tmp_path / "out"
    (out / "f").mkdir(parents=True)
    (out / "summary.md").write_text("my notes")
    (out / "f" / "report.md").write_text("my report")
    r = _go(path, "--out", out)
    assert r.exit_code == 0, r.output
    [kept] = (out / "f" / "replaced").iterdir()
    assert (kept / "report.md").read_text() == "my report"
    assert f"kept the report.md in f's folder (no results.json beside it) in {kept}; " in r.output
    [mine] = out.glob("summary.*.md")
    assert mine.read_text() == "my notes" and "my notes" not in (out / "summary.md").read_text()
    assert f"kept the summary.md in {out}, beside no summary.json, as {mine}\n" in r.output
    # the runner's own files are rewritten as before, nothing set aside
    again = _go(path, "--out", out, "--force")
    assert "kept the summary.md" not in again.output and len(list(out.glob("summary.*.md"))) == 1
    assert "kept the report.md" not in again.output
    (out / "summary.json").unlink()
    (out / "summary.md").write_text("edited")
    r = CliRunner().invoke(cli, ["report", str(out)])
    assert r.exit_code == 0 and "kept the summary.md in " in r.output
    assert sorted(p.read_text() for p in out.glob("summary.*.md")) == ["edited", "my notes"]
