"""fastcomm.sync against DDP: final loss, bytes each rank sent, time per step.

Two tasks (fastcomm/bench/tasks.py): "teacher" (the hooks' convergence task,
TeacherNet, SGD momentum 0.9, lr 0.1, 32 rows per rank and step) and
"markov" (a 2-layer causal transformer on a Markov-chain language, Adam lr
3e-3, 16 sequences per rank and step). Each configuration trains the same
initial model for --steps steps on `--nproc` ranks of the fastcomm group:

  ddp                 DDP, gradients all-reduced every step (fastcomm's allreduce hook counts the bytes)
  full H              fastcomm.sync full sync: parameters averaged every H steps
  full H async        the same, averaged on a helper thread, applied one round late
  incremental <c> H   the change since the last sync, compressed (int8 / sign / topk 1%) with error feedback

and reports the evaluation loss at the end (mean over ranks' models: with
local steps after the last sync they may differ), bytes each rank handed to
collectives (DDP: gradient buckets; sync: its payloads) and wall time per step.
DDP and ModelSync communicate over a group of their own (`--backend`, default fastcomm; gloo
shows what a slower transport costs and what async_op hides).

    python benchmarks/sync_convergence.py                   # both tasks, 1000 steps, H = 8, 2 ranks
    python benchmarks/sync_convergence.py --task markov --period 16 --steps 400
    python benchmarks/sync_convergence.py --backend gloo

The rows also go to a JSON record (benchmarks/results/sync_convergence.json
unless --record PATH or --no-record).
"""

from __future__ import annotations

import argparse
import datetime
import time

import torch
import torch.distributed as dist
import torch.nn as nn

import results_record
from fastcomm.bench import tasks
from fastcomm.bench.harness import measured, spawn_ranks


def _task(name: str):
    """(model factory, optimizer factory, batch(rank, step), eval set, loss)."""
    if name == "teacher":
        return (
            tasks.TeacherNet,
            lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
            tasks.teacher_batch,
            tasks.teacher_eval_set(),
            nn.functional.cross_entropy,
        )
    return (
        tasks.MarkovTransformer,
        lambda ps: torch.optim.Adam(ps, lr=3e-3),
        tasks.markov_batch,
        tasks.markov_eval_set(),
        tasks.markov_loss,
    )


def _configs(period: int) -> list[tuple[str, dict | None]]:
    h = period
    return [
        ("ddp", None),
        (f"full {h}", dict(period=h)),
        (f"full {h} async", dict(period=h, async_op=True)),
        (f"incremental int8 {h}", dict(period=h, mode="incremental", compression="int8")),
        (f"incremental sign {h}", dict(period=h, mode="incremental", compression="sign")),
        (f"incremental topk 1% {h}", dict(period=h, mode="incremental", compression="topk", topk_ratio=0.01)),
    ]


def _train(rank: int, task: str, steps: int, sync_options: dict | None, backend: str) -> tuple[float, int, float]:
    import fastcomm

    make_model, make_optimizer, batch, (eval_x, eval_y), loss_fn = _task(task)
    torch.manual_seed(0)
    model = make_model()
    group = dist.new_group(backend=backend)  # its own group: async ModelSync's helper thread needs one
    if sync_options is None:
        trained = nn.parallel.DistributedDataParallel(model, process_group=group)
        state = fastcomm.hooks.register(trained, "allreduce", group)
        sync = None
    else:
        trained = model
        sync = fastcomm.sync.ModelSync(model, process_group=group, **sync_options)
    optimizer = make_optimizer(trained.parameters())
    dist.barrier()
    start = time.perf_counter()
    for step in range(steps):
        x, y = batch(rank, step)
        optimizer.zero_grad()
        loss_fn(trained(x), y).backward()
        optimizer.step()
        if sync is not None:
            sync.step()
    if sync is not None:
        sync.finish()
    seconds = (time.perf_counter() - start) / steps
    with torch.no_grad():
        loss = float(loss_fn(model(eval_x), eval_y))
    sent = state.stats()["wire_bytes"] if sync is None else sync.stats()["sent_bytes"]
    numbers = torch.tensor([loss, float(sent), seconds], dtype=torch.float64)
    dist.all_reduce(numbers)
    loss, sent, seconds = (numbers / dist.get_world_size()).tolist()
    return loss, int(sent), seconds


def _rank(rank: int, nproc: int, store, args) -> list[tuple]:
    import fastcomm  # noqa: F401  (registers the backend)

    torch.set_num_threads(1)
    dist.init_process_group(
        "fastcomm", store=store, rank=rank, world_size=nproc, timeout=datetime.timedelta(seconds=300)
    )
    rows = []
    for task in args.task_list:
        for name, options in _configs(args.period):
            loss, sent, seconds = _train(rank, task, args.steps, options, args.backend)
            rows.append((task, name, loss, sent, seconds))
            measured(rank, f"{task} {name}")
    dist.destroy_process_group()
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--task", default="teacher,markov", help="comma-separated: teacher, markov")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--period", type=int, default=8, help="H: local steps between syncs")
    p.add_argument(
        "--backend", default="fastcomm", help="the backend DDP and ModelSync communicate over (fastcomm, gloo)"
    )
    results_record.add_arguments(p, "sync_convergence")
    args = p.parse_args(argv)
    args.task_list = args.task.split(",")
    if args.nproc < 2 or args.steps < args.period or args.period < 1 or set(args.task_list) - {"teacher", "markov"}:
        p.error("need --nproc >= 2, --steps >= --period >= 1, tasks among teacher, markov")
    rows = spawn_ranks(_rank, args.nproc, args)
    print(
        f"# {args.nproc} ranks, {args.backend} groups, {args.steps} steps, H = {args.period}; loss: evaluation loss after the last step "
        "(mean over ranks); bytes: sent per rank over the run; vs ddp: DDP's bytes / these"
    )
    print(f"{'task':<8} {'configuration':<24} {'loss':>8} {'loss/ddp':>9} {'bytes':>12} {'vs ddp':>8} {'ms/step':>8}")
    ddp = {}
    for task, name, loss, sent, seconds in rows:
        if name == "ddp":
            ddp[task] = (loss, sent)
        base_loss, base_sent = ddp[task]
        print(
            f"{task:<8} {name:<24} {loss:>8.4f} {loss / base_loss:>9.3f} {sent:>12} {base_sent / sent:>8.1f} "
            f"{seconds * 1e3:>8.2f}"
        )
    results_record.save(
        args,
        "sync_convergence",
        [
            {"task": task, "configuration": name, "loss": loss, "sent_bytes": sent, "step_s": seconds}
            for task, name, loss, sent, seconds in rows
        ],
        script=__file__,
        argv=argv,
        drop=("task_list",),
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
