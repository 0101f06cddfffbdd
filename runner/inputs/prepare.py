"""Everything before the model, done once in the parent: examples, rendered messages, counts and
the hashes of the input files as read. The result is one frozen object handed as-is to the
recipe's process, so the run uses (and records) exactly what `runner go` checked."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from runner.config.recipe import LoadedRecipe
from runner.engines.base import Messages
from runner.inputs.datasets import Example, read_examples
from runner.inputs.prompts import PromptBuilder


@dataclass(frozen=True)
class Prepared:
    examples: tuple[Example, ...]
    messages: tuple[Messages, ...]
    n_dataset: int  # examples in the dataset
    n_target: int  # examples the run stands for (after limits; more than `examples` for an estimate)
    inputs: dict[str, str]  # input file -> sha256 (16 hex) of the bytes read


def _estimate_sample(examples: list[Example], n: int) -> list[Example]:
    # a random sample (fixed seed), in dataset order: the first N of a file grouped by article are
    # not representative of the rest
    keep = sorted(random.Random(0).sample(range(len(examples)), n))
    return [examples[i] for i in keep]


def prepare(lr: LoadedRecipe, limit: int | None = None, estimate: int | None = None) -> Prepared:
    """Examples and prompts, with the hashes of the bytes they were made from (what is recorded is
    what was read)."""
    r = lr.recipe
    base = Path(lr.base_dir)
    loaded = read_examples(r.dataset.model_copy(update={"limit": None}), base, lr.path)
    examples = list(loaded.examples)
    n_dataset = len(examples)
    if r.dataset.limit:
        examples = examples[: r.dataset.limit]
    if limit:
        examples = examples[:limit]
    n_target = len(examples)
    est = estimate or r.estimate
    if est and est < len(examples):
        examples = _estimate_sample(examples, est)
    builder = PromptBuilder(r.prompt, base, lr.path)
    messages = tuple(builder.render_all(examples))
    inputs = dict(builder.sources)
    if loaded.sha256:
        inputs[f"dataset:{r.dataset.path}"] = loaded.sha256
    return Prepared(examples=tuple(examples), messages=messages, n_dataset=n_dataset, n_target=n_target, inputs=inputs)
