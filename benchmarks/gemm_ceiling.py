"""What the GPU's GEMMs reach at a model's linear layers: a realistic floor beside `runner plan`'s.

`runner plan` divides a generation's FLOPs by the datasheet's peak; the GEMM kernels reach only part
of it. This times torch's fp8 matmul (`torch._scaled_mm`, e4m3; row-wise or per-tensor scales) and
bf16's at the four linear layers of a decoder block (qkv, o, gate_up, down: Qwen2.5-7B's shapes, or
those of a model's config.json) for M tokens a step, and prints each layer's TFLOP/s and the four
together (median of the timed rounds, with their min-max).

    python benchmarks/gemm_ceiling.py [--config PATH/config.json] [--tokens 8192 16384] [--rounds 5]
"""

import argparse
import json
import statistics
from pathlib import Path

import torch

QWEN25_7B = {"hidden_size": 3584, "intermediate_size": 18944, "num_attention_heads": 28}
QWEN25_7B |= {"num_key_value_heads": 4}


def shapes(cfg: dict) -> dict[str, tuple[int, int]]:
    """(K, N) of y = x @ W.T for each linear layer of a block."""
    h, i = cfg["hidden_size"], cfg["intermediate_size"]
    d = cfg.get("head_dim") or h // cfg["num_attention_heads"]
    kv = cfg.get("num_key_value_heads", cfg["num_attention_heads"]) * d
    q = cfg["num_attention_heads"] * d
    return {
        "qkv": (h, q + 2 * kv),
        "o": (q, h),
        "gate_up": (h, 2 * i),
        "down": (i, h),
    }


def timed(fn, iters):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fn()
    torch.cuda.synchronize()
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1000 / iters


def layer_fns(m, k, n, dtype):
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    if dtype == "bf16":
        return lambda: a @ b.T
    fa, fb = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn).T
    rows = dtype == "fp8"  # a scale per token and per output channel; fp8-tensor: one each
    sa = torch.ones(m if rows else 1, 1, device="cuda", dtype=torch.float32)
    sb = torch.ones(1, n if rows else 1, device="cuda", dtype=torch.float32)
    return lambda: torch._scaled_mm(fa, fb, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", help="a model's config.json (default: Qwen2.5-7B's shapes)")
    parser.add_argument("--tokens", type=int, nargs="+", default=[8192, 16384])
    parser.add_argument(
        "--kinds",
        nargs="+",
        default=["fp8", "fp8-tensor", "bf16"],
        choices=["fp8", "fp8-tensor", "bf16"],
        help="fp8: row-wise scales (a scale per token and per output channel); fp8-tensor: one "
        "scale per matrix",
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iters", type=int, default=50)
    args = parser.parse_args()
    cfg = json.loads(Path(args.config).read_text()) if args.config else QWEN25_7B
    print(f"GPU: {torch.cuda.get_device_name()}; torch {torch.__version__}")
    for dtype in args.kinds:
        for m in args.tokens:
            total_flops, per_round = 0, [0.0] * args.rounds
            for name, (k, n) in shapes(cfg).items():
                fn = layer_fns(m, k, n, dtype)
                secs = [timed(fn, args.iters) for _ in range(args.rounds)]
                flops = 2 * m * k * n
                total_flops += flops
                per_round = [p + s for p, s in zip(per_round, secs)]
                rates = sorted(flops / s / 1e12 for s in secs)
                mid = statistics.median(rates)
                print(
                    f"{dtype} M={m} {name:8s} K={k} N={n}: {mid:,.0f} TFLOP/s "
                    f"({rates[0]:,.0f}-{rates[-1]:,.0f})"
                )
            rates = sorted(total_flops / s / 1e12 for s in per_round)
            print(
                f"{dtype} M={m} all four layers: {statistics.median(rates):,.0f} TFLOP/s "
                f"({rates[0]:,.0f}-{rates[-1]:,.0f}, {args.rounds} rounds)"
            )


if __name__ == "__main__":
    main()
