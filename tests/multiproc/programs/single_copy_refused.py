"""Single copy where the kernel refuses it: `python single_copy_refused.py STORE_DIR`.

Two ranks of one host, both running as an unprivileged user (the program
drops to nobody when started as root: root's CAP_SYS_PTRACE would allow
every read). Rank 0 makes itself non-dumpable after set-up, so rank 1 may
not read rank 0's memory (process_vm_readv: EPERM), while rank 0 may still
read rank 1's.
- send/recv: both exchange messages above the p2p single-copy threshold; every
  message must arrive exactly, rank 0's through the ring after the first
  refusal, rank 1's in one copy. Each rank prints 'RESULT <rank> <p2p_stats as JSON>'.
- all_reduce of 4 MiB and more (allreduce_shm_single_copy's range) on the
  default group, which had not tried single copy before: the first op finds
  the refusal and runs two-shot's steps, later ones go to two-shot; all exact.
  The same for the low-precision all_reduce (its single copy falls back to
  the segment path). 'ALLREDUCE <rank> <algorithm_counts as JSON>'.
- a second group that read its peers in one copy before rank 0 turned
  non-dumpable: its next all_reduce in which rank 1 reads rank 0 fails on
  both ranks, rank 1's error naming the refused read (one where rank 0 did
  every piece itself is exact; at most 5 tries).
  'REFUSED_LATER <rank> <tries> <error or none>'.
Then 'OK <rank>' and, after destroying the groups, 'THREADS <rank> <threads
before init> <threads now>', Gloo's own threads not counted (torch keeps a
destroyed new_group's Gloo backend, and its threads, alive: plain Gloo groups too).
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


def _threads() -> int:
    """This process's threads but Gloo's (named gloo_tcp_loop, pt_gloo_runloop)."""
    names = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as f:
                names.append(f.read().strip())
        except FileNotFoundError:  # ended meanwhile
            pass
    return sum(not name.startswith(("gloo_", "pt_gloo")) for name in names)


def _rank(rank: int, store_dir: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if os.geteuid() == 0:
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
        assert libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) == 0  # a uid change clears it; peers must open our segment
    import fastcomm

    torch.set_num_threads(1)  # no OpenMP workers: the thread count below is the communication's
    threads_before = _threads()
    dist.init_process_group(
        "fastcomm",
        init_method=f"file://{store_dir}/store",
        rank=rank,
        world_size=2,
        timeout=datetime.timedelta(seconds=30),
    )
    backend = fastcomm.fastcomm_backend()
    assert backend.shm_engine is not None
    large = (4 << 20) // 4 + 3  # float32: allreduce_shm_single_copy's range (2 ranks on at least 2 CPUs)
    earlier = dist.new_group([0, 1], backend="fastcomm")
    t = torch.full((large,), float(rank + 1))
    dist.all_reduce(t, group=earlier)  # reads rank 0 in one copy while it may
    assert torch.equal(t, torch.full_like(t, 3.0))
    assert fastcomm.fastcomm_backend(earlier).algorithm_counts().get("allreduce_shm_single_copy") == 1
    dist.barrier()
    if rank == 0:
        assert libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
    dist.barrier()
    peer = 1 - rank
    numel = 1 << 18  # 1 MiB of float32: above the default threshold
    for k in range(3):
        got = torch.zeros(numel)
        works = [
            dist.isend(torch.arange(numel, dtype=torch.float32) + 1000 * rank + k, dst=peer),
            dist.irecv(got, src=peer),
        ]
        for w in works:
            w.wait()
        assert torch.equal(got, torch.arange(numel, dtype=torch.float32) + 1000 * peer + k), f"message {k}"
    dist.barrier()
    os.write(1, f"RESULT {rank} {json.dumps(backend.p2p_stats())}\n".encode())
    for k in range(2):
        t = torch.arange(large, dtype=torch.float32) * (rank + 1) + k
        dist.all_reduce(t)
        assert torch.equal(t, torch.arange(large, dtype=torch.float32) * 3 + 2 * k), f"all_reduce {k}"
    for k in range(2):  # the low-precision all_reduce has a single copy of its own: the same fallback
        t = (torch.arange(large) % 7).float() + rank + k
        backend.all_reduce_low_precision(t, torch.float16, 0.5, 65504.0).wait()
        assert torch.equal(t, (torch.arange(large) % 7).float() + 0.5 + k), f"all_reduce_low_precision {k}"
    os.write(1, f"ALLREDUCE {rank} {json.dumps(backend.algorithm_counts())}\n".encode())
    # Work sharing lets rank 0 do every piece itself when rank 1 comes late to
    # an op (then nothing reads rank 0 and the op is exact): a few tries, every
    # rank sees the same outcome of each (a refused read aborts the op on all).
    error, tries = "none", 0
    while error == "none" and tries < 5:
        tries += 1
        t = torch.full((4 * large,), float(rank + 1))  # 16 MiB: rank 0 alone would take milliseconds
        try:
            dist.all_reduce(t, group=earlier)
            assert torch.equal(t, torch.full_like(t, 3.0)), f"later all_reduce {tries}"
        except Exception as e:  # noqa: BLE001 (the test reads the type and message)
            error = f"{type(e).__name__}: {e}".replace("\n", " ")
    os.write(1, f"REFUSED_LATER {rank} {tries} {error}\nOK {rank}\n".encode())
    del backend
    dist.destroy_process_group(earlier)
    dist.destroy_process_group()
    # the p2p progress thread (and Gloo's) are gone once the group is
    os.write(1, f"THREADS {rank} {threads_before} {_threads()}\n".encode())


if __name__ == "__main__":
    store_dir = sys.argv[1]
    os.chmod(store_dir, 0o777)
    mp.spawn(_rank, args=(store_dir,), nprocs=2)
