"""The options every command that loads recipes shares; the loading itself is runner/config/calls.py's."""

from __future__ import annotations

MP_HELP = (
    "Load a hub model from a local folder instead: HUB_ID=PATH (repeatable; applies to model.id and "
    "model.tokenizer of every recipe that names HUB_ID)."
)
SET_HELP = (
    "Override a recipe field, e.g. --set model.id=../shared/models/x (repeatable). A value for a text "
    "field is taken as written; other values are read as YAML (numbers, true/false, lists)."
)
ONLY_HELP = "only the recipes or study cells whose name matches (a name or glob; several separated by commas)."
