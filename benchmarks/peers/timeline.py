"""How one job's all_reduce time moves over time: what spreads run.py's rounds.

    python benchmarks/peers/timeline.py --size 64K --samples 30000 --window 30,90

One fastcomm job (2 ranks by default, float32 SUM in place, the backend's
barrier and op looped in C++ as run.py's --api cpp) takes --samples samples of
one size without a break; the slowest rank's samples are cut into windows of
--window (run.py's samples per round; several sizes: the same samples cut
each way) and the window medians' range printed, with their autocorrelation
(a peak at lag k: the time repeats every k windows; the lag also in ms of
wall time), then the first window size's medians in order. The same
tensor throughout: what moves is the machine, not the tensor.
"""
import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from fastcomm.bench.cli import parse_size


def _rank(rank: int, args, tmp: str) -> None:
    import fastcomm

    torch.set_num_threads(1)
    dist.init_process_group("fastcomm", init_method=f"file://{tmp}/store", rank=rank, world_size=args.nproc,
                            timeout=datetime.timedelta(seconds=120))
    control = dist.new_group(backend="gloo")
    backend = dist.group.WORLD._get_backend(torch.device("cpu"))
    t = torch.full((max(1, args.size // 4),), float(rank + 1))
    dist.all_reduce(t)
    n = args.nproc
    assert bool((t == n * (n + 1) / 2).all()), "wrong all_reduce result"
    for _ in range(100):
        backend.allreduce([t]).wait()
    start = time.perf_counter()
    samples = torch.tensor(fastcomm._C.bench_samples(backend, "ALLREDUCE", t, t, args.samples), dtype=torch.float64)
    wall = time.perf_counter() - start  # barriers included: the windows' spacing in time
    dist.all_reduce(samples, op=dist.ReduceOp.MAX, group=control)  # each sample's slowest rank
    if rank == 0:
        with open(os.path.join(tmp, "samples.json"), "w") as f:
            json.dump({"samples": samples.tolist(), "wall": wall}, f)
    dist.destroy_process_group()


def _autocorrelation(values: list[float], lag: int) -> float:
    mean = statistics.fmean(values)
    total = sum((v - mean) ** 2 for v in values) or 1.0
    return sum((values[i] - mean) * (values[i + lag] - mean) for i in range(len(values) - lag)) / total


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", type=parse_size, default=64 << 10, help="bytes (K/M suffixes)")
    p.add_argument("--samples", type=int, default=30000)
    p.add_argument("--window", default="30", help="samples per window; several: comma-separated (same samples)")
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--show", type=int, default=200, help="window medians printed")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="fastcomm-timeline-") as tmp:
        mp.spawn(_rank, args=(args, tmp), nprocs=args.nproc)
        with open(os.path.join(tmp, "samples.json")) as f:
            result = json.load(f)
    samples, wall = result["samples"], result["wall"]
    windows = [int(w) for w in str(args.window).split(",")]
    print(f"# {args.size} B, {args.nproc} ranks, {len(samples)} samples in {wall:.2f} s")
    for w in windows:
        medians = [statistics.median(samples[i:i + w]) * 1e6 for i in range(0, len(samples) - w + 1, w)]
        window_ms = wall / len(samples) * w * 1e3
        print(f"# {len(medians)} windows of {w} samples (~{window_ms:.2f} ms each): medians {min(medians):.2f}-"
              f"{max(medians):.2f} us, max/min {max(medians) / min(medians):.3f}")
        lags = [(k, _autocorrelation(medians, k)) for k in range(1, min(100, len(medians) // 2))]
        peaks = [(k, a) for i, (k, a) in enumerate(lags[1:-1], 1) if a > lags[i - 1][1] and a >= lags[i + 1][1]]
        print("#   autocorrelation peaks (lag in windows, ~ms, value): " +
              ", ".join(f"{k} ({k * window_ms:.1f} ms) {a:.2f}" for k, a in peaks[:5]))
    w = windows[0]
    medians = [statistics.median(samples[i:i + w]) * 1e6 for i in range(0, len(samples) - w + 1, w)]
    print(" ".join(f"{m:.2f}" for m in medians[:args.show]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
