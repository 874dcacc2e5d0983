"""fastcomm.sync.ModelSync on every rank of a RankPool: exact averages where
the inputs make them exact (integer-valued parameters and changes), the
error-feedback invariant for the compressed modes, the one-round-late rule of
async_op, checkpoints, DDP inside a host, and option errors."""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn as nn

import fastcomm
from fastcomm.sync import ModelSync
from reference import assert_ranks_identical


def _model() -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5), nn.Linear(5, 3))
    with torch.no_grad():
        for i, p in enumerate(model.parameters()):
            p.copy_(torch.arange(p.numel()).view_as(p).float() % 7 - 3 + i)
    return model


def _flat(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def _local_step(model: nn.Module, rank: int, step: int) -> None:
    """A rank-specific integer change (stands in for an optimizer step)."""
    with torch.no_grad():
        for i, p in enumerate(model.parameters()):
            p.add_(((torch.arange(p.numel()) * (rank + 1) + step + i) % 5 - 2).view_as(p).float())


def _gather(t: torch.Tensor, world_size: int, group=None) -> list[torch.Tensor]:
    parts = [torch.empty_like(t) for _ in range(world_size)]
    dist.all_gather(parts, t, group=group)
    return parts


def full_sync_is_the_average(rank, world_size):
    model = _model()
    with torch.no_grad():
        next(model.parameters()).add_(100.0 * rank)  # the group's first rank's model wins at construction
    sync = ModelSync(model, period=3)
    assert_ranks_identical(model, world_size, "after construction")
    for step in range(1, 7):
        _local_step(model, rank, step)
        before = _flat(model)
        synced = sync.step()
        assert synced == (step % 3 == 0)
        if synced:
            expected = torch.stack(_gather(before, world_size)).sum(0) / world_size
            assert torch.equal(_flat(model), expected), f"step {step}: not the average"
            assert_ranks_identical(model, world_size, f"sync at step {step}")
    numel = _flat(model).numel()
    assert sync.stats() == {"steps": 6, "syncs": 2, "sent_bytes": 2 * numel * 4, "model_bytes": numel * 4}


def incremental_without_compression_matches_full(rank, world_size):
    """Outer SGD(lr=1) on the averaged change: anchor + mean(change) = mean(params), exactly here."""
    model = _model()
    sync = ModelSync(model, period=2, mode="incremental")
    start = _flat(model)
    for step in range(1, 5):
        _local_step(model, rank, step)
        before = _flat(model)
        if sync.step():
            expected = torch.stack(_gather(before, world_size)).sum(0) / world_size
            if (
                world_size != 3
            ):  # division by 3 rounds: mean(params) and start + mean(change) may differ in the last bit
                assert torch.equal(_flat(model), expected), f"step {step}"
            else:
                torch.testing.assert_close(_flat(model), expected, rtol=0, atol=1e-5)
            assert_ranks_identical(model, world_size, f"step {step}")
            assert torch.equal(sync.anchor.detach(), _flat(model))
    assert not torch.equal(start, _flat(model))


def compressed_keeps_what_it_leaves_out(rank, world_size, compression):
    """Error feedback: after any number of syncs, anchor - start + mean(errors)
    equals the mean of every rank's total change (nothing lost, only delayed),
    and the ranks stay bitwise identical."""
    model = _model()
    sync = ModelSync(model, period=2, mode="incremental", compression=compression, topk_ratio=0.25, int8_block=8)
    start = _flat(model)
    total_change = torch.zeros_like(start)
    for step in range(1, 9):
        local_before = _flat(model)
        _local_step(model, rank, step)
        total_change += _flat(model) - local_before
        if sync.step():
            assert_ranks_identical(model, world_size, f"{compression} step {step}")
    mean_change = torch.stack(_gather(total_change, world_size)).sum(0) / world_size
    mean_error = torch.stack(_gather(sync.error, world_size)).sum(0) / world_size
    torch.testing.assert_close(sync.anchor.detach() - start + mean_error, mean_change, rtol=1e-5, atol=1e-4)
    n = start.numel()
    payload = {  # per sync, the formats of csrc/kernels/compress_format.h
        "int8": 4 * -(-n // 8) + 4 * -(-n // 4),  # float32 scale per block of 8, int8 values padded to 4 B
        "topk": 8 * -(-n // 4),  # ratio 0.25: ceil(n/4) values and int32 indices
        "sign": 4 + 4 * -(-n // 32),  # float32 scale, one bit per element padded to 4 B
    }[compression]
    assert sync.stats()["sent_bytes"] == 4 * payload, (sync.stats(), payload)


def async_applies_one_round_late(rank, world_size, mode):
    model = _model()
    sync = ModelSync(model, period=2, mode=mode, async_op=True)
    launched_at: list[torch.Tensor] = []
    for step in range(1, 9):
        _local_step(model, rank, step)
        before = _flat(model)
        if step % 2 == 0 and launched_at:
            # this step applies the previous round: its average plus what was learned since
            expected = torch.stack(_gather(launched_at[-1], world_size)).sum(0) / world_size
            expected = expected + (before - launched_at[-1])
        synced = sync.step()
        if synced and len(launched_at):
            torch.testing.assert_close(_flat(model), expected, rtol=0, atol=1e-5 if mode == "incremental" else 0)
        if synced:
            launched_at.append(_flat(model))
    sync.finish()
    expected = torch.stack(_gather(launched_at[-1], world_size)).sum(0) / world_size
    torch.testing.assert_close(_flat(model), expected, rtol=0, atol=1e-5 if mode == "incremental" else 0)
    assert_ranks_identical(model, world_size, "after finish()")


def checkpoint_resumes_exactly(rank, world_size, async_op):
    def run(sync, model, steps):
        out = []
        for step in steps:
            _local_step(model, rank, step)
            sync.step()
            out.append(_flat(model))
        return out

    def make(model):
        return ModelSync(
            model,
            period=2,
            mode="incremental",
            compression="int8",
            int8_block=4,
            async_op=async_op,
            outer_optimizer=lambda ps: torch.optim.SGD(ps, lr=0.7, momentum=0.9, nesterov=True),
        )

    model = _model()
    sync = make(model)
    run(sync, model, range(1, 6))
    state = sync.state_dict()
    params = [p.detach().clone() for p in model.parameters()]
    continued = run(sync, model, range(6, 11))
    sync.finish()

    restored_model = _model()
    restored = make(restored_model)
    with torch.no_grad():
        for p, q in zip(restored_model.parameters(), params):
            p.copy_(q)
    restored.load_state_dict(state)
    resumed = run(restored, restored_model, range(6, 11))
    restored.finish()
    for a, b in zip(continued, resumed):
        assert torch.equal(a, b), "resumed training differs"
    assert restored.stats() == sync.stats()


_groups: dict[str, list] = {}


def ddp_inside_hosts(rank, world_size):
    """4 ranks as 2 "hosts" of 2: DDP within {0,1} and {2,3} every step, ModelSync
    across {0,2} and {1,3} every 4 steps; all four end identical."""
    assert world_size == 4
    if not _groups:
        inside = [dist.new_group([0, 1]), dist.new_group([2, 3])]
        across = [dist.new_group([0, 2]), dist.new_group([1, 3])]
        _groups["g"] = [inside[rank // 2], across[rank % 2]]
    inside, across = _groups["g"]
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 2))
    ddp = nn.parallel.DistributedDataParallel(model, process_group=inside)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    sync = ModelSync(ddp, period=4, process_group=across)
    for step in range(8):
        x = torch.randn(4, 6, generator=torch.Generator().manual_seed(step * 10 + rank))
        opt.zero_grad()
        ddp(x).pow(2).mean().backward()
        opt.step()
        sync.step()
    assert_ranks_identical(model, world_size, "DDP inside, ModelSync across")


def bad_options(rank, world_size):
    model = _model()
    cases = [
        (dict(period=0), "period must be an integer >= 1"),
        (dict(mode="partial"), "mode must be one of"),
        (dict(compression="int8"), "compression and outer_optimizer need mode='incremental'"),
        (dict(mode="incremental", compression="zip"), "compression must be one of"),
        (dict(mode="incremental", compression="topk", topk_ratio=0.0), "topk_ratio must be in"),
    ]
    for kwargs, message in cases:
        try:
            ModelSync(model, **kwargs)
        except ValueError as e:
            assert message in str(e), (kwargs, e)
        else:
            raise AssertionError(f"{kwargs} was accepted")
    assert fastcomm.sync.MODES == ("full", "incremental")
