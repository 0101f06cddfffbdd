"""What sets one recipe apart from another: the settings (dotted keys) that differ, engines of different
kinds compared by what was chosen."""

from __future__ import annotations

from typing import Any

from runner.config.keys import flat_dotted

SKIP_DIFF = {"name", "description", "baseline", "timeout_s", "estimate"}


def _engine_view(engine: dict) -> dict:
    """An engine's kind plus only the fields set away from that kind's defaults, so engines of
    different kinds compare by what was chosen, not by every field either kind has."""
    from runner.engines import spec_class

    cls = spec_class(engine.get("kind"))
    if cls is None:
        return engine
    defaults = cls.model_validate({"kind": engine["kind"]}).model_dump(mode="json")
    return {k: v for k, v in engine.items() if k == "kind" or defaults.get(k) != v}


def recipe_diff(rec: dict, base: dict) -> dict[str, Any]:
    """Settings of `rec` that differ from `base` (dotted keys)."""
    full = flat_dotted(rec)
    rec = {**rec, "engine": _engine_view(rec.get("engine", {}))}
    base = {**base, "engine": _engine_view(base.get("engine", {}))}
    a, b = flat_dotted(rec), flat_dotted(base)
    other_kind = rec["engine"].get("kind") != base["engine"].get("kind")
    out = {}
    for k in sorted(set(a) | set(b)):
        if k.split(".")[0] in SKIP_DIFF or k == "engine.kind":  # the kind has its own column
            continue
        if other_kind and k.startswith("engine.") and k not in a:  # a field the other engine does not have
            continue
        if a.get(k) != b.get(k):
            out[k] = a.get(k, full.get(k))
    return out
