"""runner: a declarative experiment runner for LLM inference speed-ups."""

__version__ = "0.1.0"


def __getattr__(name):
    if name == "load_recipe":
        from runner.config.loading import load_recipe

        return load_recipe
    if name == "run_recipe":
        from runner.execution.run import run_recipe

        return run_recipe
    raise AttributeError(name)
