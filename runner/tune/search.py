"""The tune's decisions, from stored results and samples (no engine here): which screened candidates
go on, which confirmed one wins (spec.py has the method in words)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from runner.recipe import GateSpec
from runner.report.spread import Interval, clear, estimate, ratio_text, repeats_to_tell, speedup
from runner.report.summary import gate_verdict
from runner.results import RunResult

from .spec import TuneSpec


@dataclass
class Cell:
    """One candidate (or the baseline: `index` 0, no settings) and what became of it."""

    index: int
    name: str
    settings: dict[str, Any]
    labels: dict[str, str] = field(default_factory=dict)  # key -> label of the labelled values
    screen: RunResult | None = None
    full: RunResult | None = None
    verdict: str = "not screened (budget)"
    gate: str = ""  # the gate's words on the full set (or the screen's when it dropped the cell)
    passed: bool | None = None


def objective(r: RunResult | None, spec: TuneSpec) -> float | None:
    """Lower is better: the geometric mean generation time (exp of the mean log over repeats), or
    minus the output throughput; None for a run without it."""
    if r is None or r.status != "ok":
        return None
    if spec.objective == "throughput":
        tps = r.throughput.output_tokens_per_s
        return -tps if tps else None
    got = estimate(r)
    return got[0] if got else r.timings.generate_s


def gate_words(rs: dict, bs: dict, gate: GateSpec | None) -> tuple[bool | None, str]:
    if gate is None:
        return None, "no gate"
    v = gate_verdict(rs, bs, gate)
    if v is None:
        return None, "not scored"
    return v.passed, v.words() + ("" if v.passed is not None else f" ({v.why()})")


def keep_after_screen(cells: list[Cell], base: Cell, spec: TuneSpec, samples: Any) -> list[Cell]:
    """The screened candidates that go on to the confirmation: those that finished and are not
    clearly below the gate (their whole interval under the allowed drop), best screen objective
    first, the `keep` share (at least `min_keep`). `samples(result)` gives a run's samples by
    example id."""
    bs = samples(base.screen) if base.screen is not None and base.screen.status == "ok" else {}
    ranked = []
    for c in cells:
        if c.screen is None:
            continue
        if (value := objective(c.screen, spec)) is None:
            c.verdict = f"screen run {c.screen.status}"
            continue
        if spec.gate is not None:
            if not bs or (v := gate_verdict(samples(c.screen), bs, spec.gate)) is None:
                c.verdict, c.gate = (
                    "dropped at the screen: its gate cannot be checked (no paired scores)",
                    "not scored",
                )
                continue
            # its whole interval below the allowed drop: clearly worse
            if v.hi is not None and v.hi < -v.allowed:
                c.verdict, c.passed = "dropped at the screen: clearly below the gate", False
                c.gate = v.words()
                continue
        ranked.append((value, c))
    ranked.sort(key=lambda vc: vc[0])
    k = spec.confirmed(len(ranked))
    for i, (_, c) in enumerate(ranked):
        c.verdict = "confirmed" if i < k else "not kept (slower at the screen)"
    return [c for _, c in ranked[:k]]


def gain(
    a: RunResult | None, b: RunResult | None, spec: TuneSpec, level: float = 0.95
) -> Interval | None:
    """How much better b is than a in the objective's terms, with its `level` interval: the speed-up
    time(a)/time(b), or for `throughput` the same ratio scaled by b's output tokens over a's (each
    run's tokens are the same in every repeat); above 1: b is better."""
    if (
        a is None
        or b is None
        or a.status != "ok"
        or b.status != "ok"
        or (ratio := speedup(a, b, level)) is None
    ):
        return None
    if spec.objective != "throughput":
        return ratio
    if not a.tokens.output or not b.tokens.output:
        return None
    k = b.tokens.output / a.tokens.output
    return tuple(None if x is None else x * k for x in ratio)  # type: ignore[return-value]


@dataclass
class Decision:
    # one, or the ones within noise of each other (fastest first); empty when none passed
    winners: list[Cell]
    against_baseline: Interval | None
    words: str
    # no other finished cell is faster, as accurate and as cheap
    front: list[Cell] = field(default_factory=list)
    # the level of `against_baseline` in words (Bonferroni over the confirmed candidates)
    level: str = ""


def family_level(k: int) -> float:
    """The interval level that keeps the chance of crowning any of `k` candidates that are not truly
    faster at 5% (Bonferroni: 1 - 0.05 / k): the winner is picked as the fastest of the k on the
    same runs that test it."""
    return 1 - 0.05 / max(k, 1)


def front(cells: Sequence[Cell], metric: str | None) -> list[Cell]:
    """The cells that finished and that no other finished cell beats on every count at once:
    generation time (lower), the gate's score (higher; without a gate, time alone), dollars for the
    run where every one is priced (lower)."""
    from runner.report.markdown import cost_figures
    from runner.report.plots import pareto_front

    done = [c for c in cells if c.full is not None and c.full.status == "ok" and estimate(c.full)]
    usd = [(cost_figures(c.full) or {}).get("usd_run") for c in done]  # type: ignore[arg-type]
    scored = metric is not None and all(
        c.full.scores_meaningful and metric in c.full.scores for c in done
    )  # type: ignore[union-attr]
    priced = None not in usd
    points = [
        (
            estimate(c.full)[0],  # type: ignore[arg-type, index]
            *([-c.full.scores[metric]] if scored else []),  # type: ignore[union-attr, index]
            *([dollars] if priced else []),
        )
        for c, dollars in zip(done, usd)
    ]
    return [done[i] for i in pareto_front(points)]


def against_hand_written(
    pick: Cell, hand: list[Cell], spec: TuneSpec
) -> tuple[Cell, tuple | None] | None:
    """The fastest hand-written cell that finished (by the objective) and how much better the tune's
    pick is than it (the ratio with its 95% interval, as `gain`); None when no hand-written cell
    finished."""
    done = [c for c in hand if objective(c.full, spec) is not None]
    if not done:
        return None
    best = min(done, key=lambda c: objective(c.full, spec))  # type: ignore[arg-type, return-value]
    return best, gain(best.full, pick.full, spec)


def decide(
    confirmed: list[Cell], base: Cell, spec: TuneSpec, samples: Any, hand: Sequence[Cell] = ()
) -> Decision:
    """Gate each confirmed candidate on the full set against the baseline, then the fastest that
    passed; the runner-up is named with it when their ratio's 95% interval holds 1 (no clear
    difference). The `hand`-written cells that finished are gated too (shown, never candidates)."""
    # an interrupted call, or --report-only before the confirmation ran
    if missing := [c.name for c in [base, *confirmed] if c.full is None]:
        for c in confirmed:
            c.verdict = "confirmation not finished" if c.full is None else c.verdict
        words = (
            f"Unfinished: {len(missing)} of {len(confirmed) + 1} confirmation runs are not "
            f"stored yet ({', '.join(missing)}); the same command continues the tune."
        )
        return Decision([], None, words)
    if base.full.status != "ok":  # type: ignore[union-attr]  (not missing: checked above)
        words = (
            f"The recipe as written ({base.name}) failed on every example: nothing to compare "
            "the candidates with (its report says why)."
        )
        return Decision([], None, words)
    bs = samples(base.full)
    for h in hand:
        if h.full is not None and h.full.status == "ok":
            h.passed, h.gate = gate_words(samples(h.full), bs, spec.gate)
    on_front = front([base, *confirmed, *hand], spec.gate.metric if spec.gate else None)
    key = lambda c: (c not in on_front, objective(c.full, spec))  # the front's first, then fastest
    ok = sorted(_passed(confirmed, bs, spec, samples), key=key)
    if not ok:
        return Decision([], None, "No candidate passed: the recipe as written stays.", on_front)
    return Decision(*_crown(ok, base, spec, len(confirmed)), on_front, _level_words(len(confirmed)))


def _passed(confirmed: list[Cell], bs: dict, spec: TuneSpec, samples: Any) -> list[Cell]:
    """The confirmed cells that finished and passed the gate (a gate that cannot be checked is not
    passed)."""
    out = []
    for c in confirmed:
        if objective(c.full, spec) is None:
            c.verdict = "confirmation run " + (c.full.status if c.full is not None else "missing")
            continue
        c.passed, c.gate = gate_words(samples(c.full), bs, spec.gate)
        if c.passed is False:
            c.verdict = "failed the gate on every example"
        elif c.passed is None and spec.gate is not None:
            c.verdict = (
                "gate not checked (no paired scores, or too few examples to tell): not a candidate"
            )
        else:
            out.append(c)
    return out


def _above(g: Interval | None) -> bool:
    """A gain clearly above 1 (its interval wholly above)."""
    return g is not None and g[0] > 1 and clear(g[1], g[2])


def _crown(ok: list[Cell], base: Cell, spec: TuneSpec, k: int) -> tuple[list[Cell], Any, str]:
    """(winners, the best against the baseline, the words) among the passed cells `ok`, the front's
    first, fastest first; `k`: the confirmed candidates the best was picked from."""
    best, level = ok[0], family_level(k)
    vs = gain(base.full, best.full, spec, level)
    if not _above(vs):  # the recipe as written is the one to beat
        for c in ok:
            c.verdict = "passed; not clearly faster than the recipe as written"
        against = f": {ratio_text(*vs)}" if vs is not None else " (no time to compare)"
        words = (
            "No candidate is clearly faster than the recipe as written; the fastest that "
            f"passed, **{best.name}**, against it{against}{_level_words(k)}."
        )
        if vs is not None and vs[0] > 1 and (n := repeats_to_tell(base.full, best.full)):  # type: ignore[arg-type]
            words += (
                f" About {n:,} repeats each would tell a difference this size at this noise "
                "(80% power)."
            )
        return [], vs, words + " The recipe as written stays."
    winners = [best]  # and those within its noise, clearly faster than the recipe as written too
    close = []  # within its noise, but not clearly faster than the recipe as written
    for other in ok[1:]:
        ratio = gain(other.full, best.full, spec)
        if ratio is not None and not clear(ratio[1], ratio[2]):
            (winners if _above(gain(base.full, other.full, spec, level)) else close).append(other)
    for c in ok:
        c.verdict = (
            "winner"
            if c is best and len(winners) == 1
            else "tied for fastest"
            if c in winners
            else "passed"
        )
    words = (
        f"**{best.name}** is the fastest that passed, clearly faster than the recipe as written"
        f"{_level_words(k)}."
    )
    if len(winners) > 1:
        others = ", ".join(f"**{c.name}**" for c in winners[1:])
        words = (
            f"No single winner: **{best.name}** and {others} are within each other's noise "
            "(the 95% interval of their time ratio holds 1), and both clearly faster than the "
            f"recipe as written{_level_words(k)}; more repeats would tell them apart."
        )
    if close:
        one = len(close) == 1
        words += (
            f" **{best.name}** is not clearly faster than "
            f"{', '.join(f'**{c.name}**' for c in close)} (the 95% "
            f"interval of {'their' if one else 'each'} time ratio holds 1), which "
            f"{'is not itself' if one else 'are not themselves'} clearly faster than the recipe "
            "as written."
        )
    return winners, vs, words


def _level_words(k: int) -> str:
    """How the winner's interval was widened for the `k` candidates it was picked from (nothing for
    one)."""
    return (
        f" ({family_level(k):.1%} interval: Bonferroni over the {k} confirmed candidates)"
        if k > 1
        else ""
    )
