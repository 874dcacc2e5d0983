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


def assert_moved_on_second_use_only(before: dict, huge: dict, blocks: int) -> None:
    """The huge-page move's contract for one reused buffer: `huge` maps "first",
    "second", "third" use to (fastcomm._C.huge_page_counts(), the buffer's
    mapping's huge bytes) right after it; `before` the counts before the first.
    Nothing moves on the first use; on the second exactly one buffer is moved
    or refused, and a move puts exactly the buffer's `blocks` whole 2 MiB blocks
    into huge pages; the third changes nothing."""
    assert huge["first"] == (before, 0), (before, huge)
    after, huge_bytes = huge["second"]
    moved_or_refused = lambda c: c["collapsed_buffers"] + c["refused_buffers"]  # noqa: E731
    assert moved_or_refused(after) == moved_or_refused(before) + 1, (before, after)
    if after["refused_buffers"] == before["refused_buffers"]:  # the kernel moved it (Linux 6.1 and later)
        assert after["collapsed_bytes"] - before["collapsed_bytes"] == blocks << 21, (blocks, before, after)
        assert huge_bytes == blocks << 21, (blocks, huge_bytes)
    assert huge["third"] == huge["second"], huge
