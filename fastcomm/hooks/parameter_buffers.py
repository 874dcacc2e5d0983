"""Per-parameter state of a hook (error feedback, PowerSGD's Q) kept as one
flat buffer per bucket, which is what the kernels want, and carried over
parameter by parameter when a bucket's layout changes.

DDP rebuilds its buckets after the first iteration (another order, other
bucket boundaries), and a restored checkpoint meets a model whose first
iteration uses the initial layout again. Keying the state by bucket index alone
would hand one parameter's error to another; here each parameter's segment
moves with it. Parameters are known by name when the state is bound to the DDP
model (``register()`` does it; ``state.bind(ddp_model)`` otherwise), else by
object identity, which is stable within a process but not across a checkpoint.
"""

from typing import Callable

import torch

# (parameter key, offset into the flat buffer, element count), per parameter of a bucket
Layout = tuple[tuple[str, int, int], ...]


class ParameterBuffers:
    def __init__(self) -> None:
        self._flat: dict[tuple[int, str], tuple[torch.Tensor, Layout]] = {}  # (bucket index, name) -> buffer
        self._segments: dict[str, dict[str, torch.Tensor]] = {}  # name -> parameter key -> its segment

    def get(
        self,
        bucket_index: int,
        name: str,
        layout: Layout,
        numel: int,
        dtype: torch.dtype,
        device: torch.device,
        init: Callable[[int, torch.dtype, torch.device], torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """The flat buffer `name` of a bucket laid out as `layout`. A new layout
        gets a new buffer, from `init` (zeros by default), with the segments of
        parameters seen before copied in."""
        entry = self._flat.get((bucket_index, name))
        if entry is not None and entry[1] == layout and entry[0].dtype == dtype and entry[0].device == device:
            return entry[0]
        flat = init(numel, dtype, device) if init else torch.zeros(numel, dtype=dtype, device=device)
        segments = self._segments.setdefault(name, {})
        for key, offset, count in layout:
            old = segments.get(key)
            target = flat.narrow(0, offset, count)
            if old is not None and old.numel() == count:
                target.copy_(old.reshape(-1))
            segments[key] = target
        self._flat[(bucket_index, name)] = (flat, layout)
        return flat

    def state_dict(self) -> dict[str, dict[str, torch.Tensor]]:
        return {name: {k: t.detach().cpu().clone() for k, t in seg.items()} for name, seg in self._segments.items()}

    def load_state_dict(self, state: dict[str, dict[str, torch.Tensor]]) -> None:
        """Segments by parameter key; each bucket's buffer is rebuilt from them on first use."""
        self._segments = {name: {k: t.clone() for k, t in seg.items()} for name, seg in state.items()}
        self._flat = {}
