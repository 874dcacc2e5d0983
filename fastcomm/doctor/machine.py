"""CPUs, NUMA nodes, /dev/shm and huge pages.

Every reader takes `root` (default "/"), the directory that holds proc/ and
sys/, so tests can hand it a made-up tree.
"""

from __future__ import annotations

import os
import re

from fastcomm.doctor.report import Item

SECTION = "machine"

# Below this /dev/shm is small: Docker's default is 64 MiB. torch's shared
# tensors (DataLoader workers, torch.multiprocessing) live there.
SMALL_DEV_SHM_BYTES = 1 << 30


def _read(root: str, path: str) -> str | None:
    try:
        with open(os.path.join(root, path.lstrip("/"))) as f:
            return f.read()
    except OSError:
        return None


def cpu_list(text: str) -> list[int]:
    """A kernel CPU list ("0-3,8,10-11") as CPU numbers."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        cpus += range(int(first), int(last or first) + 1)
    return cpus


def numa_nodes(root: str = "/") -> dict[int, list[int]]:
    """NUMA node -> its CPUs, from sys/devices/system/node/node*/cpulist ({} where absent)."""
    base = os.path.join(root, "sys/devices/system/node")
    try:
        names = os.listdir(base)
    except OSError:
        return {}
    nodes = {}
    for name in names:
        match = re.fullmatch(r"node(\d+)", name)
        if match:
            text = _read(root, f"sys/devices/system/node/{name}/cpulist")
            nodes[int(match.group(1))] = cpu_list(text) if text else []
    return dict(sorted(nodes.items()))


def cpu_items(root: str = "/") -> list[Item]:
    count = os.cpu_count() or 0
    affinity = sorted(os.sched_getaffinity(0))
    out = [
        Item(
            SECTION,
            "CPUs",
            "ok" if len(affinity) == count else "info",
            f"{count} online, this process may use {len(affinity)}: {_ranges(affinity)}",
            note="" if len(affinity) == count else "a launcher, taskset or cgroup narrowed this process's CPU mask",
            data={"count": count, "affinity": affinity},
        )
    ]
    nodes = numa_nodes(root)
    spanned = sorted(node for node, cpus in nodes.items() if set(cpus) & set(affinity))
    value = f"{len(nodes)} node(s)" + "".join(f"; node{n}: CPUs {_ranges(c)}" for n, c in nodes.items())
    if len(spanned) > 1:
        out.append(
            Item(
                SECTION,
                "NUMA",
                "info",
                value,
                note=f"this process's CPUs span nodes {spanned}: a host's ranks share one segment across nodes",
                fix="bind each job to one node (numactl --cpunodebind, taskset) for the steadiest shared-memory times",
                data={"nodes": nodes, "spanned": spanned},
            )
        )
    else:
        out.append(
            Item(
                SECTION,
                "NUMA",
                "ok" if nodes else "info",
                value if nodes else "no NUMA information",
                data={"nodes": nodes, "spanned": spanned},
            )
        )
    return out


def _ranges(cpus: list[int]) -> str:
    """CPU numbers in the kernel's list form (0-3,8)."""
    parts, start = [], None
    for i, cpu in enumerate(cpus):
        if start is None:
            start = cpu
        if i + 1 == len(cpus) or cpus[i + 1] != cpu + 1:
            parts.append(str(start) if start == cpu else f"{start}-{cpu}")
            start = None
    return ",".join(parts) or "none"


def dev_shm(path: str = "/dev/shm") -> tuple[int, int] | None:
    """(size, free) of the file system at `path` in bytes (free: what an unprivileged process may use), or None."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


def dev_shm_item(path: str = "/dev/shm") -> Item:
    found = dev_shm(path)
    note = (
        "fastcomm's segments are anonymous memory files, not in /dev/shm; ranks that see another /dev/shm "
        "mount (another container) count as another host"
    )
    if found is None:
        return Item(
            SECTION,
            "/dev/shm",
            "warn",
            "absent",
            why="torch's shared tensors (DataLoader workers) need it",
            fix="mount a tmpfs there",
            data={"size": None, "free": None},
        )
    size, free = found
    data = {"size": size, "free": free}
    value = f"{_mib(size)} MiB, {_mib(free)} MiB free"
    if size < SMALL_DEV_SHM_BYTES:
        return Item(
            SECTION,
            "/dev/shm",
            "warn",
            value,
            why="small (Docker's default is 64 MiB): DataLoader workers and torch.multiprocessing tensors "
            "fail with 'No space left on device' or a bus error",
            fix="docker run --shm-size=8g (or --ipc=host)",
            note=note,
            data=data,
        )
    return Item(SECTION, "/dev/shm", "ok", value, note=note, data=data)


def _mib(n: int) -> int:
    return n >> 20


def selected(text: str | None) -> str | None:
    """The bracketed choice of a sysfs setting ("always [madvise] never" -> "madvise")."""
    match = re.search(r"\[(\w+)\]", text or "")
    return match.group(1) if match else None


def meminfo(root: str = "/") -> dict[str, int]:
    """proc/meminfo's fields (kB values as given; HugePages_* counts)."""
    fields = {}
    for line in (_read(root, "proc/meminfo") or "").splitlines():
        name, _, rest = line.partition(":")
        value = rest.split()
        if value and value[0].isdigit():
            fields[name.strip()] = int(value[0])
    return fields


def kernel_release(root: str = "/") -> tuple[int, int] | None:
    text = _read(root, "proc/sys/kernel/osrelease")
    match = re.match(r"(\d+)\.(\d+)", text or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def huge_page_items(root: str = "/") -> list[Item]:
    """Transparent huge pages, which fastcomm uses (madvise MADV_COLLAPSE on a
    rank's reused large tensors: transport/shm/huge_pages.h), and explicit
    (hugetlbfs) ones, which it does not."""
    thp = selected(_read(root, "sys/kernel/mm/transparent_hugepage/enabled"))
    release = kernel_release(root)
    shown = ".".join(map(str, release)) if release else "unknown"
    data = {"transparent": thp, "kernel": shown}
    if thp is None:
        out = [
            Item(
                SECTION,
                "transparent huge pages",
                "off",
                "not in this kernel",
                why="MADV_COLLAPSE needs transparent huge pages: single-copy peers pin every 4 KiB page",
                fix="a kernel with CONFIG_TRANSPARENT_HUGEPAGE (6.1 or later)",
                data=data,
            )
        ]
    elif release is not None and release < (6, 1):
        out = [
            Item(
                SECTION,
                "transparent huge pages",
                "off",
                f"{thp}, kernel {shown}",
                why="MADV_COLLAPSE came in Linux 6.1: reused large tensors stay in 4 KiB pages",
                fix="a 6.1 or later kernel (single copy works without it, a little slower from 4 MiB)",
                data=data,
            )
        ]
    else:
        out = [
            Item(
                SECTION,
                "transparent huge pages",
                "ok",
                f"{thp}, kernel {shown}",
                note="fastcomm moves reused tensors of FASTCOMM_SHM_HUGE_PAGES_MIN_BYTES or more into huge pages "
                "(MADV_COLLAPSE) before single-copy peers read them; the algorithm run (--world-size) "
                "shows whether the kernel took the moves",
                data=data,
            )
        ]
    info = meminfo(root)
    total = info.get("HugePages_Total", 0)
    out.append(
        Item(
            SECTION,
            "explicit huge pages",
            "info",
            f"{total} reserved, {info.get('HugePages_Free', 0)} free, {info.get('Hugepagesize', 0)} kB each",
            note="fastcomm does not use these (hugetlbfs) pages",
            data={"total": total, "free": info.get("HugePages_Free", 0), "size_kb": info.get("Hugepagesize", 0)},
        )
    )
    return out


def items(root: str = "/", dev_shm_path: str = "/dev/shm") -> list[Item]:
    return cpu_items(root) + [dev_shm_item(dev_shm_path)] + huge_page_items(root)
