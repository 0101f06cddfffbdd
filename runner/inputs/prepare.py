"""Everything before the model, done once in the parent: examples, rendered messages, counts and
the hashes of the input files as read. The result is one frozen object handed as-is to the
recipe's process, so the run uses (and records) exactly what `runner go` checked."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from runner.base.types import Example, Messages
from runner.inputs.datasets import read_examples
from runner.inputs.prompts import PromptBuilder
from runner.recipe import LoadedRecipe


@dataclass(frozen=True)
class Prepared:
    examples: tuple[Example, ...]
    messages: tuple[Messages, ...]
    n_dataset: int  # examples in the dataset
    n_target: int  # examples the run stands for (after limits; more than `examples` for an estimate)
    inputs: dict[str, str]  # input file -> sha256 (16 hex) of the bytes read


def prepare(lr: LoadedRecipe, limit: int | None = None, estimate: int | None = None) -> Prepared:
    """Examples and prompts, with the hashes of the bytes they were made from (what is recorded is what was read)."""
    r = lr.recipe
    base = Path(lr.base_dir)
    loaded = read_examples(r.dataset.model_copy(update={"limit": None}), base, lr.path)
    examples = list(loaded.examples)[: r.dataset.limit or None][: limit or None]
    n_target, est = len(examples), estimate or r.estimate
    if est and est < len(examples):
        # a random sample (fixed seed), in dataset order: the first N of a file grouped by article are
        # not representative of the rest
        examples = [examples[i] for i in sorted(random.Random(0).sample(range(len(examples)), est))]
    builder = PromptBuilder(r.prompt, base, lr.path)
    messages = tuple(builder.render_all(examples))
    inputs = dict(builder.sources)
    if loaded.sha256:
        inputs[f"dataset:{r.dataset.path}"] = loaded.sha256
    return Prepared(tuple(examples), messages, n_dataset=len(loaded.examples), n_target=n_target, inputs=inputs)
