"""The reporting side: report.md, summary.md, charts and `runner report`, from RunResult objects
built here (no model, no torch). Stored results follow the runner's layout:
<out>/<name>/results.json and <out>/<name>/samples.jsonl."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from runner.base.stats import mcnemar_exact
from runner.base.types import Knob as KnobResult
from runner.cli import cli
from runner.folder import RunFolder, load_results, load_samples
from runner.recipe import Recipe
from runner.report import plots
from runner.report.summary import changed_answers_section, prefix_section, recipe_diff
from runner.results import Estimate, Memory, Prefix, RunResult, Throughput, Timings, Tokens
from runner.run.result import ignored_knob_notes
from tests.cli_output import user_error
from tests.wired import report_markdown, summary_markdown, write_report, write_summary

# --------------------------------------------------------------------------- builders

BASE: dict[str, Any] = {
    "model": {"id": "Qwen/Qwen2.5-7B-Instruct", "dtype": "bfloat16"},
    "engine": {"kind": "transformers", "device": "cuda"},
    "dataset": {"format": "squad", "path": "/data/jsquad/valid-v1.3.json"},
    "prompt": {"template": "jsquad.j2", "system_template": "jsquad-system.j2"},
    "sampling": {"temperature": 0, "max_tokens": 32},
    "metrics": ["exact_match", "char_f1"],
}


def _merge(d: dict, changes: dict) -> dict:
    for k, v in changes.items():
        if isinstance(v, dict) and isinstance(d.get(k), dict) and k != "engine":
            _merge(d[k], v)
        else:
            d[k] = copy.deepcopy(v)
    return d


def recipe(name: str, *, baseline: bool = False, **changes) -> dict:
    """A resolved recipe (as results.json stores it): BASE with `changes` merged in (`engine`
    replaced)."""
    d = _merge(copy.deepcopy(BASE), changes)
    d.update(name=name, baseline=baseline)
    return Recipe.model_validate(d)


def vllm(**engine) -> dict:
    return {"kind": "vllm", **engine}


def result(
    name: str,
    rec: dict | None = None,
    *,
    status: str = "ok",
    generate_s: float | None = 10.0,
    scores: dict | None = None,
    meaningful: bool = True,
    estimate: Estimate | None = None,
    peak: float | None = None,
    prefix: Prefix | None = None,
    knobs: list[KnobResult] | None = None,
    n: int = 10,
    **kw,
) -> RunResult:
    rec = rec or recipe(name)
    ok = status == "ok"
    kw.setdefault("recipe_hash", f"h-{name}")
    return RunResult(
        name=name,
        recipe=rec,
        status=status,
        n_samples=n if ok else 0,
        n_dataset=n,
        scores_meaningful=meaningful,
        scores=(scores if scores is not None else {"exact_match": 0.5, "char_f1": 0.7})
        if ok
        else {},
        timings=Timings(
            load_s=5.0,
            generate_s=generate_s if ok else None,
            total_s=(generate_s or 0) + 6 if ok else None,
        ),
        tokens=Tokens(prompt=300 * n, output=8 * n),
        throughput=Throughput(
            requests_per_s=n / generate_s if ok and generate_s else None,
            output_tokens_per_s=8 * n / generate_s if ok and generate_s else None,
        ),
        memory=Memory(
            peak_gpu_gib=peak,
            weights_gib=14.3 if peak else None,
            kv_cache_gib=60.0 if peak else None,
        ),
        prefix=prefix or Prefix(),
        estimate=estimate,
        knobs=knobs or [],
        engine={"name": rec.engine.kind, "version": "1.0"},
        **kw,
    )


def samples(name: str, em: list[int], outputs: list[str] | None = None) -> list[dict]:
    outputs = outputs or [("right" if e else "wrong") + f"-{name}-{i}" for i, e in enumerate(em)]
    return [
        {
            "id": f"q{i}",
            "prompt": f"Question {i}?",
            "output": outputs[i],
            "answers": [f"gold{i}"],
            "exact_match": float(e),
            "char_f1": float(e),
            "prompt_tokens": 300,
            "output_tokens": 8,
        }
        for i, e in enumerate(em)
    ]


def store(out: Path, r: RunResult, rows: list[dict] | None = None) -> Path:
    d = out / r.name
    d.mkdir(parents=True, exist_ok=True)
    (d / "results.json").write_text(r.model_dump_json(indent=2), encoding="utf-8")
    if rows is not None:
        (d / "samples.jsonl").write_text(
            "".join(json.dumps(s, ensure_ascii=False) + "\n" for s in rows), encoding="utf-8"
        )
    return d


# --------------------------------------------------------------------------- Markdown parsing

_PIPE = re.compile(r"(?<!\\)\|")


def tables(md: str) -> list[list[list[str]]]:
    """Every pipe table: [header, *rows], cells stripped, separator rows dropped."""
    out, cur = [], []
    for line in md.splitlines() + [""]:
        if line.startswith("|"):
            cells = [c.strip() for c in _PIPE.split(line)[1:-1]]
            if not all(set(c) <= set("-:") and c for c in cells):
                cur.append(cells)
        elif cur:
            out.append(cur)
            cur = []
    return out


def table_with(md: str, header_cell: str) -> list[dict[str, str]]:
    found = [t for t in tables(md) if header_cell in t[0]]
    assert len(found) == 1, (
        f"expected one table with a {header_cell!r} column, found {len(found)}:\n{md}"
    )
    head, *rows = found[0]
    return [dict(zip(head, r)) for r in rows]


def summary_rows(md: str) -> dict[str, dict[str, str]]:
    return {r["recipe"]: r for r in table_with(md, "differs from baseline")}


def section(md: str, title: str) -> str:
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", md, flags=re.S | re.M)
    assert m, f"no '## {title}' section in:\n{md}"
    return m.group(1)


DIFF = "differs from baseline"


# --------------------------------------------------------------------------- the diff view


@pytest.fixture
def base_rec() -> dict:
    return recipe("base", baseline=True)


def test_recipe_diff_across_engine_kinds_shows_only_what_was_chosen(base_rec):
    v = recipe("v", engine=vllm(enable_prefix_caching=False, enforce_eager=True))
    assert recipe_diff(v, base_rec) == {
        "engine.enable_prefix_caching": False,
        "engine.enforce_eager": True,
    }


def test_recipe_diff_same_engine_kind(base_rec):
    b = recipe("b", engine={"kind": "transformers", "device": "cuda", "batch_size": 128})
    assert recipe_diff(b, base_rec) == {"engine.batch_size": 128}
    assert recipe_diff(base_rec, base_rec) == {}


def test_recipe_diff_ignores_name_description_baseline_and_limits(base_rec):
    r = recipe("other-name", description="says something", timeout_s=60, estimate=40)
    assert recipe_diff(r, base_rec) == {}


def test_recipe_diff_nested_and_non_engine_fields(base_rec):
    r = recipe(
        "r",
        sampling={"max_tokens": 16},
        dataset={"limit": 100},
        prompt={"shots": {"placement": "system", "examples": [{"question": "q", "answer": "a"}]}},
    )
    assert recipe_diff(r, base_rec) == {
        "dataset.limit": 100,
        "prompt.shots.examples": [{"question": "q", "context": "", "answer": "a"}],
        "prompt.shots.placement": "system",
        "sampling.max_tokens": 16,
    }


def test_recipe_diff_field_back_at_default_reports_its_value():
    base = recipe(
        "base", baseline=True, engine={"kind": "transformers", "device": "cuda", "batch_size": 128}
    )
    seq = recipe("seq")
    assert recipe_diff(seq, base) == {"engine.batch_size": 1}


def test_summary_diff_column_shows_only_differing_keys(base_rec):
    rs = [
        result("base", base_rec),
        result("vl", recipe("vl", engine=vllm(enable_prefix_caching=True, enforce_eager=True))),
        result(
            "hf128",
            recipe("hf128", engine={"kind": "transformers", "device": "cuda", "batch_size": 128}),
        ),
    ]
    rows = summary_rows(summary_markdown(rs))
    assert rows["base"][DIFF] == "(baseline)"
    assert rows["vl"][DIFF] == "engine.enable_prefix_caching=True, engine.enforce_eager=True"
    assert rows["hf128"][DIFF] == "engine.batch_size=128"
    for noise in (
        "gpu_memory_utilization",
        "tensor_parallel_size",
        "kv_cache_dtype",
        "cpu_offload_gb",
        "engine.device",
        "engine.warmup",
        "engine_args",
        "model.",
        "sampling.",
        "name=",
        "baseline=",
    ):
        assert noise not in rows["vl"][DIFF]
    assert rows["vl"]["engine"] == "vllm" and rows["base"]["engine"] == "transformers"


def test_summary_names_the_baseline_and_without_one_says_so(base_rec):
    rs = [result("base", base_rec), result("other")]
    assert "baseline: **base**." in summary_markdown(rs)
    assert "baseline: **other**." in summary_markdown(rs, baseline="other")
    rows = summary_rows(summary_markdown(rs, baseline="other"))
    assert rows["other"][DIFF] == "(baseline)"
    none = summary_markdown([result("a"), result("b")])
    assert "no baseline" in none
    assert all(r[DIFF] == "" for r in summary_rows(none).values())


# --------------------------------------------------------------------------- speed-up, estimates,
# scores


def test_speed_up_is_baseline_time_over_recipe_time(base_rec):
    rs = [
        result("base", base_rec, generate_s=100.0),
        result("fast", generate_s=20.0),
        result("slow", generate_s=400.0),
        result("broken", status="failed", error="boom"),
    ]
    rows = summary_rows(summary_markdown(rs))
    assert rows["base"]["speed-up"] == "1.0×"
    assert rows["fast"]["speed-up"] == "5.00× (1 run: no interval)"
    assert rows["slow"]["speed-up"] == "4.00× slower (1 run: no interval)"
    assert rows["broken"]["speed-up"] == "–"
    assert rows["fast"]["generation time"] == "20.0 s (1 run: no interval)"


def test_a_run_on_fewer_examples_is_never_set_against_the_baseline(base_rec):
    """A tune's 400-example screen beside full runs of 1,190 (one --out): its short time is not a
    speed-up over the baseline, nor the summary's fastest."""
    rs = [
        result("base", base_rec, generate_s=1.7, n=1190),
        result("full", n=1190),
        result("screen", n=400),
    ]
    rs[2] = rs[2].model_copy(update={"timings": Timings(generate_s=0.75)})
    text = summary_markdown(rs)
    rows = summary_rows(text)
    assert rows["screen"]["speed-up"] == "– (other examples: 400)"
    assert rows["full"]["speed-up"] == "5.88× slower (1 run: no interval)"
    assert "Fastest: **base**, 1.70 s (1 run: no interval) (the baseline)." in text


def test_estimated_baseline_uses_projected_time_and_is_marked(base_rec):
    est = Estimate(
        n_measured=40,
        n_total=4442,
        per_example_s=0.7,
        projected_s=3000.0,
        low_s=2800.0,
        high_s=3200.0,
        method="t interval",
    )
    rs = [
        result("base", base_rec, generate_s=28.0, estimate=est),
        result("fast", generate_s=20.0, n=4442),
    ]
    rows = summary_rows(summary_markdown(rs))
    assert (
        rows["fast"]["speed-up"] == "~150× (1 run: no interval)"
    )  # 3000 / 20, not 28 / 20; ~ as the baseline is estimated
    assert rows["base"]["generation time"].startswith("~")
    assert "est." in rows["base"]["generation time"] and "40" in rows["base"]["generation time"]
    assert "3,000" in rows["base"]["generation time"]
    assert not rows["fast"]["generation time"].startswith("~")
    md = report_markdown(rs[0], [])
    assert (
        "· **estimate**: 40 of 4,442 examples run, the full generation projected at ~3,000.0 s"
        in md
    )
    assert "Projected full-dataset" not in md  # said once, in the verdict


def test_random_weight_scores_are_not_shown(base_rec):
    rs = [
        result("base", base_rec, scores={"exact_match": 0.8, "char_f1": 0.9}),
        result("dummy", scores={"exact_match": 0.0, "char_f1": 0.01}, meaningful=False),
    ]
    rows = summary_rows(summary_markdown(rs))
    assert rows["dummy"]["exact_match"] == "n/a (random weights)"
    assert rows["dummy"]["char_f1"] == "n/a (random weights)"
    assert rows["base"]["exact_match"] == "0.800"
    assert rows["base"]["char_f1"] == "0.900"
    md = report_markdown(rs[1], [])
    assert "- Scores: not meaningful (random weights): read it for speed only" in md
    assert "score (not meaningful: random weights" in md and "Scores are not meaningful" not in md


def test_ignored_knob_is_flagged_in_status():
    k = KnobResult(
        name="cpu_offload_gb", requested=8, effective=0, status="ignored", evidence="V2 runner"
    )
    rows = summary_rows(summary_markdown([result("x", knobs=[k])]))
    assert rows["x"]["status"] == "ok; ignored: cpu_offload_gb"
    assert "**IGNORED**" in report_markdown(result("x", knobs=[k]), [])


def test_long_list_knob_values_are_cut_in_the_report_and_kept_whole_in_results():
    sizes = list(range(16, 8193, 16))
    k = KnobResult(
        name="engine_args.compilation_config.cudagraph_capture_sizes",
        requested=sizes,
        effective=sizes,
        status="applied",
        evidence="compilation_config",
    )
    row = next(
        line
        for line in report_markdown(result("x", knobs=[k]), []).splitlines()
        if "cudagraph_capture" in line
    )
    assert "…" in row and "8192" in row and "16,32," not in row and len(row) < 300
    # as results.json holds it
    whole = json.loads(result("x", knobs=[k]).model_dump_json())["knobs"][0]
    assert whole["requested"] == whole["effective"] == sizes and len(sizes) == 512
    ignored = k.model_copy(update={"status": "ignored", "effective": sizes[:-1]})
    (note,) = ignored_knob_notes([k, ignored])
    assert "…" in note and len(note) < 250  # the warning cuts the list as the table does


# --------------------------------------------------------------------------- prefix caching


def _prefix_pair():
    p = Prefix(shared_prefix_tokens=124, shared_prefix_share=0.4267, hit_rate=0.4174)
    on = result(
        "cache",
        recipe("cache", engine=vllm(enable_prefix_caching=True, enforce_eager=True)),
        generate_s=20.0,
        prefix=p,
    )
    off = result(
        "nocache",
        recipe("nocache", engine=vllm(enable_prefix_caching=False, enforce_eager=True)),
        generate_s=31.5,
        prefix=Prefix(shared_prefix_tokens=124, shared_prefix_share=0.4267, hit_rate=0.0),
    )
    lone = result(
        "fp8",
        recipe(
            "fp8", engine=vllm(enable_prefix_caching=True, enforce_eager=True, quantization="fp8")
        ),
        generate_s=15.0,
        prefix=p,
    )
    return on, off, lone


def test_prefix_section_shows_share_hit_rate_and_time_saved_against_partner():
    on, off, lone = _prefix_pair()
    on = on.model_copy(update={"plan": {"cached_share": 0.4173}})  # the block-exact prediction
    md = "\n".join(prefix_section([result("base", recipe("base", baseline=True)), off, on, lone]))
    rows = {r["recipe"]: r for r in table_with(md, "measured hit rate")}
    assert set(rows) == {"cache", "fp8"}  # caching off and transformers are not listed
    c = rows["cache"]
    assert c["prefix shared by all (tokens)"] == "124"
    assert c["share"] == "42.7%"
    assert c["predicted hit rate"] == "41.7%"
    assert rows["fp8"]["predicted hit rate"] == "–"  # no prediction recorded
    assert c["measured hit rate"] == "41.7%"
    assert c["generation time saved"] == "11.5 s (37%) vs nocache"
    assert rows["fp8"]["generation time saved"] == "–"  # no partner differing only in caching


def test_prefix_section_uses_effective_knob_when_recipe_leaves_default():
    on = result(
        "cache",
        recipe("cache", engine=vllm(enforce_eager=True)),
        generate_s=20.0,
        knobs=[
            KnobResult(
                name="enable_prefix_caching", requested=None, effective=True, status="default"
            )
        ],
        prefix=Prefix(shared_prefix_tokens=10, shared_prefix_share=0.1, hit_rate=0.05),
    )
    off = result(
        "nocache",
        recipe("nocache", engine=vllm(enable_prefix_caching=False, enforce_eager=True)),
        generate_s=25.0,
    )
    rows = {
        r["recipe"]: r
        for r in table_with("\n".join(prefix_section([on, off])), "measured hit rate")
    }
    assert rows["cache"]["generation time saved"] == "5.0 s (20%) vs nocache"
    assert prefix_section([off]) == []


def test_summary_includes_prefix_section():
    on, off, _ = _prefix_pair()
    md = summary_markdown([off, on])
    assert "## Prefix caching" in md and "11.5 s (37%) vs nocache" in section(md, "Prefix caching")


# --------------------------------------------------------------------------- answers that change


@pytest.fixture
def paired(tmp_path):
    base_em = [0] * 6 + [1] * 4
    gain_em = [1] * 10  # +6, -0
    one_em = [1] + base_em[1:6] + [0] + base_em[7:]  # q0 gained, q6 lost
    base = result(
        "base", recipe("base", baseline=True), scores={"exact_match": 0.4, "char_f1": 0.4}
    )
    gain = result(
        "gain", recipe("gain", engine=vllm()), scores={"exact_match": 1.0, "char_f1": 1.0}
    )
    one = result(
        "one",
        recipe("one", engine=vllm(enforce_eager=True)),
        scores={"exact_match": 0.4, "char_f1": 0.4},
    )
    dummy = result(
        "dummy",
        recipe("dummy", engine=vllm(quantization="fp8")),
        meaningful=False,
        scores={"exact_match": 1.0, "char_f1": 1.0},
    )
    for r, em in ((base, base_em), (gain, gain_em), (one, one_em), (dummy, gain_em)):
        store(tmp_path, r, samples(r.name, em))
    return tmp_path, [base, gain, one, dummy]


def test_mcnemar_exact_known_values():
    assert mcnemar_exact(6, 0) == 0.03125
    assert mcnemar_exact(0, 6) == 0.03125
    assert mcnemar_exact(1, 1) == 1.0
    assert mcnemar_exact(0, 0) == 1.0


def test_changed_answers_counts_and_mcnemar(paired):
    out, rs = paired
    md = "\n".join(changed_answers_section(rs, rs[0], out))
    assert md.lstrip().startswith("## Answers that change against base")
    rows = {r["recipe"]: r for r in table_with(md, "McNemar p (EM)")}
    assert set(rows) == {"gain", "one"}  # random weights are left out
    g, o = rows["gain"], rows["one"]
    assert (g["paired examples"], g["EM now right"], g["EM now wrong"]) == ("10", "6", "0")
    assert float(g["McNemar p (EM)"]) == pytest.approx(0.03125, rel=0.01)
    assert (
        g["exact_match difference (95% CI)"] == "+0.600 (too few examples to tell: n=10; 30 needed)"
    )
    assert g["clear differences"] == "too few examples to tell"
    assert g["outputs differ"] == "10"  # every output's text names its recipe here
    assert (o["EM now right"], o["EM now wrong"]) == ("1", "1")
    assert float(o["McNemar p (EM)"]) == 1.0
    assert (
        o["exact_match difference (95% CI)"] == "+0.000 (too few examples to tell: n=10; 30 needed)"
    )
    assert o["clear differences"] == "too few examples to tell"


def test_changed_answers_with_squad_metrics_count_changed_outputs(tmp_path):
    """The EM is whichever `*_exact_match` the baseline has; outputs that differ are counted by
    their text, also where no score moved; every score gets its paired difference with an interval,
    a clear drop is named."""
    scores = {"squad_exact_match": 0.0, "squad_f1": 0.5}
    base = result("base", recipe("base", baseline=True), scores=scores)
    fp8 = result("fp8", recipe("fp8", engine=vllm(quantization="fp8")), scores=scores)
    n = 200
    rows_b = [
        {
            "id": f"q{i}",
            "output": f"a{i}",
            "answers": ["x"],
            "squad_exact_match": 0.0,
            "squad_f1": 0.5,
        }
        for i in range(n)
    ]
    rows_f = [
        dict(r, output=r["output"] + ("!" if i % 2 else ""), squad_f1=0.4 if i % 4 == 0 else 0.5)
        for i, r in enumerate(rows_b)
    ]
    store(tmp_path, base, rows_b)
    store(tmp_path, fp8, rows_f)
    md = "\n".join(changed_answers_section([base, fp8], base, tmp_path))
    assert (
        "EM is `squad_exact_match`" in md
        and "Student t on the paired differences, as scipy.stats.ttest_rel" in md
    )
    (row,) = table_with(md, "McNemar p (EM)")
    assert (
        row["paired examples"],
        row["outputs differ"],
        row["EM now right"],
        row["EM now wrong"],
    ) == (
        "200",
        "100",
        "0",
        "0",
    )
    assert row["squad_exact_match difference (95% CI)"] == "+0.000 (+0.000 to +0.000)"
    f1 = row["squad_f1 difference (95% CI)"]  # 50 of 200 examples lose 0.1: mean -0.025
    mean, lo, hi = (float(x) for x in re.fullmatch(r"(\S+) \((\S+) to (\S+)\)", f1).groups())
    # +-1.96 SE: 0.006
    assert mean == -0.025 and -0.033 <= lo <= -0.029 and -0.021 <= hi <= -0.017, f1
    assert row["clear differences"] == "squad_f1 lower"


def test_changed_answers_lists_a_few_examples(paired):
    out, rs = paired
    lines = [ln for ln in changed_answers_section(rs, rs[0], out) if ln.startswith("- ")]
    gain_lines = [ln for ln in lines if ln.startswith("- gain · ")]
    one_lines = [ln for ln in lines if ln.startswith("- one · ")]
    assert len(gain_lines) == 3  # 6 changed, 3 shown
    assert all(re.search(r"`q[0-5]`", ln) for ln in gain_lines)
    assert (
        "baseline `wrong-base-0` → `right-gain-0`" in gain_lines[0]
        and "gold: gold0" in gain_lines[0]
    )
    assert len(one_lines) == 2
    assert "`q6`: baseline `right-base-6` → `wrong-one-6`" in one_lines[0]  # losses first
    assert not any(ln.startswith("- dummy") for ln in lines)


def test_changed_answers_needs_a_meaningful_baseline(paired):
    out, rs = paired
    base = rs[0].model_copy(update={"scores_meaningful": False})
    assert changed_answers_section([base, *rs[1:]], base, out) == []
    assert changed_answers_section(rs, None, out) == []
    assert "## Answers that change against base" in summary_markdown(rs, out=out)


# --------------------------------------------------------------------------- report.md

ENV = {
    "python": "3.12.3",
    "platform": "Linux-6.18-x86_64",
    "runner": "0.1.0",
    "git_commit": "5f7273c-dirty",
    "packages": {
        "torch": "2.11.0",
        "transformers": "5.17.0",
        "vllm": "0.26.0",
        "datasets": "5.2.0",
    },
    "gpu": "NVIDIA H200",
    "driver": "580.159.04",
    "gpu_memory_gib": 140.4,
    "cuda_driver": "13.0",
    "engine_extra": {
        "model_runner": "V2",
        "env": {"VLLM_USE_FLASHINFER_SAMPLER": "0"},
        "warmup": "4,096 prompts of 4 tokens, 2 output tokens each, 1.2 s (part of the engine "
        "start)",
    },
    "inputs": {
        "template:jsquad.j2": "0decf3a48250b0a4",
        "template:jsquad-system.j2": "9a8f64533e6b04b2",
        "dataset:/data/jsquad/valid-v1.3.json": "fb0a57a35281ff03",
    },
}
COMMAND = "runner go recipes/jsquad-vllm.yaml --out reports/h200 --set 'sampling.max_tokens=16'"


def _repro_result(**kw) -> RunResult:
    rec = recipe(
        "repro",
        engine=vllm(enable_prefix_caching=True),
        description="a vLLM run",
        prompt={"system": "答えだけを書いてください。\n短く。", "system_template": None},
    )
    return result(
        "repro",
        rec,
        environment=kw.pop("environment", ENV),
        command=COMMAND,
        recipe_hash="2ed6c876846c7d06",
        run_key="9f1e2d3c4b5a6978",
        started_at="2026-12-02T10:35:07+00:00",
        finished_at="2026-12-02T10:36:04+00:00",
        **kw,
    )


def test_report_reproducibility_block():
    r = _repro_result()
    md = report_markdown(r, samples("repro", [1, 0, 1, 1]))
    repro = section(md, "Reproduce")
    rows = {row[""]: row["value"] for row in table_with(repro, "value")}
    assert rows["recipe hash"] == "`2ed6c876846c7d06`"
    assert rows["run key"] == "`9f1e2d3c4b5a6978`"
    for k, v in ENV["inputs"].items():
        assert rows[k] == f"`{v}`"
    assert rows["runner"] == "0.1.0"
    assert rows["git commit"] == "5f7273c-dirty"
    assert rows["python"] == "3.12.3"
    assert rows["gpu"] == "NVIDIA H200"
    assert rows["driver"] == "580.159.04"
    assert rows["cuda driver"] == "13.0"
    for p, v in ENV["packages"].items():
        assert rows[p] == v
    assert rows["vLLM model runner"] == "V2"
    assert rows["engine environment"] == "VLLM_USE_FLASHINFER_SAMPLER=0"
    assert rows["engine warm-up"] == ENV["engine_extra"]["warmup"]
    assert rows["started / finished"] == "2026-12-02T10:35:07+00:00 / 2026-12-02T10:36:04+00:00"
    assert f"```bash\n{COMMAND}\n```" in repro
    m = re.search(r"^## Resolved recipe\n\n```yaml\n(.*?)\n```", md, flags=re.S | re.M)
    assert m, md
    assert yaml.safe_load(m.group(1)) == r.recipe.canonical()


def test_report_reproducibility_without_optional_facts():
    r = _repro_result(environment={}).model_copy(update={"run_key": "", "command": ""})
    md = report_markdown(r, [])
    rows = {row[""]: row["value"] for row in table_with(section(md, "Reproduce"), "value")}
    # unknown: left out
    assert rows["run key"] == "–" and rows["git commit"] == "–" and "torch" not in rows
    assert "```bash" not in md


def test_report_input_file_names_are_shown_verbatim():
    env = {
        **ENV,
        "inputs": {"template:my_prompt.j2": "00aa", "dataset:/data/valid_v1.json": "11bb"},
    }
    rows = {
        row[""]: row["value"]
        for row in table_with(
            section(report_markdown(_repro_result(environment=env), []), "Reproduce"), "value"
        )
    }
    assert rows.get("template:my_prompt.j2") == "`00aa`"
    assert rows.get("dataset:/data/valid_v1.json") == "`11bb`"


def test_report_header_samples_and_sections():
    r = _repro_result(peak=30.0)
    md = report_markdown(r, samples("repro", [1, 0, 1, 1], outputs=["a`b", "x\ny", "c", "d"]))
    assert md.startswith("# repro\n\n- **ok** · 10 examples, generation 10.0 s (1 run: no ")
    assert "\n\na vLLM run\n\nEngine: vLLM 1.0 · model: `Qwen/Qwen2.5-7B-Instruct` · " in md
    for h in (
        "Time and throughput",
        "Tokens",
        "Memory",
        "Scores",
        "Prompt prefix",
        "Sample prompts and outputs",
    ):
        assert f"## {h}" in md
    assert re.findall(r"^### (q\d)$", md, flags=re.M) == ["q0", "q1", "q2"]  # three examples shown
    assert "Output: `aˋb`" in md and "Output: `x⏎y`" in md
    assert "30.0 GiB" in section(md, "Memory")


def test_failed_result_in_report_and_summary(tmp_path, base_rec):
    failed = result(
        "offload",
        recipe("offload", engine=vllm(cpu_offload_gb=8)),
        status="failed",
        error="timed out after 400 s (recipe timeout); the run was ended",
        hint="see reports/offload/engine.log",
    )
    store(tmp_path, failed)
    path = write_report(failed, tmp_path)
    md = path.read_text(encoding="utf-8")
    assert path == tmp_path / "offload" / "report.md"
    assert md.startswith(
        "# offload\n\n- **failed**: timed out after 400 s (recipe timeout); the run was ended\n"
        "- Hint: see reports/offload/engine.log\n"
    )
    assert "No scores" in md
    rs = [result("base", base_rec), failed]
    s = summary_markdown(rs)
    assert summary_rows(s)["offload"]["status"] == "failed"
    fails = section(s, "Failures")
    assert (
        "- **offload**: timed out after 400 s (recipe timeout); the run was ended — hint: "
        "see reports/offload/engine.log"
    ) in fails
    assert "base" not in fails
    assert "## Failures" not in summary_markdown([result("base", base_rec)])


# --------------------------------------------------------------------------- charts


def _is_png(p: Path) -> bool:
    return p.read_bytes()[:4] == b"\x89PNG" and p.stat().st_size > 5_000


def _chart_results(meaningful: bool = True, peak: bool = True) -> list[RunResult]:
    est = Estimate(
        n_measured=40,
        n_total=4442,
        per_example_s=0.7,
        projected_s=3100.0,
        low_s=2900.0,
        high_s=3300.0,
        method="t",
    )
    pk = (lambda v: v) if peak else (lambda v: None)
    return [
        result(
            "base",
            recipe("base", baseline=True),
            generate_s=30.0,
            estimate=est,
            peak=pk(15.7),
            meaningful=meaningful,
            scores={"exact_match": 0.80},
        ),
        result(
            "batched",
            generate_s=64.0,
            peak=pk(36.1),
            meaningful=meaningful,
            scores={"exact_match": 0.79},
        ),
        result(
            "vllm",
            recipe("vllm", engine=vllm()),
            generate_s=20.8,
            peak=pk(128.3),
            meaningful=meaningful,
            scores={"exact_match": 0.81},
        ),
        result(
            "awq",
            recipe("awq", engine=vllm(quantization="awq")),
            generate_s=18.8,
            peak=pk(128.5),
            meaningful=meaningful,
            scores={"exact_match": 0.75},
        ),
        result("broken", status="failed", error="boom"),
    ]


def test_write_charts_all_three(tmp_path):
    rs = _chart_results()
    made = plots.write_charts(rs, rs[0], tmp_path, plots.Accuracy("exact_match", {rs[1].name}))
    assert sorted(p.name for p in made) == ["accuracy_vs_time.png", "memory.png", "time.png"]
    for p in made:
        assert p.parent == tmp_path and _is_png(p), p


def test_write_charts_skips_accuracy_without_meaningful_scores_and_memory_without_peak(tmp_path):
    rs = _chart_results(meaningful=False, peak=False)
    made = plots.write_charts(rs, rs[0], tmp_path)
    assert [p.name for p in made] == ["time.png"]
    assert _is_png(tmp_path / "time.png")
    assert (
        not (tmp_path / "accuracy_vs_time.png").exists() and not (tmp_path / "memory.png").exists()
    )
    assert (
        plots.write_charts([result("broken", status="failed", error="x")], None, tmp_path / "none")
        == []
    )


def test_the_summary_chart_plots_the_gates_metric_with_intervals_and_marks_gate_failures(
    tmp_path, monkeypatch
):
    """The README's own example plotted an all-zero exact match: the chart now plots the gate's
    metric, gives each point its score's 95% interval (from the samples) and marks the run that
    failed its gate."""
    from runner.report.summary import chart_metric

    gate = {"gate": {"metric": "char_f1", "max_drop": 0.05}}
    base = result(
        "base", recipe("base", baseline=True, **gate), scores={"exact_match": 0.0, "char_f1": 0.6}
    )
    worse = result(
        "worse",
        recipe("worse", engine=vllm(quantization="fp8"), **gate),
        scores={"exact_match": 0.0, "char_f1": 0.3},
    )
    rows = lambda f: [
        {"id": f"q{i}", "output": "o", "answers": ["g"], "exact_match": 0.0, "char_f1": f(i)}
        for i in range(40)
    ]
    store(tmp_path, base, rows(lambda i: 0.6 + (0.1 if i % 2 else -0.1)))
    store(tmp_path, worse, rows(lambda i: 0.3))
    assert chart_metric([base, worse]) == "char_f1"  # the gate's
    bare = [
        r.model_copy(update={"recipe": r.recipe.model_copy(update={"gate": None})})
        for r in (base, worse)
    ]
    assert chart_metric(bare) == "char_f1"  # exact_match scored 0 everywhere: passed over
    seen = {}
    monkeypatch.setattr(plots, "accuracy_chart", lambda rs, a, path: seen.update(a=a))
    write_summary([base, worse], tmp_path)
    a = seen["a"]
    assert a.metric == "char_f1" and set(a.failed) == {"worse"}
    lo, hi = a.score_ci["base"]
    assert lo < 0.6 < hi and hi - lo < 0.1 and a.score_ci["worse"] == (0.3, 0.3)


def test_pareto_front():
    # (time, -score): lower time and higher score
    pts = [
        (1.0, -0.5),
        (2.0, -0.7),
        (3.0, -0.6),
        (0.5, -0.2),
        (2.0, -0.7),
        (4.0, -0.7),
        (0.5, -0.1),
    ]
    assert plots.pareto_front(pts) == [0, 1, 3, 4]
    assert plots.pareto_front([(1.0, 1.0)]) == [0]
    assert plots.pareto_front([]) == []


def test_summary_links_the_charts(tmp_path):
    rs = _chart_results()
    text = write_summary(rs, tmp_path).read_text(encoding="utf-8")
    charts = section(text, "Charts")
    links = re.findall(r"!\[[^\]]+\]\(([^)]+\.png)\)", charts)
    assert sorted(links) == ["accuracy_vs_time.png", "memory.png", "time.png"]
    assert all(_is_png(tmp_path / link) for link in links)
    out2 = tmp_path / "dummy"
    out2.mkdir()
    text2 = write_summary(_chart_results(meaningful=False, peak=False), out2).read_text(
        encoding="utf-8"
    )
    assert re.findall(r"!\[[^\]]+\]\(([^)]+)\)", text2) == ["time.png"]


# --------------------------------------------------------------------------- 30 recipes


def _thirty() -> list[RunResult]:
    """A realistic large study: sweeps over engine settings plus a few recipes that change a lot at
    once."""
    rs = [
        result(
            "hf-sequential", recipe("hf-sequential", baseline=True), generate_s=3000.0, peak=15.7
        )
    ]
    for bs in (8, 32, 128):
        rs.append(
            result(
                f"hf-b{bs}",
                recipe(
                    f"hf-b{bs}",
                    engine={
                        "kind": "transformers",
                        "device": "cuda",
                        "batch_size": bs,
                        "attn_implementation": "sdpa",
                    },
                ),
                generate_s=3000.0 / bs**0.8,
                peak=20.0 + bs / 8,
            )
        )
    for util in (0.5, 0.7, 0.9):
        for eager in (True, False):
            for cache in (True, False):
                n = f"vllm-u{int(util * 100)}-{'eager' if eager else 'graphs'}-"
                n += "cache" if cache else "nocache"
                rs.append(
                    result(
                        n,
                        recipe(
                            n,
                            engine=vllm(
                                gpu_memory_utilization=util,
                                enforce_eager=eager,
                                enable_prefix_caching=cache,
                            ),
                        ),
                        generate_s=20.0 + util + eager + cache,
                        peak=140 * util,
                    )
                )
    long_system = (
        "あなたは日本語の読解問題に答えるアシスタントです。\n答えは本文から抜き出し、"
        "説明を付けずに一語で書いてください。|区切り|も含む。"
    )
    for q in ("awq", "gptq", "fp8"):
        n = f"vllm-{q}-kitchen-sink"
        rs.append(
            result(
                n,
                recipe(
                    n,
                    model={
                        "id": f"/root/shared/models/qwen2.5-7b-instruct-{q}",
                        "tokenizer": f"/root/shared/models/qwen2.5-7b-instruct-{q}",
                        "dtype": "float16",
                        "trust_remote_code": True,
                    },
                    engine=vllm(
                        quantization=q,
                        enable_prefix_caching=True,
                        enforce_eager=True,
                        max_model_len=4096,
                        kv_cache_dtype="fp8",
                        gpu_memory_utilization=0.85,
                        seed=1234,
                        engine_args={"max_num_seqs": 512, "max_num_batched_tokens": 16384},
                        env={"VLLM_USE_FLASHINFER_SAMPLER": "0"},
                    ),
                    dataset={
                        "path": "/root/shared/data/jsquad/valid-v1.3-subset-with-a-long-name.json",
                        "limit": 1000,
                        "shuffle": True,
                        "seed": 7,
                    },
                    prompt={
                        "system": long_system,
                        "template": "/root/project/templates/jsquad-with-context-first.j2",
                        "system_template": None,
                        "chat_template": True,
                        "shots": {
                            "placement": "system",
                            "examples": [
                                {"question": "琵琶湖がある都道府県はどこか。", "answer": "滋賀県"}
                            ],
                        },
                    },
                    sampling={
                        "max_tokens": 16,
                        "ignore_eos": True,
                        "stop": ["\n", "。", "</s>"],
                        "temperature": 0.2,
                        "top_p": 0.95,
                        "seed": 1,
                    },
                ),
                generate_s=15.0,
                peak=128.0,
            )
        )
    for mt in (8, 16, 64):
        rs.append(
            result(
                f"vllm-max{mt}",
                recipe(f"vllm-max{mt}", engine=vllm(), sampling={"max_tokens": mt}),
                generate_s=10.0 + mt / 4,
                peak=128.0,
            )
        )
    for kv in ("fp8", "fp8_e5m2"):
        rs.append(
            result(
                f"vllm-kv-{kv}",
                recipe(f"vllm-kv-{kv}", engine=vllm(kv_cache_dtype=kv)),
                generate_s=19.0,
            )
        )
    rs.append(
        result("vllm-tp2", recipe("vllm-tp2", engine=vllm(tensor_parallel_size=2)), generate_s=14.0)
    )
    for q in ("bitsandbytes-4bit", "bitsandbytes-8bit"):
        rs.append(
            result(
                f"hf-{q}",
                recipe(
                    f"hf-{q}",
                    engine={
                        "kind": "transformers",
                        "device": "cuda",
                        "batch_size": 32,
                        "quantization": q,
                    },
                ),
                generate_s=900.0,
                peak=9.0,
            )
        )
    rs.append(
        result(
            "hf-eager-attn",
            recipe(
                "hf-eager-attn",
                engine={"kind": "transformers", "device": "cuda", "attn_implementation": "eager"},
            ),
            generate_s=3500.0,
        )
    )
    rs.append(
        result(
            "vllm-offload",
            recipe("vllm-offload", engine=vllm(cpu_offload_gb=8)),
            status="failed",
            error="timed out after 400 s\n(recipe timeout)",
            hint="see engine.log",
        )
    )
    rs.append(
        result(
            "vllm-plain",
            recipe("vllm-plain", engine=vllm()),
            generate_s=21.0,
            estimate=Estimate(
                n_measured=50,
                n_total=4442,
                per_example_s=0.005,
                projected_s=22.2,
                low_s=20.0,
                high_s=24.4,
                method="t",
            ),
        )
    )
    assert len(rs) == 30 and len({r.name for r in rs}) == 30
    return rs


def test_thirty_recipes_stay_one_table_of_single_line_rows():
    md = summary_markdown(_thirty())
    main = [t for t in tables(md) if DIFF in t[0]]
    assert len(main) == 1
    head, *rows = main[0]
    assert len(rows) == 30
    # recipes by name, however they were read
    assert [r[0] for r in rows] == sorted(r.name for r in _thirty())
    assert all(len(r) == len(head) for r in rows), (
        "a row has a different number of cells than the header"
    )
    # every physical table line is one row: header + separator + 30
    block = [ln for ln in md.split("\n## ")[0].splitlines() if ln.startswith("|")]
    assert len(block) == 32


def test_thirty_recipes_diff_cells_are_bounded():
    rows = summary_rows(summary_markdown(_thirty()))
    assert len(rows) == 30
    longest = max(rows.values(), key=lambda r: len(r[DIFF]))
    assert len(longest[DIFF]) <= 400, f"{longest['recipe']}: {len(longest[DIFF])} characters"


def test_thirty_recipes_short_diffs_are_complete():
    rows = summary_rows(summary_markdown(_thirty()))
    assert rows["hf-b32"][DIFF] == "engine.attn_implementation=sdpa, engine.batch_size=32"
    assert rows["vllm-u50-eager-nocache"][DIFF] == (
        "engine.enable_prefix_caching=False, engine.enforce_eager=True, "
        "engine.gpu_memory_utilization=0.5"
    )
    assert rows["vllm-u90-graphs-cache"][DIFF] == "engine.enable_prefix_caching=True"
    assert rows["vllm-max64"][DIFF] == "sampling.max_tokens=64"
    assert rows["vllm-plain"][DIFF] == ""


# --------------------------------------------------------------------------- `runner report`


def _stored(out: Path) -> list[RunResult]:
    rs = [
        result(
            "base",
            recipe("base", baseline=True),
            generate_s=100.0,
            scores={"exact_match": 0.4, "char_f1": 0.4},
        ),
        result(
            "fast",
            recipe("fast", engine=vllm(enforce_eager=True)),
            generate_s=10.0,
            scores={"exact_match": 1.0, "char_f1": 1.0},
        ),
        result(
            "broken",
            recipe("broken", engine=vllm(cpu_offload_gb=8)),
            status="failed",
            error="boom",
            hint="look at engine.log",
        ),
    ]
    store(out, rs[0], samples("base", [0] * 6 + [1] * 4))
    store(out, rs[1], samples("fast", [1] * 10))
    store(out, rs[2])
    return rs


def invoke(*args) -> Any:
    return CliRunner().invoke(cli, [str(a) for a in args])


def test_cli_report_rebuilds_reports_and_summary(tmp_path):
    rs = _stored(tmp_path)
    (tmp_path / "fast" / "report.md").write_text("stale", encoding="utf-8")
    res = invoke("report", tmp_path)
    assert res.exit_code == 0, res.output
    assert f"summary: {tmp_path / 'summary.md'} (3 recipes)" in res.output
    for r in rs:
        md = (tmp_path / r.name / "report.md").read_text(encoding="utf-8")
        assert md == report_markdown(r, load_samples(RunFolder(tmp_path / r.name)))
        assert md.startswith(f"# {r.name}\n")
    s = (tmp_path / "summary.md").read_text(encoding="utf-8")
    assert "3 recipes; baseline: **base**." in s
    rows = summary_rows(s)
    assert (
        rows["fast"]["speed-up"] == "10.0× (1 run: no interval)"
        and rows["base"][DIFF] == "(baseline)"
    )
    assert "## Failures" in s and "- **broken**: boom — hint: look at engine.log" in s
    assert "## Answers that change against base" in s
    assert "![time](time.png)" in s and (tmp_path / "time.png").exists()
    assert [r.name for r in load_results(tmp_path)] == ["base", "broken", "fast"]


def test_cli_report_with_baseline_option(tmp_path):
    _stored(tmp_path)
    res = invoke("report", tmp_path, "--baseline", "fast")
    assert res.exit_code == 0, res.output
    s = (tmp_path / "summary.md").read_text(encoding="utf-8")
    assert "baseline: **fast**." in s
    rows = summary_rows(s)
    assert rows["fast"][DIFF] == "(baseline)"
    assert rows["base"]["speed-up"] == "10.0× slower (1 run: no interval)"
    assert "## Answers that change against fast" in s


def test_cli_report_says_which_of_two_stored_baselines_it_compares_against(tmp_path):
    rs = _stored(tmp_path)
    store(tmp_path, rs[1].model_copy(update={"recipe": recipe("fast", baseline=True)}))
    res = invoke("report", tmp_path)
    assert res.exit_code == 0, res.output
    said = (
        "2 stored results are marked `baseline: true` (base, fast): summary.md compares against "
        "base (--baseline NAME picks another)\n"
    )
    assert said in res.output
    assert "baseline: **base**." in (tmp_path / "summary.md").read_text(encoding="utf-8")
    assert said not in invoke("report", tmp_path, "--baseline", "fast").output


def test_cli_report_refuses_a_gate_given_twice(tmp_path):
    _stored(tmp_path)
    res = invoke("report", tmp_path, "--gate", "exact_match:0.01", "--gate", "exact_match:0.5")
    assert user_error(res).endswith(
        "Error: Invalid value for '--gate': given 2 times (exact_match:0.01, exact_match:0.5); "
        "give it once\n"
    )
    assert not (tmp_path / "summary.md").exists()


def test_cli_report_on_empty_folder_is_a_user_error(tmp_path):
    res = invoke("report", tmp_path)
    assert user_error(res) == ("Error: {tmp}: no */results.json here\n")
    assert isinstance(res.exception, SystemExit)
    assert "no */results.json here" in res.output and str(tmp_path) in res.output
    assert "Traceback" not in res.output
    assert not (tmp_path / "summary.md").exists()


def test_cli_report_on_missing_folder_is_a_user_error(tmp_path):
    res = invoke("report", tmp_path / "nope")
    assert user_error(res) == (
        "Usage: cli report [OPTIONS] OUT\n"
        "Try 'cli report --help' for help.\n"
        "\n"
        "Error: Invalid value for 'OUT': Directory '{tmp}/nope' does not exist.\n"
    )
    assert "does not exist" in res.output


def test_cli_report_unknown_baseline_is_a_user_error(tmp_path):
    _stored(tmp_path)
    res = invoke("report", tmp_path, "--baseline", "fsat")
    assert user_error(res) == (
        "Error: --baseline 'fsat' names no stored result; results: base, broken, fast\n"
    )
    assert "fsat" in res.output and "base" in res.output


def test_cli_report_leaves_a_malformed_results_json_out_and_reports_the_others(tmp_path):
    """One bad file does not stop the others' reports (issue 29); alone, it is a one-screen
    error."""
    _stored(tmp_path)
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "results.json").write_text(
        '{"name": "bad", "status": "maybe"}', encoding="utf-8"
    )
    res = invoke("report", tmp_path)
    assert res.exit_code == 0 and "(3 recipes)" in res.output
    assert res.stderr.replace(str(tmp_path), "{tmp}") == (
        "left out: {tmp}/bad/results.json: not a valid results.json (2 problem(s); first: recipe: "
        "Field required)\n"
        "  hint: rerun that recipe, or remove its folder\n"
    )


def test_compressed_samples_are_read_like_plain_ones(tmp_path):
    import gzip

    from runner.folder import load_samples

    rows = [{"id": "a", "output": "x"}, {"id": "b", "output": "ｙ"}]
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    (tmp_path / "samples.jsonl.gz").write_bytes(gzip.compress(text.encode("utf-8")))
    assert load_samples(RunFolder(tmp_path)) == rows
    (tmp_path / "samples.jsonl").write_text(text[: text.index("\n") + 1], encoding="utf-8")
    assert load_samples(RunFolder(tmp_path)) == rows[:1]  # the plain file wins


# --------------------------------------------------------------------------- quality gate


def test_gate_passes_fails_and_leaves_unscored_runs_out(tmp_path):
    """char_f1 may drop at most 0.05: a recipe 0.10 lower on every example fails, one that only
    moves inside the noise passes and, being the fastest that passed, is named; a random-weights run
    is not scored; a relative gate allows (1 - 0.5) x the baseline's mean."""
    from runner.report.summary import gate_section, judged

    gate = {"gate": {"metric": "char_f1", "max_drop": 0.05}}
    n = 100
    base = result("base", recipe("base", baseline=True, **gate), generate_s=20.0)
    worse = result(
        "worse", recipe("worse", engine=vllm(quantization="fp8"), **gate), generate_s=5.0
    )
    same = result("same", recipe("same", engine=vllm(), **gate), generate_s=8.0)
    dummy = result(
        "dummy",
        recipe("dummy", engine=vllm(enforce_eager=True), **gate),
        generate_s=1.0,
        meaningful=False,
    )
    rows = lambda f: [
        {"id": f"q{i}", "output": "o", "answers": ["g"], "exact_match": 0.0, "char_f1": f(i)}
        for i in range(n)
    ]
    store(tmp_path, base, rows(lambda i: 0.6))
    store(tmp_path, worse, rows(lambda i: 0.5))
    store(tmp_path, same, rows(lambda i: 0.6 + (0.02 if i % 2 else -0.02)))
    store(tmp_path, dummy, rows(lambda i: 0.0))
    md = "\n".join(gate_section(judged([base, worse, same, dummy], out=tmp_path)))
    got = {r["recipe"]: r for r in table_with(md, "allowed")}
    assert got["worse"]["gate"] == "fail" and got["worse"][
        "difference from the baseline (95% CI)"
    ].startswith("-0.100")
    assert got["same"]["gate"] == "pass" and got["same"]["allowed"] == "-0.050"
    assert (
        got["dummy"]["gate"] == "not scored"
        and got["dummy"]["why"] == "random weights or the fake engine"
    )
    assert md.rstrip().endswith(
        "Fastest that passed: **same** (8.00 s (1 run: no interval)); against the baseline: 2.50× "
        "(1 run: no interval)."
    )
    rel = {"gate": {"metric": "char_f1", "relative": 0.5}}  # allowed drop 0.3: -0.1 passes
    base2 = result("base", recipe("base", baseline=True, **rel), generate_s=20.0)
    worse2 = result(
        "worse", recipe("worse", engine=vllm(quantization="fp8"), **rel), generate_s=5.0
    )
    md = "\n".join(gate_section(judged([base2, worse2], out=tmp_path)))
    (row,) = table_with(md, "allowed")
    assert (row["gate"], row["allowed"]) == (
        "pass",
        "-0.300",
    ) and "**worse** (5.00 s (1 run: no interval))" in md


@pytest.mark.parametrize("gate", [{"max_drop": 0}, {"relative": 1.0}])
def test_a_zero_allowance_passes_identical_answers_and_fails_one_that_scores_lower(tmp_path, gate):
    """`max_drop: 0` (or `relative: 1`): identical outputs pass (they failed before: 0 > -0 is
    false), one example that scored lower fails, whatever the count; the headline names the fastest
    that passed and the faster one the gate stopped."""
    g = {"gate": {"metric": "char_f1", **gate}}
    base = result("base", recipe("base", baseline=True, **g), generate_s=20.0)
    same = result("same", recipe("same", engine=vllm(), **g), generate_s=5.0)
    one = result("one", recipe("one", engine=vllm(quantization="fp8"), **g), generate_s=2.0)
    rows = lambda f: [
        {"id": f"q{i}", "output": "o", "answers": ["g"], "char_f1": f(i)} for i in range(40)
    ]
    store(tmp_path, base, rows(lambda i: 0.6))
    store(tmp_path, same, rows(lambda i: 0.6))
    store(tmp_path, one, rows(lambda i: 0.5 if i == 7 else 0.6))
    md = summary_markdown([base, same, one], out=tmp_path)
    got = {r["recipe"]: r for r in table_with(md, "allowed")}
    assert (got["same"]["gate"], got["same"]["why"]) == (
        "pass",
        "allowance 0: none of 40 examples scored lower",
    )
    assert (got["one"]["gate"], got["one"]["why"]) == (
        "fail",
        "allowance 0: 1 of 40 examples scored lower",
    )
    assert (
        "Fastest that passed its gate: **same**, 5.00 s (1 run: no interval); against the baseline "
        "base: 4.00× (1 run: no interval). Faster, but not through the gate: one (failed)." in md
    )


def test_the_gate_says_too_few_examples_to_tell_and_never_passes_them(tmp_path):
    """Under 30 paired examples the gate gives no interval and no pass: one example's identical
    score no longer makes a zero-width "clear" verdict; the headline falls back to the baseline."""
    g = {"gate": {"metric": "char_f1", "max_drop": 0.05}}
    base = result("base", recipe("base", baseline=True, **g), generate_s=20.0)
    fast = result("fast", recipe("fast", engine=vllm(), **g), generate_s=5.0)
    rows = [{"id": f"q{i}", "output": "o", "answers": ["g"], "char_f1": 0.6} for i in range(5)]
    store(tmp_path, base, rows)
    store(tmp_path, fast, rows)
    md = summary_markdown([base, fast], out=tmp_path)
    (row,) = table_with(md, "allowed")
    assert (
        row["gate"] == "too few to tell"
        and row["why"] == "too few examples to tell (n=5; 30 needed)"
    )
    assert (
        row["difference from the baseline (95% CI)"]
        == "+0.000 (too few examples to tell: n=5; 30 needed)"
    )
    assert (
        "Fastest that passed its gate: **base**" in md
        and "Faster, but not through the gate: fast (too few" in md
    )


def test_a_gate_that_cannot_apply_is_an_error_that_says_why(tmp_path):
    """`runner report DIR --gate ...` with no baseline, on a metric nobody scored with real weights,
    or over recipes that all have their own gate: exit 2 naming why (it was ignored without a word);
    over some, it says which keep their own."""
    from tests.cli_output import user_error

    own = {"gate": {"metric": "char_f1", "max_drop": 0.05}}
    base, a = result("base", recipe("base")), result("a", recipe("a", engine=vllm()))
    dummy = result(
        "d",
        recipe("d", engine=vllm(quantization="fp8")),
        meaningful=False,
        scores={"squad_f1": 0.1},
    )
    for r in (base, a, dummy):
        store(tmp_path, r, [])
    go = lambda *args: CliRunner().invoke(cli, ["report", str(tmp_path), *args])
    assert user_error(go("--gate", "char_f1:0.01")) == (
        "Error: --gate: has no baseline to compare with: no stored recipe is marked `baseline: "
        "true`\n  hint: name one with --baseline NAME (results here: a, base, d)\n"
    )
    assert user_error(go("--gate", "squad_f1:0.01", "--baseline", "base")) == (
        "Error: --gate: no stored run scored 'squad_f1' with real weights\n"
        "  hint: gate a metric they scored: char_f1, exact_match\n"
    )
    store(tmp_path, a.model_copy(update={"recipe": recipe("a", engine=vllm(), **own)}), [])
    store(
        tmp_path,
        dummy.model_copy(update={"recipe": recipe("d", engine=vllm(quantization="fp8"), **own)}),
        [],
    )
    assert user_error(go("--gate", "char_f1:0.01", "--baseline", "base")) == (
        "Error: --gate: every recipe but the baseline has a gate of its own (a, d); --gate is for "
        "those without\n  hint: leave --gate out, or change the recipes' `gate:` and rerun\n"
    )
    store(tmp_path, a, [])
    r = go("--gate", "char_f1:0.01", "--baseline", "base")
    assert (
        r.exit_code == 0
        and "--gate applies to the recipes without a gate of their own; d keep theirs" in r.output
    )


def test_a_speed_up_inside_the_noise_says_how_many_repeats_would_tell():
    """A speed-up inside the noise comes with a power hint: the repeats that would make a difference
    of the size seen clear at the noise seen (95%, 80% power)."""
    from runner.results import Repeat

    reps = lambda ts: [Repeat(index=i + 1, generate_s=t) for i, t in enumerate(ts)]
    slow = result(
        "base", recipe("base", baseline=True), generate_s=2.0, repeats=reps([2.0, 2.4, 1.7])
    )
    fast = result(
        "fast", recipe("fast", engine=vllm()), generate_s=1.9, repeats=reps([1.9, 2.2, 1.8])
    )
    md = summary_markdown([slow, fast])
    (cell,) = [r["speed-up"] for r in table_with(md, "speed-up") if r["recipe"] == "fast"]
    assert re.fullmatch(
        r"no clear difference \(\S+×\) \(back to back\); ~[\d,]+ repeats would tell", cell
    ), cell
    assert "`(back to back)`, `(across calls)`: how the speed-up's two runs were measured" in md


def test_a_score_difference_inside_the_noise_says_how_many_examples_would_tell():
    from runner.report.summary import _interval

    # mean +0.01, sd ~0.129
    diffs = [0.2 if i % 4 == 0 else -0.16 if i % 4 == 1 else 0.0 for i in range(40)]
    text, way = _interval(diffs)
    assert way is None and re.fullmatch(
        r"\+0\.010 \(\S+ to \S+\); ~[\d,]+ examples would tell", text
    ), text
    n = int(text.split("~")[1].split(" ")[0].replace(",", ""))
    assert 1250 <= n <= 1350, n  # (2.80 x 0.129 / 0.01)^2 ~ 1,307


def test_gate_metric_must_be_scored():
    with pytest.raises(Exception, match="gate.metric 'squad_f1' is not among `metrics`"):
        recipe("x", gate={"metric": "squad_f1", "max_drop": 0.1})
    with pytest.raises(Exception, match="give either `max_drop` or `relative`"):
        recipe("x", gate={"metric": "char_f1"})


def test_without_a_baseline_the_headline_never_names_a_screen_on_fewer_examples():
    """A tune's folder has no `baseline: true` run: a 400-example screen (faster, on fewer examples)
    was headlined as the fastest; the headline takes the runs that timed the most examples."""
    full = result("full", recipe("full"), generate_s=6.0, n=1000)
    screen = result(
        "full-t8-screen", recipe("full-t8-screen", engine=vllm()), generate_s=1.6, n=400
    )
    md = summary_markdown([full, screen])
    assert "Fastest: **full**" in md


# --------------------------------------------------------------------------- report.md's verdict


def test_the_report_answers_first_in_the_figures_its_sections_show():
    """Right under the title: status, examples and time, throughput, scores, the knobs ignored, a
    busy machine, the largest stage; each figure as its section below shows it."""
    from runner.results import Noise, Repeat, Stages

    knob = lambda name, status: KnobResult(
        name=name, requested=1, effective=0, status=status, evidence="e"
    )
    reps = [
        Repeat(index=1, generate_s=2.0),
        Repeat(index=2, generate_s=2.2, noise=Noise(busy=["load average 3.1 on 2 CPUs"])),
    ]
    r = result(
        "v",
        generate_s=2.1,
        n=36,
        repeats=reps,
        knobs=[knob("a", "applied"), knob("cpu_offload_gb", "ignored"), knob("b", "unverified")],
        stages=Stages(wall_s=20.0, start_s=12.0, generate_s=4.2, sink_s=13.0, other_s=3.8),
    )
    md = report_markdown(r, [])
    shown = table_with(md, "total tok/s")[0]
    assert md.split("\n\n")[1].splitlines() == [
        f"- **ok** · 36 examples, generation {shown['generation']} · {shown['requests/s']} "
        f"requests/s · {shown['output tok/s']} output tok/s",
        "- Scores: exact_match 0.5000, char_f1 0.7000",
        "- Knobs **IGNORED**: cpu_offload_gb · **Busy machine** in repeat 2: the time may be off "
        "(see Repeats)",
        # scoring runs during generation: never the largest stage
        "- Most of the wall time went to engine start (its build, imports included): 12.0 s, "
        "60% of 20.0 s",
    ]
    assert (
        shown["output tok/s"] == "137 (74.9–252)" and "Busy machine" not in md.split("\n\n", 2)[2]
    )
    assert "| load average 3.1 on 2 CPUs |" in section(md, "Time and throughput")  # why: in Repeats
    both = r.model_copy(update={"repeats": [reps[1], reps[1].model_copy(update={"index": 3})]})
    assert "- Knobs **IGNORED**: cpu_offload_gb · **Busy machine** in repeats 2, 3: " in (
        report_markdown(both, [])
    )
    quiet = r.model_copy(update={"repeats": reps[:1], "knobs": [knob("b", "unverified")]})
    assert (
        "- Knobs: none ignored (1 read back; unverified: b) · No repeat found the machine busy"
        in report_markdown(quiet, [])
    )
    fake = result("f", recipe("f", engine={"kind": "fake"}), meaningful=False, n=36)
    head = report_markdown(fake.model_copy(update={"n_samples": 8}), []).split("\n\n")[1]
    assert head.splitlines() == [
        "- **ok** · 8 of 36 examples, generation 10.0 s (1 run: no interval) · 3.6 requests/s · "
        "28.8 output tok/s",
        "- Scores: not meaningful (fake engine: no model ran)",
    ]


def test_the_headline_names_the_runs_the_fastest_is_not_clearly_faster_than():
    """Found by a tester: 'Fastest: **y**' over x of nearly the same time, nothing said; the study's
    own section said it, the call's headline and summary.json did not."""
    from runner.report import summary as s
    from runner.results import Repeat

    reps = lambda ts: [Repeat(index=i + 1, generate_s=t) for i, t in enumerate(ts)]
    base = result("a", recipe("a", baseline=True), generate_s=4.0, repeats=reps([4.0, 4.1, 3.9]))
    x = result("x", recipe("x", engine=vllm()), generate_s=2.1, repeats=reps([2.1, 2.4, 1.9]))
    y = result("y", recipe("y", engine=vllm()), generate_s=2.0, repeats=reps([2.0, 2.3, 1.8]))
    far = result("z", recipe("z", engine=vllm()), generate_s=3.0, repeats=reps([3.0, 3.05, 2.95]))
    j = s.judged([base, x, y, far], None, None)
    md = summary_markdown([base, x, y, far])
    [line] = [x for x in md.splitlines() if x.startswith("Fastest: **y**")]
    assert re.search(r"; not clearly faster than x \(\S+–\S+×\)\.$", line), line
    # on review: the baseline inside the noise is said once, in its own clause
    near = result("a", recipe("a", baseline=True), generate_s=2.1, repeats=reps([2.1, 2.4, 1.9]))
    [line] = [x for x in summary_markdown([near, y]).splitlines() if x.startswith("Fastest")]
    assert "against the baseline a: no clear difference (" in line, line
    assert "not clearly faster than" not in line, line
    assert s.SummaryJson.of(j).fastest_within_noise == ["x"]  # not z: clearly slower


def test_scores_left_out_say_whether_the_fake_engine_or_random_weights_made_them():
    """Found by a tester: fake-engine summaries said 'random weights'."""
    from runner.results import RunResult
    from tests.wired import a_recipe

    fake = RunResult(
        name="f",
        recipe=a_recipe("f"),
        status="ok",
        scores={"exact_match": 1.0},
        scores_meaningful=False,
    )
    weights = result("w", recipe("w", engine=vllm()), meaningful=False)
    said = lambda rs: next(
        x for x in summary_markdown(rs).splitlines() if "Scores are left out" in x
    )
    assert said([fake]) == (
        "Scores are left out: every recipe here ran with the fake engine (speed and memory only)."
    )
    assert "ran with random weights or the fake engine (" in said([fake, weights])
    assert "ran with random weights (" in said([weights])
