"""PNG charts for the summary (matplotlib, headless). Drawn from results only."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path

from runner.base.files import save_figure
from runner.folder import CHARTS
from runner.report.spread import estimate
from runner.results import RunResult


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig, path: Path) -> Path:
    fig.tight_layout()
    save_figure(fig, path)
    pyplot().close(fig)
    return path


# times spanning more than this factor get a log axis; closer ones a linear axis from 0
LOG_ABOVE = 30


def scale_of(values: list[float]) -> str:
    """`linear` (an axis from 0) where the values are within a factor LOG_ABOVE of each other, else
    `log`."""
    return "log" if max(values) / min(values) > LOG_ABOVE else "linear"


def two_digits(v: float) -> str:
    """A number to two significant digits, without exponents: 0.13, 6.9, 19, 1,234."""
    return f"{v:,.0f}" if v >= 100 else f"{float(f'{v:.2g}'):g}"


def _interval(r: RunResult) -> tuple[float, float] | None:
    """The run's 95% interval of its time: from its repeats, else an estimate's projection
    interval."""
    if (est := estimate(r)) is not None and None not in est:
        return est[1:]  # type: ignore[return-value]
    e = r.estimate
    return (max(e.low_s, 1e-9), e.high_s) if e and None not in (e.low_s, e.high_s) else None  # type: ignore[type-var, return-value]


def err_bars(v: float, ci: tuple[float, float] | None) -> list[list[float]] | None:
    """An error bar's lengths below and above `v` to the interval `ci` (None: no bar)."""
    return [[max(v - ci[0], 0)], [max(ci[1] - v, 0)]] if ci else None


def bar_rows(rs: list) -> tuple:
    """A figure with a row of bars per run, the first run at the top: the figure, its axes and
    the runs bottom-up with their row."""
    fig, ax = pyplot().subplots(figsize=(8, 0.45 * len(rs) + 1.4))
    ax.set_yticks(range(len(rs)), [r.name for r in rs][::-1], fontsize=8)
    return fig, ax, enumerate(rs[::-1])


def time_chart(results: list[RunResult], base: RunResult | None, path: Path) -> Path | None:
    rs = [r for r in results if r.status == "ok" and r.projected_s]
    if not rs:
        return None
    fig, ax, rows = bar_rows(rs)
    for y, r in rows:
        t, e, ci = r.projected_s, r.estimate, _interval(r)
        color = "#d62728" if r is base else "#1f77b4"
        ax.barh(
            y,
            t,
            color="white" if e else color,
            edgecolor=color,
            hatch="//" if e else None,
            linewidth=1.5,
        )
        if ci is not None:
            ax.errorbar(t, y, xerr=err_bars(t, ci), color="black", capsize=3)
        label = f" {two_digits(t)} s" + (" (est.)" if e else "")
        ax.text(max(t, ci[1]) if ci else t, y, label, va="center", fontsize=8)
    scale = scale_of([r.projected_s for r in rs])  # type: ignore[misc]
    ax.set_xscale(scale)
    if scale == "linear":
        ax.set_xlim(0, max((_interval(r) or (0, r.projected_s))[1] for r in rs) * 1.2)  # type: ignore[type-var]
    bars = "bars: 95% interval" if any(_interval(r) for r in rs) else ""
    what = ", ".join(
        filter(None, ("log scale" if scale == "log" else "", bars, "hatched: projected"))
    )
    ax.set_xlabel(f"generation time, s ({what})")
    ax.set_title("Time per recipe" + (f" (red: baseline {base.name})" if base else ""), fontsize=10)
    return save(fig, path)


def pareto_front(points: list[tuple[float, ...]]) -> list[int]:
    """Indices of the points no other point beats: at most as large on every coordinate and smaller
    on one (every coordinate lower-is-better)."""
    beats = lambda q, p: all(a <= b for a, b in zip(q, p)) and any(a < b for a, b in zip(q, p))
    return [i for i, p in enumerate(points) if not any(beats(q, p) for q in points)]


@dataclass(frozen=True)
class Accuracy:
    """An accuracy chart's score, plotted against time, the runs their gate stopped
    (drawn red) and each run's 95% interval of its score, by name."""

    metric: str
    failed: Collection[str] = ()
    score_ci: dict[str, tuple[float, float]] = field(default_factory=dict)


def plotted(results: list[RunResult], metric: str) -> list[RunResult]:
    """The runs an accuracy chart of `metric` plots: finished, timed, scored with real weights."""
    return [
        r
        for r in results
        if r.status == "ok" and r.scores_meaningful and metric in r.scores and r.projected_s
    ]


def accuracy_front(results: list[RunResult], accuracy: Accuracy) -> list[RunResult]:
    """The chart's Pareto front: the plotted runs their gate did not stop that no other of them
    beats on both lower time and higher score."""
    ok = [r for r in plotted(results, accuracy.metric) if r.name not in accuracy.failed]
    return [ok[i] for i in pareto_front([(r.projected_s, -r.scores[accuracy.metric]) for r in ok])]


def accuracy_chart(
    results: list[RunResult],
    accuracy: Accuracy,
    path: Path,
    label: Callable[[RunResult], str] = lambda r: r.name,
    title: str = "",
) -> Path | None:
    """`accuracy`'s score against generation time with each run's 95% interval of its time (and of
    its score, where `accuracy` has one), the Pareto front in green among the runs their gate did
    not stop (drawn red); points named by `label` (default: run name)."""
    metric, failed, score_ci = accuracy.metric, accuracy.failed, accuracy.score_ci
    rs = plotted(results, metric)
    if len(rs) < 2:  # one point says nothing a table does not
        return None
    pts = [(r.projected_s, r.scores[metric]) for r in rs]
    front = {id(r) for r in accuracy_front(rs, accuracy)}
    fig, ax = pyplot().subplots(figsize=(7, 4.5))
    for r, (t, s) in zip(rs, pts):
        on = id(r) in front
        color = "#d62728" if r.name in failed else "#2ca02c" if on else "#7f7f7f"
        xerr, yerr = err_bars(t, _interval(r)), err_bars(s, score_ci.get(r.name))
        if xerr or yerr:
            ax.errorbar(
                t, s, xerr=xerr, yerr=yerr, color=color, alpha=0.5, capsize=2, zorder=2, linewidth=1
            )
        ax.scatter(t, s, color=color, s=60 if on else 30, zorder=3)
        ax.annotate(
            label(r),
            (t, s),
            fontsize=7,
            xytext=(4, 4),
            textcoords="offset points",
        )
    front_pts = sorted(p for r, p in zip(rs, pts) if id(r) in front)
    ax.plot(*zip(*front_pts), color="#2ca02c", linestyle="--", zorder=2)
    ts, ss = map(list, zip(*pts))
    ss += [v for r in rs for v in score_ci.get(r.name, ())]  # the score bars stay inside the axis
    log = scale_of(ts) == "log"
    ax.set_xscale("log" if log else "linear")
    if not log:
        ax.set_xlim(0, max(max(ts), *((_interval(r) or (0, 0))[1] for r in rs)) * 1.15)
    pad = max((max(ss) - min(ss)) * 0.15, 0.01)
    if 0 <= min(ss) and max(ss) <= 1:  # a score on 0..1: the axis stays within it
        ax.set_ylim(max(0.0, min(ss) - pad), min(1.0, max(ss) + pad))
    ax.set_xlabel("generation time, s" + (" (log)" if log else "") + "; bars: 95% intervals")
    ax.set_ylabel(metric)
    red = "; red: failed its gate" if any(r.name in failed for r in rs) else ""
    ax.set_title(title or f"{metric} against time (green: Pareto front{red})", fontsize=10)
    return save(fig, path)


def memory_chart(results: list[RunResult], path: Path) -> Path | None:
    rs = [r for r in results if r.status == "ok" and r.memory.peak_gpu_gib is not None]
    if not rs:
        return None
    fig, ax, rows = bar_rows(rs)
    for y, r in rows:
        peak, w, kv = r.memory.peak_gpu_gib, r.memory.weights_gib or 0, r.memory.kv_cache_gib or 0
        rest, left = max(peak - w - kv, 0), 0
        for val, col, lab in (
            (w, "#1f77b4", "weights"),
            (kv, "#ff7f0e", "KV cache"),
            (rest, "#c7c7c7", "rest"),
        ):
            ax.barh(y, val, left=left, color=col, label=lab if y == 0 else None)
            left += val
        ax.text(left, y, f" {peak:.1f} GiB", va="center", fontsize=8)
    ax.set_xlabel("peak GPU memory, GiB (whole device, NVML)")
    ax.set_xlim(0, max(r.memory.peak_gpu_gib for r in rs) * 1.18)
    ax.legend(fontsize=8, ncol=3, loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
    ax.set_title("GPU memory per recipe", fontsize=10, pad=22)
    return save(fig, path)


def write_charts(
    results: list[RunResult], base: RunResult | None, out: Path, accuracy: Accuracy | None = None
) -> list[Path]:
    """The time, accuracy (none without `accuracy`) and memory charts of a summary."""
    out = Path(out)
    made = [
        time_chart(results, base, out / CHARTS["time"]),
        accuracy and accuracy_chart(results, accuracy, out / CHARTS["accuracy"]),
        memory_chart(results, out / CHARTS["memory"]),
    ]
    return [p for p in made if p is not None]
