"""Rank-side checks of test_stream_order.py that need two GPUs (one per rank)."""

import torch
import torch.distributed as dist


def p2p_stream_order(rank, world_size, batched, sleep_cycles):
    """Rank 0 sends after a long sleep on its GPU; rank 1 waits for its receive
    on the default stream, then zeroes the buffer there: if wait() did not
    order that stream after the receive, the receive lands after the zeroing."""
    torch.cuda.set_device(rank)
    n = 1 << 20
    if rank == 0:
        torch.cuda._sleep(sleep_cycles)
        data = torch.full((n,), 7.0, device="cuda")
        ops = [dist.P2POp(dist.isend, data, 1)]
    else:
        data = torch.zeros(n, device="cuda")
        ops = [dist.P2POp(dist.irecv, data, 0)]
    works = dist.batch_isend_irecv(ops) if batched else [op.op(op.tensor, op.peer) for op in ops]
    for work in works:
        work.wait()
    if rank == 1:
        received = data.clone()  # ordered after the receive by wait()
        data.zero_()
        torch.cuda.synchronize()
        assert torch.equal(received, torch.full((n,), 7.0, device="cuda")), "recv's output read before it arrived"
        assert int(data.count_nonzero()) == 0, "the receive wrote after wait() returned"
    torch.cuda.synchronize()
    dist.barrier()


def p2p_block_refuses_rewrites(rank, world_size):
    """Inside batch_isend_irecv's block CUDA sends and receives go to NCCL as
    they are: an int16 one (which fastcomm would move as another dtype) raises
    on both ranks and closes the block; the next batch runs."""
    import pytest

    torch.cuda.set_device(rank)
    peer = 1 - rank
    bad = torch.zeros(8, dtype=torch.int16, device="cuda")
    with pytest.raises(RuntimeError, match="coalescing block with point-to-point calls"):
        dist.batch_isend_irecv([dist.P2POp(dist.isend if rank == 0 else dist.irecv, bad, peer)])
    data = torch.full((8,), 3.0 if rank == 0 else 0.0, device="cuda")
    for work in dist.batch_isend_irecv([dist.P2POp(dist.isend if rank == 0 else dist.irecv, data, peer)]):
        work.wait()
    assert torch.equal(data.cpu(), torch.full((8,), 3.0)), data
    torch.cuda.synchronize()
    dist.barrier()
