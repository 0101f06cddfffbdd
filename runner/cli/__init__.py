"""The command line. The only place errors become exit codes:
0 = every recipe succeeded, 1 = some recipe failed, 2 = bad input (nothing run), 130 =
interrupted."""

from __future__ import annotations

from runner.cli import compare, go, inspect, tune  # noqa: E402, F401, I001  (registers the commands on `cli`)
from runner.cli.app import cli, main

__all__ = ["cli", "main"]
