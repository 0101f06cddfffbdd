"""Recipe validation and user-facing errors, through the real CLI (click's CliRunner).

Every bad input must end with exit code 2, a message that names the problem (file, line,
field, what is allowed), and no Python traceback. Nothing here loads a model."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from runner import load_recipe
from runner.cli import cli
from tests.cli_output import user_error

PROJECT = Path(__file__).resolve().parents[1]
SHARED = Path(__file__).resolve().parents[2] / "shared"
DEMO_DATA = PROJECT / "runner" / "demo" / "demo-ja.json"


# --------------------------------------------------------------------------- helpers


def invoke(*args: str):
    return CliRunner().invoke(cli, [str(a) for a in args])


def check(*paths, extra: tuple[str, ...] = ()):
    return invoke("check", *paths, "--no-tokens", *extra)


def assert_user_error(result, expected: str) -> str:
    """Exit code 2, no traceback, and exactly the expected output (paths as `tests/cli_output.py`
    writes them)."""
    assert user_error(result) == expected
    return result.output


def line_of(text: str, needle: str) -> int:
    """1-based line number of the first line containing needle."""
    for i, line in enumerate(text.splitlines(), 1):
        if needle in line:
            return i
    raise AssertionError(f"{needle!r} not in text")


def with_changes(base: dict, **sections) -> dict:
    d = copy.deepcopy(base)
    for k, v in sections.items():
        if isinstance(v, dict) and isinstance(d.get(k), dict):
            d[k].update(v)
        else:
            d[k] = v
    return d


def first_demo_question() -> str:
    data = json.loads(DEMO_DATA.read_text(encoding="utf-8"))
    return data["data"][0]["paragraphs"][0]["qas"][0]["question"]


# --------------------------------------------------------------------------- valid recipes


def test_valid_recipe_passes_check_and_prints_first_prompt(base_recipe, write_recipe):
    p = write_recipe(base_recipe)
    r = check(p)
    assert r.exit_code == 0, r.output
    assert "Traceback" not in r.output
    assert f"ok {p.resolve()}: t" in r.output
    assert "36 of 36 examples" in r.output
    assert "first prompt:" in r.output
    assert "[system] Contextを参考にして、問題に回答してください。" in r.output
    assert "Question:" + first_demo_question() in r.output
    assert "Output:" in r.output


def test_check_reports_dataset_limit(base_recipe, write_recipe):
    p = write_recipe(with_changes(base_recipe, dataset={"limit": 5}))
    r = check(p)
    assert r.exit_code == 0, r.output
    assert "5 of 36 examples" in r.output


def test_dataset_path_is_relative_to_the_recipe_file(base_recipe, write_recipe, tmp_path):
    p = write_recipe(
        with_changes(base_recipe, dataset={"format": "jsonl", "path": "data/rows.jsonl"}),
        name="recipes/r.yaml",
    )
    (tmp_path / "recipes" / "data").mkdir()
    (tmp_path / "recipes" / "data" / "rows.jsonl").write_text(
        json.dumps(
            {"question": "首都はどこか。", "context": "日本 [SEP] 首都は東京。", "answers": "東京"},
            ensure_ascii=False,
        )
        + "\n",
        encoding="utf-8",
    )
    r = check(p)
    assert r.exit_code == 0, r.output
    assert "Question:首都はどこか。" in r.output
    assert "1 of 1 examples" in r.output


def test_set_override_is_applied(base_recipe, write_recipe):
    p = write_recipe(base_recipe)
    lr = load_recipe(p, ["sampling.max_tokens=5"])
    assert lr.recipe.sampling.max_tokens == 5
    assert lr.overrides == ["sampling.max_tokens=5"]
    # the value is parsed as YAML: a nested mapping value and a boolean
    lr2 = load_recipe(p, ["sampling.ignore_eos=true", "model.id=some/other"])
    assert lr2.recipe.sampling.ignore_eos is True
    assert lr2.recipe.model.id == "some/other"
    # and through the CLI
    r = check(p, extra=("--set", "dataset.limit=3"))
    assert r.exit_code == 0, r.output
    assert "3 of 36 examples" in r.output


def test_set_override_that_is_invalid_is_reported(base_recipe, write_recipe):
    p = write_recipe(base_recipe)
    r = check(p, extra=("--set", "sampling.max_tokens=0"))
    assert_user_error(
        r,
        "Error: {tmp}/recipe.yaml: invalid recipe\n  sampling.max_tokens: Input should be greater "
        "than 0 (got 0)\n",
    )


def test_set_without_equals_sign(base_recipe, write_recipe):
    p = write_recipe(base_recipe)
    assert_user_error(
        check(p, extra=("--set", "sampling.max_tokens")),
        "Error: --set: 'sampling.max_tokens': expected dotted.key=value\n"
        "  hint: write --set key.path=value, e.g. --set sampling.max_tokens=64\n",
    )


PROJECT_RECIPES = sorted((PROJECT / "recipes").glob("*.yaml"))


@pytest.mark.parametrize("recipe", PROJECT_RECIPES, ids=lambda p: p.name)
def test_project_recipes_validate(recipe):
    from runner import load_recipes
    from runner.inputs.prompts import find_template

    for lr in load_recipes(recipe):  # a study: every cell; a base-only file: none
        assert lr.path == str(recipe.resolve())
        base = Path(lr.base_dir)
        for name in (lr.recipe.prompt.template, lr.recipe.prompt.system_template):
            if name:
                assert find_template(name, base) is not None, f"template {name!r} not found"
        data = lr.resolve(lr.recipe.dataset.path)
        if SHARED in data.resolve().parents and not SHARED.is_dir():
            continue
        assert data.is_file(), f"dataset {data} missing"


def test_project_recipe_names_are_unique():
    from tests.wired import load_all

    if not PROJECT_RECIPES:
        pytest.skip("no project recipes")
    from runner import load_recipes

    loaded = load_all((str(PROJECT / "recipes"),), ())
    assert len(loaded) == sum(len(load_recipes(p)) for p in PROJECT_RECIPES) > len(PROJECT_RECIPES)
    assert len({lr.recipe.name for lr in loaded}) == len(loaded)


def test_check_does_not_import_torch_or_transformers(base_recipe, write_recipe):
    p = write_recipe(base_recipe)
    code = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from runner.cli import cli\n"
        f"r = CliRunner().invoke(cli, ['check', {str(p)!r}, '--no-tokens'])\n"
        "assert r.exit_code == 0, r.output\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers', "
        "'vllm')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=PROJECT, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"


# --------------------------------------------------------------------------- unknown keys / types /
# ranges


def test_unknown_engine_key_suggests_quantization(write_recipe, base_recipe):
    text = (
        "name: t\n"
        "model:\n"
        "  id: builtin:demo\n"
        "engine:\n"
        "  kind: vllm\n"
        "  quantizaton: awq\n"
        "dataset:\n"
        f"  format: squad\n  path: {DEMO_DATA}\n"
        "prompt:\n"
        "  template: jsquad.j2\n"
    )
    p = write_recipe(text)
    out = assert_user_error(
        check(p),
        "Error: {tmp}/recipe.yaml: invalid recipe\n"
        "  line 6, engine.quantizaton: unknown key 'quantizaton'; did you mean 'quantization'? "
        "Allowed here: compile_cache, cpu_offload_gb, enable_prefix_caching, enforce_eager, "
        "engine_args, env, gpu_memory_utilization, kind, kv_cache_dtype, max_model_len, "
        "quantization, seed, swap_space, tensor_parallel_size, warmup\n",
    )
    assert f"line {line_of(text, 'quantizaton')}, engine.quantizaton" in out
    assert "line 6" in out


def test_unknown_engine_key_inline_mapping(write_recipe, base_recipe):
    d = with_changes(base_recipe, engine={"kind": "vllm", "quantizaton": "awq"})
    p = write_recipe(d)
    assert_user_error(
        check(p),
        "Error: {tmp}/recipe.yaml: invalid recipe\n"
        "  line 6, engine.device: unknown key 'device' (a setting of the transformers engine; "
        "this one's kind is 'vllm'). Allowed here: compile_cache, "
        "cpu_offload_gb, enable_prefix_caching, enforce_eager, engine_args, env, "
        "gpu_memory_utilization, kind, kv_cache_dtype, max_model_len, quantization, seed, "
        "swap_space, tensor_parallel_size, warmup\n  line 7, engine.quantizaton: unknown key "
        "'quantizaton'; did you mean 'quantization'? Allowed here: compile_cache, cpu_offload_gb, "
        "enable_prefix_caching, enforce_eager, engine_args, env, gpu_memory_utilization, kind, "
        "kv_cache_dtype, max_model_len, quantization, seed, swap_space, tensor_parallel_size, "
        "warmup\n  hint: leave out the settings of other kinds; where a base, a variant, an axis "
        "or --set gives the engine another kind, give the whole `engine:` mapping, not its "
        "`kind` alone (e.g. `engine: {kind: vllm}`, or --set 'engine={kind: vllm}')\n",
    )


def test_unknown_top_level_key_suggests(write_recipe, base_recipe):
    d = copy.deepcopy(base_recipe)
    d["sampilng"] = d.pop("sampling")
    assert_user_error(
        check(write_recipe(d)),
        "Error: {tmp}/recipe.yaml: invalid recipe\n"
        "  line 16, sampilng: unknown key 'sampilng'; did you mean 'sampling'? Allowed here: "
        "abstract, base, baseline, cost, dataset, description, engine, estimate, exclude, gate, "
        "interleave, load, matrix, metrics, model, name, profile, prompt, repeat, replicas, "
        "report, sampling, scoring, timeout_s, tune, variants, warmup\n",
    )


def test_a_top_level_key_spelled_nearly_so_comes_before_a_section_field(write_recipe, base_recipe):
    """Found by a tester: `metric:` suggested 'gate.metric' (whose fix failed next), not
    `metrics`."""
    d = copy.deepcopy(base_recipe)
    d["metric"] = d.pop("metrics")
    out = user_error(check(write_recipe(d)))
    assert "metric: unknown key 'metric'; did you mean 'metrics'? Allowed here: " in out, out
    assert "gate.metric" not in out


def test_unknown_key_through_go_is_rejected_before_running(write_recipe, base_recipe, tmp_path):
    d = with_changes(base_recipe, engine={"kind": "vllm", "quantizaton": "awq"})
    d["engine"].pop("device")
    out_dir = tmp_path / "reports"
    r = invoke("go", write_recipe(d), "--out", out_dir, "--no-progress")
    assert_user_error(
        r,
        "Error: {tmp}/recipe.yaml: invalid recipe\n"
        "  line 6, engine.quantizaton: unknown key 'quantizaton'; did you mean 'quantization'? "
        "Allowed here: compile_cache, cpu_offload_gb, enable_prefix_caching, enforce_eager, "
        "engine_args, env, gpu_memory_utilization, kind, kv_cache_dtype, max_model_len, "
        "quantization, seed, swap_space, tensor_parallel_size, warmup\n",
    )
    assert not out_dir.exists()


def test_wrong_type_names_field_and_line(write_recipe, base_recipe):
    d = with_changes(base_recipe, sampling={"max_tokens": "many"})
    p = write_recipe(d)
    text = p.read_text(encoding="utf-8")
    out = assert_user_error(
        check(p),
        "Error: {tmp}/recipe.yaml: invalid recipe\n"
        "  line 15, sampling.max_tokens: Input should be a valid integer, unable to parse string "
        "as an integer (got 'many')\n",
    )
    assert f"line {line_of(text, 'max_tokens')}, sampling.max_tokens" in out


def test_negative_max_tokens(write_recipe, base_recipe):
    p = write_recipe(with_changes(base_recipe, sampling={"max_tokens": -3}))
    assert_user_error(
        check(p),
        "Error: {tmp}/recipe.yaml: invalid recipe\n"
        "  line 15, sampling.max_tokens: Input should be greater than 0 (got -3)\n",
    )


def test_gpu_memory_utilization_above_one(write_recipe, base_recipe):
    d = with_changes(base_recipe, engine={"kind": "vllm", "gpu_memory_utilization": 1.5})
    d["engine"].pop("device")
    p = write_recipe(d)
    text = p.read_text(encoding="utf-8")
    out = assert_user_error(
        check(p),
        "Error: {tmp}/recipe.yaml: invalid recipe\n"
        "  line 6, engine.gpu_memory_utilization: Input should be less than or equal to 1 (got "
        "1.5)\n",
    )
    assert f"line {line_of(text, 'gpu_memory_utilization')}, engine.gpu_memory_utilization" in out


@pytest.mark.parametrize(
    "value, why",
    [
        (0, "greater than 0 (got 0)"),
        (1.5, "less than or equal to 1 (got 1.5)"),
        (-0.1, "greater than 0 (got -0.1)"),
    ],
)
def test_top_p_out_of_range(write_recipe, base_recipe, value, why):
    p = write_recipe(with_changes(base_recipe, sampling={"top_p": value}))
    assert_user_error(
        check(p),
        "Error: {tmp}/recipe.yaml: invalid recipe\n  line 16, sampling.top_p: Input should be "
        f"{why}\n",
    )


def test_unknown_shot_key_suggests_answer(write_recipe, base_recipe):
    p = write_recipe(with_changes(base_recipe, sampling={"top_p": 1.0}))
    assert load_recipe(p).recipe.sampling.top_p == 1.0


def test_unknown_metric_suggests(write_recipe, base_recipe):
    p = write_recipe(with_changes(base_recipe, metrics=["exact_macth"]))
    assert_user_error(
        check(p),
        "Error: {tmp}/recipe.yaml: invalid recipe\n"
        "  line 17, metrics.0: unknown metric 'exact_macth'; did you mean 'exact_match'? Allowed: "
        "runner_exact_match, runner_char_f1, runner_contains, jglue_exact_match, jglue_char_f1, "
        "llmjp_exact_match, llmjp_char_f1, flexeval_exact_match, flexeval_char_f1, "
        "flexeval_exact_match_normalized, flexeval_char_f1_normalized, squad_exact_match, "
        "squad_f1, squad_contains, exact_match, char_f1, contains\n",
    )


def test_duplicate_metric(write_recipe, base_recipe):
    p = write_recipe(with_changes(base_recipe, metrics=["char_f1", "char_f1"]))
    assert_user_error(
        check(p),
        "Error: {tmp}/recipe.yaml: invalid recipe\n"
        "  line 16, metrics: metrics are listed twice (got ['char_f1', 'char_f1'])\n",
    )


def test_unknown_engine_kind(write_recipe, base_recipe):
    p = write_recipe(with_changes(base_recipe, engine={"kind": "tensorrt"}))
    assert_user_error(
        check(p),
        "Error: {tmp}/recipe.yaml: invalid recipe\n"
        "  line 5, engine.kind: unknown engine kind 'tensorrt'; allowed: 'transformers', 'vllm', "
        "'fake'\n",
    )


def test_missing_engine_kind(write_recipe, base_recipe):
    d = copy.deepcopy(base_recipe)
    d["engine"] = {"device": "cpu"}
    assert_user_error(
        check(write_recipe(d)),
        "Error: {tmp}/recipe.yaml: invalid recipe\n"
        "  line 4, engine.kind: missing `kind`; allowed: 'transformers', 'vllm', 'fake'\n",
    )


def test_missing_required_section(write_recipe, base_recipe):
    d = copy.deepcopy(base_recipe)
    del d["model"]
    assert_user_error(
        check(write_recipe(d)),
        "Error: {tmp}/recipe.yaml: invalid recipe\n  line 1, model: required field is missing\n",
    )


def test_set_on_nonexistent_key(write_recipe, base_recipe):
    p = write_recipe(base_recipe)
    assert_user_error(
        check(p, extra=("--set", "engine.nope=3")),
        "Error: {tmp}/recipe.yaml: invalid recipe\n"
        "  engine.nope: --set engine.nope: no such key. Allowed here: attn_implementation, "
        "batch_size, batching, continuous, device, kind, quantization, warmup\n",
    )


def test_set_on_nonexistent_key_suggests(write_recipe, base_recipe):
    p = write_recipe(base_recipe)
    assert_user_error(
        check(p, extra=("--set", "sampling.max_token=5")),
        "Error: {tmp}/recipe.yaml: invalid recipe\n"
        "  sampling.max_token: --set sampling.max_token: no such key; did you mean 'max_tokens'? "
        "Allowed here: ignore_eos, max_tokens, seed, stop, temperature, top_k, top_p\n",
    )


def test_set_below_a_scalar(write_recipe, base_recipe):
    p = write_recipe(base_recipe)
    assert_user_error(
        check(p, extra=("--set", "model.id.x=1")),
        "Error: {tmp}/recipe.yaml: model.id.x: --set model.id.x: 'id' is not a mapping\n",
    )


def test_system_and_system_template_both_given(write_recipe, base_recipe):
    p = write_recipe(with_changes(base_recipe, prompt={"system": "hi"}))
    assert_user_error(
        check(p),
        "Error: {tmp}/recipe.yaml: invalid recipe\n"
        "  line 10, prompt: give either `system` or `system_template`, not both\n",
    )


def test_shots_k_without_source(write_recipe, base_recipe):
    p = write_recipe(with_changes(base_recipe, prompt={"shots": {"k": 2}}))
    assert_user_error(
        check(p),
        "Error: {tmp}/recipe.yaml: invalid recipe\n"
        "  line 13, prompt.shots: k > 0 needs `source`, the dataset the shots are drawn from\n",
    )


def test_typo_inside_shot_example_suggests(write_recipe, base_recipe):
    p = write_recipe(
        with_changes(
            base_recipe, prompt={"shots": {"examples": [{"question": "q", "anwser": "a"}]}}
        )
    )
    assert_user_error(
        check(p),
        "Error: {tmp}/recipe.yaml: invalid recipe\n"
        "  line 15, prompt.shots.examples.0.answer: required field is missing\n"
        "  line 16, prompt.shots.examples.0.anwser: unknown key 'anwser'; did you mean 'answer'? "
        "Allowed here: answer, context, question\n",
    )


# --------------------------------------------------------------------------- recipe names


@pytest.mark.parametrize("name", ["../../x", "a/b", ".hidden", "x y", "ok\n", ""])
def test_bad_recipe_names_rejected(write_recipe, base_recipe, name):
    p = write_recipe(with_changes(base_recipe, name=name))
    rule = "letters, digits and `._-`, starting with a letter or digit, e.g. `jsquad-vllm-fp8`"
    why = f"name: {name!r} is not a valid name: {rule}"
    assert_user_error(check(p), f"Error: {{tmp}}/recipe.yaml: invalid recipe\n  line 1, {why}\n")


def test_path_traversal_name_rejected_by_go(write_recipe, base_recipe, tmp_path):
    out_dir = tmp_path / "a" / "b" / "reports"
    r = invoke("go", write_recipe(with_changes(base_recipe, name="../../x")), "--out", out_dir)
    assert_user_error(
        r,
        "Error: {tmp}/recipe.yaml: invalid recipe\n"
        "  line 1, name: '../../x' is not a valid name: letters, digits and `._-`, starting with a "
        "letter or digit, e.g. `jsquad-vllm-fp8`\n",
    )
    assert not (tmp_path / "a" / "x").exists() and not out_dir.exists()


def test_two_recipes_with_same_name(write_recipe, base_recipe):
    p1 = write_recipe(base_recipe, name="one.yaml")
    p2 = write_recipe(base_recipe, name="two.yaml")
    out = user_error(check(p1, p2))  # the first file is fine, the second's name clashes with it
    assert out.startswith("ok {tmp}/one.yaml: t — transformers")
    assert out.endswith(
        "Error: {tmp}/two.yaml: name: two recipes are named 't': {tmp}/one.yaml and "
        "{tmp}/two.yaml; names must be unique in one call (they name the report folders)\n\n1 of 2 "
        "files have errors\n"
    )


def test_two_recipes_with_same_name_in_go(write_recipe, base_recipe, tmp_path):
    p1 = write_recipe(base_recipe, name="one.yaml")
    p2 = write_recipe(base_recipe, name="sub/one.yaml")
    out_dir = tmp_path / "reports"
    assert_user_error(
        invoke("go", p1, p2, "--out", out_dir),
        "Error: name: two recipes are named 't': {tmp}/one.yaml and {tmp}/sub/one.yaml; names must "
        "be unique in one call (they name the report folders)\n",
    )
    assert not out_dir.exists()


def test_same_file_twice_is_not_a_duplicate(write_recipe, base_recipe):
    p = write_recipe(base_recipe)
    r = check(p, p)
    assert r.exit_code == 0, r.output
    assert r.output.count("first prompt:") == 1


def test_go_baseline_naming_no_recipe(write_recipe, base_recipe, tmp_path):
    out_dir = tmp_path / "reports"
    r = invoke("go", write_recipe(base_recipe), "--out", out_dir, "--baseline", "nosuch")
    assert_user_error(
        r,
        "Error: --baseline 'nosuch' names no recipe of this call; recipes: t\n",
    )
    assert not out_dir.exists()


# --------------------------------------------------------------------------- files


def test_empty_file(write_recipe):
    assert_user_error(
        check(write_recipe("")),
        "Error: {tmp}/recipe.yaml: file is empty; a recipe needs at least name, model, engine, "
        "dataset, prompt\n",
    )


def test_whitespace_only_file(write_recipe):
    assert_user_error(
        check(write_recipe("\n   \n")),
        "Error: {tmp}/recipe.yaml: file is empty; a recipe needs at least name, model, engine, "
        "dataset, prompt\n",
    )


def test_non_utf8_file(write_recipe):
    p = write_recipe(b"name: \xff\xfe caf\xe9\n")
    assert_user_error(
        check(p),
        "Error: {tmp}/recipe.yaml: not UTF-8 text (bad byte at offset 6)\n  hint: save the recipe "
        "as UTF-8\n",
    )


def test_yaml_syntax_error_has_line_number(write_recipe):
    text = "name: x\nmodel:\n  id: [a\n  b: c\n"
    p = write_recipe(text)
    assert_user_error(
        check(p),
        "Error: {tmp}/recipe.yaml:4: YAML syntax error: expected ',' or ']', but got ':' (while "
        "parsing a flow sequence on line 3)\n",
    )


def test_a_yaml_error_without_a_context_is_said_too(write_recipe):
    """`a: b: c` has no context mark: found in review, it ended in a TypeError traceback."""
    assert_user_error(
        check(write_recipe("name: a: b\n")),
        "Error: {tmp}/recipe.yaml:1: YAML syntax error: mapping values are not allowed here\n",
    )


def test_yaml_that_is_not_a_mapping(write_recipe):
    assert_user_error(
        check(write_recipe("- a\n- b\n")),
        "Error: {tmp}/recipe.yaml: a recipe must be a mapping of keys, got list\n"
        "  hint: a recipe is a .yaml file of settings; a dataset is named in a recipe's "
        "`dataset.path`\n",
    )


def test_recipe_file_not_found(tmp_path):
    assert_user_error(
        check(tmp_path / "nope.yaml"),
        "Error: {tmp}/nope.yaml: file not found\n",
    )


def test_glob_matching_nothing(tmp_path):
    assert_user_error(
        check(str(tmp_path / "nomatch-*.yaml")),
        "Error: {tmp}/nomatch-*.yaml: glob matches no file\n",
    )


def test_glob_expands(write_recipe, base_recipe, tmp_path):
    write_recipe(with_changes(base_recipe, name="a"), name="g-a.yaml")
    write_recipe(with_changes(base_recipe, name="b"), name="g-b.yaml")
    r = check(str(tmp_path / "g-*.yaml"))
    assert r.exit_code == 0, r.output
    assert r.output.count("first prompt:") == 2


def test_folder_without_recipes(tmp_path):
    (tmp_path / "empty").mkdir()
    assert_user_error(
        check(tmp_path / "empty"),
        "Error: {tmp}/empty: folder has no .yaml/.yml recipes\n",
    )


# --------------------------------------------------------------------------- templates


def test_missing_template_file(write_recipe, base_recipe):
    p = write_recipe(with_changes(base_recipe, prompt={"template": "missing.j2"}))
    assert_user_error(
        check(p),
        "Error: {tmp}/recipe.yaml: prompt.template: template not found: 'missing.j2' (looked "
        "beside the recipe and in templates/)\n",
    )


def test_a_template_name_too_long_for_the_file_system_is_not_found_in_one_line(
    write_recipe, base_recipe
):
    """Issue 42: a 5,000-character value gave an OSError traceback (file name too long)."""
    p = write_recipe(with_changes(base_recipe, prompt={"template": "x" * 5000}))
    assert_user_error(
        check(p),
        "Error: {tmp}/recipe.yaml: prompt.template: template not found: "
        f"{'x' * 100!r}... (5,000 characters) (looked beside the recipe and in templates/)\n",
    )


def test_missing_system_template_file(write_recipe, base_recipe):
    p = write_recipe(with_changes(base_recipe, prompt={"system_template": "nosys.j2"}))
    assert_user_error(
        check(p),
        "Error: {tmp}/recipe.yaml: prompt.system_template: template not found: 'nosys.j2' (looked "
        "beside the recipe and in templates/)\n",
    )


def test_template_syntax_error(write_recipe, base_recipe, tmp_path):
    (tmp_path / "bad.j2").write_text("Question: {{ question \n", encoding="utf-8")
    p = write_recipe(with_changes(base_recipe, prompt={"template": "bad.j2"}))
    assert_user_error(
        check(p),
        "Error: {tmp}/recipe.yaml: prompt.template: {tmp}/bad.j2 line 1: syntax error: unexpected "
        "end of template, expected 'end of print statement'.\n",
    )


def test_template_undefined_variable(write_recipe, base_recipe, tmp_path):
    (tmp_path / "undef.j2").write_text("Question: {{ questoin }}\n", encoding="utf-8")
    p = write_recipe(with_changes(base_recipe, prompt={"template": "undef.j2"}))
    assert_user_error(
        check(p),
        "Error: {tmp}/recipe.yaml: prompt.template: {tmp}/undef.j2 (example 'demo-0001'): "
        "undefined variable: 'questoin' is undefined\n"
        "  hint: did you mean `question`? available: answers, context, example, id, question, "
        "shots (a dataset's other columns are not passed: map one to question or context)\n",
    )
    # a dataset column the template reads through `example` (found by a tester)
    (tmp_path / "undef.j2").write_text("{{ example.category }}: {{ question }}\n")
    assert_user_error(
        check(p),
        "Error: {tmp}/recipe.yaml: prompt.template: {tmp}/undef.j2 (example 'demo-0001'): "
        "undefined variable: 'dict object' has no attribute 'category'\n"
        "  hint: available: answers, context, example, id, question, shots (a dataset's other "
        "columns are not passed: map one to question or context)\n",
    )


def test_template_by_absolute_path(write_recipe, base_recipe, tmp_path):
    t = tmp_path / "elsewhere" / "mine.j2"
    t.parent.mkdir()
    t.write_text("Q={{ question }}", encoding="utf-8")
    p = write_recipe(with_changes(base_recipe, prompt={"template": str(t)}), name="r/recipe.yaml")
    r = check(p)
    assert r.exit_code == 0, r.output
    assert "[user] Q=" + first_demo_question() in r.output


def test_template_sandbox_escape_refused(write_recipe, base_recipe, tmp_path):
    (tmp_path / "esc.j2").write_text("{{ cycler.__init__.__globals__ }}", encoding="utf-8")
    p = write_recipe(with_changes(base_recipe, prompt={"template": "esc.j2"}))
    out = assert_user_error(
        check(p),
        "Error: {tmp}/recipe.yaml: prompt.template: {tmp}/esc.j2 (example 'demo-0001'): unsafe "
        "operation refused by the sandbox: access to attribute '__init__' of 'type' object is "
        "unsafe.\n",
    )
    assert "<module" not in out and "__builtins__" not in out


def test_template_runtime_error_is_a_user_error(write_recipe, base_recipe, tmp_path):
    (tmp_path / "te.j2").write_text("Q {{ question + 1 }}", encoding="utf-8")
    p = write_recipe(with_changes(base_recipe, prompt={"template": "te.j2"}))
    assert_user_error(
        check(p),
        "Error: {tmp}/recipe.yaml: prompt.template: {tmp}/te.j2 (example 'demo-0001'): error while "
        'rendering: TypeError: can only concatenate str (not "int") to str\n',
    )


# --------------------------------------------------------------------------- datasets


def test_dataset_file_missing(write_recipe, base_recipe):
    p = write_recipe(with_changes(base_recipe, dataset={"path": "nothere.json"}))
    assert_user_error(
        check(p),
        "Error: {tmp}/recipe.yaml: dataset.path: dataset file not found: {tmp}/nothere.json\n"
        "  hint: paths in a recipe are relative to the recipe file (typed with --set: to this "
        "folder)\n",
    )


def test_dataset_file_missing_through_go(write_recipe, base_recipe, tmp_path):
    out_dir = tmp_path / "reports"
    p = write_recipe(with_changes(base_recipe, dataset={"path": "nothere.json"}))
    assert_user_error(
        invoke("go", p, "--out", out_dir),
        "Error: {tmp}/recipe.yaml: dataset.path: dataset file not found: {tmp}/nothere.json\n"
        "  hint: paths in a recipe are relative to the recipe file (typed with --set: to this "
        "folder)\n",
    )
    assert not out_dir.exists()


def test_dataset_file_empty(write_recipe, base_recipe, tmp_path):
    (tmp_path / "empty.json").write_text("")
    p = write_recipe(with_changes(base_recipe, dataset={"path": "empty.json"}))
    assert_user_error(
        check(p),
        "Error: {tmp}/recipe.yaml: dataset.path: dataset file is empty: {tmp}/empty.json\n"
        "  hint: point dataset.path at the file that holds the examples\n",
    )


def test_dataset_path_is_a_folder(write_recipe, base_recipe, tmp_path):
    (tmp_path / "dir.json").mkdir()
    p = write_recipe(with_changes(base_recipe, dataset={"path": "dir.json"}))
    assert_user_error(
        check(p),
        "Error: {tmp}/recipe.yaml: dataset.path: dataset path is a folder, not a file: "
        "{tmp}/dir.json\n  hint: point dataset.path at a file inside it, or read a dataset folder "
        "with format: hub (its files are the split `train` unless it names others: set "
        "dataset.split)\n",
    )


def test_dataset_lacking_mapped_field(write_recipe, base_recipe, tmp_path):
    (tmp_path / "d.jsonl").write_text(json.dumps({"q": "a", "context": "c", "answers": "x"}) + "\n")
    p = write_recipe(
        with_changes(
            base_recipe,
            dataset={"format": "jsonl", "path": "d.jsonl", "fields": {"question": "nope"}},
        )
    )
    assert_user_error(
        check(p),
        "Error: {tmp}/recipe.yaml: dataset.fields.question: row 0 has no column 'nope' (mapped to "
        "`question`); columns: 'answers', 'context', 'q'\n",
    )
    # a near name is offered (found by a tester: `Frage ` with its trailing space, `Gold`)
    p = write_recipe(
        with_changes(
            base_recipe,
            dataset={
                "format": "jsonl",
                "path": "d.jsonl",
                "fields": {"question": "q", "answers": "answer"},
            },
        )
    )
    assert_user_error(
        check(p),
        "Error: {tmp}/recipe.yaml: dataset.fields.answers: row 0 has no column 'answer' (mapped to "
        "`answers`); columns: 'answers', 'context', 'q'\n  hint: map fields.answers to 'answers'\n",
    )


def test_dataset_unreadable_as_format(write_recipe, base_recipe, tmp_path):
    (tmp_path / "bad.jsonl").write_text("{not json\n")
    p = write_recipe(with_changes(base_recipe, dataset={"format": "jsonl", "path": "bad.jsonl"}))
    assert_user_error(
        check(p),
        "Error: {tmp}/recipe.yaml: dataset.format: cannot read bad.jsonl as jsonl: line 1 is not "
        "valid JSON: Expecting property name enclosed in double quotes (column 2)\n"
        "  hint: each line of a JSONL file must be one complete JSON object; fix or delete that "
        "line\n",
    )


def test_dataset_unknown_format(write_recipe, base_recipe):
    p = write_recipe(with_changes(base_recipe, dataset={"format": "xml"}))
    assert_user_error(
        check(p),
        "Error: {tmp}/recipe.yaml: invalid recipe\n"
        "  line 8, dataset.format: Input should be 'squad', 'json', 'jsonl', 'csv', 'parquet' or "
        "'hub' (got 'xml')\n",
    )


# --------------------------------------------------------------------------- presentation


def test_error_prefix_is_not_doubled(write_recipe):
    r = check(write_recipe(""))
    assert r.exit_code == 2
    assert "Error: Error:" not in r.output
    assert r.output.startswith("Error: ")


def test_a_stop_string_written_unquoted_as_backslash_n_is_refused_with_the_fix(
    write_recipe, base_recipe
):
    """Issue 42: `stop: [\\n]` unquoted in YAML (or through --set) is a backslash and an n, never
    in an output: `check` said ok and the stop never matched."""
    text = yaml.safe_dump({**base_recipe, "sampling": {"max_tokens": 8}}, sort_keys=False)
    path = write_recipe(text.replace("max_tokens: 8", "max_tokens: 8\n  stop: [\\n]"))
    out = assert_user_error(
        check(path),
        "Error: {tmp}/recipe.yaml: invalid recipe\n"
        "  line 15, sampling.stop: '\\\\n' holds a backslash and a letter ('\\\\n'), not a newline "
        "or tab: YAML reads escapes only in double quotes; write stop: [\"\\n\"] (got ['\\\\n'])\n",
    )
    assert out
    fixed = write_recipe(text.replace("max_tokens: 8", 'max_tokens: 8\n  stop: ["\\n"]'), "ok.yaml")
    assert check(fixed).exit_code == 0
    assert (
        check(write_recipe(base_recipe, "s.yaml"), extra=("--set", "sampling.stop=[\\t]")).exit_code
        == 2
    )


def test_set_without_an_equals_sign_is_named_before_its_value_is_taken_for_a_file(
    write_recipe, base_recipe
):
    """Issue 42: `--set sampling.max_tokens 32` said `32: file not found`."""
    path = write_recipe(base_recipe)
    expected = (
        "Error: --set: 'sampling.max_tokens': expected dotted.key=value\n"
        "  hint: write --set key.path=value, e.g. --set sampling.max_tokens=64\n"
    )
    assert_user_error(invoke("check", path, "--set", "sampling.max_tokens", "32"), expected)
    assert_user_error(invoke("go", path, "--set", "sampling.max_tokens", "32"), expected)


def test_an_empty_or_malformed_model_id_is_refused_by_check_not_a_traceback(
    write_recipe, base_recipe
):
    """Issue 42: `model.id: ''` passed check; a malformed hub id gave a traceback."""
    path = write_recipe(base_recipe)
    assert_user_error(
        check(path, extra=("--set", "model.id=")),
        "Error: {tmp}/recipe.yaml: invalid recipe\n"
        "  model.id: String should have at least 1 character (got '')\n",
    )
    assert_user_error(
        check(path, extra=("--set", "model.id=a b/c d")),
        "Error: {tmp}/recipe.yaml: model.id: 'a b/c d' is not a hub id (Repo id must use "
        "alphanumeric chars, '-', '_' or '.') (given by this call: model.id=a b/c d)\n"
        "  hint: give a hub id (needs network) or an existing local folder; --model-path "
        "HUB_ID=PATH maps hub ids to folders\n",
    )


@pytest.mark.parametrize("item", ["base=other.yaml", "matrix.x=1", "tune.budget.max_s=100"])
def test_set_of_a_files_own_key_says_so(write_recipe, base_recipe, item):
    """Issue 42: `--set base=...` said "no such key; did you mean 'base'?", `--set matrix.x=1`
    "unknown key 'matrix'; did you mean 'matrix'?"."""
    top = item.split(".")[0].split("=")[0]
    assert_user_error(
        check(write_recipe(base_recipe), extra=("--set", item)),
        f"Error: --set: {item!r}: `{top}` is the file's own key, read before --set applies\n"
        "  hint: edit the file, or write one that builds on it with `base:`; --only picks a "
        "study's cells\n",
    )


def test_a_recipes_estimate_of_one_example_is_refused_as_go_refuses_it(write_recipe, base_recipe):
    """Issue 42: `estimate: 1` was accepted in a recipe while `--estimate 1` was refused."""
    assert_user_error(
        check(write_recipe({**base_recipe, "estimate": 1})),
        "Error: {tmp}/recipe.yaml: invalid recipe\n"
        "  line 19, estimate: Input should be greater than or equal to 2 (got 1)\n",
    )


def test_a_bad_value_given_with_set_names_no_line_of_the_file(write_recipe, base_recipe):
    """Found by a tester: `--set 'sampling.stop=[a, ""]'` was reported at the file's `sampling:`
    line, which did not say it."""
    path = write_recipe(base_recipe)
    out = user_error(check(path, extra=("--set", 'sampling.stop=[a, ""]')))
    assert "\n  sampling.stop.1: String should have at least 1 character" in out, out
    assert "line " not in out.split("\n", 1)[1], out


def test_one_value_where_a_list_goes_shows_the_list_of_it(write_recipe, base_recipe):
    """Found by a tester: `cut_at: "\\n"` and `--set sampling.stop=foo` got pydantic's bare 'Input
    should be a valid list'; `metrics` alone showed the fix."""
    path = write_recipe(with_changes(base_recipe, scoring={"postprocess": {"cut_at": "\n"}}))
    assert 'scoring.postprocess.cut_at: expected a list, e.g. `cut_at: ["\\n"]`\n' in user_error(
        check(path)
    )
    out = user_error(check(write_recipe(base_recipe), extra=("--set", "sampling.stop=foo")))
    assert "sampling.stop: expected a list, e.g. `stop: [foo]`\n" in out, out
    # on review: `a, b` is two items; an item YAML would read as another type stays quoted
    path = write_recipe(with_changes(base_recipe, metrics="exact_match, char_f1"))
    assert "metrics: expected a list, e.g. `metrics: [exact_match, char_f1]`\n" in user_error(
        check(path)
    )
    path = write_recipe(with_changes(base_recipe, sampling={"max_tokens": 8, "stop": "1"}))
    assert 'sampling.stop: expected a list, e.g. `stop: ["1"]`\n' in user_error(check(path))


def test_a_missing_model_folder_the_call_gave_says_the_call_gave_it(write_recipe, base_recipe):
    """Found by a tester: `--model-path ID=/nonexistent` was reported as the recipe file's
    `model.id`, which names a hub id."""
    d = with_changes(base_recipe, model={"id": "org/big"})
    out = user_error(check(write_recipe(d), extra=("--model-path", "org/big=/nonexistent")))
    assert out.startswith(
        "Error: {tmp}/recipe.yaml: model.id: model folder not found: /nonexistent (given by this "
        "call: model.id=/nonexistent)\n"
    ), out
