"""Large all_reduce on one host whose caller does not wait at once (async_op=True, DDP's
buckets) runs on the engine's op queue (FASTCOMM_SHM_ASYNC_MIN_BYTES, set to 1 MiB for these
checks), a blocking one on the caller: the queued call returns before peers arrive, the
engine still runs every op in issue order (queued ones, inline ones after them, and ones
issued by a queued op's callback), and the queue's thread ends with the group."""

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


def blocking_calls_run_on_the_caller(rank, world_size):
    """A large all_reduce whose caller waits at once (async_op=False, torch's
    asyncOp false) runs on the calling thread: the queue takes no job for it.
    With async_op=True, and from DDP's reducer (which issues its buckets
    asynchronously), the same sizes go to the queue. Every value exact."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    engine = fastcomm.fastcomm_backend().shm_engine
    tri = world_size * (world_size + 1) // 2
    t = torch.full((LARGE,), float(rank + 1))
    before = engine.queued_ops
    dist.all_reduce(t)
    pair = [torch.full((LARGE,), float(rank + 1)), torch.full((LARGE // 2,), float(2 * rank))]
    dist.all_reduce_coalesced(pair)
    assert engine.queued_ops == before, (engine.queued_ops, before)
    assert torch.equal(t, torch.full((LARGE,), float(tri)))
    assert torch.equal(pair[0], torch.full((LARGE,), float(tri)))
    assert torch.equal(pair[1], torch.full((LARGE // 2,), float(2 * (tri - world_size))))
    dist.all_reduce(t, async_op=True).wait()
    assert engine.queued_ops == before + 1, (engine.queued_ops, before)
    assert torch.equal(t, torch.full((LARGE,), float(tri * world_size)))
    model = torch.nn.Linear(1024, 1024, bias=False)  # one 4 MiB bucket
    ddp = DDP(model, bucket_cap_mb=8)
    ddp(torch.ones(2, 1024)).sum().backward()
    assert engine.queued_ops >= before + 2, (engine.queued_ops, before)
    assert torch.equal(model.weight.grad, torch.full((1024, 1024), 2.0))


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


def ddp_on_the_queue(rank, world_size):
    """DDP whose buckets (up to 4 MiB, in the arena and not) go to the queue
    while backward goes on: the gradients are the mean of the ranks' local
    gradients, on every rank alike, for a few steps."""
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    for comm_mem in ("1", "0"):
        os.environ["DDP_DISABLE_COMM_MEM"] = comm_mem
        try:
            torch.manual_seed(0)
            model = nn.Sequential(nn.Linear(64, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 8))
            local = nn.Sequential(
                *[type(m)(m.in_features, m.out_features) if isinstance(m, nn.Linear) else m for m in model]
            )
            local.load_state_dict(model.state_dict())
            ddp = DDP(model, bucket_cap_mb=4)
            g = torch.Generator().manual_seed(rank)
            for _ in range(3):
                x = torch.randn(8, 64, generator=g)
                ddp.zero_grad()
                local.zero_grad()
                ddp(x).square().sum().backward()
                local(x).square().sum().backward()
                for p_ddp, p_local in zip(model.parameters(), local.parameters()):
                    everyone = [torch.empty_like(p_local.grad) for _ in range(world_size)]
                    dist.all_gather(everyone, p_local.grad)
                    mean = torch.stack([e.double() for e in everyone]).mean(0)
                    torch.testing.assert_close(p_ddp.grad.double(), mean, rtol=1e-5, atol=1e-6)
            flat = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
            parts = [torch.empty_like(flat) for _ in range(world_size)]
            dist.all_gather(parts, flat)
            assert all(torch.equal(part, flat) for part in parts), "ranks' gradients differ"
        finally:
            del os.environ["DDP_DISABLE_COMM_MEM"]
