"""torch's argument names on fastcomm's public API, on ranks: PowerSGDState
with torch's names gives bitwise what fastcomm's former names gave (those warn;
a former name with its current one raises), compression_stats() counts what
torch's counts, ModelSync takes process_group=, register() leads to
gradient_as_bucket_view=True and the arena in one INFO line, and
enable_ddp_arena() puts DDP's buckets in the arena."""

from __future__ import annotations

import logging
import os
import re
import warnings

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import fastcomm
import fastcomm.hooks as hooks
from checks_sync import _flat, _gather, _local_step, _model
from fastcomm._backend import enable_ddp_arena
from fastcomm.bench.tasks import TeacherNet
from fastcomm.sync import ModelSync

# PowerSGD at rank 2 from the first step, error feedback and warm start on: every
# matrix of TeacherNet is compressed (fc2 and fc3 batched), the biases are not.
OLD_NAMES = {"rank": 2, "start_step": 0, "error_feedback": True, "seed": 5}
TORCH_NAMES = {"matrix_approximation_rank": 2, "start_powerSGD_iter": 0, "use_error_feedback": True, "random_seed": 5}


def _batch(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(16, 12, generator=g), torch.randint(0, 5, (16,), generator=g)


def _train_powersgd(rank: int, make_state, steps: int = 4) -> tuple[list[torch.Tensor], hooks.PowerSGDState]:
    """Gradients after every step of a TeacherNet under the state make_state() returns."""
    torch.manual_seed(0)
    model = TeacherNet()
    ddp = DDP(model)
    state = hooks.register(ddp, "powersgd", state=make_state())
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    grads = []
    for step in range(steps):
        opt.zero_grad()
        x, y = _batch(rank, step)
        nn.functional.cross_entropy(ddp(x), y).backward()
        grads.append(torch.cat([p.grad.reshape(-1) for p in model.parameters()]))
        opt.step()
    return grads, state


def _deprecations(caught: list[warnings.WarningMessage]) -> list[str]:
    """fastcomm's DeprecationWarnings among `caught`; each must point at a line of this file."""
    ours = [w for w in caught if issubclass(w.category, DeprecationWarning) and str(w.message).startswith("fastcomm")]
    assert all(w.filename == __file__ for w in ours), [(w.filename, w.lineno) for w in ours]
    return [str(w.message) for w in ours]


def powersgd_torch_names_match_old_names(rank, world_size):
    """The same training under torch's names, fastcomm's former names (by keyword,
    through register() and make_state()) and by position gives bitwise the same
    gradients and state; each former name warns once, naming its successor, from
    the caller's line."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        new, new_state = _train_powersgd(rank, lambda: hooks.PowerSGDState(None, **TORCH_NAMES))
        assert _deprecations(caught) == []
        old, old_state = _train_powersgd(rank, lambda: hooks.PowerSGDState(None, **OLD_NAMES))
        assert _deprecations(caught) == [
            f"fastcomm.hooks powersgd: {old}= is deprecated, use {new}="
            for old, new in [
                ("rank", "matrix_approximation_rank"),
                ("start_step", "start_powerSGD_iter"),
                ("error_feedback", "use_error_feedback"),
                ("seed", "random_seed"),
            ]
        ]
        caught.clear()
        made, _ = _train_powersgd(rank, lambda: hooks.make_state("powersgd", None, **OLD_NAMES))
        assert len(_deprecations(caught)) == 4
    positional, _ = _train_powersgd(rank, lambda: hooks.PowerSGDState(None, 2, 0, 2, True, True, 0, 5))
    for step, (a, b, c, d) in enumerate(zip(new, old, made, positional)):
        assert torch.equal(a, b) and torch.equal(a, c) and torch.equal(a, d), f"step {step}"
    assert new_state.stats() == old_state.stats()
    assert new_state.stats()["wire_bytes"] < new_state.stats()["raw_bytes"]  # it did compress
    new_buffers, old_buffers = new_state.state_dict()["buffers"], old_state.state_dict()["buffers"]
    assert new_buffers.keys() == old_buffers.keys() == {"q", "error"}
    for name in new_buffers:
        for key, t in new_buffers[name].items():
            assert torch.equal(t, old_buffers[name][key]), (name, key)
    # the gradients of every step are the same on every rank
    for g in new:
        assert all(torch.equal(g, other) for other in _gather(g, world_size))


def powersgd_former_names_refused_with_current_ones(rank, world_size):
    import pytest

    for call in (
        lambda: hooks.PowerSGDState(None, 4, rank=4),
        lambda: hooks.PowerSGDState(rank=4, matrix_approximation_rank=1),
        lambda: hooks.make_state("powersgd", None, rank=4, matrix_approximation_rank=1),
    ):
        with pytest.raises(
            TypeError,
            match=re.escape(
                "fastcomm.hooks powersgd: got both rank= (deprecated) and matrix_approximation_rank=; "
                "pass matrix_approximation_rank= only"
            ),
        ):
            call()
    with pytest.raises(TypeError, match="got both seed= .deprecated. and random_seed="):
        hooks.PowerSGDState(seed=1, random_seed=1)
    ddp = DDP(nn.Linear(4, 3))
    with pytest.raises(TypeError, match="got both start_step= .deprecated. and start_powerSGD_iter="):
        hooks.register(ddp, "powersgd", start_step=0, start_powerSGD_iter=0)
    # the refusal registered nothing
    state = hooks.register(ddp, "powersgd")
    ddp(torch.randn(2, 4)).sum().backward()
    assert state.stats()["steps"] == 1


def powersgd_state_reads_like_torchs(rank, world_size):
    """Torch's attributes with torch's defaults; no .rank (torch's state has none),
    this process's rank is group_rank; compression_stats() counts elements as
    torch's does: the buckets of compressed steps, and P, Q and the uncompressed
    gradients they became."""
    import pytest

    state = hooks.PowerSGDState()
    assert (
        state.process_group,
        state.matrix_approximation_rank,
        state.start_powerSGD_iter,
        state.min_compression_rate,
        state.use_error_feedback,
        state.warm_start,
        state.orthogonalization_epsilon,
        state.random_seed,
        state.compression_stats_logging_frequency,
        state.batch_tensors_with_same_shape,
    ) == (None, 1, 1000, 2, True, True, 0, 0, 10_000, True)
    assert not hasattr(state, "rank")
    with pytest.raises(AttributeError, match="the approximation rank is matrix_approximation_rank"):
        state.rank
    assert state.group_rank == rank
    assert state.compression_stats() == (0, 0, 0)

    # torch's keyword arguments as a torch user writes them, every one
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(12, 24), nn.Tanh(), nn.Linear(24, 5))
    ddp = DDP(model)
    state = hooks.PowerSGDState(
        process_group=None,
        matrix_approximation_rank=2,
        start_powerSGD_iter=2,
        min_compression_rate=2,
        use_error_feedback=True,
        warm_start=True,
        orthogonalization_epsilon=0,
        random_seed=0,
        compression_stats_logging_frequency=1,
        batch_tensors_with_same_shape=False,
    )
    ddp.register_comm_hook(state, hooks.powersgd_hook)
    for step in range(5):
        ddp.zero_grad()
        x, _ = _batch(rank, step)
        ddp(x).square().mean().backward()
    # one bucket; steps 3-5 compressed: 24x12 -> P 24x2 + Q 12x2, 5x24 -> P 5x2 + Q 24x2, biases 24 + 5
    bucket, after = sum(p.numel() for p in model.parameters()), (24 + 12) * 2 + (5 + 24) * 2 + 24 + 5
    assert state.compression_stats() == (bucket / after, 3 * bucket, 3 * after)
    assert state.stats()["steps"] == 5


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _register_logging(ddp: DDP, name: str) -> list[str]:
    """What register() logs at INFO (fastcomm.hooks.registry), from this call alone."""
    logger = logging.getLogger("fastcomm.hooks.registry")
    handler, level = _Records(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a hint is a log record, never a warning
            hooks.register(ddp, name)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    return handler.messages


def register_hints_the_fast_path(rank, world_size):
    """One INFO line naming what the DDP model lacks of docs/training.md's
    settings; none when it has them. The arena hint only for hooks that hand
    DDP's bucket itself to a collective."""
    previous = os.environ.pop("DDP_DISABLE_COMM_MEM", None)
    try:
        view = "DistributedDataParallel(..., gradient_as_bucket_view=True)"
        arena = "fastcomm.enable_ddp_arena() before building the DDP model"
        (line,) = _register_logging(DDP(nn.Linear(4, 3)), "fp16")
        assert line.startswith("fastcomm.hooks.register: for faster steps, ") and view in line and arena in line
        (line,) = _register_logging(DDP(nn.Linear(4, 3)), "int8")
        assert view in line and arena not in line
        (line,) = _register_logging(DDP(nn.Linear(4, 3), gradient_as_bucket_view=True), "allreduce")
        assert view not in line and arena in line
        os.environ["DDP_DISABLE_COMM_MEM"] = "0"
        assert _register_logging(DDP(nn.Linear(4, 3), gradient_as_bucket_view=True), "allreduce") == []
    finally:
        os.environ.pop("DDP_DISABLE_COMM_MEM", None)
        if previous is not None:
            os.environ["DDP_DISABLE_COMM_MEM"] = previous


def enable_ddp_arena_puts_buckets_in_the_arena(rank, world_size):
    """After enable_ddp_arena() a new DDP model's buckets are arena blocks that
    the all_reduce reads in place; the gradients equal those of a model built
    before it, bit for bit."""
    backend = fastcomm.fastcomm_backend()
    previous = os.environ.pop("DDP_DISABLE_COMM_MEM", None)

    def train():
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(64, 1024), nn.ReLU(), nn.Linear(1024, 8))
        ddp = DDP(model, bucket_cap_mb=1)
        g = torch.Generator().manual_seed(rank)
        for _ in range(3):  # DDP rebuilds its buckets after the first step
            ddp.zero_grad()
            ddp(torch.randn(4, 64, generator=g)).square().sum().backward()
        return ddp, [p.grad.clone() for p in model.parameters()]

    try:
        ddp_plain, plain = train()
        blocks, used = backend.arena_stats()["blocks"], backend.algorithm_counts().get("allreduce_shm_arena", 0)
        enable_ddp_arena()
        assert os.environ["DDP_DISABLE_COMM_MEM"] == "0"
        ddp_arena, in_arena = train()
        assert backend.arena_stats()["blocks"] - blocks >= 1
        assert backend.algorithm_counts()["allreduce_shm_arena"] - used >= 3  # a bucket a step at least
        for a, b in zip(plain, in_arena):
            assert torch.equal(a, b)
        del ddp_plain, ddp_arena
    finally:
        os.environ.pop("DDP_DISABLE_COMM_MEM", None)
        if previous is not None:
            os.environ["DDP_DISABLE_COMM_MEM"] = previous


def model_sync_takes_process_group(rank, world_size):
    """ModelSync(process_group=g) averages over g exactly (integer-valued
    parameters); group=g, its former name, gives the same with a
    DeprecationWarning; both together raise TypeError."""
    import pytest

    group = dist.new_group(list(range(world_size)))
    results = []
    for kwargs in ({"process_group": group}, {"group": group}):
        model = _model()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            sync = ModelSync(model, period=2, **kwargs)
        assert _deprecations(caught) == (
            ["fastcomm.sync: group= is deprecated, use process_group="] if "group" in kwargs else []
        )
        assert sync.process_group is group
        for step in range(1, 5):
            _local_step(model, rank, step)
            before = _flat(model)
            if sync.step():
                expected = torch.stack(_gather(before, world_size, group)).sum(0) / world_size
                assert torch.equal(_flat(model), expected), f"step {step}: not the average"
        results.append(_flat(model))
    assert torch.equal(results[0], results[1])
    with pytest.raises(
        TypeError,
        match=re.escape("fastcomm.sync: got both group= (deprecated) and process_group=; pass process_group= only"),
    ):
        ModelSync(_model(), process_group=group, group=group)
