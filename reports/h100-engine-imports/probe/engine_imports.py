# GPU probe (not product): what vLLM's engine process spends on imports its parent could make ahead,
# and which of those imports initialize CUDA. usage: python engine_imports.py OUTDIR ROUNDS
#   1. scan: each module the engine process imported and its front end had not (child_modules.json,
#      reports/h200-ahead), imported alone in a process forked from the base state; did torch
#      initialize CUDA, did the driver (cuInit: cuDeviceGetCount answers 0 instead of 3)?
#   2. the safe set (neither) and the whole list imported in one forked process each: time, flags; a
#      grandchild then runs a CUDA op (does a fork after the safe set still work?)
#   3. a timeline start (imports of every process timed, vLLM's log with milliseconds), then ROUNDS
#      alternating starts base / safe, each `LLM()` in a process forked from the base state
import ctypes, importlib, json, logging, os, sys, threading, time

os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
out, rounds = sys.argv[1], int(sys.argv[2])
M = "/root/shared/models/qwen2.5-7b-instruct"
KW = dict(model=M, tokenizer=M, load_format="dummy", dtype="bfloat16", quantization="fp8", enforce_eager=True,
          enable_prefix_caching=True, gpu_memory_utilization=0.9)  # the study's jsquad-vllm-fp8 cell
from runner.engines.vllm.spec import VLLMSpec
from runner.engines.vllm.engine import load_front_modules_ahead, load_vllm_tokenizer_ahead

spec = VLLMSpec(kind="vllm")
spec.set_env()
t0 = time.perf_counter()
for n in spec.preloads:
    importlib.import_module(n)
load_front_modules_ahead()
load_vllm_tokenizer_ahead(KW)
import torch
base_s = time.perf_counter() - t0
assert not torch.cuda.is_initialized()
for h in logging.getLogger("vllm").handlers:  # milliseconds, inherited by every fork
    h.setFormatter(logging.Formatter("%(asctime)s.%(msecs)03d %(process)d %(filename)s:%(lineno)d %(message)s",
                                     "%H:%M:%S"))
names = [n for n in json.load(open(os.path.join(os.path.dirname(__file__), "child_modules.json")))
         if n not in sys.modules]
print(f"base state: {len(sys.modules)} modules in {base_s:.1f} s; {len(names)} engine-process modules to scan",
      flush=True)


def driver_init() -> bool:
    n = ctypes.c_int()
    return ctypes.CDLL("libcuda.so.1").cuDeviceGetCount(ctypes.byref(n)) == 0


def forked(fn, timeout=300):
    """fn() in a forked child; its JSON-able result back (or an error)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            res = fn()
        except BaseException as e:
            res = {"error": repr(e)[:300]}
        os.write(w, json.dumps(res).encode())
        os._exit(0)
    os.close(w)
    import select
    chunks, end = [], time.time() + timeout
    while select.select([r], [], [], max(0.0, end - time.time()))[0] and (b := os.read(r, 1 << 16)):
        chunks.append(b)
    os.close(r)
    if time.time() >= end:
        os.kill(pid, 9)
    os.waitpid(pid, 0)
    return json.loads(b"".join(chunks) or b'{"error": "no answer"}')


def import_all(ns):
    def go():
        t = time.perf_counter()
        bad = []
        for n in ns:
            try:
                importlib.import_module(n)
            except BaseException as e:
                bad.append(f"{n}: {type(e).__name__}")
        return {"s": time.perf_counter() - t, "torch": torch.cuda.is_initialized(), "driver": driver_init(),
                "failed": bad, "modules": len(sys.modules)}
    return go


# 1. scan, 16 at a time
scan, lock = {}, threading.Lock()


def one(n):
    res = forked(import_all([n]), timeout=60)
    with lock:
        scan[n] = res


ts = time.perf_counter()
pending = list(names)
threads = []
while pending or threads:
    while pending and len(threads) < 16:
        th = threading.Thread(target=one, args=(pending.pop(0),))
        th.start()
        threads.append(th)
    threads[0].join()
    threads = [t for t in threads if t.is_alive()]
print(f"scan: {len(scan)} modules in {time.perf_counter() - ts:.1f} s", flush=True)
torch_init = sorted(n for n, r in scan.items() if r.get("torch"))
driver = sorted(n for n, r in scan.items() if r.get("driver") and not r.get("torch"))
failed = sorted(n for n, r in scan.items() if r.get("failed") or r.get("error"))
safe = [n for n in names if n not in torch_init and n not in driver and n not in failed]
print(f"torch initialized CUDA: {len(torch_init)} {torch_init[:40]}", flush=True)
print(f"driver only: {len(driver)} {driver[:40]}", flush=True)
print(f"failed: {len(failed)} {failed[:20]}", flush=True)
tops = {}
for n, r in scan.items():
    tops.setdefault(n.split(".")[0], []).append(r.get("s", 0))
print("scan alone, max s by top package:", {k: round(max(v), 3) for k, v in sorted(tops.items())}, flush=True)


# 2. the safe set and the whole list, each in one fork; a CUDA op in a grandchild after the safe set
def safe_then_cuda():
    res = import_all(safe)()

    def op():
        x = torch.ones(1024, device="cuda")
        return {"sum": float(x.sum())}
    res["grandchild"] = forked(op)
    return res


res_safe = [forked(safe_then_cuda) for _ in range(2)]
res_all = [forked(import_all(names)) for _ in range(2)]
for tag, rs in (("safe", res_safe), ("all", res_all)):
    for r in rs:
        print(tag, {k: v for k, v in r.items() if k != "failed"}, "failed", len(r.get("failed", [])), flush=True)
json.dump({"scan": scan, "safe": safe, "torch_init": torch_init, "driver": driver, "failed": failed,
           "res_safe": res_safe, "res_all": res_all}, open(f"{out}/scan.json", "w"), indent=1)


# 3. starts
def timed_imports(dirname):
    """Every process from here on (forks inherit it) writes its outermost imports: start, seconds, name."""
    import _frozen_importlib as fb
    orig, local = fb._load_unlocked, threading.local()

    def load(spec_):
        depth = getattr(local, "d", 0)
        local.d = depth + 1
        t = time.time()
        try:
            return orig(spec_)
        finally:
            local.d = depth
            if depth == 0:
                with open(f"{dirname}/imports-{os.getpid()}.txt", "a") as f:
                    f.write(f"{t:.3f} {time.time() - t:.4f} {spec_.name}\n")
    fb._load_unlocked = load


def start(mode):
    def go():
        t = time.perf_counter()
        if mode == "safe":
            for n in safe:
                try:
                    importlib.import_module(n)
                except BaseException:
                    pass
        if mode == "timeline":
            os.makedirs(f"{out}/timeline", exist_ok=True)
            timed_imports(f"{out}/timeline")
        ahead = time.perf_counter() - t
        cuda = torch.cuda.is_initialized()
        from vllm import LLM
        print(f"=== {mode} LLM() at {time.time():.3f}", flush=True)
        t = time.perf_counter()
        llm = LLM(**KW)
        s = time.perf_counter() - t
        print(f"=== {mode} ready at {time.time():.3f}", flush=True)
        llm.generate(["hello"] * 4)
        try:
            llm.llm_engine.engine_core.shutdown()
        except BaseException:
            pass
        return {"mode": mode, "llm_s": s, "ahead_s": ahead, "cuda_before": cuda}
    return go


results = []
order = ["timeline"] + [m for i in range(rounds) for m in (("base", "safe"), ("safe", "base"))[i % 2]]
for mode in order:
    r = forked(start(mode), timeout=300)
    results.append(r)
    print("RESULT", json.dumps(r), flush=True)
    os.system("pkill -9 -f EngineCore >/dev/null 2>&1")
    time.sleep(2)
json.dump(results, open(f"{out}/starts.json", "w"), indent=1)
for mode in ("base", "safe"):
    v = sorted(r["llm_s"] for r in results if r.get("mode") == mode)
    print(mode, "LLM() s:", [round(x, 2) for x in v], flush=True)
os._exit(0)
