"""PNG charts for the summary (matplotlib, headless). Drawn from results only."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from runner.execution.layout import chart_path
from runner.reporting.results import RunResult


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


def _time(r: RunResult) -> float | None:
    return r.estimate.projected_s if r.estimate else r.timings.generate_s


def time_chart(results: list[RunResult], base: RunResult | None, path: Path) -> Path | None:
    rs = [r for r in results if r.status == "ok" and _time(r)]
    if not rs:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(rs) + 1.4))
    names = [r.name for r in rs][::-1]
    for y, r in enumerate(rs[::-1]):
        t = _time(r)
        est = r.estimate is not None
        has_ci = est and r.estimate.low_s is not None and r.estimate.high_s is not None
        color = "#d62728" if r is base else "#1f77b4"
        ax.barh(y, t, color="white" if est else color, edgecolor=color, hatch="//" if est else None, linewidth=1.5)
        if has_ci:
            ax.errorbar(
                t, y, xerr=[[t - max(r.estimate.low_s, 1e-9)], [r.estimate.high_s - t]], color="black", capsize=3
            )
        ax.text(
            max(t, r.estimate.high_s) if has_ci else t,
            y,
            f" {t:,.0f} s" + (" (est.)" if est else ""),
            va="center",
            fontsize=8,
        )
    ax.set_yticks(range(len(names)), names, fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel("generation time, s (log scale; hatched = projected from a partial run)")
    ax.set_title("Time per recipe" + (f" (red: baseline {base.name})" if base else ""), fontsize=10)
    return _save(plt, fig, path)


def pareto(points: list[tuple[float, float]]) -> list[int]:
    """Indices of points no other point beats on both lower time and higher score."""
    front = []
    for i, (t, s) in enumerate(points):
        if not any((t2 <= t and s2 >= s) and (t2 < t or s2 > s) for j, (t2, s2) in enumerate(points) if j != i):
            front.append(i)
    return front


def accuracy_chart(
    results: list[RunResult], metric: str, path: Path, label: Callable[[RunResult], str] | None = None, title: str = ""
) -> Path | None:
    """Score against generation time, the Pareto front in green; points named by `label` (default: run name)."""
    rs = [r for r in results if r.status == "ok" and r.scores_meaningful and metric in r.scores and _time(r)]
    if not rs:
        return None
    plt = pyplot()
    pts = [(_time(r), r.scores[metric]) for r in rs]
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
        m = r.memory
        peak = m.peak_gpu_gib
        w = m.weights_gib or 0
        kv = m.kv_cache_gib or 0
        rest = max(peak - w - kv, 0)
        left = 0
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
        time_chart(results, base, chart_path(out, "time")),
        accuracy_chart(results, "exact_match", chart_path(out, "accuracy")),
        memory_chart(results, chart_path(out, "memory")),
    ]
    return [p for p in made if p is not None]
