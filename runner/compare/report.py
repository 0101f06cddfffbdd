"""compare.md, compare.json and compare.png of a Comparison, written to one folder (never OLD)."""

from __future__ import annotations

from pathlib import Path

from runner.base.errors import RunnerError
from runner.base.files import write_json_atomic, write_text_atomic
from runner.base.format import secs, table
from runner.compare.compare import Comparison
from runner.report.plots import bar_rows, err_bars, save
from runner.report.spread import ONE_RUN

FILES = ("compare.md", "compare.json", "compare.png")
HEAD = [
    "recipe",
    "workload (old -> new)",
    "old time (95%)",
    "new time (95%)",
    "outputs changed",
    "0/1 metric now right / wrong (McNemar p)",
    "J per output token",
    "$ per M output tokens",
    "verdict",
]


def markdown(c: Comparison) -> str:
    only = (("old", c.only_old), ("new", c.only_new))
    head = [
        f"# runner compare: {c.new} against {c.old}",
        "",
        f"- old: `{c.old}`",
        f"- new: `{c.new}`",
        f"- recipes matched {c.matched}",
        "- versions that differ: " + ("; ".join(c.differs) or "none"),
        *(f"- only in {w}: {', '.join(n)}" for w, n in only if n),
        *(
            [f"- the same run on both sides (nothing measured anew): {', '.join(c.same_runs)}"]
            if c.same_runs
            else []
        ),
    ]
    pair = lambda v: v and f"{v.old:.3g} -> {v.new:.3g}"
    t = lambda v: v and secs(v.s) + (f" ({secs(v.lo)}–{secs(v.hi)})" if v.lo else f" ({ONE_RUN})")
    rows = [
        [
            p.name + (f" (old: {p.old_name})" if p.old_name != p.name else ""),
            "; ".join(f"{k} {v}" for k, v in p.settings.items()) or "same",
            t(p.old_time),
            t(p.new_time),
            f"{p.changed:,} of {p.paired:,}" if p.paired else "no samples",
            "; ".join(
                f"{s.metric} {s.now_right} / {s.now_wrong} (p={s.mcnemar_p:.3g})"
                for s in p.scores
                if s.mcnemar_p is not None
            ),
            pair(p.j_per_output_token),
            pair(p.usd_per_m_output_tokens),
            f"{p.time}; {p.answers}",
        ]
        for p in c.recipes
    ]
    asked = (
        f"- asked: {', '.join(c.gates)}" + ("" if c.failed else "; none failed")
        if c.gates
        else "- none asked (`--fail-on-slower`, `--fail-on-drop`): nothing here can fail a call"
    )
    gates = [asked, *(f"- failed {x}" for x in c.failed), *(f"- {x}" for x in c.cannot_fail)]
    notes = ["", "## Gates", "", *gates]
    notes += ["", "## Method", "", *(f"- {m}" for m in c.method)]
    return "\n".join([*head, "", table(rows, HEAD, frozenset(HEAD[5:8])), *notes, ""])


def chart(c: Comparison, path: Path) -> bool:
    """Each recipe's speed-up (OLD's time ÷ NEW's) with its 95% interval, a line at 1; False: no
    ratio."""
    if not (ps := [p for p in c.recipes if p.speedup]):
        return False
    fig, ax, rows = bar_rows(ps)
    for y, p in rows:
        s = p.speedup
        color = "#d62728" if s.verdict == "slower" else "#1f77b4"  # type: ignore[union-attr]
        err = err_bars(s.ratio, s.lo is not None and (s.lo, s.hi))  # type: ignore[union-attr, arg-type]
        ax.errorbar(s.ratio, y, xerr=err, fmt="o", capsize=3, color=color)  # type: ignore[union-attr]
        ax.text(s.ratio, y + 0.15, f" {s.ratio:.2f}×", fontsize=8)  # type: ignore[union-attr]
    ax.axvline(1, color="gray", linewidth=1)
    ax.set_ylim(-0.7, len(ps) - 0.3)
    ax.set_xlabel("speed-up: OLD time ÷ NEW time (95% interval; left of 1: slower, red: clearly)")
    ax.set_title(f"{c.new} against {c.old}", fontsize=10)
    save(fig, path)
    return True


def check_out(out: Path, old: Path) -> list[str]:
    """The compare files already in `out` (to be replaced); an `out` in OLD is refused."""
    if out.resolve() == old.resolve() or old.resolve() in out.resolve().parents:
        why = f"{out} is in OLD ({old}): compare never writes into the older runs"
        raise RunnerError(why, field="--out", hint="name another folder with --out")
    for p in (out, *(out / f for f in FILES)):
        if p.exists() and p.is_dir() != (p == out):
            raise RunnerError("is in the way", file=str(p), hint="remove it, or name another --out")
    return [f for f in FILES if (out / f).exists()]


def write(c: Comparison, out: Path) -> Path:
    """The three files (a compare.png left by an earlier compare removed where no ratio is left)."""
    out.mkdir(parents=True, exist_ok=True)
    md, js, png = (out / f for f in FILES)
    write_text_atomic(md, markdown(c))
    write_json_atomic(js, c.model_dump(mode="json"))
    if not chart(c, png):
        png.unlink(missing_ok=True)
    return md
