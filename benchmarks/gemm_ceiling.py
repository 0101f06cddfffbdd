"""What the GPU's GEMMs reach at a model's linear-layer shapes: the realistic floor beside `runner plan`'s peak one.

`runner plan` divides a generation's FLOPs by the datasheet peak; the GEMM kernels reach only part of it. This
times torch's fp8 (`torch._scaled_mm`, e4m3, row-wise scales as vLLM's fp8 checkpoints use) and bf16 matmuls at
the linear layers of Qwen2.5-7B (hidden 3,584, intermediate 18,944, 28 query and 4 key/value heads of 128) for
M tokens per step, and prints each layer's TFLOP/s and the whole layer stack's rate (median of N timed rounds,
with the min-max across rounds).

    python benchmarks/gemm_ceiling.py [--tokens 8192 16384] [--rounds 5]
"""

import argparse
import statistics

import torch

SHAPES = {  # name: (K, N) of y = x @ W.T for Qwen2.5-7B
    "qkv": (3584, 3584 + 2 * 512),
    "o": (3584, 3584),
    "gate_up": (3584, 2 * 18944),
    "down": (18944, 3584),
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
    sa = torch.ones(m, 1, device="cuda", dtype=torch.float32)
    sb = torch.ones(1, n, device="cuda", dtype=torch.float32)
    return lambda: torch._scaled_mm(fa, fb, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[8192, 16384])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iters", type=int, default=50)
    args = parser.parse_args()
    print(f"GPU: {torch.cuda.get_device_name()}; torch {torch.__version__}")
    for dtype in ("fp8", "bf16"):
        for m in args.tokens:
            total_flops, per_round = 0, [0.0] * args.rounds
            for name, (k, n) in SHAPES.items():
                fn = layer_fns(m, k, n, dtype)
                secs = [timed(fn, args.iters) for _ in range(args.rounds)]
                flops = 2 * m * k * n
                total_flops += flops
                per_round = [p + s for p, s in zip(per_round, secs)]
                rates = sorted(flops / s / 1e12 for s in secs)
                print(f"{dtype} M={m} {name:8s} K={k} N={n}: {statistics.median(rates):,.0f} TFLOP/s "
                      f"({rates[0]:,.0f}-{rates[-1]:,.0f})")
            rates = sorted(total_flops / s / 1e12 for s in per_round)
            print(f"{dtype} M={m} all four layers: {statistics.median(rates):,.0f} TFLOP/s "
                  f"({rates[0]:,.0f}-{rates[-1]:,.0f}, {args.rounds} rounds)")


if __name__ == "__main__":
    main()
