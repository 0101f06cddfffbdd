import json, sys, collections, re
path, t0, t1 = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
rows = [json.loads(l) for l in open(path) if l.strip()]
rows = [r for r in rows if t0 <= r[0] <= t1]
incl = collections.Counter()
for (t, st), nxt in zip(rows, rows[1:] + [[t1, []]]):
    w = nxt[0] - t  # each sample stands for the time to the next one
    seen = set()
    for fr in st:
        f = re.sub(r":\d+:", ":", fr)
        if f not in seen:
            incl[f] += w; seen.add(f)
print("inclusive time by function, each stack sample weighted by the time to the next")
print(f"{len(rows)} samples, {rows[-1][0]-rows[0][0] if rows else 0:.2f} s")
for f, c in incl.most_common(int(sys.argv[4]) if len(sys.argv) > 4 else 50):
    print(f"{c:7.3f} s  {f}")
# coarse timeline: every 100 ms the innermost vllm frame and the innermost frame
last = None
for t, st in rows:
    b = int((t - t0) * 10)
    if b != last:
        last = b
        v = next((x for x in st if "vllm/" in x), "")
        print(f"{t-t0:6.2f} {st[0] if st else ''} | {v}")
