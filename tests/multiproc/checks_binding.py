"""FASTCOMM_SHM_BIND_CPUS: 1 binds each rank's process to one CPU by its local rank; auto
binds none, and where the host's ranks outnumber their CPUs returns ops' threads
to that CPU while the host is quiet; a child
forked from a bound rank gets the CPUs back; ops of at least
FASTCOMM_SHM_UNBOUND_MIN_BYTES run free; a waiter moves a preempted peer onto
its CPU (runs in a RankPool)."""

import os
import subprocess
import sys
import threading
import time

import torch
import torch.distributed as dist

import fastcomm
from fastcomm import _shm
from fastcomm._options import read_options


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


def auto_never_binds(rank, world_size):
    """auto: no process bound, every thread on every CPU, whether the ranks are
    as many as the CPUs (2 on this 2-CPU machine) or more (3 here); only where
    they outnumber the CPUs a home CPU to return to."""
    cpus = _shm.usable_cpus()
    assert _shm._cpus_before_binding is None, "auto bound a rank"
    assert all(c == set(cpus) for c in _thread_cpus().values()), (cpus, _thread_cpus())
    assert _shm._home_cpu == (cpus[rank % len(cpus)] if world_size > len(cpus) else None), _shm._home_cpu


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


def _home_cpu(rank: int) -> int:
    before = _shm._cpus_before_binding
    assert before is not None, "the group's set-up did not bind this process"
    return before[rank % len(before)]  # one host: the local rank is the rank


def _exact_small_all_reduce(rank: int, world_size: int) -> None:
    t = torch.full((1000,), float(rank + 1))
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((1000,), world_size * (world_size + 1) / 2)), t[:4]


def _assert_op_thread_cpus(want: set[int], what) -> None:
    """This thread's CPUs are `want`, unless a peer moved it during its latest op
    (something preempted this rank meanwhile: peer_pulling.h)."""
    if not fastcomm.fastcomm_backend().shm_engine.moved_by_peer:
        assert os.sched_getaffinity(0) == want, (what, want, os.sched_getaffinity(0))


def large_ops_run_free(rank, world_size):
    """The thread that runs an op of at least FASTCOMM_SHM_UNBOUND_MIN_BYTES (16
    MiB by default) may use every CPU the process had before binding; the next
    smaller op binds it again (transport/shm/cpu_binding.h). Broadcast: it runs
    on the calling thread on any machine (a large all_reduce with async_op=True
    may go to the op queue where CPUs are plenty)."""
    home = _home_cpu(rank)
    threshold = read_options().shm_unbound_min_bytes
    assert threshold > 0
    _exact_small_all_reduce(rank, world_size)
    _assert_op_thread_cpus({home}, "small")
    for count in (threshold // 4, threshold // 4 - 1):  # at the threshold, then just below it
        t = torch.full((count,), float(rank + 1))
        dist.broadcast(t, src=world_size - 1)
        assert torch.equal(t, torch.full((count,), float(world_size))), t[:4]
        want = set(_shm._cpus_before_binding) if count * 4 >= threshold else {home}
        _assert_op_thread_cpus(want, count * 4)
    _exact_small_all_reduce(rank, world_size)
    _assert_op_thread_cpus({home}, "small")


def _until_beside_busy_process(rank, world_size, step, progress) -> tuple[int, float]:
    """Runs step(i) for i = 0, 1, ... while a busy-loop process shares the last
    rank's CPU, until some rank's progress() grew or 20 s passed (every rank
    stops after the same step). Returns the steps run and the growth summed
    over the ranks. The busy process is killed even on failure."""
    before = progress()
    busy = None
    try:
        if rank == world_size - 1:
            busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
            os.sched_setaffinity(busy.pid, {_home_cpu(rank)})
        deadline = time.monotonic() + 20
        for i in range(10_000):
            step(i)
            status = torch.tensor([float(progress() - before), float(time.monotonic() > deadline)])
            dist.all_reduce(status)  # 8 B: one-shot, never the algorithm under test
            if status.sum() > 0:
                break
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()
    return i + 1, float(status[0])


def preempted_peer_is_pulled(rank, world_size):
    """A busy process shares the last rank's CPU: that rank is preempted in the
    middle of ops, and a peer waiting for it moves it onto its own CPU
    (transport/shm/peer_pulling.h; ShmEngine.pulls counts them). Results stay
    exact, and the moved rank is bound to its own CPU again once its op ends.
    Bounded: at most 20 s of 16 MiB broadcasts; the busy process is killed even
    on failure."""
    home = _home_cpu(rank)
    engine = fastcomm.fastcomm_backend().shm_engine
    count = read_options().shm_unbound_min_bytes // 4  # free ops: the peer's published count is used too
    t = torch.empty(count)

    def broadcast(i):
        root = i % world_size
        t.fill_(float(root + 1) if rank == root else -1.0)
        dist.broadcast(t, src=root)
        assert torch.equal(t, torch.full((count,), float(root + 1))), (i, t[:4])

    steps, pulls = _until_beside_busy_process(rank, world_size, broadcast, lambda: engine.pulls)
    assert pulls > 0, f"no rank pulled its preempted peer in {steps} ops of {count * 4} B"
    # The busy process is gone; a rank pulled during one of these ops takes its CPU back when it ends.
    for _ in range(2):
        _exact_small_all_reduce(rank, world_size)
    _assert_op_thread_cpus({home}, "a pulled rank did not take its own CPU back")


def preempted_peers_share_is_taken_over(rank, world_size):
    """A busy process shares the last rank's CPU: that rank is preempted in the
    middle of single-copy all_reduces, and a peer that finished its own share
    does the rest of the preempted rank's pieces (work sharing, engine.h
    claim_piece; ShmEngine.pieces_taken_over counts them). Results stay exact
    whoever reduces a piece. Bounded: at most 20 s of 4 MiB all_reduces; the
    busy process is killed even on failure."""
    backend = fastcomm.fastcomm_backend()
    low, high = backend.config.shm_allreduce_single_copy_min_bytes, backend.config.shm_allreduce_single_copy_max_bytes
    count = (4 << 20) // 4
    if not low or not low <= count * 4 <= high:
        return  # single copy is off here (refused or configured away): nothing to take over
    engine = backend.shm_engine
    used = lambda: backend.algorithm_counts().get("allreduce_shm_single_copy", 0)  # noqa: E731
    used_before = used()
    t = torch.empty(count)

    def all_reduce(i):
        t.fill_(float(rank + 1 + i % 5))
        dist.all_reduce(t)
        expected = float(world_size * (world_size + 1) // 2 + world_size * (i % 5))
        assert torch.equal(t, torch.full((count,), expected)), (i, t[:4])

    steps, taken = _until_beside_busy_process(rank, world_size, all_reduce, lambda: engine.pieces_taken_over)
    assert used() - used_before == steps, backend.algorithm_counts()
    assert taken > 0, f"no rank took over a preempted peer's pieces in {steps} all_reduces of {count * 4} B"


def _move_off_home(home: int, cpus: list[int]) -> None:
    """Puts this thread on a CPU other than `home`, then lets it run anywhere again
    (as the scheduler's balancer moves a rank)."""
    os.sched_setaffinity(0, {next(c for c in cpus if c != home)})
    os.sched_setaffinity(0, set(cpus))


def _displaced_ops_for(seconds: float, rank, world_size, home, cpus, until=None) -> None:
    """Small exact all_reduces, each begun off the home CPU, for `seconds` (every
    rank stops after the same op), or until until() holds on every rank."""
    deadline = time.monotonic() + seconds
    for _ in range(1_000_000):
        if until is None or not until():
            _move_off_home(home, cpus)
        _exact_small_all_reduce(rank, world_size)
        status = torch.tensor([float(until is not None and until()), float(time.monotonic() > deadline)])
        dist.all_reduce(status)
        if status[0] == world_size or status[1] > 0:
            return


def oversubscribed_ranks_return_home(rank, world_size):
    """auto where ranks outnumber their CPUs (3 on this machine's 2): nothing is
    bound, but an op's thread found off its home CPU (local rank mod the CPUs)
    moves back while the host is quiet, and keeps its CPU set
    (transport/shm/home_keeping.h; ShmEngine.home_returns counts the moves);
    beside a busy process it stays where the scheduler put it. Bounded: at most
    10 s quiet, 2 s beside the busy process, which is killed even on failure."""
    cpus = _shm.usable_cpus()
    if len(cpus) < 2 or world_size <= len(cpus):
        return  # nothing to keep: a single CPU, or a CPU for every rank
    home = cpus[rank % len(cpus)]
    assert _shm._home_cpu == home and _shm._cpus_before_binding is None
    engine = fastcomm.fastcomm_backend().shm_engine

    before = engine.home_returns
    _displaced_ops_for(10.0, rank, world_size, home, cpus, until=lambda: engine.home_returns > before)
    assert engine.home_returns > before, f"quiet host (others' share {engine.foreign_load:.2f}): never returned home"
    assert engine.foreign_load >= 0  # measured (a return needed a quiet window; a later one may differ)
    assert os.sched_getaffinity(0) == set(cpus), "the return left the thread bound"

    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if rank == 0 else None
    try:
        if busy is not None:
            os.sched_setaffinity(busy.pid, {cpus[0]})
        _displaced_ops_for(0.6, rank, world_size, home, cpus)  # the load window sees the busy process
        before = engine.home_returns
        _displaced_ops_for(1.0, rank, world_size, home, cpus)
        assert engine.foreign_load >= fastcomm._C.HOME_QUIET_FOREIGN_SHARE, engine.foreign_load
        assert engine.home_returns == before, "returned home beside a busy process"
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()
