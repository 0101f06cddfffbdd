# The segments of each probe LLM() from its ms log (reports/h200-tokahead/README.md): config ("non-default args" ->
# "Enabling multiprocessing"), tokenizer (-> "Loading HfRenderer"), renderer + fork + the engine process's imports
# (-> the engine process's "Waiting for init message"), and where vLLM's tokenizer load began, from "non-default
# args" (negative: before LLM(), loaded ahead). Run in this folder: python3 segments.py
import glob
import re


def t(s):
    h, m, x = s.split(":")
    return int(h) * 3600 + int(m) * 60 + float(x)


print("log config_s tokenizer_s to_engine_process_s tokenizer_load_at")
for f in sorted(glob.glob("llm-*.log")):
    lines = [x for x in open(f) if re.match(r"\d\d:\d\d:\d\d\.\d{3} \d+ ", x)]

    def first(pat):
        return next(t(x.split()[0]) for x in lines if pat in x)

    nd, mp, rd = first("non-default args"), first("Enabling multiprocessing"), first("Loading HfRenderer")
    core, tok = first("Waiting for init message"), first("Loading CachedHfTokenizer")
    print(f, round(mp - nd, 2), round(rd - mp, 2), round(core - rd, 2), "%+.2f" % (tok - nd))
