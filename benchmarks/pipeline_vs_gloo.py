"""Pipeline parallelism (torch.distributed.pipelining, 1F1B) on fastcomm and on
Gloo, side by side in the same processes and the same run.

Every rank holds one stage of an MLP (`--layers-per-stage` Linear+ReLU layers
of `--width`); a step pushes `--microbatches` microbatches of `--rows` rows
through Schedule1F1B (forward, backward, loss on the last stage). The default
group is fastcomm, a second group over the same ranks is Gloo; both pipelines
are built from the same modules and timed in alternating rounds
(fastcomm/bench/harness.py). Each activation and its gradient are a
rows x width float32 message between neighbouring stages.

    python benchmarks/pipeline_vs_gloo.py                        # 2 stages, width 256 and 1024
    python benchmarks/pipeline_vs_gloo.py --nproc 4 --widths 256,1024,2048

The rows also go to a JSON record (benchmarks/results/pipeline_vs_gloo.json
unless --record PATH or --no-record).
"""

from __future__ import annotations

import argparse
import datetime

import torch
import torch.distributed as dist

import results_record
from fastcomm.bench.harness import add_round_arguments, alternating_rounds, measured, spawn_ranks, timer_of


def _stage(width: int, layers: int, seed: int) -> torch.nn.Sequential:
    torch.manual_seed(seed)
    return torch.nn.Sequential(*[m for _ in range(layers) for m in (torch.nn.Linear(width, width), torch.nn.ReLU())])


def _rank(rank: int, nproc: int, store, args) -> list[tuple]:
    import fastcomm  # noqa: F401  (registers the backend)
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B

    torch.set_num_threads(1)
    dist.init_process_group(
        "fastcomm", store=store, rank=rank, world_size=nproc, timeout=datetime.timedelta(seconds=300)
    )
    groups = {"fastcomm": dist.group.WORLD, "gloo": dist.new_group(backend="gloo")}
    rows = []
    for width in args.width_list:
        module = _stage(width, args.layers_per_stage, seed=rank)
        x = torch.randn(args.rows * args.microbatches, width, generator=torch.Generator().manual_seed(1))
        y = torch.randn(args.rows * args.microbatches, width, generator=torch.Generator().manual_seed(2))

        def loss_fn(output, target):
            return ((output - target) ** 2).mean()

        def step_of(group):
            stage = PipelineStage(module, rank, nproc, torch.device("cpu"), group=group)
            schedule = Schedule1F1B(stage, args.microbatches, loss_fn=loss_fn)

            def step():
                if rank == 0:
                    schedule.step(x)
                elif rank == nproc - 1:
                    schedule.step(target=y)
                else:
                    schedule.step()

            return step

        timers = {name: timer_of(step_of(group)) for name, group in groups.items()}
        medians = alternating_rounds(
            timers,
            groups["gloo"],
            rounds=args.rounds,
            seconds=args.seconds,
            max_iters=args.max_iters,
            warmup_calls=args.warmup,
            align=lambda: dist.barrier(group=groups["fastcomm"]),
        )
        rows.append((width, args.rows * width * 4, medians["fastcomm"], medians["gloo"]))
        measured(rank, f"width {width}")
    dist.destroy_process_group()
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_round_arguments(p, seconds=2.0, max_iters=10000, warmup=2)
    p.add_argument("--widths", default="256,1024", help="comma-separated MLP widths")
    p.add_argument("--rows", type=int, default=32, help="rows per microbatch")
    p.add_argument("--microbatches", type=int, default=8)
    p.add_argument("--layers-per-stage", type=int, default=2)
    results_record.add_arguments(p, "pipeline_vs_gloo")
    args = p.parse_args(argv)
    args.width_list = [int(w) for w in args.widths.split(",")]
    if args.nproc < 2 or min(args.width_list) < 1 or args.rows < 1 or args.microbatches < args.nproc:
        p.error("need --nproc >= 2, widths and rows >= 1, and at least as many microbatches as stages")
    rows = spawn_ranks(_rank, args.nproc, args)
    print(
        f"# 1F1B pipeline, {args.nproc} stages x {args.layers_per_stage} Linear+ReLU layers, {args.microbatches} "
        f"microbatches of {args.rows} rows; median step of {args.rounds} alternating rounds, slowest rank"
    )
    print("# ratio = gloo step / fastcomm step (> 1: fastcomm faster)")
    print(f"{'width':>6} {'message B':>10} {'fastcomm ms':>12} {'gloo ms':>9} {'ratio':>6}")
    for width, message, t_fc, t_gl in rows:
        print(f"{width:>6} {message:>10} {t_fc * 1e3:>12.2f} {t_gl * 1e3:>9.2f} {t_gl / t_fc:>6.2f}")
    results_record.save(
        args,
        "pipeline_vs_gloo",
        [
            {"width": width, "message_bytes": message, "fastcomm_s": t_fc, "gloo_s": t_gl}
            for width, message, t_fc, t_gl in rows
        ],
        script=__file__,
        argv=argv,
        drop=("width_list",),
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
