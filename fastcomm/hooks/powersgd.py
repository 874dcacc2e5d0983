"""PowerSGD (Vogels et al. 2019): rank-r approximation of every gradient
matrix by one step of power iteration, with error feedback and warm start.

Per bucket and step (two all_reduces; torch's hook makes three):
  M = grad + error for every tensor worth compressing, viewed as (n, m) with
      n = shape[0]; tensors of one dimension, or whose r(n + m) * min_compression_rate
      >= n * m, travel uncompressed (pre-scaled by 1/world_size) in P's all_reduce
  P = M Q            (Q from the previous step: warm start)
  all_reduce(P and the uncompressed values); orthogonalize P (Gram-Schmidt,
      twice per column)
  Q = M^T P;  all_reduce(Q)
  bucket = P (Q / world_size)^T;  error = M - bucket
Small matrices of one shape are handled as one batch (torch.bmm, batched
Gram-Schmidt; batch_tensors_with_same_shape, on by default), so a model with many equal small layers costs a few torch calls
per bucket instead of several per tensor; large ones are used in place (no
copy); Gram-Schmidt is batched over each shape either way. The 1/world_size is
folded into Q (small) rather than applied over the bucket. No step reads a device value on the
host (no .item(), no synchronize). Compression starts after
`start_powerSGD_iter` steps of plain all_reduce (torch's name and default, 1000). Error and
Q buffers are per bucket in the state (checkpointed); they restart when a
bucket's layout changes (DDP rebuilds its buckets after the first step).
"""

import logging
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from fastcomm.hooks import _options
from fastcomm.hooks.allreduce import average
from fastcomm.hooks.state import HookState, check_state

_ops = torch.ops.fastcomm
_log = logging.getLogger(__name__)

# Matrices of one shape are batched (stacked, one bmm) when smaller than this;
# larger ones are used in place, one mm each: the stack's copy would cost more
# than the per-call overhead it saves.
_BATCH_MAX_ELEMENTS = 1 << 16


class PowerSGDState(HookState):
    """``PowerSGDState(process_group=None, matrix_approximation_rank=1, start_powerSGD_iter=1_000,
    min_compression_rate=2, use_error_feedback=True, warm_start=True, orthogonalization_epsilon=0,
    random_seed=0, compression_stats_logging_frequency=10_000, batch_tensors_with_same_shape=True)``

    The arguments, their meaning and their defaults are those of torch's
    ``torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook.PowerSGDState``,
    so a state written for torch's hook works here:

    matrix_approximation_rank: the approximation rank r (>= 1).
    start_powerSGD_iter: steps of plain all_reduce before compressing.
    min_compression_rate: compress a matrix only when that saves at least this factor.
    use_error_feedback, warm_start: see the module's docstring.
    orthogonalization_epsilon: added to each column's norm in Gram-Schmidt.
    random_seed: the initial Q, the same on every rank.
    compression_stats_logging_frequency: compression_stats() is logged (INFO,
      logger ``fastcomm.hooks.powersgd``) every this many compressed steps.

    Where fastcomm differs from torch:

    - process_group may be left out (None: the default group); torch requires it.
    - start_powerSGD_iter may be 0 or 1 with error feedback or warm start. torch
      refuses them because DDP rebuilds its buckets after the first step and
      its per-bucket buffers would no longer fit; fastcomm's follow their
      parameters across the rebuild.
    - batch_tensors_with_same_shape defaults to True (torch: False): only
      matrices below 65536 elements are stacked into one batch (larger ones are
      compressed in place either way), so the stack's copy stays small, which
      is torch's reason for False, while a model with many equal small layers
      saves most of its per-matrix calls.
    - the matrix rank is ``matrix_approximation_rank``; there is no ``rank``
      attribute (torch's state has none either); this process's rank in the
      group is ``group_rank``.

    fastcomm's former names still work, with a DeprecationWarning: rank,
    start_step, error_feedback, seed.
    """

    hook_name = "powersgd"

    @_options.renamed(
        "fastcomm.hooks powersgd",
        {
            "rank": "matrix_approximation_rank",
            "start_step": "start_powerSGD_iter",
            "error_feedback": "use_error_feedback",
            "seed": "random_seed",
        },
    )
    def __init__(
        self,
        process_group: dist.ProcessGroup | None = None,
        matrix_approximation_rank: int = 1,
        start_powerSGD_iter: int = 1_000,
        min_compression_rate: float = 2,
        use_error_feedback: bool = True,
        warm_start: bool = True,
        orthogonalization_epsilon: float = 0,
        random_seed: int = 0,
        compression_stats_logging_frequency: int = 10_000,
        batch_tensors_with_same_shape: bool = True,
    ) -> None:
        super().__init__(process_group)
        name = self.hook_name
        self.matrix_approximation_rank = _options.positive_int(
            name, "matrix_approximation_rank", matrix_approximation_rank
        )
        self.start_powerSGD_iter = _options.non_negative_int(name, "start_powerSGD_iter", start_powerSGD_iter)
        self.min_compression_rate = _options.non_negative_float(name, "min_compression_rate", min_compression_rate)
        self.use_error_feedback = _options.flag(name, "use_error_feedback", use_error_feedback)
        self.warm_start = _options.flag(name, "warm_start", warm_start)
        self.orthogonalization_epsilon = _options.non_negative_float(
            name, "orthogonalization_epsilon", orthogonalization_epsilon
        )
        self.random_seed = _options.non_negative_int(name, "random_seed", random_seed)
        # as torch: 0 logs every step
        self.compression_stats_logging_frequency = max(
            1,
            _options.non_negative_int(name, "compression_stats_logging_frequency", compression_stats_logging_frequency),
        )
        self.batch_tensors_with_same_shape = _options.flag(
            name, "batch_tensors_with_same_shape", batch_tensors_with_same_shape
        )
        # elements of the buckets of compressed steps, and of what they became (P, Q
        # and the uncompressed gradients): torch's compression_stats() counters
        self.total_numel_before_compression = 0
        self.total_numel_after_compression = 0
        self._next_stats_report = 0
        self._plans: dict[int, _BucketPlan] = {}

    @property
    def rank(self):
        raise AttributeError(
            "fastcomm.hooks powersgd: PowerSGDState has no attribute 'rank': the approximation rank is "
            "matrix_approximation_rank, this process's rank in the group is group_rank"
        )

    def compresses(self, rows: int, cols: int) -> bool:
        """Whether a rows x cols gradient is compressed: its rank-r factors are
        smaller than the matrix by at least min_compression_rate."""
        r = self.matrix_approximation_rank
        return r < min(rows, cols) and (rows + cols) * r * self.min_compression_rate < rows * cols

    def compression_stats(self) -> tuple[float, int, int]:
        """torch's: (compression rate, elements before compression, elements after
        it) over the compressed steps so far; the rate is 0 before the first."""
        before, after = self.total_numel_before_compression, self.total_numel_after_compression
        return (before / after if after else 0, before, after)

    def _count_compressed(self, bucket_numel: int, plan: "_BucketPlan", new_step: bool) -> None:
        self.total_numel_before_compression += bucket_numel
        self.total_numel_after_compression += plan.p_numel + plan.q_numel + plan.uncompressed_numel
        if new_step and self.steps >= self._next_stats_report:
            rate, before, after = self.compression_stats()
            _log.info(
                "fastcomm.hooks powersgd: step %d, %d elements before compression, %d after, rate %.3g",
                self.steps,
                before,
                after,
                rate,
            )
            self._next_stats_report = self.steps + self.compression_stats_logging_frequency

    def plan_for(self, bucket: dist.GradBucket, grads: list[torch.Tensor]) -> "_BucketPlan":
        """Which of the bucket's gradients are compressed and how they are batched
        (made once per bucket layout, then reused)."""
        layout = self.bucket_layout(bucket)
        signature = (bucket.buffer().dtype, layout, tuple(tuple(g.shape) for g in grads))
        plan = self._plans.get(bucket.index())
        if plan is None or plan.signature != signature:
            plan = _BucketPlan.make(signature, [key for key, _, _ in layout], grads, self)
            self._plans[bucket.index()] = plan
        return plan

    def initial_q(
        self, bucket_index: int, numel: int, dtype: torch.dtype, device: torch.device, step: int = 0
    ) -> torch.Tensor:
        """Q before the first step (warm start), or of step `step` (without warm
        start: a new projection every step, as torch draws one, so no direction
        of the gradient stays unseen): the same normal draws on every rank, from
        a generator on the bucket's device (no host copy)."""
        seed = self.random_seed * 1_000_003 + step * 65_537 + bucket_index
        generator = torch.Generator(device=device).manual_seed(seed)
        return torch.randn(numel, generator=generator, dtype=torch.float32, device=device).to(dtype)

    def state_dict(self) -> dict[str, Any]:
        """HookState.state_dict() (its buffers and counters) and torch's compression counters."""
        state = super().state_dict()
        state["numel_before_compression"] = self.total_numel_before_compression
        state["numel_after_compression"] = self.total_numel_after_compression
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores what state_dict returned."""
        super().load_state_dict(state)
        self.total_numel_before_compression = int(state.get("numel_before_compression", 0))
        self.total_numel_after_compression = int(state.get("numel_after_compression", 0))

    def __getstate__(self):
        state = super().__getstate__()
        state["_plans"] = {}
        return state


@dataclass
class _MatrixGroup:
    """Gradients of one matrix shape (rows, cols) in a bucket, batched."""

    indices: list[int]  # into bucket.gradients()
    rows: int
    cols: int
    p_offset: int  # into the P buffer: a (len(indices), rows, r) block
    q_offset: int  # into the Q buffer: a (len(indices), cols, r) block
    error_offset: int  # into the error buffer: a (len(indices), rows, cols) block


@dataclass
class _BucketPlan:
    signature: tuple
    groups: list[_MatrixGroup]
    uncompressed: list[int]  # indices of gradients sent as they are
    p_numel: int  # P blocks; the uncompressed values follow them in the same buffer
    q_numel: int
    error_numel: int
    uncompressed_numel: int
    q_layout: tuple  # per-parameter segments of Q and of the error (parameter_buffers.Layout)
    error_layout: tuple

    @staticmethod
    def make(signature: tuple, keys: list[str], grads: list[torch.Tensor], state: PowerSGDState) -> "_BucketPlan":
        r = state.matrix_approximation_rank
        by_shape: dict[tuple[int, int], list[int]] = {}
        uncompressed: list[int] = []
        for i, g in enumerate(grads):
            rows = g.shape[0] if g.dim() >= 2 else 0
            cols = g.numel() // rows if rows else 0
            if g.dim() >= 2 and state.compresses(rows, cols):
                by_shape.setdefault((rows, cols), []).append(i)
            else:
                uncompressed.append(i)
        groups, p, q, e, q_layout, error_layout = [], 0, 0, 0, [], []
        for (rows, cols), indices in by_shape.items():
            groups.append(_MatrixGroup(indices, rows, cols, p, q, e))
            for i in indices:
                q_layout.append((keys[i], q, cols * r))
                error_layout.append((keys[i], e, rows * cols))
                p, q, e = p + rows * r, q + cols * r, e + rows * cols
        uncompressed_numel = sum(grads[i].numel() for i in uncompressed)
        return _BucketPlan(
            signature, groups, uncompressed, p, q, e, uncompressed_numel, tuple(q_layout), tuple(error_layout)
        )


# One matrix's products: fastcomm's streaming kernels for float32 on CPU (a
# general GEMM is 3-20x slower there for rank r this small), torch's elsewhere.
def _fused(m: torch.Tensor) -> bool:
    return m.device.type == "cpu" and m.dtype == torch.float32


def _project(m: torch.Tensor, q: torch.Tensor, p: torch.Tensor) -> None:
    """p = m q"""
    if _fused(m):
        _ops.compress_powersgd_project(m, q, p)
    else:
        torch.mm(m, q, out=p)


def _back(m: torch.Tensor, p: torch.Tensor, q: torch.Tensor) -> None:
    """q = m^T p"""
    if _fused(m):
        _ops.compress_powersgd_back(m, p, q)
    else:
        torch.mm(m.t(), p, out=q)


def _approximate(p: torch.Tensor, q: torch.Tensor, m: torch.Tensor, error: torch.Tensor | None) -> None:
    """error = m - p q^T (if given), then m = p q^T"""
    if _fused(m):
        _ops.compress_powersgd_approximate(p, q, m, error)
        return
    if error is not None:
        error.copy_(m)
    torch.mm(p, q.t(), out=m)
    if error is not None:
        error.sub_(m)


def _orthogonalize(p: torch.Tensor, epsilon: float) -> None:
    """Gram-Schmidt with reorthogonalization on the columns of every (rows, r)
    matrix of the batch p, in place. Each column loses its components along the
    previous ones twice ("twice is enough"): when the gradient has rank below
    r, the later columns of P = MQ are rounding noise, and one pass (torch's
    hook makes one) leaves them far from orthogonal, which spoils P P^T M."""
    r = p.shape[2]
    for i in range(r):
        col = p[:, :, i : i + 1]
        if i > 0:
            previous = p[:, :, :i]
            for _ in range(2):
                col.sub_(torch.bmm(previous, torch.bmm(previous.transpose(1, 2), col)))
        norm = torch.linalg.vector_norm(col, dim=1, keepdim=True)
        # epsilon 0 (the default): exact normalization, a zero column stays zero
        # (no host check). A positive epsilon must be far below the gradients'
        # magnitude: 1e-8 wrecked a 1e-5-scale, nearly rank-1 gradient.
        col.div_(norm.add_(epsilon) if epsilon > 0 else torch.where(norm > 0, norm, torch.ones_like(norm)))


def powersgd_hook(state: PowerSGDState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP comm hook: the bucket's mean, matrices as rank-r PowerSGD approximations."""
    check_state("powersgd", state, PowerSGDState)
    steps_before = state.steps
    state._count_bucket(bucket)  # steps now counts this step too
    if state.steps <= state.start_powerSGD_iter:
        return average(state, bucket)
    buffer = bucket.buffer()
    grads = bucket.gradients()
    plan = state.plan_for(bucket, grads)
    state._count_compressed(buffer.numel(), plan, new_step=state.steps != steps_before)
    index, dtype, device, r = bucket.index(), buffer.dtype, buffer.device, state.matrix_approximation_rank
    p_all = state.scratch(index, "p", plan.p_numel + plan.uncompressed_numel, dtype, device)
    if state.warm_start:

        def init_q(numel: int, dt: torch.dtype, dev: torch.device) -> torch.Tensor:
            return state.comm_buffer(numel, dt, dev).copy_(state.initial_q(index, numel, dt, dev))

        q_all = state.param_buffers.get(index, "q", plan.q_layout, plan.q_numel, dtype, device, init_q)
    else:
        q_all = state.scratch(index, "q", plan.q_numel, dtype, device)
        q_all.copy_(state.initial_q(index, plan.q_numel, dtype, device, step=state.steps))
    error_all = None
    if state.use_error_feedback:
        error_all = state.param_buffers.get(index, "error", plan.error_layout, plan.error_numel, dtype, device)

    def p_of(g: _MatrixGroup) -> torch.Tensor:
        return p_all.narrow(0, g.p_offset, len(g.indices) * g.rows * r).view(len(g.indices), g.rows, r)

    def q_of(g: _MatrixGroup) -> torch.Tensor:
        return q_all.narrow(0, g.q_offset, len(g.indices) * g.cols * r).view(len(g.indices), g.cols, r)

    def error_of(g: _MatrixGroup) -> torch.Tensor:
        return error_all.narrow(0, g.error_offset, len(g.indices) * g.rows * g.cols).view(
            len(g.indices), g.rows, g.cols
        )

    matrices = []
    for g in plan.groups:
        if len(g.indices) == 1 or g.rows * g.cols >= _BATCH_MAX_ELEMENTS or not state.batch_tensors_with_same_shape:
            # views of the gradients themselves (no copy); M = grad + error in place:
            # the bucket is overwritten with the result anyway
            m = [grads[i].view(g.rows, g.cols) for i in g.indices]
            if error_all is not None:
                torch._foreach_add_(m, list(error_of(g).unbind(0)))
            for j, mj in enumerate(m):
                _project(mj, q_of(g)[j], p_of(g)[j])
        else:
            m = torch.stack([grads[i].view(g.rows, g.cols) for i in g.indices])
            if error_all is not None:
                m.add_(error_of(g))
            torch.bmm(m, q_of(g), out=p_of(g))
        matrices.append(m)
    uncompressed = [grads[i] for i in plan.uncompressed]
    tail = p_all.narrow(0, plan.p_numel, plan.uncompressed_numel)
    if uncompressed:
        _ops.compress_multi_tensor_pack(uncompressed, tail, 1.0 / state.world_size, float("inf"))

    def compute_q(fut: torch.futures.Future) -> torch.Tensor:
        fut.value()  # re-raises the collective's error (see HookState.all_reduce)
        if uncompressed:
            _ops.compress_multi_tensor_unpack(tail, uncompressed, 1.0)
        for g, m in zip(plan.groups, matrices):
            p = p_of(g)
            _orthogonalize(p, state.orthogonalization_epsilon)
            if isinstance(m, list):
                for j, mj in enumerate(m):
                    _back(mj, p[j], q_of(g)[j])
            else:
                torch.bmm(m.transpose(1, 2), p, out=q_of(g))
        if plan.q_numel == 0:
            return q_all
        return state.all_reduce(q_all).wait()[0]

    def decompress(fut: torch.futures.Future) -> torch.Tensor:
        fut.value()
        q_all.mul_(1.0 / state.world_size)  # Q is small: the mean folded in here, not over the bucket
        for g, m in zip(plan.groups, matrices):
            p, q = p_of(g), q_of(g)
            error = error_of(g) if error_all is not None else None
            if isinstance(m, list):
                for j, mj in enumerate(m):  # the approximation, straight into the bucket
                    _approximate(p[j], q[j], mj, error[j] if error is not None else None)
            else:
                approx = torch.bmm(p, q.transpose(1, 2))
                if error is not None:
                    torch.sub(m, approx, out=error)
                torch._foreach_copy_(
                    [grads[i] for i in g.indices], [a.view(grads[i].shape) for i, a in zip(g.indices, approx)]
                )
            if error is not None:
                torch.nan_to_num_(error, nan=0.0, posinf=0.0, neginf=0.0)
        return buffer

    if p_all.numel() == 0:
        first = torch.futures.Future()
        first.set_result([p_all])
    else:
        first = state.all_reduce(p_all)
    return first.then(compute_q).then(decompress)
