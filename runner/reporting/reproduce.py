"""report.md's closing sections: what it takes to run the recipe again (environment, inputs, command)
and the resolved recipe."""

from __future__ import annotations

import yaml

from runner.reporting.format import table
from runner.reporting.results import RunResult

REPRO_KEYS = ("runner", "git_commit", "python", "platform", "gpu", "driver", "cuda_driver", "gpu_memory_gib")


def reproducibility(r: RunResult) -> list[str]:
    """Everything needed to run this again and get comparable numbers."""
    env = r.environment
    rows = [["recipe hash", f"`{r.recipe_hash}`"], ["run key", f"`{r.run_key}`" if r.run_key else None]]
    rows += [[k, f"`{v}`"] for k, v in env.get("inputs", {}).items()]
    rows += [[k.replace("_", " "), env.get(k)] for k in REPRO_KEYS]
    rows += [[k, v] for k, v in env.get("packages", {}).items()]
    extra = env.get("engine_extra", {})
    if extra.get("model_runner"):
        rows.append(["vLLM model runner", extra["model_runner"]])
    if extra.get("env"):
        rows.append(["engine environment", ", ".join(f"{k}={v}" for k, v in extra["env"].items())])
    if extra.get("warmup"):
        rows.append(["engine warm-up", extra["warmup"]])
    rows.append(["started / finished", f"{r.started_at} / {r.finished_at}"])
    out = ["", "## Reproduce", "", table(rows, ["", "value"]), ""]
    if r.command:
        out += ["Command (from the directory it was run in):", "", "```bash", r.command, "```"]
    out += [
        "",
        "## Resolved recipe",
        "",
        "```yaml",
        yaml.safe_dump(r.recipe, sort_keys=False, allow_unicode=True).rstrip(),
        "```",
        "",
    ]
    return out
