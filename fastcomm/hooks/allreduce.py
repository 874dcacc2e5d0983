"""Plain averaging all_reduce of the bucket: the lossless baseline, the same
math as torch's allreduce_hook (sum, then scale by 1/world_size in one pass)."""

import torch
import torch.distributed as dist

from fastcomm.hooks.state import HookState, check_state


def allreduce_hook(state: HookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP comm hook: bucket = mean over the group of every rank's bucket."""
    check_state("allreduce", state, HookState)
    state._count_bucket(bucket)
    return average(state, bucket)


def average(state: HookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """The mean of the bucket over the group, for hooks that already counted the bucket."""
    buffer = bucket.buffer()
    scale = 1.0 / state.world_size

    def average(fut: torch.futures.Future) -> torch.Tensor:
        result = fut.value()[0]
        if scale != 1.0:
            result.mul_(scale)
        return result

    return state.all_reduce(buffer).then(average)
