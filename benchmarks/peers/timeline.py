"""How one job's all_reduce time moves over time: what spreads run.py's rounds.

    python benchmarks/peers/timeline.py --size 64K --samples 30000 --window 30,90

One fastcomm job of run.py's (torch_worker.py: 2 ranks by default, float32 SUM
in place, the backend's barrier and op looped in C++, --api cpp, each sample's
slowest rank) takes --samples samples of one size without a break; they are
cut into windows of --window (run.py's samples per round; several sizes: the
same samples cut each way) and the window medians' range printed, with their
autocorrelation (a peak at lag k: the time repeats every k windows; the lag
also in ms of wall time), then the first window size's medians in order. The
same tensor throughout: what moves is the machine, not the tensor.
"""

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run  # noqa: E402  (its _run: one worker job, its samples, the others' CPU share)
from fastcomm.bench.cli import parse_size  # noqa: E402


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
    command = [
        sys.executable,
        os.path.join(run.HERE, "torch_worker.py"),
        "--backend",
        "fastcomm",
        "--api",
        "cpp",
        "--nproc",
        str(args.nproc),
        "--sizes",
        str(args.size),
        "--iters",
        str(args.samples),
        "--warmup",
        "100",
        "--settle",
        "0.5",
    ]
    result, others = run._run(command, timeout=600)
    key = str(max(4, args.size // 4 * 4))
    samples, wall = result[key], result["loop_seconds"][key]
    windows = [int(w) for w in str(args.window).split(",")]
    print(
        f"# {args.size} B, {args.nproc} ranks, {len(samples)} samples in {wall:.2f} s; "
        f"other processes used {others:.0%} of the machine"
    )
    medians_of = {}
    for w in windows:
        medians = medians_of[w] = [
            statistics.median(samples[i : i + w]) * 1e6 for i in range(0, len(samples) - w + 1, w)
        ]
        window_ms = wall / len(samples) * w * 1e3
        print(
            f"# {len(medians)} windows of {w} samples (~{window_ms:.2f} ms each): medians {min(medians):.2f}-"
            f"{max(medians):.2f} us, max/min {max(medians) / min(medians):.3f}"
        )
        lags = [(k, _autocorrelation(medians, k)) for k in range(1, min(100, len(medians) // 2))]
        peaks = [(k, a) for i, (k, a) in enumerate(lags[1:-1], 1) if a > lags[i - 1][1] and a >= lags[i + 1][1]]
        print(
            "#   autocorrelation peaks (lag in windows, ~ms, value): "
            + ", ".join(f"{k} ({k * window_ms:.1f} ms) {a:.2f}" for k, a in peaks[:5])
        )
    print(" ".join(f"{m:.2f}" for m in medians_of[windows[0]][: args.show]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
