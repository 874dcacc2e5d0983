"""One rank of a group whose ranks differ in configuration:
`python agreement.py SCENARIO RANK WORLD_SIZE STORE_PATH` (the test starts every
rank with its own environment).

option_differs:    the test sets an agreed option on one rank only; group
                   creation must raise on every rank, naming it.
affinity_differs:  rank 1 binds itself to one CPU before creating the group (as
                   a launcher would), rank 0 keeps every CPU; all_reduce of every
                   size class must be exact and both ranks must plan alike.
algorithm_differs: agreement on options switched off in this process (the
                   engine's own per-op check alone), one-shot's limit differs:
                   the op must raise on every rank naming both algorithms, and
                   the group must still work.
slot_too_large:    FASTCOMM_SHM_SLOT_BYTES of 1 TiB: refused at creation on every
                   rank, naming the limit, before any memory is touched.
made_again:        a default group made, destroyed and made again
                   (FASTCOMM_SHM=0): a mismatch on the second must still name
                   the algorithms, whose first registrations died with the first.
Prints 'RESULT <rank> ok <details>' or 'RESULT <rank> <error type>: <message>'.
"""

import datetime
import os
import sys

import torch
import torch.distributed as dist

import fastcomm
import fastcomm._agreement

scenario, rank, world_size, store_path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
torch.set_num_threads(1)


def report(text: str) -> None:
    print(f"RESULT {rank} {' '.join(text.split())}", flush=True)


def exact_all_reduces() -> None:
    # 8 B (one-shot), 64 KiB (one-shot, or single copy from its minimum), 1 MiB and 4 MiB (single copy or two-shot).
    for numel in (2, 16 << 10, 256 << 10, 1 << 20):
        t = torch.full((numel,), float(rank + 1))
        dist.all_reduce(t)
        expected = float(world_size * (world_size + 1) // 2)
        assert torch.equal(t, torch.full_like(t, expected)), (numel, t[:4])


def made_again(store) -> None:
    timeout = datetime.timedelta(seconds=20)
    for incarnation in range(2):
        group_store = dist.PrefixStore(f"incarnation-{incarnation}/", store)
        dist.init_process_group("fastcomm", store=group_store, rank=rank, world_size=world_size, timeout=timeout)
        t = torch.full((2,), float(rank + 1))
        dist.all_reduce(t)
        assert torch.equal(t, torch.full((2,), 3.0)), t
        if incarnation == 0:
            dist.destroy_process_group()
    try:
        if rank == 0:
            dist.all_reduce(torch.ones(8))
        else:
            dist.all_gather_into_tensor(torch.zeros(8 * world_size), torch.ones(8))
        report("ok no error")
    except RuntimeError as error:
        report(f"{type(error).__name__}: {error}")
    dist.destroy_process_group()


def main() -> None:
    if scenario == "affinity_differs" and rank == 1:
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    if scenario == "algorithm_differs":
        fastcomm._agreement.AGREED_FIELDS = ()
    store = dist.FileStore(store_path, world_size)
    if scenario == "made_again":
        made_again(store)
        return
    try:
        dist.init_process_group(
            "fastcomm", store=store, rank=rank, world_size=world_size, timeout=datetime.timedelta(seconds=20)
        )
    except Exception as error:  # noqa: BLE001  (reported to the test)
        report(f"{type(error).__name__}: {error}")
        return
    backend = fastcomm.fastcomm_backend()
    if scenario == "affinity_differs":
        exact_all_reduces()
        report(
            f"ok single_copy_min={backend.config.shm_allreduce_single_copy_min_bytes} "
            f"counts={sorted(backend.algorithm_counts())}"
        )
    elif scenario == "algorithm_differs":
        try:
            dist.all_reduce(torch.ones(1024))  # 4 KiB: one-shot on one rank, two-shot on the other
            report("ok no error")
        except RuntimeError as error:
            t = torch.full((2,), float(rank + 1))
            dist.all_reduce(t)  # 8 B: one-shot on both; the group still works
            assert torch.equal(t, torch.full((2,), 3.0)), t
            report(f"{type(error).__name__}: {error}")
    else:
        report("ok group created")
    dist.destroy_process_group()


main()
