"""GGUF model files (`model.id: x.gguf`, or a folder plus `model.gguf_file`).

transformers reads them itself (`gguf_file=`), dequantizing the weights on load. vLLM 0.26 has no
GGUF loader, so it gets a safetensors copy, converted once into the runner's cache ($RUNNER_CACHE)
under the file's SHA-256 and reused; the tokenizer (with the file's chat template) is converted once
the same way, so every engine and `runner plan` encode prompts with the very same tokenizer files.
Needs the `gguf` and `accelerate` packages (`pip install 'runner[gguf]'`)."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import struct
import time
from collections import Counter
from collections.abc import Callable, Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

from runner.base.errors import RunnerError
from runner.base.files import file_sha256, write_bytes_atomic
from runner.base.types import ModelSpec
from runner.engines.builtin import cache_root, cached

PACKAGES = ("gguf", "accelerate")
INSTALL = "pip install 'runner[gguf]'  (the gguf and accelerate packages)"
FORMAT = "1"  # bump when what a conversion writes changes
# under $RUNNER_CACHE: what is read from GGUF files (config, SHA-256, quantization), by path, size
# and mtime
CACHE = "gguf-config"


def check_file(model: ModelSpec) -> Path:
    """The model's GGUF file, which must exist."""
    path, field = model.gguf_path, "model.gguf_file" if model.gguf_file else "model.id"
    assert path is not None
    if not path.is_file():
        hint = (
            "fetch or make the file first (a shipped recipe's comments say how), or point at one "
            "with --set model.id=PATH (a relative path starts with ./ or ../, from the folder "
            "you run in; in the recipe file, from its folder)"
        )
        raise RunnerError(f"GGUF file not found: {path}", field=field, hint=hint)
    with open(path, "rb") as f:
        if f.read(4) != b"GGUF":
            why = f"{path} is not a GGUF file (it does not begin with GGUF's magic bytes)"
            hint = "point at a .gguf model file; a download that stopped early: download it again"
            raise RunnerError(why, field=field, hint=hint)
    return path


@contextlib.contextmanager
def _reading(path: Path) -> Iterator[None]:
    """transformers reading the file: a file cut short (struct.error) or one it cannot read becomes
    a RunnerError naming the file, not a traceback."""
    try:
        yield
    except (struct.error, EOFError, ValueError, KeyError, IndexError) as e:
        first = str(e).splitlines()[0] if str(e) else ""
        hint = "a download that stopped early leaves a damaged file: download it again"
        raise RunnerError(
            f"cannot read GGUF file {path} ({type(e).__name__}: {first[:300]})",
            field="model.id",
            hint=hint,
        ) from None


def readable(model: ModelSpec) -> Path:
    """The model's GGUF file, which must exist, with the packages that read it installed
    (else exit 2 with the install line)."""
    path = check_file(model)
    if missing := [p for p in PACKAGES if importlib.util.find_spec(p) is None]:
        msg = (
            f"a GGUF model needs the Python package{'s' * (len(missing) > 1)} "
            f"{', '.join(missing)}, not installed"
        )
        raise RunnerError(msg, field="model.id", hint=INSTALL)
    return path


def _hash(path: Path) -> dict[str, str]:
    return {"sha256": file_sha256(path, 64)}


def _quantization(path: Path) -> dict[str, str]:
    """The file's quantization as llama.cpp names it (`Q4_1`): the type most of its weight matrices
    have."""
    from gguf import GGUFReader

    kinds = Counter(t.tensor_type.name for t in GGUFReader(str(path)).tensors if len(t.shape) > 1)
    return {"quantization": kinds.most_common(1)[0][0] if kinds else "unknown"}


def sha256(path: Path) -> str:
    """The file's whole SHA-256, hashed once per file (see `_kept`)."""
    return _kept(path, _hash, "sha256")["sha256"]


def facts(path: Path) -> dict[str, Any]:
    """What a report says of a GGUF file: its path, SHA-256 and quantization (each read once)."""
    return {"file": str(path), "sha256": sha256(path)} | _kept(path, _quantization, "quantization")


def _folder(path: Path) -> Path:
    return cache_root() / f"gguf-{sha256(path)[:16]}-v{FORMAT}"


def tokenizer_dir(model: ModelSpec) -> Path:
    """The file's tokenizer and chat template as a tokenizer folder (converted once)."""
    path = readable(model)

    def build(tmp: Path) -> None:
        from transformers import AutoTokenizer

        with _reading(path):
            tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        tok.save_pretrained(tmp)

    return cached(_folder(path) / "tokenizer", build)


def safetensors_dir(model: ModelSpec) -> tuple[Path, dict[str, Any]]:
    """A float32 safetensors copy of the file's dequantized weights with its config and tokenizer
    (converted once, reused), and what to report about it: file, sha256, quantization, copy, seconds
    spent getting it, and whether this call did the conversion (`converted`)."""
    path = readable(model)
    t0, built = time.perf_counter(), []

    def build(tmp: Path) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        with _reading(path):
            loaded = AutoModelForCausalLM.from_pretrained(
                str(path.parent), gguf_file=path.name, dtype=torch.float32
            )
        # saved as plain weights: no GGUF quantizer, no quantization_config
        loaded.hf_quantizer = None
        if hasattr(loaded.config, "quantization_config"):
            del loaded.config.quantization_config
        loaded.save_pretrained(tmp)
        AutoTokenizer.from_pretrained(str(tokenizer_dir(model))).save_pretrained(tmp)
        built.append(tmp)

    folder = cached(_folder(path) / "safetensors", build)
    done = {
        "copy": str(folder),
        "converted": bool(built),
        "convert_s": round(time.perf_counter() - t0, 3),
    }
    return folder, facts(path) | done


def config(model: ModelSpec) -> dict[str, Any]:
    """The model's config (shapes, context length) as transformers reads it from the GGUF file's
    metadata: parsed once per file (seconds: the metadata holds the whole vocabulary)."""
    from importlib.metadata import version

    return _kept(readable(model), _read_config, version("transformers"))


def _kept(path: Path, read: Callable[[Path], dict], *key: str) -> dict[str, Any]:
    """`read(path)`, done once per file: kept by the file's path, size, mtime, inode and ctime
    (a copy that keeps the mtime still gets a new inode or ctime; and `key`), in this process and in
    $RUNNER_CACHE; a damaged entry there is read from the file again."""
    path = path.resolve()
    st = path.stat()
    stat = (st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)
    return json.loads(_kept_text(str(path), stat, read, key))


@lru_cache(maxsize=48)
def _kept_text(path: str, stat: tuple[int, ...], read: Callable, key: tuple[str, ...]) -> str:
    name = "\0".join(map(str, (path, *stat, *key, FORMAT)))
    kept = cache_root() / CACHE / f"{hashlib.sha256(name.encode()).hexdigest()[:40]}.json"
    with contextlib.suppress(OSError, ValueError):  # absent or damaged: read from the file
        if isinstance(json.loads(text := kept.read_text(encoding="utf-8")), dict):
            return text
    text = json.dumps(read(Path(path)))
    with contextlib.suppress(OSError):  # a cache that cannot be written is skipped
        write_bytes_atomic(kept, text.encode())
    return text


def _read_config(path: Path) -> dict[str, Any]:
    from transformers import AutoConfig

    with _reading(path):
        cfg = AutoConfig.from_pretrained(str(path.parent), gguf_file=path.name)
    return json.loads(cfg.to_json_string(use_diff=False))


def note(facts: dict[str, Any], engine: str) -> str:
    """One line for the report: where the weights the engine ran came from."""
    name = Path(facts["file"]).name
    if engine == "vllm":
        done = (
            f"converted in this run, {facts['convert_s']:.1f} s"
            if facts["converted"]
            else "converted before"
        )
        return (
            f"Weights dequantized from {facts['quantization']} ({name}) into a float32 safetensors "
            f"copy ({done}: {facts['copy']}); vLLM has no GGUF loader."
        )
    return (
        f"Weights dequantized from {facts['quantization']} ({name}) by transformers' GGUF loader."
    )


def vllm_model(model: ModelSpec) -> tuple[ModelSpec, dict[str, Any] | None]:
    """The model as vLLM is to load it: for a GGUF file, its safetensors copy (with the copy's
    tokenizer unless the recipe names one) and the conversion's facts; any other model as it is, and
    None."""
    if model.gguf_path is None:
        return model, None
    folder, facts = safetensors_dir(model)
    update = {"id": str(folder), "gguf_file": None, "tokenizer": model.tokenizer or str(folder)}
    return model.model_copy(update=update), facts
