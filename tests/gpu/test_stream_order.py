"""Stream ordering of the CUDA path (skipped without a GPU).

ProcessGroupNCCL's contract, which fastcomm's CUDA path must keep: a
collective's work waits for what the caller queued before the call, and once
`Work.wait()` returns (or a synchronous call returns) the caller's current
stream waits for the collective, fastcomm's kernels around NCCL included; the
future's `then()` callbacks (DDP's hooks) see the results.

A one-rank group changes no data, so the probes watch the order of writes:

- async + wait: the op is queued on a side stream behind a long
  `torch.cuda._sleep`; `wait()` is called on the default stream, which then
  zeroes the op's output. If wait() ordered nothing, the zeroing runs at once
  and the op's late write (NCCL's, or fastcomm's copy back after it) lands
  after it: the output is not zero. Deterministic: the sleep is ~0.1 s.
- synchronous: the call and the zeroing share the caller's stream; an
  unordered late write races the zeroing, so these probes catch a missing wait
  with high probability rather than always (large tensors widen the window).

Each op is taken through the paths fastcomm adds around NCCL: direct
delegation, contiguous staging (non-contiguous tensors), int16 widened to
int32, and coalescing into flat buffers (mixed dtypes: several parts).
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

SLEEP_CYCLES = 200_000_000  # ~0.1 s at the H100's clocks: far longer than any op below
ELEMENTS = 1 << 22


@pytest.fixture
def group():
    dist.init_process_group(
        "fastcomm", store=dist.HashStore(), rank=0, world_size=1, timeout=datetime.timedelta(seconds=60)
    )
    yield fastcomm.fastcomm_backend()
    dist.destroy_process_group()


def _filled(dtype, value=3, n=ELEMENTS):
    return torch.full((n,), value, dtype=dtype, device="cuda")


def _non_contiguous(dtype):
    return torch.full((ELEMENTS, 2), 3, dtype=dtype, device="cuda")[:, 0]


# Each case: (name, make the tensors, launch(tensors, async_op) -> work, the tensors the op writes)
def _all_reduce(make):
    def case():
        t = make()
        return [t], lambda async_op: dist.all_reduce(t, async_op=async_op)

    return case


def _all_gather():
    x, out = _filled(torch.float32), torch.zeros(ELEMENTS, device="cuda")
    return [out], lambda async_op: dist.all_gather_into_tensor(out, x, async_op=async_op)


def _broadcast_non_contiguous():
    t = _non_contiguous(torch.float32)
    return [t], lambda async_op: dist.broadcast(t, 0, async_op=async_op)


def _coalesced_mixed_dtypes():
    tensors = [_filled(torch.float32), _filled(torch.float16, n=ELEMENTS // 2 + 3), _filled(torch.int32, n=1000)]

    def launch(async_op):
        with dist._coalescing_manager(async_ops=True) as cm:
            for t in tensors:
                dist.all_reduce(t)
        if async_op:
            return cm
        cm.wait()
        return None

    return tensors, launch


# (A plain in-place all_reduce is not among them: at one rank NCCL writes nothing.)
CASES = {
    "all_reduce_non_contiguous": _all_reduce(lambda: _non_contiguous(torch.float32)),
    "all_reduce_int16": _all_reduce(lambda: _filled(torch.int16)),
    "all_gather_into_tensor": _all_gather,
    "broadcast_non_contiguous": _broadcast_non_contiguous,
    "coalesced_mixed_dtypes": _coalesced_mixed_dtypes,
}


@pytest.mark.parametrize("case", list(CASES))
def test_wait_orders_the_waiting_stream(group, case):
    written, launch = CASES[case]()
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(SLEEP_CYCLES)
        work = launch(True)
    work.wait()  # on the default stream: it must now wait for the op
    for t in written:
        t.zero_()
    torch.cuda.synchronize()
    for t in written:
        assert int(t.count_nonzero()) == 0, f"{case}: the op wrote after wait() returned"


@pytest.mark.parametrize("case", list(CASES))
def test_synchronous_call_orders_the_callers_stream(group, case):
    for _ in range(5):  # a race: repeat to make a missing order show
        written, launch = CASES[case]()
        torch.cuda.synchronize()
        launch(False)
        for t in written:
            t.zero_()
        torch.cuda.synchronize()
        for t in written:
            assert int(t.count_nonzero()) == 0, f"{case}: the op wrote after the synchronous call returned"


@pytest.mark.parametrize("case", ["all_reduce_int16", "all_reduce_non_contiguous", "all_gather_into_tensor"])
def test_future_callbacks_are_ordered_after_the_op(group, case):
    """DDP's hooks chain then() on the work's future: the callback's stream must
    wait for the op (here the callback zeroes the results, so a late write of
    the op shows), and a wait() on the chained future orders the caller's."""
    written, launch = CASES[case]()
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(SLEEP_CYCLES)
        work = launch(True)

    def zero_results(fut):
        for t in fut.value():
            t.zero_()
        return fut.value()

    work.get_future().then(zero_results).wait()
    torch.cuda.synchronize()
    for t in written:
        assert int(t.count_nonzero()) == 0, f"{case}: the callback ran before the op's last write"


def test_is_completed_follows_the_device(group):
    t = _filled(torch.float32)
    torch.cuda.synchronize()
    torch.cuda._sleep(SLEEP_CYCLES)
    work = dist.all_reduce(t, async_op=True)
    assert not work.is_completed(), "is_completed() was true while the op still waited behind the sleep"
    work.wait()
    torch.cuda.synchronize()
    assert work.is_completed()


def test_synchronize_orders_the_current_stream(group):
    t = _non_contiguous(torch.float32)  # staged: fastcomm copies back after NCCL
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(SLEEP_CYCLES)
        work = dist.all_reduce(t, async_op=True)
    work.synchronize()
    t.zero_()
    torch.cuda.synchronize()
    assert int(t.count_nonzero()) == 0


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
