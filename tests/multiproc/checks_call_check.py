"""Calls that differ between ranks on the paths that reach Gloo
(csrc/algorithms/call_check.h): every rank raises "ranks disagree", nothing is
returned as a result, and the group still works afterwards."""

from __future__ import annotations

import torch
import torch.distributed as dist

R = dist.ReduceOp


def _expect_disagreement(call) -> str:
    try:
        call()
    except RuntimeError as error:
        assert "ranks disagree on the collective" in str(error), error
        return str(error)
    raise AssertionError("the mismatched call returned on this rank")


def _still_works(rank: int, world_size: int) -> None:
    for numel in (2, 1 << 18):  # via all_gather, and Gloo's own all_reduce
        t = torch.full((numel,), float(rank + 1))
        dist.all_reduce(t)
        assert torch.equal(t, torch.full_like(t, float(world_size * (world_size + 1) // 2))), t[:4]


def mismatched_calls(rank, world_size):
    """Rank 0 calls one thing, the others another, with the same bytes each way."""
    n = world_size
    cases = [
        # all_reduce (an all_gather underneath) against all_gather_into_tensor
        (
            lambda: dist.all_reduce(torch.ones(8)),
            lambda: dist.all_gather_into_tensor(torch.zeros(8 * n), torch.ones(8)),
        ),
        # the same bytes, other dtypes
        (lambda: dist.all_reduce(torch.ones(4)), lambda: dist.all_reduce(torch.ones(4, dtype=torch.int32))),
        # SUM against MAX
        (lambda: dist.all_reduce(torch.ones(4)), lambda: dist.all_reduce(torch.ones(4), op=R.MAX)),
        # large: Gloo's all_reduce against a broadcast of the same tensor
        (lambda: dist.all_reduce(torch.ones(1 << 18)), lambda: dist.broadcast(torch.ones(1 << 18), src=0)),
        # other sizes (Gloo itself aborts the process there)
        (lambda: dist.all_reduce(torch.ones(1 << 18)), lambda: dist.all_reduce(torch.ones((1 << 18) + 1))),
        # rooted: another root
        (lambda: dist.broadcast(torch.ones(1 << 18), src=0), lambda: dist.broadcast(torch.ones(1 << 18), src=1)),
    ]
    messages = []
    for mine_on_zero, mine_elsewhere in cases:
        messages.append(_expect_disagreement(mine_on_zero if rank == 0 else mine_elsewhere))
        _still_works(rank, world_size)
    return messages


def gather_against_scatter(rank, world_size):
    """On one host gather and scatter go to Gloo (no shared-memory algorithm):
    rank 0 gathers while the others scatter."""
    x = torch.full((4,), float(rank))
    if rank == 0:
        gathered = [torch.zeros(4) for _ in range(world_size)]
        message = _expect_disagreement(lambda: dist.gather(x, gathered, dst=0))
    else:
        message = _expect_disagreement(lambda: dist.scatter(x, None, src=0))
    _still_works(rank, world_size)
    return message


def legitimate_calls_pass(rank, world_size):
    """Calls torch accepts that differ between ranks only in form: all_to_all_single
    with explicit even splits on rank 0 and none elsewhere; a monitored barrier
    between an async call and its wait (its tags must not overtake the call's)."""
    import datetime

    import fastcomm

    n, rows = world_size, 3
    inp = torch.arange(n * rows, dtype=torch.float32) + 100 * rank
    out = torch.zeros(n * rows)
    splits = [rows] * n if rank == 0 else None
    dist.all_to_all_single(out, inp, output_split_sizes=splits, input_split_sizes=splits)
    expected = torch.cat(
        [torch.arange(rank * rows, (rank + 1) * rows, dtype=torch.float32) + 100 * s for s in range(n)]
    )
    assert torch.equal(out, expected), out
    t = torch.full((1 << 18,), float(rank + 1))
    work = dist.all_reduce(t, async_op=True)
    fastcomm.fastcomm_backend().monitored_barrier(datetime.timedelta(seconds=30), True)
    work.wait()
    assert torch.equal(t, torch.full_like(t, float(n * (n + 1) // 2)))
    _still_works(rank, world_size)


def unpaired_alltoall_splits(rank, world_size):
    """all_to_all_single whose splits do not pair up: rank 0 expects two rows
    from rank 1, which sends one (Gloo alone aborts the process)."""
    n = world_size
    out_splits = [1, 2] + [1] * (n - 2) if rank == 0 else [1] * n
    out = torch.zeros(sum(out_splits))
    message = _expect_disagreement(
        lambda: dist.all_to_all_single(out, torch.ones(n), output_split_sizes=out_splits, input_split_sizes=[1] * n)
    )
    assert "rank 1 sends 4 bytes to rank 0, which expects 8 bytes from it" in message, message
    _still_works(rank, world_size)
    return message


def paired_uneven_alltoall(rank, world_size):
    """Uneven splits that pair up, rank 0 passing none (an even split), the
    others uneven ones: every rank receives exactly what was sent to it."""
    n, k = world_size, 2

    def rows(src, dst):
        return k if src == 0 or dst == 0 else src + dst + 1

    inp = torch.cat([torch.full((rows(rank, q), 2), float(100 * rank + q)) for q in range(n)])
    expected = torch.cat([torch.full((rows(r, rank), 2), float(100 * r + rank)) for r in range(n)])
    out = torch.zeros_like(expected)
    if rank == 0:
        dist.all_to_all_single(out, inp)
    else:
        dist.all_to_all_single(
            out,
            inp,
            output_split_sizes=[rows(r, rank) for r in range(n)],
            input_split_sizes=[rows(rank, q) for q in range(n)],
        )
    assert torch.equal(out, expected), (out, expected)
    outs = [torch.zeros(rows(r, rank), 2) for r in range(n)]
    dist.all_to_all(outs, [torch.full((rows(rank, q), 2), float(100 * rank + q)) for q in range(n)])
    assert torch.equal(torch.cat(outs), expected)


def refused_on_one_rank(rank, world_size):
    """Rank 1 alone refuses an all_reduce (an expand()ed tensor) that the others
    run: its next all_reduce must not pair up with theirs (which would return
    a sum of unrelated calls); every rank raises instead. A fresh group per
    size, since the refusing rank stays one call behind on its group. Across
    hosts the other host's ranks learn it when their leaders' step times out
    (a short group timeout here)."""
    import datetime

    messages = []
    for numel in (8, 1 << 18):  # small (inline / one shot) and large
        group = dist.new_group(timeout=datetime.timedelta(seconds=5))
        try:
            if rank == 1:
                try:
                    dist.all_reduce(torch.ones(1).expand(numel), group=group)
                except RuntimeError as error:
                    assert "share memory" in str(error), error
                else:
                    raise AssertionError("an expand()ed output was accepted")
            x = torch.full((numel,), 10.0 if rank == 1 else 1.0)
            try:
                dist.all_reduce(x, group=group)
            except RuntimeError as error:
                messages.append(str(error))
            else:
                raise AssertionError(f"the all_reduce returned {x[:2].tolist()} on rank {rank}")
        finally:
            dist.destroy_process_group(group)
            dist.barrier()  # the next group's set-up waits for the slowest rank's error
    _still_works(rank, world_size)
    return messages
