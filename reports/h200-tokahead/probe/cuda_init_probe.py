# GPU probe (not product), issue 41: what a job's process can load ahead of vLLM's `LLM()` without
# initializing CUDA (which makes vLLM spawn its engine process instead of forking it), and what that saves.
#   python cuda_init_probe.py bisect MODULES_JSON OUTDIR   import the engine process's modules in order, one
#        process after another, each stopping at the first module whose import initializes CUDA; those are
#        left out and the rest go on; writes OUTDIR/safe_modules.json and OUTDIR/bisect.json, then checks
#        that a process holding all the safe modules can still fork a child that uses CUDA
#   python cuda_init_probe.py llm MODE OUTDIR              one eager fp8 LLM() (Qwen2.5-7B shapes, dummy
#        weights, 8k steps, prefix caching) after loading ahead what MODE says: base (what the runner
#        preloads today), tok (+ vLLM's own tokenizer through its lru_cache), safe (+ safe_modules.json),
#        safetok (both), front (+ front_modules.json: what the front end imported inside an earlier
#        LLM(), written by a base run), fronttok (both); vLLM's DEBUG log with milliseconds in
#        OUTDIR/llm-MODE-N.log; prints RESULT {json}
# Run on 2026-12-06 (reports/h200-tokahead): bisect, then base/tok/safe/safetok, as it was then:
# `git show 258adad:reports/h200-tokahead/probe/cuda_init_probe.py` (and modes.sh). Added after that run, not run
# yet: the front modes, `cuda_after`, and the bisection leaving out a package whose top initializes CUDA.
import json, os, subprocess, sys, time

M = os.environ.get("PROBE_MODEL", "/root/shared/models/qwen2.5-7b-instruct")
HERE = os.path.abspath(__file__)


def runner_env():
    os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
    os.environ.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")
    from runner.engines.vllm.spec import VLLMSpec

    VLLMSpec(kind="vllm").set_env()
    import vllm.engine.arg_utils, vllm.entrypoints.llm  # noqa: F401  what VLLMSpec.preloads imports today


def imp(names_file, start, skip_file):
    """Child: import names[start:] in order, skipping the known culprits; stop at the first that inits CUDA."""
    import importlib

    runner_env()
    import torch

    names = json.load(open(names_file))
    skip = set(json.load(open(skip_file))) if os.path.exists(skip_file) else set()
    if torch.cuda.is_initialized():
        print("LINE", json.dumps({"cuda_before": True}), flush=True)
        return
    for i, n in enumerate(names):
        if n in skip or any(n.startswith(c + ".") for c in skip):  # a package whose top inits CUDA: all of it
            continue
        t = time.perf_counter()
        try:
            importlib.import_module(n)
            err = None
        except BaseException as e:  # noqa: BLE001
            err = f"{type(e).__name__}: {str(e)[:120]}"
        dt = time.perf_counter() - t
        if torch.cuda.is_initialized():
            print("LINE", json.dumps({"i": i, "name": n, "cuda": True, "s": dt, "err": err}), flush=True)
            return
        if i >= start:
            print("LINE", json.dumps({"i": i, "name": n, "cuda": False, "s": dt, "err": err}), flush=True)
    print("LINE", json.dumps({"done": True}), flush=True)


def bisect(names_file, outdir, budget=float(os.environ.get("PROBE_BUDGET", 200))):
    t0 = time.time()
    names = json.load(open(names_file))
    skip_file = f"{outdir}/culprits.json"
    culprits, rows, start, rounds, lines = [], {}, 0, 0, []
    json.dump(culprits, open(skip_file, "w"))
    while time.time() - t0 < budget:
        rounds += 1
        try:
            p = subprocess.run([sys.executable, HERE, "imp", names_file, str(start), skip_file],
                               capture_output=True, text=True, timeout=max(60, budget - (time.time() - t0) + 60))
        except subprocess.TimeoutExpired:
            print(f"round {rounds}: timed out", flush=True)
            lines = []
            break
        lines = [json.loads(x[5:]) for x in p.stdout.splitlines() if x.startswith("LINE ")]
        print(f"round {rounds}: {len(lines)} lines, rc {p.returncode}, {time.time() - t0:.1f} s", flush=True)
        if p.returncode or not lines:
            print(p.stderr[-2000:], flush=True)
            break
        for r in lines:
            if "name" in r:
                rows[r["name"]] = r
        last = lines[-1]
        if last.get("done") or last.get("cuda_before"):
            break
        if last.get("cuda"):
            culprits.append(last["name"])
            json.dump(culprits, open(skip_file, "w"))
            print("  initializes CUDA:", last["name"], flush=True)
            start = last["i"] + 1
    finished = bool(lines) and lines[-1].get("done", False)
    safe = [n for n in names if n in rows and not rows[n]["cuda"] and not rows[n]["err"]]
    json.dump(safe, open(f"{outdir}/safe_modules.json", "w"))
    try:
        fork = subprocess.run([sys.executable, HERE, "forkcheck", f"{outdir}/safe_modules.json"], capture_output=True,
                              text=True, timeout=180)
    except subprocess.TimeoutExpired as e:
        fork = e
        fork.stdout, fork.stderr = "timed out", ""
    res = {"modules": len(names), "rounds": rounds, "finished": finished, "culprits": culprits,
           "safe": len(safe), "errors": {n: r["err"] for n, r in rows.items() if r["err"]},
           "slowest": sorted(((round(r["s"], 3), n) for n, r in rows.items()), reverse=True)[:15],
           "safe_import_s": round(sum(rows[n]["s"] for n in safe), 3), "wall_s": round(time.time() - t0, 1),
           "forkcheck": fork.stdout.strip()[-600:] + fork.stderr.strip()[-600:]}
    json.dump(res, open(f"{outdir}/bisect.json", "w"), indent=1)
    print("RESULT", json.dumps(res), flush=True)


def forkcheck(safe_file):
    import importlib

    runner_env()
    t = time.perf_counter()
    for n in json.load(open(safe_file)):
        importlib.import_module(n)
    import torch

    print("imported", round(time.perf_counter() - t, 2), "s; cuda initialized:", torch.cuda.is_initialized(), flush=True)
    pid = os.fork()
    if pid == 0:
        try:
            x = torch.ones(4, device="cuda") * 2
            print("forked child used CUDA:", float(x.sum()), flush=True)
            os._exit(0)
        except BaseException as e:  # noqa: BLE001
            print("forked child failed:", type(e).__name__, str(e)[:200], flush=True)
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    print("fork child exit", os.waitstatus_to_exitcode(status), flush=True)


def llm(mode, outdir):
    n = len([f for f in os.listdir(outdir) if f.startswith(f"llm-{mode}-")]) + 1
    log = f"{outdir}/llm-{mode}-{n}.log"
    cfg = f"{outdir}/logging.json"
    json.dump({"version": 1, "disable_existing_loggers": False,
               "formatters": {"ms": {"format": "%(asctime)s.%(msecs)03d %(process)d %(levelname)s "
                                               "[%(filename)s:%(lineno)d] %(message)s", "datefmt": "%H:%M:%S"}},
               "handlers": {"f": {"class": "logging.FileHandler", "filename": log, "formatter": "ms", "level": "DEBUG"}},
               "loggers": {"vllm": {"handlers": ["f"], "level": "DEBUG", "propagate": False}}}, open(cfg, "w"))
    os.environ["VLLM_LOGGING_CONFIG_PATH"] = cfg
    os.environ["VLLM_LOGGING_LEVEL"] = "DEBUG"
    t0 = time.perf_counter()
    runner_env()
    t1 = time.perf_counter()
    tok_s = mods_s = 0.0
    if mode in ("safe", "safetok", "front", "fronttok"):
        import importlib

        t = time.perf_counter()
        listed = "safe_modules.json" if mode.startswith("safe") else "front_modules.json"
        for name in json.load(open(f"{outdir}/{listed}")):
            try:
                importlib.import_module(name)
            except BaseException:  # noqa: BLE001  (loader-made names are not importable)
                pass
        mods_s = time.perf_counter() - t
    from vllm.tokenizers import registry

    if mode in ("tok", "safetok", "fronttok"):
        t = time.perf_counter()
        registry.cached_get_tokenizer(M, runner_type="generate", tokenizer_mode="auto", revision=None,
                                      trust_remote_code=False)
        tok_s = time.perf_counter() - t
    import torch

    cuda_before = torch.cuda.is_initialized()
    from vllm import LLM

    print(f"{time.strftime('%H:%M:%S')} LLM() begins", flush=True)
    before = set(sys.modules)
    t2 = time.perf_counter()
    llm_ = LLM(model=M, tokenizer=M, load_format="dummy", dtype="bfloat16", quantization="fp8", enforce_eager=True,
               enable_prefix_caching=True, gpu_memory_utilization=0.9, max_num_batched_tokens=8192,
               disable_log_stats=False)
    t3 = time.perf_counter()
    front = sorted(set(sys.modules) - before)
    if mode == "base":
        json.dump(front, open(f"{outdir}/front_modules.json", "w"))
    ci = registry.cached_get_tokenizer.cache_info()
    res = {"mode": mode, "n": n, "preload_s": round(t1 - t0, 3), "modules_s": round(mods_s, 3),
           "tokenizer_s": round(tok_s, 3), "llm_s": round(t3 - t2, 3), "cuda_before": cuda_before,
           "cuda_after": torch.cuda.is_initialized(), "front_modules": len(front),
           "tok_cache": {"hits": ci.hits, "misses": ci.misses}, "parent_modules": len(sys.modules)}
    try:
        out = llm_.generate(["こんにちは"] * 4, use_tqdm=False)
        res["generated"] = len(out)
    except BaseException as e:  # noqa: BLE001
        res["generate_error"] = repr(e)[:200]
    try:
        spawn = "spawn" in open(log).read()
    except OSError:
        spawn = None
    res["log_mentions_spawn"] = spawn
    print("RESULT", json.dumps(res), flush=True)
    try:
        llm_.llm_engine.engine_core.shutdown()
    except BaseException as e:  # noqa: BLE001
        print("shutdown", e)
    os._exit(0)


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "imp":
        imp(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    elif cmd == "bisect":
        os.makedirs(sys.argv[3], exist_ok=True)
        bisect(sys.argv[2], sys.argv[3])
    elif cmd == "forkcheck":
        forkcheck(sys.argv[2])
    elif cmd == "llm":
        os.makedirs(sys.argv[3], exist_ok=True)
        llm(sys.argv[2], sys.argv[3])
