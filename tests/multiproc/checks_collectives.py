"""Checks run on every rank of a RankPool (see harness.py): each collective
against an exact reference, for every dtype and reduce op fastcomm supports."""

from __future__ import annotations

import torch
import torch.distributed as dist

import fastcomm

from memory_maps import anon_huge_bytes_around, assert_moved_on_second_use_only, float_tensor_in_own_mapping
from reference import DTYPES, R, assert_equal, ops_for, rank_input, reduce_reference

SHAPES = [(5,), (2, 3), ()]


def all_reduce(rank, world_size):
    for dtype in DTYPES:
        for op in ops_for(dtype):
            for shape in SHAPES:
                t = rank_input(rank, shape, dtype)
                dist.all_reduce(t, op=op)
                expected = reduce_reference([rank_input(r, shape, dtype) for r in range(world_size)], op, dtype)
                assert_equal(t, expected, f"all_reduce {dtype} {op} {shape}")


def all_reduce_through_the_backend_object(rank, world_size):
    """The latency path README's "Small messages from Python" names: the backend
    object's allreduce (no torch wrapper or dispatcher), default SUM and an
    explicit op, its Work and its future."""
    backend = fastcomm.fastcomm_backend()
    for op in (None, R.MAX, R.AVG):
        t = rank_input(rank, (5,), torch.float32)
        if op is None:
            work = backend.allreduce([t])
        else:
            options = dist.AllreduceOptions()
            options.reduceOp = op
            work = backend.allreduce([t], options)
        work.wait()
        want = reduce_reference(
            [rank_input(r, (5,), torch.float32) for r in range(world_size)], op or R.SUM, torch.float32
        )
        assert_equal(t, want, f"backend.allreduce {op}")
        assert work.is_completed() and work.is_success()
        assert_equal(work.get_future().wait()[0], want, f"backend.allreduce {op} future")


def all_reduce_layouts(rank, world_size):
    """Empty, non-contiguous, channels_last and large tensors."""
    empty = torch.empty(0, 3)
    dist.all_reduce(empty)
    assert empty.shape == (0, 3)
    for dtype in (torch.float32, torch.int16, torch.bfloat16):
        base = rank_input(rank, (6, 4), dtype)
        view = base[:, 1]  # stride 4: not contiguous
        dist.all_reduce(view, op=R.SUM)
        full = [rank_input(r, (6, 4), dtype) for r in range(world_size)]
        expected = reduce_reference([f[:, 1] for f in full], R.SUM, dtype)
        assert_equal(base[:, 1], expected, f"non-contiguous {dtype}")
        assert_equal(base[:, 0], rank_input(rank, (6, 4), dtype)[:, 0], "untouched column")
    cl = rank_input(rank, (2, 3, 4, 5), torch.float32).to(memory_format=torch.channels_last)
    dist.all_reduce(cl, op=R.MAX)
    ref = reduce_reference(
        [rank_input(r, (2, 3, 4, 5), torch.float32) for r in range(world_size)], R.MAX, torch.float32
    )
    assert_equal(cl.contiguous(), ref, "channels_last")
    big = rank_input(rank, (1 << 20,), torch.float32)
    dist.all_reduce(big)
    ref = reduce_reference([rank_input(r, (1 << 20,), torch.float32) for r in range(world_size)], R.SUM, torch.float32)
    assert_equal(big, ref, "1M floats")
    # Several 1 MiB chunks whose slices end mid-block of the fused reduce-and-copy (16 KiB blocks), per element size.
    for dtype, numel in ((torch.float32, 300_001), (torch.bfloat16, 700_003), (torch.int64, 150_001)):
        for op in (R.SUM, R.MAX):
            t = rank_input(rank, (numel,), dtype)
            dist.all_reduce(t, op=op)
            ref = reduce_reference([rank_input(r, (numel,), dtype) for r in range(world_size)], op, dtype)
            assert_equal(t, ref, f"all_reduce {dtype} {op} x{numel}")


def all_reduce_async(rank, world_size):
    t = rank_input(rank, (7,), torch.float32)
    work = dist.all_reduce(t, op=R.SUM, async_op=True)
    value = work.get_future().wait()
    work.wait()
    assert work.is_completed() and work.is_success()
    expected = reduce_reference([rank_input(r, (7,), torch.float32) for r in range(world_size)], R.SUM, torch.float32)
    assert isinstance(value, list) and len(value) == 1
    assert_equal(value[0], expected, "future value")
    assert_equal(t, expected, "in place")
    # then() chaining as comm hooks do it, with AVG going through fastcomm's divide
    t = rank_input(rank, (7,), torch.float64)
    fut = dist.all_reduce(t, op=R.AVG, async_op=True).get_future().then(lambda f: f.value()[0] * 2)
    expected = reduce_reference([rank_input(r, (7,), torch.float64) for r in range(world_size)], R.AVG, torch.float64)
    assert_equal(fut.wait(), expected * 2, "then()")
    # many in flight at once complete in order of issue
    tensors = [rank_input(rank, (3,), torch.int32, salt=i) for i in range(20)]
    works = [dist.all_reduce(x, async_op=True) for x in tensors]
    for i, (x, w) in enumerate(zip(tensors, works)):
        w.wait()
        ref = reduce_reference(
            [rank_input(r, (3,), torch.int32, salt=i) for r in range(world_size)], R.SUM, torch.int32
        )
        assert_equal(x, ref, f"in flight {i}")


def large_all_reduce_single_copy(rank, world_size):
    """all_reduce read from the peers' tensors (allreduce_shm_single_copy) where
    the group's config turns it on: sizes from its minimum to its maximum, slices
    of several pieces (512 KiB) and odd element counts, every reduce op on a few
    dtypes, each exact and bitwise the same on every rank; one element past the
    maximum (where it has one: with huge pages on it has none, and the sizes
    stop at 8 MiB) and arena tensors take their own algorithms. Where it is
    off, large ordinary tensors go to two-shot."""
    backend = fastcomm.fastcomm_backend()
    used = lambda name: backend.algorithm_counts().get(name, 0)  # noqa: E731
    names = backend.algorithm_names()
    if "allreduce_shm_twoshot" not in names:
        return  # no engine for the whole group: nothing of this here
    low, high = backend.config.shm_allreduce_single_copy_min_bytes, backend.config.shm_allreduce_single_copy_max_bytes
    if low == 0:
        before = used("allreduce_shm_twoshot")
        t = torch.ones((4 << 20) // 4 + 1)
        dist.all_reduce(t)
        assert used("allreduce_shm_twoshot") == before + 1 and torch.equal(t, torch.full_like(t, float(world_size)))
        return
    assert names.index("allreduce_shm_single_copy") < names.index("allreduce_shm_twoshot"), names
    top = min(high, 8 << 20)
    before, calls = used("allreduce_shm_single_copy"), 0
    for dtype, numel in (
        (torch.float32, max(low // 4, 1_200_007 // world_size)),
        (torch.bfloat16, low // 2 + 3),
        (torch.int64, top // 8),
        (torch.int8, low + 1),
    ):
        for op in ops_for(dtype):
            t = rank_input(rank, (numel,), dtype)
            dist.all_reduce(t, op=op)
            calls += 1
            expected = reduce_reference([rank_input(r, (numel,), dtype) for r in range(world_size)], op, dtype)
            assert_equal(t, expected, f"single-copy all_reduce {dtype} {op} of {numel}")
    # distinct values everywhere: a piece or slice read from the wrong place shows
    numel = top // 8 - 3
    t = torch.arange(numel, dtype=torch.float64) * (rank + 1)
    dist.all_reduce(t)
    calls += 1
    assert torch.equal(t, torch.arange(numel, dtype=torch.float64) * (world_size * (world_size + 1) // 2))
    everyone = [torch.empty_like(t) for _ in range(world_size)]
    dist.all_gather(everyone, t)
    assert all(torch.equal(e, t) for e in everyone), "results differ between ranks"
    # async: Work and future
    t = rank_input(rank, (low // 4 + 5,), torch.float32)
    work = dist.all_reduce(t, async_op=True)
    calls += 1
    got = work.get_future().wait()[0]
    work.wait()
    expected = reduce_reference(
        [rank_input(r, (low // 4 + 5,), torch.float32) for r in range(world_size)], R.SUM, torch.float32
    )
    assert_equal(got, expected, "single-copy future")
    assert_equal(t, expected, "single-copy async in place")
    assert used("allreduce_shm_single_copy") == before + calls, (calls, backend.algorithm_counts())
    # one element past the maximum: two-shot; arena tensors: the arena's algorithm
    twoshot, arena = used("allreduce_shm_twoshot"), used("allreduce_shm_arena")
    past = high == top
    if past:
        t = torch.ones(high // 4 + 1)
        dist.all_reduce(t)
        assert torch.equal(t, torch.full_like(t, float(world_size)))
    a = backend.allocate_tensor(max(low, 256 << 10) // 4, torch.float32)  # above the arena's minimum
    a.fill_(rank + 1)
    dist.all_reduce(a)
    assert torch.equal(a, torch.full_like(a, float(world_size * (world_size + 1) // 2)))
    assert (used("allreduce_shm_twoshot"), used("allreduce_shm_arena")) == (twoshot + past, arena + 1), (
        backend.algorithm_counts()
    )
    assert used("allreduce_shm_single_copy") == before + calls


def reused_tensors_move_into_huge_pages(rank, world_size):
    """A rank's own tensor of at least shm_huge_pages_min_bytes that comes to a
    single-copy all_reduce a second time has the whole 2 MiB blocks inside it
    moved into huge pages (transport/shm/huge_pages.h), once: its mapping then
    holds exactly those huge pages. Results stay exact before, during and after;
    a tensor seen once and one under the minimum are left alone. Every rank runs
    every op before any verdict is raised (a rank that stopped early would hang
    its peers)."""
    backend = fastcomm.fastcomm_backend()
    config = backend.config
    low, high = config.shm_allreduce_single_copy_min_bytes, config.shm_allreduce_single_copy_max_bytes
    if low == 0 or config.shm_huge_pages_min_bytes == 0 or "allreduce_shm_single_copy" not in backend.algorithm_names():
        return
    numel = max(config.shm_huge_pages_min_bytes, 6 << 20) // 4 + 5  # at least two whole 2 MiB blocks inside
    if not low <= numel * 4 <= high:
        return
    used = lambda: backend.algorithm_counts().get("allreduce_shm_single_copy", 0)  # noqa: E731
    counts = fastcomm._C.huge_page_counts
    expected = reduce_reference(
        [rank_input(r, (numel,), torch.float32) for r in range(world_size)], R.SUM, torch.float32
    )
    memory, t, blocks = float_tensor_in_own_mapping(numel, 4096 + 64)
    address = t.data_ptr()
    once = rank_input(rank, (numel,), torch.float32)
    small = rank_input(rank, (config.shm_huge_pages_min_bytes // 4 - 1,), torch.float32)
    small_expected = reduce_reference(
        [rank_input(r, small.shape, torch.float32) for r in range(world_size)], R.SUM, torch.float32
    )
    before, ops = counts(), used()
    results = []
    for _ in range(2):  # under the minimum: never
        small.copy_(rank_input(rank, small.shape, torch.float32))
        dist.all_reduce(small)
        results.append((small.clone(), small_expected, "all_reduce under the huge-page minimum"))
    dist.all_reduce(once)
    results.append((once, expected, "all_reduce of a tensor seen once"))
    huge = {}
    for step in ("first", "second", "third"):  # the second time: moved first; the third: nothing more
        t.copy_(rank_input(rank, (numel,), torch.float32))
        dist.all_reduce(t)
        results.append((t.clone(), expected, f"{step} all_reduce of the reused tensor"))
        huge[step] = (counts(), anon_huge_bytes_around(address))
    for actual, wanted, what in results:
        assert_equal(actual, wanted, what)
    assert used() == ops + 6, backend.algorithm_counts()
    assert_moved_on_second_use_only(before, huge, blocks)
    del t
    memory.close()


def broadcast(rank, world_size):
    for dtype in DTYPES:
        for root in range(world_size):
            t = rank_input(rank, (4, 3), dtype) if rank == root else torch.zeros(4, 3, dtype=dtype)
            dist.broadcast(t, src=root)
            assert_equal(t, rank_input(root, (4, 3), dtype), f"broadcast {dtype} root {root}")
    # Several slot-sized chunks (FASTCOMM_SHM_SLOT_BYTES: 1 MiB), through the
    # engine's algorithm for this topology.
    backend = fastcomm.fastcomm_backend()
    path = _engine_path("broadcast")
    before = backend.algorithm_counts().get(path, 0)
    for root in range(world_size):
        big = rank_input(rank, (300_001,), torch.float32) if rank == root else torch.zeros(300_001)
        dist.broadcast(big, src=root)
        assert_equal(big, rank_input(root, (300_001,), torch.float32), f"broadcast 1.2 MB root {root}")
    assert backend.algorithm_counts()[path] == before + world_size, (path, backend.algorithm_counts())


def reduce(rank, world_size):
    for dtype in DTYPES:
        for op in (R.SUM, R.MAX, R.AVG, R.PRODUCT):
            if op == R.AVG and dtype == torch.bool:
                continue
            for root in range(world_size):
                t = rank_input(rank, (5,), dtype)
                dist.reduce(t, dst=root, op=op)
                if rank == root:
                    ref = reduce_reference([rank_input(r, (5,), dtype) for r in range(world_size)], op, dtype)
                    assert_equal(t, ref, f"reduce {dtype} {op} root {root}")


def all_gather(rank, world_size):
    for dtype in DTYPES:
        outs = [torch.zeros(2, 3, dtype=dtype) for _ in range(world_size)]
        dist.all_gather(outs, rank_input(rank, (2, 3), dtype))
        for r in range(world_size):
            assert_equal(outs[r], rank_input(r, (2, 3), dtype), f"all_gather {dtype} from {r}")
        flat = torch.zeros(world_size * 2, 3, dtype=dtype)
        dist.all_gather_into_tensor(flat, rank_input(rank, (2, 3), dtype))
        expected = torch.cat([rank_input(r, (2, 3), dtype) for r in range(world_size)])
        assert_equal(flat, expected, f"all_gather_into_tensor {dtype}")
        stacked = torch.zeros(world_size, 2, 3, dtype=dtype)
        dist.all_gather_into_tensor(stacked, rank_input(rank, (2, 3), dtype))
        assert_equal(stacked, expected.reshape(world_size, 2, 3), f"all_gather_into_tensor stacked {dtype}")


def reduce_scatter(rank, world_size):
    for dtype in DTYPES:
        for op in ops_for(dtype):
            inputs = [rank_input(rank, (4,), dtype, salt=i) for i in range(world_size)]
            out = torch.zeros(4, dtype=dtype)
            dist.reduce_scatter(out, inputs, op=op)
            ref = reduce_reference([rank_input(r, (4,), dtype, salt=rank) for r in range(world_size)], op, dtype)
            assert_equal(out, ref, f"reduce_scatter {dtype} {op}")

            full = rank_input(rank, (world_size * 3, 2), dtype)
            out = torch.zeros(3, 2, dtype=dtype)
            dist.reduce_scatter_tensor(out, full, op=op)
            ref_full = reduce_reference(
                [rank_input(r, (world_size * 3, 2), dtype) for r in range(world_size)], op, dtype
            )
            assert_equal(out, ref_full[rank * 3 : rank * 3 + 3], f"reduce_scatter_tensor {dtype} {op}")


def _engine_path(kind: str) -> str:
    """The algorithm this topology's engine runs `kind` (e.g. "allgather") with, or gloo_fallback."""
    names = fastcomm.fastcomm_backend().algorithm_names()
    return next((n for n in (f"{kind}_shm", f"{kind}_hierarchical") if n in names), "gloo_fallback")


def large_gather_and_scatter(rank, world_size):
    """all_gather and reduce_scatter (both forms) over several slots and
    pipeline pieces (1 MiB slots; sizes not a multiple of any piece), in place
    too, through this topology's engine algorithm."""
    backend = fastcomm.fastcomm_backend()
    used = lambda name: backend.algorithm_counts().get(name, 0)  # noqa: E731
    gather, scatter = _engine_path("allgather"), _engine_path("reduce_scatter")
    before_gather, before_scatter = used(gather), used(scatter)
    calls = 0
    for dtype, numel in ((torch.float32, 300_001), (torch.bfloat16, 70_003), (torch.int64, 1)):
        mine = rank_input(rank, (numel,), dtype)
        everyone = [rank_input(r, (numel,), dtype) for r in range(world_size)]
        outs = [torch.zeros(numel, dtype=dtype) for _ in range(world_size)]
        dist.all_gather(outs, mine)
        for r in range(world_size):
            assert_equal(outs[r], everyone[r], f"all_gather {dtype} x{numel} from {r}")
        flat = torch.zeros(world_size * numel, dtype=dtype)
        flat[rank * numel : (rank + 1) * numel] = mine
        dist.all_gather_into_tensor(flat, flat[rank * numel : (rank + 1) * numel])  # in place
        assert_equal(flat, torch.cat(everyone), f"all_gather_into_tensor in place {dtype} x{numel}")
        for op in (R.SUM, R.MAX):
            full = [rank_input(r, (world_size * numel,), dtype, salt=1) for r in range(world_size)]
            ref = reduce_reference(full, op, dtype)
            out = torch.zeros(numel, dtype=dtype)
            dist.reduce_scatter_tensor(out, full[rank], op=op)
            assert_equal(out, ref[rank * numel : (rank + 1) * numel], f"reduce_scatter_tensor {dtype} {op} x{numel}")
            out = torch.zeros(numel, dtype=dtype)
            dist.reduce_scatter(out, list(full[rank].chunk(world_size)), op=op)
            assert_equal(out, ref[rank * numel : (rank + 1) * numel], f"reduce_scatter {dtype} {op} x{numel}")
        calls += 1
    if gather != "gloo_fallback":  # (Gloo's adapters count their own sub-collectives)
        assert used(gather) == before_gather + 2 * calls, (gather, backend.algorithm_counts())
        assert used(scatter) == before_scatter + 4 * calls, (scatter, backend.algorithm_counts())


def large_all_to_all(rank, world_size):
    """all_to_all_single over several slots, even and uneven splits (empty
    blocks included), through this topology's engine algorithm."""
    backend = fastcomm.fastcomm_backend()
    path = _engine_path("alltoall")
    before = backend.algorithm_counts().get(path, 0)
    rows = lambda s, d: 40_000 * ((s + 2 * d) % 3)  # noqa: E731  (0, 40k or 80k rows of 2 floats: up to 640 KB)
    for split in ("even", "uneven"):
        count = (lambda s, d: 70_001) if split == "even" else rows
        inp = torch.cat([_block(rank, d, count(rank, d), torch.float32) for d in range(world_size)])
        expected = torch.cat([_block(s, rank, count(s, rank), torch.float32) for s in range(world_size)])
        out = torch.zeros_like(expected)
        if split == "even":
            dist.all_to_all_single(out, inp)
        else:
            dist.all_to_all_single(
                out,
                inp,
                output_split_sizes=[count(s, rank) for s in range(world_size)],
                input_split_sizes=[count(rank, d) for d in range(world_size)],
            )
        assert_equal(out, expected, f"all_to_all_single {split} splits")
    if path != "gloo_fallback":
        assert backend.algorithm_counts()[path] == before + 2, (path, backend.algorithm_counts())


def large_rooted(rank, world_size):
    """reduce, gather and scatter from every root over several slots and
    pipeline pieces, through this topology's engine algorithm; fastcomm's
    reduce leaves the other ranks' tensors as they were (Gloo's does not)."""
    backend = fastcomm.fastcomm_backend()
    used = lambda name: backend.algorithm_counts().get(name, 0)  # noqa: E731
    paths = {kind: _engine_path(kind) for kind in ("reduce", "gather", "scatter")}
    before = {kind: used(path) for kind, path in paths.items()}
    calls = 0
    for dtype, numel in ((torch.float32, 300_001), (torch.bfloat16, 70_003), (torch.int64, 1)):
        everyone = [rank_input(r, (numel,), dtype) for r in range(world_size)]
        for root in range(world_size):
            t = everyone[rank].clone()
            dist.reduce(t, dst=root, op=R.SUM)
            if rank == root:
                assert_equal(t, reduce_reference(everyone, R.SUM, dtype), f"reduce {dtype} x{numel} root {root}")
            elif paths["reduce"] != "gloo_fallback":
                assert_equal(t, everyone[rank], f"reduce {dtype} x{numel} root {root}: rank {rank} untouched")
            outs = [torch.zeros(numel, dtype=dtype) for _ in range(world_size)] if rank == root else None
            dist.gather(everyone[rank], outs, dst=root)
            if rank == root:
                for r in range(world_size):
                    assert_equal(outs[r], everyone[r], f"gather {dtype} x{numel} root {root} from {r}")
            out = torch.zeros(numel, dtype=dtype)
            pieces = [rank_input(r, (numel,), dtype, salt=root) for r in range(world_size)] if rank == root else None
            dist.scatter(out, pieces, src=root)
            assert_equal(out, rank_input(rank, (numel,), dtype, salt=root), f"scatter {dtype} x{numel} root {root}")
            calls += 1
    for kind, path in paths.items():
        if path != "gloo_fallback":  # (Gloo's adapters count their own sub-collectives)
            assert used(path) == before[kind] + calls, (path, backend.algorithm_counts())


def _block(src: int, dst: int, rows: int, dtype) -> torch.Tensor:
    """The rows src sends to dst in all_to_all checks: value 10*src + dst (+ row)."""
    if dtype == torch.bool:
        return torch.full((rows, 2), (src + dst) % 2 == 0, dtype=dtype)
    return (torch.arange(rows * 2).reshape(rows, 2) % 3 + 10 * src + dst).to(dtype)


def all_to_all_single(rank, world_size):
    for dtype in DTYPES:
        # even split: 2 rows per peer
        inp = torch.cat([_block(rank, d, 2, dtype) for d in range(world_size)])
        out = torch.zeros_like(inp)
        dist.all_to_all_single(out, inp)
        assert_equal(out, torch.cat([_block(s, rank, 2, dtype) for s in range(world_size)]), f"even {dtype}")

        # uneven: src sends (src + dst + 1) rows to dst, some peers get 0 rows from rank 0 when dst == 0? no: >= 1
        def rows(s, d):
            return (s + 2 * d) % 3  # includes zero-row splits

        inp = torch.cat([_block(rank, d, rows(rank, d), dtype) for d in range(world_size)])
        expected = torch.cat([_block(s, rank, rows(s, rank), dtype) for s in range(world_size)])
        out = torch.zeros_like(expected)
        dist.all_to_all_single(
            out,
            inp,
            output_split_sizes=[rows(s, rank) for s in range(world_size)],
            input_split_sizes=[rows(rank, d) for d in range(world_size)],
        )
        assert_equal(out, expected, f"uneven {dtype}")


def all_to_all(rank, world_size):
    for dtype in DTYPES:

        def rows(s, d):
            return (s + 2 * d) % 3 + 1

        inputs = [_block(rank, d, rows(rank, d), dtype) for d in range(world_size)]
        outputs = [torch.zeros(rows(s, rank), 2, dtype=dtype) for s in range(world_size)]
        dist.all_to_all(outputs, inputs)
        for s in range(world_size):
            assert_equal(outputs[s], _block(s, rank, rows(s, rank), dtype), f"all_to_all {dtype} from {s}")


def gather_scatter(rank, world_size):
    for dtype in DTYPES:
        for root in range(world_size):
            outs = [torch.zeros(3, dtype=dtype) for _ in range(world_size)] if rank == root else None
            dist.gather(rank_input(rank, (3,), dtype), gather_list=outs, dst=root)
            if rank == root:
                for r in range(world_size):
                    assert_equal(outs[r], rank_input(r, (3,), dtype), f"gather {dtype} root {root} from {r}")
            ins = [rank_input(root, (3,), dtype, salt=d) for d in range(world_size)] if rank == root else None
            out = torch.zeros(3, dtype=dtype)
            dist.scatter(out, scatter_list=ins, src=root)
            assert_equal(out, rank_input(root, (3,), dtype, salt=rank), f"scatter {dtype} root {root}")


def point_to_point(rank, world_size):
    nxt, prv = (rank + 1) % world_size, (rank - 1) % world_size
    for dtype in DTYPES:
        # blocking ring in two phases so nobody deadlocks
        out = torch.zeros(4, dtype=dtype)
        if rank % 2 == 0:
            dist.send(rank_input(rank, (4,), dtype), dst=nxt)
            dist.recv(out, src=prv)
        else:
            dist.recv(out, src=prv)
            dist.send(rank_input(rank, (4,), dtype), dst=nxt)
        assert_equal(out, rank_input(prv, (4,), dtype), f"send/recv {dtype}")
    # tags keep messages apart: send tag 2 first, receive tag 1 first
    a, b = torch.zeros(3), torch.zeros(3)
    reqs = [
        dist.isend(torch.full((3,), 100.0 + rank), dst=nxt, tag=2),
        dist.isend(torch.full((3,), 200.0 + rank), dst=nxt, tag=1),
        dist.irecv(a, src=prv, tag=1),
        dist.irecv(b, src=prv, tag=2),
    ]
    for req in reqs:
        req.wait()
    assert_equal(a, torch.full((3,), 200.0 + prv), "tag 1")
    assert_equal(b, torch.full((3,), 100.0 + prv), "tag 2")
    # batch_isend_irecv ring, with futures on p2p works
    got = torch.zeros(5, dtype=torch.int64)
    ops = [
        dist.P2POp(dist.isend, torch.full((5,), rank, dtype=torch.int64), nxt),
        dist.P2POp(dist.irecv, got, prv),
    ]
    reqs = dist.batch_isend_irecv(ops)
    reqs[-1].get_future().wait()
    for req in reqs:
        req.wait()
    assert_equal(got, torch.full((5,), prv, dtype=torch.int64), "batch_isend_irecv")
    # recv from any source
    if rank == 0:
        seen = set()
        for _ in range(world_size - 1):
            t = torch.zeros(1, dtype=torch.int64)
            src = dist.recv(t)
            assert t.item() == src * 11, (t, src)
            seen.add(src)
        assert seen == set(range(1, world_size))
    else:
        dist.send(torch.tensor([rank * 11]), dst=0)


def barrier_and_objects(rank, world_size):
    backend = fastcomm.fastcomm_backend()
    path = _engine_path("barrier")
    before = backend.algorithm_counts().get(path, 0)
    dist.barrier()
    assert backend.algorithm_counts()[path] == before + 1, (path, backend.algorithm_counts())
    work = dist.barrier(async_op=True)
    work.wait()
    objs = [None] * world_size
    dist.all_gather_object(objs, {"rank": rank, "text": "x" * rank})
    assert objs == [{"rank": r, "text": "x" * r} for r in range(world_size)]
    lst = [f"from0-{i}" for i in range(3)] if rank == 0 else [None] * 3
    dist.broadcast_object_list(lst, src=0)
    assert lst == [f"from0-{i}" for i in range(3)]
    root = world_size - 1
    gathered = [None] * world_size if rank == root else None
    dist.gather_object((rank, [rank] * rank), gathered, dst=root)
    if rank == root:
        assert gathered == [(r, [r] * r) for r in range(world_size)]
    out = [None]
    dist.scatter_object_list(out, [f"obj{r}" for r in range(world_size)] if rank == 0 else None, src=0)
    assert out == [f"obj{rank}"]


def coalesced(rank, world_size):
    # all_reduce_coalesced (one flat buffer), int16 so the widening adapter runs under it
    shapes = [(3,), (2, 2), (5,)]
    tensors = [rank_input(rank, s, torch.int16, salt=i) for i, s in enumerate(shapes)]
    dist.all_reduce_coalesced(tensors, op=R.MAX)
    for i, (t, shape) in enumerate(zip(tensors, shapes)):
        ref = reduce_reference(
            [rank_input(r, shape, torch.int16, salt=i) for r in range(world_size)], R.MAX, torch.int16
        )
        assert_equal(t, ref, f"all_reduce_coalesced {i}")
    # mixed dtypes through the coalescing manager: packed per dtype
    dtypes = [torch.float32, torch.int64, torch.float32, torch.bfloat16]
    tensors = [rank_input(rank, (4,), d, salt=i) for i, d in enumerate(dtypes)]
    with dist._coalescing_manager():
        for t in tensors:
            dist.all_reduce(t)
    for i, (t, d) in enumerate(zip(tensors, dtypes)):
        ref = reduce_reference([rank_input(r, (4,), d, salt=i) for r in range(world_size)], R.SUM, d)
        assert_equal(t, ref, f"mixed dtypes {d}")
    # the coalescing manager's fast paths
    a, b = rank_input(rank, (4,), torch.float64), rank_input(rank, (6,), torch.float64, salt=1)
    with dist._coalescing_manager(async_ops=True) as cm:
        dist.all_reduce(a, op=R.AVG)
        dist.all_reduce(b, op=R.AVG)
    cm.wait()
    assert_equal(
        a,
        reduce_reference([rank_input(r, (4,), torch.float64) for r in range(world_size)], R.AVG, torch.float64),
        "cm a",
    )
    assert_equal(
        b,
        reduce_reference([rank_input(r, (6,), torch.float64, salt=1) for r in range(world_size)], R.AVG, torch.float64),
        "cm b",
    )
    ins = [rank_input(rank, (2,), torch.int32), rank_input(rank, (3,), torch.int32, salt=5)]
    outs = [torch.zeros(2 * world_size, dtype=torch.int32), torch.zeros(3 * world_size, dtype=torch.int32)]
    with dist._coalescing_manager():
        for o, i in zip(outs, ins):
            dist.all_gather_into_tensor(o, i)
    assert_equal(outs[0], torch.cat([rank_input(r, (2,), torch.int32) for r in range(world_size)]), "cm all_gather 0")
    assert_equal(
        outs[1], torch.cat([rank_input(r, (3,), torch.int32, salt=5) for r in range(world_size)]), "cm all_gather 1"
    )
    ins = [
        rank_input(rank, (2 * world_size,), torch.float32),
        rank_input(rank, (3 * world_size,), torch.float32, salt=2),
    ]
    outs = [torch.zeros(2), torch.zeros(3)]
    with dist._coalescing_manager():
        for o, i in zip(outs, ins):
            dist.reduce_scatter_tensor(o, i)
    for k, (n, salt) in enumerate([(2, 0), (3, 2)]):
        full = reduce_reference(
            [rank_input(r, (n * world_size,), torch.float32, salt=salt) for r in range(world_size)],
            R.SUM,
            torch.float32,
        )
        assert_equal(outs[k], full[rank * n : rank * n + n], f"cm reduce_scatter {k}")


def all_gather_coalesced_list_form(rank, world_size):
    """The deprecated all_gather_coalesced: output_lists[r][i] receives rank r's input i."""
    import warnings

    inputs = [rank_input(rank, (2,), torch.int16), rank_input(rank, (3, 2), torch.int16, salt=4)]
    outputs = [[torch.zeros_like(t) for t in inputs] for _ in range(world_size)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dist.all_gather_coalesced(outputs, inputs)
    for r in range(world_size):
        assert_equal(outputs[r][0], rank_input(r, (2,), torch.int16), f"from {r} tensor 0")
        assert_equal(outputs[r][1], rank_input(r, (3, 2), torch.int16, salt=4), f"from {r} tensor 1")


def monitored_barrier_and_sparse(rank, world_size):
    import datetime

    import fastcomm

    # torch's dist.monitored_barrier admits only the gloo backend by name; the
    # backend object itself forwards to its Gloo delegate
    backend = fastcomm.fastcomm_backend()
    backend.monitored_barrier(datetime.timedelta(seconds=30), False)
    backend.monitored_barrier(datetime.timedelta(seconds=30), True)
    # sparse COO all_reduce (DDP with sparse embeddings): row `rank` holds rank+1
    dense = torch.zeros(world_size + 1, 2)
    dense[rank] = rank + 1
    sparse = dense.to_sparse()
    dist.all_reduce(sparse)
    expected = torch.zeros(world_size + 1, 2)
    for r in range(world_size):
        expected[r] = r + 1
    assert_equal(sparse.to_dense(), expected, "sparse all_reduce")


MOVE_ONLY = [torch.uint16, torch.uint32, torch.uint64, torch.float8_e4m3fn, torch.float8_e5m2]


def _bits(rank: int, numel: int, dtype: torch.dtype, salt: int = 0) -> torch.Tensor:
    """Arbitrary bit patterns per rank (all bytes, so NaN/inf encodings of float8 too)."""
    size = torch.tensor([], dtype=dtype).element_size()
    raw = ((torch.arange(numel * size) * 37 + rank * 101 + salt * 13) % 256).to(torch.uint8)
    return raw.view(dtype)


def _same_bits(a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape, f"{what}: {a.dtype}{tuple(a.shape)} vs {b.dtype}{tuple(b.shape)}"
    assert torch.equal(a.view(torch.uint8), b.view(torch.uint8)), f"{what}: bits differ"


def move_only_dtypes(rank, world_size):
    """uint16/32/64 and float8: moved bit-exactly by broadcast, gathers, scatter, all_to_all, p2p."""
    for dtype in MOVE_ONLY:
        t = _bits(rank, 6, dtype)
        dist.broadcast(t, src=0)
        _same_bits(t, _bits(0, 6, dtype), f"broadcast {dtype}")
        out = torch.empty(6 * world_size, dtype=dtype)
        dist.all_gather_into_tensor(out, _bits(rank, 6, dtype))
        _same_bits(out, torch.cat([_bits(r, 6, dtype) for r in range(world_size)]), f"all_gather {dtype}")
        outs = [torch.empty(2, dtype=dtype) for _ in range(world_size)]
        dist.all_to_all(outs, [_bits(rank, 2, dtype, salt=d) for d in range(world_size)])
        for s in range(world_size):
            _same_bits(outs[s], _bits(s, 2, dtype, salt=rank), f"all_to_all {dtype} from {s}")
        got = torch.empty(3, dtype=dtype)
        nxt, prv = (rank + 1) % world_size, (rank - 1) % world_size
        reqs = [dist.isend(_bits(rank, 3, dtype), dst=nxt), dist.irecv(got, src=prv)]
        for r in reqs:
            r.wait()
        _same_bits(got, _bits(prv, 3, dtype), f"send/recv {dtype}")


def subgroups(rank, world_size):
    import fastcomm

    default = fastcomm.fastcomm_backend()
    members = [0, world_size - 1]
    group = dist.new_group(members)  # every rank calls new_group
    if rank in members:
        sub = fastcomm.fastcomm_backend(group)
        assert sub is not default and sub.size() == 2
        t = torch.full((3,), float(rank))
        dist.all_reduce(t, group=group)
        assert_equal(t, torch.full((3,), float(sum(members))), "subgroup all_reduce")
        objs = [None, None]
        dist.all_gather_object(objs, rank, group=group)
        assert objs == members
    # a gloo group beside fastcomm's in the same processes
    gloo = dist.new_group(backend="gloo")
    t = torch.ones(2)
    dist.all_reduce(t, group=gloo)
    assert_equal(t, torch.full((2,), float(world_size)), "gloo group")
    dist.destroy_process_group(group)
    dist.destroy_process_group(gloo)


def sequence_numbers(rank, world_size):
    import fastcomm

    backend = fastcomm.fastcomm_backend()
    before = backend._get_sequence_number_for_group()
    work = dist.all_reduce(torch.ones(1), async_op=True)
    work.wait()
    after = backend._get_sequence_number_for_group()
    assert after == before + 1, (before, after)
    seqs = [None] * world_size
    dist.all_gather_object(seqs, after)
    assert len(set(seqs)) == 1, f"sequence numbers differ across ranks: {seqs}"


def algorithm_paths(rank, world_size):
    """Which algorithm ran: fastcomm's own adapters where Gloo has gaps."""
    import fastcomm

    backend = fastcomm.fastcomm_backend()
    before = backend.algorithm_counts()
    dist.all_reduce(torch.ones(2, dtype=torch.int16))
    dist.all_reduce(torch.ones(2), op=R.AVG)
    after = backend.algorithm_counts()
    assert after.get("int16_via_int32", 0) == before.get("int16_via_int32", 0) + 1
    assert after.get("avg_via_sum", 0) == before.get("avg_via_sum", 0) + 1
    assert backend.algorithm_names()[-1] == "gloo_fallback"
    _small_all_reduce_path(backend, rank, world_size)


def _small_all_reduce_path(backend, rank, world_size):
    """Small all_reduce: on one host the shm one-shot algorithm (below single
    copy's minimum; past one-shot's limit single copy or two-shot); across hosts the
    hierarchical one; on Gloo (FASTCOMM_SHM=0) up to FASTCOMM_ALLREDUCE_ALLGATHER_MAX_BYTES
    one all_gather and a local reduction. Each is bitwise identical on every rank."""
    from fastcomm._options import read_options

    options = read_options()
    names = backend.algorithm_names()
    if "allreduce_shm_oneshot" in names:
        # The one-shot limit shrinks with the group: S * (P-1)^2 <= the 2-rank limit.
        limit = options.shm_oneshot_max_bytes // max(1, (world_size - 1) ** 2)
        small, large = "allreduce_shm_oneshot", "allreduce_shm_twoshot"
    elif "allreduce_hierarchical" in names:
        small, limit, large = "allreduce_hierarchical", 1 << 62, "allreduce_hierarchical"
    else:
        small, limit, large = "allreduce_via_allgather", options.allreduce_allgather_max_bytes, "gloo_fallback"
    used = lambda name: backend.algorithm_counts().get(name, 0)  # noqa: E731
    before = used(small)
    x = torch.randn(1000, generator=torch.Generator().manual_seed(rank), dtype=torch.float32)
    inputs = [
        torch.randn(1000, generator=torch.Generator().manual_seed(r), dtype=torch.float32) for r in range(world_size)
    ]
    dist.all_reduce(x)
    assert used(small) == before + (1 if limit >= x.nbytes else 0), (small, limit, before, used(small))
    torch.testing.assert_close(x, sum(t.double() for t in inputs).float(), rtol=1e-6, atol=1e-6)
    everyone = [torch.empty_like(x) for _ in range(world_size)]
    dist.all_gather(everyone, x)
    assert all(torch.equal(e, x) for e in everyone), "all_reduce results differ between ranks"
    if limit >= 1 << 30:
        return
    big = torch.ones(max(limit, 4) // 4 + 1)  # one element past the limit
    low, high = backend.config.shm_allreduce_single_copy_min_bytes, backend.config.shm_allreduce_single_copy_max_bytes
    if large == "allreduce_shm_twoshot" and 0 < low <= big.nbytes <= high:
        large = "allreduce_shm_single_copy"  # asked before one-shot, from its minimum on
    before_small, before_large = used(small), used(large)
    dist.all_reduce(big)
    assert used(small) == before_small and used(large) == before_large + 1, (small, large, backend.algorithm_counts())
    assert torch.equal(big, torch.full_like(big, float(world_size)))


def socket_ifname(rank, world_size):
    """The interfaces this rank's group was configured with (GLOO_SOCKET_IFNAME)."""
    return fastcomm.fastcomm_backend().config.socket_ifname
