"""fastcomm's compression kernels alone (one process, no communication): GB/s
of memory traffic each moves, against the machine's own copy bandwidth
measured in the same run (torch's copy_ of a float32 buffer of the same size),
and against the torch ops that do the same job in torch's own hooks.

Bytes counted per kernel: what it must read and write at least (gradient in,
error feedback in and out, payload out; for the decompress-and-sum kernels the
gathered payloads of --ranks ranks in and the bucket out).

    python benchmarks/compression_kernels.py                  # 1 thread, 4 Mi and 32 Mi elements
    python benchmarks/compression_kernels.py --threads 2 --sizes 1048576
"""
import argparse
import statistics
import sys
import time

import torch

import fastcomm  # noqa: F401  (loads the operators)

ops = torch.ops.fastcomm


def _median_seconds(fn, seconds: float, rounds: int = 5) -> float:
    fn()
    start = time.perf_counter()
    fn()
    once = max(time.perf_counter() - start, 1e-6)
    iters = max(1, int(seconds / rounds / once))
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(iters):
            fn()
        samples.append((time.perf_counter() - start) / iters)
    return statistics.median(samples)


def cases(n: int, ranks: int):
    """(name, fn, bytes moved, torch equivalent or None)."""
    g = torch.randn(n)
    error = torch.zeros(n)
    half = torch.empty(n, dtype=torch.float16)
    out = torch.empty(n)
    k = max(1, n // 20)
    int8_payload = ops.compress_int8_quantize(g, None, 256, False, 0)
    int8_gathered = int8_payload.repeat(ranks, 1)
    topk_gathered = ops.compress_topk(g, None, k).repeat(ranks, 1)
    sign_gathered = ops.compress_sign(g, None).repeat(ranks, 1)
    scale = 1.0 / ranks

    def torch_fp16_compress():  # fp16_compress_hook: divide the bucket in place, then convert
        g.div_(1.0)  # the same pass as div_(world_size), without shrinking g run after run
        return g.to(torch.float16)

    def torch_fp16_decompress():
        out.copy_(half)

    return [
        ("fp16 compress (pack, scale, limit)", lambda: ops.compress_multi_tensor_pack([g], half, scale, 65504.0 / ranks),
         6 * n, torch_fp16_compress),
        ("fp16 decompress (unpack)", lambda: ops.compress_multi_tensor_unpack(half, [out], 1.0), 6 * n,
         torch_fp16_decompress),
        ("bf16 compress", lambda: ops.compress_multi_tensor_pack([g], half.view(torch.bfloat16), scale, float("inf")),
         6 * n, lambda: g.mul(scale).to(torch.bfloat16)),
        ("int8 quantize + EF", lambda: ops.compress_int8_quantize(g, error, 256, False, 0), 13 * n, None),
        ("int8 quantize, stochastic", lambda: ops.compress_int8_quantize(g, None, 256, True, 1), 5 * n, None),
        (f"int8 dequantize-sum x{ranks}", lambda: ops.compress_int8_dequantize_sum(int8_gathered, out, 256, scale),
         (ranks + 4) * n, None),
        ("topk 5% + EF", lambda: ops.compress_topk(g, error, k), 12 * n, lambda: torch.topk(g.abs(), k)),
        (f"topk-sum x{ranks}", lambda: ops.compress_topk_sum(topk_gathered, out, scale), 4 * n + 8 * k * ranks, None),
        ("sign + EF", lambda: ops.compress_sign(g, error), 12 * n, None),
        (f"sign-sum x{ranks}", lambda: ops.compress_sign_sum(sign_gathered, out, scale), 4 * n + ranks * n // 8, None),
    ], (lambda: out.copy_(g)), 8 * n


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[1 << 22, 1 << 25], help="float32 elements")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--ranks", type=int, default=2, help="payloads summed by the *-sum kernels")
    p.add_argument("--seconds", type=float, default=1.0, help="per kernel")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"# compression kernels, {args.threads} thread(s); GB/s = bytes moved / median time;"
          " copy = torch copy_ of the float32 buffer (the memory bandwidth reference)")
    for n in args.sizes:
        kernels, copy, copy_bytes = cases(n, args.ranks)
        copy_gbs = copy_bytes / _median_seconds(copy, args.seconds) / 1e9
        print(f"\n## {n} elements ({4 * n / 2**20:.0f} MiB float32); copy {copy_gbs:.1f} GB/s")
        print(f"{'kernel':<36} {'ms':>8} {'GB/s':>7} {'of copy':>8} {'torch ms':>9} {'speedup':>8}")
        for name, fn, moved, torch_fn in kernels:
            t = _median_seconds(fn, args.seconds)
            line = f"{name:<36} {t * 1e3:>8.3f} {moved / t / 1e9:>7.1f} {moved / t / 1e9 / copy_gbs:>7.0%}"
            if torch_fn is not None:
                tt = _median_seconds(torch_fn, args.seconds)
                line += f" {tt * 1e3:>9.3f} {tt / t:>8.2f}"
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
