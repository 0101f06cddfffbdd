"""A user's first hour (issue 28): what a new user meets, each with the exact message or
behaviour."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from runner.cli import cli
from tests.cli_output import user_error


def _fake(base_recipe, name="f"):
    return {
        **base_recipe,
        "name": name,
        "model": {"id": "none"},
        "engine": {"kind": "fake", "reply": "{{ answers[0] }}"},
    }


def _go(*args):
    return CliRunner().invoke(cli, ["go", *map(str, args), "--no-progress", "--in-process"])


def test_a_folder_where_results_json_belongs_is_refused_before_anything_runs(
    tmp_path, write_recipe, base_recipe
):
    path, out = write_recipe(_fake(base_recipe)), tmp_path / "out"
    (out / "f" / "results.json").mkdir(parents=True)
    assert user_error(_go(path, "--out", out, "--limit", "2")) == (
        "Error: {tmp}/out/f/results.json: is not a file\n"
        "  hint: remove it (rm -r '{tmp}/out/f/results.json') and rerun; the run writes a file "
        "there\n"
    )


def test_a_skipped_run_writes_its_deleted_report_again(tmp_path, write_recipe, base_recipe):
    path, out = write_recipe(_fake(base_recipe)), tmp_path / "out"
    assert _go(path, "--out", out, "--limit", "2").exit_code == 0
    (out / "f" / "report.md").unlink()
    r = _go(path, "--out", out, "--limit", "2")
    assert "skip f: unchanged since" in r.output and (
        out / "f" / "report.md"
    ).read_text().startswith("# f\n")


def test_json_lines_read_as_squad_hint_the_format(tmp_path, write_recipe, base_recipe):
    data = tmp_path / "d.jsonl"
    rows = [
        '{"id": "1", "question": "q", "context": "c", "answers": ["a"]}',
        '{"id": "2", "question": "r"}',
    ]
    data.write_text("\n".join(rows) + "\n")
    d = {**_fake(base_recipe), "dataset": {"format": "squad", "path": str(data)}}
    r = CliRunner().invoke(cli, ["check", str(write_recipe(d)), "--no-tokens"])
    assert user_error(r) == (
        "Error: {tmp}/recipe.yaml: dataset.format: cannot read {tmp}/d.jsonl as squad: not valid "
        "JSON: Extra data at line 2, column 1\n"
        "  hint: the file holds one JSON object per line (JSON Lines): set dataset.format: jsonl\n"
    )


def _check(path, *args):
    return CliRunner().invoke(cli, ["check", str(path), "--no-tokens", *args])


def test_did_you_mean_for_a_metric_a_template_a_dataset_file_and_a_top_level_set(
    tmp_path, write_recipe, base_recipe, demo_data
):
    path = write_recipe(_fake(base_recipe))
    r = _check(path, "--set", 'metrics=["f1"]')
    assert (
        "unknown metric 'f1'; did you mean 'char_f1' or 'squad_f1' or 'jglue_char_f1'? Allowed:"
        in r.output
    )
    assert user_error(_check(path, "--set", "prompt.template=jsquad-contxt-first.j2")) == (
        "Error: {tmp}/recipe.yaml: prompt.template: template not found: 'jsquad-contxt-first.j2' "
        "(looked beside the recipe and in templates/)\n"
        "  hint: did you mean 'jsquad-context-first.j2'?\n"
    )
    wrong = demo_data.parent / "demo-jp.json"
    assert user_error(_check(path, "--set", f"dataset.path={wrong}")) == (
        "Error: {tmp}/recipe.yaml: dataset.path: dataset file not found: "
        "{project}/runner/demo/demo-jp.json\n  hint: did you mean 'demo-ja.json' (in "
        "{project}/runner/demo)? paths in a recipe are relative to the recipe file\n"
    )
    r = _check(path, "--set", "max_tokens=8")
    assert (
        "max_tokens: --set max_tokens: no such key; did you mean 'sampling.max_tokens'? Allowed "
        "here:" in r.output
    )


def test_a_bad_name_says_the_rule_with_an_example(write_recipe, base_recipe):
    r = _check(write_recipe({**_fake(base_recipe), "name": "bad name"}))
    assert user_error(r).endswith(
        "name: 'bad name' is not a valid name: letters, digits and `._-`, starting with a letter "
        "or digit, e.g. `jsquad-vllm-fp8`\n"
    )


def test_set_is_checked_against_the_cells_only_keeps(write_recipe, base_recipe):
    """`--set engine.device=cpu` fits the transformers cell and not the vLLM one: with --only naming
    the transformers cell, the vLLM cell is not validated."""
    study = {k: v for k, v in base_recipe.items() if k not in ("name", "engine")} | {"name": "st"}
    study["variants"] = {
        "hf": {"engine": {"kind": "transformers"}},
        "vllm": {"engine": {"kind": "vllm"}},
    }
    path = write_recipe(study, "st.yaml")
    r = _check(path, "--only", "st-hf", "--set", "engine.device=cpu")
    assert r.exit_code == 0, r.output
    assert r.output.startswith(f"ok {path}: st-hf — transformers")
    r = _check(path, "--only", "st-vllm", "--set", "engine.device=cpu")
    assert r.exit_code == 2 and "cell 'st-vllm'" in r.output


def test_check_of_a_folder_reports_every_files_first_error(tmp_path, write_recipe, base_recipe):
    write_recipe(_fake(base_recipe, "good"), "recipes/a.yaml")
    write_recipe({**_fake(base_recipe, "bad"), "nonsense": 1}, "recipes/b.yaml")
    write_recipe({"name": "c", "model": {"id": "none"}}, "recipes/c.yaml")
    r = _check(tmp_path / "recipes")
    out = user_error(r)
    assert out.startswith("ok {tmp}/recipes/a.yaml: good — fake")
    assert (
        "Error: {tmp}/recipes/b.yaml: invalid recipe\n  line " in out
        and "nonsense: unknown key 'nonsense'" in out
    )
    assert (
        "\n\nError: {tmp}/recipes/c.yaml: invalid recipe\n  line 1, engine: required field is "
        "missing\n" in out
    )
    assert out.endswith("\n\n2 of 3 files have errors\n")


def test_another_recipe_of_the_same_name_keeps_the_earlier_results_and_says_where(
    tmp_path, write_recipe, base_recipe
):
    out = tmp_path / "out"
    first = write_recipe(_fake(base_recipe, "x"), "one.yaml")
    assert _go(first, "--out", out, "--limit", "2").exit_code == 0
    before = (out / "x" / "results.json").read_text()
    other = write_recipe({**_fake(base_recipe, "x"), "sampling": {"max_tokens": 4}}, "two.yaml")
    r = _go(other, "--out", out, "--limit", "2")
    assert r.exit_code == 0, r.output
    [kept] = (out / "x" / "replaced").iterdir()
    assert r.output.startswith(
        f"kept x's earlier results in {kept} (the recipe, its inputs or --limit changed since); "
        "this run replaces "
        "them\n"
    )
    assert (kept / "results.json").read_text() == before and (kept / "samples.jsonl").is_file()
    assert (out / "x" / "results.json").read_text() != before  # the new run's


def test_force_keeps_the_results_it_replaces(tmp_path, write_recipe, base_recipe):
    out, path = tmp_path / "out", write_recipe(_fake(base_recipe, "x"))
    assert _go(path, "--out", out, "--limit", "2").exit_code == 0
    r = _go(path, "--out", out, "--limit", "2", "--force")
    [kept] = (out / "x" / "replaced").iterdir()
    assert f"kept x's earlier results in {kept} (--force); this run replaces them" in r.output
    assert {p.name for p in kept.iterdir()} >= {"results.json", "samples.jsonl", "report.md"}
    # the same run again: skipped, nothing more set aside
    again = _go(path, "--out", out, "--limit", "2")
    assert (
        "skip x: unchanged" in again.output and len(list((out / "x" / "replaced").iterdir())) == 1
    )


def test_finished_samples_of_another_run_are_moved_aside_not_deleted(
    tmp_path, write_recipe, base_recipe
):
    out, path = tmp_path / "out", write_recipe(_fake(base_recipe, "x"))
    (out / "x").mkdir(parents=True)
    partial = '{"_run_key": "another"}\n{"id": "demo-0001", "output": "kept"}\n'
    (out / "x" / "samples.partial.jsonl").write_text(partial)
    r = _go(path, "--out", out, "--limit", "2")
    [kept] = (out / "x" / "replaced").iterdir()
    assert (
        kept.name.endswith("-another") and (kept / "samples.partial.jsonl").read_text() == partial
    )
    assert f"kept x's earlier results in {kept}" in r.output


def test_report_names_a_run_folder_without_results(tmp_path, write_recipe, base_recipe):
    out, path = tmp_path / "out", write_recipe(_fake(base_recipe, "x"))
    assert _go(path, "--out", out, "--limit", "2").exit_code == 0
    (out / "y").mkdir()
    (out / "y" / "engine.log").write_text("started\n")
    r = CliRunner().invoke(cli, ["report", str(out)])
    assert r.exit_code == 0 and r.output.endswith(
        f"no results.json in {out / 'y'}: a run that did not finish (left out; rerun it to report "
        "it)\n"
    )


def test_a_recipe_whose_engine_is_not_installed_fails_alone(
    tmp_path, write_recipe, base_recipe, monkeypatch
):
    """Where vLLM is not installed, `check` says the vLLM recipe cannot run here, and `go` records
    it failed with the hint and runs the others."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a)
    )
    good = write_recipe(_fake(base_recipe, "good"), "good.yaml")
    v = write_recipe({**base_recipe, "name": "v", "engine": {"kind": "vllm"}}, "v.yaml")
    r = _check(v)
    assert (
        r.exit_code == 0
        and (
            "  note: cannot run on this machine: vllm is not installed in this Python, so `engine: "
            "kind: vllm` cannot run here\n"
        )
        in r.output
    )
    out = tmp_path / "out"
    r = _go(good, v, "--out", out, "--limit", "2")
    assert r.exit_code == 1, r.output
    assert (
        f"FAILED v: {v}: engine.kind: vllm is not installed in this Python, so `engine: kind: "
        "vllm` cannot run here\n"
        "  hint: run on a host with it installed (`runner check` works anywhere)\n"
    ) in r.output
    assert "ok good: 2 examples" in r.output and (out / "v" / "results.json").is_file()


def test_a_hub_id_not_in_the_cache_gets_a_note_naming_model_path(write_recipe, base_recipe):
    pytest.importorskip("huggingface_hub")
    r = _check(
        write_recipe({**base_recipe, "model": {"id": "nobody/no-such-model-xyz"}}), "--no-tokens"
    )
    assert (
        "  note: model.id 'nobody/no-such-model-xyz' is a hub id that is not in this machine's "
        "Hugging Face cache: runner go downloads it (needs network); without network, pass a local "
        "copy with --model-path nobody/no-such-model-xyz=PATH\n"
    ) in r.output


def test_a_hub_connection_failure_hints_model_path():
    from runner.run.result import failure_hint

    err = "OSError: We couldn't connect to 'https://huggingface.co' to load the files"
    assert failure_hint(err) == (
        "this machine cannot reach the model hub: pass a local copy with --model-path HUB_ID=PATH"
    )


def test_summary_opens_with_a_verdict_and_hides_columns_empty_in_every_row(
    tmp_path, write_recipe, base_recipe
):
    out = tmp_path / "out"
    base = write_recipe({**_fake(base_recipe, "base"), "baseline": True}, "a.yaml")
    other = write_recipe(_fake(base_recipe, "other"), "b.yaml")
    assert _go(base, other, "--out", out, "--limit", "2", "--repeat", "2").exit_code == 0
    text = (out / "summary.md").read_text()
    fastest = next(line for line in text.splitlines() if line.startswith("Fastest: **"))
    assert text.index(fastest) < text.index("| recipe ")
    assert "against the baseline base:" in fastest or fastest.startswith("Fastest: **base**")
    head = next(line for line in text.splitlines() if line.startswith("| recipe "))
    # no GPU here
    assert "peak GPU" not in head and "roofline" not in head and "Roofline:" not in text
    assert "generation time" in head and "differs from baseline" in head


def test_a_list_valued_axis_reads_once_and_check_shows_each_distinct_prompt(
    tmp_path, write_recipe, base_recipe, project_root
):
    study = {**{k: v for k, v in _fake(base_recipe).items() if k != "name"}, "name": "ls"}
    templates = [
        str(project_root / "templates" / t) for t in ("jsquad.j2", "jsquad-context-first.j2")
    ]
    study["matrix"] = {"engine.delay_s": [0.0, 0.001], "prompt.template": templates}
    study["report"] = {"columns": "engine.delay_s"}
    path = write_recipe(study, "ls.yaml")
    r = _check(path)
    # one per template, not one per study
    assert r.exit_code == 0 and r.output.count("first prompt:") == 2
    out = tmp_path / "out"
    assert _go(path, "--out", out, "--limit", "2").exit_code == 0
    head = next(
        line
        for line in (out / "summary.md").read_text().splitlines()
        if line.startswith("| prompt.template")
    )
    assert [c.strip() for c in head.strip("|").split("|")] == [
        "prompt.template",
        "delay_s-0.0",
        "delay_s-0.001",
    ]


def test_shots_drawn_from_the_evaluated_file_are_refused(write_recipe, base_recipe, demo_data):
    d = _fake(base_recipe)
    d["prompt"] = {
        **d["prompt"],
        "shots": {"k": 2, "source": {"format": "squad", "path": str(demo_data)}},
    }
    assert user_error(_check(write_recipe(d))) == (
        "Error: {tmp}/recipe.yaml: prompt.shots.source: prompt.shots.source is the evaluated "
        f"dataset itself ({demo_data}): its 2 drawn shots would be evaluated examples, with their "
        "answers in every prompt\n"
        "  hint: draw the shots from another split (e.g. a train file), or write them under "
        "prompt.shots.examples\n"
    ).replace(str(demo_data.parents[2]), "{project}")


def test_a_fake_reply_that_fails_on_one_row_is_found_by_check(write_recipe, base_recipe):
    d = _fake(base_recipe)
    # the demo's answers lists are shorter
    d["engine"] = {"kind": "fake", "reply": "{{ answers[5] }}"}
    out = user_error(_check(write_recipe(d)))
    assert (
        out.startswith("Error: {tmp}/recipe.yaml: engine.reply:") and "example 'demo-0001'" in out
    )


def test_a_cpu_report_shows_cpu_figures_not_empty_gpu_columns(tmp_path, project_root):
    out = tmp_path / "out"
    assert _go(project_root / "recipes" / "demo.yaml", "--out", out, "--limit", "2").exit_code == 0
    report = (out / "demo" / "report.md").read_text()
    memory = report.split("## Memory", 1)[1].split("##", 1)[0]
    head = next(line for line in memory.splitlines() if line.startswith("| "))
    assert "peak process memory (RSS)" in head and "CPU" in head and "peak GPU" not in head
    assert "(see Predicted and measured)" not in report or "## Predicted and measured" in report
    assert "Total: engine start, tokenizing, generation, scoring and writing the samples." in report


def test_charts_label_two_digits_use_a_linear_axis_when_they_can_and_need_two_points(tmp_path):
    from runner.report.plots import Accuracy, accuracy_chart, scale_of, two_digits
    from tests.test_report import result

    assert [two_digits(v) for v in (0.13, 6.93, 19.3, 1234.5)] == ["0.13", "6.9", "19", "1,234"]
    assert scale_of([0.13, 0.5, 2.0]) == "linear" and scale_of([1.0, 300.0]) == "log"
    one = [result("a", generate_s=2.0)]
    one[0].scores["exact_match"] = 0.5
    assert (
        accuracy_chart(one, Accuracy("exact_match"), tmp_path / "a.png") is None
        and not (tmp_path / "a.png").exists()
    )


def test_a_fake_engine_report_says_so_once(tmp_path, write_recipe, base_recipe):
    out = tmp_path / "out"
    assert (
        _go(write_recipe(_fake(base_recipe, "f"), "f.yaml"), "--out", out, "--limit", "2").exit_code
        == 0
    )
    head = (out / "f" / "report.md").read_text().split("## Time and throughput")[0]
    banners = [line for line in head.splitlines() if line.startswith("> ")]
    assert banners == [
        "> **FAKE ENGINE**: `fake` made these outputs up from a template; no model ran. Times, "
        "tokens and scores test the pipeline only."
    ]
    assert "\nEngine: fake (no model: replies are made up) · model:" in head


# --------------------------------------------------------------------------- 10: plan what applies,
# fast


def _plan(*args):
    return CliRunner().invoke(cli, ["plan", *map(str, args)])


def test_plan_of_cpu_and_transformers_recipes_plans_what_applies_and_says_the_rest_once(
    tmp_path, write_recipe, base_recipe
):
    pytest.importorskip("transformers")
    import json

    # engine.device: cpu
    cpu = [write_recipe({**base_recipe, "name": n}, f"{n}.yaml") for n in ("a", "b")]
    auto = write_recipe({**base_recipe, "name": "c", "engine": {"kind": "transformers"}}, "c.yaml")
    r = _plan(*cpu, auto, "--gpu", "H200")
    assert r.exit_code == 0, r.output
    assert r.output.startswith("# Plan (H200, 140 GiB)\n")
    rows = {
        line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
        for line in r.output.splitlines()
        if line.startswith("| ") and not line.startswith("| recipe")
    }
    assert rows["a"][0] == "CPU" and rows["c"][0] == "H200"
    # no prefix cache, KV capacity, fit, floor
    assert rows["a"][4] == "–" and rows["a"][7:] == ["–", "–", "–"]
    notes = [line for line in r.output.splitlines() if line.startswith("- ")]
    assert notes == [
        "- a, b: runs on the CPU: GPU memory, KV cache, prefix-cache hits and the floor do not "
        "apply; prompt tokens, context fit and weights (in CPU memory) are planned.",
        "- c: transformers has no paged KV-cache pool: KV capacity, prefix-cache hits, memory fit "
        "and the floor are vLLM's and not planned; prompt tokens, context fit and weights are.",
    ]
    [p] = json.loads(_plan(cpu[0], "--json").output)["recipes"]  # no GPU needed, none named
    assert p["gpu"] is None and p["prompt_tokens"] > 36 * 20 and p["max_model_len"] == 2048
    assert p["cached_prompt_tokens"] is p["kv_capacity_tokens"] is p["fits"] is p["floor_s"] is None
    assert p["weights_gib"] > 0 and p["kv_bytes_per_token"] > 0


def test_plan_for_the_cpu_is_accepted_and_a_vllm_recipe_says_what_it_leaves_out(
    write_recipe, base_recipe
):
    pytest.importorskip("transformers")
    path = write_recipe({**base_recipe, "engine": {"kind": "vllm"}})
    r = _plan(path, "--gpu", "cpu")
    assert r.exit_code == 0 and r.output.startswith("# Plan (CPU)\n"), r.output
    assert r.output.splitlines()[-1] == (
        "- t: vLLM runs on a GPU only: --gpu cpu plans its prompt tokens, context fit and weights, "
        "not its KV cache, prefix-cache hits, memory fit or floor."
    )


def test_plan_counts_prompts_over_the_context(write_recipe, base_recipe):
    pytest.importorskip("transformers")
    r = _plan(
        write_recipe({**base_recipe, "sampling": {"temperature": 0, "max_tokens": 1990}}),
        "--gpu",
        "cpu",
    )
    assert r.exit_code == 0 and "| 2,048 (" in r.output and " over) " in r.output
    assert "prompts + max_tokens exceed the context of 2,048." in r.output


def test_plan_of_a_hub_model_not_on_this_machine_names_the_fix(write_recipe, base_recipe):
    pytest.importorskip("transformers")
    path = write_recipe({**base_recipe, "model": {"id": "nobody-here/not-a-model"}})
    assert user_error(_plan(path)) == (
        "Error: {tmp}/recipe.yaml: model.id: no config.json for nobody-here/not-a-model on this "
        "machine (plan reads the model's config, never the network)\n"
        "  hint: pass a local copy with --model-path nobody-here/not-a-model=PATH\n"
    )


def test_token_counts_are_kept_by_their_inputs_and_reused_without_the_tokenizer(monkeypatch):
    """The second count of the same prompts reads them back (no tokenizer loaded, so no transformers
    import); a damaged kept file, or other prompts, are counted again with the engines'
    tokenizer."""
    pytest.importorskip("transformers")
    import uuid

    import runner.engines.hf as hf
    from runner.base.types import ModelSpec

    model = ModelSpec(id="builtin:demo")
    msgs = [[{"role": "user", "content": f"質問 {i}: 琵琶湖はどこ？"}] for i in range(3)]
    chat, ids = hf.count_prompts(model, msgs, None)
    assert (chat, ids) == (
        True,
        hf.encode_prompts(hf.load_tokenizer(model, local_only=True), msgs, True)[1],
    )
    kept = hf._counts_path(hf._count_key(hf.tokenizer_folder(model), "prompts", None, msgs))
    assert kept.is_file()
    hf._COUNTED.clear()
    monkeypatch.setattr(hf, "counting_tokenizer", lambda m: pytest.fail("counted again"))
    assert hf.count_prompts(model, msgs, None) == (chat, ids)
    monkeypatch.undo()
    calls, real = [], hf.counting_tokenizer
    monkeypatch.setattr(hf, "counting_tokenizer", lambda m: calls.append(m) or real(m))
    hf._COUNTED.clear()
    kept.write_bytes(b"damaged")
    assert hf.count_prompts(model, msgs, None) == (chat, ids) and len(calls) == 1
    # never counted before
    other = [[{"role": "user", "content": f"another prompt {uuid.uuid4()}"}]]
    assert hf.count_prompts(model, other, None)[1] != ids[:1] and len(calls) == 2
