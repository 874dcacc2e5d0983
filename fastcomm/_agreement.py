"""Agreement on configuration: the first step of every new fastcomm group.

Every rank publishes, through the group's store, the options that decide the
protocol (fastcomm/_options.py AGREED_FIELDS, as read from its environment)
and the machine facts that the automatic values follow (the CPUs it may use,
the memory it has). Every rank then reads every rank's values and makes the
same decision from the same data:

- an agreed option that differs anywhere refuses the group on every rank, with
  an error naming the option, the ranks and both values. Running on would let
  one rank pick another algorithm (or chunking, or host plan) than its peers
  for the same call: garbage, not an error;
- the automatic values are worked out from the group's facts, not the rank's
  own (the fewest CPUs any rank may use, the least memory any rank has), so a
  launcher that binds one rank to fewer CPUs than its peer changes the plan of
  the whole group alike instead of splitting it.

Cost: one store write and one wait per rank at group creation.
"""

from __future__ import annotations

import datetime
import json
import os

import torch.distributed as dist

from fastcomm._options import AGREED_FIELDS, Options, env_name
from fastcomm._rendezvous import Clock, GroupFacts, get_all
from fastcomm._shm import usable_cpus

_PREFIX = "fastcomm/config/"


def _physical_memory_bytes() -> int:
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def _disagreements(published: list[dict]) -> list[str]:
    """One line per agreed option that not every rank holds alike."""
    lines = []
    for field in AGREED_FIELDS:
        values = [p["options"][field] for p in published]
        if len(set(values)) == 1:
            continue
        by_value: dict = {}
        for rank, value in enumerate(values):
            by_value.setdefault(value, []).append(rank)
        held = "; ".join(f"group rank(s) {ranks} have {_shown(value)}" for value, ranks in by_value.items())
        lines.append(f"{env_name(field)}: {held}")
    return lines


def _shown(value) -> str:
    return "unset (automatic)" if value == -1 else repr(value)


def _forget_once_all_read(store: dist.Store, size: int) -> None:
    """The last rank to read the published values deletes them: a group made
    again under the same name (new_group(use_local_synchronization=True), a
    second init on one store) must not read the ones of the group before."""
    readers = store.add(f"{_PREFIX}readers", 1)  # cumulative: every incarnation adds `size`
    if readers % size == 0:
        for r in range(size):
            store.delete_key(f"{_PREFIX}{r}")


def agree(store: dist.Store, rank: int, size: int, timeout: datetime.timedelta, options: Options) -> GroupFacts:
    """This rank's part of the group's agreement (collective over the group):
    the group's facts, or ValueError on every rank if an agreed option differs."""
    mine = {
        "options": {field: getattr(options, field) for field in AGREED_FIELDS},
        "cpus": len(usable_cpus()),  # before fastcomm bound it (a later group of a bound process)
        "memory_bytes": _physical_memory_bytes(),
    }
    store.set(f"{_PREFIX}{rank}", json.dumps(mine))
    clock = Clock(rank, timeout)
    published = [json.loads(p) for p in get_all(store, _PREFIX, "configuration", range(size), clock, "set-up")]
    _forget_once_all_read(store, size)
    lines = _disagreements(published)
    if lines:
        raise ValueError(
            "fastcomm: set-up refused: ranks disagree on options that decide how they exchange data (every rank "
            "of a group must set them alike, or leave them unset):\n  " + "\n  ".join(lines)
        )
    return GroupFacts(cpus=min(p["cpus"] for p in published), memory_bytes=min(p["memory_bytes"] for p in published))
