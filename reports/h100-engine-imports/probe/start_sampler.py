# GPU probe (not product): where an eager fp8 `LLM()` start spends its time, by sampling the main thread's
# stack every 5 ms in the front end and (forked) in the engine process.
# usage: python start_sampler.py OUTDIR STARTS
import importlib, json, logging, os, sys, threading, time

if __name__ == "__main__":  # (a spawned engine process re-imports this file)
    os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
    out, starts = sys.argv[1], int(sys.argv[2])
    M = "/root/shared/models/qwen2.5-7b-instruct"
    KW = dict(model=M, tokenizer=M, load_format="dummy", dtype="bfloat16", quantization="fp8", enforce_eager=True,
              enable_prefix_caching=True, gpu_memory_utilization=0.9)  # the study's jsquad-vllm-fp8 cell
    from runner.engines.vllm.spec import VLLMSpec
    from runner.engines.vllm.engine import load_front_modules_ahead, load_vllm_tokenizer_ahead

    spec = VLLMSpec(kind="vllm")
    spec.set_env()
    for n in spec.preloads:
        importlib.import_module(n)
    load_front_modules_ahead()
    load_vllm_tokenizer_ahead(KW)
    import torch
    assert not torch.cuda.is_initialized()
    for h in logging.getLogger("vllm").handlers:
        h.setFormatter(logging.Formatter("%(asctime)s.%(msecs)03d %(process)d %(filename)s:%(lineno)d %(message)s",
                                         "%H:%M:%S"))
    print(f"base state: {len(sys.modules)} modules", flush=True)


    def sampler(tag):
        main = threading.main_thread().ident
        f = open(f"{out}/samples-{tag}-{os.getpid()}.jsonl", "w", buffering=1)

        def run():
            while True:
                fr = sys._current_frames().get(main)
                st = []
                while fr is not None and len(st) < 60:
                    c = fr.f_code
                    st.append(f"{c.co_filename.split('site-packages/')[-1]}:{fr.f_lineno}:{c.co_name}")
                    fr = fr.f_back
                f.write(json.dumps([time.time(), st]) + "\n")
                time.sleep(0.005)
        threading.Thread(target=run, daemon=True).start()


    def one(i):
        pid = os.fork()
        if pid == 0:
            os.register_at_fork(after_in_child=lambda: sampler(f"core{i}"))
            from vllm import LLM
            sampler(f"front{i}")
            t0 = time.time()
            print(f"=== start {i} LLM() at {t0:.3f}", flush=True)
            llm = LLM(**KW)
            print(f"=== start {i} ready at {time.time():.3f} ({time.time() - t0:.2f} s)", flush=True)
            mods = sorted(sys.modules)
            json.dump(mods, open(f"{out}/front-after-{i}.json", "w"))
            llm.generate(["hello"] * 4)
            try:
                llm.llm_engine.engine_core.shutdown()
            except BaseException:
                pass
            os._exit(0)
        os.waitpid(pid, 0)
        os.system("pkill -9 -f EngineCore >/dev/null 2>&1")
        time.sleep(2)


    for i in range(starts):
        one(i)
        if i == 0:  # what the runner's kept list holds after a start (as a job's process loads it ahead)
            have = set(sys.modules)
            for n in json.load(open(f"{out}/front-after-0.json")):
                if n not in have and not n.startswith("transformers_modules"):
                    try:
                        importlib.import_module(n)
                    except BaseException:
                        pass
            print(f"front modules loaded ahead: {len(sys.modules) - len(have)}; CUDA initialized: "
                  f"{torch.cuda.is_initialized()}", flush=True)
    os._exit(0)
