"""fastcomm's CUDA kernels against torch's way of doing the same job and against
the device's copy bandwidth (needs a CUDA device and fastcomm built with its
CUDA kernels; without them it says so and exits 0).

Each case runs --reps times after --warmup untimed runs, timed with CUDA events
around each run; the table gives the median time and the bytes the kernel must
move divided by that time (GB/s). "ratio" is torch's time / fastcomm's (> 1:
fastcomm faster). The cases:

  pack                 fastcomm's fused pack of a DDP-like bucket (many tensors of mixed
                       sizes) against torch.cat; then the same with odd-sized tensors
                       first (the segment copy must stay vectorised after them)
  fp16 / bf16 compress the fp16/bf16 hooks' scale-and-round pack against torch's
                       mul + to(dtype)
  int8, top-k, sign    the compression hooks' kernels (with error feedback) against
                       a plain copy of the gradient (the bandwidth reference) and, for
                       top-k, torch.topk's selection alone
  syncbn stats         SyncBatchNorm's per-channel sums (NCHW and channels-last) against
                       torch.batch_norm_stats
  syncbn normalize     the elementwise pass against torch.batch_norm_elemt

    python benchmarks/cuda_kernels.py                 # prints the table, writes the record
    python benchmarks/cuda_kernels.py --no-record --reps 50

The rows go to a JSON record (benchmarks/results/cuda_kernels.json unless
--record PATH or --no-record).
"""

from __future__ import annotations

import argparse
import statistics
import sys

import torch

import results_record


def _median_ms(fn, reps: int, warmup: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def _bucket(sizes, dtype=torch.float32):
    g = torch.Generator(device="cuda").manual_seed(0)
    return [torch.randn(n, device="cuda", generator=g).to(dtype) for n in sizes]


def cases():
    """name -> (fastcomm call, torch call or None, bytes moved)."""
    ops = torch.ops.fastcomm
    from fastcomm import _C

    n = 1 << 24  # 64 MiB of float32
    g = torch.randn(n, device="cuda")
    error, out = torch.zeros(n, device="cuda"), torch.empty(n, device="cuda")
    half = torch.empty(n, dtype=torch.float16, device="cuda")
    k = n // 100
    int8_gathered = ops.compress_int8_quantize(g, None, 256, False, 0).repeat(2, 1)
    sign_gathered = ops.compress_sign(g, None).repeat(2, 1)
    # A DDP-like bucket: 25 MiB in tensors of transformer-layer sizes, and the same with odd sizes first.
    bucket = _bucket([768 * 768, 768, 3072 * 768, 3072, 768 * 3072, 768] * 3)
    odd_bucket = _bucket([3, 5, 7]) + bucket
    bucket_bytes = sum(t.numel() for t in bucket) * 4
    odd_bytes = sum(t.numel() for t in odd_bucket) * 4
    table = {
        "copy 64 MiB (bandwidth reference)": (lambda: out.copy_(g), None, 8 * n),
        "pack bucket vs torch.cat": (lambda: _C.pack(bucket), lambda: torch.cat(bucket), 2 * bucket_bytes),
        "pack bucket after odd sizes vs torch.cat": (
            lambda: _C.pack(odd_bucket),
            lambda: torch.cat(odd_bucket),
            2 * odd_bytes,
        ),
        "fp16 compress vs mul + to": (
            lambda: ops.compress_multi_tensor_pack([g], half, 0.5, 65504.0 / 2),
            lambda: g.mul(0.5).to(torch.float16),
            6 * n,
        ),
        "bf16 compress vs mul + to": (
            lambda: ops.compress_multi_tensor_pack([g], half.view(torch.bfloat16), 0.5, float("inf")),
            lambda: g.mul(0.5).to(torch.bfloat16),
            6 * n,
        ),
        "int8 quantize + EF vs copy": (
            lambda: ops.compress_int8_quantize(g, error, 256, False, 0),
            lambda: out.copy_(g),
            13 * n,
        ),
        "int8 dequantize-sum (2 ranks) vs copy": (
            lambda: ops.compress_int8_dequantize_sum(int8_gathered, out, 256, 0.5),
            lambda: out.copy_(g),
            6 * n,
        ),
        "top-k 1% + EF vs torch.topk": (
            lambda: ops.compress_topk(g, error, k),
            lambda: torch.topk(g.abs(), k),
            12 * n,
        ),
        "sign + EF vs copy": (lambda: ops.compress_sign(g, error), lambda: out.copy_(g), 12 * n),
        "sign-sum (2 ranks) vs copy": (
            lambda: ops.compress_sign_sum(sign_gathered, out, 0.5),
            lambda: out.copy_(g),
            4 * n + n // 4,
        ),
    }
    # ResNet-like shapes, plus few channels on large planes (a channel's rows split over blocks)
    # and many channels on small planes (planes shorter than a block).
    shapes = [(32, 64, 56, 56), (32, 256, 56, 56), (16, 16, 112, 112), (256, 512, 7, 7)]
    for layout in ("NCHW", "channels-last"):
        for shape in shapes:
            channels = shape[1]
            x = torch.randn(*shape, device="cuda")
            if layout == "channels-last":
                x = x.contiguous(memory_format=torch.channels_last)
            mean, invstd = torch.zeros(channels, device="cuda"), torch.ones(channels, device="cuda")
            table[f"syncbn stats {layout} {tuple(shape)} vs batch_norm_stats"] = (
                lambda x=x: ops.syncbn_local_stats(x),
                lambda x=x: torch.batch_norm_stats(x, 1e-5),
                4 * x.numel(),
            )
            table[f"syncbn normalize {layout} {tuple(shape)} vs batch_norm_elemt"] = (
                lambda x=x, mean=mean, invstd=invstd: ops.syncbn_normalize(x, mean, invstd, None, None),
                lambda x=x, mean=mean, invstd=invstd: torch.batch_norm_elemt(x, None, None, mean, invstd, 1e-5),
                8 * x.numel(),
            )
    return table


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    results_record.add_arguments(p, "cuda_kernels")
    args = p.parse_args(argv)
    import fastcomm

    if not torch.cuda.is_available() or not fastcomm.cuda_kernels_compiled():
        print("cuda_kernels: skipped (needs a CUDA device and fastcomm built with its CUDA kernels)")
        return 0
    rows = []
    print(f"# {torch.cuda.get_device_name()}; median of {args.reps} runs, CUDA events")
    print(f"{'case':<52} {'fastcomm ms':>11} {'GB/s':>7} {'torch ms':>9} {'ratio':>6}")
    for name, (ours, theirs, nbytes) in cases().items():
        t_ours = _median_ms(ours, args.reps, args.warmup)
        t_theirs = _median_ms(theirs, args.reps, args.warmup) if theirs else None
        rows.append({"case": name, "fastcomm_ms": t_ours, "torch_ms": t_theirs, "bytes": nbytes})
        ratio = f"{t_theirs / t_ours:>6.2f}" if t_theirs else f"{'':>6}"
        theirs_text = f"{t_theirs:>9.3f}" if t_theirs else f"{'':>9}"
        print(f"{name:<52} {t_ours:>11.3f} {nbytes / t_ours / 1e6:>7.0f} {theirs_text} {ratio}", flush=True)
    results_record.save(args, "cuda_kernels", rows, script=__file__, argv=argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
