"""Facts about where a run happened (read without importing torch or vLLM)."""

from __future__ import annotations

import importlib.metadata as md
import platform
import subprocess
import sys
from pathlib import Path

from runner import __version__
from runner.execution.gpumem import device_facts

RUNNER_PACKAGES = ("datasets", "pydantic", "jinja2", "tabulate")


def package_versions() -> dict[str, str]:
    out = {}
    from runner.engines import engine_packages

    for p in (*engine_packages(), *RUNNER_PACKAGES):
        try:
            out[p] = md.version(p)
        except md.PackageNotFoundError:
            pass
    return out


def git_commit() -> str | None:
    root = Path(__file__).resolve().parents[2]
    try:
        r = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5
        )
        if r.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
        return r.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def collect() -> dict:
    env = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "runner": __version__,
        "git_commit": git_commit(),
        "packages": package_versions(),
    }
    env.update(device_facts())
    return env
