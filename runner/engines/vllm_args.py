"""engine_args read back from vLLM: where each key lives in the engine's config, and its verdict.

`effective_engine_args` walks a VllmConfig (duck-typed, so tests pass plain objects); `engine_arg_knobs`
is a pure function of the requested and the held values."""

from __future__ import annotations

import os
from enum import Enum
from typing import Any

from runner.config.keys import flat_dotted
from runner.engines.base import Knob


def effective_engine_args(vllm_config: Any, args: dict[str, Any]) -> dict[str, tuple[str, Any]]:
    """Where each engine_args key lives in the engine's config and its value there: a top-level key in
    whichever `*_config` (or VllmConfig itself) has a field of that name, a dotted one by walking from its
    head: a config (compilation_config.…) or a mapping field (hf_overrides.…).
    Keys found nowhere are left out (their knob reads "unverified")."""
    names = [n for n in dir(vllm_config) if n.endswith("_config")]
    configs = {n: c for n in names if (c := _attr(vllm_config, n)) is not None and not callable(c)}
    order = sorted(configs, key=lambda n: (_FIRST.index(n) if n in _FIRST else len(_FIRST), n))
    found: dict[str, tuple[str, Any]] = {}
    for key in flat_dotted(args):
        head, *path = key.split(".")
        if head in configs:  # compilation_config.cudagraph_capture_sizes
            where, value = head, configs[head]
        else:  # the first config with a field of that name; VllmConfig's own fields last (optimization_level)
            held = ((n, _attr(configs[n], head)) for n in order)
            where, value = next(
                ((n, v) for n, v in held if v is not _MISSING), ("vllm_config", _attr(vllm_config, head))
            )
        for part in path:  # a mapping field walked key by key (hf_overrides.rope_theta)
            value = _attr(value, part)
        if value is not _MISSING and not callable(value):
            found[key] = (where, value)
    return found


_MISSING = object()
# where an engine argument's name is looked for first: a few names recur in sub-configs (max_model_len in
# the scheduler's, model's and speculative config; quantization, enforce_eager in the speculative one)
_FIRST = ("scheduler_config", "cache_config", "model_config", "parallel_config", "load_config")


def _attr(obj: Any, name: str) -> Any:
    """obj.name, or obj[name] in a mapping field (hf_overrides, inductor_compile_config); _MISSING if neither."""
    if obj is _MISSING or obj is None:
        return _MISSING
    if isinstance(obj, dict):
        return obj.get(name, _MISSING)
    try:
        return getattr(obj, name, _MISSING)
    except Exception:  # a property that cannot be read on this config
        return _MISSING


def _verdict(requested: Any, effective: Any) -> tuple[str, str]:
    """(status, a note on how they matched) for one engine argument and the value the engine holds."""
    if requested is None:
        return "default", "left to vLLM"
    if isinstance(effective, Enum) and isinstance(requested, str):
        same = requested.lower() in (effective.name.lower(), str(effective.value).lower())
        return ("applied" if same else "ignored"), ""
    req, eff = _plain(requested), _plain(effective)
    if req == eff:
        return "applied", ""
    if isinstance(req, list) and isinstance(eff, list) and all(isinstance(x, (int, float, str)) for x in req + eff):
        if set(req) == set(eff):
            return "applied", "the same values, in vLLM's order"
        if set(req) < set(eff):
            return "applied", f"vLLM added {sorted(set(eff) - set(req), key=str)}"
    return "ignored", ""


def _plain(v: Any) -> Any:
    """A config value as results.json can hold it (paths as text, enums by name, tuples as lists)."""
    if isinstance(v, Enum):
        return v.name
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, os.PathLike):
        return os.fspath(v)
    return v if v is None or isinstance(v, (bool, int, float, str)) else str(v)


def engine_arg_knobs(engine_args: dict[str, Any], held: dict[str, tuple[str, Any]] | None) -> list[Knob]:
    """One knob per engine_args key (nested mappings by dotted key), checked against what the engine holds
    (`effective_engine_args`; None where it was not read back)."""
    knobs = []
    for key, requested in flat_dotted(engine_args).items():
        name = f"engine_args.{key}"
        if held is None or key not in held:
            why = "not read back (a served engine)" if held is None else "not found in the engine's config"
            knobs.append(Knob(name=name, requested=requested, status="unverified", evidence=why))
            continue
        where, effective = held[key]
        try:
            status, note = _verdict(requested, effective)
        except Exception as e:  # evidence, not the result: a value that does not compare is unverified
            status, note = "unverified", f"could not compare ({type(e).__name__})"
        if where == "compilation_config":  # the engine core may still adjust CUDA-graph settings on its side
            where = "compilation_config, as the front end holds it"
        evidence = f"{where}; {note}" if note else where
        knobs.append(
            Knob(name=name, requested=requested, effective=_plain(effective), status=status, evidence=evidence)
        )
    return knobs
