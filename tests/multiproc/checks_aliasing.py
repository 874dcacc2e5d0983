"""Inputs that overlap outputs (csrc/algorithms/alias_staging.cpp): the in-place
forms torch and FSDP use run as they are, every other overlap gives what
separate tensors would give, and outputs that overlap each other are refused."""

from __future__ import annotations

import torch
import torch.distributed as dist


def _expected_gather(world_size: int, numel: int) -> torch.Tensor:
    return torch.cat([torch.full((numel,), float(r + 1)) for r in range(world_size)])


def in_place_forms(rank, world_size):
    n, numel = world_size, 1024
    # all_gather_into_tensor whose input is this rank's block of the output (FSDP's form)
    out = torch.zeros(n * numel)
    mine = out[rank * numel : (rank + 1) * numel]
    mine.fill_(rank + 1)
    dist.all_gather_into_tensor(out, mine)
    assert torch.equal(out, _expected_gather(n, numel)), out
    # all_gather whose input is this rank's entry of the output list
    outs = [torch.zeros(numel) for _ in range(n)]
    outs[rank].fill_(rank + 1)
    dist.all_gather(outs, outs[rank])
    assert torch.equal(torch.cat(outs), _expected_gather(n, numel))
    # reduce_scatter_tensor whose output is this rank's block of the input
    inp = torch.cat([torch.full((numel,), float(rank + 1) * (b + 1)) for b in range(n)])
    own = inp[rank * numel : (rank + 1) * numel]
    dist.reduce_scatter_tensor(own, inp)
    assert torch.equal(own, torch.full((numel,), float(n * (n + 1) // 2 * (rank + 1)))), own


def other_overlaps(rank, world_size):
    n, numel = world_size, 1024
    # the input is block 0 of the output on every rank (its own block on rank 0 only)
    out = torch.zeros(n * numel)
    out[:numel] = rank + 1
    dist.all_gather_into_tensor(out, out[:numel])
    assert torch.equal(out, _expected_gather(n, numel)), out
    # the input straddles two blocks of the output
    out = torch.zeros(n * numel)
    out[numel // 2 : numel // 2 + numel] = rank + 1
    dist.all_gather_into_tensor(out, out[numel // 2 : numel // 2 + numel])
    assert torch.equal(out, _expected_gather(n, numel)), out
    # reduce_scatter_tensor whose output is another rank's block of the input
    inp = torch.cat([torch.full((numel,), float(rank + 1) * (b + 1)) for b in range(n)])
    other = (rank + 1) % n
    dist.reduce_scatter_tensor(inp[other * numel : (other + 1) * numel], inp)
    expected = float(n * (n + 1) // 2 * (rank + 1))
    assert torch.equal(inp[other * numel : (other + 1) * numel], torch.full((numel,), expected))
    # all_to_all_single in place: input and output the same tensor
    t = torch.cat([torch.full((numel,), float(rank * n + b)) for b in range(n)])
    dist.all_to_all_single(t, t)
    assert torch.equal(t, torch.cat([torch.full((numel,), float(s * n + rank)) for s in range(n)])), t


def overlapping_outputs_refused(rank, world_size):
    buffer = torch.zeros(8)
    outs = [buffer[:4]] + [buffer[2:6]] * (world_size - 1)
    try:
        dist.all_gather(outs, torch.ones(4))
    except RuntimeError as error:
        assert "fastcomm all_gather: output tensors 0 and 1 overlap" in str(error), error
    else:
        raise AssertionError("overlapping outputs were accepted")
    t = torch.ones(3)
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((3,), float(world_size)))
