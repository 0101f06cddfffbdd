# CPU check (not product): the renderer's tokenizer copies (vLLM 0.26's copy path, as tests/test_vllm_engine_start.py
# mimics it) with the Qwen2.5 tokenizer, without and with copies made ahead; alternating rounds.
# usage: python copies_cpu.py TOKENIZER_DIR ROUNDS
import statistics, sys, time
import runner.engines.vllm.engine as e
from tests.test_vllm_engine_start import _renderer_copies, get_cached_tokenizer
from transformers import AutoTokenizer

folder, rounds = sys.argv[1], int(sys.argv[2])
res = {"vLLM's own copies": [], "copies made ahead": []}
for _ in range(rounds):
    for mode in res:
        cached = get_cached_tokenizer(AutoTokenizer.from_pretrained(folder))
        if mode == "copies made ahead":
            t = time.perf_counter()
            e.copy_tokenizer_ahead(cached, {"renderer_num_workers": 1})
            ahead = time.perf_counter() - t
        t = time.perf_counter()
        _renderer_copies(cached)
        res[mode].append(time.perf_counter() - t)
for mode, v in res.items():
    print(f"{mode}: median {statistics.median(v):.3f} s (min {min(v):.3f}, max {max(v):.3f}, {len(v)} rounds)")
print(f"made ahead (the job's process, last round): {ahead:.3f} s")
