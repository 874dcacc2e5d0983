"""What this process's memory mappings hold, from /proc/self/smaps (checks of
the huge-page moves: transport/shm/huge_pages.h)."""
from __future__ import annotations

import mmap

import torch


def anon_huge_bytes_around(address: int) -> int:
    """AnonHugePages of the mapping of this process that holds `address`, in bytes."""
    inside = False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                start, end = (int(x, 16) for x in head.split("-"))
                inside = start <= address < end
            elif inside and head == "AnonHugePages:":
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no mapping holds {address:#x}")


def float_tensor_in_own_mapping(numel: int, offset: int) -> tuple[mmap.mmap, torch.Tensor, int]:
    """A float32 tensor `offset` bytes into a private anonymous mapping of its
    own (as the allocator's large blocks), so the mapping's huge pages are what
    an op moved: heap memory may already hold some a freed tensor left. Returns
    the mapping (close it after the tensor is gone), the tensor, and how many
    whole 2 MiB blocks lie inside the tensor."""
    memory = mmap.mmap(-1, numel * 4 + offset + (4 << 20), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    t = torch.frombuffer(memory, dtype=torch.float32, offset=offset, count=numel)
    address = t.data_ptr()
    blocks = ((address + t.nbytes) >> 21) - ((address + (2 << 20) - 1) >> 21)
    return memory, t, blocks
