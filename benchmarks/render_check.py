"""Render report Markdown as GitHub does (GFM tables) and screenshot it in headless Chromium.

    python benchmarks/render_check.py reports/h200/summary.md [more.md ...] --out /tmp/shots

Needs markdown-it-py (pip) and Debian's chromium. Writes one PNG per file; look at them."""

from __future__ import annotations

import argparse
import subprocess
import tempfile
from pathlib import Path

CSS = """body{font-family:-apple-system,Segoe UI,Helvetica,Arial,'Noto Sans CJK JP',sans-serif;max-width:1012px;
margin:24px auto;font-size:14px;line-height:1.5;color:#1f2328}table{border-collapse:collapse;display:block;
overflow:auto;margin:12px 0}th,td{border:1px solid #d1d9e0;padding:6px 13px}th{font-weight:600}
tr:nth-child(2n){background:#f6f8fa}pre{background:#f6f8fa;padding:16px;overflow:auto;border-radius:6px}
code{font-size:85%}blockquote{border-left:.25em solid #d1d9e0;color:#59636e;margin:0;padding:0 1em}
img{max-width:100%}h1,h2{border-bottom:1px solid #d1d9e0;padding-bottom:.3em}"""
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--out", default=tempfile.mkdtemp())
    ap.add_argument("--height", type=int, default=2400)
    a = ap.parse_args()
    from markdown_it import MarkdownIt

    md = MarkdownIt("gfm-like", {"linkify": False}).disable("linkify")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    for f in map(Path, a.files):
        body = md.render(f.read_text(encoding="utf-8"))
        html = out / (f.parent.name + "-" + f.stem + ".html")
        html.write_text(
            f"<!doctype html><meta charset=utf-8><base href='{f.resolve().parent.as_uri()}/'>"
            f"<style>{CSS}</style><article>{body}</article>",
            encoding="utf-8",
        )
        png = html.with_suffix(".png")
        subprocess.run(
            [
                "chromium",
                *FLAGS,
                f"--user-data-dir={tempfile.mkdtemp()}",
                f"--window-size=1100,{a.height}",
                f"--screenshot={png}",
                html.as_uri(),
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
        print(png)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
