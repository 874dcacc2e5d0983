"""One small spec per collective (the nccl-tests idea): how its buffers are
sized and filled, how it runs out of place and in place, its bus-bandwidth
factor, and the exact result to check against. This is the one table of
collectives: fastcomm-bench, the side-by-side benchmarks under benchmarks/ and
the C++ timing loop (_C.bench_loop, through each spec's `c10d_op`) all use it.

Inputs are small integers chosen per (rank, element) so the exact result is
known in every dtype and any reduction order: sums stay below 5 * nranks,
products below 4 (one rank contributes a 2 or 3 per element, the others 1).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import torch
import torch.distributed as dist

DTYPES = {
    "float": torch.float32,
    "half": torch.float16,
    "bfloat16": torch.bfloat16,
    "double": torch.float64,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "int32": torch.int32,
    "int64": torch.int64,
}
OPS = {
    "sum": dist.ReduceOp.SUM,
    "prod": dist.ReduceOp.PRODUCT,
    "min": dist.ReduceOp.MIN,
    "max": dist.ReduceOp.MAX,
    "avg": dist.ReduceOp.AVG,
}
# Tolerance of AVG on floating types: backends may scale before or after summing.
AVG_RTOL = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2, torch.float32: 1e-6, torch.float64: 1e-12}


def input_pattern(rank: int, numel: int, dtype: torch.dtype, op: str, nranks: int, offset: int = 0) -> torch.Tensor:
    """The values `rank` contributes at elements offset .. offset+numel-1."""
    i = torch.arange(offset, offset + numel, dtype=torch.int64)
    if op == "prod":
        values = 1 + ((i + rank) % nranks == 0).to(torch.int64) * (1 + i % 2)
    else:
        values = (i * 7 + rank * 3) % 5 + 1
    return values.to(dtype)


def reduce_exact(parts: list[torch.Tensor], op: str, dtype: torch.dtype) -> torch.Tensor:
    """The exact reduction of `parts` by `op` (sum, avg, prod, min, max),
    computed in float64 or int64 and returned in `dtype`."""
    wide = torch.float64 if dtype.is_floating_point else torch.int64
    stack = torch.stack([p.to(wide) for p in parts])
    if op in ("sum", "avg"):
        out = stack.sum(0)
        if op == "avg":
            out = out / len(parts) if dtype.is_floating_point else torch.div(out, len(parts), rounding_mode="trunc")
    elif op == "prod":
        out = stack.prod(0)
    elif op == "min":
        out = stack.min(0).values
    else:
        out = stack.max(0).values
    return out.to(dtype)


def count_wrong(actual: torch.Tensor, expected: torch.Tensor, op: str) -> int:
    """Number of elements of `actual` that differ from `expected` (exact, except AVG on floats)."""
    actual = actual.detach().cpu().reshape(-1)
    expected = expected.reshape(-1)
    if actual.numel() != expected.numel():
        return max(actual.numel(), expected.numel())
    if op == "avg" and expected.dtype.is_floating_point:
        a, e = actual.double(), expected.double()
        bad = (a - e).abs() > AVG_RTOL[expected.dtype] * e.abs()
        return int(bad.sum().item())
    return int((actual != expected).sum().item())


@dataclasses.dataclass
class Buffers:
    """One prepared call. `run(group, async_op)` issues it and returns the works to
    wait for; `refill()` restores the inputs; `wrong()` counts wrong elements of
    this rank's results, which live in `result`."""

    run: Callable[[dist.ProcessGroup, bool], list]
    refill: Callable[[], None]
    wrong: Callable[[], int]
    result: torch.Tensor
    # The input and output tensors of the call, for the backend-object and C++
    # timing paths (CollectiveSpec.backend_call, _C.bench_loop).
    send: torch.Tensor
    recv: torch.Tensor


@dataclasses.dataclass(frozen=True)
class CollectiveSpec:
    """One collective for the harness: its buffers, the call, its bus-bandwidth
    factor and the exact result to check."""

    name: str
    reduces: bool  # takes -o
    rooted: bool  # takes -r
    # Which of nccl-tests' two columns exist. torch's all_reduce, broadcast and
    # reduce are in place only; all_to_all_single, gather, scatter and p2p
    # cannot alias their buffers. A missing column prints N/A.
    out_of_place: bool
    in_place: bool
    bus_factor: Callable[[int], float]
    # prepare(count, dtype, rank, nranks, op, root, in_place, device) -> Buffers
    prepare: Callable[..., Buffers]
    # buffers are split per rank, so the count is rounded down to a multiple of nranks
    split: bool = False
    # c10d's name of the call the backend sees ("ALLREDUCE", ...), for _C.bench_loop
    # ("SEND": sendrecv's send to rank + 1 and receive from rank - 1);
    # None: not timed through the backend object or C++ (lists).
    c10d_op: str | None = None

    def backend_call(self, backend, buffers: Buffers, op: str, root: int):
        """Issues the call on a c10d backend object directly (no torch wrapper); returns its Work."""
        if self.c10d_op is None:
            raise ValueError(f"{self.name} is not timed through the backend object")
        return _BACKEND_CALLS[self.c10d_op](backend, buffers, op, root)

    def count_for(self, nbytes: int, element_size: int, nranks: int) -> int:
        count = nbytes // element_size
        return count // nranks * nranks if self.split else count


def _works(*works) -> list:
    return [w for w in works if w is not None]


def _all_reduce(count, dtype, rank, n, op, root, in_place, device):
    original = input_pattern(rank, count, dtype, op, n).to(device)
    buf = original.clone()
    expected = reduce_exact([input_pattern(r, count, dtype, op, n) for r in range(n)], op, dtype)
    return Buffers(
        run=lambda g, a: _works(dist.all_reduce(buf, op=OPS[op], group=g, async_op=a)),
        refill=lambda: buf.copy_(original),
        wrong=lambda: count_wrong(buf, expected, op),
        result=buf,
        send=buf,
        recv=buf,
    )


def _broadcast(count, dtype, rank, n, op, root, in_place, device):
    original = input_pattern(rank, count, dtype, op, n).to(device)
    buf = original.clone()
    expected = input_pattern(root, count, dtype, op, n)
    return Buffers(
        run=lambda g, a: _works(dist.broadcast(buf, src=root, group=g, async_op=a)),
        refill=lambda: buf.copy_(original),
        wrong=lambda: count_wrong(buf, expected, "sum"),
        result=buf,
        send=buf,
        recv=buf,
    )


def _reduce(count, dtype, rank, n, op, root, in_place, device):
    original = input_pattern(rank, count, dtype, op, n).to(device)
    buf = original.clone()
    expected = reduce_exact([input_pattern(r, count, dtype, op, n) for r in range(n)], op, dtype)
    return Buffers(
        run=lambda g, a: _works(dist.reduce(buf, dst=root, op=OPS[op], group=g, async_op=a)),
        refill=lambda: buf.copy_(original),
        wrong=lambda: count_wrong(buf, expected, op) if rank == root else 0,  # only the root's result is defined
        result=buf,
        send=buf,
        recv=buf,
    )


def _all_gather(count, dtype, rank, n, op, root, in_place, device):
    chunk = count // n
    out = torch.zeros(count, dtype=dtype, device=device)
    mine = input_pattern(rank, chunk, dtype, op, n, offset=rank * chunk).to(device)
    send = out.narrow(0, rank * chunk, chunk) if in_place else mine.clone()
    expected = torch.cat([input_pattern(r, chunk, dtype, op, n, offset=r * chunk) for r in range(n)])

    def refill():
        out.zero_()
        send.copy_(mine)

    return Buffers(
        run=lambda g, a: _works(dist.all_gather_into_tensor(out, send, group=g, async_op=a)),
        refill=refill,
        wrong=lambda: count_wrong(out, expected, "sum"),
        result=out,
        send=send,
        recv=out,
    )


def _reduce_scatter(count, dtype, rank, n, op, root, in_place, device):
    chunk = count // n
    original = input_pattern(rank, count, dtype, op, n).to(device)
    send = original.clone()
    recv = send.narrow(0, rank * chunk, chunk) if in_place else torch.zeros(chunk, dtype=dtype, device=device)
    full = reduce_exact([input_pattern(r, count, dtype, op, n) for r in range(n)], op, dtype)
    expected = full[rank * chunk : (rank + 1) * chunk]
    return Buffers(
        run=lambda g, a: _works(dist.reduce_scatter_tensor(recv, send, op=OPS[op], group=g, async_op=a)),
        refill=lambda: send.copy_(original),
        wrong=lambda: count_wrong(recv, expected, op),
        result=recv,
        send=send,
        recv=recv,
    )


def _all_to_all(count, dtype, rank, n, op, root, in_place, device):
    chunk = count // n

    def block(src: int, dst: int) -> torch.Tensor:  # what src sends to dst
        return input_pattern(src, chunk, dtype, op, n, offset=(src * n + dst) * chunk)

    send = torch.cat([block(rank, d) for d in range(n)]).to(device)
    recv = torch.zeros(count, dtype=dtype, device=device)
    expected = torch.cat([block(s, rank) for s in range(n)])
    return Buffers(
        run=lambda g, a: _works(dist.all_to_all_single(recv, send, group=g, async_op=a)),
        refill=recv.zero_,
        wrong=lambda: count_wrong(recv, expected, "sum"),
        result=recv,
        send=send,
        recv=recv,
    )


def _gather(count, dtype, rank, n, op, root, in_place, device):
    chunk = count // n
    send = input_pattern(rank, chunk, dtype, op, n, offset=rank * chunk).to(device)
    out = torch.zeros(count, dtype=dtype, device=device)
    pieces = list(out.chunk(n)) if rank == root else None
    expected = torch.cat([input_pattern(r, chunk, dtype, op, n, offset=r * chunk) for r in range(n)])
    return Buffers(
        run=lambda g, a: _works(dist.gather(send, gather_list=pieces, dst=root, group=g, async_op=a)),
        refill=out.zero_,
        wrong=lambda: count_wrong(out, expected, "sum") if rank == root else 0,
        result=out,
        send=send,
        recv=out,
    )


def _scatter(count, dtype, rank, n, op, root, in_place, device):
    chunk = count // n
    full = input_pattern(root, count, dtype, op, n).to(device)
    pieces = list(full.chunk(n)) if rank == root else None
    recv = torch.zeros(chunk, dtype=dtype, device=device)
    expected = input_pattern(root, count, dtype, op, n)[rank * chunk : (rank + 1) * chunk]
    return Buffers(
        run=lambda g, a: _works(dist.scatter(recv, scatter_list=pieces, src=root, group=g, async_op=a)),
        refill=recv.zero_,
        wrong=lambda: count_wrong(recv, expected, "sum"),
        result=recv,
        send=full,
        recv=recv,
    )


def _sendrecv(count, dtype, rank, n, op, root, in_place, device):
    """nccl-tests' sendrecv: every rank sends to the next and receives from the previous."""
    nxt, prv = (rank + 1) % n, (rank - 1) % n
    send = input_pattern(rank, count, dtype, op, n).to(device)
    recv = torch.zeros(count, dtype=dtype, device=device)
    expected = input_pattern(prv, count, dtype, op, n)

    def run(g, a):
        if n == 1:
            recv.copy_(send)
            return []
        ops = [
            dist.P2POp(dist.isend, send, group=g, group_peer=nxt),
            dist.P2POp(dist.irecv, recv, group=g, group_peer=prv),
        ]
        works = dist.batch_isend_irecv(ops)
        if a:
            return works
        for w in works:
            w.wait()
        return []

    return Buffers(
        run=run, refill=recv.zero_, wrong=lambda: count_wrong(recv, expected, "sum"), result=recv, send=send, recv=recv
    )


def _options(kind, op: str | None = None, root: int | None = None):
    options = kind()
    options.asyncOp = False  # the caller waits at once, as dist.* does without async_op=True
    if op is not None:
        options.reduceOp = OPS[op]
    if root is not None:
        options.rootRank = root
    return options


# c10d_op -> the call on a backend object (what _C.bench_loop issues in C++).
_BACKEND_CALLS = {
    "ALLREDUCE": lambda b, buf, op, root: b.allreduce([buf.send], _options(dist.AllreduceOptions, op)),
    "BROADCAST": lambda b, buf, op, root: b.broadcast([buf.send], _options(dist.BroadcastOptions, root=root)),
    "REDUCE": lambda b, buf, op, root: b.reduce([buf.send], _options(dist.ReduceOptions, op, root)),
    "_ALLGATHER_BASE": lambda b, buf, op, root: b._allgather_base(buf.recv, buf.send),
    "_REDUCE_SCATTER_BASE": lambda b, buf, op, root: b._reduce_scatter_base(
        buf.recv, buf.send, _options(dist.ReduceScatterOptions, op)
    ),
    "ALLTOALL_BASE": lambda b, buf, op, root: b.alltoall_base(buf.recv, buf.send, [], []),
    "SEND": lambda b, buf, op, root: _Exchange(b, buf),
}


class _Exchange:
    """sendrecv on a backend object: send to rank + 1, receive from rank - 1; wait() waits both."""

    def __init__(self, backend, buffers: Buffers) -> None:
        rank, n = backend.rank(), backend.size()
        self.works = [backend.send([buffers.send], (rank + 1) % n, 0), backend.recv([buffers.recv], (rank - 1) % n, 0)]

    def wait(self) -> bool:
        for work in self.works:
            work.wait()
        return True


COLLECTIVES = {
    c.name: c
    for c in [
        CollectiveSpec(
            "all_reduce", True, False, False, True, lambda n: 2 * (n - 1) / n, _all_reduce, c10d_op="ALLREDUCE"
        ),
        CollectiveSpec(
            "all_gather",
            False,
            False,
            True,
            True,
            lambda n: (n - 1) / n,
            _all_gather,
            split=True,
            c10d_op="_ALLGATHER_BASE",
        ),
        CollectiveSpec(
            "reduce_scatter",
            True,
            False,
            True,
            True,
            lambda n: (n - 1) / n,
            _reduce_scatter,
            split=True,
            c10d_op="_REDUCE_SCATTER_BASE",
        ),
        CollectiveSpec("broadcast", False, True, False, True, lambda n: 1.0, _broadcast, c10d_op="BROADCAST"),
        CollectiveSpec("reduce", True, True, False, True, lambda n: 1.0, _reduce, c10d_op="REDUCE"),
        CollectiveSpec(
            "all_to_all",
            False,
            False,
            True,
            False,
            lambda n: (n - 1) / n,
            _all_to_all,
            split=True,
            c10d_op="ALLTOALL_BASE",
        ),
        CollectiveSpec("sendrecv", False, False, True, False, lambda n: 1.0, _sendrecv, c10d_op="SEND"),
        CollectiveSpec("gather", False, True, True, False, lambda n: (n - 1) / n, _gather, split=True),
        CollectiveSpec("scatter", False, True, True, False, lambda n: (n - 1) / n, _scatter, split=True),
    ]
}
