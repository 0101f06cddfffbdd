"""Hugging Face model files: the tokenizer (prompt -> token ids, shared by every engine so they see
identical ids) and config.json, read from a local folder, a builtin or the hub cache."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from runner.base.errors import RunnerError
from runner.engines import gguf
from runner.engines.builtin import ensure_builtin, is_builtin


def messages_to_text(messages: list[dict]) -> str:
    """Plain-text prompt for tokenizers without (or recipes opting out of) a chat template."""
    return "\n".join(m["content"] for m in messages)


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
    if model.gguf_path is not None:
        gguf.check_file(model)
    for field, ref in (("model.id", model.id), ("model.tokenizer", model.tokenizer)):
        if ref and not ref.startswith("builtin:") and looks_local(ref) and not Path(ref).expanduser().exists():
            hint = "give a hub id (needs network) or an existing local folder; "
            hint += "--model-path HUB_ID=PATH maps hub ids to folders"
            raise RunnerError(f"model folder not found: {ref}", field=field, hint=hint)


def hub_note(model: Any) -> str | None:
    """A model named by a hub id that is not in this machine's Hugging Face cache: running it downloads it, which
    needs network (None: local, builtin, cached, or huggingface_hub absent)."""
    ref = model.id
    if ref.startswith("builtin:") or looks_local(ref) or model.gguf_path is not None:
        return None
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    if isinstance(try_to_load_from_cache(ref, "config.json", revision=model.revision), str):
        return None
    return (
        f"model.id {ref!r} is a hub id that is not in this machine's Hugging Face cache: runner go downloads it "
        f"(needs network); without network, pass a local copy with --model-path {ref}=PATH"
    )


def load_tokenizer(model: Any, builtin_dir: str | None = None, local_only: bool = False):
    """The recipe's tokenizer: `model.tokenizer`, else the model's. `builtin_dir`: the folder an engine
    loads a builtin model's weights from (its tokenizer comes with them); without it, a builtin
    `model.tokenizer_id` is built (once) and read from its folder."""
    from transformers import AutoTokenizer

    if builtin_dir is None and is_builtin(model.tokenizer_id):
        builtin_dir = ensure_builtin(model.tokenizer_id)
    check_model_source(model)
    if builtin_dir is None and model.tokenizer is None and model.gguf_path is not None:
        builtin_dir = str(gguf.tokenizer_dir(model))  # the file's own tokenizer and chat template, converted once
    kw = dict(revision=None if builtin_dir else model.revision, trust_remote_code=model.trust_remote_code)
    return AutoTokenizer.from_pretrained(builtin_dir or model.tokenizer_id, local_files_only=local_only, **kw)


def truncate_at_stop(text: str, stop: list[str]) -> tuple[str, bool]:
    cut = min([len(text)] + [i for s in stop if (i := text.find(s)) != -1])
    return text[:cut], cut != len(text)


def model_config(m: Any, where: str | None = None) -> dict[str, Any]:
    """The model's config.json: a local folder, a builtin, the hub cache (never the network), or a GGUF file's
    metadata."""
    if m.gguf_path is not None:
        return gguf.config(m)
    folder = Path(ensure_builtin(m.id)) if is_builtin(m.id) else Path(m.id).expanduser()
    cfg = folder / "config.json"
    if not cfg.is_file():
        try:
            from huggingface_hub import try_to_load_from_cache

            hit = try_to_load_from_cache(m.id, "config.json", revision=m.revision)
        except Exception:  # no hub library, or not a repo id
            hit = None
        if not isinstance(hit, str):
            msg = f"no config.json for {m.id} on this machine (plan reads the model's config, never the network)"
            hint = "pass the model folder with --model-path HUB_ID=PATH"
            raise RunnerError(msg, file=where, field="model.id", hint=hint)
        cfg = Path(hit)
    return json.loads(cfg.read_text(encoding="utf-8"))
