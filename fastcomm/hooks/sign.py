"""Scaled sign compression with error feedback (EF-SignSGD, Karimireddy et al.
2019): one bit per element plus one float32 scale (mean |x|) per bucket, about
32x less traffic than float32."""

import torch
import torch.distributed as dist

from fastcomm.hooks.error_feedback import ErrorFeedbackState, gather_round
from fastcomm.hooks.state import check_state

_ops = torch.ops.fastcomm


class SignState(ErrorFeedbackState):
    """``SignState(process_group=None, error_feedback=True)``"""

    hook_name = "sign"


def sign_hook(state: SignState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP comm hook: the mean of every rank's scaled sign of its bucket."""
    check_state("sign", state, SignState)

    def compress(buffer: torch.Tensor) -> torch.Tensor:
        return _ops.compress_sign(buffer, state.error_for(bucket))

    def decompress_sum(gathered: torch.Tensor, buffer: torch.Tensor) -> None:
        _ops.compress_sign_sum(gathered, buffer, 1.0 / state.world_size)

    return gather_round(state, bucket, compress, decompress_sum)
