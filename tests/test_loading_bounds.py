"""Loading (issue 11): `--set` values typed by the field they set, and YAML that escapes every bound
(alias bombs, deep nesting, huge files) refused in seconds with a message naming the file.

The hostile files are loaded in a child process with a timeout, so a regression fails instead of
hanging."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from runner import load_recipe, load_recipes
from runner.base.errors import RecipeError

PROJECT = Path(__file__).resolve().parents[1]


def error(fn, *a, **kw) -> RecipeError:
    with pytest.raises(RecipeError) as e:
        fn(*a, **kw)
    return e.value


def load_in_child(path: Path, timeout: float = 60) -> tuple[dict, float]:
    """load_recipe(path) in a fresh interpreter: the RecipeError's parts, and the seconds it
    took."""
    code = (
        "import json, sys, time\n"
        "from runner import load_recipe\n"
        "from runner.base.errors import RecipeError\n"
        "t = time.perf_counter()\n"
        "try:\n"
        "    load_recipe(sys.argv[1]); out = {'ok': True}\n"
        "except RecipeError as e:\n"
        "    out = {'message': e.message, 'file': e.file, 'line': e.line, 'hint': e.hint}\n"
        "out['seconds'] = time.perf_counter() - t\n"
        "print(json.dumps(out))\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, str(path)],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    return out, out.pop("seconds")


# --------------------------------------------------------------------------- --set typed by the
# field


def test_set_text_fields_are_taken_as_written(write_recipe, base_recipe):
    p = write_recipe(base_recipe)
    lr = load_recipe(
        p,
        [
            "prompt.system_template=null",
            "prompt.system=#1 rule: be brief",
            "name=2024",
            "description=yes",
            "model.revision=0123",
            "engine.quantization=bitsandbytes-4bit",
        ],
    )
    assert lr.recipe.prompt.system == "#1 rule: be brief"  # YAML would read a comment: null
    assert lr.recipe.name == "2024"  # YAML would read a number
    assert lr.recipe.description == "yes"  # YAML 1.1 would read a boolean
    assert lr.recipe.model.revision == "0123"  # YAML would read 123
    assert lr.recipe.engine.quantization == "bitsandbytes-4bit"  # a Literal of strings


def test_set_text_keeps_spaces_and_colons(write_recipe, base_recipe):
    lr = load_recipe(
        write_recipe(base_recipe), ["prompt.system_template=~", "prompt.system=  a: b  "]
    )
    assert lr.recipe.prompt.system == "  a: b  "


def test_set_null_still_clears_a_nullable_text_field(write_recipe, base_recipe):
    p = write_recipe(base_recipe)
    assert load_recipe(p, ["prompt.system_template=null"]).recipe.prompt.system_template is None
    assert load_recipe(p, ["prompt.system_template=~"]).recipe.prompt.system_template is None


def test_set_values_of_a_text_mapping_are_text(write_recipe, base_recipe):
    base_recipe["engine"] = {"kind": "vllm"}
    lr = load_recipe(write_recipe(base_recipe), ["engine.env.VLLM_USE_V2_MODEL_RUNNER=0"])
    assert lr.recipe.engine.env == {"VLLM_USE_V2_MODEL_RUNNER": "0"}


def test_set_other_fields_still_parse_yaml(write_recipe, base_recipe):
    base_recipe["engine"] = {"kind": "vllm"}
    lr = load_recipe(
        write_recipe(base_recipe),
        [
            "sampling.max_tokens=5",
            "sampling.temperature=0.5",
            "sampling.ignore_eos=true",
            "sampling.stop=[a, b]",
            "engine.engine_args={max_num_seqs: 32}",
            "engine.engine_args.block_size=16",
        ],
    )
    s = lr.recipe.sampling
    assert (s.max_tokens, s.temperature, s.ignore_eos, s.stop) == (5, 0.5, True, ["a", "b"])
    assert lr.recipe.engine.engine_args == {"max_num_seqs": 32, "block_size": 16}


def test_set_text_depends_on_the_engine_kind(write_recipe, base_recipe):
    """`engine.quantization` is a Literal for transformers and free text for vLLM: both take text as
    written."""
    base_recipe["engine"] = {"kind": "vllm"}
    lr = load_recipe(
        write_recipe(base_recipe), ["engine.quantization=fp8", "engine.kv_cache_dtype=fp8"]
    )
    assert (lr.recipe.engine.quantization, lr.recipe.engine.kv_cache_dtype) == ("fp8", "fp8")


def test_set_number_for_a_number_field_is_still_checked(write_recipe, base_recipe):
    e = error(load_recipe, write_recipe(base_recipe), ["sampling.max_tokens=many"])
    assert "sampling.max_tokens: Input should be a valid integer" in e.message


@pytest.mark.parametrize(
    "item, message",
    [
        ("", "'': expected dotted.key=value"),
        ("=1", "'=1': the key before '=' is empty; expected dotted.key=value"),
        (" =1", "' =1': the key before '=' is empty; expected dotted.key=value"),
        ("a..b=1", "'a..b=1': 'a..b' is not a dotted key (empty part)"),
        ("sampling.=1", "'sampling.=1': 'sampling.' is not a dotted key (empty part)"),
    ],
)
def test_set_without_a_key_is_a_clear_error(write_recipe, base_recipe, item, message):
    e = error(load_recipe, write_recipe(base_recipe), [item])
    assert (e.message, e.field) == (message, "--set")


def test_set_still_reports_unknown_keys(write_recipe, base_recipe):
    e = error(load_recipe, write_recipe(base_recipe), ["sampling.max_token=5"])
    assert "--set sampling.max_token: no such key; did you mean 'max_tokens'?" in e.message


# --------------------------------------------------------------------------- hostile YAML


def billion_laughs(levels: int = 9, width: int = 10) -> str:
    lines = ['a0: &a0 "lol"']
    for i in range(1, levels + 1):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    return "\n".join(lines) + f"\nname: *a{levels}\n"


def test_alias_bomb_is_refused_fast(write_recipe):
    text = billion_laughs()
    assert len(text.encode()) < 1000  # 10**9 values from under a kilobyte
    p = write_recipe(text)
    err, seconds = load_in_child(p)
    assert err["message"].startswith(
        "the YAML holds more than 100,000 values once its aliases (*name) are expanded"
    )
    assert err["file"] == str(p) and err["line"] is not None
    assert seconds < 5


def test_merge_key_bomb_is_refused(write_recipe):
    lines = ["m0: &m0 {a: 1, b: 2, c: 3}"]
    for i in range(1, 16):
        lines.append(f"m{i}: &m{i} {{<<: [*m{i - 1}, *m{i - 1}, *m{i - 1}], k{i}: 1}}")
    err, seconds = load_in_child(write_recipe("\n".join(lines) + "\nname: x\n"))
    assert "values once its aliases" in err["message"] and seconds < 5


def test_recursive_alias_is_refused(write_recipe):
    p = write_recipe("name: t\nloop: &x [1, *x]\n")
    e = error(load_recipe, p)
    assert e.message.startswith("an alias (*name) refers to a mapping or list that contains it")
    assert (e.file, e.line) == (str(p), 2)


@pytest.mark.parametrize(
    "text, line",
    [
        ("x: " + "[" * 100_000 + "]" * 100_000 + "\n", 1),
        ("x: " + "{a: " * 5000 + "1" + "}" * 5000 + "\n", 1),
        ("".join(" " * i + f"k{i}:\n" for i in range(300)) + " " * 300 + "v\n", 50),
    ],
    ids=["flow-lists", "flow-maps", "block-maps"],
)
def test_deep_nesting_is_refused_fast(write_recipe, text, line):
    p = write_recipe(text)
    err, seconds = load_in_child(p)
    assert err["message"] == "nested more than 50 levels deep; a recipe needs fewer than 10"
    assert (err["file"], err["line"]) == (str(p), line)
    assert seconds < 5


def test_nesting_within_the_bound_loads(write_recipe, base_recipe):
    base_recipe["engine"] = {
        "kind": "vllm",
        "engine_args": {"deep": json.loads("[" * 40 + "]" * 40)},
    }
    assert load_recipe(write_recipe(yaml.safe_dump(base_recipe))).recipe.engine.engine_args["deep"]


def test_huge_file_is_refused_without_reading_it_all(write_recipe, tmp_path):
    p = tmp_path / "huge.yaml"
    with p.open("w") as f:
        f.write("name: t\ndescription: '")
        f.write("x" * (64 << 20))  # 64 MiB
        f.write("'\n")
    t = time.perf_counter()
    e = error(load_recipe, p)
    assert e.message == "file is larger than 1 MiB; a recipe is a few kilobytes" and e.file == str(
        p
    )
    assert time.perf_counter() - t < 2


def test_file_just_under_the_size_cap_loads(write_recipe, base_recipe):
    base_recipe["description"] = "x" * ((1 << 20) - 1000)
    assert load_recipe(write_recipe(base_recipe)).recipe.description.startswith("xxx")


def test_integer_with_too_many_digits_is_a_recipe_error(write_recipe):
    e = error(load_recipe, write_recipe("name: t\nestimate: " + "9" * 5000 + "\n"))
    assert e.message.startswith("YAML value cannot be read")


def test_comment_only_file(write_recipe):
    e = error(load_recipe, write_recipe("# nothing here\n"))
    assert e.message.startswith("file holds no YAML")


def test_duplicate_keys_are_checked_once_per_shared_node(write_recipe):
    p = write_recipe("a: &a {x: 1, y: 2}\nb: [*a, *a, *a]\nname: t\nname: u\n")
    e = error(load_recipe, p)
    assert (e.message, e.line) == (
        "key 'name' appears twice (first on line 3); the second would silently replace the first",
        4,
    )


def test_study_bounds_apply_to_base_files(write_recipe, base_recipe):
    write_recipe(billion_laughs(), "bomb.yaml")
    p = write_recipe({**base_recipe, "base": "bomb.yaml"})
    e = error(load_recipes, p)
    assert e.file.endswith("bomb.yaml") and "values once its aliases" in e.message
