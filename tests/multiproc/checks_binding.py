"""FASTCOMM_SHM_BIND_CPUS: 1 binds each rank's process to one CPU by its local rank; auto
does so only where the host's ranks are as many as their CPUs; a child
forked from a bound rank gets the CPUs back (runs in a RankPool)."""
import os
import threading

import torch
import torch.distributed as dist

from fastcomm import _shm


def _thread_cpus() -> dict[int, set[int]]:
    cpus = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            cpus[int(tid)] = os.sched_getaffinity(int(tid))
        except ProcessLookupError:  # the thread ended meanwhile
            pass
    return cpus


def bound_by_local_rank(rank, world_size):
    before = _shm._cpus_before_binding
    assert before is not None and len(before) >= 1, "the group's set-up did not bind this process"
    assert _shm.usable_cpus() == before  # what the spin and op-queue decisions count
    mine = {before[rank % len(before)]}  # one host: the local rank is the rank
    assert all(cpus == mine for cpus in _thread_cpus().values()), (mine, _thread_cpus())
    seen = []
    worker = threading.Thread(target=lambda: seen.append(os.sched_getaffinity(0)))
    worker.start()
    worker.join()
    assert seen == [mine], "a thread started later runs elsewhere"
    # A second group (other local ranks: reversed order) keeps the first binding.
    group = dist.new_group(list(reversed(range(world_size))))
    assert all(cpus == mine for cpus in _thread_cpus().values())
    t = torch.full((1000,), float(rank + 1))
    dist.all_reduce(t, group=group)
    assert torch.equal(t, torch.full((1000,), world_size * (world_size + 1) / 2)), t[:4]
    dist.destroy_process_group(group)


def auto_binds_where_ranks_match_cpus(rank, world_size):
    """auto: bound as above where the ranks are as many as the CPUs they
    may use (2 ranks on this 2-CPU machine), else left alone (3 ranks here)."""
    cpus = _shm.usable_cpus()
    if world_size == len(cpus):
        bound_by_local_rank(rank, world_size)
    else:
        assert _shm._cpus_before_binding is None, "auto bound ranks that do not match the CPUs"
        assert all(c == set(cpus) for c in _thread_cpus().values()), (cpus, _thread_cpus())


def forked_child_gets_the_cpus_back(rank, world_size):
    """A bound rank forks (as a DataLoader worker starts): the child may use every
    CPU the rank could before binding, and binds nothing."""
    before = _shm._cpus_before_binding
    assert before is not None, "the group's set-up did not bind this process"
    assert os.sched_getaffinity(0) == {before[rank % len(before)]}
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, then leave without running the parent's exit handlers
        try:
            state = f"{sorted(os.sched_getaffinity(0))} {_shm._cpus_before_binding}"
            os.write(write_end, state.encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        reported = pipe.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert reported == f"{before} None", reported
    assert os.sched_getaffinity(0) == {before[rank % len(before)]}, "the parent stays bound"
