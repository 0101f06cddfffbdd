"""Everything before the model, done once in the parent: examples, rendered messages, counts and
the hashes of the input files as read. The result is one frozen object handed as-is to the
recipe's process, so the run uses (and records) exactly what `runner go` checked."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from runner.base.errors import DatasetError
from runner.base.types import Example, Messages
from runner.inputs.datasets import read_examples
from runner.inputs.prompts import PromptBuilder
from runner.recipe import LoadedRecipe


@dataclass(frozen=True)
class Prepared:
    examples: tuple[Example, ...]
    messages: tuple[Messages, ...]
    n_dataset: int  # examples in the dataset
    # examples the run stands for (after limits; more than `examples` for an estimate)
    n_target: int
    inputs: dict[str, str]  # input file -> sha256 (16 hex) of the bytes read


def prepare(lr: LoadedRecipe, limit: int | None = None, estimate: int | None = None) -> Prepared:
    """Examples and prompts, with the hashes of the bytes they were made from (what is recorded is
    what was read)."""
    r = lr.recipe
    base = Path(lr.base_dir)
    # the smaller limit: without shuffle, only that many rows are parsed
    cap = min(filter(None, (r.dataset.limit, limit)), default=None)
    loaded = read_examples(r.dataset.model_copy(update={"limit": cap}), base, lr.path)
    examples = list(loaded.examples)
    n_target, est = len(examples), estimate or r.estimate
    if est and est < len(examples):
        # a random sample (fixed seed), in dataset order: the first N of a file grouped by article
        # are not representative of the rest
        examples = [examples[i] for i in sorted(random.Random(0).sample(range(len(examples)), est))]
    builder = PromptBuilder(r.prompt, base, lr.path)
    _shots_not_from_the_evaluated_set(lr, loaded.sha256, builder.sources)
    inputs = builder.sources
    if loaded.sha256:
        inputs[f"dataset:{r.dataset.path}"] = loaded.sha256
    messages = tuple(builder.render_all(examples))
    return Prepared(tuple(examples), messages, loaded.total, n_target, inputs)


def _shots_not_from_the_evaluated_set(
    lr: LoadedRecipe, dataset_sha: str | None, sources: dict[str, str]
) -> None:
    """Shots drawn from the very file being evaluated would put evaluated examples, answers
    included, into every prompt: refused (the same bytes under any path; a hub dataset: the same
    name, config and split)."""
    r = lr.recipe
    shots, src = r.prompt.shots, r.prompt.shots.source
    if not shots.k or src is None:
        return
    same = dataset_sha is not None and sources.get(f"shots:{src.path}") == dataset_sha
    if r.dataset.format == "hub" and src.format == "hub":
        same = all(getattr(r.dataset, k) == getattr(src, k) for k in ("path", "name", "split"))
    if same:
        raise DatasetError(
            f"prompt.shots.source is the evaluated dataset itself ({src.path}): its {shots.k} "
            "drawn shots would be evaluated examples, with their answers in every prompt",
            file=lr.path,
            field="prompt.shots.source",
            hint="draw the shots from another split (e.g. a train file), or write them under "
            "prompt.shots.examples",
        )
