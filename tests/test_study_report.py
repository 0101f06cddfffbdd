"""A study's section of summary.md (runner/study/study.py), its chart and the cell
line of report.md, from RunResult objects built here: a 2x2 study (prefix caching x prompt template)
of the `vllm` variant, an `hf` baseline variant (an estimate; its engine has no prefix-caching key),
an `fp8` variant that failed, and a plain recipe outside the study."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest

from runner.base.errors import RunnerError
from runner.folder import study_chart_path
from runner.recipe import Recipe, StudyCell
from runner.report.spread import ratio_text
from runner.results import Estimate, RunResult, Timings
from runner.study.study import (
    ABSENT,
    axes_of,
    axis_effects,
    effects_section,
    pick_axes,
    requested_axes,
    study_chart,
    study_section,
    time_spent,
    value_label,
)
from tests.wired import report_markdown, summary_markdown, write_summary

BASE: dict[str, Any] = {
    "model": {"id": "Qwen/Qwen2.5-7B-Instruct"},
    "engine": {"kind": "vllm"},
    "dataset": {"format": "squad", "path": "/data/jsquad/valid-v1.3.json"},
    "prompt": {"template": "jsquad.j2"},
    "sampling": {"temperature": 0, "max_tokens": 32},
    "metrics": ["exact_match"],
}
CACHE, TEMPLATE = "engine.enable_prefix_caching", "prompt.template"


def _recipe(name: str, cell: dict, baseline: bool) -> dict:
    d = copy.deepcopy(BASE)
    if cell.get("variant") == "hf":
        d["engine"] = {"kind": "transformers", "device": "cuda"}
    if CACHE in cell:
        d["engine"]["enable_prefix_caching"] = cell[CACHE]
    d["prompt"]["template"] = cell.get(TEMPLATE, "jsquad.j2")
    d.update(name=name, baseline=baseline)
    return Recipe.model_validate(d).canonical()


def cell_result(
    name: str,
    cell: dict,
    t: float | None,
    *,
    study: str = "s",
    load_s: float | None = 5.0,
    minute: int = 0,
    status: str = "ok",
    estimate: Estimate | None = None,
    em: float = 0.5,
    meaningful: bool = True,
    baseline: bool = False,
    notes: list[str] | None = None,
    axes: dict[str, str] | None = None,
    **kw,
) -> RunResult:
    ok = status == "ok"
    return RunResult(
        name=name,
        recipe=_recipe(name, cell, baseline),
        status=status,
        error=None if ok else "boom",
        cell=StudyCell(study=study, settings=cell, axes=axes) if study else None,
        timings=Timings(load_s=load_s, generate_s=t if ok else None),
        scores={"exact_match": em} if ok else {},
        scores_meaningful=meaningful,
        estimate=estimate,
        notes=notes or [],
        started_at=f"2025-05-01T10:{minute:02d}:00+00:00",
        **{
            "finished_at": f"2025-05-01T10:{minute + 1:02d}:00+00:00",
            "n_samples": EST.n_total,
            **kw,
        },
    )


EST = Estimate(n_measured=40, n_total=4000, per_example_s=0.1, projected_s=400.0, method="t")


def study_cells(**kw) -> list[RunResult]:
    v = {"variant": "vllm"}
    return [
        cell_result(
            "s-hf",
            {"variant": "hf", TEMPLATE: "jsquad.j2"},
            8.0,
            estimate=EST,
            baseline=True,
            em=0.8,
            **kw,
        ),
        cell_result(
            "s-vllm-nocache",
            {**v, CACHE: False, TEMPLATE: "jsquad.j2"},
            40.0,
            minute=1,
            em=0.6,
            **kw,
        ),
        cell_result(
            "s-vllm-nocache-ctx",
            {**v, CACHE: False, TEMPLATE: "ctx.j2"},
            40.0,
            minute=2,
            load_s=0.0,
            engine_of="s-vllm-nocache",
            em=0.7,
            **kw,
        ),
        cell_result(
            "s-vllm-cache", {**v, CACHE: True, TEMPLATE: "jsquad.j2"}, 20.0, minute=3, em=0.6, **kw
        ),
        cell_result(
            "s-vllm-cache-ctx",
            {**v, CACHE: True, TEMPLATE: "ctx.j2"},
            10.0,
            minute=4,
            load_s=0.0,
            engine_of="s-vllm-cache",
            em=0.7,
            **kw,
        ),
        cell_result(
            "s-fp8",
            {"variant": "fp8", CACHE: True, TEMPLATE: "jsquad.j2"},
            None,
            minute=5,
            status="failed",
            load_s=None,
            **kw,
        ),
    ]


def plain() -> RunResult:
    return cell_result("plain", {}, 30.0, study=None)


def study_part(md: str, study: str = "s") -> str:
    m = re.search(rf"^## Study {re.escape(study)}\n(.*?)(?=^## |\Z)", md, flags=re.S | re.M)
    assert m, md
    return m.group(1)


def block(md: str, first: str) -> list[str]:
    """The lines of the Markdown block (up to a blank line) that starts with `first`."""
    lines = md.splitlines()
    i = lines.index(first)
    return lines[i : lines.index("", i) if "" in lines[i:] else None]


PIVOT = [
    "| variant   | prompt.template   | enable_prefix_caching=false   | enable_prefix_caching=true  "
    " | enable_prefix_caching=n/a   |",
    "|-----------|-------------------|-------------------------------|------------------------------"
    "|-----------------------------|",
    "| hf        | jsquad.j2         | –                             | –                           "
    " | ~400.0 s                    |",
    "| vllm      | jsquad.j2         | 40.0 s                        | 20.0 s                      "
    " | –                           |",
    "| vllm      | ctx.j2            | 40.0 s                        | **10.0 s**                  "
    " | –                           |",
    "| fp8       | jsquad.j2         | –                             | failed                      "
    " | –                           |",
]


# --------------------------------------------------------------------------- the pivot


def test_pivot_layout_values_failed_and_estimated_cells():
    part = study_part(summary_markdown([*study_cells(), plain()]))
    assert (
        "6 cells (1 failed); rows: **variant**, columns: **engine.enable_prefix_caching** (picked "
        "automatically: most distinct values)." in part
    )
    assert block(part, PIVOT[0]) == PIVOT
    assert [line.count("**") for line in PIVOT] == [0, 0, 0, 0, 2, 0]  # the fastest cell only


def test_study_axes_from_the_study_file_reach_the_pivot():
    cells = study_cells(axes={"rows": TEMPLATE, "columns": "variant"})
    part = study_part(summary_markdown(cells))
    assert "rows: **prompt.template**, columns: **variant** (from the study's `report`)" in part
    head = (
        "| prompt.template   | engine.enable_prefix_caching   | variant=hf   | variant=vllm   "
        "| variant=fp8   |"
    )
    assert block(part, head)[2:] == [
        "| jsquad.j2         | false                          | –            | 40.0 s         | –  "
        "           |",
        "| jsquad.j2         | true                           | –            | 20.0 s         | "
        "failed        |",
        "| jsquad.j2         | n/a                            | ~400.0 s     | –              | –  "
        "           |",
        "| ctx.j2            | false                          | –            | 40.0 s         | –  "
        "           |",
        "| ctx.j2            | true                           | –            | **10.0 s**     | –  "
        "           |",
    ]


def test_automatic_axis_choice_and_requests_that_do_not_apply():
    axes = axes_of(study_cells())
    assert list(axes) == ["variant", CACHE, TEMPLATE]
    assert axes[CACHE] == [False, True, ABSENT] and axes["variant"] == ["hf", "vllm", "fp8"]
    assert pick_axes(axes, None)[:2] == ("variant", CACHE)  # 3 values, then the first of two ties
    assert pick_axes({"a": [1, 2], "b": [1, 2, 3], "c": [1, 2, 3, 4]}, None)[:2] == ("c", "b")
    assert pick_axes(axes, {"rows": CACHE, "columns": None})[:2] == (CACHE, "variant")
    rows, cols, how = pick_axes(axes, {"rows": "engine.quantization", "columns": TEMPLATE})
    assert (rows, cols) == ("variant", TEMPLATE)
    assert (
        how
        == "from the study's `report`; `engine.quantization` asked for by `report` but not varying "
        "here"
    )
    assert requested_axes(study_cells()) is None


def test_one_axis_study_and_list_and_mapping_values():
    cells = [
        cell_result("one-a", {"engine.engine_args": {}}, 30.0, study="one"),
        cell_result(
            "one-b",
            {"engine.engine_args": {"max_num_seqs": 2048, "max_num_batched_tokens": 32768}},
            15.0,
            study="one",
        ),
    ]
    part = study_part(summary_markdown(cells), "one")
    assert "2 cells; rows: **engine.engine_args** (picked automatically" in part
    assert block(part, "| engine.engine_args                   | generation time   |")[2:] == [
        "| {}                                   | 30.0 s            |",
        "| …s=2048,max_num_batched_tokens=32768 | **15.0 s**        |",
    ]
    assert (
        "| engine.engine_args | {} → …s=2048,max_num_batched_tokens=32768 | 2.00× (1 run: no "
        "interval) | 1 |" in re.sub(r" +\|", " |", part)
    )
    assert value_label(["a", "b"]) == "a,b" and value_label([{"x": 1}, {"y": 2}]) == "[2 items]"
    assert (
        value_label(True) == "true"
        and value_label(None) == "null"
        and value_label("x" * 40) == "…" + "x" * 35
    )
    nested = {
        "max_num_seqs": 8,
        "compilation_config": {"cudagraph_capture_sizes": [1, 2, 4, 8, 16], "mode": [3]},
    }
    assert (
        value_label(nested, 80)
        == "max_num_seqs=8,compilation_config={cudagraph_capture_sizes=[5 values],mode=[3]}"
    )


# --------------------------------------------------------------------------- effects, fastest, time
# spent


def test_axis_effects_medians_and_the_cells_they_come_from():
    effects = {(e.axis, e.to): e for e in axis_effects(study_cells(), axes_of(study_cells()))}
    assert set(effects) == {
        ("variant", "vllm"),
        ("variant", "fp8"),
        (CACHE, True),
        (TEMPLATE, "ctx.j2"),
    }
    assert effects[CACHE, True].speedup == pytest.approx(8**0.5)  # 40/20 and 40/10: geometric mean
    assert effects[TEMPLATE, "ctx.j2"].speedup == pytest.approx(2**0.5)  # 40/40 and 20/10
    assert effects["variant", "fp8"].pairs == ()  # its one cell failed
    assert (
        effects["variant", "vllm"].speedup == pytest.approx(200**0.5)
        and effects["variant", "vllm"].approx
    )
    part = re.sub(r" +\|", " |", study_part(summary_markdown(study_cells())))
    assert (
        "| variant | hf → vllm | ~14.1× (1 run: no interval) | 2 |" in part
        and "| variant | hf → fp8 | – | 0 |" in part
    )
    assert (
        "- variant hf → vllm: s-hf → s-vllm-nocache (10.0× (1 run: no interval)), "
        "s-hf → s-vllm-cache (20.0× (1 run: no interval))" in part
    )
    assert (
        "| engine.enable_prefix_caching | false → true | 2.83× (1 run: no interval) | 2 |" in part
    )
    assert "| prompt.template | jsquad.j2 → ctx.j2 | 1.41× (1 run: no interval) | 2 |" in part
    assert (
        "- engine.enable_prefix_caching false → true: s-vllm-nocache → s-vllm-cache (2.00× (1 run: "
        "no interval)), s-vllm-nocache-ctx → s-vllm-cache-ctx (4.00× (1 run: no interval))" in part
    )
    assert (
        "- prompt.template jsquad.j2 → ctx.j2: s-vllm-nocache → s-vllm-nocache-ctx (1.00× (1 run: "
        "no interval)), s-vllm-cache → s-vllm-cache-ctx (2.00× (1 run: no interval))" in part
    )


def test_estimated_pair_is_marked():
    cells = [
        cell_result("e-a", {"x": 1}, 9.0, study="e", estimate=EST),
        cell_result("e-b", {"x": 2}, 100.0, study="e"),
    ]
    assert "| x | 1 → 2 | ~4.00× (1 run: no interval) | 1 |" in re.sub(
        r" +\|", " |", study_part(summary_markdown(cells), "e")
    )


def test_speed_up_format_and_a_study_whose_cells_all_failed():
    assert ratio_text(1.5, 1.2, 1.9) == "1.50× (1.20–1.90)"
    assert ratio_text(13.41, 11.0, 16.2) == "13.4× (11.0–16.2)"
    assert ratio_text(2095.24, 1500, 3000, "~") == "~2,095× (1,500–3,000)"
    assert ratio_text(1.05, 0.93, 1.18) == "no clear difference (0.93–1.18×)"
    assert ratio_text(1.5, None, None) == "1.50× (1 run: no interval)"
    assert ratio_text(1 / 34, 1 / 40, 1 / 30) == "34.0× slower (30.0–40.0)"  # not "0.03×"
    cells = [
        cell_result("f-a", {"x": 1}, None, study="f", status="failed", load_s=None),
        cell_result("f-b", {"x": 2}, None, study="f", status="failed", load_s=None),
    ]
    part = re.sub(r" +\|", " |", study_part(summary_markdown(cells), "f"))
    assert "2 cells (2 failed)" in part and "| 1 | failed |" in part and "| 2 | failed |" in part
    assert "| x | 1 → 2 | – | 0 |" in part and "No cell finished with a generation time." in part
    assert (
        "| 60.0 s | 60.0 s | 0.00 s (0% of the running time) | 0.00 s (0% of the running time) "
        "| 0 | 2 |" in part
    )


def test_fastest_cell_against_the_slowest_and_the_baseline():
    part = study_part(summary_markdown(study_cells()))
    assert (
        "**s-vllm-cache-ctx** (10.0 s; exact_match 0.700): ~40.0× (1 run: no interval) faster than "
        "the slowest (the study's "
        "baseline), s-hf (~400.0 s)." in part
    )
    cells = [
        cell_result("b-base", {"x": 1}, 20.0, study="b", baseline=True),
        cell_result("b-slow", {"x": 2}, 40.0, study="b"),
        cell_result("b-fast", {"x": 3}, 10.0, study="b"),
    ]
    assert (
        "**b-fast** (10.0 s; exact_match 0.500): 4.00× (1 run: no interval) faster than the "
        "slowest, b-slow (40.0 s); 2.00× (1 run: no interval) faster "
        "than the baseline, b-base (20.0 s)." in study_part(summary_markdown(cells), "b")
    )
    alone = study_part(summary_markdown(study_cells()[:1]))
    assert (
        "**s-hf** (~400.0 s; exact_match 0.800): the only cell with a time; it is the study's "
        "baseline." in alone
    )


def test_the_study_never_names_a_cell_its_gate_stopped_the_fastest():
    """The study's 'Fastest cell' leaves out the cells their gate stopped and names them after
    it."""
    from runner.study.study import fastest_section

    cells = [
        cell_result("b-base", {"x": 1}, 20.0, study="b", baseline=True),
        cell_result("b-slow", {"x": 2}, 40.0, study="b"),
        cell_result("b-fast", {"x": 3}, 10.0, study="b"),
    ]
    (text,) = fastest_section(cells, None, stopped={"b-fast"})[-1:]
    assert text.startswith(
        "**b-base** (20.0 s): 2.00× (1 run: no interval) faster than the slowest, b-slow"
    )
    assert text.endswith("faster, but stopped by their gate: b-fast.")
    # every faster cell stopped: the fastest that passed is the slowest, not the only one timed
    (text,) = fastest_section(cells, None, stopped={"b-fast", "b-base"})[-1:]
    assert text == (
        "**b-slow** (40.0 s): the slowest cell; 2.00× slower (1 run: no interval) than the "
        "baseline, b-base (20.0 s); faster, but stopped by their gate: b-base, b-fast."
    )
    assert fastest_section(cells, None, stopped={"b-fast", "b-base", "b-slow"})[-1] == (
        "No cell that passed its gate has a generation time."
    )


def test_wall_time_against_generation_and_engine_starts():
    # the cells ran back to back: wall and running time 360 s
    assert time_spent(study_cells()) == (360.0, 360.0)
    part = re.sub(r" +\|", " |", study_part(summary_markdown(study_cells())))
    # generation 118 s and engine start 15 s summed, 3 engine starts
    assert (
        "| 360.0 s | 360.0 s | 118.0 s (33% of the running time) | 15.0 s (4% of the running time) "
        "| 3 | 6 |" in part
    )
    assert (
        "Cells that ran on an engine started for another cell: s-vllm-nocache-ctx (on "
        "s-vllm-nocache's), s-vllm-cache-ctx (on s-vllm-cache's)." in part
    )


def test_running_time_leaves_out_the_pauses_between_calls():
    # cells in two calls: minutes 0-1 and 2-3, then 30-31 (overlapping spans count once)
    cells = [
        cell_result("w-a", {"x": 1}, 10.0, study="w", minute=0),
        cell_result(
            "w-b", {"x": 2}, 10.0, study="w", minute=2, finished_at="2025-05-01T10:03:30+00:00"
        ),
        cell_result("w-c", {"x": 3}, 10.0, study="w", minute=3),
        cell_result("w-d", {"x": 4}, 10.0, study="w", minute=30),
    ]
    assert time_spent(cells) == (31 * 60, 60 + 120 + 60)
    part = re.sub(r" +\|", " |", study_part(summary_markdown(cells), "w"))
    assert "| 1,860.0 s | 240.0 s | 40.0 s (17% of the running time) |" in part


def test_effects_start_from_the_baseline_cells_value():
    # the baseline's variant ("slow") comes after "fast" in the cells' order: it is still the
    # reference
    cells = [
        cell_result("r-fast", {"variant": "fast"}, 10.0, study="r"),
        cell_result("r-mid", {"variant": "mid"}, 20.0, study="r"),
        cell_result("r-slow", {"variant": "slow"}, 40.0, study="r", baseline=True),
    ]
    effects = [(e.frm, e.to, e.speedup) for e in axis_effects(cells, axes_of(cells))]
    assert effects == [("slow", "fast", 4.0), ("slow", "mid", 2.0)]
    no_base = [(e.frm, e.to) for e in axis_effects(cells[:2], axes_of(cells[:2]))]
    assert no_base == [("fast", "mid")]


def test_effects_show_what_the_change_did_to_each_score():
    """Time and accuracy side by side: the score change is the median over the pairs of (other -
    first); a pair with random weights leaves the score blank."""
    cells = [
        cell_result(
            "r-a", {"variant": "v", "q": "bf16", "t": "x"}, 10.0, study="r", em=0.50, baseline=True
        ),
        cell_result("r-b", {"variant": "v", "q": "fp8", "t": "x"}, 5.0, study="r", em=0.40),
        cell_result("r-c", {"variant": "v", "q": "bf16", "t": "y"}, 8.0, study="r", em=0.60),
        cell_result("r-d", {"variant": "v", "q": "fp8", "t": "y"}, 4.0, study="r", em=0.30),
    ]
    md = "\n".join(effects_section(axis_effects(cells, axes_of(cells))))
    rows = {(r["setting"], r["change"]): r for r in table_rows(md, "exact_match change")}
    assert rows[("q", "bf16 → fp8")]["exact_match change"] == "-0.200"  # mean of -0.1 and -0.3
    assert rows[("q", "bf16 → fp8")]["speed-up"] == "2.00× (1 run: no interval)"
    assert rows[("t", "x → y")]["exact_match change"] == "+0.000"  # mean of +0.1 and -0.1
    dummy = [
        c.model_copy(update={"scores_meaningful": False}) if c.name == "r-b" else c for c in cells
    ]
    md = "\n".join(effects_section(axis_effects(dummy, axes_of(dummy))))
    rows = {(r["setting"], r["change"]): r for r in table_rows(md, "exact_match change")}
    # the random-weights pair takes no part
    assert rows[("q", "bf16 → fp8")]["exact_match change"] == "-0.300"


def table_rows(md: str, column: str) -> list[dict[str, str]]:
    lines = [ln for ln in md.splitlines() if ln.startswith("|")]
    start = next(i for i, ln in enumerate(lines) if column in ln)
    head = [c.strip() for c in lines[start].strip("|").split("|")]
    return [
        dict(zip(head, (c.strip() for c in ln.strip("|").split("|")), strict=True))
        for ln in lines[start + 2 :]
    ]


def test_plain_recipes_stay_in_the_flat_table_and_each_study_has_its_section():
    other = [
        cell_result("t-a", {"x": 1}, 10.0, study="t"),
        cell_result("t-b", {"x": 2}, 5.0, study="t"),
    ]
    md = summary_markdown([plain(), *study_cells(), *other])
    assert re.findall(r"^## Study (\S+)$", md, flags=re.M) == ["s", "t"]
    assert re.search(r"^\| plain ", md, flags=re.M) and "plain" not in study_part(md) + study_part(
        md, "t"
    )
    assert "## Study" not in summary_markdown([plain()])


# --------------------------------------------------------------------------- the chart


def _is_png(p: Path) -> bool:
    return p.read_bytes()[:4] == b"\x89PNG" and p.stat().st_size > 5_000


def test_study_chart_is_written_named_and_linked(tmp_path):
    text = write_summary([*study_cells(), plain()], tmp_path).read_text(encoding="utf-8")
    assert _is_png(tmp_path / "s-pareto.png")
    assert "![s: accuracy against time](s-pareto.png)" in study_part(text)
    assert study_chart_path(tmp_path, "s") == tmp_path / "s-pareto.png"
    with pytest.raises(RunnerError):
        study_chart_path(tmp_path, "../evil")


def test_no_chart_without_meaningful_scores_or_a_safe_name(tmp_path):
    assert study_chart("s", study_cells(meaningful=False), tmp_path, set()) is None
    assert "No accuracy chart: no cell of this study has meaningful scores." in study_part(
        summary_markdown(study_cells(meaningful=False))
    )
    assert study_chart("../evil", study_cells(study="../evil"), tmp_path, set()) is None
    assert list(tmp_path.iterdir()) == [] and not (tmp_path.parent / "evil-pareto.png").exists()
    assert "![" not in "\n".join(study_section("s", study_cells()))


# --------------------------------------------------------------------------- report.md


def test_report_names_its_study_and_cell():
    r = study_cells()[4]
    lines = report_markdown(r, []).splitlines()
    # the verdict, then the cell
    assert lines[:2] == ["# s-vllm-cache-ctx", ""] and lines[2].startswith("- **ok**")
    assert lines[lines.index("", 2) + 1] == (
        "Cell of study **s**: variant=vllm, engine.enable_prefix_caching=true, "
        "prompt.template=ctx.j2"
    )
    assert "Cell of study" not in report_markdown(plain(), [])


def test_a_cell_timed_on_fewer_examples_stands_apart_in_the_study(tmp_path):
    """A cell run with --limit in another call is listed, but neither the fastest cell nor half of a
    setting's pair."""
    cells = study_cells()
    quick = cell_result(
        "s-vllm-quick", {"variant": "vllm", CACHE: True, TEMPLATE: "q.j2"}, 0.5, n_samples=100
    )
    text = "\n".join(study_section("s", [*cells, quick]))
    assert "**s-vllm-cache-ctx** (10.0 s" in text and "**s-vllm-quick**" not in text
    assert "s-vllm-quick (" not in text.split("### What each setting bought")[1]


def test_the_study_section_is_the_same_in_run_order_and_in_name_order():
    """`runner report` reads results in name order, `runner go` has them in run order: with each
    cell's place in its study recorded, both write the same section (values in the study's order,
    the same direction)."""
    cells = [
        c.model_copy(update={"cell": c.cell.model_copy(update={"index": i})})
        for i, c in enumerate(study_cells())
    ]
    by_name = sorted(cells, key=lambda r: r.name)
    assert [c.name for c in by_name] != [c.name for c in cells]
    assert study_section("s", by_name) == study_section("s", cells)


def test_a_change_and_its_reverse_are_reciprocal_speedups():
    """Speed-ups over several pairs are a geometric mean: 0.949x and 7.287x one way is 2.63x, the
    other way 0.38x (an arithmetic mean gave 4.12x and 0.60x, which are not each other's
    reciprocal)."""
    a = [
        cell_result("r-a1", {"x": "a", "y": 1}, 10.0, study="r"),
        cell_result("r-a2", {"x": "a", "y": 2}, 10.0, study="r"),
    ]
    b = [
        cell_result("r-b1", {"x": "b", "y": 1}, 10.0 / 0.949, study="r"),
        cell_result("r-b2", {"x": "b", "y": 2}, 10.0 / 7.287, study="r"),
    ]
    ab = {(e.frm, e.to): e.speedup for e in axis_effects(a + b, axes_of(a + b))}
    ba = {(e.frm, e.to): e.speedup for e in axis_effects(b + a, axes_of(b + a))}
    assert ab["a", "b"] == pytest.approx((0.949 * 7.287) ** 0.5) and ab["a", "b"] * ba[
        "b", "a"
    ] == pytest.approx(1.0)


def test_the_time_spent_counts_every_repeats_generation_and_engine_start():
    """A cell that restarted its engine for each of 3 repeats (turns) started it 3 times and
    generated 3 times: the study's sums and share count each, not the cell's median once."""
    from runner.results import Repeat
    from runner.study.study import spent_section

    turns = cell_result("s-turns", {"x": 1}, 2.0, load_s=10.0)
    turns.repeats = [Repeat(index=i, generate_s=2.0, load_s=10.0) for i in (1, 2, 3)]
    back_to_back = cell_result("s-b2b", {"x": 2}, 4.0, load_s=10.0, minute=1)
    back_to_back.repeats = [
        Repeat(index=1, generate_s=4.0, load_s=10.0),
        Repeat(index=2, generate_s=4.0),  # the same engine
    ]
    stored = cell_result("s-old", {"x": 3}, 6.0, load_s=5.0, minute=2)  # no repeats stored
    part = re.sub(r" +\|", " |", "\n".join(spent_section([turns, back_to_back, stored])))
    # generation 3 x 2 + 2 x 4 + 6 = 20 s; starts 3 x 10 + 10 + 5 = 45 s in 5 starts
    assert "| 20.0 s (" in part and "| 45.0 s (" in part and "| 5 | 3 |" in part


def test_an_axis_keeps_the_first_of_values_written_alike_and_the_baselines_own_first():
    """Mappings equal but for their keys' order are one value of the axis: the first cell's copy
    is shown, and the effects start from the baseline cell's own copy."""
    cells = [
        cell_result("s-a", {"engine.env": {"A": 1, "B": 2}}, 10.0, baseline=True),
        cell_result("s-b", {"engine.env": {"B": 2, "A": 1}}, 12.0, minute=1),
        cell_result("s-c", {"engine.env": {"A": 3}}, 8.0, minute=2),
    ]
    axes = axes_of(cells)
    assert [list(v) for v in axes["engine.env"]] == [["A", "B"], ["A"]]
    [effect] = axis_effects(cells, axes)
    assert list(effect.frm) == ["A", "B"] and effect.to == {"A": 3}
    axes = axes_of(cells[::-1])
    assert [list(v) for v in axes["engine.env"]] == [["A"], ["B", "A"]]
    [effect] = axis_effects(cells[::-1], axes)
    assert list(effect.frm) == ["A", "B"]  # the baseline's own, not the first cell's
