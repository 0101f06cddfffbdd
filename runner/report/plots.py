"""PNG charts for the summary (matplotlib, headless). Drawn from results only."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from runner.folder import CHARTS
from runner.results import RunResult


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(plt, fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def time_chart(results: list[RunResult], base: RunResult | None, path: Path) -> Path | None:
    rs = [r for r in results if r.status == "ok" and r.projected_s]
    if not rs:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(rs) + 1.4))
    for y, r in enumerate(rs[::-1]):
        t, e = r.projected_s, r.estimate
        has_ci = e is not None and e.low_s is not None and e.high_s is not None
        color = "#d62728" if r is base else "#1f77b4"
        ax.barh(y, t, color="white" if e else color, edgecolor=color, hatch="//" if e else None, linewidth=1.5)
        if has_ci:
            ax.errorbar(t, y, xerr=[[t - max(e.low_s, 1e-9)], [e.high_s - t]], color="black", capsize=3)
        label = f" {t:,.0f} s" + (" (est.)" if e else "")
        ax.text(max(t, e.high_s) if has_ci else t, y, label, va="center", fontsize=8)
    ax.set_yticks(range(len(rs)), [r.name for r in rs][::-1], fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel("generation time, s (log scale; hatched = projected from a partial run)")
    ax.set_title("Time per recipe" + (f" (red: baseline {base.name})" if base else ""), fontsize=10)
    return _save(plt, fig, path)


def pareto(points: list[tuple[float, float]]) -> list[int]:
    """Indices of points no other point beats on both lower time and higher score."""
    beaten = lambda t, s: any(t2 <= t and s2 >= s and (t2 < t or s2 > s) for t2, s2 in points)
    return [i for i, (t, s) in enumerate(points) if not beaten(t, s)]


def accuracy_chart(
    results: list[RunResult], metric: str, path: Path, label: Callable[[RunResult], str] | None = None, title: str = ""
) -> Path | None:
    """Score against generation time, the Pareto front in green; points named by `label` (default: run name)."""
    rs = [r for r in results if r.status == "ok" and r.scores_meaningful and metric in r.scores and r.projected_s]
    if not rs:
        return None
    plt = pyplot()
    pts = [(r.projected_s, r.scores[metric]) for r in rs]
    front = set(pareto(pts))
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, (r, (t, s)) in enumerate(zip(rs, pts, strict=True)):
        ax.scatter(t, s, color="#2ca02c" if i in front else "#7f7f7f", s=60 if i in front else 30, zorder=3)
        ax.annotate(label(r) if label else r.name, (t, s), fontsize=7, xytext=(4, 4), textcoords="offset points")
    fp = sorted(pts[i] for i in front)
    ax.plot([p[0] for p in fp], [p[1] for p in fp], color="#2ca02c", linestyle="--", zorder=2)
    ax.set_xscale("log")
    ax.set_xlabel("generation time, s (log)")
    ax.set_ylabel(metric)
    ax.set_title(title or f"{metric} against time (green: Pareto front)", fontsize=10)
    return _save(plt, fig, path)


def memory_chart(results: list[RunResult], path: Path) -> Path | None:
    rs = [r for r in results if r.status == "ok" and r.memory.peak_gpu_gib is not None]
    if not rs:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(rs) + 1.4))
    for y, r in enumerate(rs[::-1]):
        peak, w, kv = r.memory.peak_gpu_gib, r.memory.weights_gib or 0, r.memory.kv_cache_gib or 0
        rest, left = max(peak - w - kv, 0), 0
        for val, col, lab in ((w, "#1f77b4", "weights"), (kv, "#ff7f0e", "KV cache"), (rest, "#c7c7c7", "rest")):
            ax.barh(y, val, left=left, color=col, label=lab if y == 0 else None)
            left += val
        ax.text(left, y, f" {peak:.1f} GiB", va="center", fontsize=8)
    ax.set_yticks(range(len(rs)), [r.name for r in rs][::-1], fontsize=8)
    ax.set_xlabel("peak GPU memory, GiB (whole device, NVML)")
    ax.set_xlim(0, max(r.memory.peak_gpu_gib for r in rs) * 1.18)
    ax.legend(fontsize=8, ncol=3, loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
    ax.set_title("GPU memory per recipe", fontsize=10, pad=22)
    return _save(plt, fig, path)


def write_charts(results: list[RunResult], base: RunResult | None, out: Path) -> list[Path]:
    try:
        pyplot()
    except ImportError:
        return []
    made = [
        time_chart(results, base, Path(out) / CHARTS["time"]),
        accuracy_chart(results, "exact_match", Path(out) / CHARTS["accuracy"]),
        memory_chart(results, Path(out) / CHARTS["memory"]),
    ]
    return [p for p in made if p is not None]
