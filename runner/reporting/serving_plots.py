"""The latency-throughput chart of a serving run (matplotlib, headless), beside its report.md:
TTFT p50 and p99 and TPOT p50 against the achieved request rate, one point per offered rate."""

from __future__ import annotations

import math
from pathlib import Path

from runner.reporting.results import RunResult

CHART = "latency_throughput.png"  # in the run's folder, next to report.md


def _label(rate: float) -> str:
    return "inf" if math.isinf(rate) else f"{rate:g}"


def latency_chart(r: RunResult, folder: Path) -> Path | None:
    """Draw `<folder>/latency_throughput.png`; None (nothing written) for a run without serving figures."""
    sv = r.serving
    pts = [p for p in sv.rates if p.ttft_ms is not None] if sv is not None else []
    if not pts:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    x = [p.request_throughput for p in pts]
    series = (
        (left, "TTFT p50", [p.ttft_ms.p50 for p in pts], "o-", "#1f77b4"),
        (left, "TTFT p99", [p.ttft_ms.p99 for p in pts], "s--", "#ff7f0e"),
        (right, "TPOT p50", [p.tpot_ms.p50 if p.tpot_ms else math.nan for p in pts], "o-", "#2ca02c"),
    )
    for ax, name, ys, style, color in series:
        ax.plot(x, ys, style, color=color, label=name)
    for ax, ys in ((left, [p.ttft_ms.p99 for p in pts]), (right, series[2][2])):
        for p, xi, yi in zip(pts, x, ys, strict=True):
            if math.isnan(yi):
                continue
            ax.annotate(_label(p.rate), (xi, yi), fontsize=7, xytext=(3, 3), textcoords="offset points")
            if p.saturated:
                ax.scatter([xi], [yi], s=120, facecolors="none", edgecolors="#d62728", zorder=3)
        finite = [y for y in ys if not math.isnan(y) and y > 0]
        if finite and max(finite) / min(finite) > 20:
            ax.set_yscale("log")
        else:
            ax.set_ylim(bottom=0)
        ax.set_xlabel("achieved requests/s")
        ax.set_ylabel("ms")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    left.set_title("time to first token", fontsize=10)
    right.set_title("time per output token", fontsize=10)
    fig.suptitle(f"{r.name}: latency against throughput (labels: offered req/s; red ring: saturated)", fontsize=10)
    fig.tight_layout()
    fig.savefig(folder / CHART, dpi=110)
    plt.close(fig)
    return folder / CHART
