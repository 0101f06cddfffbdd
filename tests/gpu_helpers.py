"""A tiny Qwen2-shaped model folder (Qwen2.5 tokenizer, 2 layers) for fast GPU tests."""

import json
import os
import shutil
from pathlib import Path

SHARED = Path(os.environ.get("SHARED", Path(__file__).resolve().parents[2] / "shared"))
QWEN = SHARED / "models" / "qwen2.5-7b-instruct"


GPU_SHAPE = {
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 4096,
}


def tiny_qwen(dst: Path, qwen: Path = QWEN, **shape) -> Path:
    """A copy of the Qwen2.5 folder (tokenizer, chat template) with a small config: `shape`
    (default GPU_SHAPE) replaces the config's sizes."""
    dst.mkdir(parents=True, exist_ok=True)
    for f in qwen.iterdir():
        if f.name != "config.json":
            shutil.copy(f, dst / f.name)
    cfg = json.loads((qwen / "config.json").read_text())
    cfg.update(shape or GPU_SHAPE)
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


def recipe_yaml(
    model_dir: Path, name: str, extra_engine: str = "", limit: int = 20, timeout: str = ""
) -> str:
    demo = Path(__file__).resolve().parents[1] / "runner" / "demo" / "demo-ja.json"
    return f"""name: {name}
model: {{id: {model_dir}, load_format: dummy, dtype: bfloat16}}
engine:
  kind: vllm
  enforce_eager: true
  gpu_memory_utilization: 0.3
  max_model_len: 2048
{extra_engine}
dataset: {{format: squad, path: {demo}, limit: {limit}}}
prompt: {{template: jsquad.j2, system_template: jsquad-system.j2}}
sampling: {{max_tokens: 8, ignore_eos: true}}
{timeout}
"""
