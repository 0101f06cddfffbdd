"""Study files (issue 12): `base:` chains, `matrix` x `variants` expansion, labels and names,
`exclude`, `abstract` base-only files, `--set` on every cell, and the project's JSQuAD study.
Loading only: nothing runs."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from runner import load_recipe, load_recipes
from runner.base.errors import RecipeError
from runner.cli import cli
from runner.inputs.prepare import prepare

PROJECT = Path(__file__).resolve().parents[1]


def study(base_recipe: dict, **keys) -> dict:
    d = copy.deepcopy(base_recipe)
    d.update(keys)
    return d


def names(loaded) -> list[str]:
    return [lr.recipe.name for lr in loaded]


def error(fn, *a, **kw) -> RecipeError:
    with pytest.raises(RecipeError) as e:
        fn(*a, **kw)
    return e.value


# --------------------------------------------------------------------------- base chains


def test_base_chain_merges_mappings_and_replaces_lists(write_recipe, base_recipe):
    grand = copy.deepcopy(base_recipe)
    del grand["name"]
    grand["abstract"] = True
    grand["sampling"] = {"temperature": 0, "max_tokens": 16, "stop": ["a", "b"]}
    write_recipe(grand, "grand.yaml")
    write_recipe(
        {"base": "grand.yaml", "sampling": {"stop": ["c"]}, "metrics": ["exact_match"]}, "mid.yaml"
    )
    p = write_recipe(
        {"base": "mid.yaml", "name": "child", "sampling": {"max_tokens": 8}}, "child.yaml"
    )
    lr = load_recipe(p)
    s = lr.recipe.sampling
    assert (s.temperature, s.max_tokens, s.stop) == (0, 8, ["c"])
    assert lr.recipe.metrics == ["exact_match"]  # a list is replaced, not appended to
    assert lr.recipe.engine.kind == "transformers" and lr.recipe.model.id == "builtin:demo"
    assert lr.cell is None
    assert lr.path == str(p.resolve())


def test_abstract_is_not_inherited(write_recipe, base_recipe):
    write_recipe({**base_recipe, "abstract": True}, "b.yaml")
    p = write_recipe({"base": "b.yaml", "name": "real"}, "r.yaml")
    assert names(load_recipes(p)) == ["real"]


def test_base_cycle_names_the_files(write_recipe, base_recipe, tmp_path):
    write_recipe({**base_recipe, "base": "b.yaml"}, "a.yaml")
    write_recipe({"base": "a.yaml"}, "b.yaml")
    e = error(load_recipe, tmp_path / "a.yaml")
    a, b = (tmp_path / "a.yaml").resolve(), (tmp_path / "b.yaml").resolve()
    assert e.message == f"base chain loops: {a} -> {b} -> {a}"
    assert e.field == "base" and e.file == str(tmp_path / "b.yaml") and e.line == 1


def test_missing_base_names_both_files(write_recipe, base_recipe, tmp_path):
    p = write_recipe({**base_recipe, "base": "nope.yaml"})
    e = error(load_recipe, p)
    assert e.file == str(p) and e.field == "base"
    assert e.message == f"base file 'nope.yaml' not found (looked for {tmp_path / 'nope.yaml'})"
    assert e.hint is None  # nothing near it
    # found by a tester: a misspelt base got no hint
    write_recipe(base_recipe, "base.yaml")
    e = error(load_recipe, write_recipe({**base_recipe, "base": "bsae.yaml"}, "c.yaml"))
    assert e.hint == "did you mean 'base.yaml'?"
    # on review: never the file itself (a loop)
    (sub := tmp_path / "sub").mkdir()
    (p := sub / "qa-fast.yaml").write_text(yaml.safe_dump({**base_recipe, "base": "qa-fase.yaml"}))
    assert error(load_recipe, p).hint is None


def test_error_inside_a_base_names_the_base(write_recipe, base_recipe):
    write_recipe("name: [unclosed\n", "broken.yaml")
    p = write_recipe({**base_recipe, "base": "broken.yaml"})
    e = error(load_recipe, p)
    assert e.file.endswith("broken.yaml") and "YAML syntax error" in e.message


def test_paths_in_a_base_are_relative_to_the_base(write_recipe, base_recipe, tmp_path, demo_data):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "d.json").write_bytes(demo_data.read_bytes())
    shared = {
        **base_recipe,
        "abstract": True,
        "dataset": {"format": "squad", "path": "../data/d.json"},
    }
    write_recipe(shared, "common/base.yaml")
    p = write_recipe({"base": "../../common/base.yaml", "name": "x"}, "deep/er/r.yaml")
    lr = load_recipe(p)
    assert lr.recipe.dataset.path == "../../data/d.json"
    assert lr.resolve(lr.recipe.dataset.path).resolve() == (tmp_path / "data" / "d.json").resolve()
    assert lr.recipe.prompt.template == "jsquad.j2"  # a bare template name stays a name


def test_a_template_beside_the_base_is_the_bases_even_where_templates_has_one_of_its_name(
    write_recipe, base_recipe, tmp_path, demo_data
):
    """A base in another folder names `jsquad.j2` (a file beside it, and a project template of the
    same name) and `local.j2` (beside it only): a recipe built on it renders the base's own."""
    (tmp_path / "common").mkdir()
    (tmp_path / "common" / "jsquad.j2").write_text("MINE {{ question }}")
    (tmp_path / "common" / "local.j2").write_text("SYSTEM OF MINE")
    (tmp_path / "common" / "d.json").write_bytes(demo_data.read_bytes())
    prompt = {"template": "jsquad.j2", "system_template": "local.j2"}
    shared = {**base_recipe, "abstract": True, "prompt": prompt}
    write_recipe({**shared, "dataset": {"format": "squad", "path": "d.json"}}, "common/base.yaml")
    lr = load_recipe(write_recipe({"base": "../common/base.yaml", "name": "x"}, "sub/r.yaml"))
    assert (lr.recipe.prompt.template, lr.recipe.prompt.system_template) == (
        "../common/jsquad.j2",
        "../common/local.j2",
    )
    [first] = prepare(lr, limit=1).messages
    assert first[0]["content"] == "SYSTEM OF MINE" and first[1]["content"].startswith("MINE ")


def test_an_inline_template_in_a_base_elsewhere_is_no_file_name(write_recipe, base_recipe):
    """Found in review: a long inline template without a `/` made the look beside the base raise
    (a name too long for the file system)."""
    inline = "Question: {{ question }} Context: {{ context }} " * 20
    shared = {**base_recipe, "abstract": True, "prompt": {"template": inline}}
    write_recipe(shared, "common/base.yaml")
    lr = load_recipe(write_recipe({"base": "../common/base.yaml", "name": "x"}, "sub/r.yaml"))
    assert lr.recipe.prompt.template == inline


def test_line_numbers_point_into_the_base(write_recipe, base_recipe):
    write_recipe({**base_recipe, "abstract": True, "name": "b"}, "b.yaml")
    text = "base: b.yaml\nname: r\nsampling:\n  max_tokens: -1\n"
    e = error(load_recipe, write_recipe(text))
    assert "  line 4, sampling.max_tokens: Input should be greater than 0" in e.message


# --------------------------------------------------------------------------- matrix, labels, names


def test_matrix_expands_every_combination_with_names(write_recipe, base_recipe):
    p = write_recipe(
        study(
            base_recipe,
            matrix={
                "sampling.max_tokens": [8, 16],
                "engine.batch_size": [1, 4],
                "sampling.temperature": [0],
            },
        )
    )
    loaded = load_recipes(p)
    assert names(loaded) == [
        "t-max_tokens-8-batch_size-1",
        "t-max_tokens-8-batch_size-4",
        "t-max_tokens-16-batch_size-1",
        "t-max_tokens-16-batch_size-4",
    ]
    last = loaded[-1]
    assert (last.recipe.sampling.max_tokens, last.recipe.engine.batch_size) == (16, 4)
    assert last.cell.study == "t"
    # one-value axes do not vary
    assert last.cell.settings == {"sampling.max_tokens": 16, "engine.batch_size": 4}


def test_a_study_names_its_one_baseline_cell(write_recipe, base_recipe):
    grid = {"sampling.max_tokens": [8, 16]}
    p = write_recipe(study(base_recipe, matrix=grid, baseline="t-max_tokens-16"))
    assert [(lr.recipe.name, lr.recipe.baseline) for lr in load_recipes(p)] == [
        ("t-max_tokens-8", False),
        ("t-max_tokens-16", True),
    ]
    p = write_recipe(study(base_recipe, matrix=grid, baseline="t-16"))
    e = error(load_recipes, p)
    assert (
        e.render()
        == f"{p}: baseline: 't-16' names no cell of the study; its cells: t-max_tokens-8, "
        "t-max_tokens-16"
    )


def test_default_labels_of_text_bool_and_null(write_recipe, base_recipe):
    p = write_recipe(
        study(
            base_recipe,
            matrix={
                "prompt.template": ["jsquad.j2", "sub/other-layout.j2"],
                "sampling.ignore_eos": [False, True],
                "sampling.seed": [None, 3],
            },
        )
    )
    loaded = load_recipes(p)
    assert names(loaded)[0] == "t-jsquad-ignore_eos-off-seed-none"
    assert names(loaded)[-1] == "t-other-layout-ignore_eos-on-seed-3"
    assert len(loaded) == 8


def test_labels_name_the_values_and_an_empty_label_is_left_out(write_recipe, base_recipe):
    p = write_recipe(
        study(
            base_recipe,
            engine={"kind": "vllm"},
            matrix={
                "prompt.template": {"": "jsquad.j2", "cfirst": "other.j2"},
                "engine.engine_args": {"small": {"a": 1}, "big": {"a": 2, "b": [1, 2]}},
            },
        )
    )
    loaded = load_recipes(p)
    assert names(loaded) == ["t-small", "t-big", "t-cfirst-small", "t-cfirst-big"]
    assert loaded[3].cell.settings == {
        "prompt.template": "other.j2",
        "engine.engine_args": {"a": 2, "b": [1, 2]},
    }


def test_unlabelled_mapping_values_need_labels(write_recipe, base_recipe):
    p = write_recipe(study(base_recipe, matrix={"engine.engine_args": [{"a": 1}, {"a": 2}]}))
    e = error(load_recipes, p)
    assert (e.field, e.message) == (
        "matrix.engine.engine_args",
        "these values need labels to name the cells",
    )
    assert "{small: ..., big: ...}" in e.hint


def test_unquoted_on_off_labels_are_refused(write_recipe, base_recipe):
    text = yaml.safe_dump(base_recipe) + "matrix:\n  sampling.ignore_eos: {on: true, off: false}\n"
    e = error(load_recipes, write_recipe(text))
    assert e.field == "matrix.sampling.ignore_eos" and "quote it" in e.message


def test_name_collision_is_an_error(write_recipe, base_recipe):
    p = write_recipe(study(base_recipe, matrix={"prompt.template": ["a/x.j2", "b/x.j2"]}))
    e = error(load_recipes, p)
    assert e.message == "two values have the label 'x'"
    p = write_recipe(
        study(
            base_recipe,
            matrix={
                "prompt.template": {"": "a.j2", "b": "b.j2"},
                "sampling.max_tokens": {"": 8, "b": 9},
            },
        )
    )
    e = error(load_recipes, p)
    assert e.message.startswith(
        "two cells are named 't-b': (prompt.template=a.j2, sampling.max_tokens=9 (b)) "
        "and (prompt.template=b.j2, sampling.max_tokens=8)"
    )


def test_cell_name_too_long(write_recipe, base_recipe):
    p = write_recipe(study(base_recipe, name="s" * 95, matrix={"sampling.max_tokens": [8, 16]}))
    e = error(load_recipes, p)
    assert (
        "is not a valid recipe name" in e.message
        and f"cell name '{'s' * 95}-max_tokens-8'" in e.message
    )


def test_too_many_cells_is_refused_before_expanding(write_recipe, base_recipe):
    axes = {f"engine.engine_args.k{i}": list(range(10)) for i in range(12)}
    e = error(load_recipes, write_recipe(study(base_recipe, matrix=axes)))
    assert e.message.startswith(
        "the study makes 1,000,000,000,000 cells before `exclude`; at most 1,000"
    )


def test_overlapping_axes_are_refused(write_recipe, base_recipe):
    p = write_recipe(
        study(
            base_recipe,
            matrix={"engine.engine_args": {"a": {}, "b": {"x": 1}}, "engine.engine_args.x": [1, 2]},
        )
    )
    assert "overlap" in error(load_recipes, p).message


# --------------------------------------------------------------------------- keys


def test_unknown_dotted_key_suggests(write_recipe, base_recipe):
    e = error(load_recipes, write_recipe(study(base_recipe, matrix={"sampling.max_token": [1, 2]})))
    assert e.field == "matrix"
    assert e.message.startswith(
        "'sampling.max_token' is not a recipe field ('sampling' has no key 'max_token'); "
        "did you mean 'sampling.max_tokens'?"
    )
    e = error(
        load_recipes,
        write_recipe(study(base_recipe, variants={"v": {"engine.quantizaton": "fp8"}})),
    )
    assert e.field == "variants.v" and "did you mean 'engine.quantization'?" in e.message


def test_an_axis_of_a_sections_key_without_its_section_is_pointed_to_it(write_recipe, base_recipe):
    e = error(load_recipes, write_recipe(study(base_recipe, matrix={"max_tokens": [8, 16]})))
    assert e.field == "matrix" and e.message.startswith(
        "'max_tokens' is not a recipe field (a recipe has no key 'max_tokens'); did you mean "
        "'sampling.max_tokens'? Allowed here: baseline, "
    )


def test_free_form_mappings_take_any_subkey(write_recipe, base_recipe):
    r = study(
        base_recipe, engine={"kind": "vllm"}, matrix={"engine.engine_args.max_num_seqs": [32, 64]}
    )
    loaded = load_recipes(write_recipe(r))
    assert [lr.recipe.engine.engine_args for lr in loaded] == [
        {"max_num_seqs": 32},
        {"max_num_seqs": 64},
    ]


def test_a_cell_setting_below_a_plain_value_is_refused_naming_the_cell(write_recipe, base_recipe):
    engine = {"kind": "vllm", "engine_args": {"a": 5}}
    p = write_recipe(study(base_recipe, engine=engine, matrix={"engine.engine_args.a.b": [1, 2]}))
    e = error(load_recipes, p)
    assert (e.message, e.field) == (
        "cell 't-b-1': cannot set engine.engine_args.a.b: 'a' is not a mapping",
        "engine.engine_args.a.b",
    )


def test_invalid_cell_names_the_cell_and_field(write_recipe, base_recipe):
    p = write_recipe(study(base_recipe, matrix={"sampling.max_tokens": [8, 0]}))
    e = error(load_recipes, p)
    line = p.read_text().splitlines().index("  sampling.max_tokens:") + 1
    assert (
        e.message.splitlines()[0] == "cell 't-max_tokens-0' (sampling.max_tokens=0): invalid recipe"
    )
    assert f"  line {line}, sampling.max_tokens: Input should be greater than 0" in e.message


def test_engine_kind_decides_which_engine_keys_a_cell_may_set(write_recipe, base_recipe):
    r = study(
        base_recipe,
        engine={"kind": "vllm"},
        matrix={"engine.enable_prefix_caching": [False, True]},
        variants={"v": {}, "hf": {"engine.kind": "transformers"}},
    )
    e = error(load_recipes, write_recipe(r))
    assert e.message.startswith(
        "cell 't-hf-enable_prefix_caching-off' (variant=hf, engine.enable_prefix_caching=false): "
        "invalid recipe"
    )
    assert "engine.enable_prefix_caching: unknown key 'enable_prefix_caching'" in e.message
    # a variant that replaces the whole engine is off the engine axes
    r["variants"]["hf"] = {"engine": {"kind": "transformers", "device": "cpu"}}
    loaded = load_recipes(write_recipe(r))
    assert names(loaded) == [
        "t-v-enable_prefix_caching-off",
        "t-v-enable_prefix_caching-on",
        "t-hf",
    ]
    assert (
        loaded[2].cell.settings == {"variant": "hf"}
        and loaded[2].recipe.engine.kind == "transformers"
    )


# --------------------------------------------------------------------------- variants, exclude


def test_variants_times_grid_and_a_variant_fixes_its_own_axis(write_recipe, base_recipe):
    r = study(
        base_recipe,
        matrix={"sampling.max_tokens": [8, 16], "sampling.temperature": {"greedy": 0, "hot": 0.5}},
        variants={"a": None, "b": {"sampling.max_tokens": 5, "description": "five"}},
    )
    loaded = load_recipes(write_recipe(r))
    assert names(loaded) == [
        "t-a-max_tokens-8-greedy",
        "t-a-max_tokens-8-hot",
        "t-a-max_tokens-16-greedy",
        "t-a-max_tokens-16-hot",
        "t-b-greedy",
        "t-b-hot",
    ]
    b = loaded[-1]
    assert b.cell.settings == {
        "variant": "b",
        "sampling.max_tokens": 5,
        "sampling.temperature": 0.5,
    }
    assert (b.recipe.sampling.max_tokens, b.recipe.description) == (5, "five")


def test_one_variant_is_not_in_names_but_in_the_cell(write_recipe, base_recipe):
    loaded = load_recipes(
        write_recipe(study(base_recipe, variants={"only": {"sampling.max_tokens": 3}}))
    )
    assert names(loaded) == ["t"] and loaded[0].cell.settings == {"variant": "only"}


def test_exclude_by_value_label_and_variant(write_recipe, base_recipe):
    r = study(
        base_recipe,
        matrix={
            "sampling.max_tokens": {"short": 8, "long": 16},
            "sampling.ignore_eos": [False, True],
        },
        variants={"a": {}, "b": {}},
        exclude=[
            {"sampling.max_tokens": "long", "variant": "b"},
            {"sampling.ignore_eos": True, "variant": "a"},
        ],
    )
    assert names(load_recipes(write_recipe(r))) == [
        "t-a-short-ignore_eos-off",
        "t-a-long-ignore_eos-off",
        "t-b-short-ignore_eos-off",
        "t-b-short-ignore_eos-on",
    ]


def test_exclude_mistakes_are_named(write_recipe, base_recipe):
    r = study(
        base_recipe, matrix={"sampling.max_tokens": [8, 16]}, exclude=[{"sampling.max_token": 8}]
    )
    e = error(load_recipes, write_recipe(r))
    assert (e.field, e.message) == (
        "exclude[0]",
        "'sampling.max_token' is not an axis of this study; did you mean "
        "'sampling.max_tokens'? Axes: sampling.max_tokens",
    )
    r["exclude"] = [{"sampling.max_tokens": 9}]
    e = error(load_recipes, write_recipe(r))
    assert (
        e.message == "sampling.max_tokens: 9 is none of the axis's values: 8 (max_tokens-8), 16 "
        "(max_tokens-16)"
    )
    r["exclude"] = [{"sampling.max_tokens": 8}, {"sampling.max_tokens": 16}]
    assert error(load_recipes, write_recipe(r)).message == "`exclude` drops every cell of the study"


def test_an_axis_of_more_values_than_a_study_may_have_cells_is_refused_at_once(
    write_recipe, base_recipe
):
    """Issue 42: a 40,000-value axis took minutes (the pairwise check of repeated values) before
    the 1,000-cell limit refused it."""
    e = error(
        load_recipes,
        write_recipe(study(base_recipe, matrix={"sampling.seed": list(range(40_000))})),
    )
    assert e.field == "matrix.sampling.seed" and e.message == (
        "the axis has 40,000 values; a study makes at most 1,000 cells"
    )


def test_exclude_or_report_need_a_study(write_recipe, base_recipe):
    e = error(load_recipes, write_recipe(study(base_recipe, exclude=[{"variant": "x"}])))
    assert e.field == "exclude" and e.message.startswith("only a study")


def test_report_axes(write_recipe, base_recipe):
    r = study(
        base_recipe,
        matrix={"sampling.max_tokens": [8, 16]},
        variants={"a": {}, "b": {}},
        report={"rows": "variant", "columns": "sampling.max_tokens"},
    )
    cells = load_recipes(write_recipe(r))
    assert cells[1].cell.axes == {"rows": "variant", "columns": "sampling.max_tokens"}
    # default labels are not repeated in the cell's description (its error's title)
    bad = study(r, variants={"a": {"sampling.temperature": -1}, "b": {}})
    e = error(load_recipes, write_recipe(bad))
    assert e.message.startswith("cell 't-a-max_tokens-8' (variant=a, sampling.max_tokens=8): ")
    r["report"] = {"rows": "sampling.max_token"}
    e = error(load_recipes, write_recipe(r))
    assert e.field == "report.rows" and "did you mean 'sampling.max_tokens'?" in e.message
    # the axes: the matrix keys in file order, then `variant`
    assert e.message.endswith("Axes: sampling.max_tokens, variant")
    # issue 42: one axis on both sides was accepted
    r["report"] = {"rows": "variant", "columns": "variant"}
    e = error(load_recipes, write_recipe(r))
    assert e.field == "report" and e.message == (
        "rows and columns are both 'variant': a pivot needs two different axes"
    )


# --------------------------------------------------------------------------- plain recipes,
# abstract, --set


def test_plain_recipe_loads_as_before(write_recipe, base_recipe):
    p = write_recipe(base_recipe)
    assert load_recipes(p) == [load_recipe(p)] and load_recipe(p).cell is None
    assert load_recipe(p).recipe.canonical()["name"] == "t"


def test_base_only_file_is_skipped_but_still_checked(write_recipe, base_recipe):
    partial = {
        "abstract": True,
        "engine": {"kind": "vllm", "enforce_eager": True},
        "sampling": {"max_tokens": 8},
    }
    p = write_recipe(partial, "base.yaml")
    assert load_recipes(p) == []
    e = error(load_recipe, p)
    assert (
        e.message
        == "holds shared settings for other files' `base:` (abstract: true); it is not an "
        "experiment"
    )
    p = write_recipe({**partial, "sampling": {"max_tokns": 8}}, "typo.yaml")
    e = error(load_recipes, p)
    assert (
        "invalid base file (abstract: true)" in e.message
        and "did you mean 'max_tokens'?" in e.message
    )


def test_a_nameless_file_hints_at_abstract(write_recipe, base_recipe):
    d = copy.deepcopy(base_recipe)
    del d["name"]
    e = error(load_recipes, write_recipe(d))
    assert "name: required field is missing" in e.message and "abstract: true" in e.hint


def test_load_recipe_refuses_a_study(write_recipe, base_recipe):
    p = write_recipe(study(base_recipe, matrix={"sampling.max_tokens": [8, 16]}))
    assert error(load_recipe, p).message == (
        "is a study of 2 experiments (t-max_tokens-8, t-max_tokens-16); load it with load_recipes"
    )


def test_set_applies_to_every_cell(write_recipe, base_recipe):
    p = write_recipe(
        study(base_recipe, matrix={"sampling.max_tokens": [8, 16]}, variants={"a": {}, "b": {}})
    )
    loaded = load_recipes(p, ["sampling.ignore_eos=true", "description=#1 rule: be brief"])
    assert len(loaded) == 4
    assert all(lr.recipe.sampling.ignore_eos for lr in loaded)
    assert {lr.recipe.description for lr in loaded} == {"#1 rule: be brief"}
    assert all(
        lr.overrides == ["sampling.ignore_eos=true", "description=#1 rule: be brief"]
        for lr in loaded
    )


def test_set_on_an_axis_or_the_name_is_refused(write_recipe, base_recipe):
    p = write_recipe(study(base_recipe, matrix={"sampling.max_tokens": [8, 16]}))
    e = error(load_recipes, p, ["sampling.max_tokens=4"])
    assert e.field == "--set" and e.message.startswith(
        "--set sampling.max_tokens: the study varies 'sampling.max_tokens' across its cells"
    )
    assert error(load_recipes, p, ["sampling=x"]).field == "--set"
    assert error(load_recipes, p, ["name=other"]).field == "--set"
    # issue 42: with --only one cell (or cells that agree on it) nothing is made the same
    from runner.config.calls import Asked, load_all
    from runner.wings import studies

    asked = lambda only: Asked(("sampling.max_tokens=4",), (), only)
    [one] = load_all((str(p),), asked("*-8"), studies=studies)
    assert one.recipe.name == "t-max_tokens-8" and one.recipe.sampling.max_tokens == 4
    assert error(load_all, (str(p),), asked("t-*"), studies=studies).field == "--set"
    # found by a tester: what variants set was not guarded (two variants became one, unsaid)
    p = write_recipe(
        study(
            base_recipe,
            variants={"short": {"sampling.max_tokens": 2}, "long": {"sampling.max_tokens": 16}},
        )
    )
    e = error(load_recipes, p, ["sampling.max_tokens=4"])
    assert e.message == (
        "--set sampling.max_tokens: the study varies 'sampling.max_tokens' across its cells; "
        "setting it for every cell would make cells the same"
    )
    assert len(load_recipes(p, ["sampling.temperature=0.5"])) == 2  # what they share: fine


def test_set_on_an_entry_of_a_varied_mapping_merges_unless_the_cells_differ_in_it(
    write_recipe, base_recipe
):
    """A study that varies a mapping (vLLM's `engine_args`) may still take an entry of it that no
    cell sets, for every cell (the memory a warm-up may take, issue 41); an entry the cells differ
    in, or the mapping whole, would make them the same and is refused."""
    r = study(
        base_recipe,
        engine={"kind": "vllm"},
        matrix={"engine.engine_args": {"": {}, "big": {"max_num_seqs": 512}}},
    )
    p = write_recipe(r)
    plain, big = load_recipes(p, ["engine.engine_args.kv_cache_memory_bytes=1024"])
    assert plain.recipe.engine.engine_args == {"kv_cache_memory_bytes": 1024}
    assert big.recipe.engine.engine_args == {"max_num_seqs": 512, "kv_cache_memory_bytes": 1024}
    for bad, varied in (
        ("engine.engine_args.max_num_seqs=4", "engine.engine_args.max_num_seqs"),
        ("engine.engine_args={}", "engine.engine_args"),
    ):
        assert error(load_recipes, p, [bad]).message.startswith(
            f"--set {bad.split('=')[0]}: the study varies {varied!r} across its cells"
        )
    # found by a reviewer: a `null` entry is not a missing one, nor is a path that stops deeper
    for values, bad in (
        ({"": {}, "b": {"kv_cache_memory_bytes": None}}, "kv_cache_memory_bytes=1024"),
        ({"": {}, "b": {"x": None}}, "x.y=1"),
        ({"": {}, "b": {"x": {}}}, "x.y=1"),
    ):
        r = study(base_recipe, engine={"kind": "vllm"}, matrix={"engine.engine_args": values})
        e = error(load_recipes, write_recipe(r), [f"engine.engine_args.{bad}"])
        assert e.field == "--set" and "would make cells the same" in e.message


def test_model_paths_apply_per_cell(write_recipe, base_recipe, tmp_path):
    r = study(
        base_recipe,
        model={"id": "org/big"},
        variants={"big": {}, "awq": {"model.id": "org/big-awq", "model.tokenizer": "org/big"}},
    )
    mp = {"org/big": str(tmp_path / "big"), "org/big-awq": str(tmp_path / "awq")}
    big, awq = load_recipes(write_recipe(r), ["sampling.max_tokens=5"], model_paths=mp)
    assert (big.recipe.model.id, big.recipe.model.tokenizer) == (mp["org/big"], mp["org/big"])
    assert (awq.recipe.model.id, awq.recipe.model.tokenizer) == (mp["org/big-awq"], mp["org/big"])
    assert awq.overrides == [
        "sampling.max_tokens=5",
        f"model.id={mp['org/big-awq']}",
        f"model.tokenizer={mp['org/big']}",
    ]


def test_anchors_and_merge_keys_still_work(write_recipe, base_recipe):
    text = yaml.safe_dump(base_recipe) + (
        "variants:\n  a: &common {sampling.max_tokens: 4, sampling.ignore_eos: true}\n"
        "  b: {<<: *common, sampling.max_tokens: 9}\n"
    )
    a, b = load_recipes(write_recipe(text))
    assert (
        a.recipe.sampling.max_tokens,
        b.recipe.sampling.max_tokens,
        b.recipe.sampling.ignore_eos,
    ) == (4, 9, True)


# --------------------------------------------------------------------------- the project's study

JSQUAD_CELLS = {
    "jsquad-hf-sequential",
    "jsquad-hf-batched",
    "jsquad-hf-continuous",
    "jsquad-vllm",
    "jsquad-vllm-bigbatch",
    "jsquad-vllm-offload",
    "jsquad-vllm-oneshot-nocache",
    "jsquad-vllm-oneshot-nocache-ctxfirst",
    "jsquad-vllm-oneshot-cache",
    "jsquad-vllm-oneshot-cache-bigbatch",
    "jsquad-vllm-oneshot-cache-ctxfirst",
    "jsquad-vllm-oneshot-cache-ctxfirst-bigbatch",
    "jsquad-vllm-awq",
    "jsquad-vllm-fp8",
    "jsquad-vllm-fp8-fast",
    "jsquad-vllm-fp8-graphs",
    "jsquad-vllm-fp8-kv8",
    "jsquad-vllm-fp8-wide",
    "jsquad-vllm-fp8-kv8-wide",
    "jsquad-vllm-fp8-onewave",
    "jsquad-vllm-fp8-16k",
    "jsquad-vllm-fp8-8k",
    "jsquad-vllm-fp8-8k-graphs",
}


def test_project_jsquad_study():
    h200 = ["model.load_format=dummy", "sampling.max_tokens=16", "sampling.ignore_eos=true"]
    cells = load_recipes(PROJECT / "recipes" / "jsquad-study.yaml", h200)
    assert {lr.recipe.name for lr in cells} == JSQUAD_CELLS and len(cells) == 23
    by = {lr.recipe.name: lr.recipe for lr in cells}
    assert [n for n, r in by.items() if r.baseline] == ["jsquad-hf-sequential"]
    assert by["jsquad-hf-sequential"].estimate == 40 and by["jsquad-vllm-offload"].estimate == 1000
    assert (
        by["jsquad-vllm-awq"].model.id.endswith("-AWQ")
        and by["jsquad-vllm-awq"].engine.quantization == "awq_marlin"
    )
    assert (
        by["jsquad-vllm"].prompt.shots.examples == []
        and len(by["jsquad-vllm-fp8"].prompt.shots.examples) == 1
    )
    assert by["jsquad-vllm-oneshot-cache-ctxfirst"].prompt.template == "jsquad-context-first.j2"
    assert by["jsquad-vllm-oneshot-cache-bigbatch"].engine.engine_args == {
        "max_num_seqs": 2048,
        "max_num_batched_tokens": 32768,
    }
    graphs = [n for n, r in by.items() if getattr(r.engine, "enforce_eager", True) is False]
    assert graphs == [
        f"jsquad-vllm-fp8-{x}" for x in ("graphs", "kv8", "wide", "kv8-wide", "8k-graphs")
    ]
    assert [n for n, r in by.items() if getattr(r.engine, "kv_cache_dtype", "auto") == "fp8"] == [
        "jsquad-vllm-fp8-kv8",
        "jsquad-vllm-fp8-kv8-wide",
    ]
    assert by["jsquad-vllm-fp8-wide"].engine.engine_args == {
        "max_num_seqs": 4096,
        "max_num_batched_tokens": 65536,
    }
    # each of the three differs from vllm-fp8-graphs in the engine only
    for n in graphs[1:4]:
        graphs_cell = by["jsquad-vllm-fp8-graphs"]
        assert by[n].prompt == graphs_cell.prompt and by[n].engine != graphs_cell.engine
    # onewave: fp8-wide's prompt, eager, room for every one of the 4,442 sequences at once
    onewave = by["jsquad-vllm-fp8-onewave"]
    assert (
        onewave.prompt == by["jsquad-vllm-fp8-wide"].prompt and onewave.engine.enforce_eager is True
    )
    assert onewave.engine.engine_args == {"max_num_seqs": 8192, "max_num_batched_tokens": 65536}
    # 16k / 8k: onewave's prompt and engine but for fewer tokens per step
    for name, tokens in (("jsquad-vllm-fp8-16k", 16384), ("jsquad-vllm-fp8-8k", 8192)):
        assert by[name].prompt == onewave.prompt and by[name].engine.enforce_eager is True
        assert by[name].engine.engine_args == {
            "max_num_seqs": 4096,
            "max_num_batched_tokens": tokens,
        }
        assert by[name].engine.model_copy(update={"engine_args": {}}) == onewave.engine.model_copy(
            update={"engine_args": {}}
        )
    # 8k-graphs: fp8-8k's prompt and limits, CUDA graphs captured up to the 8,192 tokens of a step
    g8 = by["jsquad-vllm-fp8-8k-graphs"]
    assert g8.prompt == by["jsquad-vllm-fp8-8k"].prompt and g8.engine.enforce_eager is False
    sizes = g8.engine.engine_args["compilation_config"]["cudagraph_capture_sizes"]
    assert (
        sizes == sorted(set(sizes))
        and sizes[-1] == g8.engine.engine_args["max_num_batched_tokens"] == 8192
    )
    assert g8.engine.engine_args["max_num_seqs"] == 4096
    assert all(r.model.load_format == "dummy" and r.sampling.max_tokens == 16 for r in by.values())
    assert load_recipes(PROJECT / "recipes" / "jsquad-base.yaml") == []


def test_context_first_template_puts_the_passage_first():
    text = (PROJECT / "templates" / "jsquad-context-first.j2").read_text(encoding="utf-8")
    plain = (PROJECT / "templates" / "jsquad.j2").read_text(encoding="utf-8")
    assert text == "\nContext: {{ context }}\nQuestion:{{ question }}\nOutput:"
    assert sorted(text.splitlines()) == sorted(plain.splitlines())


def test_study_keys_model_lists_what_the_loader_reads():
    from runner.config.loading import FILE_KEYS as STUDY_KEYS
    from runner.study.load import StudyKeys

    # tune: the tune wing's
    assert tuple(StudyKeys.model_fields) == tuple(k for k in STUDY_KEYS if k != "tune")
    assert all(f.description for f in StudyKeys.model_fields.values())


def test_only_takes_comma_separated_names_and_globs():
    from runner.base.errors import RunnerError
    from tests.wired import load_all

    path = str(PROJECT / "recipes" / "jsquad-study.yaml")
    chosen = load_all((path,), (), only="jsquad-vllm-fp8-[fg]*, jsquad-hf-batched,jsquad-vllm")
    assert [lr.recipe.name for lr in chosen] == [
        "jsquad-hf-batched",
        "jsquad-vllm",
        "jsquad-vllm-fp8-fast",
        "jsquad-vllm-fp8-graphs",
    ]
    with pytest.raises(RunnerError, match="--only 'nope,also-nope' matches no recipe"):
        load_all((path,), (), only="nope,also-nope")


def test_serving_cells_do_not_claim_a_shared_engine():
    # each serving run starts its own server: cells that differ only in the prompt are separate
    # jobs,
    # while the same cells without `load:` share one engine
    from runner.run.job import engine_key
    from tests.wired import load_all

    cells = load_all((str(PROJECT / "recipes" / "jsquad-serve.yaml"),), ())
    assert [lr.recipe.name for lr in cells] == ["jsquad-serve-qfirst", "jsquad-serve-ctxfirst"]
    assert engine_key(cells[0]) != engine_key(cells[1])
    offline = load_all((str(PROJECT / "recipes" / "jsquad-serve.yaml"),), ("load=null",))
    assert engine_key(offline[0]) == engine_key(offline[1])


def test_an_error_in_a_cell_with_a_very_long_axis_value_stays_on_one_screen(
    write_recipe, base_recipe
):
    """Issue 42: a 5,000-character axis value made a 10 KB error (the value written out whole)."""
    study = {**base_recipe, "matrix": {"sampling.stop": {"a": ["x" * 5000], "b": ["y"]}}}
    r = CliRunner().invoke(cli, ["check", str(write_recipe(study)), "--no-tokens"])
    assert r.exit_code == 2 and len(r.output) < 1000, r.output
    assert f'(sampling.stop=["{"x" * 77}…' in r.output
