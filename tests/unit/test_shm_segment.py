"""The shared-memory segment (csrc/transport/shm/segment.cpp): private,
unguessable, validated on attach, and gone from /dev/shm once unlinked."""
import mmap
import os
import struct

import pytest

from fastcomm import _C


def _path(engine) -> str:
    return "/dev/shm/" + engine.segment_name.lstrip("/")


@pytest.fixture
def created():
    old_umask = os.umask(0)  # the segment must be 0600 whatever the umask
    try:
        engine = _C.ShmEngine.create(2, 8192, [0, 1], spin=False, check_pids=True)
    finally:
        os.umask(old_umask)
    yield engine
    _C.shm_unlink(engine.segment_name)


def _attach(engine, **changes):
    args = dict(name=engine.segment_name, nonce=engine.nonce, local_rank=1, slot_bytes=8192, group_ranks=[0, 1],
                spin=False, check_pids=True)
    args.update(changes)
    return _C.ShmEngine.attach(**args)


def test_created_segment_is_private_and_unguessable(created):
    other = _C.ShmEngine.create(2, 8192, [0, 1], spin=False, check_pids=True)
    try:
        st = os.stat(_path(created))
        assert st.st_mode & 0o777 == 0o600
        assert st.st_uid == os.geteuid()
        for engine in (created, other):
            name = engine.segment_name
            assert name.startswith("/fastcomm-") and len(name) == len("/fastcomm-") + 32
            int(name[len("/fastcomm-"):], 16)
        assert created.segment_name != other.segment_name and created.nonce != other.nonce
        assert (created.local_rank, created.local_size, created.slot_bytes, created.rounds) == (0, 2, 8192, 0)
    finally:
        _C.shm_unlink(other.segment_name)


def test_attach_validates_and_unlink_removes_the_name(created):
    peer = _attach(created)
    assert (peer.local_rank, peer.local_size, peer.nonce) == (1, 2, created.nonce)
    with pytest.raises(RuntimeError, match="is not the one the creator published"):
        _attach(created, nonce=created.nonce ^ 1)
    with pytest.raises(RuntimeError, match="bytes, expected"):
        _attach(created, slot_bytes=16384)
    with pytest.raises(RuntimeError, match="bytes, expected"):
        _attach(created, group_ranks=[0, 1, 2])
    _C.shm_unlink(created.segment_name)
    assert not os.path.exists(_path(created))
    _C.shm_unlink(created.segment_name)  # idempotent
    with pytest.raises(RuntimeError, match="cannot open segment .*No such file"):
        _attach(created)


@pytest.mark.parametrize("field, offset, fmt, message", [
    ("magic", 0, "<Q", "bad magic number"),
    ("version", 8, "<I", "has layout version 99, this build uses 1"),
])
def test_attach_rejects_a_corrupt_header(created, field, offset, fmt, message):
    with open(_path(created), "r+b") as f, mmap.mmap(f.fileno(), 4096) as header:
        header[offset:offset + struct.calcsize(fmt)] = struct.pack(fmt, 99)
    with pytest.raises(RuntimeError, match=message):
        _attach(created)


def test_bad_sizes_raise():
    with pytest.raises(RuntimeError, match="local_size must be >= 1"):
        _C.ShmEngine.create(0, 8192, [], spin=False, check_pids=True)
