"""report.md's "Where it ran" section: a run on Ray (`runner go --executor ray`), replica by replica."""

from __future__ import annotations

from runner.reporting.format import secs, table
from runner.reporting.results import ReplicaRun, RunResult


def _node(x: ReplicaRun) -> str:
    if not x.node_ip and not x.node_id:
        return "– (never started)"
    return f"{x.node_ip or '?'} ({x.node_id[:8]})" if x.node_id else x.node_ip


def where_it_ran(r: RunResult) -> list[str]:
    """The Ray cluster and each replica's share, node, worker, attempts and times; nothing for a local run."""
    if r.executor != "ray":
        return []
    ray = r.environment.get("ray", {})
    n = len(r.replicas)
    out = [
        "",
        "## Where it ran",
        "",
        f"Ray {ray.get('version', '?')} ({ray.get('address', '?')}), {n} data-parallel "
        f"{'replica' if n == 1 else 'replicas'} (each on a contiguous share of the examples); the workers' files "
        "came back to the machine that ran `runner go`.",
    ]
    rows = [
        [
            f"{x.index + 1}" + (" (failed)" if x.status != "ok" else ""),
            f"{x.examples[0] + 1}–{x.examples[1]}" if len(x.examples) == 2 else None,
            _node(x),
            str(x.pid) if x.pid is not None else None,
            x.attempts,
            secs(x.load_s),
            secs(x.generate_s),
        ]
        for x in r.replicas
    ]
    out += ["", table(rows, ["replica", "examples", "node", "pid", "attempts", "start", "generation"])]
    retried = [x.index + 1 for x in r.replicas if x.attempts > 1]
    if retried:
        out += [
            "",
            f"Retried after its worker or node died: replica {', '.join(map(str, retried))} (each "
            "continued from the samples it had finished; see `reused_samples` in results.json).",
        ]
    return out
