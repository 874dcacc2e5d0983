"""Run under torchrun: env:// rendezvous, the default group on fastcomm."""

import torch
import torch.distributed as dist

import fastcomm

dist.init_process_group("fastcomm")
rank, world = dist.get_rank(), dist.get_world_size()
assert isinstance(fastcomm.fastcomm_backend(), fastcomm._C.ProcessGroupFastcomm)
t = torch.full((4,), float(rank + 1))
dist.all_reduce(t, op=dist.ReduceOp.AVG)
expected = sum(range(1, world + 1)) / world
assert torch.allclose(t, torch.full((4,), expected)), t
print(f"rank {rank}/{world} ok {t[0].item()}", flush=True)
dist.destroy_process_group()
