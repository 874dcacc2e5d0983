"""The one place fastcomm reads environment variables (all listed in docs/tuning.md)."""

from __future__ import annotations

import dataclasses
import os
import socket


@dataclasses.dataclass(frozen=True)
class Options:
    # Worker threads of the internal Gloo backend (Gloo's own default is 2).
    gloo_threads: int = 2
    # CPU all_reduce of at most this many bytes runs as one all_gather plus a
    # local reduction (allreduce_via_allgather); 0 turns that off. Measured by
    # benchmarks/allreduce_vs_gloo.py (docs/algorithms.md "Across hosts").
    allreduce_allgather_max_bytes: int = 64 << 10
    # The shared-memory engine among ranks of one host (0: off, Gloo for everything).
    shm: bool = True
    # A wait on the caller's thread of a host whose ranks each have a CPU stays
    # awake (pause loop, then sched_yield) for 1.5x the longest of its recent
    # waits, 100 us to 2 ms, before it sleeps (transport/shm/spin_budget.h);
    # off, it sleeps after the op queue's short stage (about 100 us). Only timing follows from it. Measured by
    # benchmarks/peers/patterns.py with the `fastcomm-backend-nobudget` variant.
    shm_spin_budget: bool = True
    # Bytes per rank per buffer in the segment: the chunk size of shm algorithms.
    shm_slot_bytes: int = 1 << 20
    # all_reduce of S bytes on P ranks runs one-shot while S * (P-1)^2 <= this, else two-shot.
    # Measured by benchmarks/allreduce_vs_gloo.py --api cpp with this at 0 and
    # at 1 GiB (docs/algorithms.md "The one-host all_reduce family").
    shm_oneshot_max_bytes: int = 128 << 10
    # all_reduce on one host of at least this many bytes runs on the group's op
    # queue thread when its caller does not wait at once (torch's asyncOp: DDP's
    # reducer, async_op=True): the call returns at once and its future completes
    # there, so DDP's backward keeps computing while its buckets are summed;
    # smaller ones and blocking calls run on the calling thread (no hand-over).
    # 0: every one inline. -1 (unset): 1 MiB where the host has two cores per
    # local rank (the thread has a core to run on), else 0
    # (resolve_async_min_bytes). Measured by
    # benchmarks/arena_vs_ordinary.py and benchmarks/ddp_training.py
    # (docs/algorithms.md "Work and futures").
    shm_async_min_bytes: int = -1
    # all_reduce on one host of an ordinary tensor (not from the arena) of
    # min..max bytes reads the peers' slices and writes the results into their
    # tensors with process_vm_readv/writev (allreduce_shm_single_copy: one copy
    # each way instead of two through the segment; where the kernel refuses,
    # the group goes on with one-shot and two-shot). 0: off. -1 (unset): 32 KiB
    # where the host's ranks are at most as many as its CPUs (from there it
    # beats one-shot), else off (a rank descheduled in the middle of a copy
    # holds up the others); resolve_single_copy_min_bytes. Measured by
    # benchmarks/peers/run.py (docs/algorithms.md "Single copy for ordinary tensors").
    shm_allreduce_single_copy_min_bytes: int = -1
    # ... up to this many bytes; above it two-shot. -1 (unset): no maximum
    # where reused tensors go into huge pages (shm_huge_pages_min_bytes > 0:
    # then single copy beats two-shot at every size), else 32 MiB (in 4 KiB
    # pages two-shot passes it above that); resolve_single_copy_max_bytes.
    # Measured by benchmarks/peers/run.py.
    shm_allreduce_single_copy_max_bytes: int = -1
    # A rank's own ordinary tensor of at least this many bytes that comes to a
    # single-copy all_reduce a second time (same address and length), or is
    # sent single copy a second time, has the whole 2 MiB blocks inside it
    # moved into transparent huge pages first (madvise MADV_COLLAPSE, once per
    # tensor): the kernel then pins 512x fewer pages when peers read and write
    # it. 0: never. Measured by benchmarks/peers/run.py and
    # benchmarks/allreduce_vs_gloo.py --op sendrecv with this at 0 as the
    # variant (docs/algorithms.md "Huge pages for reused tensors");
    # transport/shm/huge_pages.h.
    shm_huge_pages_min_bytes: int = 4 << 20
    # The fp16/bf16 hooks' low-precision all_reduce of an arena tensor (DDP's
    # buckets with DDP_DISABLE_COMM_MEM=0) of at least this many bytes reads and
    # writes the peers' tensors in place (allreduce_low_precision_shm_arena);
    # smaller ones go through the segment (ordinary tensors: single copy or the
    # segment). 0: always in place. Measured by benchmarks/arena_vs_ordinary.py
    # --collective all_reduce_fp16 (docs/compression.md "On arena buckets").
    shm_low_precision_arena_min_bytes: int = 4 << 10
    # An all_reduce of an arena tensor of at least this many bytes reads and
    # writes the peers' tensors in place (allreduce_shm_arena); smaller ones run
    # one-shot (one round through the segment; from this size the arena wins,
    # since one-shot reads every peer's whole slot). 0: always in place.
    # Measured by benchmarks/arena_vs_ordinary.py (docs/algorithms.md "The arena").
    shm_arena_min_bytes: int = 8 << 10
    # Bind each process to one CPU, by its rank among the group's ranks on its host
    # (local rank mod the CPUs it may use), when its first shared-memory group is
    # made: 1 always, 0 never, -1 ("auto" in the environment, the default;
    # resolve_cpu_placement) never where the host's ranks are at most as many as
    # the CPUs they may use, and where they outnumber them it keeps each op's
    # thread on its home CPU while no other process uses the CPUs
    # (transport/shm/home_keeping.h: steadier rounds). Not bound at ranks == CPUs
    # because beside a busy process a bound rank cannot leave the CPU that process
    # shares with it: beside one, fastcomm's DDP step of GPT-2 small was faster
    # than Gloo's with ranks unbound and slower with them bound, with the busy
    # process keeping more beside unbound ranks, and quiet steps no slower
    # (benchmarks/real_models.py, whole jobs alternating between the two;
    # benchmarks/peers/patterns.py --busy 1 agrees). Waiters that find the rank they wait for on their own CPU yield it
    # (Engine::missing_rank_shares_cpu, P2pChannels::peer_shares_cpu), which is
    # what binding prevents (docs/algorithms.md "Where ranks run").
    shm_bind_cpus: int = -1
    # A bound process runs shared-memory ops of at least this many bytes on any
    # of the CPUs it had before binding, smaller ones on its own CPU (the thread
    # that runs the op changes its CPU set when the size class changes). Beside a
    # busy process a bound rank of a long op waits out the busy one's time slice
    # while its peer idles, free it moves to the idle CPU: steadier and as fast
    # or faster from 16 MiB, slower below. 0: every op bound. Measured by
    # benchmarks/peers/run.py --background-load 1 (docs/algorithms.md "Where ranks run").
    shm_unbound_min_bytes: int = 16 << 20
    # Largest piece (bytes per rank) of the pipelined hierarchical algorithms: the
    # leaders' network step of one piece overlaps the shared-memory steps of the
    # next. Measured by benchmarks/multihost.py (docs/algorithms.md "Across hosts").
    pipeline_piece_bytes: int = 1 << 20
    # send/recv between ranks of one host: messages of at least this many bytes
    # are read by the receiver straight from the sender's memory (Linux
    # cross-memory attach, one copy instead of two through the channel); 0: never.
    # Measured by benchmarks/allreduce_vs_gloo.py --op sendrecv --api cpp.
    p2p_single_copy_bytes: int = 64 << 10
    # Testing aid: consecutive blocks of this many group ranks act as separate hosts (0: real hosts).
    ranks_per_host: int = 0
    # Network interfaces of fastcomm's internal Gloo groups, comma-separated
    # (FASTCOMM_SOCKET_IFNAME, else torch's GLOO_SOCKET_IFNAME); "": the address
    # the hostname resolves to, as Gloo does.
    socket_ifname: str = ""


# The most worker threads one internal Gloo group may start (each group starts
# its own; more than a few only wait on the same sockets).
MAX_GLOO_THREADS = 64

# The options that decide how the ranks of a group talk to each other: which
# algorithm runs a call, how it is cut into chunks and pieces, how hosts are
# told apart. One rank's different value would make it run another protocol
# than its peers for the same call (garbage, not an error), so every rank of a
# new group compares them (fastcomm/_agreement.py) and the group is refused if
# any differs. The other options shape only this rank's own behaviour (threads,
# CPU binding, waiting, network interfaces) and may differ.
AGREED_FIELDS = (
    "allreduce_allgather_max_bytes",
    "shm",
    "shm_slot_bytes",
    "shm_oneshot_max_bytes",
    "shm_allreduce_single_copy_min_bytes",
    "shm_allreduce_single_copy_max_bytes",
    "shm_huge_pages_min_bytes",
    "shm_low_precision_arena_min_bytes",
    "shm_arena_min_bytes",
    "pipeline_piece_bytes",
    "p2p_single_copy_bytes",
    "ranks_per_host",
)


def env_name(field: str) -> str:
    """The environment variable of Options field `field`."""
    return "FASTCOMM_" + field.upper()


def _int_at_least(name: str, default: int, minimum: int, maximum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    kind = {0: "a non-negative", 1: "a positive"}.get(minimum, f"an integer >= {minimum}, i.e. an")
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"fastcomm: environment variable {name} must be {kind} integer, got {raw!r}") from None
    if value < minimum:
        raise ValueError(f"fastcomm: environment variable {name} must be {kind} integer, got {raw!r}")
    if maximum is not None and value > maximum:
        raise ValueError(f"fastcomm: environment variable {name} must be at most {maximum}, got {raw!r}")
    return value


def _flag(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    if raw not in ("0", "1"):
        raise ValueError(f"fastcomm: environment variable {name} must be 0 or 1, got {raw!r}")
    return raw == "1"


def _bind_mode(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    modes = {"0": 0, "1": 1, "auto": -1}
    if raw not in modes:
        raise ValueError(f"fastcomm: environment variable {name} must be 0, 1 or auto, got {raw!r}")
    return modes[raw]


def resolve_cpu_placement(value: int, local_ranks: int, cpus: int) -> str:
    """FASTCOMM_SHM_BIND_CPUS as given (1: "bind", 0: "free"), or its automatic
    value (-1): "keep_home" where the host's ranks outnumber the CPUs they may use
    (unbound, but each returns to its home CPU while nothing else runs:
    home_keeping.h); "free" where each rank has a CPU or more, and for a rank
    alone on its host (nothing to share)."""
    if local_ranks <= 1:
        return "free"
    if value >= 0:
        return "bind" if value == 1 else "free"
    return "free" if local_ranks <= cpus else "keep_home"


def resolve_async_min_bytes(value: int, local_ranks: int, cores: int) -> int:
    """FASTCOMM_SHM_ASYNC_MIN_BYTES as given, or its automatic value (-1): the op
    queue only where each local rank has a second core for its thread (with one
    core per rank it measured no faster quiet: the thread and the backward pass
    take turns on one core)."""
    if value >= 0:
        return value
    return 1 << 20 if cores >= 2 * local_ranks else 0


def resolve_single_copy_min_bytes(value: int, local_ranks: int, cpus: int) -> int:
    """FASTCOMM_SHM_ALLREDUCE_SINGLE_COPY_MIN_BYTES as given, or its automatic value
    (-1): 32 KiB where every local rank has a CPU of its own, else 0 (off)."""
    if value >= 0:
        return value
    return 32 << 10 if local_ranks <= cpus else 0


def resolve_single_copy_max_bytes(value: int, huge_pages_min_bytes: int) -> int:
    """FASTCOMM_SHM_ALLREDUCE_SINGLE_COPY_MAX_BYTES as given, or its automatic
    value (-1): no maximum where reused tensors go into huge pages, else 32 MiB."""
    if value >= 0:
        return value
    return (1 << 62) if huge_pages_min_bytes > 0 else 32 << 20


def _interfaces() -> str:
    """FASTCOMM_SOCKET_IFNAME, else GLOO_SOCKET_IFNAME: names that this host's interfaces have."""
    for name in ("FASTCOMM_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
        raw = os.environ.get(name)
        if raw:
            break
    else:
        return ""
    have = [interface for _, interface in socket.if_nameindex()]
    for interface in raw.split(","):
        if interface not in have:
            raise ValueError(
                f"fastcomm: environment variable {name} names network interface {interface!r}, which "
                f"this host does not have (it has: {', '.join(have)})"
            )
    return raw


def read_options() -> Options:
    """Options from the environment, read when a process group is created."""
    return Options(
        gloo_threads=_int_at_least("FASTCOMM_GLOO_THREADS", Options.gloo_threads, 1, MAX_GLOO_THREADS),
        allreduce_allgather_max_bytes=_int_at_least(
            "FASTCOMM_ALLREDUCE_ALLGATHER_MAX_BYTES", Options.allreduce_allgather_max_bytes, 0
        ),
        shm=_flag("FASTCOMM_SHM", Options.shm),
        shm_spin_budget=_flag("FASTCOMM_SHM_SPIN_BUDGET", Options.shm_spin_budget),
        shm_slot_bytes=_int_at_least("FASTCOMM_SHM_SLOT_BYTES", Options.shm_slot_bytes, 4096),
        shm_oneshot_max_bytes=_int_at_least("FASTCOMM_SHM_ONESHOT_MAX_BYTES", Options.shm_oneshot_max_bytes, 0),
        shm_async_min_bytes=_int_at_least("FASTCOMM_SHM_ASYNC_MIN_BYTES", Options.shm_async_min_bytes, 0),  # -1: auto
        shm_allreduce_single_copy_min_bytes=_int_at_least(  # -1: auto
            "FASTCOMM_SHM_ALLREDUCE_SINGLE_COPY_MIN_BYTES", Options.shm_allreduce_single_copy_min_bytes, 0
        ),
        shm_allreduce_single_copy_max_bytes=_int_at_least(
            "FASTCOMM_SHM_ALLREDUCE_SINGLE_COPY_MAX_BYTES", Options.shm_allreduce_single_copy_max_bytes, 0
        ),
        shm_huge_pages_min_bytes=_int_at_least(
            "FASTCOMM_SHM_HUGE_PAGES_MIN_BYTES", Options.shm_huge_pages_min_bytes, 0
        ),
        shm_arena_min_bytes=_int_at_least("FASTCOMM_SHM_ARENA_MIN_BYTES", Options.shm_arena_min_bytes, 0),
        shm_low_precision_arena_min_bytes=_int_at_least(
            "FASTCOMM_SHM_LOW_PRECISION_ARENA_MIN_BYTES", Options.shm_low_precision_arena_min_bytes, 0
        ),
        shm_bind_cpus=_bind_mode("FASTCOMM_SHM_BIND_CPUS", Options.shm_bind_cpus),
        shm_unbound_min_bytes=_int_at_least("FASTCOMM_SHM_UNBOUND_MIN_BYTES", Options.shm_unbound_min_bytes, 0),
        pipeline_piece_bytes=_int_at_least("FASTCOMM_PIPELINE_PIECE_BYTES", Options.pipeline_piece_bytes, 4096),
        p2p_single_copy_bytes=_int_at_least("FASTCOMM_P2P_SINGLE_COPY_BYTES", Options.p2p_single_copy_bytes, 0),
        ranks_per_host=_int_at_least("FASTCOMM_RANKS_PER_HOST", Options.ranks_per_host, 0),
        socket_ifname=_interfaces(),
    )
