"""The child of benchmarks/step_probe.py: one engine, the workload once per round (see step_probe.py).

python benchmarks/step_probe_child.py JOB.json OUT.json
"""

import json
import os
import statistics
import sys
import time

job = json.load(open(sys.argv[1]))
os.environ.update(job["env"])
mode = job["mode"]
if mode in ("kernels", "cpu"):
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
from vllm import LLM, SamplingParams  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from runner.execution.gpumem import PeakSampler  # noqa: E402

kwargs = dict(job["llm_kwargs"])
if mode == "coresample":
    from core_sampler import install  # noqa: E402  (benchmarks/ is on sys.path: this file's folder)

    os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = "fork"  # the patched loop only reaches a forked core
    install(job["core_samples"])
if mode == "trace":
    kwargs["profiler_config"] = {
        "profiler": "torch",
        "torch_profiler_dir": job["trace_dir"],
        "torch_profiler_with_stack": False,
        "torch_profiler_use_gzip": True,
    }
llm = LLM(**kwargs)
engine = llm.llm_engine
if job.get("warmup"):  # the runner's engine.warmup batch, on this plain engine
    from runner.engines.vllm_engine import warm_up

    print(f"warm-up: {warm_up(llm)}", flush=True)


def one_round(sp, chunk, sampler):
    prompts = [{"prompt_token_ids": p} for p in job["prompts"]]
    steps, n_out, toks = [], 0, 0

    def drain(block):
        nonlocal n_out, toks
        while block or not engine.engine_core.outputs_queue.empty():
            outs = engine.step()
            steps.append(time.perf_counter())
            for o in outs:
                if o.finished:
                    n_out += 1
                    toks += len(o.outputs[0].token_ids)
            if block and not engine.has_unfinished_requests():
                return

    t0, wall0 = time.perf_counter(), time.time()
    for k in range(0, len(prompts), chunk or len(prompts)):
        llm.enqueue(prompts[k : k + (chunk or len(prompts))], sp, use_tqdm=False)
        if chunk:
            drain(False)
    t1 = time.perf_counter()
    if engine.has_unfinished_requests():
        drain(True)
    t2 = time.perf_counter()
    # between successive output batches (with chunked enqueue the first ones arrive before it ends)
    gaps = [b - a for a, b in zip(steps, steps[1:])] or [0.0]
    return dict(
        enqueue_s=t1 - t0,
        generate_s=t2 - t0,
        steps=len(steps),
        n=n_out,
        output_tokens=toks,
        gap_min=min(gaps),
        gap_med=statistics.median(gaps),
        gap_max=max(gaps),
        slowest=sorted((round(g, 3), i) for i, g in enumerate(gaps))[-6:],
        first_step_s=steps[0] - t0 if steps else None,
        wall0=wall0,
        busy=sampler.busy_share(t0, t2),
        tenths=sampler.busy_parts(t0, t2),
    )


rounds = []
with PeakSampler(interval=0.02) as sampler:
    for k, extra in enumerate(job["rounds"]):
        if k:
            llm.reset_prefix_cache()
            time.sleep(1.0)
        sp = SamplingParams(**{**job["sampling"], **extra.get("sampling", {})})
        prof = None
        if mode == "trace" and k == 0:
            llm.start_profile()
        elif mode == "kernels":
            import torch

            prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA])
            prof.__enter__()
        elif mode == "cpu":
            import cProfile

            prof = cProfile.Profile()
            prof.enable()
        res = one_round(sp, extra.get("chunk", 0), sampler)
        res["round"] = extra
        if mode == "trace" and k == 0:
            llm.stop_profile()
            time.sleep(2.0)
            res["trace_dir"] = job["trace_dir"]
        elif mode == "kernels":
            torch.cuda.synchronize()
            prof.__exit__(None, None, None)
            ka = prof.key_averages()
            rows = sorted(ka, key=lambda e: getattr(e, "self_device_time_total", 0), reverse=True)
            res["kernel_total_s"] = sum(getattr(e, "self_device_time_total", 0) for e in ka) / 1e6
            res["top_kernels"] = [(e.key[:90], round(e.self_device_time_total / 1e6, 3), e.count) for e in rows[:25]]
        elif mode == "cpu":
            import io
            import pstats

            prof.disable()
            s = io.StringIO()
            pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(30)
            s.write("\n--- cumulative ---\n")
            pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(40)
            res["cpu_profile"] = s.getvalue()[-12000:]
        rounds.append(res)
        json.dump(rounds, open(sys.argv[2], "w"))
if mode == "coresample":
    time.sleep(1.0)  # the sampler writes every 0.5 s: let it write the last round's end
try:
    engine.engine_core.shutdown(timeout=10)
except TypeError:
    engine.engine_core.shutdown()
sys.stdout.flush()
os._exit(0)
