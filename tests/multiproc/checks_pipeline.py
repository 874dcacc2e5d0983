"""torch.distributed.pipelining on fastcomm: GPipe, 1F1B and interleaved 1F1B
against the unsplit model, exactly.

Exact because every number is a dyadic rational with few significant bits in
float64: weights in {-1/2, 0, 1/2}, biases in {-1/4, 0, 1/4}, inputs multiples
of 1/4, widths and batch sizes powers of two, so through 12 layers (forward
and backward) every product, sum, ReLU and mean (a division by a power of
two) stays within 53 bits and is exact, in any order. The pipeline's per-microbatch losses
and its gradients (summed over microbatches, scaled by 1/M) must therefore
equal the unsplit model's bit for bit.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B

WIDTH = 8
LAYERS = 12  # at least one layer per stage up to 4 ranks x 2 stages
BATCH = 16
MICROBATCHES = 8


def _model() -> torch.nn.Sequential:
    g = torch.Generator().manual_seed(11)
    layers = []
    for i in range(LAYERS):
        linear = torch.nn.Linear(WIDTH, WIDTH, dtype=torch.float64)
        with torch.no_grad():
            linear.weight.copy_(torch.randint(-1, 2, (WIDTH, WIDTH), generator=g).double() / 2)
            linear.bias.copy_(torch.randint(-1, 2, (WIDTH,), generator=g).double() / 4)
        layers += [linear, torch.nn.ReLU()] if i < LAYERS - 1 else [linear]
    return torch.nn.Sequential(*layers)


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(12)
    x = torch.randint(-3, 4, (BATCH, WIDTH), generator=g).double() / 4
    y = torch.randint(-3, 4, (BATCH, WIDTH), generator=g).double() / 4
    return x, y


def _loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return ((output - target) ** 2).mean()


def _stage_module(model: torch.nn.Sequential, stage: int, stages: int) -> torch.nn.Sequential:
    """Layers [stage*L//S, (stage+1)*L//S) of the model (each with its ReLU)."""
    start, end = stage * LAYERS // stages, (stage + 1) * LAYERS // stages
    modules = list(model)
    return torch.nn.Sequential(*modules[2 * start : min(2 * end, len(modules))])


def _check(rank: int, world_size: int, schedule_name: str) -> None:
    reference = _model()
    x, y = _data()
    reference_losses = [_loss(reference(xm), ym) for xm, ym in zip(x.chunk(MICROBATCHES), y.chunk(MICROBATCHES))]
    (sum(reference_losses) / MICROBATCHES).backward()

    per_rank = 2 if schedule_name == "interleaved_1f1b" else 1
    stages = world_size * per_rank
    model = _model()
    my_stages = [rank + k * world_size for k in range(per_rank)]  # loop placement
    pipeline_stages = [
        PipelineStage(_stage_module(model, s, stages), s, stages, torch.device("cpu")) for s in my_stages
    ]
    if schedule_name == "interleaved_1f1b":
        schedule = ScheduleInterleaved1F1B(pipeline_stages, MICROBATCHES, loss_fn=_loss)
    else:
        kind = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[schedule_name]
        schedule = kind(pipeline_stages[0], MICROBATCHES, loss_fn=_loss)
    losses: list[torch.Tensor] = []
    first, last = 0 in my_stages, stages - 1 in my_stages
    args = (x,) if first else ()
    kwargs = {"target": y, "losses": losses} if last else {}
    schedule.step(*args, **kwargs)

    if last:
        assert len(losses) == MICROBATCHES, losses
        for m, (got, want) in enumerate(zip(losses, reference_losses)):
            assert torch.equal(got.detach(), want.detach()), f"{schedule_name}: microbatch {m} loss {got} != {want}"
    for s, stage in zip(my_stages, pipeline_stages):
        mine = list(stage.submod.parameters())
        want = list(_stage_module(reference, s, stages).parameters())
        assert len(mine) == len(want) > 0
        for p, q in zip(mine, want):
            assert p.grad is not None, f"{schedule_name}: stage {s} has no gradient"
            assert torch.equal(p.grad, q.grad), (
                f"{schedule_name}: stage {s} gradient differs by {(p.grad - q.grad).abs().max().item()}"
            )
    dist.barrier()


def gpipe(rank, world_size):
    _check(rank, world_size, "gpipe")


def one_f_one_b(rank, world_size):
    _check(rank, world_size, "1f1b")


def interleaved_1f1b(rank, world_size):
    _check(rank, world_size, "interleaved_1f1b")
