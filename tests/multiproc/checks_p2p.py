"""Point-to-point checks run on every rank of a RankPool, on every test
topology: groups on one host use the shared-memory channels (p2p_shm), the
others Gloo; the results must be the same, exactly.

Sizes straddle the channel's geometry (transport/shm/layout.h: 8 slots of
128 KiB, 64 B of header each): empty, one element, one chunk exactly, one
byte over, and messages larger than the whole ring.
"""

from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist

import fastcomm

from memory_maps import anon_huge_bytes_around, assert_moved_on_second_use_only, float_tensor_in_own_mapping
from reference import assert_equal

CHUNK_BYTES = 128 * 1024 - 64
RING_BYTES = 8 * CHUNK_BYTES


def _message(src: int, dst: int, numel: int, dtype: torch.dtype, salt: int = 0) -> torch.Tensor:
    """What src sends to dst: small integers that identify both and every element."""
    i = torch.arange(numel, dtype=torch.int64)
    values = (i * 7 + src * 3 + dst * 5 + salt) % 101
    if dtype == torch.bool:
        return values % 2 == 0
    return values.to(dtype)


def _shm_p2p(world_size: int) -> bool:
    backend = fastcomm.fastcomm_backend()
    engine = backend.shm_engine
    return engine is not None and engine.local_size == world_size and world_size > 1


def sizes_and_dtypes(rank, world_size):
    nxt, prv = (rank + 1) % world_size, (rank - 1) % world_size
    for nbytes in [0, 4, 4 * 33, CHUNK_BYTES, CHUNK_BYTES + 4, 3 * CHUNK_BYTES + 12, RING_BYTES + 4096, 5 << 20]:
        numel = nbytes // 4
        got = torch.full((numel,), -1.0)
        reqs = [dist.isend(_message(rank, nxt, numel, torch.float32), dst=nxt), dist.irecv(got, src=prv)]
        for req in reqs:
            req.wait()
        assert_equal(got, _message(prv, rank, numel, torch.float32), f"ring of {nbytes} B")
    for dtype in [torch.float64, torch.bfloat16, torch.int64, torch.uint8, torch.bool, torch.float8_e4m3fn]:
        numel = 1000
        send = (
            _message(rank, nxt, numel, torch.int64).to(dtype)
            if dtype != torch.bool
            else _message(rank, nxt, numel, dtype)
        )
        got = torch.zeros(numel, dtype=dtype)
        reqs = [dist.isend(send, dst=nxt), dist.irecv(got, src=prv)]
        for req in reqs:
            req.wait()
        expected = (
            _message(prv, rank, numel, torch.int64).to(dtype)
            if dtype != torch.bool
            else _message(prv, rank, numel, dtype)
        )
        assert torch.equal(got.view(torch.uint8), expected.view(torch.uint8)), f"{dtype}: bytes differ"


def large_isends_before_receives(rank, world_size):
    """Every rank isends more than a channel holds to every other rank, runs a
    collective, and only then posts its receives, waiting for them in an
    order that is not the send order: nothing may deadlock."""
    numel = (RING_BYTES * 3) // 4 + 17
    sends = [
        dist.isend(_message(rank, dst, numel, torch.float32), dst=dst, tag=5)
        for dst in range(world_size)
        if dst != rank
    ]
    t = torch.ones(3)
    dist.all_reduce(t)
    assert_equal(t, torch.full((3,), float(world_size)), "all_reduce between isend and irecv")
    got = {src: torch.zeros(numel) for src in range(world_size) if src != rank}
    recvs = {src: dist.irecv(buf, src=src, tag=5) for src, buf in got.items()}
    for src in sorted(recvs, reverse=True):
        recvs[src].wait()
        assert_equal(got[src], _message(src, rank, numel, torch.float32), f"large message from {src}")
    for req in sends:
        req.wait()


def tags_in_any_order(rank, world_size):
    """Messages of tags 0..5 (some larger than a channel) sent in order, received
    in reverse tag order; two messages with one tag arrive in the order sent."""
    nxt, prv = (rank + 1) % world_size, (rank - 1) % world_size
    sizes = [3, RING_BYTES // 4 + 100, 0, 50, CHUNK_BYTES // 4 * 2, 7]
    sends = [dist.isend(_message(rank, nxt, n, torch.int32, salt=tag), dst=nxt, tag=tag) for tag, n in enumerate(sizes)]
    sends += [dist.isend(_message(rank, nxt, 9, torch.int32, salt=100 + k), dst=nxt, tag=7) for k in range(2)]
    got = {tag: torch.zeros(n, dtype=torch.int32) for tag, n in enumerate(sizes)}
    recvs = {tag: dist.irecv(got[tag], src=prv, tag=tag) for tag in reversed(range(len(sizes)))}
    for tag in sorted(recvs):
        recvs[tag].wait()
        assert_equal(got[tag], _message(prv, rank, sizes[tag], torch.int32, salt=tag), f"tag {tag}")
    first, second = torch.zeros(9, dtype=torch.int32), torch.zeros(9, dtype=torch.int32)
    dist.recv(first, src=prv, tag=7)
    dist.recv(second, src=prv, tag=7)
    assert_equal(first, _message(prv, rank, 9, torch.int32, salt=100), "first message of tag 7")
    assert_equal(second, _message(prv, rank, 9, torch.int32, salt=101), "second message of tag 7")
    for req in sends:
        req.wait()


def any_source(rank, world_size):
    """Rank 0 receives from any source, with a specific receive posted in between."""
    if rank == 0:
        seen = {}
        bufs = [torch.zeros(4, dtype=torch.int64) for _ in range(world_size - 1)]
        works = [dist.irecv(b, tag=3) for b in bufs]
        sources = []
        for w, b in zip(works, bufs):
            w.wait()
            sources.append(w._source_rank())
            assert_equal(b, torch.full((4,), sources[-1], dtype=torch.int64), f"irecv from {sources[-1]}")
        assert sorted(sources) == list(range(1, world_size)), sources
        for _ in range(world_size - 1):
            t = torch.zeros(4, dtype=torch.int64)
            src = dist.recv(t, tag=4)
            assert_equal(t, torch.full((4,), src * 11, dtype=torch.int64), f"any-source data from {src}")
            seen[src] = seen.get(src, 0) + 1
        assert seen == {s: 1 for s in range(1, world_size)}, seen
    else:
        dist.send(torch.full((4,), rank, dtype=torch.int64), dst=0, tag=3)
        dist.send(torch.full((4,), rank * 11, dtype=torch.int64), dst=0, tag=4)


def futures_without_wait(rank, world_size):
    """Completion through futures only (the progress thread moves the ops), and a
    send nobody waits for while its rank sits in a collective."""
    nxt, prv = (rank + 1) % world_size, (rank - 1) % world_size
    numel = RING_BYTES // 2 + 5  # two messages fill more than the ring
    got = torch.zeros(numel)
    s = dist.isend(_message(rank, nxt, numel, torch.float32), dst=nxt)
    s2 = dist.isend(_message(rank, nxt, numel, torch.float32, salt=1), dst=nxt)
    r = dist.irecv(got, src=prv)
    doubled = r.get_future().then(lambda fut: fut.value()[0] * 2)
    assert_equal(doubled.wait(), _message(prv, rank, numel, torch.float32) * 2, "future of irecv")
    got2 = torch.zeros(numel)
    r2 = dist.irecv(got2, src=prv)
    r2.get_future().wait()
    assert_equal(got2, _message(prv, rank, numel, torch.float32, salt=1), "second message, future only")
    s.get_future().wait()
    s2.get_future().wait()
    # A future asked for once the op is done completes at once, with the op's own tensor.
    late = torch.zeros(8)
    s3 = dist.isend(_message(rank, nxt, 8, torch.float32, salt=2), dst=nxt)
    r3 = dist.irecv(late, src=prv)
    r3.wait()
    s3.wait()
    (value,) = r3.get_future().wait()
    assert value.data_ptr() == late.data_ptr(), "the future holds the received tensor"
    assert_equal(value, _message(prv, rank, 8, torch.float32, salt=2), "future asked for after wait")
    # rank 0 sends twice the ring and sleeps: rank 1 gets it all only if rank 0's
    # pending send moves while rank 0 makes no call (its progress thread)
    big = RING_BYTES // 2
    if rank == 0:
        s = dist.isend(_message(0, 1, big, torch.float32), dst=1, tag=9)
        time.sleep(0.5)
        dist.barrier()
        s.wait()
    elif rank == 1:
        t = torch.zeros(big)
        dist.recv(t, src=0, tag=9)
        dist.barrier()
        assert_equal(t, _message(0, 1, big, torch.float32), "isend moved while its rank slept")
    else:
        dist.barrier()
    deadline = time.monotonic() + 10
    w = dist.irecv(torch.zeros(1), src=prv, tag=10)
    dist.send(torch.zeros(1), dst=nxt, tag=10)
    # Polling alone completes a shared-memory receive (Gloo's p2p works report
    # completion only once waited for).
    while _shm_p2p(world_size) and not w.is_completed():
        assert time.monotonic() < deadline, "is_completed() never became true"
    w.wait()


def path(rank, world_size):
    """Groups on one host move p2p through shared memory, the others through Gloo."""
    backend = fastcomm.fastcomm_backend()
    before = backend.algorithm_counts()
    nxt, prv = (rank + 1) % world_size, (rank - 1) % world_size
    for req in [dist.isend(torch.ones(2), dst=nxt), dist.irecv(torch.zeros(2), src=prv)]:
        req.wait()
    after = backend.algorithm_counts()
    which = "p2p_shm" if _shm_p2p(world_size) else "gloo_fallback"
    assert after.get(which, 0) == before.get(which, 0) + 2, (which, before, after)
    assert ("p2p_shm" in backend.algorithm_names()) == _shm_p2p(world_size), backend.algorithm_names()


def single_copy_counts(rank, world_size):
    """Messages from 64 KiB (the default threshold) are read in one copy; smaller ones go through the ring."""
    backend = fastcomm.fastcomm_backend()
    before = backend.p2p_stats()
    nxt, prv = (rank + 1) % world_size, (rank - 1) % world_size
    for numel in [(64 << 10) // 4 - 1, (64 << 10) // 4, 3 << 20]:
        got = torch.zeros(numel)
        for req in [dist.isend(_message(rank, nxt, numel, torch.float32), dst=nxt), dist.irecv(got, src=prv)]:
            req.wait()
        assert_equal(got, _message(prv, rank, numel, torch.float32), f"{numel * 4} B")
    after = backend.p2p_stats()
    assert after["sent"] - before["sent"] == 3, (before, after)
    assert after["sent_single_copy"] - before["sent_single_copy"] == 2, (before, after)
    assert after["single_copy_refused"] == 0, after


def pingpong_on_one_cpu(rank, world_size, any_source=False):
    """Ranks squeezed onto one CPU exchange messages of every path (ring chunks,
    several chunks, single copy): each arrives exact, and where waiters spin
    (a CPU per rank) the waits that found their peer on their own CPU yielded to
    it instead of spinning out a time slice (p2p_stats' shared_cpu_waits grew on
    some rank: every exchange here has one rank waiting on the other's CPU).
    any_source: the receives name no source (the sender may be any rank on the
    waiter's CPU), each saying the previous rank sent it; only the messages that
    go through the ring and fit it, so that every wait is such a receive (a
    single-copy send, or one larger than the ring, waits for its named receiver)."""
    backend = fastcomm.fastcomm_backend()
    if not _shm_p2p(world_size):
        return
    engine = backend.shm_engine
    nxt, prv = (rank + 1) % world_size, (rank - 1) % world_size
    # One exchange first, unpinned: a thread the first p2p op starts (the channels' progress thread)
    # must not inherit the single CPU below for good.
    for req in [dist.isend(torch.ones(1), dst=nxt), dist.irecv(torch.zeros(1), src=prv)]:
        req.wait()
    cpus = os.sched_getaffinity(0)  # this thread's, bound or not: given back below
    before = backend.p2p_stats()["shared_cpu_waits"]
    os.sched_setaffinity(0, {min(fastcomm._shm.usable_cpus())})  # the same CPU on every rank
    received = []  # judged once all exchanges are done: a rank that stopped early would hang its peer
    try:
        sizes = [1, 256, CHUNK_BYTES // 4 + 3, 1 << 20]
        if any_source:
            single_copy = backend.config.p2p_single_copy_bytes or (1 << 62)
            sizes = [numel for numel in sizes if numel * 4 < min(single_copy, RING_BYTES)]
        for step, numel in enumerate(sizes * 5):
            got = torch.zeros(numel)
            if rank % 2 == 0:
                dist.send(_message(rank, nxt, numel, torch.float32, step), dst=nxt)
                source = dist.recv(got, src=None if any_source else prv)
            else:
                source = dist.recv(got, src=None if any_source else prv)
                dist.send(_message(rank, nxt, numel, torch.float32, step), dst=nxt)
            received.append((step, numel, got, source))
    finally:
        os.sched_setaffinity(0, cpus)
    for step, numel, got, source in received:
        assert source == prv, f"{numel * 4} B, step {step}: from rank {source}, expected {prv}"
        assert_equal(got, _message(prv, rank, numel, torch.float32, step), f"{numel * 4} B, step {step}")
    yielded = torch.tensor([backend.p2p_stats()["shared_cpu_waits"] - before])
    dist.all_reduce(yielded)
    if engine.spins:
        assert yielded.item() > 0, "no wait yielded to a peer on its own CPU"


def reused_sends_move_into_huge_pages(rank, world_size):
    """A send buffer of at least shm_huge_pages_min_bytes read in one copy that
    comes back a second time has the whole 2 MiB blocks inside it moved into
    huge pages (transport/shm/huge_pages.h, as all_reduce's single copy), once;
    receive buffers and buffers under the minimum are left alone. Every message
    arrives exact; every rank sends and receives everything before any verdict
    (a rank that stopped early would hang its peers)."""
    backend = fastcomm.fastcomm_backend()
    config = backend.config
    if not _shm_p2p(world_size) or config.p2p_single_copy_bytes == 0 or config.shm_huge_pages_min_bytes == 0:
        return
    nxt, prv = (rank + 1) % world_size, (rank - 1) % world_size
    # a length no other check uses: the huge-page move remembers buffers by address and length
    numel = max(config.shm_huge_pages_min_bytes, 6 << 20, config.p2p_single_copy_bytes) // 4 + 11
    small_numel = max(config.shm_huge_pages_min_bytes // 4 - 1, config.p2p_single_copy_bytes // 4)
    counts = fastcomm._C.huge_page_counts
    memory, send, blocks = float_tensor_in_own_mapping(numel, 8192 + 128)
    got = torch.zeros(numel)
    small, small_got = torch.zeros(small_numel), torch.zeros(small_numel)
    before = counts()
    results, huge = [], {}

    def exchange(out, into, salt, what):
        out.copy_(_message(rank, nxt, out.numel(), torch.float32, salt))
        for req in [dist.isend(out, dst=nxt), dist.irecv(into, src=prv)]:
            req.wait()
        results.append((into.clone(), _message(prv, rank, into.numel(), torch.float32, salt), what))

    if small_numel * 4 < config.shm_huge_pages_min_bytes:
        for salt in range(2):
            exchange(small, small_got, salt, "a message under the huge-page minimum")
    single_copies = backend.p2p_stats()["sent_single_copy"]
    for salt, step in enumerate(("first", "second", "third")):  # the second time: moved; the third: nothing more
        exchange(send, got, salt, f"{step} send of the reused buffer")
        huge[step] = (counts(), anon_huge_bytes_around(send.data_ptr()))
    single_copies = backend.p2p_stats()["sent_single_copy"] - single_copies
    for actual, wanted, what in results:
        assert_equal(actual, wanted, what)
    assert single_copies == 3, single_copies
    # one buffer moved: the send buffer, not the receive buffer of the same length
    assert_moved_on_second_use_only(before, huge, blocks)
    del send
    memory.close()


_subgroups: dict[int, object] = {}


def subgroup_and_wait_timeout(rank, world_size):
    """p2p inside a subgroup of the first and last rank (group ranks, not global ones,
    address the peer); a wait(timeout) on a receive nobody sends fails in time and
    leaves the pair usable (shared-memory groups: Gloo keeps the abandoned receive)."""
    import datetime

    last = world_size - 1
    if world_size not in _subgroups:
        _subgroups[world_size] = dist.new_group([0, last])
    sub = _subgroups[world_size]
    if rank in (0, last):
        peer = last - rank
        got = torch.zeros(70000)
        works = [
            dist.isend(_message(rank, peer, 70000, torch.float32), group=sub, group_dst=1 if rank == 0 else 0),
            dist.irecv(got, group=sub, group_src=1 if rank == 0 else 0),
        ]
        for w in works:
            w.wait()
        assert_equal(got, _message(peer, rank, 70000, torch.float32), "subgroup message")
    if not _shm_p2p(world_size):
        return
    nxt, prv = (rank + 1) % world_size, (rank - 1) % world_size
    w = dist.irecv(torch.zeros(3), src=prv, tag=77)
    start = time.monotonic()
    try:
        w.wait(datetime.timedelta(milliseconds=300))
    except RuntimeError as e:
        assert "timed out after 300 ms" in str(e), e
    else:
        raise AssertionError("wait(timeout) on a receive nobody sends returned")
    assert time.monotonic() - start < 5.0
    dist.barrier()
    got = torch.zeros(3)
    for req in [dist.isend(torch.full((3,), float(rank)), dst=nxt, tag=78), dist.irecv(got, src=prv, tag=78)]:
        req.wait()
    assert_equal(got, torch.full((3,), float(prv)), "the pair after a timed-out receive")


def batched_and_coalesced(rank, world_size):
    """A coalescing block (torch's _coalescing_manager, through which
    batch_isend_irecv runs where the backend declares coalescing: groups with
    NCCL) gives one work for its calls; every rank sends before it receives, to
    both neighbours, at sizes from empty to larger than a channel. The
    manager's all_reduce fast path completes through the block's work too. A
    call that fails inside a block closes it; opening a block over an open one
    closes the old one (both warn)."""
    from torch.distributed.distributed_c10d import _coalescing_manager, _get_default_group

    group, cpu = _get_default_group(), torch.device("cpu")
    nxt, prv = (rank + 1) % world_size, (rank - 1) % world_size
    for nbytes in [0, 4, CHUNK_BYTES + 4, RING_BYTES + 4096]:
        numel = nbytes // 4
        from_prv, from_nxt = torch.full((numel,), -1.0), torch.full((numel,), -1.0)
        with _coalescing_manager(device=cpu, async_ops=True) as cm:
            dist.isend(_message(rank, nxt, numel, torch.float32), dst=nxt)
            dist.isend(_message(rank, prv, numel, torch.float32, salt=1), dst=prv)
            dist.irecv(from_prv, src=prv)
            dist.irecv(from_nxt, src=nxt)
        assert len(cm.works) == 1, f"the block gave {len(cm.works)} works, not one"
        cm.wait()
        assert cm.works[0].is_completed()
        assert_equal(from_prv, _message(prv, rank, numel, torch.float32), f"block from the previous rank, {nbytes} B")
        assert_equal(
            from_nxt, _message(nxt, rank, numel, torch.float32, salt=1), f"block from the next rank, {nbytes} B"
        )
    # batch_isend_irecv: one work where the backend declares coalescing, one per op elsewhere.
    got = torch.zeros(5, dtype=torch.int64)
    sent = torch.full((5,), rank, dtype=torch.int64)
    works = dist.batch_isend_irecv([dist.P2POp(dist.isend, sent, nxt), dist.P2POp(dist.irecv, got, prv)])
    assert len(works) == (1 if group._get_backend(cpu).supports_coalescing else 2), len(works)
    for work in works:
        work.wait()
    assert_equal(got, torch.full((5,), prv, dtype=torch.int64), "batch_isend_irecv")
    # The block's future completes with every call's tensors, in call order.
    got.zero_()
    with _coalescing_manager(device=cpu, async_ops=True) as cm:
        dist.isend(sent, dst=nxt)
        dist.irecv(got, src=prv)
    values = cm.works[0].get_future().wait()
    assert [v.data_ptr() for v in values] == [sent.data_ptr(), got.data_ptr()], "the block's future's tensors"
    assert_equal(got, torch.full((5,), prv, dtype=torch.int64), "a block through its future")
    # The manager's fast path: the all_reduces are made as one all_reduce_coalesced inside the block.
    a, b = torch.full((3,), float(rank)), torch.full((1000,), float(rank + 1))
    with _coalescing_manager(device=cpu, async_ops=True) as cm:
        dist.all_reduce(a)
        dist.all_reduce(b)
    cm.wait()
    total = world_size * (world_size - 1) / 2
    assert_equal(a, torch.full((3,), total), "coalesced all_reduce (first)")
    assert_equal(b, torch.full((1000,), total + world_size), "coalesced all_reduce (second)")
    # A call refused inside a block closes it: the thread's later calls run unblocked.
    group._start_coalescing(cpu)
    try:
        dist.isend(torch.zeros(8)[::2], dst=nxt)
    except RuntimeError as e:
        assert "must be contiguous" in str(e), e
    else:
        raise AssertionError("a non-contiguous isend was accepted")
    try:
        group._end_coalescing(cpu)
    except RuntimeError as e:
        assert "end_coalescing" in str(e) and "no coalescing block is open" in str(e), e
    else:
        raise AssertionError("the refused call left its block open")
    t = torch.ones(3)
    dist.all_reduce(t)
    assert_equal(t, torch.full((3,), float(world_size)), "all_reduce after the closed block")
    # Opening a block over an open one closes the old one; the new one works.
    group._start_coalescing(cpu)
    group._start_coalescing(cpu)
    got.zero_()
    dist.isend(sent, dst=nxt)
    dist.irecv(got, src=prv)
    group._end_coalescing(cpu).wait()
    assert_equal(got, torch.full((5,), prv, dtype=torch.int64), "the block opened over an open one")
    group._start_coalescing(cpu)
    group._end_coalescing(cpu).wait()  # an empty block: a completed work
    dist.barrier()
