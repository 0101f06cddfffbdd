"""runner: a declarative experiment runner for LLM inference speed-ups. The public API is
runner/api.py's: `runner.load_recipes`, `runner.load_recipe`, `runner.run_recipe`,
`runner.read_results`."""

from __future__ import annotations

from typing import Any

from runner.base import __version__

__all__ = ["__version__", "load_recipe", "load_recipes", "read_results", "run_recipe"]


# the API's module is imported at first use: `import runner` stays light
def __getattr__(name: str) -> Any:
    if name in __all__:
        from runner import api

        return getattr(api, name)
    raise AttributeError(f"module 'runner' has no attribute {name!r}")
