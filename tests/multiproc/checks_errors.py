"""Bad input: a clear RuntimeError naming the op, raised before anything is
sent, and the group still works afterwards."""

from __future__ import annotations

import re

import torch
import torch.distributed as dist

R = dist.ReduceOp


def _expect_error(fn, pattern: str) -> None:
    try:
        fn()
    except (RuntimeError, ValueError) as e:
        if not re.search(pattern, str(e)):
            raise AssertionError(f"error {str(e)!r} does not match {pattern!r}") from e
        return
    raise AssertionError(f"no error raised, expected {pattern!r}")


def _group_still_works(world_size: int) -> None:
    t = torch.ones(3)
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((3,), float(world_size))), t


def bad_inputs(rank, world_size):
    n = world_size
    pg = dist.distributed_c10d._get_default_group()
    cases = [
        # op invalid for dtype
        (lambda: dist.all_reduce(torch.ones(2), op=R.BAND), r"fastcomm all_reduce: ReduceOp.BAND needs an integer"),
        (
            lambda: dist.all_reduce(torch.ones(2, dtype=torch.bool), op=R.AVG),
            r"fastcomm all_reduce: ReduceOp.AVG is undefined for bool",
        ),
        (
            lambda: dist.reduce_scatter_tensor(torch.zeros(1), torch.ones(n), op=R.BXOR),
            r"fastcomm reduce_scatter_tensor: ReduceOp.BXOR",
        ),
        (
            lambda: dist.all_reduce(torch.ones(2), op=dist._make_nccl_premul_sum(2.0)),
            r"fastcomm all_reduce: ReduceOp.PREMUL_SUM",
        ),
        # unsupported dtype / layout
        (
            lambda: dist.all_reduce(torch.zeros(2, dtype=torch.uint32)),
            r"fastcomm all_reduce: dtype UInt32 can be moved but not reduced",
        ),
        (
            lambda: dist.reduce_scatter_tensor(
                torch.zeros(1, dtype=torch.float8_e5m2), torch.zeros(n, dtype=torch.float8_e5m2)
            ),
            r"fastcomm reduce_scatter_tensor: dtype Float8_e5m2 can be moved but not reduced",
        ),
        (
            lambda: dist.broadcast(torch.empty(2, dtype=torch.bits16), src=0),
            r"fastcomm broadcast: unsupported dtype Bits16",
        ),
        (lambda: dist.all_reduce(torch.ones(2).to_sparse(), op=R.MAX), r"fastcomm all_reduce: only dense"),
        # root / peer out of range (c10d's Python layer passes group ranks through)
        (lambda: pg.broadcast(torch.ones(2), n + 1), r"fastcomm broadcast: invalid root rank %d" % (n + 1)),
        (lambda: _reduce_bad_root(pg, n), r"fastcomm reduce: invalid root rank -1"),
        (lambda: pg.send([torch.ones(2)], n + 3, 0), r"fastcomm send: invalid peer rank"),
        (lambda: pg.recv([torch.ones(2)], rank, 0), r"fastcomm recv: rank %d cannot recv to or from itself" % rank),
        (lambda: dist.send(torch.ones(4)[::2], dst=(rank + 1) % n), r"fastcomm send: the tensor must be contiguous"),
        # wrong list lengths and sizes
        (
            lambda: dist.all_gather([torch.zeros(2)] * (n + 1), torch.ones(2)),
            r"fastcomm all_gather: expected %d output tensors" % n,
        ),
        (
            lambda: dist.all_gather([torch.zeros(3)] * n, torch.ones(2)),
            r"fastcomm all_gather: output\[0\] has 3 elements",
        ),
        (
            lambda: pg.allgather([[torch.zeros(2, dtype=torch.int32)] * n], [torch.ones(2)]),
            r"fastcomm all_gather: output\[0\] has dtype Int",
        ),
        (
            lambda: dist.all_gather_into_tensor(torch.zeros(2 * n + 1), torch.ones(2)),
            r"fastcomm all_gather_into_tensor: output \(world_size \* input\) has",
        ),
        (
            lambda: dist.reduce_scatter(torch.zeros(2), [torch.ones(2)] * (n + 1)),
            r"fastcomm reduce_scatter: expected %d input tensors" % n,
        ),
        (
            lambda: dist.reduce_scatter_tensor(torch.zeros(2), torch.ones(2 * n + 2)),
            r"fastcomm reduce_scatter_tensor: input \(world_size \* output\)",
        ),
        (
            lambda: dist.all_to_all([torch.zeros(1)] * n, [torch.ones(1)] * (n + 1)),
            r"fastcomm all_to_all: expected %d input tensors" % n,
        ),
        (
            lambda: pg.alltoall([torch.zeros(1, dtype=torch.int8)] * n, [torch.ones(1)] * n),
            r"fastcomm all_to_all: output\[0\] has dtype",
        ),
        # bad split sizes
        (
            lambda: dist.all_to_all_single(torch.zeros(n), torch.ones(n), input_split_sizes=[1] * (n + 1)),
            r"fastcomm all_to_all_single: input_split_sizes has %d entries" % (n + 1),
        ),
        (
            lambda: dist.all_to_all_single(torch.zeros(n), torch.ones(n), input_split_sizes=[-1] + [1] * (n - 2) + [2]),
            r"input_split_sizes\[0\] is negative",
        ),
        (
            lambda: dist.all_to_all_single(torch.zeros(n), torch.ones(n), output_split_sizes=[2] * n),
            r"output_split_sizes add up to %d" % (2 * n),
        ),
        (lambda: dist.all_to_all_single(torch.zeros(n + 1), torch.ones(n + 1)), r"must be divisible by the group size"),
        (lambda: dist.all_to_all_single(torch.zeros(n, 2), torch.ones(n, 3)), r"same shape past dim 0"),
        # outputs whose elements share memory (expand()ed views)
        (
            lambda: dist.all_reduce(torch.ones(1).expand(4)),
            r"fastcomm all_reduce: a tensor the op writes has elements that share memory \(shape \[4\], strides \[0\]",
        ),
        (
            lambda: dist.all_gather_into_tensor(torch.zeros(1).expand(2 * n), torch.ones(2)),
            r"fastcomm all_gather_into_tensor: a tensor the op writes has elements that share memory",
        ),
        # gather/scatter lists
        (
            lambda: _bad_gather(pg, n),
            r"fastcomm gather: (gather_list\[0\] has 3 elements|only the root \(rank 0\) may pass)",
        ),
        (
            lambda: _bad_scatter(pg, n),
            r"fastcomm scatter: (expected %d scatter_list|only the root \(rank 0\) may pass)" % n,
        ),
    ]
    for fn, pattern in cases:
        _expect_error(fn, pattern)
        _group_still_works(world_size)
    return len(cases)


def _reduce_bad_root(pg, n):
    opts = dist.ReduceOptions()
    opts.rootRank = -1
    return pg.reduce([torch.ones(2)], opts)


def _bad_gather(pg, n):
    """Root passes wrong-sized outputs; the others pass outputs they must not."""
    opts = dist.GatherOptions()
    opts.rootRank = 0
    return pg.gather([[torch.zeros(3)] * n], [torch.ones(2)], opts)


def _bad_scatter(pg, n):
    opts = dist.ScatterOptions()
    opts.rootRank = 0
    return pg.scatter([torch.zeros(2)], [[torch.ones(2)] * (n + 1)], opts)


def cuda_without_nccl(rank, world_size):
    """On a machine without NCCL or GPU, a CUDA tensor's error says why (checked via the C++ reason string)."""
    import fastcomm._backend as backend

    reason = backend._cuda_unavailable_reason()
    assert reason in ("this torch build has no NCCL", "no CUDA device is visible"), reason


def destroyed_subgroup_handle(rank, world_size):
    """A subgroup's handle used after destroy_process_group raises on every rank
    (through torch's function and through the backend object), whenever each
    rank gets there, and the default group still works."""
    import time

    group = dist.new_group(list(range(world_size)))
    backend = group._get_backend(torch.device("cpu"))
    t = torch.ones(4)
    dist.all_reduce(t, group=group)
    assert torch.equal(t, torch.full((4,), float(world_size)))
    dist.destroy_process_group(group)
    time.sleep(0.3 * rank)  # ranks arrive apart
    for call in (
        lambda: dist.all_reduce(torch.ones(4), group=group),
        lambda: backend.allreduce([torch.ones(4)]).wait(),
    ):
        try:
            call()
        except (RuntimeError, ValueError) as error:
            assert re.search(r"this group was shut down on this rank|not initialized", str(error)), error
        else:
            raise AssertionError("a destroyed group's handle ran a collective")
    _group_still_works(world_size)
