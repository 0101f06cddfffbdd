"""What the runner keeps of a GGUF file under $RUNNER_CACHE (issue 42): the converted tokenizer, a
damaged entry of which is built again (never a temporary path in a message), and the config that
check and plan read, parsed once per file. transformers is a stand-in here: no model needed."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from runner.base.errors import RunnerError
from runner.base.types import ModelSpec
from runner.engines import gguf

CFG = {"model_type": "llama", "max_position_embeddings": 64, "num_hidden_layers": 2}


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """A file with GGUF's magic, $RUNNER_CACHE in tmp_path, and a transformers whose tokenizer and
    config readers count their reads of the file; it does the GGUF packages' work, so they count
    as installed (the README's install has none)."""
    path = tmp_path / "m.gguf"
    path.write_bytes(b"GGUF" + bytes(60))
    monkeypatch.setenv("RUNNER_CACHE", str(tmp_path / "cache"))
    reads: list[str] = []

    def tokenizer(*a, **kw):
        reads.append("tokenizer")
        save = lambda d: (Path(d) / "tokenizer.json").write_text('{"v": 1}')
        return SimpleNamespace(save_pretrained=save)

    def config(*a, **kw):
        reads.append("config")
        return SimpleNamespace(to_json_string=lambda use_diff: json.dumps(CFG))

    monkeypatch.setitem(
        sys.modules,
        "transformers",
        SimpleNamespace(
            AutoTokenizer=SimpleNamespace(from_pretrained=tokenizer),
            AutoConfig=SimpleNamespace(from_pretrained=config),
        ),
    )
    real = gguf.importlib.util.find_spec
    monkeypatch.setattr(
        gguf.importlib.util,
        "find_spec",
        lambda name, *a: object() if name in gguf.PACKAGES else real(name, *a),
    )
    gguf._kept_text.cache_clear()
    yield SimpleNamespace(path=path, model=ModelSpec(id=str(path)), reads=reads)
    gguf._kept_text.cache_clear()


def test_a_damaged_tokenizer_entry_is_built_again_saying_so(fake, capsys):
    folder = gguf.tokenizer_dir(fake.model)
    assert gguf.tokenizer_dir(fake.model) == folder and fake.reads == ["tokenizer"]  # kept
    (folder / "tokenizer.json").write_text('{"v"')  # cut short
    assert gguf.tokenizer_dir(fake.model) == folder and fake.reads == ["tokenizer"] * 2
    assert capsys.readouterr().err == f"note: cached build {folder} is damaged: building it again\n"
    # the entry's folder replaced by a file (a copy cut short): the file goes, the entry is built
    entry = folder.parent
    for p in sorted(entry.rglob("*"), reverse=True):
        p.unlink() if p.is_file() else p.rmdir()
    entry.rmdir()
    entry.write_text("garbage")
    assert gguf.tokenizer_dir(fake.model) == folder and json.loads(
        (folder / "tokenizer.json").read_text()
    ) == {"v": 1}
    assert capsys.readouterr().err == f"note: cached build {entry} is damaged: building it again\n"
    # no temporary folder left (beside the file's hash, kept in CACHE)
    assert sorted(p.name for p in entry.parent.iterdir()) == sorted([entry.name, gguf.CACHE])


def test_a_cache_that_cannot_be_written_names_its_folder_not_a_temporary_one(fake, monkeypatch):
    root = fake.path.parent / "not-a-folder"
    root.write_text("")
    monkeypatch.setenv("RUNNER_CACHE", str(root))
    with pytest.raises(RunnerError) as e:
        gguf.tokenizer_dir(fake.model)
    folder = f"{root}/gguf-{gguf.sha256(fake.path)[:16]}-v{gguf.FORMAT}"
    assert e.value.render() == (
        f"cannot create cache folder {folder} (Not a directory)\n"
        f"  hint: RUNNER_CACHE (now {root}) must name a folder the runner can write"
    )
    assert root.read_text() == ""  # the user's file is left alone


def test_the_config_is_parsed_once_per_file_and_again_when_the_file_changes(fake):
    assert gguf.config(fake.model) == CFG and fake.reads == ["config"]
    assert gguf.config(fake.model) == CFG and fake.reads == ["config"]  # this process: kept
    gguf._kept_text.cache_clear()  # another process: from $RUNNER_CACHE
    assert gguf.config(fake.model) == CFG and fake.reads == ["config"]
    (kept,) = (Path(os.environ["RUNNER_CACHE"]) / gguf.CACHE).iterdir()
    kept.write_text("{")  # damaged: read from the file again
    gguf._kept_text.cache_clear()
    assert gguf.config(fake.model) == CFG and fake.reads == ["config"] * 2
    st = fake.path.stat()
    os.utime(fake.path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # rewritten: read again
    assert gguf.config(fake.model) == CFG and fake.reads == ["config"] * 3
    with fake.path.open("ab") as f:
        f.write(b"\0")
    assert gguf.config(fake.model) == CFG and fake.reads == ["config"] * 4


def test_a_second_check_of_a_gguf_recipe_does_not_parse_the_file(fake, write_recipe, base_recipe):
    """Issue 42: each `runner check` of a GGUF recipe parsed the file's metadata again (10-18 s on
    a 135M model's file)."""
    from runner.cli import cli

    d = {**base_recipe, "model": {"id": str(fake.path)}, "engine": {"kind": "fake"}}
    path = write_recipe(d)
    for _ in range(2):
        r = CliRunner().invoke(cli, ["check", str(path), "--no-tokens"])
        assert r.exit_code == 0 and f"ok {path}: t — fake, {fake.path}," in r.output, r.output
        gguf._kept_text.cache_clear()  # as a new process
    assert fake.reads.count("config") == 1


def test_the_file_facts_are_read_once_per_file_and_again_when_it_changes(fake, monkeypatch):
    """A run with the transformers engine hashed the whole file and parsed its tensors for the
    quantization every time (2 s for a 135M model's file, far more for a 7B's)."""
    reads: list[str] = []
    monkeypatch.setattr(gguf, "file_sha256", lambda p, d: reads.append("hash") or "ab")
    q = {"quantization": "Q4_1"}
    monkeypatch.setattr(gguf, "_quantization", lambda p: reads.append("parse") or q)
    want = {"file": str(fake.path), "sha256": "ab", "quantization": "Q4_1"}
    assert gguf.facts(fake.path) == want and reads == ["hash", "parse"]
    assert gguf.facts(fake.path) == want and gguf.sha256(fake.path) == "ab"  # this process: kept
    assert reads == ["hash", "parse"]
    gguf._kept_text.cache_clear()  # another process: from $RUNNER_CACHE
    assert gguf.facts(fake.path) == want and reads == ["hash", "parse"]
    for kept in (Path(os.environ["RUNNER_CACHE"]) / gguf.CACHE).iterdir():
        kept.write_text('{"sha')  # damaged: read from the file again, saying nothing
    gguf._kept_text.cache_clear()
    assert gguf.facts(fake.path) == want and reads == ["hash", "parse"] * 2
    gguf._kept_text.cache_clear()
    assert gguf.facts(fake.path) == want and reads == ["hash", "parse"] * 2  # rebuilt entries
    st = fake.path.stat()
    os.utime(fake.path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # rewritten: read again
    assert gguf.facts(fake.path) == want and reads == ["hash", "parse"] * 3
    with fake.path.open("ab") as f:
        f.write(b"\0")
    assert gguf.facts(fake.path) == want and reads == ["hash", "parse"] * 4


def test_a_file_replaced_by_a_copy_that_keeps_size_and_mtime_is_hashed_again(fake, monkeypatch):
    """`cp -p`, `rsync -t`, `tar` and `wget -N` keep the mtime: the copy's new inode (or ctime)
    still tells the kept SHA-256 from the file's (vLLM's converted copy is named by it)."""
    import shutil

    hashes: list[str] = []
    monkeypatch.setattr(gguf, "file_sha256", lambda p, d: hashes.append("hash") or "ab")
    gguf.sha256(fake.path)
    st = fake.path.stat()
    copy = fake.path.with_suffix(".new")
    shutil.copyfile(fake.path, copy)
    os.replace(copy, fake.path)
    os.utime(fake.path, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = fake.path.stat()
    assert (after.st_size, after.st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    gguf._kept_text.cache_clear()  # a new process
    gguf.sha256(fake.path)
    assert hashes == ["hash", "hash"]
