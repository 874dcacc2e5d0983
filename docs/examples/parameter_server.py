"""A parameter server on fastcomm's collectives and point-to-point messages.

    torchrun --nproc_per_node=3 docs/examples/parameter_server.py --mode sync
    torchrun --nproc_per_node=3 docs/examples/parameter_server.py --mode async

Rank 0 is the server and holds the model; ranks 1.. are workers that compute
gradients on their own data (a linear model learning a fixed teacher).

sync:  each step every worker's gradient is summed onto the server with
       dist.reduce (the server contributes zeros), the server takes an SGD
       step with the mean and dist.broadcast sends the new parameters to all.
       Equivalent to data-parallel SGD; the script checks that the server's
       parameters equal a single-process run on all the workers' data.
async: workers push gradients with dist.send as soon as they have them; the
       server receives from any source (dist.recv without src returns who
       sent), applies each gradient as it arrives and sends that worker the
       current parameters back. Workers never wait for each other, so a
       gradient may be computed on parameters a few updates old; the script
       checks that every push was applied once and that the loss fell.
Both print one line: RESULT {"mode": ..., "ok": true, ...} on the server.
"""
from __future__ import annotations

import argparse
import json

import torch
import torch.distributed as dist

import fastcomm  # noqa: F401  (registers the backend)

FEATURES, BATCH, LR = 16, 32, 0.05


def batch(worker: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 * worker + step)
    x = torch.randn(BATCH, FEATURES, generator=g)
    teacher = torch.linspace(-1.0, 1.0, FEATURES)
    return x, x @ teacher


def gradient(params: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, float]:
    """Mean squared error of x @ params against y: its gradient and value."""
    residual = x @ params - y
    return 2 * x.T @ residual / len(y), float((residual**2).mean())


def run_sync(rank: int, world: int, steps: int) -> dict | None:
    params = torch.zeros(FEATURES)
    for step in range(steps):
        grad = torch.zeros(FEATURES)
        if rank > 0:
            grad, _ = gradient(params, *batch(rank, step))
        dist.reduce(grad, dst=0)  # the server gets the sum of the workers' gradients
        if rank == 0:
            params -= LR * grad / (world - 1)
        dist.broadcast(params, src=0)
    if rank != 0:
        return None
    reference = torch.zeros(FEATURES)  # one process, every worker's batch, the same SGD
    for step in range(steps):
        total = sum(gradient(reference, *batch(w, step))[0] for w in range(1, world))
        reference -= LR * total / (world - 1)
    error = float((params - reference).abs().max())
    return {"mode": "sync", "ok": error < 1e-5, "max_difference_from_single_process": error}


def run_async(rank: int, world: int, steps: int) -> dict | None:
    params = torch.zeros(FEATURES)
    grad = torch.empty(FEATURES)
    if rank == 0:
        applied = {w: 0 for w in range(1, world)}
        for _ in range(steps * (world - 1)):
            source = dist.recv(grad, tag=1)  # any worker; returns which
            params -= LR * grad
            applied[source] += 1
            dist.send(params, dst=source, tag=2)
        first = sum(gradient(torch.zeros(FEATURES), *batch(w, 0))[1] for w in range(1, world)) / (world - 1)
        last = sum(gradient(params, *batch(w, steps))[1] for w in range(1, world)) / (world - 1)
        ok = all(n == steps for n in applied.values()) and last < 0.1 * first
        return {"mode": "async", "ok": ok, "applied": applied, "loss_first": first, "loss_last": last}
    for step in range(steps):
        grad, _ = gradient(params, *batch(rank, step))
        dist.send(grad, dst=0, tag=1)
        dist.recv(params, src=0, tag=2)
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=["sync", "async"], default="sync")
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()
    dist.init_process_group("fastcomm")
    rank, world = dist.get_rank(), dist.get_world_size()
    if world < 2:
        raise SystemExit("parameter_server.py needs at least 2 ranks (a server and a worker)")
    result = (run_sync if args.mode == "sync" else run_async)(rank, world, args.steps)
    if result is not None:
        print("RESULT " + json.dumps(result), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
