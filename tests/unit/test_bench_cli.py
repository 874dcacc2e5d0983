"""fastcomm-bench: argument parsing, nccl-tests formatting, busbw maths, #wrong detection.

Subprocesses run outside the checkout (cwd=tmp_path) so `python -m fastcomm.bench` imports the
installed fastcomm, not the source tree (whose in-place _C may be built for another torch)."""

import datetime
import json
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist

from fastcomm.bench import cli, output
from fastcomm.bench.collectives import COLLECTIVES, count_wrong, input_pattern, reduce_exact
from fastcomm.bench.harness import Measurement, Row, SweepConfig, exit_status, summary, sweep


@pytest.mark.parametrize(
    "text,value", [("8", 8), ("64K", 65536), ("32M", 32 << 20), ("1G", 1 << 30), ("4k", 4096), ("0", 0)]
)
def test_parse_size(text, value):
    assert cli.parse_size(text) == value


@pytest.mark.parametrize("text", ["-5", "abc", "1.5M", "", "M"])
def test_parse_size_rejects(text):
    with pytest.raises(cli.UsageError):
        cli.parse_size(text)


def test_sweep_sizes_factor_and_step():
    assert cli.sizes(8, 64, 2, 0) == [8, 16, 32, 64]
    assert cli.sizes(1 << 20, 3 << 20, 1, 1 << 20) == [1 << 20, 2 << 20, 3 << 20]
    assert cli.sizes(32 << 20, 32 << 20, 1, 1 << 20) == [32 << 20]  # nccl-tests' default: one size


def test_defaults_follow_nccl_tests():
    o = cli.parse_args(["all_reduce"], environ={})
    assert (o.minbytes, o.maxbytes, o.stepfactor, o.stepbytes) == (32 << 20, 32 << 20, 1, 1 << 20)
    assert (o.iters, o.warmup, o.check, o.average, o.blocking, o.root) == (20, 1, 1, 1, False, 0)
    assert (o.dtypes, o.ops, o.backend, o.device, o.nproc) == (("float",), ("sum",), "fastcomm", "cpu", 2)
    o = cli.parse_args(["all_gather", "-d", "all"], environ={})
    assert o.ops == ("none",) and len(o.dtypes) == 8
    o = cli.parse_args(["reduce", "-o", "all", "-r", "1"], environ={})
    assert o.ops == ("sum", "prod", "min", "max", "avg") and o.root == 1
    o = cli.parse_args(["broadcast"], environ={"RANK": "0", "WORLD_SIZE": "4"})
    assert o.under_torchrun and o.nproc == 4
    o = cli.parse_args(["broadcast", "--nproc", "2", "-r", "3"], environ={"RANK": "1", "WORLD_SIZE": "4"})
    assert o.nproc == 4 and o.root == 3  # the launcher's ranks win


@pytest.mark.parametrize(
    "argv,message",
    [
        (["all_reduce", "-b", "1M", "-e", "1K"], "larger than -e/--maxbytes"),
        (["all_reduce", "-b", "-8"], "negative"),
        (["all_reduce", "-e", "lots"], "cannot parse size"),
        (["allreduce"], "unknown collective 'allreduce'"),
        (["all_reduce", "-d", "float8"], "unknown datatype 'float8'"),
        (["all_reduce", "-o", "xor"], "unknown op 'xor'"),
        (["all_reduce", "--backend", "ucc"], "unknown backend 'ucc'"),
        (["all_gather", "-o", "max"], "invalid for all_gather"),
        (["all_reduce", "--nproc", "0"], "--nproc must be >= 1"),
        (["broadcast", "-r", "2"], "-r/--root must be in 0..1"),
        (["all_reduce", "-n", "0"], "-n/--iters must be >= 1"),
        (["all_reduce", "-a", "4"], "-a/--average must be in 0..3"),
        (["all_reduce", "--compare", "fastcomm"], "is the backend under test itself"),
        (["all_reduce", "--backend", "nccl", "--device", "cpu"], "needs --device cuda"),
        (["all_reduce", "--json", "/nonexistent-dir/x.json"], "folder does not exist"),
        (["all_reduce", "--bogus"], "unrecognized arguments"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(argv, message, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("fastcomm-bench: error: ") and message in err, err


def test_format_row_matches_nccl_tests_layout():
    row = Row(1048576, 262144, "float", "sum", -1, None, Measurement(123.456, 8.49, 8.49, 0))
    line = output.format_row(row)
    assert (
        line
        == "     1048576        262144     float     sum      -1      N/A     N/A     N/A    N/A    123.5    8.49    8.49      0"
    )
    assert (
        output.format_time(12.3456) == "  12.35"
        and output.format_time(123.45) == "  123.5"
        and output.format_time(12345.6) == "  12346"
    )
    head = output.header(["title"])
    assert (
        head[-2].split() == ["#", "size", "count", "type", "redop", "root"] + ["time", "algbw", "busbw", "#wrong"] * 2
    )
    ok = output.footer([row])
    assert ok[0] == "# Out of bounds values : 0 OK" and ok[1].startswith("# Avg bus bandwidth    : 8.49")
    bad = output.footer([Row(8, 2, "float", "sum", -1, Measurement(1, 1, 1, 3), None)])
    assert bad[0] == "# Out of bounds values : 3 FAILED"


def test_bus_bandwidth_factors():
    n = 4
    expected = {
        "all_reduce": 1.5,
        "all_gather": 0.75,
        "reduce_scatter": 0.75,
        "all_to_all": 0.75,
        "broadcast": 1.0,
        "reduce": 1.0,
        "sendrecv": 1.0,
        "gather": 0.75,
        "scatter": 0.75,
    }
    assert {name: c.bus_factor(n) for name, c in COLLECTIVES.items()} == expected
    wrong, avg = summary([Row(8, 2, "float", "sum", -1, Measurement(1, 2.0, 3.0, 0), Measurement(1, 2.0, 5.0, 0))])
    assert (wrong, avg) == (0, 4.0)


def test_count_wrong_and_exact_references():
    parts = [input_pattern(r, 50, torch.int8, "prod", 3) for r in range(3)]
    prod = reduce_exact(parts, "prod", torch.int8)
    assert set(prod.tolist()) <= {2, 3}  # one rank contributes 2 or 3, the others 1
    total = reduce_exact([input_pattern(r, 50, torch.float16, "sum", 3) for r in range(3)], "sum", torch.float16)
    corrupted = total.clone()
    corrupted[7] += 1
    assert count_wrong(total, total, "sum") == 0 and count_wrong(corrupted, total, "sum") == 1
    avg = reduce_exact([input_pattern(r, 50, torch.bfloat16, "avg", 3) for r in range(3)], "avg", torch.bfloat16)
    assert count_wrong(avg, avg, "avg") == 0
    assert count_wrong(avg * 1.1, avg, "avg") == 50


@pytest.fixture
def one_rank():
    import fastcomm  # noqa: F401

    dist.init_process_group(
        "fastcomm", store=dist.HashStore(), rank=0, world_size=1, timeout=datetime.timedelta(seconds=30)
    )
    yield dist.new_group(backend="gloo")
    dist.destroy_process_group()


def _cfg(collective, ops=("sum",), dtypes=("float", "int8")):
    return SweepConfig(collective, (8, 100), dtypes, ops, 0, 2, 1, 1, 1, False, "cpu")


@pytest.mark.parametrize("collective", sorted(COLLECTIVES))
def test_sweep_single_rank_is_clean(one_rank, collective):
    ops = ("sum", "prod", "min", "max", "avg") if COLLECTIVES[collective].reduces else ("none",)
    rows = sweep(_cfg(collective, ops), {"fastcomm": dist.group.WORLD}, one_rank)
    assert rows["fastcomm"] and exit_status(rows) == 0
    for r in rows["fastcomm"]:
        for m in (r.out_of_place, r.in_place):
            assert m is None or (m.wrong == 0 and m.time_us > 0 and m.algbw >= 0)


def test_sweep_catches_a_corrupted_result(one_rank):
    rows = sweep(_cfg("all_reduce"), {"fastcomm": dist.group.WORLD}, one_rank, prepare=_corrupted_all_reduce)
    assert exit_status(rows) == 1
    assert all(r.in_place.wrong == r.count for r in rows["fastcomm"])  # every element caught


def _corrupted_all_reduce(count, dtype, rank, n, op, root, in_place, device):
    """The real all_reduce spec, with every result element off by one afterwards."""
    buffers = COLLECTIVES["all_reduce"].prepare(count, dtype, rank, n, op, root, in_place, device)
    run = buffers.run

    def run_then_corrupt(group, async_op):
        for w in run(group, False):
            w.wait()
        buffers.result.add_(1)
        return []

    buffers.run = run_then_corrupt
    return buffers


@pytest.mark.parametrize("nproc", [2, 3])
def test_cli_end_to_end(tmp_path, nproc):
    path = tmp_path / "out.json"
    cmd = [
        sys.executable,
        "-m",
        "fastcomm.bench",
        "reduce_scatter",
        "-b",
        "8",
        "-e",
        "1K",
        "-f",
        "4",
        "-n",
        "3",
        "-o",
        "all",
        "-d",
        "all",
        "--nproc",
        str(nproc),
        "--json",
        str(path),
        "--compare",
        "gloo",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode in (0, 1), out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert sum(line.startswith("# Out of bounds values : 0 OK") for line in lines) == 1, out.stdout  # fastcomm's
    data = json.loads(path.read_text())
    assert set(data["results"]) == {"fastcomm", "gloo"}
    assert data["results"]["fastcomm"]["summary"]["ok"]
    rows = data["results"]["fastcomm"]["rows"]
    assert len(rows) == 8 * 5 * 4  # dtypes x ops x sizes
    assert all(r["out_of_place"]["wrong"] == 0 and r["in_place"]["wrong"] == 0 for r in rows)
    assert all(r["count"] % nproc == 0 for r in rows)  # split per rank
    assert "side by side: fastcomm vs gloo" in out.stdout
    # Gloo refuses AVG on integer types: those rows say so and the run fails
    gloo = data["results"]["gloo"]
    failed = [r for r in gloo["rows"] if r["in_place"]["error"]]
    assert failed and all(r["redop"] == "avg" and r["type"] in ("int8", "uint8", "int32", "int64") for r in failed)
    assert out.returncode == 1 and "Failed calls" in out.stdout


def test_cli_under_torchrun(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        "--master_addr=127.0.0.1",
        f"--master_port={port}",
        "-m",
        "fastcomm.bench",
        "sendrecv",
        "-b",
        "64",
        "-e",
        "64",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "fastcomm-bench sendrecv: backend fastcomm, device cpu, 2 ranks" in out.stdout
    assert out.stdout.count("# Out of bounds values : 0 OK") == 1  # only rank 0 prints


def test_plot_and_json_files(tmp_path):
    pytest.importorskip("matplotlib")
    png, js = tmp_path / "bw.png", tmp_path / "bw.json"
    cmd = [
        sys.executable,
        "-m",
        "fastcomm.bench",
        "all_gather",
        "-b",
        "64",
        "-e",
        "64K",
        "-f",
        "4",
        "-n",
        "2",
        "--compare",
        "gloo",
        "--plot",
        str(png),
        "--json",
        str(js),
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    data = json.loads(js.read_text())
    assert [r["size"] for r in data["results"]["gloo"]["rows"]] == [64, 256, 1024, 4096, 16384, 65536]
