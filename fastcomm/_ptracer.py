"""Single copy where Yama's ``ptrace_scope`` is 1 (Ubuntu's default).

Single copy reads and writes a peer rank's memory with process_vm_readv/writev,
which the kernel allows where ptrace would be allowed. Under Yama's scope 1 a
process may only trace its descendants, so sibling ranks (the workers of one
torchrun, srun or mpirun) are refused and every collective above 64 KiB falls
back to two copies through the segment.

A process may declare one other process as its ptracer
(``prctl(PR_SET_PTRACER, pid)``): that process and its descendants may then
attach. fastcomm declares the ranks' nearest common ancestor on the host,
their launcher, so the ranks of one job read each other and nothing outside
the launcher's tree gains anything. Open MPI and Charm++ declare
``PR_SET_PTRACER_ANY`` instead, which opens the rank to every process of the
user; fastcomm does not.

Only ancestors with the ranks' own SID (setsid(2)) count (``ancestry``): ranks started
apart (two logins, two terminal panes) meet only in sshd, tmux or the host's
init, and declaring those would be ``ANY`` under another name, so nothing is
declared. The kernel keeps one ptracer per process, so a later group never
narrows what an earlier one declared (``_declare``). Inside a container's pid
namespace, pid 1 is the container's own first process and may be declared. Scopes 0 (no restriction), 2 and 3
(admin only, no attach) need or allow nothing, so only scope 1 does anything
here, and the whole exchange is skipped elsewhere.

Whether single copy then works is still decided by the engine's probe on
every rank, compared across ranks (csrc/algorithms/shm_single_copy.cpp): a
declaration that fails only means two copies, never a wrong result.
The declaration replaces any ptracer the process itself declared before.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os

import torch.distributed as dist

PR_SET_PTRACER = 0x59616D61  # "Yama"
YAMA_SCOPE_PATH = "/proc/sys/kernel/yama/ptrace_scope"
YAMA_RELATIONAL = 1
# /proc/self/ns/pid's inode in the initial pid namespace (PROC_PID_INIT_INO).
INITIAL_PID_NAMESPACE_INODE = 0xEFFFFFFC


@dataclasses.dataclass(frozen=True)
class Declaration:
    """What this process declared, for diagnostics and tests."""

    scope: int | None  # Yama's ptrace_scope (None: no Yama)
    chosen: int | None  # the pid this rank chose to declare (None: none)
    declared: bool  # whether the kernel took the declaration
    reason: str  # why, or why not


# The last declaration of this process (None: no group asked yet).
last: Declaration | None = None
# The pid the kernel holds as this process's ptracer (None: none declared here).
_declared: int | None = None


def yama_scope(path: str | None = None) -> int | None:
    """Yama's ptrace_scope (read from `path`, default YAMA_SCOPE_PATH), or None
    where the kernel has no Yama."""
    try:
        with open(path or YAMA_SCOPE_PATH) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def ancestry(pid: int | str = "self", proc: str = "/proc") -> list[int]:
    """`pid`, its parent, its parent's parent, ... while they stay in `pid`'s
    SID (setsid(2)), read from /proc/<pid>/stat. The SID bounds what may be
    declared: ranks started from two logins or two terminal panes meet only in
    sshd, tmux or the user's systemd, whose descendants are nearly every
    process of the user; one launcher's ranks share its SID."""
    chain: list[int] = []
    current, sid = str(pid), None
    for _ in range(4096):  # bounded: pid chains are far shorter
        try:
            with open(os.path.join(proc, current, "stat")) as f:
                stat = f.read()
        except OSError:
            break
        # "pid (comm) state ppid pgrp sid ...": comm may hold spaces and parentheses.
        own, after = stat.split(" ", 1)[0], stat.rsplit(")", 1)[1].split()
        if sid is not None and int(after[3]) != sid:
            break
        sid = int(after[3])
        chain.append(int(own))
        parent = int(after[1])
        if parent <= 0:
            break
        current = str(parent)
    return chain


def nearest_common_ancestor(chains: list[list[int]]) -> int | None:
    """The first pid of the first chain that every chain holds (each chain runs
    from a process up to its namespace's first process), or None."""
    if not chains:
        return None
    others = [set(chain) for chain in chains[1:]]
    return next((pid for pid in chains[0] if all(pid in other for other in others)), None)


def in_initial_pid_namespace(proc: str = "/proc") -> bool:
    try:
        return os.stat(os.path.join(proc, "self", "ns", "pid")).st_ino == INITIAL_PID_NAMESPACE_INODE
    except OSError:
        return True  # unknown: treat pid 1 as the host's init


def choose_ptracer(chains: list[list[int]], initial_namespace: bool) -> tuple[int | None, str]:
    """The pid to declare for ranks with these ancestries, and why."""
    ancestor = nearest_common_ancestor(chains)
    if ancestor is None:
        return None, "the ranks share no ancestor visible here"
    if ancestor == 1 and initial_namespace:
        return (
            None,
            "the ranks' only common ancestor is the host's init (started apart): declaring it would open them to every process",
        )
    return ancestor, f"the ranks' launcher (pid {ancestor})"


def _prctl_set_ptracer(pid: int) -> int:
    """0, or the errno of prctl(PR_SET_PTRACER, pid)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PTRACER, ctypes.c_ulong(pid), 0, 0, 0) == 0:
        return 0
    return ctypes.get_errno()


def declare_for_host(store: dist.Store, prefix: str, rank: int, local: list[int], get_all) -> Declaration:
    """Collective over the host's ranks `local` (this rank among them) where
    Yama's scope is 1: each publishes its ancestry under `prefix`, then every
    rank declares their nearest common ancestor. `get_all(store, prefix, ranks)`
    waits for the others' values within the set-up's deadline. Every rank of a
    host reads the same scope (one kernel), so all or none take part."""
    global last
    scope = yama_scope()
    if scope != YAMA_RELATIONAL or len(local) < 2:
        needless = "no Yama" if scope is None else f"ptrace_scope {scope} needs no declaration or allows none"
        last = Declaration(scope, None, False, needless if len(local) > 1 else "alone on its host")
        return last
    own = ancestry()
    if not own or own[0] != os.getpid():
        own = []  # /proc of another pid namespace: its pids mean nothing to prctl; the ranks then share no ancestor
    store.set(f"{prefix}{rank}", " ".join(map(str, own)))
    chains = [[int(p) for p in value.split()] for value in get_all(store, prefix, local)]
    ptracer, why = choose_ptracer(chains, in_initial_pid_namespace())
    last = _declare(scope, ptracer, why, own)
    return last


def _declare(scope: int, ptracer: int | None, why: str, own: list[int]) -> Declaration:
    """Declares `ptracer` unless the one declared for an earlier group is above
    it in this process's ancestry `own`: the kernel keeps one ptracer per
    process, so a narrower one would cut off the earlier group's peers."""
    global _declared
    if ptracer is None:
        return Declaration(scope, None, False, why)
    if _declared is not None and _declared in own and ptracer in own and own.index(_declared) >= own.index(ptracer):
        return Declaration(
            scope, _declared, True, f"{why}; kept pid {_declared}, declared for an earlier group, which holds it"
        )
    error = _prctl_set_ptracer(ptracer)
    if error:
        return Declaration(scope, ptracer, False, f"prctl(PR_SET_PTRACER, {ptracer}) failed: {os.strerror(error)}")
    _declared = ptracer
    return Declaration(scope, ptracer, True, why)
