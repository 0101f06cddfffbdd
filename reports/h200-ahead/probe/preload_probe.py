# GPU probe (not product): how much of an eager vLLM start is the engine process importing modules
# its parent could have imported ahead. usage: python preload_probe.py MODE OUTDIR  (MODE base|list|extended)
import os, sys, time, json
os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
os.environ.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")
mode, outdir = sys.argv[1], sys.argv[2]
M = "/root/shared/models/qwen2.5-7b-instruct"
from runner.engines.vllm.spec import VLLMSpec
spec = VLLMSpec(kind="vllm")
spec.set_env()
t0 = time.perf_counter()
import vllm.engine.arg_utils, vllm.entrypoints.llm  # what the runner preloads today
t1 = time.perf_counter()
extra_s, failed = 0.0, []
if mode == "product":
    te = time.perf_counter()
    spec.preload()
    extra_s = time.perf_counter() - te
if mode == "extended":
    f = f"{outdir}/child_modules.json"
    names = json.load(open(f)) if os.path.exists(f) else []
    names += ["vllm.compilation.backends", "torch._inductor.compile_fx"]
    te = time.perf_counter()
    import importlib
    for n in names:
        try:
            importlib.import_module(n)
        except BaseException as e:
            failed.append(f"{n}: {type(e).__name__}")
    extra_s = time.perf_counter() - te
import torch
cuda_init = torch.cuda.is_initialized()
from vllm import LLM
t2 = time.perf_counter()
llm = LLM(model=M, tokenizer=M, load_format="dummy", dtype="bfloat16", quantization="fp8", enforce_eager=True,
          enable_prefix_caching=True, gpu_memory_utilization=0.9, max_num_batched_tokens=8192)
t3 = time.perf_counter()
res = {"mode": mode, "preload_s": t1 - t0, "extra_s": extra_s, "llm_s": t3 - t2, "cuda_init_before": cuda_init,
       "failed": failed[:20], "n_failed": len(failed), "parent_modules": len(sys.modules)}
if mode == "list":
    mine = set(sys.modules)
    try:
        child = llm.collective_rpc(lambda self: sorted(__import__("sys").modules))[0]
    except BaseException as e:
        res["rpc_error"] = repr(e)[:300]
        child = []
    new = [m for m in child if m not in mine]
    # only modules importable by name (skip private submodules created by loaders)
    json.dump(new, open(f"{outdir}/child_modules.json", "w"))
    res["child_only"] = len(new)
    res["child_only_top"] = sorted({m.split(".")[0] + "." + m.split(".")[1] if "." in m else m for m in new})[:80]
print("RESULT", json.dumps(res), flush=True)
try:
    llm.llm_engine.engine_core.shutdown()
except BaseException as e:
    print("shutdown", e)
os._exit(0)
