"""Large all_reduce on one host runs on the engine's op queue (FASTCOMM_SHM_ASYNC_MIN_BYTES,
set to 1 MiB for these checks): the call returns before peers arrive, the engine still runs every op in
issue order (queued ones, inline ones after them, and ones issued by a queued op's
callback), and the queue's thread ends with the group."""
from __future__ import annotations

import os
from datetime import timedelta

import torch
import torch.distributed as dist

import fastcomm

LARGE = 1 << 20  # float32 elements: 4 MiB, above the default threshold


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def launch_returns_before_peers_arrive(rank, world_size):
    """Rank 0 issues a 4 MiB all_reduce while the others wait for its word that
    the call returned: an inline (blocking) all_reduce would never give it. Then
    they join, and everyone gets the exact sum."""
    store = dist.distributed_c10d._get_default_store()
    t = torch.full((LARGE,), float(rank + 1))
    if rank == 0:
        work = dist.all_reduce(t, async_op=True)
        assert not work.is_completed()
        store.set("async/launched", "1")
    else:
        store.wait(["async/launched"], timedelta(seconds=30))
        work = dist.all_reduce(t, async_op=True)
    work.wait()
    assert torch.equal(t, torch.full((LARGE,), float(world_size * (world_size + 1) // 2)))
    return fastcomm.fastcomm_backend().algorithm_counts().get("allreduce_shm_twoshot", 0)


def issue_order_holds(rank, world_size):
    """Queued large ops, small inline ones issued right after them, a large op
    issued from a queued op's callback (as PowerSGD's hook does) and one from a
    chained future: every value exact, on every rank the same."""
    n = world_size
    tri = n * (n + 1) // 2
    large = [torch.full((LARGE + k,), float(rank + 1 + k)) for k in range(3)]
    small = torch.full((5,), float(rank + 1))
    from_callback = torch.full((LARGE,), float(10 * (rank + 1)))
    works = [dist.all_reduce(t, async_op=True) for t in large[:2]]
    dist.all_reduce(small)  # inline: after the two queued ones

    def issue_next(fut):
        dist.all_reduce(from_callback)  # runs on the queue's thread, right after large[0]
        return fut.value()

    chained = works[0].get_future().then(issue_next)
    works.append(dist.all_reduce(large[2], async_op=True))
    chained.wait()
    for w in works:
        w.wait()
    assert torch.equal(small, torch.full((5,), float(tri)))
    for k, t in enumerate(large):
        assert torch.equal(t, torch.full((LARGE + k,), float(tri + n * k))), k
    assert torch.equal(from_callback, torch.full((LARGE,), float(10 * tri)))


def queue_thread_ends_with_group(rank, world_size):
    """A subgroup's queued all_reduce starts its queue thread; destroying the
    subgroup ends it (the thread count is back to where it was)."""
    before = _threads()
    group = dist.new_group(list(range(world_size)))
    t = torch.ones(LARGE)
    dist.all_reduce(t, group=group, async_op=True).wait()
    assert torch.equal(t, torch.full((LARGE,), float(world_size)))
    assert _threads() > before
    dist.destroy_process_group(group)
    del group
    import gc

    gc.collect()
    assert _threads() == before, (before, _threads())
