"""How much a time moves: a run's generation time (the geometric mean of its repeats) with its 95%
interval, a speed-up as a ratio of geometric means with its interval ("no clear difference" where
the interval holds 1), and what made the machine busy while it was measured. A run stored before
repeats existed is one run: no interval."""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Sequence

from runner.base.format import cell, secs
from runner.base.stats import (
    combined_interval,
    combined_log,
    drift,
    examples_to_resolve,
    geomean_interval,
    interval_of,
    log_ratio,
    ratio_interval,
)
from runner.results import RunResult

ONE_RUN = "1 run: no interval"
Interval = tuple[float, float | None, float | None]  # a figure and its interval (or none)
LEGEND = (
    "Times are geometric means of the repeats with 95% intervals (Student t on the log times), "
    "speed-ups ratios of them (paired t over the turns of one call, else Welch's t), and an "
    "interval that holds 1 is no clear difference (in full: docs/statistics.md)."
)


def times(r: RunResult) -> list[float]:
    """The run's measured generation times; an estimate's scaled to the full dataset as its
    projection is."""
    if not (r.estimate and r.timings.generate_s):
        return r.times
    return [x * (r.estimate.projected_s / r.timings.generate_s) for x in r.times]


def estimate(r: RunResult) -> Interval | None:
    """The run's time (geometric mean over its repeats, projected for an estimate) and its 95%
    interval; None without a time."""
    t = times(r)
    return geomean_interval(t) if t else None


def time_cell(
    r: RunResult, approx: str = "", compact: bool = False, bold: bool = False
) -> str | None:
    """`2.05 s (1.90–2.31 s, n=5)`, or `2.05 s (1 run: no interval)` (`compact`: `2.05 s`, where a
    note says it; `bold`: the time in bold, the interval not)."""
    if (est := estimate(r)) is None:
        return None
    med, lo, hi = est
    head = f"{approx}{secs(med)}"
    head = f"**{head}**" if bold else head
    if lo is None or hi is None:
        return head + ("" if compact else f" ({ONE_RUN})")
    return f"{head} ({secs(lo)}–{secs(hi)}, n={len(r.times)})"


def rate_cell(r: RunResult, rate: float | None) -> str:
    """A throughput at the geometric-mean time, with the interval the time's gives it (`229
    (226–234)`)."""
    if rate is None or (est := estimate(r)) is None or est[1] is None or r.estimate:
        return cell(rate)
    med, lo, hi = est
    # at the time shown (results stored before it was exp(mean log))
    rate *= (r.timings.generate_s or med) / med
    return f"{cell(rate)} ({cell(rate * med / hi)}–{cell(rate * med / lo)})"  # type: ignore[operator]


def paired(a: RunResult, b: RunResult) -> bool:
    """The two runs took turns: repeat i of each was measured side by side, in the same turns of one
    call."""
    return len(a.repeats) == len(b.repeats) >= 2 and all(
        x.turns and x.turns == y.turns and x.index == y.index for x, y in zip(a.repeats, b.repeats)
    )


def examples(r: RunResult) -> tuple[str, int]:
    """What the run's time stands for: its dataset and how many of its examples (an estimate: the
    full count it projects to; a `--limit`ed run such as a tune's screen: the examples it ran). A
    run that recorded its dataset's hash (`environment.inputs`) is its data by those bytes and the
    dataset's other settings, wherever the file was (a CI's checkout in another folder, `./x` or
    `x`); one stored without it, by its settings as written."""
    n = r.estimate.n_total if r.estimate else r.n_samples
    inputs = r.environment.get("inputs")
    sha = (
        [v for k, v in inputs.items() if k.startswith("dataset:")]
        if isinstance(inputs, dict)
        else []
    )
    if sha:
        return r.recipe.dataset.model_dump_json(exclude={"path"}) + f" {sha[0]}", n
    return r.recipe.dataset.model_dump_json(), n


def why_no_ratio(slow: RunResult, fast: RunResult) -> str | None:
    """Why the two runs' times make no speed-up, None where they do: other examples timed, or random
    weights (or a fake engine) against real weights unless both were held to the same number of
    output tokens (`sampling.ignore_eos` and the same count measured): other outputs' lengths."""
    if (a := examples(slow)) != (b := examples(fast)):
        if a[1] == b[1]:
            return f"other examples: as many ({b[1]:,}), from another dataset or its settings"
        return f"other examples: {b[1]:,}"
    fixed = lambda r: r.recipe.sampling.ignore_eos
    if slow.scores_meaningful == fast.scores_meaningful or (
        fixed(slow) and fixed(fast) and slow.tokens.output == fast.tokens.output
    ):
        return None
    made_up = (fast if slow.scores_meaningful else slow).recipe.engine.fake
    return (
        f"{'a fake engine' if made_up else 'random weights'} against real weights: their outputs "
        "differ in length"
    )


def speedup(slow: RunResult, fast: RunResult, level: float = 0.95) -> Interval | None:
    """time(slow) / time(fast): the ratio of the geometric means and its `level` interval (None
    without times, or where `why_no_ratio` gives a reason)."""
    a, b = times(slow), times(fast)
    if not a or not b or why_no_ratio(slow, fast):
        return None
    return ratio_interval(a, b, paired(slow, fast), level)


def repeats_to_tell(slow: RunResult, fast: RunResult) -> int | None:
    """For a speed-up inside the noise: about how many repeats each would make a difference of the
    size seen clear at the noise seen (95%, 80% power; `stats.examples_to_resolve`), from the turns'
    log ratios where they were paired, else from both runs' spread of log times. None without two
    repeats each or without a difference."""
    a, b = times(slow), times(fast)
    if len(a) < 2 or len(b) < 2:
        return None
    if paired(slow, fast):
        m, se, _ = log_ratio(a, b, True)
        return examples_to_resolve(se * math.sqrt(len(a)), m, len(a)) if se is not None else None
    sd = lambda xs: statistics.stdev(math.log(x) for x in xs)
    return examples_to_resolve(
        math.hypot(sd(a), sd(b)), log_ratio(a, b, False)[0], max(len(a), len(b))
    )


def speedup_parts(
    pairs: Sequence[tuple[RunResult, RunResult]],
) -> tuple[float | None, float | None]:
    """The 95% interval of the geometric mean of several pairs' speed-ups. Pairs with no cell in
    common: each pair's own interval (paired where its cells took turns), combined. Pairs that share
    a cell (one cell against two others): each cell's mean log time weighted by how often it stands
    first less how often second, its noise counted once (Welch-Satterthwaite over the cells; the
    turns' pairing is not used)."""
    if any(not times(r) for pair in pairs for r in pair):
        return None, None
    ids = [id(r) for pair in pairs for r in pair]
    if len(set(ids)) == len(ids):
        return combined_interval([log_ratio(times(a), times(b), paired(a, b)) for a, b in pairs])
    cells, weights = {}, Counter()
    for a, b in pairs:
        for r, w in ((a, 1), (b, -1)):
            cells[id(r)] = times(r)
            weights[id(r)] += w / len(pairs)
    return interval_of(*combined_log(list(cells.values()), [weights[k] for k in cells]))


def _x(v: float) -> str:
    """A ratio's figure: `1.52`, `13.4`, `1,204`."""
    v = float(f"{v:.9g}")
    return f"{v:,.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def tie_text(lo: float, hi: float) -> str:
    """An interval that holds 1: `0.91–1.12×`."""
    return f"{_x(lo)}–{_x(hi)}×"


def ratio_text(ratio: float, lo: float | None, hi: float | None, approx: str = "") -> str:
    """`1.80× (1.52–2.13)`, `3.4× slower (3.1–3.8)`, `no clear difference (0.91–1.12×)`, `1.80× (1
    run: no interval)`."""
    if lo is not None and hi is not None and lo <= 1 <= hi:
        return f"no clear difference ({tie_text(lo, hi)})"
    # said as such, not as a speed-up below 1; but not `1.00× slower` (one run a side, a ratio
    # that rounds to 1: a clear slowdown under 0.5% is still said slower)
    if slower := ratio < 1 and not (lo is None and _x(1 / ratio) == "1.00"):
        ratio, lo, hi = 1 / ratio, hi and 1 / hi, lo and 1 / lo
    spread = ONE_RUN if lo is None or hi is None else f"{_x(lo)}–{_x(hi)}"
    return f"{approx}{_x(ratio)}×{' slower' if slower else ''} ({spread})"


def clear(lo: float | None, hi: float | None) -> bool:
    return lo is not None and hi is not None and not lo <= 1 <= hi


def compared(a: RunResult, b: RunResult) -> str:
    """How two runs' times were set side by side: `in turns` (paired over the turns of one call),
    `across calls` (measured, wholly or in part, in different `runner go` calls: the machine may
    have differed), or `back to back` (one call, one after the other: a drift over the call lands on
    one of them)."""
    if paired(a, b):
        return "in turns"
    # (both measured over the same several calls, not in turns: not one after the other either)
    return "across calls" if across_calls(a, b) or len(calls(a) | calls(b)) > 1 else "back to back"


def drifted(r: RunResult) -> tuple[float, float, float] | None:
    """The run's repeats' trend per repeat with its 95% interval, where the interval excludes 0 (3
    repeats or more; `stats.drift`); None where no drift shows."""
    got = drift([x.generate_s for x in r.repeats if x.generate_s]) if len(r.repeats) >= 3 else None
    return got if got is not None and not got[1] <= 0 <= got[2] else None


def busy(r: RunResult) -> list[str]:
    """`repeat 2: load average 3.1 on 2 CPUs` for each measured repeat the machine was busy in."""
    return [f"repeat {x.index}: {'; '.join(x.noise.busy)}" for x in r.repeats if x.noise.busy]


def calls(r: RunResult) -> frozenset[str]:
    """The `runner go` calls that measured the run (empty for a run stored before calls were
    recorded)."""
    return frozenset(x.call for x in r.repeats if x.call)


def across_calls(a: RunResult, b: RunResult) -> bool:
    """The two runs were measured, wholly or in part, in different `runner go` calls."""
    return bool(calls(a) and calls(b) and calls(a) != calls(b))
