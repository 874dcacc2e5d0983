"""Rendezvous of fastcomm's shared-memory engine for one process group.

Every rank of a new group calls :func:`setup` (from ``create_backend``). Through
the group's store the ranks find which of them share a host, the lowest rank of
each host creates a segment (an anonymous memory file: it never has a name in
/dev/shm, so no crash at any moment can leave one behind) and publishes its
/proc/<pid>/fd/<fd> path and a random nonce, the others open, map and validate
it, and every rank posts whether that worked. The engine is used only if it
worked on every rank of the group, so all ranks always choose the same
algorithms; otherwise the group runs on Gloo and a warning says why.

"Same host" means: same hostname, same boot, same /dev/shm mount and same pid
namespace (peers' pids are checked to detect dead ranks, and the creator's
/proc path must resolve). The attach itself proves the shared memory: the
nonce must match. ``FASTCOMM_RANKS_PER_HOST=k``
splits the group into blocks of k consecutive ranks that act as separate
hosts, so the hierarchical algorithms can be tested on one machine.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import socket
import warnings

import torch.distributed as dist

from fastcomm import _C, _ptracer
from fastcomm._gloo import make_gloo
from fastcomm._options import Options, resolve_cpu_placement
from fastcomm._rendezvous import Clock, GroupFacts, get_all

_PREFIX = "fastcomm/shm/"


@dataclasses.dataclass
class ShmPlan:
    """The host plan of one group: what C++ gets as Config.host_of_rank and Transports."""

    engine: _C.ShmEngine | None = None  # this rank's engine (None: alone on its host, or off)
    leaders: dist.ProcessGroup | None = None  # Gloo among host leaders (hierarchical groups, leaders only)
    # Host index of every group rank, when the group spans hosts and every host
    # is ready (hierarchical); empty otherwise.
    host_of_rank: list[int] = dataclasses.field(default_factory=list)


def _host_key(rank: int, options: Options) -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = "?"
    shm_dev = os.stat("/dev/shm").st_dev if os.path.exists("/dev/shm") else -1
    pid_ns = os.stat("/proc/self/ns/pid").st_ino if os.path.exists("/proc/self/ns/pid") else -1
    key = f"{socket.gethostname()}|{boot}|{shm_dev}|{pid_ns}"
    if options.ranks_per_host:
        key += f"|simulated-host-{rank // options.ranks_per_host}"
    return key


# What each kind of key the ranks publish holds (for errors).
_PUBLISHED = {"host": "host key", "segment": "segment's path", "status": "set-up status"}


def _get_all(store: dist.Store, kind: str, ranks, clock: Clock) -> list[str]:
    return get_all(store, f"{_PREFIX}{kind}/", _PUBLISHED[kind], ranks, clock, "shared-memory set-up")


# The CPUs this process could use before FASTCOMM_SHM_BIND_CPUS bound it to one (None: not bound).
_cpus_before_binding: list[int] | None = None
# The CPU this unbound process returns to while the host is quiet (None: none; home_keeping.h).
_home_cpu: int | None = None


def usable_cpus() -> list[int]:
    """The CPUs this process may use: all it had before FASTCOMM_SHM_BIND_CPUS bound it to one."""
    return _cpus_before_binding if _cpus_before_binding is not None else sorted(os.sched_getaffinity(0))


def _bind_to_cpu(local_rank: int, unbound_min_bytes: int) -> None:
    """Binds every thread of this process (and so the threads it starts later) to
    CPU `local_rank` mod the CPUs it may use, ops of at least `unbound_min_bytes`
    excepted (transport/shm/cpu_binding.h); once per process (its first group's
    options)."""
    global _cpus_before_binding
    if _cpus_before_binding is not None or _home_cpu is not None:
        return
    cpus = usable_cpus()
    cpu = cpus[local_rank % len(cpus)]
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), {cpu})
        except ProcessLookupError:  # the thread ended meanwhile
            pass
    _cpus_before_binding = cpus
    _C.set_cpu_binding(cpu, cpus, unbound_min_bytes)
    os.register_at_fork(after_in_child=_unbind_forked_child)


def _keep_home_cpu(local_rank: int) -> None:
    """Ranks that outnumber their CPUs stay unbound, but each op's thread returns
    to CPU `local_rank` mod the CPUs it may use while nothing else runs on them
    (transport/shm/home_keeping.h); once per process (its first group's)."""
    global _home_cpu
    if _home_cpu is not None or _cpus_before_binding is not None:
        return
    cpus = usable_cpus()
    _home_cpu = cpus[local_rank % len(cpus)]
    _C.set_home_cpu(_home_cpu, cpus)
    os.register_at_fork(after_in_child=_forget_home_in_forked_child)


def _forget_home_in_forked_child() -> None:
    """A child forked from such a rank (a DataLoader worker) has no home CPU."""
    global _home_cpu
    if _home_cpu is not None:
        _C.set_home_cpu(-1, [])
        _home_cpu = None


def _unbind_forked_child() -> None:
    """In a child forked from a bound rank (a DataLoader worker): the CPUs the
    rank had before binding. The binding is for the rank's own waits, not for
    its helpers. (Children started by exec, e.g. multiprocessing's spawn, keep
    the binding, as under Open MPI or taskset.)"""
    global _cpus_before_binding
    if _cpus_before_binding is None:
        return
    _C.set_cpu_binding(-1, [], 0)
    try:
        os.sched_setaffinity(0, _cpus_before_binding)
    except OSError:  # CPUs taken away meanwhile (cgroup): keep what the child has
        return
    _cpus_before_binding = None


def _connect(store: dist.Store, local: list[int], local_rank: int, options: Options, clock: Clock) -> _C.ShmEngine:
    spin = len(local) <= len(usable_cpus())  # spinning on oversubscribed cores starves peers
    segment_key = f"{_PREFIX}segment/{local[0]}"
    if local_rank == 0:
        try:
            engine = _C.ShmEngine.create(len(local), options.shm_slot_bytes, local, spin, True)
        except Exception as error:
            store.set(segment_key, f"error {error}")
            raise
        store.set(segment_key, f"{engine.segment_name} {engine.nonce}")
        return engine
    (published,) = _get_all(store, "segment", [local[0]], clock)
    if published.startswith("error "):
        raise RuntimeError(f"rank {local[0]} could not create the segment: {published[6:]}")
    name, nonce = published.split()
    return _C.ShmEngine.attach(name, int(nonce), local_rank, options.shm_slot_bytes, local, spin, True)


# A segment holds two buffers of one slot per local rank, and every byte of it
# is touched when it is made: at most this share of the machine's memory.
SEGMENT_MEMORY_SHARE = 4


def check_segment_size(slot_bytes: int, local_sizes: list[int], memory_bytes: int) -> None:
    """Refuses FASTCOMM_SHM_SLOT_BYTES whose segment (2 x local ranks x slot
    bytes on the largest host) exceeds 1/SEGMENT_MEMORY_SHARE of `memory_bytes`
    (the least any rank's machine has): the kernel would kill the rank making it.
    Every rank checks the same numbers, so every rank refuses alike."""
    limit = memory_bytes // SEGMENT_MEMORY_SHARE
    ranks = max(local_sizes)
    if 2 * ranks * slot_bytes > limit:
        raise ValueError(
            f"fastcomm: set-up refused: FASTCOMM_SHM_SLOT_BYTES={slot_bytes} makes a shared-memory segment of "
            f"2 x {ranks} ranks x {slot_bytes} B = {2 * ranks * slot_bytes} B, more than 1/{SEGMENT_MEMORY_SHARE} of "
            f"the machine's memory ({memory_bytes} B): at most {limit // (2 * ranks)} B per slot for {ranks} ranks "
            f"on a host"
        )


def setup(
    store: dist.Store, rank: int, size: int, timeout: datetime.timedelta, options: Options, facts: GroupFacts
) -> ShmPlan:
    """This rank's part of the group's shared-memory rendezvous (collective over the group)."""
    if not options.shm:
        return ShmPlan()
    if size == 1:
        check_segment_size(options.shm_slot_bytes, [1], facts.memory_bytes)
        # Its own host: the engine makes every collective a local copy, without
        # Gloo's thread hand-off per op.
        return ShmPlan(engine=_C.ShmEngine.create(1, options.shm_slot_bytes, [0], True, True))
    clock = Clock(rank, timeout)
    store.set(f"{_PREFIX}host/{rank}", _host_key(rank, options))
    keys = _get_all(store, "host", range(size), clock)
    hosts = list(dict.fromkeys(keys))  # in order of each host's lowest rank
    local = [r for r in range(size) if keys[r] == keys[rank]]
    local_rank = local.index(rank)
    check_segment_size(options.shm_slot_bytes, [keys.count(k) for k in hosts], facts.memory_bytes)
    # Before the engine exists, so every peer's declaration precedes any rank's single-copy probe.
    _ptracer.declare_for_host(
        store,
        f"{_PREFIX}ancestry/",
        rank,
        local,
        lambda s, prefix, ranks: get_all(s, prefix, "ancestry", ranks, clock, "shared-memory set-up"),
    )
    engine, status = None, "ok"
    try:
        if len(local) > 1:
            engine = _connect(store, local, local_rank, options, clock)
        elif 1 < len(hosts) < size:
            # Alone on its host in a hierarchical group: a one-rank engine, so
            # the hierarchical algorithms run the same steps on every host.
            engine = _C.ShmEngine.create(1, options.shm_slot_bytes, [rank], True, True)
    except Exception as error:  # reported to every rank below
        status = f"rank {rank}: {error}"
    store.set(f"{_PREFIX}status/{rank}", status)
    # The creator waits here too, keeping its descriptor (and so the /proc path) open while peers attach.
    statuses = _get_all(store, "status", range(size), clock)
    failures = [s for s in statuses if s != "ok"]
    if failures:
        reason = f"shared-memory engine disabled for this group: {failures[0]}"
        if rank == 0:
            warnings.warn(f"fastcomm: {reason}; using Gloo", RuntimeWarning, stacklevel=3)
        return ShmPlan()
    placement = resolve_cpu_placement(options.shm_bind_cpus, len(local), len(usable_cpus()))
    if placement == "bind":
        _bind_to_cpu(local_rank, options.shm_unbound_min_bytes)
    elif placement == "keep_home":
        _keep_home_cpu(local_rank)
    if len(hosts) == 1:
        return ShmPlan(engine=engine)
    if len(hosts) == size:
        # One rank per host: nothing to share, and the hierarchical algorithms
        # would only wrap Gloo (losing allreduce_via_allgather's one-round path).
        return ShmPlan()
    leaders = None
    if local_rank == 0:
        host = hosts.index(keys[rank])
        try:
            leaders = make_gloo(store, f"{_PREFIX}leaders/", host, len(hosts), timeout, options)
        except Exception as error:
            raise dist.DistNetworkError(
                f"fastcomm: set-up on rank {rank}: the host leaders' Gloo group (this rank leads host {host} of "
                f"{len(hosts)}) could not be made; another host's leader died or is unreachable: "
                f"{str(error).strip()[:300]}"
            ) from None
    host_of_rank = [hosts.index(k) for k in keys]
    return ShmPlan(engine=engine, leaders=leaders, host_of_rank=host_of_rank)
