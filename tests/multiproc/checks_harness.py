"""Checks that exercise the rank pool itself (harness.py)."""

import torch
import torch.distributed as dist


def sums(rank, world_size):
    t = torch.full((2,), float(rank + 1))
    dist.all_reduce(t)
    return t.tolist()


def fails_on(rank, world_size, failing):
    if rank == failing:
        raise ValueError(f"rank {rank} stops early")
    return rank
