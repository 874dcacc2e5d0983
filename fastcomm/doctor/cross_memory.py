"""Single copy: may one rank read and write another's memory here
(process_vm_readv/writev, Linux cross-memory attach)?

The kernel allows it where ptrace would be allowed: same user and a dumpable
target, or CAP_SYS_PTRACE; Yama's ptrace_scope and seccomp may forbid it
(csrc/transport/shm/cross_memory.h). Ranks are siblings (children of one
launcher), so the probe starts two sibling processes and has each read and
write the other, first as they are, then (Yama scope 1 only) after each
declares the ptracer fastcomm's set-up would declare for them
(fastcomm/_ptracer.py). The readings (Yama, seccomp, capabilities) explain a
refusal; the probe decides.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import select
import subprocess
import sys
import time

from fastcomm import _ptracer
from fastcomm.doctor.report import Item

SECTION = "single copy"
CAP_SYS_PTRACE = 19
CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_cross_memory_child.py")
PROBE_TIMEOUT_S = 10.0


@dataclasses.dataclass(frozen=True)
class Readings:
    yama_scope: int | None  # None: the kernel has no Yama
    seccomp: int | None  # 0 off, 1 strict, 2 filter; None: not reported
    cap_sys_ptrace: bool


def _status_fields(root: str) -> dict[str, str]:
    fields = {}
    try:
        with open(os.path.join(root, "proc/self/status")) as f:
            for line in f:
                name, _, value = line.partition(":")
                fields[name] = value.strip()
    except OSError:
        pass
    return fields


def read(root: str = "/") -> Readings:
    """Yama's scope, this process's seccomp mode and whether CAP_SYS_PTRACE is effective, under `root`."""
    fields = _status_fields(root)
    seccomp = fields.get("Seccomp")
    try:
        cap_eff = int(fields.get("CapEff", "0"), 16)
    except ValueError:
        cap_eff = 0
    return Readings(
        yama_scope=_ptracer.yama_scope(os.path.join(root, _ptracer.YAMA_SCOPE_PATH.lstrip("/"))),
        seccomp=int(seccomp) if seccomp and seccomp.isdigit() else None,
        cap_sys_ptrace=bool(cap_eff >> CAP_SYS_PTRACE & 1),
    )


@dataclasses.dataclass(frozen=True)
class Probe:
    """One probe of two siblings: each read the other's buffer, then wrote it back."""

    error: int  # 0: every read and write done (errno of the first that failed otherwise)
    call: str  # the call that failed ("" when none did)
    declared: int | None = None  # the ptracer both declared (None: none)

    @property
    def ok(self) -> bool:
        return self.error == 0 and not self.call

    def describe(self) -> str:
        if self.ok:
            return "read and write allowed"
        if self.error == 0:
            return f"{self.call}"
        return f"{self.call}: {errno.errorcode.get(self.error, str(self.error))} ({os.strerror(self.error)})"


class _Child:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, CHILD, str(_ptracer.PR_SET_PTRACER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=0,
            close_fds=True,
        )

    def line(self, deadline: float) -> list[str]:
        fd = self.proc.stdout
        ready, _, _ = select.select([fd], [], [], max(deadline - time.monotonic(), 0))
        if not ready:
            raise TimeoutError("the probe's child did not answer")
        text = fd.readline().decode()
        if not text:
            raise EOFError("the probe's child exited early")
        return text.split()

    def send(self, *words) -> None:
        self.proc.stdin.write((" ".join(map(str, words)) + "\n").encode())

    def close(self) -> None:
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def probe(declare_ptracer: bool) -> Probe:
    """Starts two sibling processes; each reads the other's buffer and writes it
    back. With `declare_ptracer`, each first declares the ptracer fastcomm's
    set-up would choose for them (their nearest common ancestor: this process)."""
    deadline = time.monotonic() + PROBE_TIMEOUT_S
    children = [_Child(), _Child()]
    try:
        buffers = [child.line(deadline) for child in children]
        ptracer = -1
        if declare_ptracer:
            chains = [_ptracer.ancestry(child.proc.pid) for child in children]
            chosen, _ = _ptracer.choose_ptracer(chains, _ptracer.in_initial_pid_namespace())
            ptracer = chosen if chosen is not None else -1
        for i, child in enumerate(children):
            peer = children[1 - i]
            child.send(ptracer, peer.proc.pid, *buffers[1 - i])
        declared = [child.line(deadline) for child in children]
        for words in declared:
            if int(words[1]) != 0:
                return Probe(int(words[1]), f"prctl(PR_SET_PTRACER, {ptracer})", ptracer)
        for child in children:
            child.send("go")
        results = [child.line(deadline) for child in children]
    finally:
        for child in children:
            child.close()
    for words in results:
        read_error, write_error, matched = (int(x) for x in words[1:4])
        if read_error:
            return Probe(read_error, "process_vm_readv", ptracer if ptracer >= 0 else None)
        if write_error:
            return Probe(write_error, "process_vm_writev", ptracer if ptracer >= 0 else None)
        if not matched:
            return Probe(0, "process_vm_readv returned other bytes than the peer holds", None)
    return Probe(0, "", ptracer if ptracer >= 0 else None)


def explain(readings: Readings, error: int | None) -> tuple[str, str]:
    """(why, fix) of a refusal with `error` (None: not probed), from the readings."""
    scope, seccomp = readings.yama_scope, readings.seccomp
    if error == errno.ENOSYS:
        return (
            "the kernel has no cross-memory attach (CONFIG_CROSS_MEMORY_ATTACH), or a seccomp filter answers ENOSYS",
            "a kernel with CONFIG_CROSS_MEMORY_ATTACH=y; a seccomp profile that allows process_vm_readv/writev",
        )
    if scope == 3:
        return ("Yama ptrace_scope=3: no process may attach to another (fixed until reboot)", "none until reboot")
    if scope == 2 and not readings.cap_sys_ptrace:
        return (
            "Yama ptrace_scope=2: only processes with CAP_SYS_PTRACE may attach",
            "sysctl kernel.yama.ptrace_scope=1 (fastcomm then declares the ranks' launcher), or give the ranks "
            "CAP_SYS_PTRACE (docker run --cap-add SYS_PTRACE)",
        )
    if scope == 1:
        return (
            "Yama ptrace_scope=1: a process may read only its descendants, or a process that declared it as "
            "ptracer; sibling ranks are neither",
            "start a host's ranks from one launcher (torchrun, mpirun, mp.spawn): fastcomm declares it; or "
            "sysctl kernel.yama.ptrace_scope=0",
        )
    if seccomp == 2:
        return (
            "a seccomp filter is active (Seccomp: 2) and may forbid process_vm_readv/writev (some container "
            "profiles allow them only with CAP_SYS_PTRACE)",
            "docker run --cap-add SYS_PTRACE, or a seccomp profile that allows process_vm_readv/writev",
        )
    if error == errno.ESRCH:
        return "the peer's pid is not visible here (another pid namespace)", "run a host's ranks in one pid namespace"
    if error == errno.EPERM:
        return (
            "the kernel refused: the target is not dumpable (prctl PR_SET_DUMPABLE 0, a setuid program) or "
            "belongs to another user",
            "run every rank as one user, dumpable",
        )
    if error:
        return os.strerror(error), ""
    return "", ""


NOTE = (
    "fastcomm asks the same at a group's first single-copy op (every rank reads and writes every peer) and, "
    "where refused, copies through the shared-memory segment instead: same results, two copies"
)


def item(readings: Readings, plain: Probe | None, declared: Probe | None, probe_error: str = "") -> Item:
    """The verdict. `plain`: the siblings' probe as they are; `declared`: after
    declaring a ptracer (run where Yama's scope is 1 and `plain` was refused);
    None: not run (then the readings alone predict; `probe_error` says why)."""
    name = "cross-memory attach"
    data = {
        "yama_scope": readings.yama_scope,
        "seccomp": readings.seccomp,
        "cap_sys_ptrace": readings.cap_sys_ptrace,
        "plain": dataclasses.asdict(plain) if plain else None,
        "declared": dataclasses.asdict(declared) if declared else None,
    }
    if plain is not None and plain.ok:
        return Item(SECTION, name, "ok", "sibling processes may read and write each other", note=NOTE, data=data)
    if declared is not None and declared.ok:
        return Item(
            SECTION,
            name,
            "ok",
            f"after declaring their launcher as ptracer (pid {declared.declared}), as fastcomm's set-up does",
            note="Yama ptrace_scope=1 refuses siblings as they are; ranks started apart (two shells, "
            "no common launcher but init) stay refused. " + NOTE,
            data=data,
        )
    if plain is None:
        why, fix = explain(readings, None)
        status = "off" if why else "ok"
        value = "predicted from the readings (not probed" + (f": {probe_error})" if probe_error else ")")
        return Item(SECTION, name, status, value, why=why, fix=fix, note=NOTE, data=data)
    why, fix = explain(readings, plain.error)
    value = f"refused ({plain.describe()})"
    if declared is not None:
        value += f"; after declaring a ptracer too ({declared.describe()})"
    return Item(SECTION, name, "off", value, why=why or plain.describe(), fix=fix, note=NOTE, data=data)


def readings_item(readings: Readings) -> Item:
    scope = "no Yama" if readings.yama_scope is None else f"Yama ptrace_scope={readings.yama_scope}"
    seccomp = {None: "seccomp unknown", 0: "no seccomp", 1: "seccomp strict", 2: "seccomp filter"}.get(
        readings.seccomp, f"seccomp {readings.seccomp}"
    )
    caps = "CAP_SYS_PTRACE" if readings.cap_sys_ptrace else "no CAP_SYS_PTRACE"
    return Item(SECTION, "kernel settings", "info", f"{scope}, {seccomp}, {caps}", data=dataclasses.asdict(readings))


def items(root: str = "/", run_probe: bool = True) -> list[Item]:
    readings = read(root)
    plain = declared = None
    probe_error = "" if run_probe else "--no-probe"
    if run_probe:
        try:
            plain = probe(declare_ptracer=False)
            if not plain.ok and readings.yama_scope == _ptracer.YAMA_RELATIONAL:
                declared = probe(declare_ptracer=True)
        except (OSError, TimeoutError, EOFError, ValueError, IndexError) as error:
            probe_error = f"{type(error).__name__}: {error}"
    return [readings_item(readings), item(readings, plain, declared, probe_error)]
