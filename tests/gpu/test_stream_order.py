"""Stream ordering of the CUDA path (skipped without a GPU).

ProcessGroupNCCL's contract, which fastcomm's CUDA path must keep: a
collective's work waits for what the caller queued before the call; once
`Work.wait()` returns the caller's current stream waits for the collective,
fastcomm's kernels around NCCL included; `synchronize()` does the same; the
future's `then()` callbacks (DDP's hooks) see the results.

A one-rank group changes no data, so each probe queues the op on a side stream
behind a long `torch.cuda._sleep`, and writes the op's input there after the
sleep (NEW where it held OLD). The caller's stream then waits (or a callback
runs) and copies the op's outputs at once, then writes a sentinel into them.
Ordered, the copies hold NEW and the sentinel stays; with no ordering at all
the copies run during the sleep and hold the old contents (deterministic: the
sleep is ~0.5 s). Where fastcomm's own kernel runs after NCCL (a copy back,
an unpack), an ordering that covered NCCL alone lets that kernel race the
copies and the sentinel: the outputs are large so the race shows, but a race
is what it is. Every group first runs one collective and synchronises, so
NCCL's set-up never outlasts the sleep.

Each op is taken through the paths fastcomm adds around NCCL: direct
delegation, contiguous staging (non-contiguous tensors, copied back after
NCCL), int16 widened to int32 (narrowed back after NCCL) and coalescing into
flat buffers (mixed dtypes: one NCCL call per dtype, unpacked after them all:
the chained future of several parts).
"""

import datetime

import pytest
import torch
import torch.distributed as dist

import fastcomm

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or not fastcomm.cuda_kernels_compiled(),
    reason="needs a CUDA device and fastcomm built with its CUDA kernels",
)

SLEEP_CYCLES = 1_000_000_000  # ~0.5 s at the H100's clocks: far longer than any op below or its launch
ELEMENTS = 1 << 22
OLD, NEW, SENTINEL = 3, 7, 5


@pytest.fixture
def group():
    dist.init_process_group(
        "fastcomm", store=dist.HashStore(), rank=0, world_size=1, timeout=datetime.timedelta(seconds=60)
    )
    warm = torch.ones(1, device="cuda")
    dist.all_reduce(warm)  # NCCL's communicator is made here, not behind a probe's sleep
    torch.cuda.synchronize()
    yield fastcomm.fastcomm_backend()
    dist.destroy_process_group()


def _full(dtype, n=ELEMENTS, value=OLD):
    return torch.full((n,), value, dtype=dtype, device="cuda")


def _non_contiguous(dtype, value=OLD):
    return torch.full((ELEMENTS, 2), value, dtype=dtype, device="cuda")[:, 0]


# Each case makes its tensors and returns (inputs, outputs, launch(async_op) -> work): the probe
# writes NEW into the inputs after the sleep, and expects NEW in every output.
def _in_place(make):
    def case():
        t = make()
        return [t], [t], lambda async_op: dist.all_reduce(t, async_op=async_op)

    return case


def _all_gather(output):
    def case():
        x, out = _full(torch.float32), output()
        return [x], [out], lambda async_op: dist.all_gather_into_tensor(out, x, async_op=async_op)

    return case


def _broadcast_non_contiguous():
    t = _non_contiguous(torch.float32)
    return [t], [t], lambda async_op: dist.broadcast(t, 0, async_op=async_op)


def _coalesced_all_reduce():
    tensors = [_full(torch.float32), _full(torch.float16, n=ELEMENTS // 2 + 3), _full(torch.int32, n=1000)]

    def launch(async_op):
        # What _coalescing_manager calls at its exit; here its work (and future) is the probe's.
        return dist.group.WORLD.allreduce_coalesced(tensors, dist.AllreduceCoalescedOptions())

    return tensors, tensors, launch


def _coalesced_all_gather():
    inputs = [_full(torch.float32), _full(torch.float16, n=ELEMENTS // 2 + 3)]
    outputs = [torch.zeros_like(x) for x in inputs]

    def launch(async_op):
        with dist._coalescing_manager(async_ops=True) as cm:
            for out, x in zip(outputs, inputs):
                dist.all_gather_into_tensor(out, x)
        return cm

    return inputs, outputs, launch


CASES = {
    "all_reduce": _in_place(lambda: _full(torch.float32)),
    "all_reduce_non_contiguous": _in_place(lambda: _non_contiguous(torch.float32)),
    "all_reduce_int16": _in_place(lambda: _full(torch.int16)),
    "all_gather_into_tensor": _all_gather(lambda: torch.zeros(ELEMENTS, device="cuda")),
    "all_gather_non_contiguous_output": _all_gather(lambda: _non_contiguous(torch.float32, value=0)),
    "broadcast_non_contiguous": _broadcast_non_contiguous,
    "coalesced_all_reduce_mixed_dtypes": _coalesced_all_reduce,
    "coalesced_all_gather_mixed_dtypes": _coalesced_all_gather,
}
# The cases a future callback can read: one work with one future (the coalescing manager's has none).
FUTURE_CASES = [name for name in CASES if name != "coalesced_all_gather_mixed_dtypes"]


def _launch_behind_a_sleep(case):
    """The case's op queued on a side stream after a long sleep and after NEW is
    written into its inputs; returns (outputs, work)."""
    inputs, outputs, launch = CASES[case]()
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(SLEEP_CYCLES)
        for t in inputs:
            t.fill_(NEW)
        work = launch(True)
    return outputs, work


def _copy_then_overwrite(outputs):
    """On the current stream: copies of `outputs`, then SENTINEL written into them."""
    copies = [t.clone() for t in outputs]
    for t in outputs:
        t.fill_(SENTINEL)
    return copies


def _assert_ordered(copies, outputs, case, what):
    torch.cuda.synchronize()
    for i, copy in enumerate(copies):
        wrong = int((copy != NEW).sum())
        assert wrong == 0, f"{case}: output {i} read before the op ended ({what}): {wrong} of {copy.numel()} elements"
    for i, t in enumerate(outputs):
        wrong = int((t != SENTINEL).sum())
        assert wrong == 0, (
            f"{case}: the op wrote output {i} after it was read ({what}): {wrong} of {t.numel()} elements"
        )


@pytest.mark.parametrize("case", list(CASES))
def test_wait_orders_the_waiting_stream(group, case):
    outputs, work = _launch_behind_a_sleep(case)
    work.wait()  # on the default stream, which must now wait for the op
    _assert_ordered(_copy_then_overwrite(outputs), outputs, case, "after wait()")


@pytest.mark.parametrize("case", FUTURE_CASES)
def test_future_callbacks_are_ordered_after_the_op(group, case):
    """DDP's hooks chain then() on the work's future: the callback's stream must
    wait for the op, and a wait() on the chained future orders the caller's."""
    outputs, work = _launch_behind_a_sleep(case)
    copies = work.get_future().then(lambda fut: _copy_then_overwrite(outputs)).wait()
    _assert_ordered(copies, outputs, case, "in a then() callback")


@pytest.mark.parametrize("case", ["all_reduce", "all_reduce_non_contiguous"])
def test_synchronize_orders_the_current_stream(group, case):
    outputs, work = _launch_behind_a_sleep(case)
    work.synchronize()
    _assert_ordered(_copy_then_overwrite(outputs), outputs, case, "after synchronize()")


def test_is_completed_follows_the_device(group):
    outputs, work = _launch_behind_a_sleep("all_reduce")
    assert not work.is_completed(), "is_completed() was true while the op still waited behind the sleep"
    work.wait()
    torch.cuda.synchronize()
    assert work.is_completed()


def test_barrier_waits_for_queued_cuda_work(group):
    """As ProcessGroupNCCL's barrier: it returns once the CUDA work this rank
    queued before it has run on the device."""
    outputs, work = _launch_behind_a_sleep("all_reduce")
    dist.barrier()
    assert work.is_completed(), "barrier() returned while an all_reduce queued before it had not run"
    work.wait()
    _assert_ordered(_copy_then_overwrite(outputs), outputs, "all_reduce", "after barrier()")


def test_coalescing_manager_on_cuda(group):
    """The coalescing manager's all_reduce fast path (one all_reduce_coalesced
    inside a block without point-to-point calls) runs through fastcomm's flat
    buffers as outside a block; the block's work orders the waiting stream."""
    from torch.distributed.distributed_c10d import _coalescing_manager

    a, b = _full(torch.float32), _full(torch.float32, n=1000)
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(SLEEP_CYCLES)
        a.fill_(NEW)
        b.fill_(NEW)
        with _coalescing_manager(device=torch.device("cuda"), async_ops=True) as cm:
            dist.all_reduce(a)
            dist.all_reduce(b)
    cm.wait()
    _assert_ordered(_copy_then_overwrite([a, b]), [a, b], "coalesced all_reduce", "after the block's wait()")


def test_coalescing_block_without_point_to_point_keeps_the_adapters(group):
    """A collective that fastcomm stages (non-contiguous) runs through its
    adapter inside a block that has no point-to-point call, and the block's
    work covers it."""
    from torch.distributed.distributed_c10d import _get_default_group

    pg = _get_default_group()
    t = _non_contiguous(torch.float32)
    pg._start_coalescing(torch.device("cuda"))
    dist.broadcast(t, src=0, async_op=True)
    pg._end_coalescing(torch.device("cuda")).wait()
    assert torch.equal(t.cpu(), torch.full((ELEMENTS,), float(OLD)))


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="point-to-point on CUDA needs two GPUs (one rank each)")
@pytest.mark.parametrize("batched", [False, True], ids=["isend_irecv", "batch_isend_irecv"])
def test_point_to_point_orders_the_waiting_stream(batched):
    import os
    import sys

    sys.path.insert(0, os.path.dirname(__file__))
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "multiproc"))
    import checks_stream_order
    from harness import RankPool

    pool = RankPool(2)
    try:
        pool.run(checks_stream_order.p2p_stream_order, batched=batched, sleep_cycles=SLEEP_CYCLES)
    finally:
        pool.close()


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="point-to-point on CUDA needs two GPUs (one rank each)")
def test_point_to_point_block_refuses_rewrites_and_closes():
    import os
    import sys

    sys.path.insert(0, os.path.dirname(__file__))
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "multiproc"))
    import checks_stream_order
    from harness import RankPool

    pool = RankPool(2)
    try:
        pool.run(checks_stream_order.p2p_block_refuses_rewrites)
    finally:
        pool.close()
