"""`python -m runner` and the `runner` console script: the CLI, and Ctrl-C while it loads (before a
command handles it) ended as in a command: "interrupted", exit code 130, no traceback."""

import sys


def main() -> None:
    try:
        from runner.cli import main as cli
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        raise SystemExit(130) from None
    cli()


if __name__ == "__main__":
    main()
