"""What every rank of a new group publishes through the group's store, and how
the others wait for it: one deadline for the whole set-up (the group timeout),
and an error naming the ranks that did not publish in time."""

from __future__ import annotations

import dataclasses
import datetime
import time

import torch.distributed as dist


@dataclasses.dataclass(frozen=True)
class GroupFacts:
    """The machine facts a whole group plans with, the same on every rank
    (fastcomm/_agreement.py gathers them)."""

    cpus: int  # the fewest CPUs any rank may use
    memory_bytes: int  # the least physical memory any rank's machine has


class Clock:
    """The set-up's one deadline: every wait gets what is left of the group
    timeout, so set-up fails within it whoever stops answering."""

    def __init__(self, rank: int, timeout: datetime.timedelta) -> None:
        self.rank = rank
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout.total_seconds()


def get_all(store: dist.Store, prefix: str, what: str, ranks, clock: Clock, stage: str) -> list[str]:
    """The values `ranks` published under `prefix` + rank; a clear DistStoreError
    naming the missing ranks (`what` they should have published, during
    `stage`) if they have not by the deadline: they died or are stuck."""
    keys = [f"{prefix}{r}" for r in ranks]
    try:
        store.wait(keys, datetime.timedelta(seconds=max(clock.deadline - time.monotonic(), 0.001)))
    except Exception as error:  # the store's timeout error
        missing = [r for r, key in zip(ranks, keys) if not store.check([key])]
        raise dist.DistStoreError(
            f"fastcomm: {stage} on group rank {clock.rank}: group rank(s) {missing} did not publish their {what} "
            f"within the group timeout ({clock.timeout.total_seconds():g} s); they died or are stuck ({str(error).strip()[:200]})"
        ) from None
    return [store.get(key).decode() for key in keys]
