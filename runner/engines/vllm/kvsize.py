"""`reuse_memory_profile`: a vLLM start skips its memory profiling where an earlier start of the
same configuration on the same GPU measured it. vLLM's own startup plan (VLLM_ENABLE_STARTUP_PLAN)
does this keyed by a fingerprint that leaves out `gpu_memory_utilization` and `max_num_seqs`, so a
plan could size the KV cache of a start that asked otherwise; here the key is every engine and
model setting of the recipe, the vLLM and torch versions and the GPU. What is kept is the size
vLLM's log suggests after profiling ("`--kv-cache-memory=N` ... to fit into requested memory", the
value its startup plan keeps) with the GPU's free memory before that start (NVML); a later start
passes it as `kv_cache_memory_bytes` only when the GPU has at least as much free now. One JSON file
a key under `$VLLM_CACHE_ROOT/runner-kv/`; an unreadable one is ignored (the start profiles)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

# after vLLM's memory profiling (gpu_worker.py, vLLM 0.26)
SUGGESTED = re.compile(r"--kv-cache-memory=(\d+)` \([\d.]+ GiB\) to fit into requested memory")
SLACK = 64 * 2**20  # free memory may read this much lower than when measured (the driver's own)


def key(settings: dict[str, Any], versions: dict[str, str], gpu: dict[str, Any]) -> str:
    """The configuration a measured size belongs to: the recipe's engine and model settings, the
    libraries and the GPU (name, total memory, which device)."""
    facts = {"settings": settings, "versions": versions, "gpu": gpu}
    text = json.dumps(facts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def _path(root: str | Path, k: str) -> Path:
    return Path(root) / "runner-kv" / f"{k}.json"


def reusable(root: str | Path, k: str, free_now: int) -> int | None:
    """The KV cache bytes an earlier start of this configuration measured, where the GPU has at
    least as much memory free now as before that start; else None (the start profiles)."""
    try:
        kept = json.loads(_path(root, k).read_text())
        size, free = int(kept["kv_cache_memory_bytes"]), int(kept["free_bytes"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return size if size > 0 and free_now >= free - SLACK else None


def keep(root: str | Path, k: str, free_before: int, log: str) -> int | None:
    """The size this start's log suggests, kept for later starts of the configuration (written
    whole or not at all); None where the log has none (profiling skipped, or another vLLM)."""
    m = SUGGESTED.search(log)
    if m is None:
        return None
    path = _path(root, k)
    with contextlib.suppress(OSError):  # a cache that cannot be written: later starts profile
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(
            json.dumps({"kv_cache_memory_bytes": int(m.group(1)), "free_bytes": free_before})
        )
        os.replace(tmp, path)
    return int(m.group(1))


def forget(root: str | Path, k: str) -> None:
    """A kept size a start failed with, removed: the next start of the configuration profiles."""
    with contextlib.suppress(OSError):
        _path(root, k).unlink()
