"""The command group, the exit codes and the guard that turns errors into them (the only place they
become exit codes): 0 = every recipe succeeded, 1 = some recipe failed (or, with `--fail-on-gate`,
failed its quality gate; `compare`: a --fail-on condition met), 2 = bad input (nothing run),
130 = interrupted."""

from __future__ import annotations

import functools
import signal
import sys
import threading

import click

from runner.base import __version__
from runner.base.errors import RunnerError

EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 1, 2, 130


class UserError(click.ClickException):
    exit_code = EXIT_BAD_INPUT


def sigterm_as_ctrl_c(signum, frame):
    """SIGTERM handled as Ctrl-C. It also cancels an alarm: Ray's C++ core handles SIGTERM first
    (abseil's failure handler) and arms a 3-second SIGALRM that aborts the process (exit 134) if the
    shutdown takes longer."""
    signal.alarm(0)
    raise KeyboardInterrupt


def guard(fn):
    """Turn user errors into one-screen messages with exit code 2, and Ctrl-C or SIGTERM that arrive
    before a command handles them itself (while recipes and datasets load) into exit code 130."""

    @functools.wraps(fn)
    def wrapper(*a, **kw):
        main = threading.current_thread() is threading.main_thread()
        old = signal.signal(signal.SIGTERM, sigterm_as_ctrl_c) if main else None
        try:
            return fn(*a, **kw)
        except RunnerError as e:
            raise UserError(e.render()) from None
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(EXIT_INTERRUPTED)
        finally:
            if main:
                signal.signal(signal.SIGTERM, old or signal.SIG_DFL)  # None: not set from Python

    return wrapper


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="runner")
def cli():
    """Declarative experiment runner for LLM inference speed-ups.

    Write one YAML recipe per experiment (model, engine, dataset, prompt,
    sampling, metrics) or a study file that expands into many, then
    `runner go recipes/*.yaml`. Each recipe runs in its own process; reports
    go to reports/<name>/ and reports/summary.md (with summary.json). The
    recipe reference is docs/recipe-reference.md.

    Exit codes: 0 ok, 1 some recipe failed (with --fail-on-gate: or clearly
    failed its quality gate; compare: a --fail-on condition met), 2 bad input,
    130 interrupted.
    """


main = cli  # the console script (and `python -m runner`) calls it with no arguments
