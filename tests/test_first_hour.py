"""A user's first hour (issue 28): what a new user meets, each with the exact message or
behaviour."""

from __future__ import annotations

import json
import re

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
        "{project}/runner/demo)? paths in a recipe are relative to the recipe file (typed with "
        "--set: to this folder)\n"
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


def test_each_pattern_of_only_must_match_a_recipe(tmp_path, write_recipe, base_recipe):
    """`--only 'a,zzz'`: the typo is named (before, `a` ran, `zzz` went unsaid), by go and check."""
    paths = [write_recipe(_fake(base_recipe, n), f"{n}.yaml") for n in "ab"]
    says = "Error: --only: --only 'a,zzz': 'zzz' matches no recipe; recipes: a, b\n"
    assert user_error(_go(*paths, "--out", tmp_path / "out", "--only", "a,zzz")) == says
    assert not (tmp_path / "out" / "a").exists()
    check = ["check", *map(str, paths), "--no-tokens", "--only", "a,zzz"]
    # check still shows the recipes it checked, then the error
    assert user_error(CliRunner().invoke(cli, check)).endswith("\n" + says)


def test_a_file_of_shared_settings_alone_has_nothing_to_run(tmp_path, write_recipe, base_recipe):
    """Only abstract files: go refuses (before, it wrote a summary of 0 recipes over the last
    one); check says the file is valid and has no recipe of its own."""
    path = write_recipe({**_fake(base_recipe), "abstract": True}, "common.yaml")
    (out := tmp_path / "out").mkdir()
    (out / "summary.md").write_text("an earlier call's summary")
    assert user_error(_go(path, "--out", out)) == (
        "Error: abstract: no recipe to run: {tmp}/common.yaml holds shared settings only "
        "(abstract: true)\n"
        "  hint: run a recipe file that names it in `base:`\n"
    )
    assert (out / "summary.md").read_text() == "an earlier call's summary"
    r = CliRunner().invoke(cli, ["check", str(path), "--no-tokens"])
    assert r.exit_code == 0 and r.output == (
        f"ok {path}: shared settings for other files' `base:` (abstract: true), no recipe\n"
    )


def test_a_nameless_recipe_is_told_to_add_a_name_first(tmp_path, write_recipe, base_recipe):
    d = _fake(base_recipe)
    del d["name"]
    r = CliRunner().invoke(cli, ["check", str(write_recipe(d, "mine.yaml")), "--no-tokens"])
    assert user_error(r).endswith(
        "  hint: add `name: mine` (its report folder's name); a file that only holds shared "
        "settings for other files' `base:` needs `abstract: true` instead\n"
    )


def test_an_estimate_that_runs_every_example_says_it_projects_nothing(
    tmp_path, write_recipe, base_recipe
):
    path = write_recipe(_fake(base_recipe))
    r = _go(path, "--out", tmp_path / "a", "--estimate", "100")
    assert r.exit_code == 0
    assert "f: --estimate 100 is not fewer than its 36 examples: all run, none projected\n" in (
        r.stderr
    )
    r = _go(path, "--out", tmp_path / "b", "--estimate", "5", "--limit", "3")
    assert r.exit_code == 0 and (
        "f: --estimate 5 is not fewer than its 3 examples (--limit 3): all run, none projected\n"
        in r.stderr
    )
    r = _go(path, "--out", tmp_path / "c", "--estimate", "5")
    assert r.exit_code == 0 and "none projected" not in r.output
    # the same run as without it: a later call without --estimate skips it
    r = _go(path, "--out", tmp_path / "a")
    assert r.exit_code == 0 and "skip f: unchanged since" in r.output
    # ... unless without it the recipe's own estimate samples (found on review)
    sampled = write_recipe({**_fake(base_recipe), "estimate": 12}, "s.yaml")
    assert _go(sampled, "--out", tmp_path / "d").exit_code == 0
    r = _go(sampled, "--out", tmp_path / "d", "--estimate", "100")
    assert "skip f" not in r.output and "ok f: 36 examples" in r.output, r.output


def test_a_kind_changed_alone_names_the_other_kinds_settings_and_how_to_change_it(
    write_recipe, base_recipe
):
    path = str(write_recipe(base_recipe))  # engine: {kind: transformers, device: cpu}
    r = CliRunner().invoke(cli, ["check", path, "--no-tokens", "--set", "engine.kind=fake"])
    assert user_error(r) == (
        "Error: {tmp}/recipe.yaml: invalid recipe\n"
        "  line 6, engine.device: unknown key 'device' (a setting of the transformers engine; "
        "this one's kind is 'fake'). Allowed here: delay_s, jitter, kind, reply, serve_fail\n"
        "  hint: leave out the settings of other kinds; where a base, a variant, an axis or --set "
        "gives the engine another kind, give the whole `engine:` mapping, not its `kind` alone "
        "(e.g. `engine: {kind: fake}`, or --set 'engine={kind: fake}')\n"
    )
    # the hint, taken literally, fixes it
    fixed = ["check", path, "--no-tokens", "--set", "engine={kind: fake}"]
    assert CliRunner().invoke(cli, fixed).exit_code == 0


@pytest.mark.parametrize("fmt", ["squad", "json", "jsonl"])
def test_a_csv_file_read_as_json_hints_the_csv_format(tmp_path, write_recipe, base_recipe, fmt):
    data = tmp_path / "d.csv"
    data.write_text("id,question,context,answers\n1,q,c,a\n")
    d = {**_fake(base_recipe), "dataset": {"format": fmt, "path": str(data)}}
    r = CliRunner().invoke(cli, ["check", str(write_recipe(d)), "--no-tokens"])
    assert user_error(r).endswith(
        "  hint: the file looks like CSV (its first line: 'id,question,context,answers'): set "
        "dataset.format: csv\n"
    )


def test_a_squad_file_read_as_csv_hints_squad(write_recipe, base_recipe):
    d = _fake(base_recipe)
    d["dataset"] = {**d["dataset"], "format": "csv"}  # the demo set: SQuAD JSON
    r = CliRunner().invoke(cli, ["check", str(write_recipe(d)), "--no-tokens"])
    assert user_error(r).endswith("  hint: set dataset.format: squad\n")


def test_a_dataset_path_typed_with_set_that_is_not_there_is_named_from_here(
    tmp_path, write_recipe, base_recipe, monkeypatch
):
    path = write_recipe(_fake(base_recipe), "sub/f.yaml")
    (here := tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(here)
    r = CliRunner().invoke(
        cli, ["check", str(path), "--no-tokens", "--set", "dataset.path=no.json"]
    )
    assert user_error(r) == (
        "Error: {tmp}/sub/f.yaml: dataset.path: dataset file not found: {tmp}/elsewhere/no.json\n"
        "  hint: paths in a recipe are relative to the recipe file (typed with --set: to this "
        "folder)\n"
    )


@pytest.mark.parametrize(
    ("value", "quoted"),
    [("[###]", '["###"]'), ("#x", '["#x"]'), ("[a, #b]", '["a", "#b"]'), ("a #b", '["a #b"]')],
)
def test_a_set_value_whose_hash_yaml_reads_as_a_comment_is_told_to_quote_it(
    write_recipe, base_recipe, value, quoted
):
    path = str(write_recipe(_fake(base_recipe)))
    r = CliRunner().invoke(cli, ["check", path, "--no-tokens", "--set", f"sampling.stop={value}"])
    assert user_error(r) == (
        f"Error: {{tmp}}/recipe.yaml: sampling.stop: YAML reads the `#` in {value!r} as the start "
        f"of a comment, not as text\n  hint: quote it: --set 'sampling.stop={quoted}'\n"
    )
    r = CliRunner().invoke(cli, ["check", path, "--no-tokens", "--set", f"sampling.stop={quoted}"])
    assert r.exit_code == 0, r.output
    # a text field takes the words as typed
    r = CliRunner().invoke(cli, ["check", path, "--no-tokens", "--set", "description=a #b"])
    assert r.exit_code == 0, r.output


def test_true_or_false_for_a_number_is_refused_where_it_stands(write_recipe, base_recipe):
    """pydantic reads `max_tokens: true` as 1: the run would have used one output token."""
    d = _fake(base_recipe)
    d["sampling"] = {"temperature": 0, "max_tokens": True}
    r = CliRunner().invoke(cli, ["check", str(write_recipe(d)), "--no-tokens"])
    assert user_error(r) == (
        "Error: {tmp}/recipe.yaml: invalid recipe\n"
        "  line 15, sampling.max_tokens: Input should be a valid integer, unable to parse string "
        "as an integer (got 'true')\n"
    )
    # a field that takes true/false still does
    d["sampling"] = {"temperature": 0, "max_tokens": 4, "ignore_eos": True}
    assert CliRunner().invoke(cli, ["check", str(write_recipe(d)), "--no-tokens"]).exit_code == 0


def test_check_gives_the_runners_reason_for_no_token_counts_whole(write_recipe, base_recipe):
    r = CliRunner().invoke(cli, ["check", str(write_recipe(_fake(base_recipe)))])
    assert r.exit_code == 0 and r.output.endswith(
        "  prompt tokens: unavailable (RunnerError: model.id: no tokenizer for none on this "
        "machine: a hub id that is not in the Hugging Face cache (read from local files only))\n"
    )


def test_the_summarys_notes_are_only_those_that_apply(tmp_path, write_recipe, base_recipe):
    """No projection, no baseline: no note on `~` nor on a speed-up against a baseline; with an
    estimate (and a baseline) both."""
    path = write_recipe(_fake(base_recipe))
    assert _go(path, "--out", tmp_path / "a", "--limit", "2").exit_code == 0
    md = (tmp_path / "a" / "summary.md").read_text()
    assert "Times marked `~`" not in md and "Speed-up: against the baseline." not in md
    assert _go(path, "--out", tmp_path / "b", "--estimate", "4", "--baseline", "f").exit_code == 0
    md = (tmp_path / "b" / "summary.md").read_text()
    assert "Times marked `~`" in md and "Speed-up: against the baseline." in md


def test_a_section_given_one_value_is_shown_as_a_mapping(write_recipe, base_recipe):
    d = {**_fake(base_recipe), "model": "builtin:demo"}
    r = CliRunner().invoke(cli, ["check", str(write_recipe(d)), "--no-tokens"])
    assert user_error(r) == (
        "Error: {tmp}/recipe.yaml: invalid recipe\n"
        "  line 2, model: expected a mapping of settings, e.g. `model: {id: builtin:demo}`; got "
        "'builtin:demo'\n"
    )


def test_a_dataset_given_as_a_recipe_is_told_where_a_dataset_goes(demo_data):
    r = CliRunner().invoke(cli, ["check", str(demo_data), "--no-tokens"])
    assert user_error(r).endswith(
        "  hint: a recipe is a .yaml file of settings; a dataset is named in a recipe's "
        "`dataset.path`\n"
    )


def test_the_console_line_of_a_run_with_repeats_gives_its_interval(
    tmp_path, write_recipe, base_recipe
):
    r = _go(
        write_recipe(_fake(base_recipe)), "--out", tmp_path / "o", "--repeat", "3", "--limit", "2"
    )
    [line] = [x for x in r.output.splitlines() if x.startswith("ok f:")]
    assert r.exit_code == 0 and re.search(
        r"; generation [\d.]+ s \([\d.]+ s–[\d.]+ s, n=3\); ", line
    )


def test_a_csv_shots_file_read_as_json_hints_its_own_field(tmp_path, write_recipe, base_recipe):
    (data := tmp_path / "shots.csv").write_text("id,question,context,answers\n1,q,c,a\n")
    d = _fake(base_recipe)
    d["prompt"] = {
        **d["prompt"],
        "shots": {"k": 1, "source": {"format": "json", "path": str(data)}},
    }
    r = CliRunner().invoke(cli, ["check", str(write_recipe(d)), "--no-tokens"])
    assert user_error(r).endswith("set prompt.shots.source.format: csv\n")


def test_a_blank_pattern_of_only_is_no_pattern(tmp_path, write_recipe, base_recipe):
    paths = [write_recipe(_fake(base_recipe, n), f"{n}.yaml") for n in "ab"]
    r = _go(*paths, "--out", tmp_path / "out", "--only", "a,", "--limit", "2")
    assert r.exit_code == 0 and (tmp_path / "out" / "a").is_dir()
    assert not (tmp_path / "out" / "b").exists()


def test_a_gate_added_after_the_run_is_judged_when_the_run_is_skipped(
    tmp_path, write_recipe, base_recipe
):
    """Found by a tester following the README: a gate added to a finished recipe was ignored (the
    run was skipped as unchanged and kept its stored recipe, gate null), so --fail-on-gate passed
    a recipe that would fail. Now the skipped run takes the recipe's gate, and results.json keeps
    it for `runner report`."""
    import json

    out = tmp_path / "out"
    a = write_recipe({**_fake(base_recipe, "a"), "baseline": True}, "a.yaml")
    b = write_recipe(_fake(base_recipe, "b"), "b.yaml")
    assert _go(a, b, "--out", out, "--limit", "3").exit_code == 0
    gate = {"metric": "exact_match", "max_drop": 0.0}
    b = write_recipe({**_fake(base_recipe, "b"), "gate": gate}, "b.yaml")
    r = _go(a, b, "--out", out, "--limit", "3")
    assert "; its gate as the recipe now says\n" in r.output and "skip a: " in r.output
    stored = json.loads((out / "b" / "results.json").read_text())
    assert stored["recipe"]["gate"]["metric"] == "exact_match"
    # the recipe's hash beside it is the recipe's
    from runner.results import RunResult

    res = RunResult.model_validate(stored)
    assert res.recipe_hash == res.recipe.digest()
    [got] = [
        x for x in json.loads((out / "summary.json").read_text())["recipes"] if x["name"] == "b"
    ]
    assert got["gate"]["metric"] == "exact_match"


def test_a_studys_new_baseline_run_alone_is_its_summarys_baseline(
    tmp_path, write_recipe, base_recipe
):
    """The study's baseline moved from one cell to another, and only the new one ran (--only): its
    summary of every stored cell took the old one (first by name, both stored as baselines)."""
    d = {k: v for k, v in _fake(base_recipe).items() if k != "name"}
    study = {**d, "name": "st", "matrix": {"engine.delay_s": {"a": 0.0, "b": 1e-4}}}
    out = tmp_path / "out"
    path = write_recipe({**study, "baseline": "st-a"}, "st.yaml")
    assert _go(path, "--out", out, "--limit", "2").exit_code == 0
    path = write_recipe({**study, "baseline": "st-b"}, "st.yaml")
    assert _go(path, "--out", out, "--limit", "2", "--only", "st-b").exit_code == 0
    assert "baseline: **st-b**." in (out / "st" / "summary.md").read_text()


def test_a_call_that_leaves_its_studys_baseline_out_says_where_the_baseline_is_compared(
    tmp_path, write_recipe, base_recipe
):
    """--only without the study's baseline cell: the call's summary has none among its recipes, and
    told the user to mark one though the study does."""
    d = {k: v for k, v in _fake(base_recipe).items() if k != "name"}
    study = {**d, "name": "st", "matrix": {"engine.delay_s": {"a": 0.0, "b": 1e-4}}}
    out, path = tmp_path / "out", write_recipe({**study, "baseline": "st-a"}, "st.yaml")
    assert _go(path, "--out", out, "--limit", "2", "--only", "st-b").exit_code == 0
    assert (
        "1 recipe; no baseline among these recipes (a study's own summary compares its cells with "
        "the study's baseline; `--baseline NAME` picks one here)."
    ) in (out / "summary.md").read_text()


def test_a_hub_dataset_folder_beside_the_recipe_is_found_there_and_its_bytes_key_the_run(
    tmp_path, write_recipe, base_recipe, monkeypatch
):
    """Found by a tester: `format: hub` with a folder beside the recipe was looked up from the
    current folder (then on the network, ~25 s), and an edit to its files left the run skipped."""
    pytest.importorskip("datasets")
    folder = tmp_path / "sub" / "hubds"
    folder.mkdir(parents=True)
    rows = lambda gold: "".join(
        json.dumps({"id": str(i), "question": f"Q{i}", "context": "C", "answers": [gold]}) + "\n"
        for i in range(3)
    )
    (folder / "validation.jsonl").write_text(rows("A"))
    d = {**_fake(base_recipe), "dataset": {"format": "hub", "path": "hubds"}}
    path, out = write_recipe(d, "sub/h.yaml"), tmp_path / "out"
    monkeypatch.chdir(tmp_path)  # not the recipe's folder
    assert _go(path, "--out", out).exit_code == 0
    assert _go(path, "--out", out).output.count("skip f: unchanged since") == 1
    (folder / "validation.jsonl").write_text(rows("B"))
    r = _go(path, "--out", out)
    assert "skip f" not in r.output and "kept f's earlier results in " in r.output, r.output


def test_a_call_without_its_baseline_points_to_runner_report(tmp_path, write_recipe, base_recipe):
    """Found by a tester: with --only leaving the baseline out, the summary said to mark one (it
    was marked) and `--baseline y1` was refused (not a recipe of this call)."""
    y1 = write_recipe({**_fake(base_recipe), "name": "y1", "baseline": True}, "y1.yaml")
    y2 = write_recipe({**_fake(base_recipe), "name": "y2"}, "y2.yaml")
    out = tmp_path / "out"
    assert _go(y1, y2, "--out", out, "--limit", "2").exit_code == 0
    assert _go(y1, y2, "--out", out, "--limit", "2", "--only", "y2").exit_code == 0
    assert (
        "1 recipe; no baseline (mark one with `baseline: true` or `--baseline NAME`; for one "
        "stored by another call, `runner report` compares every stored run)."
    ) in (out / "summary.md").read_text()
    assert CliRunner().invoke(cli, ["report", str(out)]).exit_code == 0
    assert "baseline: **y1**." in (out / "summary.md").read_text()


def test_check_notes_examples_whose_mapped_context_is_missing(tmp_path, write_recipe, base_recipe):
    """Found by a tester: a row without its `passage` key (others have it) read as null, and its
    prompt had an empty passage with no word of it."""
    rows = [{"id": "1", "q": "Q1", "passage": "P1", "a": "x"}, {"id": "2", "q": "Q2", "a": "y"}]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    fields = {"question": "q", "context": "passage", "answers": "a"}
    d = {**_fake(base_recipe), "dataset": {"format": "jsonl", "path": "d.jsonl", "fields": fields}}
    r = CliRunner().invoke(cli, ["check", str(write_recipe(d)), "--no-tokens"])
    assert r.exit_code == 0, r.output
    assert (
        "  note: 1 of 2 examples have no 'passage' (mapped to `context`): their prompts have an "
        "empty passage (ids 2)\n"
    ) in r.output


def test_a_skip_with_more_repeats_stored_than_asked_says_so(tmp_path, write_recipe, base_recipe):
    """Found by a tester: `--repeat 2` after 3 were stored said 'skip' and reported 3, unsaid."""
    path, out = write_recipe(_fake(base_recipe)), tmp_path / "out"
    assert _go(path, "--out", out, "--limit", "2", "--repeat", "3").exit_code == 0
    r = _go(path, "--out", out, "--limit", "2", "--repeat", "2")
    assert "; it holds 3 repeats (2 asked): all are reported\n" in r.output, r.output
