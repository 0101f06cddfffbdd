"""Prompt -> token ids, shared by every engine so they see identical ids."""

from __future__ import annotations

from typing import Any


def messages_to_text(messages: list[dict]) -> str:
    """Plain-text prompt for tokenizers without (or recipes opting out of) a chat template."""
    parts = []
    for m in messages:
        parts.append(m["content"])
    return "\n".join(parts)


def uses_chat_template(tokenizer: Any, requested: bool | None) -> bool:
    has = bool(getattr(tokenizer, "chat_template", None))
    if requested is None:
        return has
    if requested and not has:
        raise ValueError("prompt.chat_template is true but the tokenizer has no chat template")
    return requested


def encode_prompts(tokenizer: Any, messages: list[list[dict]], chat: bool) -> tuple[list[str], list[list[int]]]:
    """Prompt texts and their token ids, in one batch encode (the fast tokenizer spreads it over
    the cores). With a chat template the template supplies every special token (no BOS added
    again); without one the tokenizer adds its usual specials."""
    if chat:
        texts = [tokenizer.apply_chat_template(m, add_generation_prompt=True, tokenize=False) for m in messages]
    else:
        texts = [messages_to_text(m) for m in messages]
    if not texts:
        return [], []
    enc = tokenizer(texts, add_special_tokens=not chat)["input_ids"]
    return texts, [list(x) for x in enc]


def looks_local(ref: str) -> bool:
    return ref.startswith(("/", "./", "../", "~")) or ref.count("/") > 1


def check_model_source(model: Any) -> None:
    """A model or tokenizer named by a local path must exist (else the hub client's error is cryptic)."""
    from pathlib import Path

    from runner.errors import RunnerError

    for field, ref in (("model.id", model.id), ("model.tokenizer", model.tokenizer)):
        if ref and not ref.startswith("builtin:") and looks_local(ref) and not Path(ref).expanduser().exists():
            raise RunnerError(
                f"model folder not found: {ref}",
                field=field,
                hint="give a hub id (needs network) or an existing local folder; "
                "--model-path HUB_ID=PATH maps hub ids to folders",
            )


def load_tokenizer(model: Any, builtin_dir: str | None = None, local_only: bool = False):
    """The recipe's tokenizer: `model.tokenizer`, else the model's. `builtin_dir`: the folder an engine
    loads a builtin model's weights from (its tokenizer comes with them); without it, a builtin
    `model.tokenizer_id` is built (once) and read from its folder."""
    from transformers import AutoTokenizer

    from runner.engines.builtin import ensure_builtin, is_builtin

    if builtin_dir is None and is_builtin(model.tokenizer_id):
        builtin_dir = ensure_builtin(model.tokenizer_id)
    check_model_source(model)
    source = builtin_dir or model.tokenizer_id
    return AutoTokenizer.from_pretrained(
        source,
        revision=None if builtin_dir else model.revision,
        trust_remote_code=model.trust_remote_code,
        local_files_only=local_only,
    )


def truncate_at_stop(text: str, stop: list[str]) -> tuple[str, bool]:
    cut = len(text)
    for s in stop:
        i = text.find(s)
        if i != -1:
            cut = min(cut, i)
    return text[:cut], cut != len(text)
