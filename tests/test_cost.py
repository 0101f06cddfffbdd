"""Issue 31: what a cell costs. Energy from NVML's counter (absent and labelled on the CPU), the
engine start split from vLLM's own log lines (cold or warm), the compile cache folder's knob."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from runner.cli import cli
from runner.engines.vllm import VLLMSpec, compile_cache_knob, parse_engine_log, start_parts
from runner.results import Repeat
from runner.run.result import energy_of

COLD_LOG = """\
(EngineCore pid=1) INFO Model loading took 8.25 GiB memory and 3.512345 seconds
(EngineCore) INFO Using cache directory: /c/torch_compile_cache/0a1b2c3d4e/rank_0_0/backbone for vLLM's torch.compile
(EngineCore pid=1) INFO torch.compile took 41.37 s in total
(EngineCore pid=1) INFO Graph capturing finished in 12 secs, took 1.02 GiB
"""  # noqa: E501  (a real log line)
WARM_LOG = COLD_LOG.replace(
    "torch.compile took 41.37",
    "Directly load the compiled graph(s) for compile range (1, 8192) from the cache, took 2.104 s\n"
    "(EngineCore pid=1) INFO torch.compile took 5.02",
)


def test_the_start_split_from_vllms_log_cold_then_warm():
    cold = start_parts(
        parse_engine_log(COLD_LOG), "/c/torch_compile_cache/0a1b2c3d4e/rank_0_0/backbone", 70.0, 4.0
    )
    assert cold == {
        "load_s": 3.512345,
        "compile_s": 41.37,
        "capture_s": 12.0,
        "profile_kv_s": None,  # no "init engine" line in this log
        "warmup_s": 4.0,
        "other_s": 70.0 - (3.512345 + 41.37 + 12.0 + 4.0),
        "cold": True,
        "compile_cache": "/c",
        "profiled": None,  # no memory line in this log
    }
    warm = start_parts(
        parse_engine_log(WARM_LOG),
        "/c/torch_compile_cache/0a1b2c3d4e/rank_0_0/backbone",
        30.0,
        None,
    )
    assert warm["cold"] is False and warm["compile_s"] == 5.02 and warm["warmup_s"] is None
    eager = start_parts(
        parse_engine_log("INFO Model loading took 14.3 GiB and 9.5 seconds\n"), None, 17.0, None
    )
    assert eager["cold"] is None and eager["compile_s"] is None and eager["other_s"] == 7.5


# vLLM 0.26's line (v1/engine/core.py), from an H100's warm CUDA-graph start (2026-12-06): the time
# holds the compile-cache load and the capture
INIT = (
    "(EngineCore pid=4404) INFO 12-06 12:06:18 [core.py:340] init engine (profile, create kv "
    "cache, warmup model) took 11.66 s (compilation: 5.55 s)\n"
)


def test_the_start_split_names_profiling_kv_cache_and_kernel_warm_up_apart_from_the_rest():
    """vLLM's "init engine" time less compile and capture is the profiling run, the KV cache and
    vLLM's kernel warm-up: taken out of `other_s` (where a host's first JIT of new kernels hid)."""
    graphs = start_parts(
        parse_engine_log(
            "INFO Model loading took 8.2 GiB and 2.790036 seconds\n"
            "INFO torch.compile took 5.55 s in total\n"
            "INFO Graph capturing finished in 3 secs, took 0.47 GiB\n" + INIT
        ),
        "/c/torch_compile_cache/x/rank_0_0",
        18.1,
        None,
    )
    assert graphs["profile_kv_s"] == pytest.approx(11.66 - 5.55 - 3.0)
    assert graphs["other_s"] == pytest.approx(18.1 - 2.790036 - 11.66)
    eager = start_parts(
        parse_engine_log(
            "INFO Model loading took 14.29 GiB and 2.004326 seconds\n"
            + INIT.replace("11.66 s (compilation: 5.55 s)", "16.39 s")
        ),
        None,
        22.0,
        None,
    )
    assert eager["profile_kv_s"] == 16.39 and eager["other_s"] == pytest.approx(
        22.0 - 2.004326 - 16.39
    )


# vLLM 0.26's lines (v1/worker/gpu_worker.py, startup_plan.py): measured, then a plan applied
PROFILED = "(EngineCore pid=1) INFO [gpu_worker.py:561] Available KV cache memory: 104.51 GiB\n"
PLANNED = (
    "(EngineCore pid=1) INFO Applying persisted startup plan (fingerprint 0123456789abcdef): "
    "kv_cache_memory_bytes=112215424614 (104.51 GiB), recorded free-memory baseline 139.25 GiB, "
    "current 139.30 GiB. Memory profiling will be skipped.\n"
    "(EngineCore pid=1) INFO Initial free memory 139.30 GiB, reserved 104.51 GiB memory for KV "
    "Cache as specified by kv_cache_memory_bytes config and skipped memory profiling. This does "
    "not respect the gpu_memory_utilization config.\n"
)


def test_a_start_given_its_kv_cache_size_skipped_memory_profiling_and_gpu_memory_utilization():
    """vLLM's startup plan (or `kv_cache_memory_bytes`) sizes the KV cache without measuring:
    marked in the start's parts, and `gpu_memory_utilization` reads ignored (vLLM says it is not
    respected), never applied."""
    from runner.engines.vllm.facts import VLLMFacts, vllm_knobs

    measured, planned = (parse_engine_log(COLD_LOG + x) for x in (PROFILED, PLANNED))
    assert measured["kv_cache_gib"] == planned["kv_cache_gib"] == 104.51
    given = parse_engine_log(PLANNED.split("\n", 1)[1])  # kv_cache_memory_bytes, no plan
    assert [start_parts(p, None, 50.0, None)["profiled"] for p in (measured, planned, given)] == [
        True,
        False,
        False,
    ]
    knobs = lambda skipped: {
        k.name: k
        for k in vllm_knobs(
            VLLMSpec(kind="vllm"),
            "auto",
            VLLMFacts(profiling_skipped=skipped, kv_cache_tokens=1000),
            0,
            1,
        )
    }["gpu_memory_utilization"]
    assert knobs(False).status == "applied" and knobs(False).evidence == "KV cache 1,000 tokens"
    assert knobs(True).status == "ignored"
    assert "skipped its memory profiling" in knobs(True).evidence
    assert knobs(True).evidence == (
        "vLLM skipped its memory profiling: the KV cache size was given (kv_cache_memory_bytes or "
        "vLLM's startup plan), not taken from it; KV cache 1,000 tokens"
    )


def test_vllm_keeps_its_compile_cache_under_the_runners_cache(tmp_path, monkeypatch):
    """By default the compile cache lives in $RUNNER_CACHE/vllm (a VLLM_CACHE_ROOT already set
    wins); a variable the shell sets is what the engine runs with and what its results record."""
    for k in ("VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR", "VLLM_USE_FLASHINFER_SAMPLER"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("RUNNER_CACHE", str(tmp_path / "rc"))
    env = VLLMSpec(kind="vllm").engine_env()
    assert env["VLLM_CACHE_ROOT"] == str(tmp_path / "rc" / "vllm")
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "rc" / "vllm" / "inductor")
    assert "VLLM_ENABLE_STARTUP_PLAN" not in env  # off: its key leaves out gpu_memory_utilization
    monkeypatch.setenv("VLLM_CACHE_ROOT", "/mine")
    monkeypatch.setenv("VLLM_USE_FLASHINFER_SAMPLER", "1")
    env = VLLMSpec(kind="vllm").engine_env()
    assert (env["VLLM_CACHE_ROOT"], env["VLLM_USE_FLASHINFER_SAMPLER"]) == ("/mine", "1")
    _, served = VLLMSpec(kind="vllm").server_command(
        __import__("runner.base.types", fromlist=["ModelSpec"]).ModelSpec(id="m"), "h", 1
    )
    assert served["VLLM_USE_FLASHINFER_SAMPLER"] == "1"  # the server as the offline engine
    VLLMSpec(kind="vllm", env={"VLLM_USE_FLASHINFER_SAMPLER": "0"}).set_env()
    import os

    assert os.environ["VLLM_USE_FLASHINFER_SAMPLER"] == "0"  # the recipe's own env wins


def test_the_report_says_a_start_skipped_its_memory_profiling():
    from runner.report.markdown import _start_section
    from runner.results import RunResult, StartParts, Timings
    from tests.wired import a_recipe

    start = StartParts(load_s=4.0, compile_s=5.0, other_s=3.0, cold=False, profiled=False)
    r = RunResult(
        name="a",
        recipe=a_recipe("a"),
        status="ok",
        repeats=[Repeat(index=1, generate_s=6, load_s=12, start=start)],
        timings=Timings(load_s=12.0),
    )
    text = "\n".join(_start_section(r))
    assert "| warm (cache); memory profiling skipped |" in text
    assert "*Memory profiling skipped*: the engine was given its KV cache size" in text
    measured = r.model_copy(deep=True)
    measured.repeats[0].start.profiled = True
    assert "memory profiling skipped" not in "\n".join(_start_section(measured)).lower()
    assert "tokenizer" not in "\n".join(_start_section(measured))
    # issue 41: the engine found its own tokenizer loaded by its job's process
    measured.repeats[0].start.tokenizer_ahead = True
    text = "\n".join(_start_section(measured))
    assert "| warm (cache); tokenizer loaded ahead |" in text
    assert "*Tokenizer loaded ahead*: the job's process loaded the engine's own tokenizer" in text
    measured.repeats[0].start.tokenizer_copies_ahead = 2  # ... and vLLM's copies of it
    text = "\n".join(_start_section(measured))
    assert "| warm (cache); tokenizer loaded ahead; 2 tokenizer copies made ahead |" in text
    assert "*Tokenizer copies made ahead*: the deep copies of its tokenizer" in text
    assert "autotun" not in text
    measured.repeats[0].start.autotune_skipped = True  # an earlier start found nothing to tune
    text = "\n".join(_start_section(measured))
    assert "2 tokenizer copies made ahead; FlashInfer autotuning skipped |" in text
    assert "*FlashInfer autotuning skipped*: an earlier start of the same configuration" in text


def test_the_compile_cache_folder_sets_vllms_cache_root_and_is_checked_in_its_log(tmp_path):
    spec = VLLMSpec(kind="vllm", compile_cache=str(tmp_path / "cc"))
    env = spec.engine_env()
    assert env["VLLM_CACHE_ROOT"] == str(tmp_path / "cc")
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "cc" / "inductor")
    inside = f"{tmp_path}/cc/torch_compile_cache/ab/rank_0_0/backbone"
    assert compile_cache_knob(spec, inside).status == "applied"
    assert (
        compile_cache_knob(
            spec, "/root/.cache/vllm/torch_compile_cache/ab/rank_0_0/backbone"
        ).status
        == "ignored"
    )
    assert compile_cache_knob(spec, None).status == "unverified"
    assert compile_cache_knob(VLLMSpec(kind="vllm"), None) is None  # not asked for: no knob row


def test_a_relative_compile_cache_is_the_recipe_files_folder(tmp_path, write_recipe, base_recipe):
    from runner import load_recipe

    engine = {"kind": "vllm", "compile_cache": "cache/vllm"}
    lr = load_recipe(write_recipe({**base_recipe, "engine": engine}))
    assert lr.recipe.engine.compile_cache == str(tmp_path / "cache" / "vllm")


def _rep(i, j, s, reused=0):
    return Repeat(index=i, generate_s=s, energy_j=j, energy_s=s, reused_samples=reused)


def test_energy_per_generation_power_and_per_token():
    e = energy_of([_rep(1, 3000.0, 6.0), _rep(2, 2600.0, 5.0)], 1, p_tok=1_200_000, o_tok=70_000)
    assert e.measured and e.joules == 2800.0 and e.watts == 5600.0 / 11.0
    assert e.j_per_output_token == 2800.0 / 70_000 and e.j_per_1k_prompt_tokens == 2800.0 / 1200
    cpu = energy_of([_rep(1, None, 1.0)], 0, 10, 10)
    assert (
        not cpu.measured
        and cpu.why_not == "no GPU: the engine ran on the CPU"
        and cpu.joules is None
    )
    missing = energy_of([_rep(1, 3000.0, 6.0), _rep(2, None, 5.0)], 1, 10, 10)
    assert (
        not missing.measured
        and missing.why_not == "no NVML energy counter for the engine's GPUs here"
    )
    resumed = energy_of([_rep(1, 3000.0, 6.0, reused=5)], 1, 10, 10)
    assert not resumed.measured and "interrupted" in resumed.why_not
    # a generation shorter than the counter's tick read 0 J: not a measurement of 0 J
    still = energy_of([_rep(1, 3000.0, 6.0), _rep(2, 0.0, 0.08)], 1, 10, 10)
    assert not still.measured and still.joules is None
    assert still.why_not == (
        "NVML's energy counter did not move during a 0.08-s generation (1 of 2) (it updates less "
        "often than that): too short to measure"
    )
    back = energy_of([_rep(1, -5.0, 6.0)], 1, 10, 10)
    assert not back.measured and back.why_not == (
        "NVML's energy counter went back during a generation (reset)"
    )


def test_a_continued_runs_energy_is_not_passed_off_as_the_whole_generations():
    """A run continued after an interruption times its generation as the earlier call's part plus
    this call's, but NVML read this call's part only: the run's energy is 'not measured' and the
    repeat row says what its joules cover."""
    from runner.report.markdown import report_markdown
    from runner.results import RunResult, Timings
    from tests.wired import a_recipe

    reps = [Repeat(index=1, generate_s=51.1, energy_j=15154.0, energy_s=33.4, reused_samples=181)]
    e = energy_of(reps, 1, 10, 10)
    r = RunResult(
        name="c",
        recipe=a_recipe("c"),
        status="ok",
        repeats=reps,
        timings=Timings(generate_s=51.1),
        energy=e,
    )
    text = report_markdown(r, [])
    assert "| 15,154 J (this call's 33.4 s) |" in text.replace("  ", "")
    assert "not measured: part of the generation ran in an earlier, interrupted call" in text


def test_a_cpu_run_says_its_energy_was_not_measured(tmp_path, write_recipe, base_recipe):
    recipe = {**base_recipe, "model": {"id": "none"}, "engine": {"kind": "fake", "reply": "x"}}
    out = tmp_path / "out"
    r = CliRunner().invoke(
        cli, ["go", str(write_recipe(recipe)), "--out", str(out), "--no-progress", "--limit", "3"]
    )
    assert r.exit_code == 0, r.output
    energy = json.loads((out / "t" / "results.json").read_text())["energy"]
    assert energy == {
        "measured": False,
        "why_not": "no GPU: the engine ran on the CPU",
        "gpus": 0,
        "joules": None,
        "watts": None,
        "j_per_output_token": None,
        "j_per_1k_prompt_tokens": None,
    }
    assert (
        "| energy | not measured: no GPU: the engine ran on the CPU |"
        in (out / "t" / "report.md").read_text()
    )


def test_dollars_are_gpu_seconds_times_gpus_times_the_price():
    from runner.recipe import CostSpec
    from runner.report.markdown import cost_figures, report_markdown
    from runner.results import Energy, RunResult, Timings, Tokens
    from tests.wired import a_recipe

    recipe = {**a_recipe("c"), "cost": CostSpec(usd_per_gpu_hour=3.6).model_dump()}
    r = RunResult(
        name="c",
        recipe=recipe,
        status="ok",
        timings=Timings(generate_s=10.0, total_s=100.0),
        tokens=Tokens(prompt=1_000_000, output=50_000),
        energy=Energy(measured=True, gpus=2, joules=7000.0, watts=700.0, j_per_output_token=0.14),
    )
    c = cost_figures(r)  # $0.001 per GPU-second, 2 GPUs
    assert c == {
        "usd_per_gpu_hour": 3.6,
        "gpus": 2,
        "usd_per_m_output_tokens": 0.002 * 10.0 / 50_000 * 1e6,
        "usd_per_m_prompt_tokens": 0.002 * 10.0 / 1_000_000 * 1e6,
        "usd_run": 0.002 * 100.0,
    }
    text = report_markdown(r, [])
    assert "| per million output tokens              | $0.4                         |" in text
    assert "| this run (engine starts, every repeat) | $0.2                         |" in text
    # no GPU: no dollars, and report.md says why (issue 42: the price was dropped without a word)
    cpu = r.model_copy(update={"energy": Energy(measured=False, why_not="x")})
    assert cost_figures(cpu) is None
    assert "No dollars: the price is per GPU-hour ($3.6) and this run used no GPU." in (
        report_markdown(cpu, [])
    )
    assert "No dollars" not in text


def test_the_price_option_prices_every_recipe_without_rerunning(
    tmp_path, write_recipe, base_recipe
):
    recipe = {**base_recipe, "model": {"id": "none"}, "engine": {"kind": "fake", "reply": "x"}}
    path, out = write_recipe(recipe), tmp_path / "out"
    go = lambda *a: CliRunner().invoke(
        cli, ["go", str(path), "--out", str(out), "--no-progress", "--limit", "3", *a]
    )
    assert go().exit_code == 0
    r = go("--usd-per-gpu-hour", "2.5")
    # the price changes no measured figure
    assert r.exit_code == 0 and "skip t: unchanged" in r.output
    assert "--usd-per-gpu-hour" in CliRunner().invoke(cli, ["go", "--help"]).output
    bad = CliRunner().invoke(cli, ["go", str(path), "--usd-per-gpu-hour", "0"])
    assert bad.exit_code == 2 and "--usd-per-gpu-hour" in bad.output
    # issue 42: nan passed click's range and gave `runner report` a traceback
    for cmd in (["go", str(path)], ["report", str(out)]):
        nan = CliRunner().invoke(cli, [*cmd, "--usd-per-gpu-hour", "nan"])
        assert nan.exit_code == 2 and nan.output.endswith(
            "Error: Invalid value for '--usd-per-gpu-hour': nan is not a price: give a number of "
            "dollars, e.g. 3.5\n"
        ), nan.output


def test_the_study_sums_its_cold_and_warm_starts():
    from runner.results import RunResult, StartParts, Timings
    from runner.study.study import spent_section
    from tests.wired import a_recipe

    def cell(name, *starts):
        reps = [
            Repeat(index=i + 1, generate_s=6, load_s=30, start=p, energy_j=1500)
            for i, p in enumerate(starts)
        ]
        return RunResult(
            name=name,
            recipe=a_recipe(name),
            status="ok",
            repeats=reps,
            timings=Timings(load_s=30.0),
        )

    cold = StartParts(load_s=4.0, compile_s=45.0, capture_s=12.0, other_s=9.0, cold=True)
    warm = StartParts(load_s=4.0, compile_s=5.0, capture_s=12.0, other_s=9.0, cold=False)
    text = "\n".join(spent_section([cell("a", cold, warm), cell("b", warm)]))
    words = (
        "Of the engine starts, 1 compiled (cold) and 2 loaded the compiled graphs from the "
        "compile cache (warm); "
    )
    # 45+12, 5+12, 5+12
    assert words + "compiling and capturing CUDA graphs took 91.0 s in all" in text
    # 3 x 4 s of weights, 45+5+5 compiling, 3 x 12 capturing, 3 x 9 the rest
    assert (
        "Where 3 engine starts' 130.0 s went, as the engines' logs account for them: weights "
        "12.0 s, compile 55.0 s, CUDA graphs 36.0 s, the rest 27.0 s." in text
    )
    # 3 x 1,500 J, no price
    assert "Summed over the cells: GPU energy of every measured generation 4.5 kJ." in text
    assert "autotuning" not in text
    skipped = warm.model_copy(update={"autotune_skipped": True})
    text = "\n".join(spent_section([cell("a", cold, skipped), cell("b", skipped)]))
    assert (
        "2 of the 3 engine starts left out FlashInfer's autotuning (an earlier start of the same "
        "configuration found nothing to tune)." in text
    )


def test_runner_report_prices_stored_runs_without_touching_their_results(tmp_path):
    """The H200 tune's stored runs (priced at $3.5 per GPU-hour when they ran) re-priced at $7:
    every dollar figure doubles, results.json keeps $3.5."""
    import shutil
    from pathlib import Path

    src = Path(__file__).resolve().parents[1] / "reports" / "h200-tune-study"
    out = shutil.copytree(src, tmp_path / "runs")
    cell = out / "jsquad-vllm-oneshot-cache-ctxfirst-t8"
    before = (cell / "results.json").read_bytes()
    r = CliRunner().invoke(cli, ["report", str(out), "--usd-per-gpu-hour", "7"])
    assert r.exit_code == 0, r.output
    assert (
        "| per million output tokens              | $0.1696                    |"
        in (cell / "report.md").read_text()
    )
    assert (cell / "results.json").read_bytes() == before
    # t8's row in the summary
    assert "| $0.17                 |" in (out / "summary.md").read_text()


def test_the_summary_shows_each_cells_engine_start_cold_or_warm():
    from runner.report.summary import _start_cell
    from runner.results import RunResult, StartParts, Timings
    from tests.wired import a_recipe

    def run(load, *colds):
        reps = [
            Repeat(index=i + 1, generate_s=1, start=StartParts(cold=c)) for i, c in enumerate(colds)
        ]
        return RunResult(
            name="r", recipe=a_recipe("r"), status="ok", repeats=reps, timings=Timings(load_s=load)
        )

    assert (
        _start_cell(run(72.9, True)) == "72.9 s cold"
        and _start_cell(run(27.3, False)) == "27.3 s warm"
    )
    assert (
        _start_cell(run(40.0, True, False)) == "40.0 s cold+warm"
        and _start_cell(run(17.3, None)) == "17.3 s"
    )
    assert _start_cell(run(0.0, None)) is None  # ran on another recipe's engine


def test_a_relative_compile_cache_on_the_command_line_is_where_you_run_it(
    tmp_path, write_recipe, base_recipe, monkeypatch
):
    """As every path given on the command line, and though the folder does not exist yet."""
    from tests.wired import load_all

    path = write_recipe({**base_recipe, "engine": {"kind": "vllm"}})
    here = tmp_path / "elsewhere"
    here.mkdir()
    monkeypatch.chdir(here)
    [lr] = load_all((str(path),), ("engine.compile_cache=cache/vllm",))
    assert lr.recipe.engine.compile_cache == str(here / "cache" / "vllm")


def test_joules_and_dollars_per_1000_correct_answers_by_the_gates_metric():
    """One generation's 7,000 J and $0.02 (2 GPUs x 10 s at $3.6/GPU-h) over 400 examples at exact
    match 0.5: 200 right, so 35,000 J and $0.1 per 1,000 correct; nothing where the scores mean
    nothing."""
    from runner.recipe import CostSpec
    from runner.report.summary import per_correct
    from runner.results import Energy, RunResult, Timings
    from tests.wired import a_recipe

    recipe = {**a_recipe("c"), "cost": CostSpec(usd_per_gpu_hour=3.6).model_dump()}
    r = RunResult(
        name="c",
        recipe=recipe,
        status="ok",
        n_samples=400,
        n_scored=400,
        scores={"exact_match": 0.5},
        timings=Timings(generate_s=10.0, total_s=100.0),
        energy=Energy(measured=True, gpus=2, joules=7000.0, watts=700.0),
    )
    assert per_correct(r, "exact_match") == ["3.5e+04", "$0.1"]
    assert per_correct(r.model_copy(update={"scores_meaningful": False}), "exact_match") == [
        None,
        None,
    ]
    assert per_correct(r, None) == [None, None]


def test_the_summary_marks_a_run_whose_repeats_drifted():
    """Repeats that grow 10% each, in the order measured: the time cell says `drift +10.0%/repeat`
    and the legend says what it means; steady repeats carry no mark."""
    from runner.report.summary import judged, summary_markdown
    from runner.results import RunResult, Timings
    from tests.wired import a_recipe

    def run(name, times):
        reps = [Repeat(index=i + 1, generate_s=t) for i, t in enumerate(times)]
        return RunResult(
            name=name,
            recipe=a_recipe(name),
            status="ok",
            repeats=reps,
            timings=Timings(generate_s=1.2),
        )

    md = summary_markdown(
        judged(
            [run("up", [1.0, 1.1, 1.21, 1.331, 1.4641]), run("flat", [1.2, 1.25, 1.18, 1.22, 1.2])]
        )
    )
    rows = {line.split("|")[1].strip(): line for line in md.splitlines() if line.startswith("| ")}
    assert "drift +10.0%/repeat" in rows["up"] and "drift" not in rows["flat"]
    assert "`drift`: the run's repeats trended in the order measured" in md
    # a user's CPU study: two calls' repeats in one time
    two = run("pooled", [3.89, 2.45, 2.56, 0.23, 0.19])
    two.repeats = [
        x.model_copy(update={"call": "c1" if x.index <= 3 else "c2"}) for x in two.repeats
    ]
    md = summary_markdown(judged([two]))
    assert (
        "(2 calls)" in md
        and "`(N calls)`: the run's repeats were measured in N `runner go` calls" in md
    )
