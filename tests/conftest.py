"""Shared pytest fixtures: rank pools for multi-process tests.

`ranks` gives a RankPool of 2 or 3 processes (tests using it run at both world
sizes); `ranks2` is 2 processes only. Pools live for the session and are
remade when a check breaks one.
"""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "multiproc"))

from harness import RankPool  # noqa: E402

_pools: dict[tuple, RankPool] = {}


def _pool(world_size: int, env: tuple = ()) -> RankPool:
    key = (world_size, env)
    pool = _pools.get(key)
    if pool is None or pool.broken:
        pool = RankPool(world_size, dict(env))
        _pools[key] = pool
    return pool


@pytest.fixture(params=[2, 3], ids=lambda n: f"ws{n}")
def ranks(request):
    return _pool(request.param)


# Process-group layouts the backend's own tests run on: the shared-memory engine
# on one host (2, 3, 4 ranks; 4 ranks oversubscribe the 2-core CI machines), two
# simulated hosts (hierarchical; 3 ranks = a host of 2 and a host of 1), the
# engine off (Gloo and fastcomm's adapters only), and one rank per host.
TOPOLOGIES = {
    "ws2": (2, ()),
    "ws3": (3, ()),
    "ws4": (4, ()),
    "ws4-2hosts": (4, (("FASTCOMM_RANKS_PER_HOST", "2"),)),
    "ws3-2hosts": (3, (("FASTCOMM_RANKS_PER_HOST", "2"),)),
    # tiny slots and pieces: every pipelined piece spans several rounds, every message many pieces
    "ws3-2hosts-tiny": (
        3,
        (
            ("FASTCOMM_RANKS_PER_HOST", "2"),
            ("FASTCOMM_SHM_SLOT_BYTES", "4096"),
            ("FASTCOMM_PIPELINE_PIECE_BYTES", "16384"),
        ),
    ),
    "ws3-noshm": (3, (("FASTCOMM_SHM", "0"),)),
    "ws2-1perhost": (2, (("FASTCOMM_RANKS_PER_HOST", "1"),)),  # no engine anywhere: Gloo and adapters
}


@pytest.fixture(params=list(TOPOLOGIES))
def topology_ranks(request):
    world_size, env = TOPOLOGIES[request.param]
    return _pool(world_size, env)


@pytest.fixture
def pool_of():
    """pool_of(topology) -> the RankPool of a TOPOLOGIES name; pool_of(world_size, env) -> any other."""

    def get(topology_or_size, env: tuple = ()) -> RankPool:
        if isinstance(topology_or_size, str):
            return _pool(*TOPOLOGIES[topology_or_size])
        return _pool(topology_or_size, env)

    return get


@pytest.fixture
def ranks2():
    return _pool(2)


@pytest.fixture
def ranks_detail():
    """2 ranks with TORCH_DISTRIBUTED_DEBUG=DETAIL (collective checking wrapper on)."""
    return _pool(2, (("TORCH_DISTRIBUTED_DEBUG", "DETAIL"),))


@pytest.fixture
def ranks_named_interface():
    """4 ranks as 2 simulated hosts, internal Gloo groups on the interface GLOO_SOCKET_IFNAME names (lo)."""
    return _pool(4, (("FASTCOMM_RANKS_PER_HOST", "2"), ("GLOO_SOCKET_IFNAME", "lo")))


@pytest.fixture
def ranks_no_allgather():
    """2 ranks, engine off, small all_reduce left to Gloo (allreduce_via_allgather off)."""
    return _pool(2, (("FASTCOMM_SHM", "0"), ("FASTCOMM_ALLREDUCE_ALLGATHER_MAX_BYTES", "0")))


@pytest.fixture(scope="module")
def module_pool_of():
    """module_pool_of(world_size, env) -> the RankPool for them (remade when a check
    breaks it, as every pool here), closed when the test module ends: for pools
    too big to keep for the whole session (8 ranks hold ~3 GB)."""
    keys = set()

    def get(world_size: int, env: tuple = ()) -> RankPool:
        keys.add((world_size, env))
        return _pool(world_size, env)

    yield get
    for key in keys:
        pool = _pools.pop(key, None)
        if pool is not None:
            pool.close()


def pytest_sessionfinish(session, exitstatus):
    for pool in _pools.values():
        pool.close()
    _pools.clear()
