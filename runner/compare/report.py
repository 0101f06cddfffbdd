"""compare.md, compare.json and compare.png of a Comparison, written to one folder (never OLD)."""

from __future__ import annotations

from pathlib import Path

from runner.base.errors import RunnerError
from runner.base.files import save_figure, write_json_atomic, write_text_atomic
from runner.base.format import secs, table
from runner.compare.compare import Comparison
from runner.report.plots import pyplot
from runner.report.spread import ONE_RUN

FILES = ("compare.md", "compare.json", "compare.png")
HEAD = ["recipe", "workload (old -> new)", "old time (95%)", "new time (95%)"]
HEAD += ["outputs changed", "0/1 metric now right / wrong (McNemar p)"]
HEAD += ["J per output token", "$ per M output tokens", "verdict"]


def markdown(c: Comparison) -> str:
    head = [f"# runner compare: {c.new} against {c.old}", "", f"- old: `{c.old}`"]
    head += [f"- new: `{c.new}`", f"- recipes matched {c.matched}"]
    head += ["- versions that differ: " + ("; ".join(c.differs) or "none")]
    only = (("old", c.only_old), ("new", c.only_new))
    head += [f"- only in {w}: {', '.join(n)}" for w, n in only if n]
    pair = lambda v: v and f"{v[0]:.3g} -> {v[1]:.3g}"
    t = lambda v: v and secs(v[0]) + (f" ({secs(v[1])}–{secs(v[2])})" if v[1] else f" ({ONE_RUN})")
    rows = [
        [
            p.name + (f" (old: {p.old_name})" if p.old_name != p.name else ""),
            "; ".join(f"{k} {v}" for k, v in p.settings.items()) or "same",
            t(p.old_s),
            t(p.new_s),
            f"{p.changed:,} of {p.paired:,}",
            "; ".join(
                f"{s.metric} {s.now_right} / {s.now_wrong} (p={s.mcnemar_p:.3g})"
                for s in p.scores
                if s.mcnemar_p is not None
            ),
            pair(p.j_per_output_token),
            pair(p.usd_per_m_output_tokens),
            f"{p.time}; {p.answers}",  # the time: NEW/OLD, or the speed-up where faster
        ]
        for p in c.recipes
    ]
    notes = ["", "## Method", "", *(f"- {m}" for m in c.method)]
    return "\n".join([*head, "", table(rows, HEAD, frozenset(HEAD[5:8])), *notes, ""])


def chart(c: Comparison, path: Path) -> bool:
    """Each recipe's NEW/OLD time with its 95% interval as a bar, a line at 1; False: no ratio."""
    ps = [p for p in c.recipes if p.ratio][::-1]
    if not ps:
        return False
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(ps) + 1.4))
    for y, p in enumerate(ps):
        err = p.low is not None and [[p.ratio - p.low], [p.high - p.ratio]]  # type: ignore[operator]
        red = p.time.startswith("clearly slower")
        color = "#d62728" if red else "#1f77b4"
        ax.errorbar(p.ratio, y, xerr=err or None, fmt="o", capsize=3, color=color)
        ax.text(p.ratio, y + 0.15, f" {p.ratio:.2f}×", fontsize=8)
    ax.axvline(1, color="gray", linewidth=1)
    ax.set_yticks(range(len(ps)), [p.name for p in ps], fontsize=8)
    ax.set_ylim(-0.7, len(ps) - 0.3)
    ax.set_xlabel("generation time NEW/OLD (95% interval; right of 1: slower; red: clearly slower)")
    ax.set_title(f"{c.new} against {c.old}", fontsize=10)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)
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
