"""Single-copy send/recv where the kernel refuses it: `python p2p_single_copy_refused.py STORE_DIR`.

Two ranks of one host, both running as an unprivileged user (the program
drops to nobody when started as root: root's CAP_SYS_PTRACE would allow
every read). Rank 0 makes itself non-dumpable after set-up, so rank 1 may
not read rank 0's memory (process_vm_readv: EPERM), while rank 0 may still
read rank 1's. Both exchange messages above the single-copy threshold; every
message must arrive exactly, rank 0's through the ring after the first
refusal, rank 1's in one copy. Each rank prints
'RESULT <rank> <p2p_stats as JSON>', 'OK <rank>' and, after destroying the
group, 'THREADS <rank> <threads before init> <threads now>'.
"""
import ctypes
import datetime
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

PR_SET_DUMPABLE = 4
NOBODY = 65534


def _rank(rank: int, store_dir: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if os.geteuid() == 0:
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
        assert libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) == 0  # a uid change clears it; peers must open our segment
    import fastcomm

    torch.set_num_threads(1)  # no OpenMP workers: the thread count below is the communication's
    threads_before = len(os.listdir("/proc/self/task"))
    dist.init_process_group("fastcomm", init_method=f"file://{store_dir}/store", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=30))
    backend = fastcomm.fastcomm_backend()
    assert backend.shm_engine is not None
    dist.barrier()
    if rank == 0:
        assert libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
    dist.barrier()
    peer = 1 - rank
    numel = 1 << 18  # 1 MiB of float32: above the default threshold
    for k in range(3):
        got = torch.zeros(numel)
        works = [dist.isend(torch.arange(numel, dtype=torch.float32) + 1000 * rank + k, dst=peer),
                 dist.irecv(got, src=peer)]
        for w in works:
            w.wait()
        assert torch.equal(got, torch.arange(numel, dtype=torch.float32) + 1000 * peer + k), f"message {k}"
    dist.barrier()
    os.write(1, f"RESULT {rank} {json.dumps(backend.p2p_stats())}\nOK {rank}\n".encode())
    del backend
    dist.destroy_process_group()
    # the p2p progress thread (and Gloo's) are gone once the group is
    os.write(1, f"THREADS {rank} {threads_before} {len(os.listdir('/proc/self/task'))}\n".encode())


if __name__ == "__main__":
    store_dir = sys.argv[1]
    os.chmod(store_dir, 0o777)
    mp.spawn(_rank, args=(store_dir,), nprocs=2)
