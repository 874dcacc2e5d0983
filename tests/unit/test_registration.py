"""Importing fastcomm registers the backend; options come from the environment."""

import datetime
import os

import pytest
import torch
import torch.distributed as dist

import fastcomm
from fastcomm import _C
from fastcomm._options import Options, read_options


def test_backend_registered_for_cpu_and_cuda():
    assert "FASTCOMM" in dist.Backend._plugins
    assert dist.Backend._plugins["FASTCOMM"].extended_api
    assert dist.Backend.default_device_backend_map  # torch's map is intact
    assert dist.Backend("fastcomm") == "fastcomm"
    assert set(dist.Backend.backend_capability["fastcomm"]) == {"cpu", "cuda"}


def test_import_does_not_initialise_cuda():
    assert not torch.cuda.is_initialized()


def test_options_defaults_and_validation(monkeypatch):
    for name in (
        "FASTCOMM_GLOO_THREADS",
        "FASTCOMM_ALLREDUCE_ALLGATHER_MAX_BYTES",
        "FASTCOMM_SOCKET_IFNAME",
        "GLOO_SOCKET_IFNAME",
    ):
        monkeypatch.delenv(name, raising=False)
    assert read_options() == Options()
    monkeypatch.setenv("FASTCOMM_GLOO_THREADS", "4")
    assert read_options().gloo_threads == 4
    for bad in ("0", "-1", "two"):
        monkeypatch.setenv("FASTCOMM_GLOO_THREADS", bad)
        with pytest.raises(ValueError, match="FASTCOMM_GLOO_THREADS must be a positive integer"):
            read_options()
    monkeypatch.setenv("FASTCOMM_GLOO_THREADS", "65")
    with pytest.raises(ValueError, match="FASTCOMM_GLOO_THREADS must be at most 64, got '65'"):
        read_options()
    monkeypatch.delenv("FASTCOMM_GLOO_THREADS")
    monkeypatch.setenv("FASTCOMM_ALLREDUCE_ALLGATHER_MAX_BYTES", "0")
    assert read_options().allreduce_allgather_max_bytes == 0
    for bad in ("-1", "1k"):
        monkeypatch.setenv("FASTCOMM_ALLREDUCE_ALLGATHER_MAX_BYTES", bad)
        with pytest.raises(ValueError, match="FASTCOMM_ALLREDUCE_ALLGATHER_MAX_BYTES must be a non-negative integer"):
            read_options()


def test_shared_memory_options(monkeypatch):
    for name in (
        "FASTCOMM_SHM",
        "FASTCOMM_SHM_SLOT_BYTES",
        "FASTCOMM_SHM_ONESHOT_MAX_BYTES",
        "FASTCOMM_RANKS_PER_HOST",
    ):
        monkeypatch.delenv(name, raising=False)
    defaults = read_options()
    assert (defaults.shm, defaults.shm_slot_bytes, defaults.shm_oneshot_max_bytes, defaults.ranks_per_host) == (
        True,
        1 << 20,
        128 << 10,
        0,
    )
    monkeypatch.setenv("FASTCOMM_SHM", "0")
    monkeypatch.setenv("FASTCOMM_SHM_SLOT_BYTES", "65536")
    monkeypatch.setenv("FASTCOMM_SHM_ONESHOT_MAX_BYTES", "0")
    monkeypatch.setenv("FASTCOMM_RANKS_PER_HOST", "2")
    options = read_options()
    assert (options.shm, options.shm_slot_bytes, options.shm_oneshot_max_bytes, options.ranks_per_host) == (
        False,
        65536,
        0,
        2,
    )
    for name, bad, message in [
        ("FASTCOMM_SHM", "yes", "FASTCOMM_SHM must be 0 or 1, got 'yes'"),
        ("FASTCOMM_SHM_BIND_CPUS", "2", "FASTCOMM_SHM_BIND_CPUS must be 0, 1 or auto, got '2'"),
        ("FASTCOMM_SHM_SLOT_BYTES", "4095", "FASTCOMM_SHM_SLOT_BYTES must be an integer >= 4096"),
        ("FASTCOMM_SHM_ONESHOT_MAX_BYTES", "-1", "FASTCOMM_SHM_ONESHOT_MAX_BYTES must be a non-negative integer"),
        ("FASTCOMM_RANKS_PER_HOST", "two", "FASTCOMM_RANKS_PER_HOST must be a non-negative integer"),
    ]:
        monkeypatch.setenv(name, bad)
        with pytest.raises(ValueError, match=message):
            read_options()
        monkeypatch.delenv(name)


def test_spin_budget_option(monkeypatch):
    monkeypatch.delenv("FASTCOMM_SHM_SPIN_BUDGET", raising=False)
    assert read_options().shm_spin_budget is True
    monkeypatch.setenv("FASTCOMM_SHM_SPIN_BUDGET", "0")
    assert read_options().shm_spin_budget is False
    monkeypatch.setenv("FASTCOMM_SHM_SPIN_BUDGET", "off")
    with pytest.raises(ValueError, match="FASTCOMM_SHM_SPIN_BUDGET must be 0 or 1, got 'off'"):
        read_options()


@pytest.mark.parametrize(
    "name, field, default, good, bad, message",
    [
        (
            "FASTCOMM_PIPELINE_PIECE_BYTES",
            "pipeline_piece_bytes",
            1 << 20,
            65536,
            "100",
            "FASTCOMM_PIPELINE_PIECE_BYTES must be an integer >= 4096",
        ),
        (
            "FASTCOMM_P2P_SINGLE_COPY_BYTES",
            "p2p_single_copy_bytes",
            64 << 10,
            0,
            "-1",
            "FASTCOMM_P2P_SINGLE_COPY_BYTES must be a non-negative integer, got .-1.",
        ),
        (
            "FASTCOMM_SHM_ASYNC_MIN_BYTES",
            "shm_async_min_bytes",
            -1,
            0,
            "1.5",
            "FASTCOMM_SHM_ASYNC_MIN_BYTES must be a non-negative integer, got .1.5.",
        ),
        (
            "FASTCOMM_SHM_ALLREDUCE_SINGLE_COPY_MIN_BYTES",
            "shm_allreduce_single_copy_min_bytes",
            -1,
            0,
            "-1",
            "FASTCOMM_SHM_ALLREDUCE_SINGLE_COPY_MIN_BYTES must be a non-negative integer, got .-1.",
        ),
        (
            "FASTCOMM_SHM_ALLREDUCE_SINGLE_COPY_MAX_BYTES",
            "shm_allreduce_single_copy_max_bytes",
            -1,
            1 << 30,
            "x",
            "FASTCOMM_SHM_ALLREDUCE_SINGLE_COPY_MAX_BYTES must be a non-negative integer, got .x.",
        ),
        (
            "FASTCOMM_SHM_HUGE_PAGES_MIN_BYTES",
            "shm_huge_pages_min_bytes",
            4 << 20,
            0,
            "4M",
            "FASTCOMM_SHM_HUGE_PAGES_MIN_BYTES must be a non-negative integer, got .4M.",
        ),
        (
            "FASTCOMM_SHM_LOW_PRECISION_ARENA_MIN_BYTES",
            "shm_low_precision_arena_min_bytes",
            4 << 10,
            0,
            "16K",
            "FASTCOMM_SHM_LOW_PRECISION_ARENA_MIN_BYTES must be a non-negative integer, got .16K.",
        ),
        (
            "FASTCOMM_SHM_ARENA_MIN_BYTES",
            "shm_arena_min_bytes",
            8 << 10,
            0,
            "8K",
            "FASTCOMM_SHM_ARENA_MIN_BYTES must be a non-negative integer, got .8K.",
        ),
    ],
)
def test_size_option(monkeypatch, name, field, default, good, bad, message):
    monkeypatch.delenv(name, raising=False)
    assert getattr(read_options(), field) == default
    monkeypatch.setenv(name, str(good))
    assert getattr(read_options(), field) == good
    monkeypatch.setenv(name, bad)
    with pytest.raises(ValueError, match=message):
        read_options()


def test_network_interface_options(monkeypatch):
    """GLOO_SOCKET_IFNAME (torch's, comma-separated) and FASTCOMM_SOCKET_IFNAME (fastcomm's
    override) name the internal Gloo groups' interfaces; a name this host lacks is refused."""
    import socket

    monkeypatch.delenv("FASTCOMM_SOCKET_IFNAME", raising=False)
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    assert read_options().socket_ifname == ""
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo,lo")
    assert read_options().socket_ifname == "lo,lo"
    monkeypatch.setenv("FASTCOMM_SOCKET_IFNAME", "lo")
    assert read_options().socket_ifname == "lo"
    monkeypatch.setenv("FASTCOMM_SOCKET_IFNAME", "lo,fastcomm-nonexistent0")
    have = ", ".join(name for _, name in socket.if_nameindex())
    with pytest.raises(
        ValueError,
        match=f"FASTCOMM_SOCKET_IFNAME names network interface 'fastcomm-nonexistent0', "
        f"which this host does not have \\(it has: {have}\\)",
    ):
        read_options()
    monkeypatch.delenv("FASTCOMM_SOCKET_IFNAME")
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "fastcomm-nonexistent0")
    with pytest.raises(ValueError, match="GLOO_SOCKET_IFNAME names network interface 'fastcomm-nonexistent0'"):
        read_options()


def test_config_carries_every_option_and_the_host_plan():
    """One typed Config for C++: every Options field is copied by name (a field
    C++ lacked would raise here), plus the host plan and the CUDA verdict."""
    import dataclasses

    from fastcomm._backend import make_config
    from fastcomm._rendezvous import GroupFacts
    from fastcomm._shm import ShmPlan

    options = Options(
        gloo_threads=3,
        allreduce_allgather_max_bytes=5,
        shm=False,
        shm_spin_budget=False,
        shm_slot_bytes=8192,
        shm_oneshot_max_bytes=7,
        shm_async_min_bytes=13,
        shm_allreduce_single_copy_min_bytes=17,
        shm_allreduce_single_copy_max_bytes=19,
        shm_huge_pages_min_bytes=37,
        shm_low_precision_arena_min_bytes=23,
        shm_arena_min_bytes=31,
        shm_bind_cpus=1,
        shm_unbound_min_bytes=29,
        pipeline_piece_bytes=9000,
        p2p_single_copy_bytes=11,
        ranks_per_host=2,
        socket_ifname="lo",
    )
    assert options != Options()  # every field differs from its default, so a dropped copy shows
    assert all(getattr(options, f.name) != getattr(Options(), f.name) for f in dataclasses.fields(Options))
    facts = GroupFacts(cpus=64, memory_bytes=1 << 40)
    config = make_config(options, facts, ShmPlan(host_of_rank=[0, 0, 1]), "no CUDA device is visible")
    for field in dataclasses.fields(Options):
        assert getattr(config, field.name) == getattr(options, field.name), field.name
    assert config.host_of_rank == [0, 0, 1]
    assert config.cuda_unavailable_reason == "no CUDA device is visible"


def test_async_threshold_is_automatic_unless_given():
    """-1 (unset): the op queue from 1 MiB where the host has two cores per
    local rank, else none; a given value (0 included) is kept."""
    from fastcomm._options import resolve_async_min_bytes

    assert resolve_async_min_bytes(-1, local_ranks=2, cores=4) == 1 << 20
    assert resolve_async_min_bytes(-1, local_ranks=2, cores=3) == 0
    assert resolve_async_min_bytes(-1, local_ranks=1, cores=2) == 1 << 20
    assert resolve_async_min_bytes(0, local_ranks=1, cores=64) == 0
    assert resolve_async_min_bytes(4096, local_ranks=8, cores=2) == 4096


def test_single_copy_threshold_is_automatic_unless_given():
    """-1 (unset): single-copy all_reduce from 32 KiB where every local rank has
    a CPU of its own, else off; a given value (0: off) is kept."""
    from fastcomm._options import resolve_single_copy_min_bytes

    assert resolve_single_copy_min_bytes(-1, local_ranks=2, cpus=2) == 32 << 10
    assert resolve_single_copy_min_bytes(-1, local_ranks=2, cpus=16) == 32 << 10
    assert resolve_single_copy_min_bytes(-1, local_ranks=4, cpus=2) == 0  # oversubscribed: not faster
    assert resolve_single_copy_min_bytes(0, local_ranks=2, cpus=2) == 0
    assert resolve_single_copy_min_bytes(4096, local_ranks=8, cpus=2) == 4096


def test_single_copy_maximum_is_automatic_unless_given():
    """-1 (unset): no maximum while reused tensors go into huge pages, else 32
    MiB; a given value is kept."""
    from fastcomm._options import resolve_single_copy_max_bytes

    assert resolve_single_copy_max_bytes(-1, huge_pages_min_bytes=4 << 20) >= 1 << 62
    assert resolve_single_copy_max_bytes(-1, huge_pages_min_bytes=0) == 32 << 20
    assert resolve_single_copy_max_bytes(1 << 20, huge_pages_min_bytes=4 << 20) == 1 << 20
    assert resolve_single_copy_max_bytes(0, huge_pages_min_bytes=4 << 20) == 0


def test_binding_modes(monkeypatch):
    from fastcomm._options import resolve_cpu_placement

    assert Options().shm_bind_cpus == -1  # auto
    for raw, mode in (("auto", -1), ("0", 0), ("1", 1), ("", -1)):
        monkeypatch.setenv("FASTCOMM_SHM_BIND_CPUS", raw)
        assert read_options().shm_bind_cpus == mode, raw
    # auto: keep homes where ranks outnumber CPUs, else free (a CPU per rank or more, a lone rank); 1: bind
    assert resolve_cpu_placement(-1, local_ranks=2, cpus=2) == "free"
    assert resolve_cpu_placement(-1, local_ranks=8, cpus=8) == "free"
    assert resolve_cpu_placement(-1, local_ranks=3, cpus=2) == "keep_home"
    assert resolve_cpu_placement(-1, local_ranks=2, cpus=1) == "keep_home"
    assert resolve_cpu_placement(-1, local_ranks=2, cpus=4) == "free"
    assert resolve_cpu_placement(-1, local_ranks=1, cpus=1) == "free"
    assert resolve_cpu_placement(1, local_ranks=3, cpus=2) == "bind"
    assert resolve_cpu_placement(1, local_ranks=1, cpus=2) == "free"
    assert resolve_cpu_placement(0, local_ranks=2, cpus=2) == "free"
    assert resolve_cpu_placement(0, local_ranks=4, cpus=2) == "free"


def test_single_rank_group_with_explicit_store():
    """world_size 1 with an explicit store: every collective is the identity."""
    dist.init_process_group(
        "fastcomm", store=dist.HashStore(), rank=0, world_size=1, timeout=datetime.timedelta(seconds=20)
    )
    try:
        backend = fastcomm.fastcomm_backend()
        assert backend.name() == "fastcomm" and backend.rank() == 0 and backend.size() == 1
        assert backend.timeout == datetime.timedelta(seconds=20)
        assert dist.get_backend() == "fastcomm"
        assert backend.shm_engine is not None and backend.shm_engine.local_size == 1  # no Gloo hand-off
        assert os.readlink(backend.shm_engine.segment_name).startswith("/memfd:fastcomm-segment")  # no file
        t = torch.arange(5.0)
        dist.all_reduce(t, op=dist.ReduceOp.AVG)
        assert torch.equal(t, torch.arange(5.0))
        out = torch.empty(5)
        dist.all_gather_into_tensor(out, torch.arange(5.0))
        assert torch.equal(out, torch.arange(5.0))
        i16 = torch.tensor([1, -2, 3], dtype=torch.int16)
        dist.all_reduce(i16, op=dist.ReduceOp.PRODUCT)
        assert torch.equal(i16, torch.tensor([1, -2, 3], dtype=torch.int16))
        dist.barrier()
        counts = backend.algorithm_counts()  # AVG and int16 are rewritten onto the float32/int32 one-shot
        assert counts["allreduce_shm_oneshot"] == 2 and counts["allgather_shm"] == 1 and counts["barrier_shm"] == 1, (
            counts
        )
        # The benchmarks' C++ timing loop runs any backend's collectives.
        cpu_backend = dist.group.WORLD._get_backend(torch.device("cpu"))
        assert _C.bench_loop(cpu_backend, "ALLREDUCE", t, t, 10) > 0
        assert backend.algorithm_counts()["allreduce_shm_oneshot"] == 12
        gathered = torch.zeros(5)
        _C.bench_loop(cpu_backend, "_ALLGATHER_BASE", torch.arange(5.0), gathered, 3)
        assert torch.equal(gathered, torch.arange(5.0)) and backend.algorithm_counts()["allgather_shm"] == 4
        with pytest.raises(RuntimeError, match="fastcomm bench_loop: cannot loop op 'GATHER' \\(loopable: ALLREDUCE, "):
            _C.bench_loop(cpu_backend, "GATHER", t, t, 1)
        assert backend.config.shm_oneshot_max_bytes == read_options().shm_oneshot_max_bytes
        assert backend.config.host_of_rank == []  # one host
        backend.set_timeout(datetime.timedelta(seconds=7))  # also forwarded to the Gloo delegate
        assert backend.timeout == datetime.timedelta(seconds=7)
        with pytest.raises(ValueError, match="not a fastcomm group"):
            fastcomm.fastcomm_backend(dist.new_group(backend="gloo"))
    finally:
        dist.destroy_process_group()


def test_agreed_options_are_options_with_their_variables():
    """Every agreed field is an Options field whose variable read_options reads,
    and every Options field's variable is listed in docs/tuning.md (the
    agreement names the variable in its error)."""
    import dataclasses
    import inspect

    from fastcomm import _options

    fields = {f.name for f in dataclasses.fields(Options)}
    source = inspect.getsource(_options.read_options)
    tuning = open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "tuning.md")).read()
    for field in _options.AGREED_FIELDS:
        assert field in fields, field
        assert f'"{_options.env_name(field)}"' in source, field
    for field in fields:
        assert f"`{_options.env_name(field)}`" in tuning, field


def test_disagreements_name_the_variable_ranks_and_values():
    from fastcomm._agreement import _disagreements
    from fastcomm._options import AGREED_FIELDS

    same = {field: getattr(Options(), field) for field in AGREED_FIELDS}
    published = [{"options": dict(same)} for _ in range(3)]
    assert _disagreements(published) == []
    published[2]["options"]["shm_oneshot_max_bytes"] = 4096
    published[1]["options"]["shm_allreduce_single_copy_min_bytes"] = 0
    assert _disagreements(published) == [
        "FASTCOMM_SHM_ONESHOT_MAX_BYTES: group rank(s) [0, 1] have 131072; group rank(s) [2] have 4096",
        "FASTCOMM_SHM_ALLREDUCE_SINGLE_COPY_MIN_BYTES: group rank(s) [0, 2] have unset (automatic); "
        "group rank(s) [1] have 0",
    ]


def test_segment_size_bound():
    from fastcomm._shm import check_segment_size

    check_segment_size(1 << 20, [2, 4], memory_bytes=32 << 20)  # 2 x 4 x 1 MiB = 8 MiB = a quarter
    with pytest.raises(
        ValueError,
        match=r"FASTCOMM_SHM_SLOT_BYTES=1048577 makes a shared-memory segment of "
        r"2 x 4 ranks x 1048577 B .* at most 1048576 B per slot for 4 ranks",
    ):
        check_segment_size((1 << 20) + 1, [4, 2], memory_bytes=32 << 20)
