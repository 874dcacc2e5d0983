"""What the lossy gather-based hooks (int8, topk, sign) share: an
error-feedback buffer per bucket, and the round compress -> all_gather ->
decompress-and-sum.

Error feedback (Seide et al. 2014; Karimireddy et al. 2019): each rank keeps
what compression left out of its gradient and adds it to the next one, so
nothing is lost, only delayed. The buffer is float32, per bucket, kept in the
state (checkpointed with state_dict()). Buckets that ``no_sync`` skips are not
compressed, so accumulated gradients and the buffer stay consistent.

Why all_gather and not all_reduce: int8 values, top-k index sets and sign bits
cannot be summed on the wire without overflow or decoding. Each rank gathers
every payload and one fused kernel decodes and sums them in rank order, so all
ranks get bitwise the same bucket.
"""

from typing import Callable

import torch
import torch.distributed as dist

from fastcomm.hooks import _options
from fastcomm.hooks.state import HookState


class ErrorFeedbackState(HookState):
    """Base of the int8, topk and sign states: ``error_feedback`` (default True)."""

    def __init__(self, process_group: dist.ProcessGroup | None = None, error_feedback: bool = True) -> None:
        super().__init__(process_group)
        self.error_feedback = _options.flag(self.hook_name, "error_feedback", error_feedback)

    def error_for(self, bucket: dist.GradBucket) -> torch.Tensor | None:
        if not self.error_feedback:
            return None
        buffer = bucket.buffer()
        layout = self.bucket_layout(bucket)
        return self.param_buffers.get(bucket.index(), "error", layout, buffer.numel(), torch.float32, buffer.device)


def gather_round(
    state: HookState,
    bucket: dist.GradBucket,
    compress: Callable[[torch.Tensor], torch.Tensor],
    decompress_sum: Callable[[torch.Tensor, torch.Tensor], None],
) -> torch.futures.Future[torch.Tensor]:
    """compress(bucket) -> payload; all_gather; decompress_sum(gathered, bucket)
    writes the group's mean into the bucket, which the future returns."""
    state._count_bucket(bucket)
    buffer = bucket.buffer()
    gathered, fut = state.all_gather(compress(buffer), bucket.index())

    def finish(fut: torch.futures.Future) -> torch.Tensor:
        fut.value()  # re-raises the collective's error (see HookState.all_reduce)
        decompress_sum(gathered, buffer)
        return buffer

    return fut.then(finish)
