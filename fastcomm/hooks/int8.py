"""int8 blockwise quantization: one float32 scale per block of `block_size`
elements (max |x| / 127), values rounded to nearest or stochastically, with
error feedback. About 4x less traffic than float32 (1 + 4/block_size bytes
per element). torch's quantization hooks fail on Gloo (IndexError)."""

import torch
import torch.distributed as dist

from fastcomm.hooks import _options
from fastcomm.hooks.error_feedback import ErrorFeedbackState, gather_round
from fastcomm.hooks.state import check_state

_ops = torch.ops.fastcomm


class Int8State(ErrorFeedbackState):
    """``Int8State(process_group=None, block_size=256, stochastic_rounding=False, error_feedback=True, seed=0)``"""

    hook_name = "int8"

    def __init__(
        self,
        process_group: dist.ProcessGroup | None = None,
        block_size: int = 256,
        stochastic_rounding: bool = False,
        error_feedback: bool = True,
        seed: int = 0,
    ) -> None:
        super().__init__(process_group, error_feedback)
        self.block_size = _options.positive_int(self.hook_name, "block_size", block_size)
        if block_size > 1 << 20:
            raise ValueError(f"fastcomm.hooks int8: block_size must be <= 1048576, got {block_size}")
        self.stochastic_rounding = _options.flag(self.hook_name, "stochastic_rounding", stochastic_rounding)
        self.seed = _options.non_negative_int(self.hook_name, "seed", seed)

    def rounding_seed(self, bucket_index: int) -> int:
        """Different draws per step, bucket and rank; a host integer (no device sync)."""
        return (self.seed * 1_000_003 + self.steps * 65_537 + bucket_index * 257 + self.group_rank) % (1 << 62)


def int8_hook(state: Int8State, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP comm hook: the bucket's mean, sent as int8 blocks."""
    check_state("int8", state, Int8State)
    block = state.block_size

    def compress(buffer: torch.Tensor) -> torch.Tensor:
        seed = state.rounding_seed(bucket.index())
        return _ops.compress_int8_quantize(buffer, state.error_for(bucket), block, state.stochastic_rounding, seed)

    def decompress_sum(gathered: torch.Tensor, buffer: torch.Tensor) -> None:
        _ops.compress_int8_dequantize_sum(gathered, buffer, block, 1.0 / state.world_size)

    return gather_round(state, bucket, compress, decompress_sum)
