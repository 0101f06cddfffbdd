"""How good is the projection? Project 200 examples from 20, then measure all 200 (CPU, tiny model).

    python benchmarks/estimate_check.py [--measure 200] [--project-from 20]

Uses the builtin smoke-test model, one prompt at a time, on JSQuAD questions from ../shared
(or the embedded sample, repeated, when ../shared is absent). Prints the projection, its 95%
interval, the measured time and the error."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--measure", type=int, default=200)
    ap.add_argument("--project-from", type=int, default=20)
    a = ap.parse_args()
    from click.testing import CliRunner

    from runner.cli import cli

    jsquad = ROOT.parent / "shared" / "data" / "jsquad" / "valid-v1.3.json"
    out = Path(tempfile.mkdtemp())
    recipe = out / "estimate-check.yaml"
    recipe.write_text(f"""name: estimate-check
model: {{id: "builtin:demo"}}
engine: {{kind: transformers, device: cpu, batch_size: 1}}
dataset: {{format: squad, path: {jsquad}, limit: {a.measure}}}
prompt: {{template: jsquad.j2, system_template: jsquad-system.j2}}
sampling: {{max_tokens: 16, ignore_eos: true}}
""")
    r1 = CliRunner().invoke(
        cli,
        [
            "go",
            str(recipe),
            "--out",
            str(out / "est"),
            "--estimate",
            str(a.project_from),
            "--no-progress",
            "--in-process",
        ],
    )
    r2 = CliRunner().invoke(
        cli, ["go", str(recipe), "--out", str(out / "full"), "--no-progress", "--in-process"]
    )
    assert r1.exit_code == 0 and r2.exit_code == 0, r1.output + r2.output
    est = json.loads((out / "est" / "estimate-check" / "results.json").read_text())["estimate"]
    full = json.loads((out / "full" / "estimate-check" / "results.json").read_text())
    measured = full["timings"]["generate_s"]
    err = (est["projected_s"] - measured) / measured
    inside = est["low_s"] <= measured <= est["high_s"]
    print(
        f"projected from {est['n_measured']}: {est['projected_s']:.2f} s "
        f"(95% interval {est['low_s']:.2f} - {est['high_s']:.2f} s)"
    )
    print(f"measured over {full['n_samples']}: {measured:.2f} s")
    print(f"error: {err:+.1%}; measured time inside the interval: {'yes' if inside else 'no'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
