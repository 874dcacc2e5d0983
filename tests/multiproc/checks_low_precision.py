"""fastcomm's low-precision all_reduce (backend.all_reduce_low_precision, the
fp16/bf16 hooks' path on fastcomm groups): bitwise against a plain torch
statement of its definition (core/collective.h LowPrecisionWire), on every
topology, through the path the topology should take (peers' tensors read and
written by cross-memory attach from single copy's minimum on one host), on
arena tensors read in place too; bad arguments; the hooks use it, on DDP's arena buckets too."""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import fastcomm
import fastcomm.hooks as hooks
from fastcomm.hooks import reference
from fastcomm.hooks.low_precision import float16_limit
from checks_errors import _expect_error, _group_still_works


def _input(rank: int, numel: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Random values of every magnitude: some beyond float16 (clamped), inf and NaN, zeros."""
    g = torch.Generator().manual_seed(seed * 100 + rank)
    x = torch.randn(numel, generator=g, dtype=torch.float64) * torch.exp(
        torch.randn(numel, generator=g, dtype=torch.float64) * 4
    )
    if numel > 10:
        x[3] = 1e6 * (rank + 1)
        x[5] = float("inf") if rank == 0 else 1.0
        x[7] = float("nan") if rank == 1 else 0.0
        x[9] = 0.0
    return x.to(dtype)


expected = reference.low_precision_all_reduce  # the definition, in plain torch


def composed(mine: torch.Tensor, wire: torch.dtype, scale: float, limit: float) -> torch.Tensor:
    """What the hooks did before on every group and still do off one host: the
    rank's values packed (the reference), an ordinary all_reduce of the wire
    dtype on this group, widened back."""
    sent = torch.empty(mine.numel(), dtype=wire)
    reference.multi_tensor_pack([mine], sent, scale, limit)
    dist.all_reduce(sent)
    out = torch.empty_like(mine)
    reference.multi_tensor_unpack(sent, [out], 1.0)
    return out


SEGMENT_PATH = "allreduce_low_precision_shm"
SINGLE_COPY_PATH = "allreduce_low_precision_shm_single_copy"
COMPOSED_PATH = "allreduce_low_precision_via_compress"
PATHS = (SEGMENT_PATH, SINGLE_COPY_PATH, COMPOSED_PATH)


def _path(nbytes: int) -> str:
    """The algorithm that should take an ordinary tensor of `nbytes` on this
    group: off one host the composition; on one host single copy from its
    minimum (shared with the plain all_reduce's; 0: off), else the segment."""
    backend = fastcomm.fastcomm_backend()
    if SEGMENT_PATH not in backend.algorithm_names():
        return COMPOSED_PATH
    low = backend.config.shm_allreduce_single_copy_min_bytes
    return SINGLE_COPY_PATH if 0 < low <= nbytes else SEGMENT_PATH


def _calls_since(before: dict) -> dict:
    after = fastcomm.fastcomm_backend().algorithm_counts()
    return {p: after.get(p, 0) - before.get(p, 0) for p in PATHS if after.get(p, 0) != before.get(p, 0)}


def matches_definition(rank, world_size):
    """float16 (with fp16's limit) and bfloat16 (no limit), float32 and float64
    and bfloat16 tensors, sizes from empty to several slots and pieces (300_001
    elements; 6_145 crosses 4 KiB slots at 2-byte elements), through this
    topology's path, bitwise: on one host equal to the definition (float32
    sums in rank order, rounded once), elsewhere to the composition around
    the group's own all_reduce; clamp counts per rank."""
    backend = fastcomm.fastcomm_backend()
    one_host = _path(0) != COMPOSED_PATH
    before = backend.algorithm_counts()
    calls = {}
    cases = [(torch.float16, float16_limit(world_size)), (torch.bfloat16, float("inf")), (torch.float16, 2.0)]
    for seed, (wire, limit) in enumerate(cases):
        for dtype in (torch.float32, torch.float64, torch.bfloat16):
            for numel in (0, 1, 5, 6_145, 300_001):
                inputs = [_input(r, numel, dtype, seed) for r in range(world_size)]
                want, counts = expected(inputs, wire, 1.0 / world_size, limit)
                if not one_host:
                    want = composed(inputs[rank], wire, 1.0 / world_size, limit)
                tensor = inputs[rank].clone()
                clamped = torch.tensor([5], dtype=torch.long)
                work = backend.all_reduce_low_precision(tensor, wire, 1.0 / world_size, limit, clamped)
                work.wait()
                assert work.get_future().value()[0].data_ptr() == tensor.data_ptr()  # in place
                what = f"{wire} limit {limit} {dtype} x{numel}"
                torch.testing.assert_close(tensor, want, rtol=0, atol=0, equal_nan=True, msg=what)
                assert clamped.item() == 5 + counts[rank], (what, clamped.item(), counts)
                calls[_path(tensor.nbytes)] = calls.get(_path(tensor.nbytes), 0) + 1
    assert _calls_since(before) == calls, (calls, backend.algorithm_counts())
    # without a counter, and a 2-D tensor (any contiguous shape)
    x = _input(rank, 12, torch.float32, 9).view(3, 4)
    want, _ = expected([_input(r, 12, torch.float32, 9) for r in range(world_size)], torch.float16, 0.5, 65504.0)
    if not one_host:
        want = composed(x.view(-1).clone(), torch.float16, 0.5, 65504.0)
    backend.all_reduce_low_precision(x, torch.float16, 0.5, 65504.0).wait()
    torch.testing.assert_close(x.view(-1), want, rtol=0, atol=0, equal_nan=True)
    return sorted(calls)


def bad_arguments(rank, world_size):
    """Each bad argument: a RuntimeError naming all_reduce_low_precision and
    what is wrong, raised before anything is sent; the group works afterwards."""
    backend = fastcomm.fastcomm_backend()
    op = lambda t, dtype=torch.float16, scale=1.0, limit=65504.0, clamped=None: (  # noqa: E731
        backend.all_reduce_low_precision(t, dtype, scale, limit, clamped).wait()
    )
    op_name = "fastcomm all_reduce_low_precision: "
    cases = [
        (
            lambda: op(torch.ones(4, dtype=torch.int32)),
            op_name + "the tensor must be float32, float64, float16 or bfloat16, got Int",
        ),
        (lambda: op(torch.ones(4, 2)[:, 0]), op_name + "the tensor must be contiguous"),
        (
            lambda: op(torch.ones(4), dtype=torch.float32),
            op_name + "the wire dtype must be float16 or bfloat16, got Float",
        ),
        (lambda: op(torch.ones(4), scale=float("inf")), op_name + "scale must be finite"),
        (lambda: op(torch.ones(4), limit=0.0), op_name + "limit must be positive"),
        (lambda: op(torch.ones(4), limit=float("nan")), op_name + "limit must be positive"),
        (
            lambda: op(torch.ones(4), clamped=torch.zeros(2, dtype=torch.long)),
            op_name + "clamped must be a one-element int64 CPU tensor",
        ),
        (
            lambda: op(torch.ones(4), clamped=torch.zeros(1)),
            op_name + "clamped must be a one-element int64 CPU tensor, got Float",
        ),
    ]
    for fn, pattern in cases:
        _expect_error(fn, pattern)
        _group_still_works(world_size)
    return len(cases)


def hooks_use_it(rank, world_size):
    """The fp16 and bf16 hooks on a fastcomm group run the low-precision
    all_reduce (one per bucket) and deliver its definition's bits: the
    bucket's mean sent in half precision."""
    backend = fastcomm.fastcomm_backend()
    for name, wire in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(64, 1024), nn.ReLU(), nn.Linear(1024, 512), nn.ReLU(), nn.Linear(512, 8))
        ddp = DDP(model, bucket_cap_mb=0.05)  # several buckets (the first holds up to 1 MiB)
        state = hooks.make_state(name)
        buckets = []

        def capture(state, bucket, hook=hooks.registry.HOOKS[name][1]):
            entry = {"input": bucket.buffer().clone()}
            buckets.append(entry)
            return hook(state, bucket).then(lambda fut: entry.setdefault("output", fut.value().clone()))

        ddp.register_comm_hook(state, capture)
        g = torch.Generator().manual_seed(rank)
        ddp(torch.randn(4, 64, generator=g)).square().sum().backward()  # DDP rebuilds its buckets after it
        buckets.clear()
        before = backend.algorithm_counts()
        ddp(torch.randn(4, 64, generator=g)).square().sum().backward()
        assert len(buckets) > 1, len(buckets)
        paths = [_path(entry["input"].nbytes) for entry in buckets]
        assert _calls_since(before) == {p: paths.count(p) for p in paths}, (paths, backend.algorithm_counts())
        limit = float16_limit(world_size) if wire == torch.float16 else float("inf")
        for entry in buckets:
            everyone = [torch.empty_like(entry["input"]) for _ in range(world_size)]
            dist.all_gather(everyone, entry["input"])
            want, _ = expected(everyone, wire, 1.0 / world_size, limit)
            if paths[0] == COMPOSED_PATH:
                want = composed(entry["input"], wire, 1.0 / world_size, limit)
            torch.testing.assert_close(entry["output"], want, rtol=0, atol=0, msg=name)
        numel = sum(p.numel() for p in model.parameters())
        assert state.stats()["wire_bytes"] == 2 * 2 * numel  # both steps, 2 bytes per element


ARENA_PATH = "allreduce_low_precision_shm_arena"


def on_arena_tensors(rank, world_size):
    """Arena tensors (peers read in place, converted on the fly) from the
    group's shm_low_precision_arena_min_bytes on, the segment below it: the
    same bits as the definition for every wire dtype and limit, float32,
    float64, bfloat16 and float16 tensors, sizes not multiples of the rank
    count (several 4096-element pieces per slice), a view inside an arena
    tensor; each rank's clamp count is that of its own values (counted by the
    ranks that reduced them)."""
    backend = fastcomm.fastcomm_backend()
    min_bytes = backend.config.shm_low_precision_arena_min_bytes
    before = backend.algorithm_counts().get(ARENA_PATH, 0)
    in_place = 0
    cases = [(torch.float16, float16_limit(world_size)), (torch.bfloat16, float("inf")), (torch.float16, 2.0)]
    numels = (1, 5, 6_145, 300_001) if min_bytes < 1 << 20 else (300_001, (min_bytes >> 2) + 3)
    for seed, (wire, limit) in enumerate(cases):
        for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
            for numel in numels:
                inputs = [_input(r, numel, dtype, seed) for r in range(world_size)]
                want, counts = expected(inputs, wire, 1.0 / world_size, limit)
                tensor = backend.allocate_tensor(numel, dtype)
                tensor.copy_(inputs[rank])
                clamped = torch.tensor([5], dtype=torch.long)
                backend.all_reduce_low_precision(tensor, wire, 1.0 / world_size, limit, clamped).wait()
                what = f"arena {wire} limit {limit} {dtype} x{numel}"
                torch.testing.assert_close(tensor, want, rtol=0, atol=0, equal_nan=True, msg=what)
                assert clamped.item() == 5 + counts[rank], (what, clamped.item(), counts)
                in_place += tensor.nbytes >= min_bytes
    big = backend.allocate_tensor(1_000_003)  # a view at an odd offset, the rest of the block untouched
    view = big[7:700_007]
    inputs = [_input(r, 700_000, torch.float32, 7) for r in range(world_size)]
    view.copy_(inputs[rank])
    backend.all_reduce_low_precision(view, torch.bfloat16, 0.5, float("inf")).wait()
    torch.testing.assert_close(
        view, expected(inputs, torch.bfloat16, 0.5, float("inf"))[0], rtol=0, atol=0, equal_nan=True
    )
    assert torch.count_nonzero(big[:7]) == 0 and torch.count_nonzero(big[700_007:]) == 0
    in_place += view.nbytes >= min_bytes
    assert in_place > 0
    assert backend.algorithm_counts().get(ARENA_PATH, 0) == before + in_place, (in_place, backend.algorithm_counts())


def hooks_on_arena_buckets(rank, world_size):
    """DDP_DISABLE_COMM_MEM=0 puts DDP's buckets in the arena: the fp16 and bf16
    hooks then sum them in place (every bucket of every step from the
    option's 4 KiB; smaller ones through the segment), with the same
    gradients, bit for bit, and the same stats (clamps included) as with
    ordinary buckets."""
    import os

    backend = fastcomm.fastcomm_backend()
    one_host = (SEGMENT_PATH, SINGLE_COPY_PATH, ARENA_PATH)

    def train(name: str, comm_mem: bool):
        os.environ["DDP_DISABLE_COMM_MEM"] = "0" if comm_mem else "1"
        try:
            torch.manual_seed(0)
            model = nn.Sequential(nn.Linear(64, 1024), nn.ReLU(), nn.Linear(1024, 512), nn.ReLU(), nn.Linear(512, 8))
            ddp = DDP(model, bucket_cap_mb=0.5)
            state = hooks.make_state(name)
            ddp.register_comm_hook(state, hooks.registry.HOOKS[name][1])
            g = torch.Generator().manual_seed(rank)
            for _ in range(3):  # DDP rebuilds its buckets after the first step
                ddp.zero_grad()
                (ddp(torch.randn(4, 64, generator=g)) * 1e3).square().sum().backward()  # some clamped in fp16
            return [p.grad.clone() for p in model.parameters()], state.stats()
        finally:
            del os.environ["DDP_DISABLE_COMM_MEM"]

    counts = lambda: backend.algorithm_counts()  # noqa: E731
    for name in ("fp16", "bf16"):
        before = counts()
        plain, plain_stats = train(name, False)
        plain_calls = {k: counts().get(k, 0) - before.get(k, 0) for k in one_host}
        before = counts()
        in_arena, arena_stats = train(name, True)
        arena_calls = {k: counts().get(k, 0) - before.get(k, 0) for k in one_host}
        assert plain_calls[ARENA_PATH] == 0, plain_calls
        assert arena_calls[ARENA_PATH] >= 3, arena_calls  # a bucket a step at least
        assert sum(plain_calls.values()) == sum(arena_calls.values()), (plain_calls, arena_calls)  # same buckets
        for a, b in zip(plain, in_arena):
            torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)
        assert plain_stats == arena_stats, (plain_stats, arena_stats)


def arena_on_some_ranks_only(rank, world_size):
    """Rank 0 passes an arena tensor, the others an ordinary one: every rank
    raises a clear error, and the group works afterwards."""
    import re

    backend = fastcomm.fastcomm_backend()
    t = backend.allocate_tensor(100_000) if rank == 0 else torch.zeros(100_000)
    try:
        backend.all_reduce_low_precision(t, torch.float16, 0.5, 65504.0).wait()
    except RuntimeError as e:
        assert re.search(
            r"fastcomm all_reduce_low_precision: ranks disagree on the collective: .*arena tensor", str(e)
        ), str(e)
    else:
        raise AssertionError("no error")
    _group_still_works(world_size)
