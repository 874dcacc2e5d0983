"""Training on fastcomm: DDP parity with single-process training, DDP options,
torch's own comm hooks, FSDP2, torch.compile with functional collectives, and
TORCH_DISTRIBUTED_DEBUG=DETAIL."""

from __future__ import annotations


import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

from reference import assert_ranks_identical

LOCAL_BATCH = 4
STEPS = 3


class Net(nn.Module):
    def __init__(self, with_unused: bool = False) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4)
        self.unused = nn.Linear(16, 4) if with_unused else None

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


def _model(with_unused: bool = False) -> nn.Module:
    torch.manual_seed(1234)
    return Net(with_unused).double()


def _global_batch(world_size: int, step: int):
    g = torch.Generator().manual_seed(100 + step)
    x = torch.randn(world_size * LOCAL_BATCH, 8, generator=g, dtype=torch.float64)
    y = torch.randn(world_size * LOCAL_BATCH, 4, generator=g, dtype=torch.float64)
    return x, y


def _local(t: torch.Tensor, rank: int) -> torch.Tensor:
    return t[rank * LOCAL_BATCH : (rank + 1) * LOCAL_BATCH]


def _reference(world_size: int, micro_batches: int = 1, with_unused: bool = False) -> nn.Module:
    model = _model(with_unused)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(STEPS):
        opt.zero_grad()
        for m in range(micro_batches):
            x, y = _global_batch(world_size, step * micro_batches + m)
            nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return model


def _train_ddp(rank, world_size, micro_batches=1, with_unused=False, hook=None, hook_state=None, **ddp_kwargs):
    ddp = DDP(_model(with_unused), **ddp_kwargs)
    if hook is not None:
        ddp.register_comm_hook(hook_state, hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    for step in range(STEPS):
        opt.zero_grad()
        for m in range(micro_batches):
            x, y = _global_batch(world_size, step * micro_batches + m)
            last = m == micro_batches - 1
            ctx = ddp.no_sync() if not last else _nullcontext()
            with ctx:
                nn.functional.mse_loss(ddp(_local(x, rank)), _local(y, rank)).backward()
        opt.step()
    return ddp.module


class _nullcontext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _assert_params_close(model: nn.Module, reference: nn.Module, rtol: float, atol: float, what: str) -> None:
    for (name, p), (_, q) in zip(model.named_parameters(), reference.named_parameters()):
        torch.testing.assert_close(p.detach(), q.detach(), rtol=rtol, atol=atol, msg=lambda m: f"{what} {name}: {m}")


def ddp_parity(rank, world_size):
    ref = _reference(world_size)
    for kwargs in ({}, {"static_graph": True}, {"gradient_as_bucket_view": True, "bucket_cap_mb": 0.0001}):
        model = _train_ddp(rank, world_size, **kwargs)
        _assert_params_close(model, ref, 1e-10, 1e-12, f"DDP {kwargs}")
        assert_ranks_identical(model, world_size, f"DDP {kwargs}")


def ddp_no_sync(rank, world_size):
    ref = _reference(world_size, micro_batches=2)
    model = _train_ddp(rank, world_size, micro_batches=2)
    _assert_params_close(model, ref, 1e-10, 1e-12, "no_sync")


def ddp_find_unused(rank, world_size):
    ref = _reference(world_size, with_unused=True)
    model = _train_ddp(rank, world_size, with_unused=True, find_unused_parameters=True)
    _assert_params_close(model, ref, 1e-10, 1e-12, "find_unused_parameters")
    assert model.unused.weight.grad is None or torch.all(model.unused.weight.grad == 0)


def ddp_torch_hooks(rank, world_size):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    ref = _reference(world_size)
    model = _train_ddp(rank, world_size, hook=default_hooks.allreduce_hook, hook_state=None)
    _assert_params_close(model, ref, 1e-10, 1e-12, "allreduce_hook")
    # fp16 compression: the hook casts the (float64) bucket to float16, so
    # results agree to float16 precision, and every rank holds the same values.
    model = _train_ddp(rank, world_size, hook=default_hooks.fp16_compress_hook, hook_state=None)
    _assert_params_close(model, ref, 2e-3, 2e-3, "fp16_compress_hook")
    assert_ranks_identical(model, world_size, "fp16_compress_hook")
    state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=1, start_powerSGD_iter=2)
    model = _train_ddp(rank, world_size, hook=powerSGD_hook.powerSGD_hook, hook_state=state)
    assert_ranks_identical(model, world_size, "powerSGD_hook")
    # lossy after step 2 but must stay in the neighbourhood of the exact run
    _assert_params_close(model, ref, 0.05, 0.05, "powerSGD_hook")
    assert state.iter == STEPS


def fsdp2(rank, world_size):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    ref = _reference(world_size)
    mesh = init_device_mesh("cpu", (world_size,))
    model = _model()
    fully_shard(model.fc1, mesh=mesh)
    fully_shard(model.fc2, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(STEPS):
        opt.zero_grad()
        x, y = _global_batch(world_size, step)
        nn.functional.mse_loss(model(_local(x, rank)), _local(y, rank)).backward()
        opt.step()
    for (name, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
        torch.testing.assert_close(
            p.full_tensor().detach(), q.detach(), rtol=1e-10, atol=1e-12, msg=lambda m: f"FSDP2 {name}: {m}"
        )


def compiled_functional_collectives(rank, world_size, backend="aot_eager"):
    import torch._dynamo
    import torch.distributed._functional_collectives as funcol

    group = dist.group.WORLD

    def step(x):
        y = funcol.all_reduce(x * 2, "sum", group)
        z = funcol.all_gather_tensor(y + 1, 0, group)
        return funcol.reduce_scatter_tensor(z, "sum", 0, group)

    x = torch.arange(6, dtype=torch.float32) + rank
    eager = step(x)
    compiled = torch.compile(step, backend=backend, fullgraph=True)(x)
    torch.testing.assert_close(compiled, eager, rtol=0, atol=0)
    total = sum((torch.arange(6, dtype=torch.float32) + r) * 2 for r in range(world_size))
    expected = (total + 1) * world_size
    torch.testing.assert_close(eager, expected, rtol=0, atol=0)
    torch._dynamo.reset()


def debug_detail(rank, world_size):
    """Under TORCH_DISTRIBUTED_DEBUG=DETAIL the group is wrapped and checked."""
    import os

    assert os.environ.get("TORCH_DISTRIBUTED_DEBUG") == "DETAIL"
    t = torch.full((3,), float(rank))
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((3,), float(sum(range(world_size)))))
    # a desynchronised call is caught by the wrapper instead of hanging
    try:
        dist.all_reduce(torch.ones(2 + rank))
    except RuntimeError as e:
        assert "mismatch" in str(e).lower() or "Detected" in str(e), str(e)
    else:
        raise AssertionError("DETAIL wrapper did not detect a shape mismatch")
    t = torch.ones(2)
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((2,), float(world_size)))
