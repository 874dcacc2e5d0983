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
