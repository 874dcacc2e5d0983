"""fastcomm.nn.SyncBatchNorm against torch's SyncBatchNorm algorithm on CPU,
side by side in the same processes and the same run.

The peer (benchmarks/torch_syncbn_algorithm.py) is torch.nn.SyncBatchNorm's
autograd function with its GPU-only kernels written as torch CPU ops: forward
all_gather of [mean, invstd, count], backward all_reduce of [sum_dy, sum_dy_xmu].
Both run in one process group (default: a fastcomm group; --backend gloo for a
gloo one), one training step = forward + backward of one layer. For every
layer the two are timed in alternating rounds (so machine noise hits both
alike); the table gives medians (slowest rank), the ratio torch / fastcomm
(> 1: fastcomm faster), the collectives each called per step (counted by the
fastcomm group's sequence number), and "comm us", the time of two bare all_reduces of the
packed statistics in the same group: the floor that communication sets. The
"local" columns time the same steps with the collectives left out (each rank's
own statistics): the kernels alone, free of the transport's noise.

    python benchmarks/syncbn_vs_torch.py                 # 2 ranks, float32, the default layers
    python benchmarks/syncbn_vs_torch.py --dtype bfloat16 --nproc 3

The rows also go to a JSON record (benchmarks/results/syncbn_vs_torch.json
unless --record PATH or --no-record).
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import results_record  # noqa: E402
from fastcomm.bench.harness import add_round_arguments, alternating_rounds, measured, spawn_ranks, timer_of  # noqa: E402

# name: (per-rank input shape, channels_last)
LAYERS = {
    "bn2d 4x32x8x8": ((4, 32, 8, 8), False),
    "bn1d 256x1024": ((256, 1024), False),
    "bn2d 8x64x56x56": ((8, 64, 56, 56), False),
    "bn2d 16x128x28x28": ((16, 128, 28, 28), False),
    "bn2d 16x128x28x28 cl": ((16, 128, 28, 28), True),
    "bn2d 32x256x14x14": ((32, 256, 14, 14), False),
    "bn2d 32x512x7x7": ((32, 512, 7, 7), False),
}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def _collectives() -> int:
    """Collectives called on the default fastcomm group (its sequence number counts each call once)."""
    import fastcomm

    return fastcomm.fastcomm_backend()._get_sequence_number_for_group()


def _rank(rank: int, nproc: int, store, args) -> list[tuple]:
    import fastcomm
    from fastcomm.nn._syncbn_function import SyncBatchNormFunction
    from torch_syncbn_algorithm import TorchAlgorithmSyncBatchNorm

    torch.set_num_threads(args.threads)
    dist.init_process_group(
        args.backend, store=store, rank=rank, world_size=nproc, timeout=datetime.timedelta(seconds=300)
    )
    control = dist.new_group(backend="gloo")  # timing agreement apart from the group under test
    dtype = DTYPES[args.dtype]
    rows = []
    for name in args.layers:
        shape, channels_last = LAYERS[name]
        channels = shape[1]
        g = torch.Generator().manual_seed(rank)
        fmt = torch.channels_last if channels_last else torch.contiguous_format
        x = (torch.randn(*shape, generator=g) * 2 + 1).to(dtype).contiguous(memory_format=fmt).requires_grad_()
        dy = torch.randn(*shape, generator=g).to(dtype).contiguous(memory_format=fmt)
        fc_local = fastcomm.nn.SyncBatchNorm(channels)
        layers = {
            "fastcomm": fastcomm.nn.SyncBatchNorm(channels),
            "torch": TorchAlgorithmSyncBatchNorm(channels),
            "fastcomm local": lambda x: SyncBatchNormFunction.apply(  # noqa: E731  (no group: no collective)
                x, fc_local.weight, fc_local.bias, fc_local.running_mean, fc_local.running_var, 1e-5, 0.1, None
            ),
            "torch local": TorchAlgorithmSyncBatchNorm(channels, communicate=False),
        }

        def step(layer):
            x.grad = None
            y = layer(x)
            y.backward(dy)
            return y

        # the peer is faithful: same outputs and input gradients
        y_fc, dx_fc = step(layers["fastcomm"]).detach(), x.grad.clone()
        y_t, dx_t = step(layers["torch"]).detach(), x.grad.clone()
        tol = 1e-4 if dtype == torch.float32 else 5e-2
        torch.testing.assert_close(y_fc, y_t, rtol=tol, atol=tol)
        torch.testing.assert_close(dx_fc, dx_t, rtol=tol, atol=tol)

        counts = {}
        if args.backend == "fastcomm":
            for impl in ("fastcomm", "torch"):
                layer = layers[impl]
                before = _collectives()
                step(layer)
                counts[impl] = _collectives() - before
        packed = torch.zeros(2 * channels + 1, dtype=torch.float64)
        comm = lambda: (dist.all_reduce(packed), dist.all_reduce(packed[1:]))  # noqa: E731
        fns = {impl: (lambda layer=layer: step(layer)) for impl, layer in layers.items()}
        fns["comm"] = comm
        medians = alternating_rounds(
            {impl: timer_of(fn) for impl, fn in fns.items()},
            control,
            rounds=args.rounds,
            seconds=args.seconds,
            max_iters=args.max_iters,
            warmup_calls=args.warmup,
        )
        order = ("fastcomm", "torch", "comm", "fastcomm local", "torch local")
        rows.append((name, *(medians[impl] for impl in order), counts.get("fastcomm", -1), counts.get("torch", -1)))
        measured(rank, name)
    dist.destroy_process_group()
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_round_arguments(p, seconds=1.0, max_iters=500, warmup=2)
    p.add_argument("--backend", choices=["fastcomm", "gloo"], default="fastcomm")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    p.add_argument(
        "--layers",
        nargs="+",
        choices=sorted(LAYERS),
        default=list(LAYERS),
        metavar="LAYER",
        help="layers to run (default: all): " + ", ".join(f"'{n}'" for n in LAYERS),
    )
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    results_record.add_arguments(p, "syncbn_vs_torch")
    args = p.parse_args(argv)
    if args.nproc < 2 or args.threads < 1 or args.rounds < 1:
        p.error("need --nproc >= 2, --threads >= 1, --rounds >= 1")
    rows = spawn_ranks(_rank, args.nproc, args)
    print(
        f"# SyncBatchNorm forward+backward, {args.dtype}, {args.nproc} ranks x {args.threads} thread(s), {args.backend} group;"
        f" median of {args.rounds} alternating rounds, slowest rank"
    )
    print(
        "# ratio = torch-algorithm time / fastcomm time (> 1: fastcomm faster); coll = collectives per layer per step"
    )
    print(
        f"{'layer (per rank)':<22} {'fastcomm us':>11} {'torch us':>9} {'ratio':>6} {'comm us':>8}"
        f" {'fc local':>9} {'torch local':>11} {'ratio':>6} {'fc coll':>7} {'torch coll':>10}"
    )
    for name, *times, c_fc, c_torch in rows:
        t_fc, t_torch, t_comm, l_fc, l_torch = (float(t) * 1e6 for t in times)
        coll = lambda c: "-" if int(float(c)) < 0 else str(int(float(c)))  # noqa: E731
        print(
            f"{name:<22} {t_fc:>11.1f} {t_torch:>9.1f} {t_torch / t_fc:>6.2f} {t_comm:>8.1f}"
            f" {l_fc:>9.1f} {l_torch:>11.1f} {l_torch / l_fc:>6.2f} {coll(c_fc):>7} {coll(c_torch):>10}"
        )
    fields = ("layer", "fastcomm_s", "torch_s", "comm_s", "fastcomm_local_s", "torch_local_s")
    results_record.save(
        args,
        "syncbn_vs_torch",
        [
            {
                **dict(zip(fields, row)),  # collectives per step: counted on fastcomm groups only
                "fastcomm_collectives": int(row[6]) if int(row[6]) >= 0 else None,
                "torch_collectives": int(row[7]) if int(row[7]) >= 0 else None,
            }
            for row in rows
        ],
        script=__file__,
        argv=argv,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
