"""`model.id: builtin:demo`: a tiny random Qwen2-shaped model with a BPE tokenizer trained on the
embedded Japanese sample, built offline in a second. Smoke tests only: its answers are noise and its
scores mean nothing."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from runner.base.errors import RunnerError
from runner.base.files import file_sha256

BUILTIN_PREFIX = "builtin:"
BUILTINS = ("demo",)
SMOKE_NOTE = (
    "Smoke-test model (`builtin:demo`): a tiny randomly initialised Qwen2-shaped model "
    "built offline; its outputs are noise and its scores mean nothing."
)
CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] "
    "}}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
VERSION = "1"
MANIFEST = "runner-manifest.json"
CORPUS = Path(__file__).resolve().parent.parent / "demo" / "demo-ja.json"


def is_builtin(model_id: str) -> bool:
    return model_id.startswith(BUILTIN_PREFIX)


def _corpus_texts() -> list[str]:
    data = json.loads(CORPUS.read_text(encoding="utf-8"))
    texts = []
    for par in (par for art in data["data"] for par in art["paragraphs"]):
        texts += [par["context"], *(qa["question"] for qa in par["qas"])]
    return texts + [
        "Contextを参考にして、問題に回答してください。",
        "Question:",
        "Context:",
        "Output:",
    ]


def cache_root() -> Path:
    """Where the runner keeps what it builds once (builtin models, GGUF conversions):
    $RUNNER_CACHE."""
    return Path(os.environ.get("RUNNER_CACHE", Path.home() / ".cache" / "runner"))


def intact(folder: Path) -> bool:
    """Every file the build wrote is there with the bytes it wrote (a killed build or a damaged disk
    leaves a folder that would fail to load)."""
    try:
        files = json.loads((folder / MANIFEST).read_text())
        return bool(files) and all(file_sha256(folder / name, 64) == h for name, h in files.items())
    except (OSError, ValueError, AttributeError):
        return False


def ensure_builtin(model_id: str) -> str:
    """Build (once) and return the folder of a builtin model."""
    if model_id[len(BUILTIN_PREFIX) :] not in BUILTINS:
        allowed = ", ".join(BUILTIN_PREFIX + b for b in BUILTINS)
        raise ValueError(f"unknown builtin model {model_id!r}; allowed: {allowed}")
    digest = hashlib.sha256(CORPUS.read_bytes() + VERSION.encode()).hexdigest()[:12]
    return str(cached(cache_root() / f"builtin-demo-{digest}", _build))


def cached(out: Path, build: Callable[[Path], None]) -> Path:
    """`out`, built once: `build(folder)` writes into a temporary folder that is published as `out`
    whole (with a manifest of its files' hashes). A damaged entry (files changed or cut short, or a
    file in the cache where its folder belongs) is removed and built again, saying so on stderr."""
    if intact(out):
        return out
    root = cache_root()
    # what is damaged: a file where a folder of the entry belongs (below the cache root), or `out`
    up = (p for p in out.parents if root in p.parents and os.path.lexists(p) and not p.is_dir())
    if os.path.lexists(damaged := next(up, out)):
        print(f"note: cached build {damaged} is damaged: building it again", file=sys.stderr)
        try:
            if damaged.is_dir() and not damaged.is_symlink():
                shutil.rmtree(damaged)
            else:
                damaged.unlink()
        except OSError as e:
            msg = f"a cached build is damaged and cannot be removed ({e.strerror})"
            hint = "delete it; the runner builds it again"
            raise RunnerError(msg, file=str(damaged), hint=hint) from None
    tmp = out.with_name(f"{out.name}.tmp{os.getpid()}")  # a fresh folder beside `out`
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir(parents=True)
    except OSError as e:
        msg = f"cannot create cache folder {out.parent} ({e.strerror})"
        hint = f"RUNNER_CACHE (now {root}) must name a folder the runner can write"
        raise RunnerError(msg, hint=hint) from None
    try:
        build(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    # the manifest of what the build wrote, then one rename (a killed build leaves no half-written
    # `out`; where another process published first, its copy stays)
    files = {p.name: file_sha256(p, 64) for p in sorted(tmp.iterdir()) if p.is_file()}
    (tmp / MANIFEST).write_text(json.dumps(files, indent=1))
    try:
        tmp.rename(out)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _build(tmp: Path) -> None:
    """Train a byte-level BPE tokenizer on the embedded sample (ChatML specials and template),
    initialise the model and save both to `tmp`."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
    from transformers.utils import logging as tf_logging

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1200,
        show_progress=False,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(_corpus_texts(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    fast.chat_template = CHATML
    # a tiny Qwen2-shaped model for the tokenizer, its weights drawn from a fixed seed
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=len(fast),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        max_position_embeddings=2048,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=True,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        bos_token_id=fast.convert_tokens_to_ids("<|endoftext|>"),
    )
    model = Qwen2ForCausalLM(config)
    bars = tf_logging.is_progress_bar_enabled()
    # a bar for one small shard would lead `runner check`'s first output
    tf_logging.disable_progress_bar()
    try:
        model.save_pretrained(tmp)
    finally:
        if bars:
            tf_logging.enable_progress_bar()
    fast.save_pretrained(tmp)
