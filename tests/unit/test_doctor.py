"""python -m fastcomm.doctor: each finding against what this machine says
(os, statvfs, socket) or against made-up /proc and /sys trees, the verdicts
on given probe results, the report formats, and the algorithm table's
reading of a run (the live comparison is tests/multiproc/test_doctor.py)."""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import io
import json
import os
import socket

import pytest

from fastcomm import _C, _options, _torch_check
from fastcomm.doctor import algorithm_report, algorithms, build, cli, cross_memory, machine, network
from fastcomm.doctor.report import Item, to_text


def _tree(root, files: dict[str, str]) -> str:
    for path, text in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return str(root)


def _status(yama: int | None, seccomp: int = 0, cap_eff: int = 0) -> dict[str, str]:
    files = {"proc/self/status": f"Name:\tpython\nCapEff:\t{cap_eff:016x}\nSeccomp:\t{seccomp}\n"}
    if yama is not None:
        files["proc/sys/kernel/yama/ptrace_scope"] = f"{yama}\n"
    return files


# Machine.


def test_cpus_are_what_the_os_says():
    item = machine.cpu_items()[0]
    assert item.data["count"] == os.cpu_count()
    assert item.data["affinity"] == sorted(os.sched_getaffinity(0))
    assert item.status == ("ok" if len(os.sched_getaffinity(0)) == os.cpu_count() else "info")


def test_cpu_lists_parse():
    assert machine.cpu_list("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert machine.cpu_list("") == []


def test_numa_nodes_from_a_fake_sys(tmp_path):
    root = _tree(
        tmp_path,
        {
            "sys/devices/system/node/node0/cpulist": "0-3\n",
            "sys/devices/system/node/node1/cpulist": "4-7,12\n",
            "sys/devices/system/node/online": "0-1\n",
        },
    )
    assert machine.numa_nodes(root) == {0: [0, 1, 2, 3], 1: [4, 5, 6, 7, 12]}
    assert machine.numa_nodes(str(tmp_path / "nowhere")) == {}


def test_numa_of_this_machine_matches_sys():
    nodes = machine.numa_nodes()
    base = "/sys/devices/system/node"
    expected = sorted(int(n[4:]) for n in os.listdir(base) if n[4:].isdigit()) if os.path.isdir(base) else []
    assert sorted(nodes) == expected


def test_dev_shm_size_is_statvfs(tmp_path):
    st = os.statvfs(tmp_path)
    size, free = machine.dev_shm(str(tmp_path))
    assert size == st.f_blocks * st.f_frsize
    assert 0 <= free <= size
    assert machine.dev_shm(str(tmp_path / "absent")) is None


def test_small_dev_shm_warns(monkeypatch):
    monkeypatch.setattr(machine, "dev_shm", lambda path: (64 << 20, 60 << 20))
    item = machine.dev_shm_item()
    assert (item.status, item.value, item.data) == ("warn", "64 MiB, 60 MiB free", {"size": 64 << 20, "free": 60 << 20})
    assert "--shm-size" in item.fix
    monkeypatch.setattr(machine, "dev_shm", lambda path: (8 << 30, 8 << 30))
    assert machine.dev_shm_item().status == "ok"


def test_huge_pages_from_a_fake_tree(tmp_path):
    files = {
        "sys/kernel/mm/transparent_hugepage/enabled": "always [madvise] never\n",
        "proc/meminfo": "MemTotal: 100 kB\nHugePages_Total:      16\nHugePages_Free:        8\n"
        "Hugepagesize:       2048 kB\n",
        "proc/sys/kernel/osrelease": "6.8.0-45-generic\n",
    }
    thp, explicit = machine.huge_page_items(_tree(tmp_path / "new", files))
    assert (thp.status, thp.data) == ("ok", {"transparent": "madvise", "kernel": "6.8"})
    assert explicit.data == {"total": 16, "free": 8, "size_kb": 2048}
    old = dict(files, **{"proc/sys/kernel/osrelease": "5.15.0\n"})
    thp, _ = machine.huge_page_items(_tree(tmp_path / "old", old))
    assert thp.status == "off" and "6.1" in thp.why
    none = {k: v for k, v in files.items() if "transparent" not in k}
    thp, _ = machine.huge_page_items(_tree(tmp_path / "none", none))
    assert thp.status == "off" and thp.data["transparent"] is None


def test_huge_page_setting_of_this_machine():
    path = "/sys/kernel/mm/transparent_hugepage/enabled"
    thp = machine.huge_page_items()[0]
    expected = machine.selected(open(path).read()) if os.path.exists(path) else None
    assert thp.data["transparent"] == expected


# Single copy.


def test_readings_from_a_fake_proc(tmp_path):
    root = _tree(tmp_path, _status(yama=2, seccomp=2, cap_eff=1 << cross_memory.CAP_SYS_PTRACE))
    assert cross_memory.read(root) == cross_memory.Readings(yama_scope=2, seccomp=2, cap_sys_ptrace=True)
    root = _tree(tmp_path / "plain", _status(yama=None, cap_eff=0x1FFFEFFFFFF ^ (1 << cross_memory.CAP_SYS_PTRACE)))
    assert cross_memory.read(root) == cross_memory.Readings(yama_scope=None, seccomp=0, cap_sys_ptrace=False)


def test_yama_scope_1_refuses_siblings_with_the_yama_reason(tmp_path):
    readings = cross_memory.read(_tree(tmp_path, _status(yama=1)))
    refused = cross_memory.Probe(errno.EPERM, "process_vm_readv")
    item = cross_memory.item(readings, refused, declared=None)
    assert item.status == "off"
    assert "Yama ptrace_scope=1" in item.why and "EPERM" in item.value
    assert "launcher" in item.fix
    # Declaring the launcher, as fastcomm's set-up does, lets them in.
    declared = cross_memory.Probe(0, "", declared=4242)
    item = cross_memory.item(readings, refused, declared)
    assert item.status == "ok" and "4242" in item.value
    # Refused both ways: still off, with both answers shown.
    item = cross_memory.item(readings, refused, cross_memory.Probe(errno.EPERM, "process_vm_readv", 4242))
    assert item.status == "off" and item.value.count("EPERM") == 2


@pytest.mark.parametrize(
    "scope, seccomp, cap, error, expect",
    [
        (3, 0, False, errno.EPERM, "ptrace_scope=3"),
        (2, 0, False, errno.EPERM, "ptrace_scope=2"),
        (None, 2, False, errno.EPERM, "seccomp"),
        (None, 0, False, errno.ENOSYS, "CONFIG_CROSS_MEMORY_ATTACH"),
        (None, 0, False, errno.ESRCH, "pid namespace"),
        (0, 0, False, errno.EPERM, "not dumpable"),
    ],
)
def test_refusals_are_explained(scope, seccomp, cap, error, expect):
    readings = cross_memory.Readings(scope, seccomp, cap)
    item = cross_memory.item(readings, cross_memory.Probe(error, "process_vm_readv"), None)
    assert item.status == "off" and expect in item.why


def test_without_a_probe_the_readings_predict():
    predicted = cross_memory.item(cross_memory.Readings(3, 0, False), None, None, "--no-probe")
    assert predicted.status == "off" and "ptrace_scope=3" in predicted.why and "not probed" in predicted.value
    assert cross_memory.item(cross_memory.Readings(0, 0, False), None, None).status == "ok"
    # Scope 2 lets a process with CAP_SYS_PTRACE attach.
    assert cross_memory.item(cross_memory.Readings(2, 0, True), None, None).status == "ok"


def test_the_probe_answers_as_the_settings_allow():
    readings = cross_memory.read()
    plain = cross_memory.probe(declare_ptracer=False)
    unrestricted = readings.yama_scope in (None, 0) and readings.seccomp in (None, 0)
    if readings.yama_scope == 3:
        assert not plain.ok and plain.error == errno.EPERM
    elif unrestricted or (readings.cap_sys_ptrace and readings.yama_scope in (1, 2) and readings.seccomp == 0):
        assert plain.ok, plain
    else:
        pytest.skip(f"{readings}: the answer depends on more than these settings")


# Network and environment.


def test_interfaces_are_the_hosts():
    names = [i.name for i in network.interfaces()]
    assert sorted(names) == sorted(name for _, name in socket.if_nameindex())
    lo = [i for i in network.interfaces() if i.name == "lo"]
    assert not lo or (lo[0].up and lo[0].ipv4 == "127.0.0.1")


def test_interfaces_from_a_fake_sys(tmp_path):
    root = _tree(
        tmp_path,
        {
            "sys/class/net/eth0/flags": "0x1003\n",
            "sys/class/net/lo/flags": "0x9\n",
            "sys/class/net/down0/flags": "0x1002\n",
        },
    )
    found = network.interfaces(root, ipv4_of={"eth0": "10.1.2.3", "lo": "127.0.0.1"}.get)
    assert found == [
        network.Interface("down0", None, False),
        network.Interface("eth0", "10.1.2.3", True),
        network.Interface("lo", "127.0.0.1", True),
    ]


def test_gloo_address_verdicts():
    found = [network.Interface("eth0", "10.1.2.3", True), network.Interface("lo", "127.0.0.1", True)]
    loopback = network.gloo_item("", found, "box", "127.0.1.1")
    assert loopback.status == "warn" and "GLOO_SOCKET_IFNAME=eth0" in loopback.fix
    assert network.gloo_item("", found, "box", "10.1.2.3").status == "ok"
    assert network.gloo_item("", found, "box", None).status == "warn"
    assert network.gloo_item("eth0", found, "box", None).status == "ok"
    assert network.gloo_item("lo", found, "box", None).status == "warn"
    down = network.gloo_item("eth0", [network.Interface("eth0", "10.1.2.3", False)], "box", None)
    assert down.status == "warn" and "eth0" in down.why


def test_default_gloo_address_is_one_the_name_resolves_to():
    bound = network.default_gloo_address("localhost")
    assert bound in {a[4][0] for a in socket.getaddrinfo("localhost", None, type=socket.SOCK_STREAM)}


def test_known_variables_are_the_options_fields():
    known = network.known_variables()
    assert len(known) == len(dataclasses.fields(_options.Options))
    assert "FASTCOMM_SHM_SLOT_BYTES" in known and "FASTCOMM_SOCKET_IFNAME" in known


def test_unknown_fastcomm_variables_are_flagged():
    items = {
        i.name: i
        for i in network.environment_items(
            {"FASTCOMM_SHM": "0", "FASTCOMM_SHM_SLOT_BYTE": "4096", "MASTER_ADDR": "h", "HOME": "/x"}
        )
    }
    assert set(items) == {"FASTCOMM_SHM", "FASTCOMM_SHM_SLOT_BYTE", "MASTER_ADDR"}
    assert items["FASTCOMM_SHM"].status == "info"
    assert items["FASTCOMM_SHM_SLOT_BYTE"].status == "warn"
    assert "FASTCOMM_SHM_SLOT_BYTES" in items["FASTCOMM_SHM_SLOT_BYTE"].fix


def test_bad_options_are_refused_with_fastcomms_own_message(monkeypatch):
    monkeypatch.setenv("FASTCOMM_SHM", "2")
    item = network.options_item()
    assert item.status == "off" and "FASTCOMM_SHM" in item.why and "0 or 1" in item.why
    monkeypatch.setenv("FASTCOMM_SHM", "1")
    assert network.options_item().status == "ok"


# Build.


def test_isa_is_what_the_picker_says():
    item = next(i for i in build.items() if i.name == "CPU kernels")
    assert item.data["best"] == _C.best_isa().name and item.data["active"] == _C.active_isa().name
    if _C.best_isa() == _C.Isa.baseline:
        return
    _C.set_isa_cap(_C.Isa.baseline)
    try:
        capped = next(i for i in build.items() if i.name == "CPU kernels")
    finally:
        _C.set_isa_cap(_C.Isa.avx512)
    assert (capped.status, capped.data["active"]) == ("warn", "baseline")


def test_built_for():
    assert build.built_for("2.13.0+cpu", "2.13.0+cpu").status == "ok"
    other = build.built_for("2.13.0+cpu", "2.14.1+cu130")
    assert other.status == "off" and other.fix == _torch_check.REBUILD
    assert build.built_for(None, "2.13.0").status == "info"


# Report and command line.


def test_json_has_every_section_and_field():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(["--json", "--no-probe"]) == 0
    report = json.loads(out.getvalue())
    assert set(report) == {"items", "algorithms"} and report["algorithms"] is None
    assert {i["section"] for i in report["items"]} == {
        "build",
        "machine",
        "single copy",
        "network",
        "environment",
        "algorithms",
    }
    for item in report["items"]:
        assert set(item) == {"section", "name", "status", "value", "why", "fix", "note", "data"}
        assert item["status"] in ("ok", "off", "warn", "info")
    cpus = next(i for i in report["items"] if i["name"] == "CPUs")
    assert cpus["data"]["count"] == os.cpu_count()


def test_text_lists_every_item():
    items = [
        Item("a", "one", "ok", "fine"),
        Item("a", "two", "off", "no", why="because", fix="do this"),
        Item("b", "three", "info", "x", note="n"),
    ]
    assert to_text(items).splitlines() == [
        "== a",
        "  [ok  ] one    fine",
        "  [off ] two    no",
        "                why: because",
        "                fix: do this",
        "",
        "== b",
        "  [info] three  x",
        "                note: n",
    ]
    with pytest.raises(ValueError):
        Item("a", "b", "fine", "c")


def test_bad_arguments_exit_2(capsys):
    assert cli.main(["--world-size", "4", "--hosts", "3"]) == 2
    assert "do not split evenly" in capsys.readouterr().err
    assert cli.main(["--world-size", "2", "--collectives", "all_reduce,allreduce"]) == 2
    assert cli.main(["--world-size", "2", "--max-bytes", "lots"]) == 2


# The algorithm table.


def test_layouts():
    assert algorithms.layout(4, hosts=2) == algorithms.Layout(4, 2)
    assert algorithms.layout(4, ranks_per_host=4) == algorithms.Layout(4, 0)
    assert algorithms.layout(3, ranks_per_host=2).hosts == 2
    assert algorithms.layout(2).hosts == 1
    with pytest.raises(ValueError):
        algorithms.layout(4, hosts=3)


def test_sizes_follow_the_bench():
    assert algorithms.SIZES[0] == 8 and algorithms.SIZES[-1] == 64 << 20
    assert all(b == 4 * a for a, b in zip(algorithms.SIZES[1:], algorithms.SIZES[2:]))
    assert algorithms.count_of("all_reduce", 8, 4, 4) == 2
    assert algorithms.count_of("all_gather", 8, 4, 4) == 0  # 2 elements do not split over 4 ranks
    assert algorithms.count_of("all_gather", 64, 4, 3) == 15


def _cell(size, steady, first=None):
    return {"bytes": size, "steady": steady, "first": first if first is not None else steady}


def _run(
    rows, config=None, engine=2, host_of_rank=(), registered=(), p2p=None, huge=(0, 0), warnings=(), ranks_per_host=0
):
    base = {
        "shm": True,
        "shm_allreduce_single_copy_min_bytes": 32768,
        "shm_allreduce_single_copy_max_bytes": 1 << 62,
        "p2p_single_copy_bytes": 65536,
        "shm_arena_min_bytes": 8192,
        "cuda_unavailable_reason": "no NCCL",
    }
    rank = {
        "rank": 0,
        "rows": rows,
        "registered": list(registered),
        "engine_local_size": engine,
        "host_of_rank": list(host_of_rank),
        "config": {**base, **(config or {})},
        "usable_cpus": 2,
        "p2p": p2p,
        "huge_pages": {"collapsed_buffers": huge[0], "refused_buffers": huge[1]},
        "warnings": list(warnings),
    }
    lay = {"world_size": 2, "ranks_per_host": ranks_per_host, "hosts": 2 if ranks_per_host else 1}
    return {"layout": lay, "dtype": "float32", "sizes": [], "ranks": [rank, dict(rank, rank=1)]}


def _notes(run, environ=None) -> dict[str, Item]:
    return {i.name: i for i in algorithm_report.notes(run, environ or {})}


def test_table_ranges_join_sizes_that_ran_alike():
    row = [
        {"bytes": 8, "skipped": "too small to split over the ranks"},
        _cell(16, [["a", 1]]),
        _cell(64, [["a", 1]]),
        _cell(256, [["b", 1]], first=[["c", 1]]),
        _cell(1024, [["avg_via_sum", 1], ["b", 2]]),
    ]
    assert algorithm_report.ranges(row) == [
        ("8 B", "(too small to split over the ranks)"),
        ("16 B .. 64 B", "a"),
        ("256 B", "b   (first call: c)"),
        ("1 KiB", "avg_via_sum > b x2"),
    ]
    assert algorithm_report.ranges([_cell(0, [["barrier_shm", 1]])]) == [("-", "barrier_shm")]
    assert algorithm_report.size_text(64 << 20) == "64 MiB" and algorithm_report.size_text(24) == "24 B"


def test_single_copy_notes():
    on = _run(
        {
            "all_reduce": [
                _cell(1024, [["allreduce_shm_oneshot", 1]]),
                _cell(1 << 20, [["allreduce_shm_single_copy", 1]]),
            ]
        }
    )
    assert _notes(on)["single-copy all_reduce"].status == "ok"
    refused = _run(
        {"all_reduce": [_cell(1 << 20, [["allreduce_shm_twoshot", 1]], first=[["allreduce_shm_single_copy", 1]])]}
    )
    assert "refused" in _notes(refused)["single-copy all_reduce"].value
    auto_off = _run(
        {"all_reduce": [_cell(1 << 20, [["allreduce_shm_twoshot", 1]])]},
        config={"shm_allreduce_single_copy_min_bytes": 0},
    )
    item = _notes(auto_off)["single-copy all_reduce"]
    assert item.status == "off" and "automatic" in item.why and "2 ranks, 2 CPUs" in item.why
    item = _notes(auto_off, {"FASTCOMM_SHM_ALLREDUCE_SINGLE_COPY_MIN_BYTES": "0"})["single-copy all_reduce"]
    assert item.why == "FASTCOMM_SHM_ALLREDUCE_SINGLE_COPY_MIN_BYTES=0"


def test_engine_and_p2p_notes():
    off = _notes(_run({}, config={"shm": False}, engine=0))
    assert (off["shared memory"].status, off["shared memory"].why) == ("off", "FASTCOMM_SHM=0")
    failed = _notes(_run({}, engine=0, warnings=["fastcomm: shared-memory engine disabled for this group: x"]))
    assert "disabled" in failed["shared memory"].why
    per_host = _notes(_run({}, engine=0, ranks_per_host=1))
    assert "one rank per host" in per_host["shared memory"].why
    assert "single-copy all_reduce" not in per_host
    hier = _notes(_run({}, host_of_rank=[0, 1]))
    assert hier["shared memory"].status == "ok" and "single-copy all_reduce" not in hier
    p2p = _notes(_run({}, registered=["p2p_shm"], p2p={"sent": 4, "sent_single_copy": 0, "single_copy_refused": 3}))
    assert p2p["single-copy send/recv"].status == "off"
    p2p = _notes(_run({}, registered=["p2p_shm"], p2p={"sent": 4, "sent_single_copy": 2, "single_copy_refused": 0}))
    assert p2p["single-copy send/recv"].status == "ok"
    huge = _notes(_run({}, huge=(0, 2)))["huge pages for single copy"]
    assert huge.status == "warn" and huge.data == {"collapsed_buffers": 0, "refused_buffers": 4}


def test_rows_run_by_gloo_and_rank_differences():
    run = _run({"gather": [_cell(64, [["gloo_fallback", 1]])], "broadcast": [_cell(64, [["broadcast_shm", 1]])]})
    notes = _notes(run)
    assert notes["run by Gloo"].value == "gather"
    run["ranks"][1] = dict(
        run["ranks"][1],
        rows={"gather": [_cell(64, [["gloo_fallback", 1]])], "broadcast": [_cell(64, [["gloo_fallback", 1]])]},
    )
    assert _notes(run)["rank 1"].value == "launched other algorithms for ['broadcast']"
