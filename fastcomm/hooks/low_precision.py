"""fp16 and bf16 compression: the bucket travels in half precision.

The bucket is scaled by 1/world_size, converted (for float16 finite values
beyond +-65504 / world_size are clamped, counted in stats()["clamped"]),
summed in half precision (accumulated in float32, rounded once) and converted
back into the bucket. On a fastcomm group with CPU buckets that is one call,
the backend's low-precision all_reduce (``all_reduce_low_precision``: on one
host the conversions, the float32 sum and the rounding run in one pass over
the peers' buckets, read and written in place for DDP's arena buckets
(fastcomm.enable_ddp_arena()), and by cross-memory attach for ordinary ones from
single copy's minimum; smaller ones convert on the way into and out of shared
memory; docs/compression.md). On other groups (Gloo, NCCL, CUDA buckets) one
fused pass compresses, an ordinary all_reduce sums the half-precision bucket
and one fused pass converts back. All give the same bits. torch's fp16_compress_hook makes a separate division pass and cannot
clamp; its bf16 hook refuses to run outside CUDA/NCCL.

Pre-scaling and the limit keep the float16 sum finite: each rank sends x /
world_size, at most float16_limit(world_size) <= 65504 / world_size in
magnitude, so no partial sum can overflow, and a gradient within float16's range is never clamped. inf and NaN
pass unchanged (a GradScaler still sees an overflowed step).
"""

from typing import Any

import torch
import torch.distributed as dist

from fastcomm.hooks.state import HookState, check_state

_ops = torch.ops.fastcomm
HALF_MAX = 65504.0


class LowPrecisionState(HookState):
    """State of fp16_hook / bf16_hook: ``LowPrecisionState(process_group=None, dtype=torch.float16)``."""

    def __init__(self, process_group: dist.ProcessGroup | None = None, dtype: torch.dtype = torch.float16) -> None:
        if dtype not in (torch.float16, torch.bfloat16):
            raise ValueError(
                f"fastcomm.hooks low precision: dtype must be torch.float16 or torch.bfloat16, got {dtype}"
            )
        self.hook_name = "fp16" if dtype == torch.float16 else "bf16"
        super().__init__(process_group)
        self.dtype = dtype
        self._clamped: torch.Tensor | None = None  # int64 on the buckets' device: read only by stats()

    def stats(self) -> dict[str, Any]:
        """HookState.stats() and "clamped": float16 elements clamped to stay finite in the sum."""
        stats = super().stats()
        stats["clamped"] = int(self._clamped.item()) if self._clamped is not None else 0
        return stats

    def state_dict(self) -> dict[str, Any]:
        """HookState.state_dict() and the clamp counter."""
        state = super().state_dict()
        state["clamped"] = self.stats()["clamped"]
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores what state_dict returned, the clamp counter included."""
        super().load_state_dict(state)
        self._clamped = torch.tensor([int(state["clamped"])], dtype=torch.long)

    def clamped_counter(self, device: torch.device) -> torch.Tensor:
        """The clamp counter on `device` (the kernels add to it without a host sync)."""
        if self._clamped is None or self._clamped.device != device:
            previous = self._clamped.to(device) if self._clamped is not None else None
            self._clamped = previous if previous is not None else torch.zeros(1, dtype=torch.long, device=device)
        return self._clamped


def float16_limit(world_size: int) -> float:
    """The largest float16 value v with world_size * v <= 65504: a bound on each
    rank's pre-scaled value that no rounding can push over the range."""
    v = torch.tensor(HALF_MAX / world_size, dtype=torch.float32)
    half = v.to(torch.float16)
    if half.float() > v:
        half = torch.nextafter(half, torch.zeros_like(half))
    return float(half)


def _low_precision_hook(state: LowPrecisionState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    state._count_bucket(bucket)
    buffer = bucket.buffer()
    scale = 1.0 / state.world_size
    limit = float16_limit(state.world_size) if state.dtype == torch.float16 else float("inf")
    backend = state.fastcomm_backend(buffer.device)
    if backend is not None:
        state.wire_bytes += buffer.numel() * state.dtype.itemsize
        work = backend.all_reduce_low_precision(buffer, state.dtype, scale, limit, state.clamped_counter(buffer.device))

        def done(fut: torch.futures.Future) -> torch.Tensor:
            fut.value()  # re-raises the collective's error (see HookState.all_reduce)
            return buffer

        return work.get_future().then(done)
    compressed = torch.empty(buffer.numel(), dtype=state.dtype, device=buffer.device)
    _ops.compress_multi_tensor_pack([buffer], compressed, scale, limit, state.clamped_counter(buffer.device))

    def decompress(fut: torch.futures.Future) -> torch.Tensor:
        _ops.compress_multi_tensor_unpack(fut.value()[0], [buffer], 1.0)
        return buffer

    return state.all_reduce(compressed).then(decompress)


def check_low_precision_state(hook: str, state: object, dtype: torch.dtype) -> None:
    """check_state() for the fp16 and bf16 hooks: also the state's dtype."""
    check_state(hook, state, LowPrecisionState)
    if state.dtype != dtype:
        raise TypeError(
            f"fastcomm.hooks {hook}: the state is the {state.hook_name} hook's (dtype {state.dtype}); "
            f"{hook}_hook needs LowPrecisionState(dtype={dtype})"
        )


def fp16_hook(state: LowPrecisionState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP comm hook: the bucket's mean, sent as float16 (state.dtype must be float16)."""
    check_low_precision_state("fp16", state, torch.float16)
    return _low_precision_hook(state, bucket)


def bf16_hook(state: LowPrecisionState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP comm hook: the bucket's mean, sent as bfloat16 (state.dtype must be bfloat16)."""
    check_low_precision_state("bf16", state, torch.bfloat16)
    return _low_precision_hook(state, bucket)
