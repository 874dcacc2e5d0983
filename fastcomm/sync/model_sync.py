"""ModelSync: local-SGD-style model synchronisation (each rank trains on its
own for `period` steps, then the ranks agree on one model).

Modes (docs/model_sync.md says when to use which):
  full         every `period` steps the parameters become the group's average
               (local SGD, torch's PeriodicModelAverager).
  incremental  every `period` steps each rank's change since the last sync
               (parameters - anchor) is averaged, optionally compressed (int8,
               topk, sign, with error feedback), and an outer optimizer applies
               the averaged change to the anchor (outer gradient = -average;
               the default SGD(lr=1) makes anchor += average; DiLoCo uses
               SGD(lr=0.7, momentum=0.9, nesterov=True)); the parameters
               become the new anchor.
async_op=True overlaps the averaging with the next `period` local steps and
applies it one round late: at sync k+1 the parameters become the average of
round k plus what this rank learned since round k was launched,
    params <- average_k + (params_now - params_at_launch_k)
(incremental: anchor_k+1 = outer step with average change_k, then the same).
The averaging runs on a helper thread, so its group must not be used by
anything else at the same time: by default ModelSync makes its own
(dist.new_group over the whole world, which every rank must construct).

Contract: every rank of the group calls step() equally often; all ranks start
from one model (the group's first rank broadcasts it at construction) and
stay bitwise identical after each applied sync. The parameters travel and
are averaged as one flat float32 tensor (float64 or half parameters are
converted and written back), so float64 models sync at float32 precision.
"""

from __future__ import annotations

import concurrent.futures
import copy
import warnings
from typing import Any, Callable

import torch
import torch.distributed as dist

from fastcomm.sync.codecs import Codec

MODES = ("full", "incremental")
"""What ModelSync(mode=...) takes: average the parameters, or their change since the last sync."""


def _flat(params: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1).float() for p in params])


def _assign(params: list[torch.Tensor], flat: torch.Tensor) -> None:
    offset = 0
    with torch.no_grad():
        for p in params:
            p.copy_(flat[offset : offset + p.numel()].view_as(p))
            offset += p.numel()


class _NotGiven:
    """The default of a deprecated argument: tells "not given" from None."""

    def __repr__(self) -> str:
        return "<not given>"


_NOT_GIVEN: Any = _NotGiven()


class ModelSync:
    """``ModelSync(module, period=8, mode="full", compression=None, outer_optimizer=None, process_group=None,
    error_feedback=True, async_op=False, topk_ratio=0.01, int8_block=256)``; call ``step()`` after each
    local optimizer step, ``finish()`` after the last one (applies a sync still in flight).

    process_group: the group that averages (None: the default group; with
    async_op, a new group over the whole world). ``group=`` is its former name:
    it still works, with a DeprecationWarning; with a process_group other than
    None it raises TypeError.
    """

    def __init__(
        self,
        module: torch.nn.Module,
        period: int = 8,
        mode: str = "full",
        compression: str | None = None,
        outer_optimizer: Callable[[list[torch.Tensor]], torch.optim.Optimizer] | None = None,
        process_group: dist.ProcessGroup | None = None,
        error_feedback: bool = True,
        async_op: bool = False,
        topk_ratio: float = 0.01,
        int8_block: int = 256,
        *,
        group: dist.ProcessGroup | None = _NOT_GIVEN,
    ) -> None:
        if group is not _NOT_GIVEN:
            if process_group is not None:
                raise TypeError(
                    "fastcomm.sync: got both group= (deprecated) and process_group=; pass process_group= only"
                )
            warnings.warn("fastcomm.sync: group= is deprecated, use process_group=", DeprecationWarning, stacklevel=2)
            process_group = group
        if not dist.is_initialized():
            raise RuntimeError("fastcomm.sync: torch.distributed is not initialized")
        if isinstance(period, bool) or not isinstance(period, int) or period < 1:
            raise ValueError(f"fastcomm.sync: period must be an integer >= 1, got {period!r}")
        if mode not in MODES:
            raise ValueError(f"fastcomm.sync: mode must be one of {MODES}, got {mode!r}")
        if mode == "full" and (compression is not None or outer_optimizer is not None):
            raise ValueError(
                "fastcomm.sync: compression and outer_optimizer need mode='incremental' "
                "(full sync averages the parameters themselves)"
            )
        if not 0 < topk_ratio <= 1:
            raise ValueError(f"fastcomm.sync: topk_ratio must be in (0, 1], got {topk_ratio!r}")
        if isinstance(int8_block, bool) or not isinstance(int8_block, int) or not 1 <= int8_block <= 1 << 20:
            raise ValueError(f"fastcomm.sync: int8_block must be an integer in [1, 1048576], got {int8_block!r}")
        self.params = [p for p in module.parameters()]
        bad = [p.dtype for p in self.params if not p.dtype.is_floating_point]
        if not self.params or bad:
            raise ValueError(f"fastcomm.sync: the module needs floating-point parameters (got {bad or 'none'})")
        if async_op and process_group is None:
            process_group = dist.new_group()  # the helper thread's own: nothing else issues collectives on it
        self.process_group = process_group
        self.period = period
        self.mode = mode
        self.async_op = async_op
        self.steps = 0
        self.syncs = 0
        self._codec = Codec(compression, process_group, topk_ratio, int8_block)

        start = _flat(self.params)
        dist.broadcast(start, group=process_group, group_src=0)
        _assign(self.params, start)
        self.anchor: torch.Tensor | None = None
        self.outer: torch.optim.Optimizer | None = None
        if mode == "incremental":
            self.anchor = start.clone().requires_grad_(True)
            self.outer = (outer_optimizer or (lambda ps: torch.optim.SGD(ps, lr=1.0)))([self.anchor])
        self.error = torch.zeros_like(start) if compression is not None and error_feedback else None
        self._executor = concurrent.futures.ThreadPoolExecutor(1, "fastcomm-sync") if async_op else None
        # async: (future of the averaging, its buffer, the parameters when it was launched)
        self._pending: tuple[concurrent.futures.Future, torch.Tensor, torch.Tensor] | None = None

    # -- training loop ----------------------------------------------------------
    def step(self) -> bool:
        """Counts a local step; every `period` steps synchronises. True when it did."""
        self.steps += 1
        if self.steps % self.period:
            return False
        self.sync()
        return True

    def sync(self) -> None:
        """Synchronises now (every rank must call it)."""
        if not self.async_op:
            launched = _flat(self.params)
            change = self._change(launched)
            self._codec.start(change, self.error)()
            self._apply(change, launched)
        else:
            if self._pending is not None:
                self._apply_pending()
            launched = _flat(self.params)
            change = self._change(launched)
            future = self._executor.submit(lambda: self._codec.start(change, self.error)())
            self._pending = (future, change, launched)
        self.syncs += 1

    def finish(self) -> None:
        """Applies a sync still in flight (async_op); the ranks are identical afterwards."""
        if self._pending is not None:
            self._apply_pending()

    def _change(self, launched: torch.Tensor) -> torch.Tensor:
        return launched.clone() if self.mode == "full" else launched - self.anchor.detach()

    def _apply_pending(self) -> None:
        future, average, launched = self._pending
        self._pending = None
        future.result()
        self._apply(average, launched)

    def _apply(self, average: torch.Tensor, launched: torch.Tensor) -> None:
        """The parameters become the agreed model plus what this rank learned since `launched`."""
        if self.mode == "full":
            agreed = average
        else:
            self.anchor.grad = -average
            self.outer.step()
            agreed = self.anchor.detach()
        if self.async_op:
            agreed = agreed + (_flat(self.params) - launched)
        _assign(self.params, agreed)

    # -- introspection and checkpoints -----------------------------------------
    def stats(self) -> dict[str, Any]:
        """steps, syncs, sent_bytes (what this rank handed to collectives) and
        model_bytes (float32 parameters: what DDP's all_reduce sends per step)."""
        model_bytes = sum(p.numel() for p in self.params) * 4
        return {
            "steps": self.steps,
            "syncs": self.syncs,
            "sent_bytes": self._codec.sent_bytes,
            "model_bytes": model_bytes,
        }

    def state_dict(self) -> dict[str, Any]:
        """Counters, anchor, outer optimizer, error feedback, and a sync in flight (waited for)."""
        pending = None
        if self._pending is not None:
            future, average, launched = self._pending
            future.result()
            pending = {"average": average.clone(), "launched": launched.clone()}
        return {
            "mode": self.mode,
            "compression": self._codec.compression,
            "steps": self.steps,
            "syncs": self.syncs,
            "sent_bytes": self._codec.sent_bytes,
            "anchor": None if self.anchor is None else self.anchor.detach().clone(),
            # a copy: an optimizer's state_dict() holds its live buffers (momentum), which later steps change
            "outer": None if self.outer is None else copy.deepcopy(self.outer.state_dict()),
            "error": None if self.error is None else self.error.clone(),
            "pending": pending,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores what state_dict returned; ValueError for another mode or compression."""
        if (state["mode"], state["compression"]) != (self.mode, self._codec.compression):
            raise ValueError(
                f"fastcomm.sync: load_state_dict got mode {state['mode']!r} / compression "
                f"{state['compression']!r}, this ModelSync has {self.mode!r} / {self._codec.compression!r}"
            )
        self.steps, self.syncs, self._codec.sent_bytes = state["steps"], state["syncs"], state["sent_bytes"]
        if self.anchor is not None:
            with torch.no_grad():
                self.anchor.copy_(state["anchor"])
            self.outer.load_state_dict(state["outer"])
        if self.error is not None and state["error"] is not None:
            self.error.copy_(state["error"])
        self._pending = None
        if state["pending"] is not None:
            if not self.async_op:
                raise ValueError("fastcomm.sync: the checkpoint has a sync in flight; load it with async_op=True")
            done: concurrent.futures.Future = concurrent.futures.Future()
            done.set_result(None)
            self._pending = (done, state["pending"]["average"].clone(), state["pending"]["launched"].clone())

    def __del__(self) -> None:
        if getattr(self, "_executor", None) is not None:
            self._executor.shutdown(wait=True)
