"""The exact output of a CLI call that refused bad input, with the paths that differ between
machines written as placeholders: `{tmp}` for a test's temporary folder, `{project}` for this
checkout, `{shared}` for ../shared."""

from __future__ import annotations

import re
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
SHARED = PROJECT.parent / "shared"
# a test's tmp_path, as the output shows it
TMP = re.compile(r"(?:/[^/\s]+)*/pytest-of-[^/]+/pytest-\d+/[^/\s:]+")


def normalized(text: str) -> str:
    return (
        TMP.sub("{tmp}", text).replace(str(SHARED), "{shared}").replace(str(PROJECT), "{project}")
    )


def user_error(result) -> str:
    """Exit code 2 from a refusal (click's SystemExit, not a crash), no traceback; the output,
    normalized."""
    out = result.output
    assert result.exit_code == 2, (
        f"exit {result.exit_code}, output:\n{out}\nexception: {result.exception!r}"
    )
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in out
    return normalized(out)
