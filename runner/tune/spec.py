"""The `tune:` block of a recipe file, and the candidates it spans.

The method:
1. **Screen**: the recipe as written (the baseline) and every candidate (one value per axis, the
   product of the axes in the order written) run once on the first `screen.examples` examples; each
   is an ordinary run folder (`<name>-screen`, `<name>-tNN-screen`). Candidates beyond the
   `budget.cells` left after the confirmation are not screened (the list is cut in its order, and
   the report says so).
2. **Keep**: candidates that finished, ranked by their screen time; a candidate whose paired 95%
   interval against the baseline's screen score is wholly below the allowed drop is out (clearly
   worse); the best `screen.keep` share (at least `screen.min_keep`) go on.
3. **Confirm**: those and the baseline on every example, `confirm.repeat` times each, taking turns;
   the gate is checked on the full set (paired interval, as `gate:`). The front is the cells no
   other beats on time, the gate's score and dollars at once; the winner is the fastest on it that
   passed and is clearly faster than the baseline at 1 - 0.05/k for the k confirmed candidates it
   was picked from (Bonferroni: with none truly faster, a winner is crowned at most 5% of the time);
   when its time is not clearly below the runner-up's (the 95% interval of their ratio holds 1),
   both are named: no single winner is crowned where the runner-up is clearly faster than the
   baseline too; otherwise the winner stands, said to be not clearly faster than the runner-up.
4. `budget.minutes` covers the screen and the confirmation: the screening stops (between chunks of
   `screen.chunk` cells) once the runs' measured total time (a run that timed out: its wall time)
   plus the confirmation's projected time (the baseline's screen scaled to every example) would pass
   it; what was screened is confirmed.
Every run is an ordinary cell with its own folder: an interrupted tune continues where it stopped. A
candidate whose settings are the recipe's own is not run (it is the baseline).

In a study file, the tune starts from one cell (`start`, else the study's `baseline` cell): that
cell's recipe is the baseline and the candidates change it; the hand-written cells named in
`compare` run in the confirmation with the same repeats, and the report sets the tune's best against
the fastest of them.
"""

from __future__ import annotations

import itertools
import json
import math
from typing import Any, Literal

from pydantic import Field, PositiveInt, field_validator, model_validator

from runner.base.types import StrictModel
from runner.recipe import GateSpec

MAX_RANGE = 1000  # values one range may give


class Range(StrictModel):
    """An axis written as a range: every power of two (`log2`) or every `step` (`linear`) from low
    to high."""

    low: float = Field(description="First value.")
    high: float = Field(description="Last value (included when the steps land on it).")
    scale: Literal["log2", "linear"] = Field(
        "log2", description="`log2`: low, 2 low, 4 low, ...; `linear`: by step."
    )
    step: float | None = Field(None, gt=0, description="The step of a linear range.")

    @model_validator(mode="after")
    def _sound(self) -> Range:
        if self.scale == "log2" and self.low <= 0:
            raise ValueError("a log2 range needs low > 0")
        if self.scale == "linear" and self.step is None:
            raise ValueError("a linear range needs a step")
        if self.high < self.low:
            raise ValueError("high is below low")
        self.values()  # refuses a range over the cap
        return self

    def values(self) -> list[float | int]:
        out, i, slack = [], 0, 1e-9 * max(1.0, abs(self.high))
        while True:
            v = self.low * 2**i if self.scale == "log2" else self.low + i * (self.step or 0)
            if v > self.high + slack:
                break
            if len(out) == MAX_RANGE:
                raise ValueError(
                    f"the range gives more than {MAX_RANGE:,} values: raise `step` or narrow "
                    "low..high"
                )
            v = round(v, 10)  # 0.1 + 0.2 is 0.3 here
            out.append(int(v) if float(v).is_integer() else v)
            i += 1
        return out


def _labelled(axis: list[Any] | Range | dict[str, Any]) -> tuple[list[Any], list[str | None]]:
    if isinstance(axis, dict):
        return list(axis.values()), [str(k) for k in axis]
    values = axis.values() if isinstance(axis, Range) else list(axis)
    return values, [None] * len(values)


class Screen(StrictModel):
    """The first pass: every candidate once, on the first examples."""

    examples: PositiveInt = Field(
        200, description="Examples each candidate is screened on (the first ones)."
    )
    keep: float = Field(
        0.25, gt=0, le=1, description="Share of the screened candidates confirmed on every example."
    )
    min_keep: PositiveInt = Field(
        2, description="Confirm at least this many (when that many were screened)."
    )
    chunk: PositiveInt = Field(
        4, description="Candidates screened per call (the minutes budget is checked between)."
    )


class Confirm(StrictModel):
    """The second pass: the kept candidates and the baseline on every example, with repeats."""

    repeat: int = Field(
        3,
        ge=2,
        le=100,
        description="Repeats of each confirmed candidate and of the baseline (2 or more: a winner "
        "needs an interval).",
    )
    interleave: Literal["auto", "restarts", "off"] = Field(
        "auto",
        description="How the repeats take turns, as a recipe's `interleave`: `restarts` restarts "
        "each engine every turn so the intervals are paired (an engine start per repeat); `auto` "
        "does so only for engines that start in seconds (vLLM's repeats then run back to back, "
        "compared unpaired).",
    )


class Budget(StrictModel):
    """How much the tune may spend."""

    cells: PositiveInt = Field(
        40,
        le=10_000,
        description="Most measured runs in all: the screens, and every repeat of the confirmation.",
    )
    minutes: float | None = Field(
        None,
        gt=0,
        description="Minutes for the screen and the confirmation: screening stops once the runs' "
        "measured total time plus the confirmation's projected time would pass it.",
    )


class TuneSpec(StrictModel):
    """What `runner tune` searches: the axes, the objective, the gate against the recipe as written,
    the budget.

    `axes` take any recipe field, as in `matrix:`; a candidate sets one value of each."""

    axes: dict[str, list[Any] | Range | dict[str, Any]] = Field(
        description="Dotted recipe key -> its values: a list, a range ({low, high, scale}), or "
        "label -> value (the labels name the values in the report, as a study's matrix)."
    )
    objective: Literal["generate_s", "throughput"] = Field(
        "generate_s",
        description="What to minimize: generation time (or maximize output tokens/s: "
        "`throughput`).",
    )
    gate: GateSpec | None = Field(
        None, description="The accuracy a candidate must keep against the baseline."
    )
    screen: Screen = Field(
        default_factory=Screen, description="The first pass, on a subset of the examples."
    )
    confirm: Confirm = Field(
        default_factory=Confirm, description="The second pass, on every example, with repeats."
    )
    budget: Budget = Field(default_factory=Budget, description="How much to spend.")
    start: str | None = Field(
        None,
        description="In a study file: the cell the candidates change (default: the study's "
        "`baseline` cell).",
    )
    compare: list[str] = Field(
        default_factory=list,
        description="In a study file: hand-written cells confirmed with the same repeats; the "
        "report sets the tune's best against the fastest of them.",
    )

    @field_validator("axes", mode="before")
    @classmethod
    # a mapping with a range's keys is a range, not labelled values
    def _ranges_first(cls, v: Any) -> Any:
        if isinstance(v, dict):
            return {
                k: Range.model_validate(x) if isinstance(x, dict) and "low" in x else x
                for k, x in v.items()
            }
        return v

    @field_validator("axes")
    @classmethod
    def _some_axes(cls, v: dict) -> dict:
        if not v:
            raise ValueError("name at least one axis (dotted recipe key -> values)")
        for key, values in v.items():
            if key in ("name", "tune", "matrix", "variants", "baseline") or key.startswith("tune."):
                raise ValueError(f"{key!r} cannot be an axis")
            if not (listed := _labelled(values)[0]):
                raise ValueError(f"axis {key!r} has no values")
            seen: set[str] = set()
            for x in listed:
                if (k := json.dumps(x, sort_keys=True, ensure_ascii=False)) in seen:
                    raise ValueError(
                        f"axis {key!r} lists {k} twice: each value is one candidate; remove the "
                        "repeat"
                    )
                seen.add(k)
        return v

    def candidates(self) -> list[tuple[dict[str, Any], dict[str, str]]]:
        """Each combination of one value per axis, in the order the axes and values are written,
        with its labelled values, key -> label (none for a value written in a list or range)."""
        combos = itertools.product(*(zip(*_labelled(v)) for v in self.axes.values()))
        return [
            (
                {k: v for k, (v, _) in zip(self.axes, combo)},
                {k: lab for k, (_, lab) in zip(self.axes, combo) if lab is not None},
            )
            for combo in combos
        ]

    def runs(self, screened: int, confirmed: int) -> int:
        """Measured runs: one screen each (the baseline's too), `confirm.repeat` for each confirmed,
        the baseline and each hand-written cell of `compare`."""
        return 1 + screened + (1 + confirmed + len(self.compare)) * self.confirm.repeat

    def confirmed(self, screened: int) -> int:
        """How many of `screened` go on to the confirmation: the `keep` share, at least `min_keep`
        (when there are)."""
        return max(min(self.screen.min_keep, screened), math.ceil(self.screen.keep * screened))

    def plan(self, n_candidates: int) -> tuple[int, int]:
        """(candidates screened, candidates confirmed) within `budget.cells` measured runs (repeats
        count)."""
        screened = n_candidates
        while screened > 0 and self.runs(screened, self.confirmed(screened)) > self.budget.cells:
            screened -= 1
        return screened, self.confirmed(screened)
