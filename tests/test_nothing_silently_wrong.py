"""Inputs that used to pass and produce wrong, garbage or unsafe results: each is refused or handled
now."""

import json
import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from runner.cli import cli
from tests.cli_output import user_error
from tests.wired import a_recipe

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
STORIES = SHARED / "models" / "stories260K"


def _go(*args):
    return CliRunner().invoke(cli, ["go", *map(str, args), "--no-progress"])


def _fake(base_recipe, **engine):
    """The fake engine with no tokenizer (whitespace tokens): no model library is imported, so it is
    fast."""
    return {
        **base_recipe,
        "model": {"id": "none"},
        "engine": {"kind": "fake", "reply": "{{ answers[0] }}", **engine},
    }


@pytest.mark.parametrize(
    "key,value,needle",
    [
        (
            "sampling.stop",
            [""],
            "line 17, sampling.stop.0: String should have at least 1 character (got '')",
        ),
        (
            "sampling.temperature",
            float("inf"),
            "line 14, sampling.temperature: Input should be a finite number (got inf)",
        ),
        (
            "sampling.temperature",
            float("nan"),
            "line 14, sampling.temperature: Input should be a finite number (got nan)",
        ),
        (
            "sampling.max_tokens",
            10**300,
            "line 15, sampling.max_tokens: Input should be less than or equal to 1048576 (got "
            + "1"
            + "0" * 59
            + ")",
        ),
        (
            "sampling.seed",
            2**64,
            "line 16, sampling.seed: Input should be less than or equal to 9223372036854775807 "
            "(got 18446744073709551616)",
        ),
        (
            "sampling.seed",
            -1,
            "line 16, sampling.seed: Input should be greater than or equal to 0 (got -1)",
        ),
        (
            "timeout_s",
            10**12,
            "line 19, timeout_s: Input should be less than or equal to 2592000 (got 1000000000000)",
        ),
        (
            "dataset.limit",
            10**20,
            "line 10, dataset.limit: Input should be less than or equal to 100000000 (got "
            "100000000000000000000)",
        ),
    ],
)
def test_values_that_would_empty_or_garble_outputs_are_refused(
    write_recipe, base_recipe, key, value, needle
):
    d = json.loads(json.dumps(base_recipe))
    *path, last = key.split(".")
    cur = d
    for p in path:
        cur = cur.setdefault(p, {})
    cur[last] = value
    p = write_recipe(d)
    if isinstance(value, float) and value != value:  # YAML has .nan but safe_dump writes it as such
        p.write_text(p.read_text().replace("temperature: .nan", "temperature: .nan"))
    r = CliRunner().invoke(cli, ["check", str(p), "--no-tokens"])
    assert user_error(r) == f"Error: {{tmp}}/recipe.yaml: invalid recipe\n  {needle}\n"


def test_engine_vllm_numbers_are_bounded(write_recipe, base_recipe):
    d = {**base_recipe, "engine": {"kind": "vllm", "cpu_offload_gb": float("inf"), "seed": 2**70}}
    r = CliRunner().invoke(cli, ["check", str(write_recipe(d)), "--no-tokens"])
    assert user_error(r) == (
        "Error: {tmp}/recipe.yaml: invalid recipe\n"
        "  line 6, engine.cpu_offload_gb: Input should be a finite number (got inf)\n"
        "  line 7, engine.seed: Input should be less than or equal to 9223372036854775807 (got "
        "1180591620717411303424)\n"
    )
    assert "engine.cpu_offload_gb: Input should be a finite number" in r.output
    assert "engine.seed: Input should be less than or equal to" in r.output


def test_cli_timeout_is_bounded(write_recipe, base_recipe, tmp_path):
    r = _go(write_recipe(base_recipe), "--out", tmp_path / "o", "--timeout", 10**12)
    assert not (tmp_path / "o").exists()
    assert user_error(r) == (
        "Usage: cli go [OPTIONS] PATHS...\n"
        "Try 'cli go --help' for help.\n"
        "\n"
        "Error: Invalid value for '--timeout': 1000000000000 is not in the range 1<=x<=2592000.\n"
    )


def test_a_second_writer_of_the_same_folder_is_refused(write_recipe, base_recipe, tmp_path):
    from filelock import FileLock

    out = tmp_path / "out"
    (out / "t").mkdir(parents=True)
    held = FileLock(str(out / "t" / ".runner.lock"))
    held.acquire()  # another `runner go` writing recipe t right now
    try:
        r = _go(write_recipe(_fake(base_recipe)), "--out", out)
    finally:
        held.release()
    assert user_error(r) == (
        "Error: {tmp}/out/t: another `runner go` is writing this recipe's folder right now; wait "
        "for it to finish, or use another --out\n"
    )
    assert f"{out / 't'}: another `runner go` is writing this recipe's folder right now" in r.output
    assert (
        not (out / "t" / "results.json").exists()
        and not (out / "t" / "samples.partial.jsonl").exists()
    )
    assert (
        _go(write_recipe(_fake(base_recipe)), "--out", out, "--set", "dataset.limit=2").exit_code
        == 0
    )


@pytest.mark.parametrize("name", ["../../x", "../escape", "a/b", ".hidden", "summary.md"])
def test_report_never_writes_outside_out_for_a_name_read_from_disk(tmp_path, name):
    out = tmp_path / "deep" / "out"
    d = out / "run"
    d.mkdir(parents=True)
    (d / "results.json").write_text(
        json.dumps({"name": name, "recipe": a_recipe(), "status": "ok"})
    )
    r = CliRunner().invoke(cli, ["report", str(out)])
    rules = (
        "letters, digits, `._-`, at most 100 characters, not starting with `.` or `-`, not one of "
    )
    rules += "accuracy_vs_time.png, memory.png, summary.json, summary.md, time.png"
    why = f"name: {name!r} is not a valid run name ({rules})"
    assert user_error(r) == f"Error: {{tmp}}/deep/out/run/results.json: {why}\n"
    assert sorted(p.name for p in tmp_path.rglob("*.md")) == []


def test_report_refuses_a_results_json_that_names_another_folder(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    (d / "results.json").write_text(
        json.dumps({"name": "other", "recipe": a_recipe("other"), "status": "ok"})
    )
    r = CliRunner().invoke(cli, ["report", str(tmp_path)])
    assert user_error(r) == (
        "Error: {tmp}/run/results.json: name: names the run 'other' but lies in the folder 'run'\n"
        "  hint: move the folder back to its run's name, or remove it\n"
    )
    assert not (tmp_path / "other").exists()


@pytest.mark.parametrize(
    "content,needle",
    [
        (
            b"\xff\xfe not utf-8",
            "not a valid results.json (1 problem(s); first: (top level): Invalid JSON: expected "
            "value at line 1 column 1)",
        ),
        (
            b'{"name": "run"}',
            "not a valid results.json (2 problem(s); first: recipe: Field required)",
        ),
        (
            b"[1, 2]",
            "not a valid results.json (1 problem(s); first: (top level): Input should be an "
            "object)",
        ),
        (None, "is not a file"),
    ],
)
def test_report_on_broken_results_is_one_screen(tmp_path, content, needle):
    d = tmp_path / "run"
    d.mkdir()
    if content is None:
        (d / "results.json").mkdir()
    else:
        (d / "results.json").write_bytes(content)
    r = CliRunner().invoke(cli, ["report", str(tmp_path)])
    hint = (
        "remove it, or rerun that recipe"
        if content is None
        else "rerun that recipe, or remove its folder"
    )
    assert user_error(r) == f"Error: {{tmp}}/run/results.json: {needle}\n  hint: {hint}\n"


def test_report_on_broken_samples_names_the_file_and_line(tmp_path):
    from runner.results import RunResult

    d = tmp_path / "run"
    d.mkdir()
    (d / "results.json").write_text(
        RunResult(name="run", recipe=a_recipe(), status="ok").model_dump_json()
    )
    (d / "samples.jsonl").write_text('{"id": "a", "output": "x"}\n{"oops": 1}\n')
    r = CliRunner().invoke(cli, ["report", str(tmp_path)])
    assert user_error(r) == (
        "Error: {tmp}/run/samples.jsonl: line 2 is not a sample\n"
        "  hint: delete the file and rerun the recipe (runner go ... --force)\n"
    )
    (d / "samples.jsonl").write_bytes(b'{"id": "a", "output": "\xff"}\n')
    r = CliRunner().invoke(cli, ["report", str(tmp_path)])
    assert user_error(r) == (
        "Error: {tmp}/run/samples.jsonl: cannot read the samples (UnicodeDecodeError: 'utf-8' "
        "codec can't decode byte 0xff in position 23: invalid start byte)\n"
        "  hint: delete the file and rerun the recipe (runner go ... --force)\n"
    )


def test_empty_out_is_bad_input(write_recipe, base_recipe):
    r = _go(write_recipe(base_recipe), "--out", "")
    assert user_error(r) == ("Error: --out: is empty; give a folder for the reports\n")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_read_only_out_is_bad_input(write_recipe, base_recipe, tmp_path):
    out = tmp_path / "ro"
    out.mkdir()
    out.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        r = _go(write_recipe(base_recipe), "--out", out)
    finally:
        out.chmod(0o755)
    assert user_error(r) == (
        "Error: {tmp}/ro: --out: the report folder is not writable\n"
        "  hint: choose another --out, or make this one writable\n"
    )


def test_read_only_out_is_detected_without_relying_on_permissions(
    write_recipe, base_recipe, tmp_path, monkeypatch
):
    import runner.orchestrate as go

    monkeypatch.setattr(go.os, "access", lambda *a, **k: False)
    r = _go(write_recipe(base_recipe), "--out", tmp_path / "o")
    assert user_error(r) == (
        "Error: {tmp}/o: --out: the report folder is not writable\n"
        "  hint: choose another --out, or make this one writable\n"
    )


def test_a_run_leaves_no_temporary_files(write_recipe, base_recipe, tmp_path, monkeypatch):
    import tempfile

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    r = _go(write_recipe(_fake(base_recipe)), "--out", tmp_path / "out", "--set", "dataset.limit=3")
    assert r.exit_code == 0, r.output
    assert list(tmp.iterdir()) == []  # the job travels through the worker's stdin


@pytest.mark.skipif(not STORIES.exists(), reason="../shared/models/stories260K absent")
def test_chat_template_on_a_tokenizer_without_one_is_bad_input(write_recipe, base_recipe):
    d = {
        **base_recipe,
        "model": {"id": str(STORIES)},
        "prompt": {**base_recipe["prompt"], "chat_template": True},
    }
    r = CliRunner().invoke(cli, ["check", str(write_recipe(d)), "--no-tokens"])
    assert user_error(r) == (
        "Error: {tmp}/recipe.yaml: prompt.chat_template: chat_template is true but the tokenizer "
        "in {shared}/models/stories260K has no chat template\n"
        "  hint: set prompt.chat_template: false (plain text prompts), or use a tokenizer with a "
        "chat template\n"
    )
    assert (
        f"prompt.chat_template: chat_template is true but the tokenizer in {STORIES} has no chat "
        "template" in r.output
    )


def test_device_cuda_without_a_gpu_is_bad_input(write_recipe, base_recipe):
    from runner.base.nvml import has_cuda_device

    if has_cuda_device():
        pytest.skip("this machine has a GPU")
    d = {**base_recipe, "engine": {"kind": "transformers", "device": "cuda"}}
    r = CliRunner().invoke(cli, ["check", str(write_recipe(d)), "--no-tokens"])
    assert user_error(r) == (
        "Error: {tmp}/recipe.yaml: engine.device: device is cuda but this machine has no NVIDIA "
        "GPU\n  hint: use `device: auto` (cuda when there is one, else cpu) or `device: cpu`\n"
    )


@pytest.mark.skipif(not STORIES.exists(), reason="../shared/models/stories260K absent")
def test_prompts_longer_than_the_context_are_refused_naming_the_example(
    write_recipe, base_recipe, tmp_path
):
    pytest.importorskip("transformers")
    # stories260K: a 512-token context; the demo's passages are a few hundred characters
    d = {**base_recipe, "model": {"id": str(STORIES)}, "sampling": {"max_tokens": 480}}
    r = CliRunner().invoke(cli, ["check", str(write_recipe(d)), "--no-tokens"])
    assert user_error(r) == (
        "Error: {tmp}/recipe.yaml: prompt: 36 prompt(s) do not fit the model's context of 512 "
        "tokens with max_tokens 480: example demo-0001, demo-0002, demo-0003, demo-0004, demo-0005 "
        "and 31 more\n  hint: shorten the template or shots, lower sampling.max_tokens, use a "
        "model with a longer context, or set prompt.truncate: true to cut such prompts from the "
        "left\n"
    )  # the transformers engine has no max_model_len: its context is the model's
    assert (
        "do not fit the model's context of 512 tokens with max_tokens 480: example demo-"
        in r.output
    )
    assert "prompt.truncate: true" in r.output
    d["prompt"] = {**d["prompt"], "truncate": True}
    assert CliRunner().invoke(cli, ["check", str(write_recipe(d)), "--no-tokens"]).exit_code == 0


@pytest.mark.slow
@pytest.mark.skipif(not STORIES.exists(), reason="../shared/models/stories260K absent")
def test_a_run_that_cut_prompts_names_the_examples(write_recipe, base_recipe, tmp_path):
    """Found by a tester: the note said how many prompts were cut, not which."""
    pytest.importorskip("transformers")
    d = {**base_recipe, "model": {"id": str(STORIES)}, "sampling": {"max_tokens": 480}}
    d["prompt"] = {**d["prompt"], "truncate": True}
    args = ["go", str(write_recipe(d)), "--out", str(tmp_path / "out"), "--limit", "3"]
    r = CliRunner().invoke(cli, [*args, "--no-progress", "--in-process"])
    assert r.exit_code == 0, r.output
    notes = json.loads((tmp_path / "out" / "t" / "results.json").read_text())["notes"]
    assert (
        "3 prompt(s) were cut from the left to fit the model's context (prompt.truncate: true): "
        "example(s) demo-0001, demo-0002, demo-0003"
    ) in notes
    # each sample's prompt says what the model saw of it (it read as the whole text)
    lines = (tmp_path / "out" / "t" / "samples.jsonl").read_text().splitlines()
    for s in map(json.loads, lines):
        assert s["prompt"].startswith(
            f"[cut: the model saw the last {s['prompt_tokens']:,} of its "
        )


def test_truncation_cuts_from_the_left():
    from runner.inputs.context import truncate_left

    ids, cut = truncate_left([[1, 2, 3, 4, 5], [1, 2]], limit=6, max_tokens=3)
    assert ids == [[3, 4, 5], [1, 2]] and cut == 1


def test_the_byte_bound_never_undercounts_tokens():
    pytest.importorskip("transformers")
    qwen = SHARED / "models" / "qwen2.5-7b-instruct"
    if not qwen.exists():
        pytest.skip("../shared absent")
    from transformers import AutoTokenizer

    from runner.inputs.context import token_bound

    tok = AutoTokenizer.from_pretrained(str(qwen))
    for text in ["東京都は日本の首都です。" * 20, "a" * 500, "🙂 emoji " * 30, ""]:
        msgs = [{"role": "system", "content": "You answer."}, {"role": "user", "content": text}]
        n = len(tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True))
        assert n <= token_bound(msgs)


def test_disk_full_while_writing_is_one_screen_and_keeps_finished_samples(
    write_recipe, base_recipe, tmp_path, monkeypatch
):
    import errno

    from runner.base import files

    real = files.os.fsync
    calls = {"n": 0}

    def fsync(fd):
        calls["n"] += 1
        if calls["n"] > 3:  # the disk fills up after a few samples were made durable
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd)

    monkeypatch.setattr(files.os, "fsync", fsync)
    out = tmp_path / "out"
    r = CliRunner().invoke(
        cli,
        [
            "go",
            str(write_recipe(_fake(base_recipe))),
            "--out",
            str(out),
            "--no-progress",
            "--in-process",
        ],
    )
    assert user_error(r) == (
        "[job 1 of 1] t (fake, none)\n"
        "Error: {tmp}/out/t/results.json: cannot write it: No space left on device\n"
        "  hint: free disk space or choose another --out; finished samples are kept, and the same "
        "command continues from them\n"
    )
    assert "cannot write it: No space left on device" in r.output and "Traceback" not in r.output
    assert "the same command continues from them" in r.output
    # key line + samples kept
    assert (out / "t" / "samples.partial.jsonl").read_text().count("\n") >= 2


def test_a_damaged_builtin_model_cache_is_rebuilt(tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    from runner.engines import builtin

    monkeypatch.setenv("RUNNER_CACHE", str(tmp_path))
    folder = Path(builtin.ensure_builtin("builtin:demo"))
    (folder / "config.json").write_text("{ not json")  # a disk error, a killed copy
    again = Path(builtin.ensure_builtin("builtin:demo"))
    assert (
        again == folder
        and json.loads((folder / "config.json").read_text())["model_type"] == "qwen2"
    )


def test_the_first_check_on_a_new_machine_prints_no_progress_bar(
    tmp_path, monkeypatch, write_recipe, base_recipe
):
    """Building the embedded model into an empty cache is quiet: `runner check`'s output starts with
    its verdict (transformers 5.25 draws a bar while it writes the one weight file)."""
    pytest.importorskip("transformers")
    monkeypatch.setenv("RUNNER_CACHE", str(tmp_path / "cache"))
    path = write_recipe({**base_recipe, "engine": {"kind": "transformers", "device": "cpu"}})
    r = CliRunner().invoke(cli, ["check", str(path)])
    assert r.exit_code == 0 and r.output.startswith(f"ok {path}: "), r.output[:300]
    assert (tmp_path / "cache").exists()  # it did build there


def test_a_fake_reply_that_would_compute_without_bound_is_refused_in_seconds(
    write_recipe, base_recipe, tmp_path
):
    """The fake engine's reply is a template too: it compiles and renders in the prompts' bounded
    sandbox, so `{{ 10**(10**8) }}` neither hangs validation (constant folding) nor the run."""
    import time

    d = _fake(base_recipe)
    d["engine"]["reply"] = "{{ 10**(10**8) }}"
    path = write_recipe(d)
    t0 = time.perf_counter()
    # rendered for every example before a run
    r = CliRunner().invoke(cli, ["check", str(path), "--no-tokens"])
    assert (
        r.exit_code == 2
        and "reply (example 'demo-0001'): `**` would give a number of about" in r.output
    )
    r = _go(path, "--out", tmp_path / "o", "--in-process", "--set", "dataset.limit=1")
    assert time.perf_counter() - t0 < 30
    assert r.exit_code == 2 and not (tmp_path / "o" / "t" / "results.json").exists(), r.output


def test_the_runs_git_facts_take_no_lock_in_the_project(monkeypatch):
    """Found by a tester: `git status` (the commit's -dirty mark) wrote .git/index.lock in the
    project's checkout, outside --out: a git command the user ran meanwhile could fail on it."""
    import subprocess

    from runner.run import result

    calls = []
    real = subprocess.run
    monkeypatch.setattr(subprocess, "run", lambda cmd, **kw: calls.append(cmd) or real(cmd, **kw))
    result.environment()
    gits = [c for c in calls if c[0] == "git"]
    assert len(gits) >= 1 and all(c[1] == "--no-optional-locks" for c in gits), gits
