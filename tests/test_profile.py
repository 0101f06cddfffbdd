"""`profile: true` (runner/run/profile.py): the traces' time by kernel class, GPU idle as the wall
time no kernel covers, CPU operators' own time, and a real run of transformers on the CPU under
torch's profiler whose trace is kept."""

from __future__ import annotations

import gzip
import json

import pytest

import runner
from runner.run.profile import breakdown, kernel_class


@pytest.mark.parametrize(
    "name, cls",
    [
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "gemm"),
        ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT", "gemm"),
        ("void cutlass::device_kernel<cutlass_scaled_mm_sm90>", "gemm"),
        ("aten::addmm", "gemm"),
        ("void flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits>", "attention"),
        ("aten::scaled_dot_product_attention", "attention"),
        ("aten::argmax", "sampling"),
        (
            "void at::native::vectorized_elementwise_kernel<4, CUDAFunctor_add>",
            "norms and elementwise",
        ),
        ("triton_poi_fused_mul_silu_0", "norms and elementwise"),
        ("std::enable_if<!(false), void>::type internal::gemvx::kernel", "gemm"),
        ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "other"),
    ],
)
def test_kernel_names_fall_in_their_class(name, cls):
    assert kernel_class(name) == cls


def test_gpu_kernels_overlapping_count_once_as_busy_and_the_rest_of_the_wall_is_idle():
    k = lambda name, ts, dur: {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur}
    events = [
        k("sm90_xmma_gemm", 0, 400_000),  # µs
        k("flash_fwd_kernel", 300_000, 200_000),  # overlaps the GEMM by 0.1 s
        k("aten::argmax_kernel", 1_000_000, 100_000),
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 9_000_000},  # not a kernel
    ]
    w = breakdown(events, wall_s=2.0)
    assert w.device == "cuda"
    assert w.classes == {"gemm": 0.4, "attention": 0.2, "sampling": 0.1}
    assert w.busy_s == pytest.approx(0.6)  # 0-0.5 s and 1.0-1.1 s
    assert w.idle_s == pytest.approx(1.4)


def test_cpu_operators_count_their_own_time_not_that_of_what_they_call():
    op = lambda name, ts, dur, tid=1: {
        "ph": "X",
        "cat": "cpu_op",
        "name": name,
        "ts": ts,
        "dur": dur,
        "tid": tid,
    }
    events = [
        op("aten::linear", 0, 1_000_000),  # calls addmm (0.7 s) and add (0.1 s): its own 0.2 s
        op("aten::addmm", 100_000, 700_000),
        op("aten::add", 850_000, 100_000),
        op("aten::scaled_dot_product_attention", 2_000_000, 500_000),
        op("aten::mm", 100_000, 300_000, tid=2),  # another thread: not inside linear
    ]
    w = breakdown(events, wall_s=3.0)
    assert w.device == "cpu" and w.idle_s is None
    assert w.classes == {
        "gemm": pytest.approx(0.2 + 0.7 + 0.3),
        "attention": pytest.approx(0.5),
        "norms and elementwise": pytest.approx(0.1),
    }
    assert w.busy_s == pytest.approx(1.8)


def test_a_transformers_run_on_the_cpu_is_profiled_and_its_trace_kept(
    write_recipe, base_recipe, tmp_path
):
    recipe = {
        **base_recipe,
        "name": "p",
        "model": {"id": "builtin:demo"},
        "engine": {"kind": "transformers", "device": "cpu", "batch_size": 2},
        "sampling": {"temperature": 0, "max_tokens": 4},
        "profile": True,
    }
    lr = runner.load_recipe(write_recipe(recipe))
    out = tmp_path / "out"
    res = runner.run_recipe(lr, out=out, limit=4)
    p = res.profile
    # one step's worth of prompts (a batch of 2), shaped as the run's steps: not all 4
    assert res.status == "ok" and p is not None and p.examples == 2
    assert p.full.device == "cpu" and p.prefill.device == "cpu"
    assert p.full.busy_s > 0 and set(p.full.classes) <= {
        "gemm",
        "attention",
        "sampling",
        "norms and elementwise",
        "other",
    }
    assert p.full.classes.get("gemm", 0) > 0  # a transformer's linear layers
    assert p.traces == ["profile/trace.json.gz"]
    with gzip.open(out / "p" / p.traces[0], "rt") as f:
        assert any(e.get("cat") == "cpu_op" for e in json.load(f)["traceEvents"])
    report = (out / "p" / "report.md").read_text()
    assert "### Where the generation's time goes (profile)" in report
    assert "The first 2 prompts (at most what one engine step holds, up to 1,024; " in report
    # static batches keep no prefix cache: nothing emptied, and the report says so
    assert p.cache_emptied is False
    assert "on an engine that emptied no prefix cache (it keeps none, or could not)" in report
    # a results.json of an earlier version (no cache_emptied) of a recipe with prefix caching on:
    # its windows ran on the cache the repeats left, and the report says so
    from runner.engines.vllm.spec import VLLMSpec
    from runner.report.markdown import _profile_section

    engine = VLLMSpec(kind="vllm")  # prefix caching on by default
    old = res.model_copy(
        update={
            "profile": p.model_copy(update={"cache_emptied": None}),
            "recipe": res.recipe.model_copy(update={"engine": engine}),
        }
    )
    assert old.recipe.engine.prefix_caching_requested()
    text = "\n".join(_profile_section(old))
    assert "**on the prefix cache as the repeats left it**" in text and "emptied first" not in text
    old.profile.full.classes = {}  # and a window with no classes is no crash
    assert "Largest part" not in "\n".join(_profile_section(old))
    # the measured generation is the recipe's own: the profiled ones come after it
    assert res.n_samples == 4 and res.timings.generate_s > 0
    # run again whole: the earlier run's trace is set aside with its results, not overwritten
    again = runner.run_recipe(lr, out=out, limit=4, force=True)
    assert again.profile.traces == p.traces and (out / "p" / p.traces[0]).is_file()
    assert len(list((out / "p" / "replaced").glob("*/profile/trace.json.gz"))) == 1


def test_the_fake_engine_says_it_has_no_profiler_and_profile_false_keeps_run_keys(
    write_recipe, base_recipe, tmp_path
):
    fake = {**base_recipe, "name": "f", "model": {"id": "none"}, "engine": {"kind": "fake"}}
    lr = runner.load_recipe(write_recipe({**fake, "profile": True}))
    res = runner.run_recipe(lr, out=tmp_path / "out", limit=2)
    assert res.profile is not None and res.profile.note == "the fake engine has no profiler"
    report = (tmp_path / "out" / "f" / "report.md").read_text()
    assert "No profile: the fake engine has no profiler." in report
    plain = runner.load_recipe(write_recipe(fake, "plain.yaml")).recipe
    off = runner.load_recipe(write_recipe({**fake, "profile": False}, "off.yaml")).recipe
    assert "profile" not in plain.canonical() and off.digest() == plain.digest()
    assert lr.recipe.digest() != plain.digest()


def test_profile_is_refused_where_no_offline_run_in_one_process_is_made(write_recipe, base_recipe):
    from runner.base.errors import RecipeError

    fake = {**base_recipe, "model": {"id": "none"}, "engine": {"kind": "fake"}, "profile": True}
    with pytest.raises(RecipeError) as e:
        runner.load_recipe(write_recipe({**fake, "replicas": 2}))
    assert "profile: true profiles one offline run in one process, not replicas: 2" in str(
        e.value.render()
    )
    with pytest.raises(RecipeError) as e:
        runner.load_recipe(write_recipe({**fake, "load": {"request_rate": [1.0]}}, "l.yaml"))
    assert "not `load` (a server under load)" in e.value.render()


def test_runner_go_profile_profiles_every_recipe_of_the_call(write_recipe, base_recipe, tmp_path):
    """`runner go --profile` is `--set profile=true` for the call: recorded in the recipe (its run
    key differs from the unprofiled run's) and answered in each report."""
    from click.testing import CliRunner

    from runner.cli import cli

    fake = {**base_recipe, "name": "f", "model": {"id": "none"}, "engine": {"kind": "fake"}}
    path, out = write_recipe(fake), tmp_path / "out"
    args = ["go", str(path), "--out", str(out), "--limit", "2", "--no-progress"]
    r = CliRunner().invoke(cli, [*args, "--profile"])
    assert r.exit_code == 0, r.output
    [res] = runner.read_results(out)
    assert res.recipe.profile and res.profile.note == "the fake engine has no profiler"
    assert "No profile: the fake engine has no profiler." in (out / "f" / "report.md").read_text()
    r = CliRunner().invoke(cli, args)  # without it: another run, not the profiled one skipped
    assert r.exit_code == 0 and "skipped" not in r.output, r.output
    assert not runner.read_results(out)[0].recipe.profile


def test_each_profile_window_starts_with_the_prefix_cache_emptied(tmp_path):
    """The measured repeats leave the window's prompts in the prefix cache: a window generated on
    it would time no prefill. Each window empties it first, as each repeat does."""
    from contextlib import contextmanager
    from types import SimpleNamespace

    from runner.base.types import EngineInfo, Sampling
    from runner.folder import RunFolder
    from runner.run.profile import profile_run

    calls: list[str] = []

    class Engine:
        info = EngineInfo(name="stub", batch=2)

        @contextmanager
        def profiled(self, folder):
            calls.append("profiler on")
            kernel = {"ph": "X", "cat": "kernel", "name": "gemm", "ts": 0, "dur": 5}
            trace = {"traceEvents": [kernel]}
            (folder / "t.json").write_text(json.dumps(trace))
            yield

        def reset_prefix_cache(self) -> bool:
            calls.append("emptied")
            return True

        def prepare(self, sampling):  # e.g. transformers' continuous batching manager
            calls.append(f"prepare {sampling.max_tokens}")

        def generate(self, requests, sampling, sink, progress):
            calls.append(f"generate {len(requests)} x {sampling.max_tokens}")
            return []

    sampling = Sampling(temperature=0, max_tokens=4)
    unit = SimpleNamespace(
        loaded=SimpleNamespace(recipe=SimpleNamespace(sampling=sampling)),
        prepared=SimpleNamespace(examples=[object()] * 3),
    )
    p = profile_run(Engine(), unit, [[1], [2], [3]], RunFolder(tmp_path))
    # prepared outside the profiler: a manager emptied with the cache is not rebuilt in the window
    window = lambda n: ["emptied", f"prepare {n}", "profiler on", f"generate 2 x {n}"]  # noqa: E731
    assert calls == window(1) + window(4)
    assert p.examples == 2 and p.full.classes == {"gemm": 5e-6} and p.cache_emptied is True
    # a window with nothing in it (transformers' continuous batching on the CPU: its steps run in a
    # thread the profiler does not record) is a note, not a table of nothing
    Engine.profiled = contextmanager(lambda self, folder: iter([None]))
    empty = profile_run(Engine(), unit, [[1], [2], [3]], RunFolder(tmp_path / "empty"))
    assert empty.full is None and "saw no kernel and no operator" in empty.note
