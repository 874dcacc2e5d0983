"""One side of the doctor's cross-memory attach probe (fastcomm/doctor/cross_memory.py).

Run by path, as a plain script: it imports nothing of fastcomm or torch, so it
starts in milliseconds. argv[1] is the prctl option that declares a ptracer
(fastcomm/_ptracer.py's PR_SET_PTRACER). One line each way on stdin/stdout:

    child  -> parent  "<address> <length>"      of a buffer that holds PATTERN
    parent -> child   "<ptracer> <peer pid> <peer address> <length>"   (ptracer -1: declare none)
    child  -> parent  "declared <errno>"
    parent -> child   "go"                      (every side has declared; end of input: exit)
    child  -> parent  "done <read errno> <write errno> <matched>"   (errno 0: done; matched 1: read PATTERN)
    parent -> child   anything, or end of input: exit (the peer may be reading us until then)
"""

import ctypes
import sys

PATTERN = b"fastcomm cross-memory probe\n" * 4


class IoVec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


def _call(function, pid: int, local: IoVec, remote: IoVec, length: int) -> int:
    """0 if all `length` bytes moved, else the errno (EIO for a short transfer)."""
    ctypes.set_errno(0)
    moved = function(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
    if moved == length:
        return 0
    return ctypes.get_errno() or 5  # EIO


def main() -> None:
    set_ptracer = int(sys.argv[1])
    libc = ctypes.CDLL(None, use_errno=True)
    for name in ("process_vm_readv", "process_vm_writev"):
        function = getattr(libc, name)
        function.restype = ctypes.c_ssize_t
        function.argtypes = [
            ctypes.c_int,
            ctypes.c_void_p,
            ctypes.c_ulong,
            ctypes.c_void_p,
            ctypes.c_ulong,
            ctypes.c_ulong,
        ]
    mine = ctypes.create_string_buffer(PATTERN, len(PATTERN))
    print(ctypes.addressof(mine), len(PATTERN), flush=True)
    ptracer, peer, address, length = (int(x) for x in sys.stdin.readline().split())
    error = 0
    if ptracer >= 0:
        ctypes.set_errno(0)
        error = 0 if libc.prctl(set_ptracer, ctypes.c_ulong(ptracer), 0, 0, 0) == 0 else ctypes.get_errno()
    print("declared", error, flush=True)
    if not sys.stdin.readline():  # end of input instead of "go": the parent gave up
        return
    into = ctypes.create_string_buffer(length)
    remote = IoVec(address, length)
    read_error = _call(libc.process_vm_readv, peer, IoVec(ctypes.addressof(into), length), remote, length)
    matched = int(read_error == 0 and into.raw == PATTERN)
    # Writes back what the peer holds (PATTERN), so a refused read still tries the write.
    source = ctypes.create_string_buffer(PATTERN, length)
    write_error = _call(libc.process_vm_writev, peer, IoVec(ctypes.addressof(source), length), remote, length)
    print("done", read_error, write_error, matched, flush=True)
    sys.stdin.readline()


if __name__ == "__main__":
    main()
