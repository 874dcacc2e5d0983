"""The shared-memory segment (csrc/transport/shm/segment.cpp): an anonymous
memory file that never has a name in /dev/shm (so a crash at any moment leaves
nothing behind), reachable only through the creator's /proc/<pid>/fd path,
validated on attach."""

import mmap
import os
import signal
import struct
import subprocess
import sys

import pytest

from fastcomm import _C


def _fastcomm_files_in_dev_shm() -> list[str]:
    return sorted(name for name in os.listdir("/dev/shm") if "fastcomm" in name)


@pytest.fixture
def created():
    return _C.ShmEngine.create(2, 8192, [0, 1], spin=False, check_pids=True)


def _attach(engine, **changes):
    args = dict(
        name=engine.segment_name,
        nonce=engine.nonce,
        local_rank=1,
        slot_bytes=8192,
        group_ranks=[0, 1],
        spin=False,
        check_pids=True,
    )
    args.update(changes)
    return _C.ShmEngine.attach(**args)


def test_created_segment_is_anonymous_and_private(created):
    before = _fastcomm_files_in_dev_shm()
    other = _C.ShmEngine.create(2, 8192, [0, 1], spin=False, check_pids=True)
    for engine in (created, other):
        prefix = f"/proc/{os.getpid()}/fd/"
        assert engine.segment_name.startswith(prefix), engine.segment_name
        target = os.readlink(engine.segment_name)
        assert target.startswith("/memfd:fastcomm-segment"), target  # no file anywhere
        st = os.stat(engine.segment_name)
        assert st.st_uid == os.geteuid() and st.st_size >= 2 * 2 * 8192
    assert created.segment_name != other.segment_name and created.nonce != other.nonce
    assert (created.local_rank, created.local_size, created.slot_bytes, created.rounds) == (0, 2, 8192, 0)
    assert _fastcomm_files_in_dev_shm() == before


def test_attach_validates_and_the_path_dies_with_the_creator():
    created = _C.ShmEngine.create(2, 8192, [0, 1], spin=False, check_pids=True)
    peer = _attach(created)
    assert (peer.local_rank, peer.local_size, peer.nonce) == (1, 2, created.nonce)
    with pytest.raises(RuntimeError, match="is not the one the creator published"):
        _attach(created, nonce=created.nonce ^ 1)
    with pytest.raises(RuntimeError, match="bytes, expected"):
        _attach(created, slot_bytes=16384)
    with pytest.raises(RuntimeError, match="bytes, expected"):
        _attach(created, group_ranks=[0, 1, 2])
    name, nonce = created.segment_name, created.nonce
    del created  # the creator's descriptor closes with its segment; the peer's mapping stays valid
    assert peer.nonce == nonce
    with pytest.raises(RuntimeError, match="cannot open segment .*No such file"):
        _C.ShmEngine.attach(
            name=name, nonce=nonce, local_rank=1, slot_bytes=8192, group_ranks=[0, 1], spin=False, check_pids=True
        )


@pytest.mark.parametrize(
    "field, offset, fmt, message",
    [
        ("magic", 0, "<Q", "bad magic number"),
        ("version", 8, "<I", r"has layout version 99, this build uses \d+ "),
    ],
)
def test_attach_rejects_a_corrupt_header(created, field, offset, fmt, message):
    with open(created.segment_name, "r+b") as f, mmap.mmap(f.fileno(), 4096) as header:
        assert struct.unpack_from(fmt, header, offset)[0] != 99  # the corruption changes the field
        header[offset : offset + struct.calcsize(fmt)] = struct.pack(fmt, 99)
    with pytest.raises(RuntimeError, match=message):
        _attach(created)


_CREATE_AND_DIE = """
import os, signal, sys
from fastcomm import _C
engine = _C.ShmEngine.create(2, 1 << 20, [0, 1], spin=False, check_pids=True)
print(engine.segment_name, engine.nonce, flush=True)
sys.stdin.readline()  # until the test has looked
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_killed_creator_leaves_nothing():
    """SIGKILL right after creating (the worst moment for a named segment): no
    file anywhere, and the segment can no longer be reached."""
    before = _fastcomm_files_in_dev_shm()
    proc = subprocess.Popen(
        [sys.executable, "-c", _CREATE_AND_DIE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd="/"
    )
    try:
        name, nonce = proc.stdout.readline().split()
        assert os.readlink(name).startswith("/memfd:fastcomm-segment")
        assert _fastcomm_files_in_dev_shm() == before
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert proc.wait(timeout=60) == -signal.SIGKILL
    finally:
        proc.kill()
    assert not os.path.exists(name)
    assert _fastcomm_files_in_dev_shm() == before
    with pytest.raises(RuntimeError, match="cannot open segment"):
        _C.ShmEngine.attach(
            name=name,
            nonce=int(nonce),
            local_rank=1,
            slot_bytes=1 << 20,
            group_ranks=[0, 1],
            spin=False,
            check_pids=True,
        )


def test_bad_sizes_raise():
    with pytest.raises(RuntimeError, match="local_size must be >= 1"):
        _C.ShmEngine.create(0, 8192, [], spin=False, check_pids=True)
