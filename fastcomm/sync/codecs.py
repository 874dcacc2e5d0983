"""How fastcomm.sync averages a flat float32 change across a group: plain
all_reduce, or one of the hooks' lossy formats (int8 blocks, top-k, scaled
sign) sent with all_gather and decoded by the same fused kernels
(torch.ops.fastcomm.compress_*, csrc/kernels/compress_format.h), with error
feedback: what compression leaves out of a change is added to the next one.

Every rank ends with bitwise the same average (all_reduce results are
identical on every rank; gathered payloads are decoded in rank order), so the
ranks' models stay identical.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
import torch.distributed as dist

from fastcomm._compat import all_gather_single

_ops = torch.ops.fastcomm

COMPRESSIONS = (None, "int8", "topk", "sign")
"""What ModelSync(compression=...) takes: None sends float32 values."""


class Codec:
    """Averages `change` over `group`, in place: ``start(change)`` encodes it
    (updating `error` when compressing) and launches the collective; the
    returned ``finish()`` waits and writes the group's average into `change`.
    ``sent_bytes`` counts what this rank handed to collectives."""

    def __init__(self, compression: str | None, group: dist.ProcessGroup | None, topk_ratio: float, int8_block: int):
        if compression not in COMPRESSIONS:
            raise ValueError(f"fastcomm.sync: compression must be one of {COMPRESSIONS}, got {compression!r}")
        self.compression = compression
        self.group = group
        self.world_size = dist.get_world_size(group)
        self.topk_ratio = topk_ratio
        self.int8_block = int8_block
        self.sent_bytes = 0

    def start(self, change: torch.Tensor, error: torch.Tensor | None) -> Callable[[], None]:
        if self.compression is None:
            self.sent_bytes += change.numel() * change.element_size()
            work = dist.all_reduce(change, group=self.group, async_op=True)

            def finish_sum() -> None:
                work.wait()
                change.div_(self.world_size)

            return finish_sum
        payload = self._encode(change, error)
        self.sent_bytes += payload.numel() * payload.element_size()
        gathered = torch.empty(self.world_size * payload.numel(), dtype=payload.dtype)
        work = all_gather_single(gathered, payload, group=self.group, async_op=True)

        def finish_gather() -> None:
            work.wait()
            self._decode_mean(gathered.view(self.world_size, -1), change)

        return finish_gather

    def _encode(self, change: torch.Tensor, error: torch.Tensor | None) -> torch.Tensor:
        if self.compression == "int8":
            return _ops.compress_int8_quantize(change, error, self.int8_block, False, 0)
        if self.compression == "topk":
            k = min(change.numel(), max(1, math.ceil(self.topk_ratio * change.numel())))
            return _ops.compress_topk(change, error, k)
        return _ops.compress_sign(change, error)

    def _decode_mean(self, gathered: torch.Tensor, out: torch.Tensor) -> None:
        scale = 1.0 / self.world_size
        if self.compression == "int8":
            _ops.compress_int8_dequantize_sum(gathered, out, self.int8_block, scale)
        elif self.compression == "topk":
            _ops.compress_topk_sum(gathered, out, scale)
        else:
            _ops.compress_sign_sum(gathered, out, scale)
