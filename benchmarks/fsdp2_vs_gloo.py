"""An FSDP2 training step on fastcomm against the same step on Gloo, side by side.

Two copies of one model (a stack of Linear+ReLU layers, each layer its own
FSDP2 unit, as fully_shard is used on transformer blocks) are sharded over
the fastcomm default group and over a Gloo group of the same ranks; their
steps (forward, backward, SGD) run in alternating rounds
(fastcomm/bench/harness.py) and the table gives the median step time of the
slowest rank and the ratio gloo / fastcomm (> 1: fastcomm faster). Both
copies start from the same weights; their weights are compared after one
step on the same batch, before timing (same math, different reduction order:
a tolerance, stated below).

    python benchmarks/fsdp2_vs_gloo.py                          # 2 local ranks
    python benchmarks/fsdp2_vs_gloo.py --arena                  # fastcomm's comm buffers from its arena
    python benchmarks/fsdp2_vs_gloo.py --nproc 4 --ranks-per-host 2
    torchrun --nnodes 2 --nproc-per-node 2 ... benchmarks/fsdp2_vs_gloo.py   # real hosts (benchmarks/multihost.py)

The result also goes to a JSON record (rank 0; benchmarks/results/fsdp2_vs_gloo.json
unless --record PATH or --no-record).
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn

import results_record
from fastcomm.bench.harness import add_round_arguments, alternating_rounds, spawn_ranks, timer_of


def _model(width: int, layers: int) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.ReLU()) for _ in range(layers)])


def _sharded(group: dist.ProcessGroup, width: int, layers: int, from_group: bool = False):
    """The model sharded over `group`; `from_group`: FSDP2 asks the group's backend
    for its all_gather / reduce_scatter buffers (fastcomm: its arena on one host)."""
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard

    mesh = DeviceMesh.from_group(group, "cpu")
    model = _model(width, layers)
    for layer in model:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    if from_group:
        for module in [*model, model]:  # per FSDP module: each has its own buffers
            module.set_allocate_memory_from_process_group_for_comm(True)
    return model, torch.optim.SGD(model.parameters(), lr=1e-3)


def _rank(rank: int, nproc: int, store, args) -> dict:
    import fastcomm  # noqa: F401  (registers the backend)

    torch.set_num_threads(1)
    timeout = datetime.timedelta(seconds=300)
    if store is None:
        dist.init_process_group("fastcomm", timeout=timeout)  # env:// from torchrun
    else:
        dist.init_process_group("fastcomm", store=store, rank=rank, world_size=nproc, timeout=timeout)
    rank, nproc = dist.get_rank(), dist.get_world_size()
    groups = {"fastcomm": dist.group.WORLD, "gloo": dist.new_group(backend="gloo")}
    control = dist.new_group(backend="gloo")
    models = {
        name: _sharded(group, args.width, args.layers, args.arena and name == "fastcomm")
        for name, group in groups.items()
    }
    generator = torch.Generator().manual_seed(rank)
    x = torch.randn(args.batch, args.width, generator=generator)

    def steps(name: str, iters: int) -> None:
        model, opt = models[name]
        for _ in range(iters):
            opt.zero_grad()
            model(x).square().mean().backward()
            opt.step()

    # One step each from the same weights: they must agree to float32 rounding
    # of differently ordered sums (relative 1e-4).
    worst = 0.0
    for name in models:
        steps(name, 1)
    for p, q in zip(models["fastcomm"][0].parameters(), models["gloo"][0].parameters()):
        a, b = p.full_tensor().detach(), q.full_tensor().detach()
        worst = max(worst, ((a - b).abs() / (b.abs() + 1e-3)).max().item())
    timers = {name: timer_of(lambda name=name: steps(name, 1)) for name in models}
    medians = alternating_rounds(
        timers, control, rounds=args.rounds, seconds=args.seconds, max_iters=args.max_iters, warmup_calls=args.warmup
    )
    params = sum(p.numel() for p in _model(args.width, args.layers).parameters())
    dist.barrier(group=control)
    models.clear()
    dist.destroy_process_group()
    return {
        "fastcomm_s": medians["fastcomm"],
        "gloo_s": medians["gloo"],
        "params": params,
        "nproc": nproc,
        "worst_relative_difference": worst,
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_round_arguments(p, seconds=4.0, max_iters=50, warmup=2, rounds=5)
    p.add_argument("--width", type=int, default=1024, help="features of each Linear layer")
    p.add_argument("--layers", type=int, default=8, help="Linear layers (FSDP units)")
    p.add_argument("--batch", type=int, default=32, help="samples per rank per step")
    p.add_argument(
        "--ranks-per-host",
        type=int,
        default=0,
        help="FASTCOMM_RANKS_PER_HOST: consecutive blocks of this many ranks act as hosts",
    )
    p.add_argument(
        "--arena",
        action="store_true",
        help="fastcomm's FSDP2 modules take their communication buffers from the group "
        "(set_allocate_memory_from_process_group_for_comm: its arena on one host)",
    )
    results_record.add_arguments(p, "fsdp2_vs_gloo")
    args = p.parse_args(argv)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # under torchrun
        result = _rank(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), None, args)
        if int(os.environ["RANK"]) != 0:
            return 0
    else:
        if args.ranks_per_host:
            os.environ["FASTCOMM_RANKS_PER_HOST"] = str(args.ranks_per_host)  # inherited by the spawned ranks
        result = spawn_ranks(_rank, args.nproc, args)
    mib = result["params"] * 4 / 2**20
    print(
        f"# FSDP2 step, {args.layers} x Linear({args.width}) ({mib:.0f} MiB of float32 parameters), "
        f"batch {args.batch} per rank, {result['nproc']} ranks{', fastcomm buffers from its arena' if args.arena else ''}; "
        f"median of {args.rounds} alternating rounds, slowest rank"
    )
    print(f"{'fastcomm ms':>12} {'gloo ms':>10} {'ratio':>7} {'max rel diff':>13}")
    print(
        f"{result['fastcomm_s'] * 1e3:>12.1f} {result['gloo_s'] * 1e3:>10.1f} "
        f"{result['gloo_s'] / result['fastcomm_s']:>7.2f} {result['worst_relative_difference']:>13.2e}"
    )
    results_record.save(args, "fsdp2_vs_gloo", [result], script=__file__, argv=argv)
    return 0 if result["worst_relative_difference"] <= 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
