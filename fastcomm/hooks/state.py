"""The state every fastcomm hook carries between calls: its process group,
honest traffic counters, and per-parameter buffers (error feedback, PowerSGD's
warm-start matrices) that survive DDP's bucket rebuild and a checkpoint.

Counters (``stats()``):
  steps      communication rounds: one per backward pass that communicated
             (``no_sync`` passes do not communicate and do not count); a round
             counts from its first bucket on
  raw_bytes  bytes of the gradient buckets handed to the hook
  wire_bytes bytes of the tensors this rank handed to collectives (its
             all_reduce inputs and its share of each all_gather); the
             compression ratio is raw_bytes / wire_bytes
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from fastcomm import _C
from fastcomm._compat import all_gather_single
from fastcomm.hooks.parameter_buffers import Layout, ParameterBuffers


class HookState:
    """Base of every hook's state: ``HookState(process_group=None)``.

    process_group: the group the hook communicates over (None: the default
    group). Subclasses add their options, checked in ``__init__`` so that a bad
    one raises before anything is registered.
    """

    hook_name = "allreduce"

    def __init__(self, process_group: dist.ProcessGroup | None = None) -> None:
        if not dist.is_initialized():
            raise RuntimeError(f"fastcomm.hooks {self.hook_name}: torch.distributed is not initialized")
        self.process_group = process_group
        self.world_size = dist.get_world_size(process_group)
        self.group_rank = dist.get_rank(process_group)  # this process's rank in the group
        self.steps = 0
        self.raw_bytes = 0
        self.wire_bytes = 0
        self.param_buffers = ParameterBuffers()  # checkpointed
        self._scratch: dict[tuple[int, str], torch.Tensor] = {}  # reused between steps, not checkpointed
        self._param_names: dict[int, str] = {}
        self._step_params: set[int] = set()  # parameters communicated in the current step

    # -- counters ---------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        """Counters so far: steps, raw_bytes, wire_bytes, compression_ratio."""
        return {
            "steps": self.steps,
            "raw_bytes": self.raw_bytes,
            "wire_bytes": self.wire_bytes,
            "compression_ratio": self.raw_bytes / self.wire_bytes if self.wire_bytes else None,
        }

    def _count_bucket(self, bucket: dist.GradBucket) -> None:
        """Counts the bucket's bytes, and a new step when one of its parameters
        was already communicated in the current one (a parameter is communicated
        once per backward pass; bucket indices and is_last() are not reliable
        markers: DDP's first static_graph pass repeats index 0, never sets is_last)."""
        buffer = bucket.buffer()
        self.raw_bytes += buffer.numel() * buffer.element_size()
        params = {id(p) for p in bucket.parameters()}
        if not self._step_params or not params.isdisjoint(self._step_params):
            self.steps += 1
            self._step_params = set()
        self._step_params |= params

    # -- collectives, counted ---------------------------------------------------
    # Contract of every callback a hook chains on a collective's future with
    # then(): its first act is fut.value(). then() runs the callback even when
    # the collective failed (a peer died or timed out), and reading the value
    # re-raises the collective's error; a callback that skips it returns a bucket
    # that was never averaged, and DDP's backward finishes as if all went well.
    def all_reduce(self, tensor: torch.Tensor) -> torch.futures.Future:
        """Sum over the group; the future's value is [tensor]."""
        self.wire_bytes += tensor.numel() * tensor.element_size()
        return dist.all_reduce(tensor, group=self.process_group, async_op=True).get_future()

    def all_gather(self, payload: torch.Tensor, bucket_index: int) -> tuple[torch.Tensor, torch.futures.Future]:
        """Every rank's 1-D payload, as rows of a [world_size, numel] tensor once
        the future completes. The tensor is the bucket's scratch (comm_buffer: in
        the arena on a fastcomm group, where the gather reads the peers' rows in
        place), valid until the bucket's next call."""
        self.wire_bytes += payload.numel() * payload.element_size()
        numel = payload.numel()
        gathered = self.scratch(bucket_index, "gathered", self.world_size * numel, payload.dtype, payload.device)
        mine = gathered.narrow(0, self.group_rank * numel, numel)
        mine.copy_(payload)
        work = all_gather_single(gathered, mine, group=self.process_group, async_op=True)
        return gathered.view(self.world_size, numel), work.get_future()

    # -- per-parameter state ---------------------------------------------------
    def bind(self, ddp_model: torch.nn.Module) -> None:
        """Know parameters by their names in the model (checkpoints of per-parameter
        state then restore into a new process). register() calls it."""
        module = getattr(ddp_model, "module", ddp_model)
        self._param_names = {id(p): name for name, p in module.named_parameters()}

    def param_key(self, param: torch.Tensor) -> str:
        """The parameter's name in the bound DDP model (its id where unbound): what
        per-parameter buffers are saved under in state_dict."""
        return self._param_names.get(id(param)) or f"id:{id(param)}"

    def bucket_layout(self, bucket: dist.GradBucket) -> Layout:
        """(parameter key, offset, numel) of every gradient in the bucket's buffer."""
        base = bucket.buffer().data_ptr()
        return tuple(
            (self.param_key(p), (g.data_ptr() - base) // g.element_size(), g.numel())
            for p, g in zip(bucket.parameters(), bucket.gradients())
        )

    def scratch(
        self, bucket_index: int, name: str, numel: int, dtype: torch.dtype, device: torch.device
    ) -> torch.Tensor:
        """A buffer for collectives reused between steps (not checkpointed; from
        comm_buffer); contents undefined."""
        key = (bucket_index, name)
        t = self._scratch.get(key)
        if t is None or t.numel() != numel or t.dtype != dtype or t.device != device:
            t = self._scratch[key] = self.comm_buffer(numel, dtype, device)
        return t

    # -- where buffers for collectives live --------------------------------------
    def fastcomm_backend(self, device: torch.device) -> _C.ProcessGroupFastcomm | None:
        """The fastcomm backend that runs the state's group's collectives on
        `device` (CPU only), when the group is a fastcomm group; None otherwise."""
        if device.type != "cpu":
            return None
        group = self.process_group if self.process_group is not None else dist.distributed_c10d._get_default_group()
        backend = group._get_backend(device)
        return backend if isinstance(backend, _C.ProcessGroupFastcomm) else None

    def comm_buffer(self, numel: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """numel zeros for a buffer the hook hands to collectives: in the group's
        shared-memory arena where it has one (a fastcomm group on one host, CPU),
        so the peers read it in place (docs/algorithms.md "The arena"); an
        ordinary tensor otherwise. Every rank of a group decides alike."""
        backend = self.fastcomm_backend(device)
        if backend is not None and backend.arena_stats() is not None:
            return backend.allocate_tensor(numel, dtype=dtype)
        return torch.zeros(numel, dtype=dtype, device=device)

    # -- checkpoints ------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Counters and buffers (on CPU); the process group is not part of it."""
        return {
            "hook": self.hook_name,
            "steps": self.steps,
            "raw_bytes": self.raw_bytes,
            "wire_bytes": self.wire_bytes,
            "buffers": self.param_buffers.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores what state_dict returned; ValueError if it was another hook's."""
        if state.get("hook") != self.hook_name:
            raise ValueError(
                f"fastcomm.hooks {self.hook_name}: load_state_dict got the state of hook {state.get('hook')!r}"
            )
        self.steps = int(state["steps"])
        self.raw_bytes = int(state["raw_bytes"])
        self.wire_bytes = int(state["wire_bytes"])
        self.param_buffers.load_state_dict(state["buffers"])

    def __getstate__(self) -> dict[str, Any]:
        """Picklable (torch.save of the state object): everything but the group,
        work buffers and what refers to this process's objects. After unpickling
        the state uses the default group; call bind(ddp_model) before registering
        it, so the per-parameter buffers find their parameters by name."""
        state = dict(self.__dict__)
        state["process_group"] = None
        state["_scratch"] = {}
        state["_param_names"] = {}
        state["_step_params"] = set()
        return state


def check_state(hook: str, state: object, expected: type[HookState]) -> None:
    """Every hook's first act, and register(..., state=)'s: TypeError, naming
    the hook and the state's type, unless `state` is an `expected`. torch's
    register_comm_hook accepts any state, so for a state registered there the
    hook's first call (the first backward, before any collective) is the
    earliest place a state of another hook, or no hook state at all, is caught."""
    if not isinstance(state, expected):
        raise TypeError(
            f"fastcomm.hooks {hook}: the state must be a fastcomm.hooks.{expected.__name__}, got "
            f"{type(state).__module__}.{type(state).__qualname__} (fastcomm.hooks.register(ddp_model, {hook!r}) "
            "makes the right one)"
        )
