"""fastcomm.nn.SyncBatchNorm on ranks as processes, against nn.BatchNorm*d run
in one process on the concatenated global batch (syncbn_reference.py)."""

from __future__ import annotations

import re

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

import fastcomm
from fastcomm.nn import SyncBatchNorm
from syncbn_reference import (
    DTYPES,
    assert_close,
    batchnorm_class,
    forward_backward,
    global_batch,
    init_affine,
)


def _slice(batch_sizes: list[int], rank: int) -> slice:
    start = sum(batch_sizes[:rank])
    return slice(start, start + batch_sizes[rank])


def _summed_over_ranks(t: torch.Tensor, group=None) -> torch.Tensor:
    t = t.detach().clone()
    dist.all_reduce(t, group=group)
    return t


def matches_batchnorm(
    rank,
    world_size,
    batch_sizes,
    feature_shape=(3, 5, 4),
    dtype="float32",
    channels_last=False,
    momentum=0.1,
    affine=True,
    track_running_stats=True,
    steps=2,
):
    """Outputs, input gradients, summed weight/bias gradients and running
    statistics over `steps` training steps, then eval-mode outputs."""
    dtype = DTYPES[dtype]
    sizes = batch_sizes[:world_size]
    mine = _slice(sizes, rank)
    channels = feature_shape[0]
    param_dtype = torch.float64 if dtype == torch.float64 else torch.float32
    kwargs = dict(momentum=momentum, affine=affine, track_running_stats=track_running_stats)
    ours = SyncBatchNorm(channels, dtype=param_dtype, **kwargs)
    ref = batchnorm_class(1 + len(feature_shape))(channels, dtype=torch.float64, **kwargs)
    # float32 also against torch's own float32 batch norm, where its float32 sums are still exact to 1e-5
    per_channel = sum(sizes) * int(torch.tensor(feature_shape[1:]).prod())
    ref32 = (
        batchnorm_class(1 + len(feature_shape))(channels, **kwargs)
        if dtype == torch.float32 and per_channel <= 4096
        else None
    )
    for module in (ours, ref, ref32):
        if module is not None:
            init_affine(module)
    for step in range(steps):
        x, dy = global_batch(sum(sizes), feature_shape, dtype, seed=10 + step, channels_last=channels_last)
        y, dx = forward_backward(ours, x[mine], dy[mine])
        y_ref, dx_ref = forward_backward(ref, x.double(), dy.double())
        assert_close(y, y_ref[mine], dtype, f"step {step} output")
        assert_close(dx, dx_ref[mine], dtype, f"step {step} input grad")
        assert y.stride() == x[mine].stride(), f"output strides {y.stride()} differ from the input's {x[mine].stride()}"
        if ref32 is not None:
            y32, dx32 = forward_backward(ref32, x, dy)
            torch.testing.assert_close(y, y32[mine], rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(dx, dx32[mine], rtol=1e-5, atol=1e-5)
            if affine:
                for name in ("weight", "bias"):
                    torch.testing.assert_close(
                        _summed_over_ranks(getattr(ours, name).grad), getattr(ref32, name).grad, rtol=1e-5, atol=1e-5
                    )
                    getattr(ref32, name).grad = None
            if track_running_stats:
                torch.testing.assert_close(ours.running_var, ref32.running_var, rtol=1e-5, atol=1e-5)
        if affine:
            for name in ("weight", "bias"):
                grad = getattr(ours, name).grad
                assert_close(_summed_over_ranks(grad), getattr(ref, name).grad, param_dtype, f"step {step} {name} grad")
                getattr(ours, name).grad = None
                getattr(ref, name).grad = None
        if track_running_stats:
            assert_close(ours.running_mean, ref.running_mean, param_dtype, f"step {step} running_mean")
            assert_close(ours.running_var, ref.running_var, param_dtype, f"step {step} running_var")
            assert ours.num_batches_tracked.item() == ref.num_batches_tracked.item() == step + 1
    # eval: running statistics (or, untracked, this rank's batch alone, as torch does); nothing is sent
    ours.eval()
    ref.eval()
    x, _ = global_batch(sum(sizes), feature_shape, dtype, seed=99, channels_last=channels_last)
    if sizes[rank] > 1 or track_running_stats:
        with torch.no_grad():
            expected = ref(x.double())[mine] if track_running_stats else ref(x[mine].double())
            assert_close(ours(x[mine]), expected, dtype, "eval output")


def _collectives_launched() -> int:
    """Collectives called on the default group (its sequence number counts each call once)."""
    return fastcomm.fastcomm_backend()._get_sequence_number_for_group()


def two_collectives_per_layer(rank, world_size):
    """Exactly one collective per layer in forward and one in backward (counted by the backend)."""
    torch.manual_seed(0)
    model = nn.Sequential(SyncBatchNorm(4), nn.Conv2d(4, 4, 1), SyncBatchNorm(4), nn.ReLU(), SyncBatchNorm(4))
    x = torch.randn(3, 4, 5, 5, requires_grad=True)
    start = _collectives_launched()
    y = model(x)
    after_forward = _collectives_launched()
    y.square().sum().backward()
    after_backward = _collectives_launched()
    assert after_forward - start == 3, f"forward launched {after_forward - start} collectives for 3 layers"
    assert after_backward - after_forward == 3, f"backward launched {after_backward - after_forward} for 3 layers"
    # an input that needs no gradient (a first layer): its backward only forms the local weight and bias gradients
    start = _collectives_launched()
    model(x.detach()).square().sum().backward()
    assert _collectives_launched() - start == 5, f"{_collectives_launched() - start} collectives, expected 3 + 2"
    assert model[0].weight.grad is not None


def _net() -> nn.Module:
    torch.manual_seed(7)
    return nn.Sequential(
        nn.Conv2d(3, 6, 3, padding=1),
        nn.BatchNorm2d(6),
        nn.ReLU(),
        nn.Conv2d(6, 4, 3, padding=1),
        nn.BatchNorm2d(4, momentum=None),
        nn.Flatten(),
        nn.Linear(4 * 6 * 6, 2),
    )


def ddp_training(rank, world_size, steps=3, local_batch=4):
    """DDP over a CPU model with fastcomm SyncBatchNorm layers trains exactly
    like the plain model on the global batch; every rank ends identical."""
    reference = _net()
    model = DDP(SyncBatchNorm.convert_sync_batchnorm(_net()))
    assert sum(isinstance(m, SyncBatchNorm) for m in model.modules()) == 2
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    mine = slice(rank * local_batch, (rank + 1) * local_batch)
    for step in range(steps):
        g = torch.Generator().manual_seed(step)
        x = torch.randn(world_size * local_batch, 3, 6, 6, generator=g) * 2 + 1
        target = torch.randn(world_size * local_batch, 2, generator=g)
        opt.zero_grad()
        nn.functional.mse_loss(model(x[mine]), target[mine]).backward()
        opt.step()
        ref_opt.zero_grad()
        nn.functional.mse_loss(reference(x), target).backward()
        ref_opt.step()
    ours = dict(model.module.named_parameters()) | dict(model.module.named_buffers())
    for name, expected in list(reference.named_parameters()) + list(reference.named_buffers()):
        torch.testing.assert_close(
            ours[name].detach(), expected.detach(), rtol=1e-5, atol=1e-5, msg=lambda m: f"{name}: {m}"
        )
        gathered = [torch.empty_like(ours[name]) for _ in range(world_size)]
        dist.all_gather(gathered, ours[name].detach().contiguous())
        assert all(torch.equal(t, gathered[0]) for t in gathered), f"{name} differs between ranks"
    model.eval()
    reference.eval()
    with torch.no_grad():
        torch.testing.assert_close(model(x[mine]), reference(x)[mine], rtol=1e-5, atol=1e-5)


def subgroups(rank, world_size):
    """process_group scopes the statistics: ranks {0, 1} synchronize with each
    other; at world size 3 rank 2 is a group of its own."""
    groups = [dist.new_group([0, 1])] + ([dist.new_group([2])] if world_size == 3 else [])
    members = [0, 1] if rank < 2 else [2]
    group = groups[0] if rank < 2 else groups[1]
    sizes = {0: 3, 1: 5, 2: 4}
    member_sizes = [sizes[r] for r in members]
    mine = _slice(member_sizes, members.index(rank))
    ours = SyncBatchNorm(3, process_group=group)
    ref = nn.BatchNorm2d(3, dtype=torch.float64)
    x, dy = global_batch(sum(member_sizes), (3, 4, 4), torch.float32, seed=members[0])
    start = _collectives_launched()
    y, dx = forward_backward(ours, x[mine], dy[mine])
    assert _collectives_launched() == start, "the default group was used instead of process_group"
    y_ref, dx_ref = forward_backward(ref, x.double(), dy.double())
    assert_close(y, y_ref[mine], torch.float32, "output")
    assert_close(dx, dx_ref[mine], torch.float32, "input grad")
    assert_close(_summed_over_ranks(ours.weight.grad, group), ref.weight.grad, torch.float32, "weight grad")
    assert_close(ours.running_var, ref.running_var, torch.float32, "running_var")


def _expect(fn, error: type, pattern: str) -> None:
    try:
        fn()
    except error as e:
        if not re.search(pattern, str(e)):
            raise AssertionError(f"error {str(e)!r} does not match {pattern!r}") from e
        return
    raise AssertionError(f"no {error.__name__} raised, expected {pattern!r}")


def bad_input(rank, world_size):
    """torch's errors, on every rank, and the group still works afterwards."""
    bn = SyncBatchNorm(3)
    # one value per channel over the whole group (rank 0 has the only sample): every rank raises
    one_sample = torch.randn(1 if rank == 0 else 0, 3)
    _expect(lambda: bn(one_sample), ValueError, r"Expected more than 1 value per channel when training, got input size")
    # wrong channel count: raised before anything is sent
    _expect(lambda: bn(torch.randn(4, 4)), RuntimeError, r"^running_mean should contain 4 elements not 3$")
    untracked = SyncBatchNorm(3, track_running_stats=False)
    _expect(lambda: untracked(torch.randn(4, 2, 2)), RuntimeError, r"^weight should contain 2 elements not 3$")
    _expect(lambda: bn(torch.randn(3)), ValueError, r"expected at least 2D input \(got 1D input\)")
    _expect(lambda: bn(torch.randn(4, 0)), ValueError, r"number of input channels should be non-zero")
    t = torch.ones(2)
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((2,), float(world_size)))
    # one sample on each rank is enough in total: it runs and matches the reference
    ok = SyncBatchNorm(3)
    x, dy = global_batch(world_size, (3,), torch.float32, seed=5)
    y, _ = forward_backward(ok, x[rank : rank + 1], dy[rank : rank + 1])
    y_ref, _ = forward_backward(nn.BatchNorm1d(3, dtype=torch.float64), x.double(), dy.double())
    assert_close(y, y_ref[rank : rank + 1], torch.float32, "one sample per rank")
