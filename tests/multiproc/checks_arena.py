"""The shared-memory arena (backend.allocate_tensor / allocateTensor): all_reduce,
all_gather and reduce_scatter_tensor of arena tensors read in place
(allreduce_shm_arena, allgather_shm_arena, reduce_scatter_shm_arena) exact against
references, DDP's buckets in the arena with DDP_DISABLE_COMM_MEM=0 and FSDP2's
communication buffers with set_allocate_memory_from_process_group_for_comm(True),
each with the same results as without, memory returned, a rank without an arena
tensor refused on every rank."""

from __future__ import annotations

import gc
import os
import re

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import fastcomm
from reference import R, assert_equal, rank_input, reduce_reference


def _arena_mappings() -> int:
    with open("/proc/self/maps") as f:
        return sum("fastcomm-arena" in line for line in f)


def all_reduce_in_place(rank, world_size):
    """Every reducible dtype the engine computes, SUM and MAX, sizes from 1 to
    several MiB (not multiples of the rank count), a view inside an arena
    tensor too: exact; through allreduce_shm_arena from the group's
    shm_arena_min_bytes (FASTCOMM_SHM_ARENA_MIN_BYTES), one-shot below it."""
    backend = fastcomm.fastcomm_backend()
    before = backend.algorithm_counts().get("allreduce_shm_arena", 0)
    calls = 0
    for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.uint8):
        for numel in (1, 5, 300_001):
            for op in (R.SUM, R.MAX):
                everyone = [rank_input(r, (numel,), dtype, salt=numel) for r in range(world_size)]
                t = backend.allocate_tensor(numel, dtype)
                t.copy_(everyone[rank])
                dist.all_reduce(t, op=op)
                assert_equal(t, reduce_reference(everyone, op, dtype), f"arena all_reduce {dtype} {op} x{numel}")
                calls += t.nbytes >= backend.config.shm_arena_min_bytes
    big = backend.allocate_tensor(1_000_003)
    view = big[7:700_007]
    view.copy_(rank_input(rank, (700_000,), torch.float32))
    dist.all_reduce(view)
    want = reduce_reference([rank_input(r, (700_000,), torch.float32) for r in range(world_size)], R.SUM, torch.float32)
    assert_equal(view, want, "arena view")
    assert torch.count_nonzero(big[:7]) == 0 and torch.count_nonzero(big[700_007:]) == 0
    assert backend.algorithm_counts()["allreduce_shm_arena"] == before + calls + 1


def gather_and_scatter_in_place(rank, world_size):
    """all_gather (both forms, and in place as FSDP2 does it: the input a view of
    the output at this rank's block) and reduce_scatter_tensor of arena inputs:
    exact, through the arena algorithms, for sizes from 1 element to MiBs."""
    backend = fastcomm.fastcomm_backend()
    used = lambda name: backend.algorithm_counts().get(name, 0)  # noqa: E731
    gathers, scatters = used("allgather_shm_arena"), used("reduce_scatter_shm_arena")
    calls_gather = calls_scatter = 0
    for dtype in (torch.float32, torch.bfloat16, torch.int64, torch.uint8):
        for numel in (1, 5, 300_001):
            mine = rank_input(rank, (numel,), dtype, salt=numel)
            everyone = [rank_input(r, (numel,), dtype, salt=numel) for r in range(world_size)]
            t = backend.allocate_tensor(numel, dtype)
            t.copy_(mine)
            flat = torch.zeros(world_size * numel, dtype=dtype)
            dist.all_gather_into_tensor(flat, t)
            assert_equal(flat, torch.cat(everyone), f"arena all_gather_into_tensor {dtype} x{numel}")
            outs = [torch.zeros(numel, dtype=dtype) for _ in range(world_size)]
            dist.all_gather(outs, t)
            for q in range(world_size):
                assert_equal(outs[q], everyone[q], f"arena all_gather list {dtype} x{numel} from {q}")
            out = backend.allocate_tensor(world_size * numel, dtype)  # FSDP2: input = own block of the output
            out[rank * numel : (rank + 1) * numel].copy_(mine)
            dist.all_gather_into_tensor(out, out[rank * numel : (rank + 1) * numel])
            assert_equal(out, torch.cat(everyone), f"arena all_gather in place {dtype} x{numel}")
            calls_gather += 3
            for op in (R.SUM, R.MAX, R.AVG):
                full = [rank_input(r, (world_size * numel,), dtype, salt=numel + 1) for r in range(world_size)]
                inp = backend.allocate_tensor(world_size * numel, dtype)
                inp.copy_(full[rank])
                got = torch.zeros(numel, dtype=dtype)
                dist.reduce_scatter_tensor(got, inp, op=op)
                want = reduce_reference(full, op, dtype)[rank * numel : (rank + 1) * numel]
                assert_equal(got, want, f"arena reduce_scatter_tensor {dtype} {op} x{numel}")
                assert_equal(inp, full[rank], "the input is left as it was")
                calls_scatter += 1
    assert used("allgather_shm_arena") == gathers + calls_gather, backend.algorithm_counts()
    assert used("reduce_scatter_shm_arena") == scatters + calls_scatter, backend.algorithm_counts()


def fsdp2_buffers_in_arena(rank, world_size):
    """FSDP2 with set_allocate_memory_from_process_group_for_comm(True): its
    all_gather and reduce_scatter buffers come from the arena, the collectives
    read them in place, and parameters after two steps equal FSDP2's without."""
    from torch.distributed.fsdp import FSDPModule, fully_shard

    backend = fastcomm.fastcomm_backend()

    def train(from_group: bool):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 64), nn.ReLU(), nn.Linear(64, 4))
        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer)
        fully_shard(model)
        for module in model.modules():  # the switch is per FSDP module (each has its own buffers)
            if isinstance(module, FSDPModule):
                module.set_allocate_memory_from_process_group_for_comm(from_group)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(rank)
        for _ in range(2):
            opt.zero_grad()
            model(torch.randn(8, 32, generator=g)).square().sum().backward()
            opt.step()
        return [p.full_tensor().clone() for p in model.parameters()]

    def used():
        return (
            backend.algorithm_counts().get("allgather_shm_arena", 0),
            backend.algorithm_counts().get("reduce_scatter_shm_arena", 0),
        )

    plain = train(False)
    before = used()
    arena = train(True)
    after = used()
    assert after[0] > before[0] and after[1] > before[1], (before, after)
    for a, b in zip(plain, arena):
        assert torch.equal(a, b)


def ddp_buckets_in_arena(rank, world_size):
    """DDP_DISABLE_COMM_MEM=0 (torch's switch, read when DDP builds its
    buckets): every bucket is an arena tensor, every all_reduce reads in place,
    and the gradients equal DDP's without the arena bit for bit."""
    backend = fastcomm.fastcomm_backend()

    def train(comm_mem: bool):
        os.environ["DDP_DISABLE_COMM_MEM"] = "0" if comm_mem else "1"
        try:
            torch.manual_seed(0)
            model = nn.Sequential(nn.Linear(64, 1024), nn.ReLU(), nn.Linear(1024, 512), nn.ReLU(), nn.Linear(512, 8))
            ddp = DDP(model, bucket_cap_mb=1)
            g = torch.Generator().manual_seed(rank)
            for _ in range(3):  # DDP rebuilds its buckets after the first step
                ddp.zero_grad()
                ddp(torch.randn(4, 64, generator=g)).square().sum().backward()
            return ddp, [p.grad.clone() for p in model.parameters()]
        finally:
            del os.environ["DDP_DISABLE_COMM_MEM"]

    _, plain = train(False)
    blocks = backend.arena_stats()["blocks"]
    before = backend.algorithm_counts().get("allreduce_shm_arena", 0)
    ddp, with_arena = train(True)
    buckets = backend.arena_stats()["blocks"] - blocks
    assert buckets >= 2, buckets
    used = backend.algorithm_counts()["allreduce_shm_arena"] - before
    assert used >= 1 + 2 * buckets, (used, buckets)  # every bucket of every step (step 1: DDP's first layout)
    for a, b in zip(plain, with_arena):
        assert torch.equal(a, b)
    del ddp
    gc.collect()
    assert backend.arena_stats()["blocks"] == blocks  # the buckets' blocks went with the model


def memory_returned_with_group(rank, world_size):
    """Arena tensors of a subgroup: their blocks go with the tensors, the
    peers' mappings with the group; /proc/self/maps has no arena mapping left."""
    gc.collect()
    before = _arena_mappings()
    group = dist.new_group(list(range(world_size)))
    backend = group._get_backend(torch.device("cpu"))
    t = backend.allocate_tensor(1 << 20)
    t.fill_(rank)
    dist.all_reduce(t, group=group)
    assert torch.equal(t, torch.full((1 << 20,), float(world_size * (world_size - 1) // 2)))
    assert backend.arena_stats() == {"blocks": 1, "idle_blocks": 0, "peer_mappings": world_size - 1}
    assert _arena_mappings() == before + world_size
    del t
    gc.collect()
    assert backend.arena_stats()["blocks"] == 0 and backend.arena_stats()["idle_blocks"] == 1  # kept for reuse
    again = backend.allocate_tensor(1 << 20)  # the idle block, zeroed
    assert torch.count_nonzero(again) == 0 and backend.arena_stats()["idle_blocks"] == 0
    assert _arena_mappings() == before + world_size  # no new block, no new mapping on a peer
    dist.all_reduce(again, group=group)
    assert backend.arena_stats()["peer_mappings"] == world_size - 1  # the peers' blocks came back too
    del again
    gc.collect()
    dist.barrier(group=group)  # no peer reads this rank's block any more
    dist.destroy_process_group(group)
    del group, backend
    gc.collect()
    assert _arena_mappings() == before, (before, _arena_mappings())


def arena_on_some_ranks_only(rank, world_size):
    """Rank 0 passes an arena tensor, the others an ordinary one (all_reduce,
    all_gather, reduce_scatter_tensor): every rank raises a clear error, and the
    group works afterwards."""
    backend = fastcomm.fastcomm_backend()
    t = backend.allocate_tensor(100_000) if rank == 0 else torch.zeros(100_000)  # above the arena's minimum
    u = backend.allocate_tensor(world_size * 40_000) if rank == 0 else torch.zeros(world_size * 40_000)
    calls = [
        ("all_reduce", lambda: dist.all_reduce(t)),
        ("all_gather_into_tensor", lambda: dist.all_gather_into_tensor(torch.zeros(world_size * 100_000), t)),
        ("reduce_scatter_tensor", lambda: dist.reduce_scatter_tensor(torch.zeros(40_000), u)),
    ]
    for name, call in calls:
        try:
            call()
        except RuntimeError as e:
            assert re.search(rf"fastcomm {name}: ranks disagree on the collective: .*arena tensor", str(e)), str(e)
        else:
            raise AssertionError(f"{name}: no error")
        x = torch.ones(3)
        dist.all_reduce(x)
        assert torch.equal(x, torch.full((3,), float(world_size)))


def no_arena_off_one_host(rank, world_size):
    """Groups that span hosts (or have the engine off) have no arena: torch's
    question says so, and asking anyway is a clear error."""
    backend = fastcomm.fastcomm_backend()
    assert backend.arena_stats() is None
    try:
        backend.allocate_tensor(10)
    except RuntimeError as e:
        assert "fastcomm allocate_tensor: this group has no shared-memory arena" in str(e), str(e)
    else:
        raise AssertionError("no error")
