"""Faults of the shared-memory engine, one scenario per run:
`python shm_faults.py SCENARIO STORE_PATH WORLD_SIZE`.

dead_peer:  the last rank kills itself (SIGKILL) instead of joining an
            all_reduce; every live rank must raise DistBackendError naming it,
            well within the group timeout (10 s).
silent_peer: the last rank sleeps instead of joining; live ranks must raise
            a timeout error within the group timeout (3 s).
left_peer:  the last rank destroys its group instead of joining; live ranks
            must raise an error naming it at once, not after the group
            timeout (10 s).
mismatch:   ranks pass different sizes / ops / split sizes; every rank must raise
            the same clear error (through wait(), the Work's future, and an
            AVG's divide step), and the group must still work afterwards.
mismatch_hosts: 4 ranks as 2 hosts of 2 (FASTCOMM_RANKS_PER_HOST=2); the
            hosts pass different sizes, then different collectives; every rank
            must raise an error saying the hosts disagree, within seconds.
dead_other_host: 4 ranks as 2 hosts of 2; rank 3 (host 1, not its leader)
            kills itself instead of joining an all_reduce; every live rank,
            host 0's included, must name it within the group timeout (5 s)
            plus a second.
dead_peer_single_copy: 2 ranks loop over all_reduce of 16 MiB (read from the
            peer in one copy, allreduce_shm_single_copy) and rank 1 SIGKILLs
            itself from another thread in the middle of one; rank 0 must raise
            DistBackendError naming it within the group timeout (10 s), whether
            it was waiting for rank 1 or reading its tensor at that moment.
p2p_dead_peer / p2p_silent_peer / p2p_left_peer: as above, but the last rank
            misses a send: rank 0 waits in recv from it (2 ranks, shared-memory
            channels); rank 0 must raise naming it (dead: within the timeout,
            10 s; silent: at the timeout, 3 s; left: at once).
p2p_mismatch: 3 ranks; rank 0 sends 3 MiB to rank 1, which expects 2 MiB
            (the send is still in flight), rank 1 sends 40 B to rank 2, which
            expects 48 B (that send completes, the next one to rank 2 fails);
            both sides of each pair must raise, and the collectives still work.
Every live rank prints 'RESULT <rank> <seconds> <error type>: <message>' or
'RESULT <rank> ok', and 'SHM <rank> <fastcomm entries in /dev/shm>'.
"""

import datetime
import os
import signal
import sys
import threading
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import fastcomm


def _say(line: str) -> None:
    # One write() per line: ranks share the stdout pipe, and writes under PIPE_BUF
    # bytes are atomic, so lines from different ranks never interleave.
    os.write(1, (line + "\n").encode())


def _fastcomm_files() -> int:
    return sum(1 for name in os.listdir("/dev/shm") if name.startswith("fastcomm-"))


def _report(rank: int, start: float, err: BaseException) -> None:
    first_line = str(err).strip().splitlines()[0][:2000]
    _say(f"RESULT {rank} {time.monotonic() - start:.2f} {type(err).__name__}: {first_line}")


def _init(rank: int, world_size: int, store_path: str, seconds: float) -> None:
    dist.init_process_group(
        "fastcomm",
        init_method=f"file://{store_path}",
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=seconds),
    )
    assert fastcomm.fastcomm_backend().shm_engine is not None, "the engine should be on"
    dist.barrier()  # every rank, the segment's creator too, has finished setting up
    _say(f"SHM {rank} {_fastcomm_files()}")


def _vanish(how: str, kill_after: float = 0.0) -> None:
    """The last rank's part of the missing-peer scenarios: die, leave the group, or go silent."""
    if how == "kill":
        time.sleep(kill_after)
        os.kill(os.getpid(), signal.SIGKILL)
    if how == "leave":
        time.sleep(0.5)  # the others are waiting for it by now
        dist.destroy_process_group()
    time.sleep(20)
    os._exit(0)


def _expect_failure(rank: int, op) -> None:
    """Runs `op`, which a missing peer must make fail, and reports how it failed and when."""
    start = time.monotonic()
    try:
        op()
    except Exception as err:  # noqa: BLE001  (the point is to see which error)
        _report(rank, start, err)
        os._exit(0)
    _say(f"RESULT {rank} ok")
    os._exit(1)


def _group_still_works(rank: int, world_size: int) -> None:
    t = torch.ones(3)
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((3,), float(world_size))), t


def _missing_peer(rank: int, world_size: int, store_path: str, how: str) -> None:
    _init(rank, world_size, store_path, 3.0 if how == "sleep" else 10.0)
    t = torch.ones(1 << 20)
    dist.all_reduce(t)  # one good op first: the failure is mid-life, not at setup
    if rank == world_size - 1:
        _vanish(how)
    _expect_failure(rank, lambda: dist.all_reduce(t))


def _dead_peer_single_copy(rank: int, world_size: int, store_path: str) -> None:
    _init(rank, world_size, store_path, 10.0)
    t = torch.ones(4 << 20)  # 16 MiB: single copy on 2 ranks with a CPU each (FASTCOMM_SHM_ALLREDUCE_SINGLE_COPY_*)
    dist.all_reduce(t)
    assert fastcomm.fastcomm_backend().algorithm_counts().get("allreduce_shm_single_copy") == 1
    if rank == world_size - 1:
        threading.Timer(0.05, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()

    def loop():
        for _ in range(10_000):  # ~2 ms each: far longer than the timer
            dist.all_reduce(t)

    _expect_failure(rank, loop)


def _failed_work(work) -> None:
    """A work whose op failed inside the call (shm ops run there): it reads as
    completed and unsuccessful, and its future (made on request) carries the same
    error as wait(), which then raises it."""
    assert work.is_completed() and not work.is_success(), "a failed op must read as completed, unsuccessful"
    assert work.exception() is not None, "a failed op must hold its error"
    try:
        work.get_future().wait()
    except Exception as err:  # noqa: BLE001
        from_future = str(err).strip().splitlines()[0]
    else:
        raise AssertionError("the future of a failed op completed")
    try:
        work.wait()
    except Exception as err:  # noqa: BLE001
        assert str(err).strip().splitlines()[0] == from_future, (str(err), from_future)
        raise
    raise AssertionError("wait() of a failed op returned")


def _mismatch(rank: int, world_size: int, store_path: str) -> None:
    _init(rank, world_size, store_path, 10.0)
    n = world_size
    cases = [
        lambda: dist.all_reduce(torch.ones(4 + rank)),  # sizes
        lambda: dist.all_reduce(torch.ones(4), op=dist.ReduceOp.MAX if rank == 0 else dist.ReduceOp.SUM),  # ops
        lambda: dist.broadcast(torch.ones(4), src=rank),  # roots
        lambda: dist.all_reduce(torch.ones(4)) if rank == 0 else dist.broadcast(torch.ones(4), src=0),  # collectives
        # uneven splits that do not match: every rank sends 1 row to everyone, rank 0 expects 2 from rank 1
        lambda: dist.all_to_all_single(
            torch.zeros(n + (1 if rank == 0 else 0)),
            torch.ones(n),
            output_split_sizes=[1] * n if rank else [1, 2] + [1] * (n - 2),
            input_split_sizes=[1] * n,
        ),
        lambda: _failed_work(dist.all_reduce(torch.ones(4 + rank), async_op=True)),  # sizes, through the Work
        lambda: dist.all_reduce(torch.ones(4 + rank), op=dist.ReduceOp.AVG),  # sizes, under avg_via_sum's step
    ]
    for i, case in enumerate(cases):
        start = time.monotonic()
        try:
            case()
        except Exception as err:  # noqa: BLE001
            _report(rank, start, err)
        else:
            _say(f"RESULT {rank} ok (case {i})")
        _group_still_works(rank, n)
    _say(f"AFTER {rank} group works")
    dist.destroy_process_group()


def _mismatch_hosts(rank: int, world_size: int, store_path: str) -> None:
    os.environ["FASTCOMM_RANKS_PER_HOST"] = "2"
    host = rank // 2
    cases = [
        lambda: dist.all_reduce(torch.ones(4 + host)),  # sizes
        lambda: (
            dist.all_gather_into_tensor(torch.empty(4 * world_size), torch.ones(4))
            if host == 0
            else dist.reduce_scatter_tensor(torch.empty(4), torch.ones(4 * world_size))
        ),  # collectives
    ]
    for case in cases:  # a mismatch across hosts breaks the group: a fresh one per case
        _init(rank, world_size, f"{store_path}-{cases.index(case)}", 10.0)
        start = time.monotonic()
        try:
            case()
            _say(f"RESULT {rank} ok")
        except Exception as err:  # noqa: BLE001
            _report(rank, start, err)
        dist.destroy_process_group()


def _dead_other_host(rank: int, world_size: int, store_path: str) -> None:
    os.environ["FASTCOMM_RANKS_PER_HOST"] = "2"
    _init(rank, world_size, store_path, 5.0)
    t = torch.ones(1 << 20)
    dist.all_reduce(t)  # one good op first
    if rank == world_size - 1:
        _vanish("kill")
    _expect_failure(rank, lambda: dist.all_reduce(t))


def _p2p_missing_peer(rank: int, world_size: int, store_path: str, how: str) -> None:
    _init(rank, world_size, store_path, 3.0 if how == "sleep" else 10.0)
    t = torch.zeros(1 << 16)
    if rank == world_size - 1:
        dist.send(torch.ones(1 << 16), dst=0)  # one good message first
        _vanish(how, kill_after=0.3)  # rank 0 waits in its second recv by now
    dist.recv(t, src=world_size - 1)
    _expect_failure(rank, lambda: dist.recv(t, src=world_size - 1))


def _p2p_mismatch(rank: int, world_size: int, store_path: str) -> None:
    _init(rank, world_size, store_path, 10.0)
    start = time.monotonic()
    try:
        if rank == 0:
            dist.send(torch.ones(3 << 18), dst=1)  # 3 MiB: more than the channel holds
        elif rank == 1:
            try:
                dist.recv(torch.zeros(2 << 18), src=0)
            finally:
                dist.send(torch.ones(10), dst=2)  # completes: 40 B fit the channel
                time.sleep(0.5)  # rank 2 has refused it by now
            raise AssertionError("unreachable")
        else:
            work = dist.irecv(torch.zeros(12), src=1)
            try:
                work.wait()
            except Exception:
                # The failed receive's future, asked for only now, fails with the same reason.
                assert work.is_completed(), "a failed receive reports itself completed"
                try:
                    work.get_future().wait()
                except Exception as again:  # noqa: BLE001
                    assert "the sizes differ" in str(again), again
                else:
                    raise AssertionError("the failed receive's future completed without error") from None
                raise
    except Exception as err:  # noqa: BLE001
        _report(rank, start, err)
    if rank == 1:
        try:
            dist.send(torch.ones(10), dst=2)
        except Exception as err:  # noqa: BLE001
            _report(rank, start, err)
    _group_still_works(rank, world_size)
    _say(f"AFTER {rank} group works")
    dist.destroy_process_group()


def _rank(rank: int, scenario: str, world_size: int, store_path: str) -> None:
    if scenario.startswith("p2p_"):
        if scenario == "p2p_mismatch":
            _p2p_mismatch(rank, world_size, store_path)
        else:
            how = {"p2p_dead_peer": "kill", "p2p_silent_peer": "sleep", "p2p_left_peer": "leave"}[scenario]
            _p2p_missing_peer(rank, world_size, store_path, how)
        return
    if scenario == "dead_other_host":
        _dead_other_host(rank, world_size, store_path)
    elif scenario == "mismatch_hosts":
        _mismatch_hosts(rank, world_size, store_path)
    elif scenario == "mismatch":
        _mismatch(rank, world_size, store_path)
    elif scenario == "dead_peer_single_copy":
        _dead_peer_single_copy(rank, world_size, store_path)
    else:
        how = {"dead_peer": "kill", "silent_peer": "sleep", "left_peer": "leave"}[scenario]
        _missing_peer(rank, world_size, store_path, how)


if __name__ == "__main__":
    scenario, path, ws = sys.argv[1], sys.argv[2], int(sys.argv[3])
    mp.spawn(_rank, args=(scenario, ws, path), nprocs=ws, join=False)
    # join=False + our own wait: a SIGKILLed child makes mp.spawn's join raise.
    time.sleep(0.5)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(p.is_alive() for p in mp.active_children()):
        time.sleep(0.1)
    _say(f"FINAL {_fastcomm_files()}")
