"""Hugging Face model files: the tokenizer (prompt -> token ids, shared by every engine so they see
identical ids) and config.json, read from a local folder, a builtin or the hub cache."""

from __future__ import annotations

import contextlib
import hashlib
import json
import marshal
import zlib
from pathlib import Path
from typing import Any

import runner.engines.gguf as gguf  # the module, not the package: tests patch its functions
from runner.base.errors import RunnerError
from runner.base.files import file_sha256, write_bytes_atomic
from runner.engines.builtin import cache_root, ensure_builtin, is_builtin


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


def encode_prompts(
    tokenizer: Any, messages: list[list[dict]], chat: bool
) -> tuple[list[str], list[list[int]]]:
    """Prompt texts and their token ids, in one batch encode (the fast tokenizer spreads it over
    the cores). With a chat template the template supplies every special token (no BOS added
    again); without one the tokenizer adds its usual specials."""
    if chat:
        texts = [
            tokenizer.apply_chat_template(m, add_generation_prompt=True, tokenize=False)
            for m in messages
        ]
    else:
        texts = [messages_to_text(m) for m in messages]
    if not texts:
        return [], []
    enc = tokenizer(texts, add_special_tokens=not chat)["input_ids"]
    return texts, [list(x) for x in enc]


def looks_local(ref: str) -> bool:
    return ref.startswith(("/", "./", "../", "~")) or ref.count("/") > 1


TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "tokenizer.model",
    "vocab.json",
    "spiece.model",
)
WEIGHT_FILES = ("*.safetensors", "*.bin", "*.pt", "*.pth")


def _not_a_hub_id(ref: str) -> str | None:
    """Why `ref` cannot be a hub id (huggingface_hub's own rule), or None."""
    try:
        from huggingface_hub.utils import validate_repo_id
    except ImportError:
        return None
    try:
        validate_repo_id(ref)
    except ValueError as e:
        return str(e).split(". ")[0]
    return None


def check_model_source(model: Any) -> None:
    """A model or tokenizer named by a local path must exist (else the hub client's error is
    cryptic), and the folder the tokenizer is read from must hold one (transformers makes an empty
    tokenizer of a folder without)."""
    if model.gguf_path is not None:
        gguf.check_file(model)
    hint = (
        "give a hub id (needs network) or an existing local folder; "
        "--model-path HUB_ID=PATH maps hub ids to folders"
    )
    for field, ref in (("model.id", model.id), ("model.tokenizer", model.tokenizer)):
        if not ref or ref.startswith("builtin:"):
            continue
        if looks_local(ref) and not Path(ref).expanduser().exists():
            raise RunnerError(f"model folder not found: {ref}", field=field, hint=hint)
        if looks_local(ref) and Path(ref).expanduser().is_file() and model.gguf_path is None:
            why = f"{ref} is a file, not a model: a model is a folder (config.json, weights, "
            raise RunnerError(why + "tokenizer) or a .gguf file", field=field, hint=hint)
        if not looks_local(ref) and (why := _not_a_hub_id(ref)):
            raise RunnerError(f"{ref!r} is not a hub id ({why})", field=field, hint=hint)
    ref = model.tokenizer_id
    folder = Path(ref).expanduser()
    if model.gguf_path is None and looks_local(ref) and folder.is_dir():
        if not any((folder / f).is_file() for f in TOKENIZER_FILES):
            field = "model.tokenizer" if model.tokenizer else "model.id"
            why = f"{ref} holds no tokenizer (none of {', '.join(TOKENIZER_FILES)})"
            hint = "set model.tokenizer to the folder (or hub id) of the model's tokenizer"
            raise RunnerError(why, field=field, hint=hint)


def check_model_files(model: Any) -> None:
    """A local model folder an engine loads weights from holds a config.json and weights (else the
    engine fails minutes later, after its start)."""
    folder = Path(model.id).expanduser()
    if model.gguf_path is not None or not looks_local(model.id) or not folder.is_dir():
        return
    if not (folder / "config.json").is_file():
        raise RunnerError(
            f"{model.id} holds no config.json: it is not a model folder", field="model.id"
        )
    if model.load_format != "dummy" and not any(next(folder.glob(p), None) for p in WEIGHT_FILES):
        why = f"{model.id} holds no weights (no {', '.join(WEIGHT_FILES)} files)"
        hint = (
            "point model.id at the folder with the weights, or set model.load_format: dummy "
            "for random weights"
        )
        raise RunnerError(why, field="model.id", hint=hint)


def hub_note(model: Any) -> str | None:
    """A model named by a hub id that is not in this machine's Hugging Face cache: running it
    downloads it, which needs network (None: local, builtin, cached, or huggingface_hub absent)."""
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
        f"model.id {ref!r} is a hub id that is not in this machine's Hugging Face cache: runner go "
        "downloads it (needs network); without network, pass a local copy with --model-path "
        f"{ref}=PATH"
    )


# a model spec's JSON -> its tokenizer, loaded by a job's process before its job came
_AHEAD: dict[str, Any] = {}


def load_tokenizer_ahead(model: Any) -> None:
    """Load the recipe's tokenizer now (a job's process, while the job before it runs), for the
    engine's `take_tokenizer` inside its start."""
    _AHEAD[model.model_dump_json()] = load_tokenizer(model)


def take_tokenizer(model: Any):
    """The recipe's tokenizer: the one loaded ahead for it (once: a later engine of this process
    loads its own), else `load_tokenizer(model)`."""
    ahead = _AHEAD.pop(model.model_dump_json(), None)
    return ahead if ahead is not None else load_tokenizer(model)


def load_tokenizer(model: Any, builtin_dir: str | None = None, local_only: bool = False):
    """The recipe's tokenizer: `model.tokenizer`, else the model's. `builtin_dir`: the folder an
    engine loads a builtin model's weights from (its tokenizer comes with them); without it, a
    builtin `model.tokenizer_id` is built (once) and read from its folder."""
    from transformers import AutoTokenizer

    if builtin_dir is None and is_builtin(model.tokenizer_id):
        builtin_dir = ensure_builtin(model.tokenizer_id)
    check_model_source(model)
    if builtin_dir is None and model.tokenizer is None and model.gguf_path is not None:
        # the file's own tokenizer and chat template, converted once
        builtin_dir = str(gguf.tokenizer_dir(model))
    return AutoTokenizer.from_pretrained(
        builtin_dir or model.tokenizer_id,
        local_files_only=local_only,
        revision=None if builtin_dir else model.revision,
        trust_remote_code=model.trust_remote_code,
    )


def tokenizer_folder(model: Any) -> Path | None:
    """Where the recipe's tokenizer files are on this machine: a builtin's folder, a GGUF file's
    converted tokenizer, a local folder, or the hub cache's snapshot (never the network); None when
    they are not here."""
    ref = model.tokenizer_id
    if is_builtin(ref):
        return Path(ensure_builtin(ref))
    if model.tokenizer is None and model.gguf_path is not None:
        return gguf.tokenizer_dir(model)
    if (path := Path(ref).expanduser()).is_dir():
        return path
    hit = _hub_cached(ref, "tokenizer.json", model.revision)
    return hit.parent if hit else None


def _hub_cached(ref: str, name: str, revision: str | None) -> Path | None:
    """A file of hub repo `ref` in this machine's Hugging Face cache (never the network); None: not
    there, no hub library, or not a repo id."""
    try:
        from huggingface_hub import try_to_load_from_cache

        hit = try_to_load_from_cache(ref, name, revision=revision)
    except Exception:  # no hub library, or not a repo id
        return None
    return Path(hit) if isinstance(hit, str) else None


# (tokenizer id, revision, GGUF file) -> the tokenizer check and plan count with
_COUNTING: dict[tuple, Any] = {}


def counting_tokenizer(model: Any) -> Any:
    """The tokenizer `runner check` and `runner plan` count prompt tokens with when their counts are
    not kept: the engines' (transformers' AutoTokenizer), from local files only, loaded once per
    process."""
    key = (model.tokenizer_id, model.revision, str(model.gguf_path))
    if key not in _COUNTING:
        check_model_source(model)
        try:
            _COUNTING[key] = load_tokenizer(model, local_only=True)
        except RunnerError:
            raise
        # transformers' "couldn't connect to huggingface.co" and kin: not here, and no network
        except Exception as e:
            field = "model.tokenizer" if model.tokenizer else "model.id"
            why = f"no tokenizer for {model.tokenizer_id} on this machine"
            # there, yet unreadable
            if looks_local(model.tokenizer_id) or tokenizer_folder(model) is not None:
                why += f" ({type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:160]})"
            else:
                why += (
                    ": a hub id that is not in the Hugging Face cache (read from local files only)"
                )
            hint = f"pass a local copy with --model-path {model.tokenizer_id}=PATH"
            if looks_local(model.tokenizer_id):
                hint = (
                    "point model.tokenizer (or model.id) at a folder with the model's "
                    "tokenizer files"
                )
            raise RunnerError(why, field=field, hint=hint) from None
    return _COUNTING[key]


COUNTS_FOLDER = "prompt-tokens"  # under $RUNNER_CACHE: token ids by input hash, for check and plan
_COUNTED: dict[str, tuple[bool, list[list[int]]]] = {}  # the same, in this process
_WEIGHTS = (".safetensors", ".bin", ".gguf", ".pt", ".pth", ".msgpack", ".h5")


def count_prompts(
    model: Any, messages: list[list[dict]], chat_template: bool | None
) -> tuple[bool, list[list[int]]]:
    """Whether the chat template is used, and each prompt's token ids as the engine gets them
    (transformers' AutoTokenizer and `encode_prompts`, as every engine encodes): what `check` and
    `plan` count. Kept by the hash of their inputs (the tokenizer's files, the transformers and
    tokenizers versions, the messages), in this process and in $RUNNER_CACHE, so a study's cells
    that share prompts, and every later `check` or `plan` of the same prompts, count without
    importing transformers (seconds) or encoding again."""
    return _counted(model, "prompts", chat_template, messages)


def count_texts(model: Any, texts: list[str]) -> list[list[int]]:
    """Token ids of plain texts (no special tokens), kept like `count_prompts`' (the plan's layout
    advice)."""
    return _counted(model, "texts", None, texts)[1]


def _counted(
    model: Any, kind: str, chat_template: bool | None, inputs: list
) -> tuple[bool, list[list[int]]]:
    folder = tokenizer_folder(model)
    key = None if folder is None else _count_key(folder, kind, chat_template, inputs)
    if key is not None and (hit := _COUNTED.get(key) or _read_counts(key)) is not None:
        _remember(key, hit)
        return hit
    tok = counting_tokenizer(model)
    if kind == "texts":
        got = (
            False,
            [list(x) for x in tok(inputs, add_special_tokens=False)["input_ids"]] if inputs else [],
        )
    else:
        chat = uses_chat_template(tok, chat_template)
        got = chat, encode_prompts(tok, inputs, chat)[1]
    if key is not None:
        _remember(key, got)
        with contextlib.suppress(OSError):  # a cache that cannot be written is skipped
            write_bytes_atomic(_counts_path(key), zlib.compress(marshal.dumps(got), 1))
    return got


def _remember(key: str, got: tuple[bool, list[list[int]]]) -> None:
    """Keep the newest few in memory (a study's distinct prompt lists; each can be tens of MB as
    Python lists)."""
    _COUNTED.pop(key, None)
    _COUNTED[key] = got
    while len(_COUNTED) > 8:
        _COUNTED.pop(next(iter(_COUNTED)))


def _count_key(folder: Path, kind: str, chat_template: bool | None, inputs: list) -> str:
    from importlib.metadata import PackageNotFoundError, version

    h = hashlib.sha256()
    for pkg in ("transformers", "tokenizers"):
        with contextlib.suppress(PackageNotFoundError):
            h.update(f"{pkg}={version(pkg)};".encode())
    # the tokenizer's files and config.json (transformers 5 picks its class by it)
    for f in sorted(folder.iterdir()):
        if f.is_file() and not f.name.endswith(_WEIGHTS):
            # a large file by its size and time (hashing it would cost more than counting)
            st = f.stat()
            big = st.st_size >= 64 << 20
            digest = f"{st.st_size}:{st.st_mtime_ns}" if big else file_sha256(f, 64)
            h.update(f"{f.name}\x00{digest};".encode())
    h.update(
        json.dumps([kind, chat_template, inputs], ensure_ascii=False).encode(
            "utf-8", "surrogatepass"
        )
    )
    return h.hexdigest()[:40]


def _counts_path(key: str) -> Path:
    return cache_root() / COUNTS_FOLDER / f"{key}.marshal"


def _read_counts(key: str) -> tuple[bool, list[list[int]]] | None:
    """zlib(marshal((chat, ids))); None when absent or damaged (then counted again)."""
    try:
        chat, ids = marshal.loads(zlib.decompress(_counts_path(key).read_bytes()))
    except (OSError, ValueError, EOFError, TypeError, zlib.error):
        return None
    return chat, ids


def truncate_at_stop(text: str, stop: list[str]) -> tuple[str, bool]:
    cut = min([len(text)] + [i for s in stop if (i := text.find(s)) != -1])
    return text[:cut], cut != len(text)


def model_config(m: Any, where: str | None = None) -> dict[str, Any]:
    """The model's config.json: a local folder, a builtin, the hub cache (never the network), or a
    GGUF file's metadata."""
    if m.gguf_path is not None:
        return gguf.config(m)
    folder = Path(ensure_builtin(m.id)) if is_builtin(m.id) else Path(m.id).expanduser()
    cfg = folder / "config.json"
    if not cfg.is_file():
        cfg = _hub_cached(m.id, "config.json", m.revision)
        if cfg is None:
            msg = (
                f"no config.json for {m.id} on this machine (plan reads the model's config, "
                "never the network)"
            )
            hint = f"pass a local copy with --model-path {m.id}=PATH"
            raise RunnerError(msg, file=where, field="model.id", hint=hint)
    return json.loads(cfg.read_text(encoding="utf-8"))
