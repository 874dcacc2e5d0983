"""The benchmark scripts run end to end (tiny sizes; the times are not checked,
only that both backends were timed, each size's result was exact on both, and
the table is complete)."""
import os
import re
import subprocess
import sys

import pytest

BENCHMARKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks")


@pytest.mark.parametrize("api, op, extra", [
    ("dist", "all_reduce", []),
    ("cpp", "sendrecv", []),
    ("process_group", "sendrecv", ["--nproc", "3"]),
    ("process_group", "reduce_scatter", []),
    ("cpp", "all_to_all", []),
    ("cpp", "all_reduce", ["--nproc", "4", "--ranks-per-host", "2"]),
])
def test_allreduce_vs_gloo_prints_a_row_per_size(api, op, extra):
    out = subprocess.run(
        [sys.executable, os.path.join(BENCHMARKS, "allreduce_vs_gloo.py"), "--api", api, "--op", op,
         "--sizes", "8,4K", "--seconds", "0.02", "--rounds", "1", "--warmup", "1", *extra],
        capture_output=True, text=True, timeout=240,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    rows = re.findall(r"^\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+[\d.]+\s+[\d.]+\s+([\d.]+)$", out.stdout, re.M)
    nproc = int(extra[1]) if extra else 2
    smallest = 4 * nproc if op in ("reduce_scatter", "all_to_all") else 8  # split ops: a float per rank at least
    assert [int(r[0]) for r in rows] == [smallest, 4096], out.stdout
    assert "WRONG" not in out.stdout
    assert all(float(r[1]) > 0 and float(r[2]) > 0 for r in rows), out.stdout
    assert f"api {api}" in out.stdout


def test_pipeline_vs_gloo_prints_both_step_times():
    out = subprocess.run(
        [sys.executable, os.path.join(BENCHMARKS, "pipeline_vs_gloo.py"), "--nproc", "3", "--widths", "16",
         "--microbatches", "4", "--rows", "2", "--seconds", "0.05", "--rounds", "1", "--warmup", "1"],
        capture_output=True, text=True, timeout=240,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    row = re.search(r"^\s+16\s+128\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)$", out.stdout, re.M)
    assert row and float(row.group(1)) > 0 and float(row.group(2)) > 0, out.stdout


def test_sync_convergence_prints_every_configuration():
    out = subprocess.run(
        [sys.executable, os.path.join(BENCHMARKS, "sync_convergence.py"), "--steps", "16", "--period", "4"],
        capture_output=True, text=True, timeout=240,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    rows = re.findall(r"^(teacher|markov)\s+(.+?)\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)$",
                      out.stdout, re.M)
    assert len(rows) == 12, out.stdout
    ratio = {(task, name): float(r) for task, name, _, _, _, r, _ in rows}
    assert ratio[("teacher", "full 4")] == 4.0 and ratio[("markov", "full 4")] == 4.0, out.stdout


@pytest.mark.parametrize("layout", [["--nproc", "4", "--ranks-per-host", "2"], ["--nproc", "2", "--arena"]],
                         ids=["two-hosts", "arena"])
def test_fsdp2_vs_gloo_prints_both_step_times(layout):
    """Two simulated hosts (FSDP2's all_gather and reduce_scatter run hierarchical), and
    one host with fastcomm's buffers in its arena: both copies agree after one step (the
    script exits 1 otherwise)."""
    out = subprocess.run(
        [sys.executable, os.path.join(BENCHMARKS, "fsdp2_vs_gloo.py"), *layout,
         "--layers", "2", "--width", "64", "--batch", "4", "--seconds", "0.1", "--rounds", "1", "--warmup", "1"],
        capture_output=True, text=True, timeout=240,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    row = re.search(r"^\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.e+-]+)$", out.stdout, re.M)
    assert row and float(row.group(1)) > 0 and float(row.group(2)) > 0, out.stdout
    assert float(row.group(4)) <= 1e-4, out.stdout


def test_multihost_benchmark_prints_every_row(tmp_path):
    """benchmarks/multihost.py end to end on one tiny size and one rate (needs root)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "multihost"))
    import namespace_hosts

    why_not = namespace_hosts.available()
    if why_not:
        pytest.skip(f"namespace hosts: {why_not}")
    out = subprocess.run(
        [sys.executable, os.path.join(BENCHMARKS, "multihost.py"), "--rates", "1gbit", "-b", "64K", "-e", "64K",
         "-n", "1", "--fsdp2=--layers 2 --width 64 --batch 4 --seconds 0.1 --rounds 1 --warmup 1",
         "--json", str(tmp_path / "raw.json")],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    rows = re.findall(r"^\| 1gbit \| (\w+) .*\| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|$", out.stdout, re.M)
    assert [r[0] for r in rows] == ["all_reduce", "all_gather", "reduce_scatter", "FSDP2"], out.stdout
    assert all(float(r[1]) > 0 and float(r[2]) > 0 for r in rows), out.stdout


def test_ddp_training_prints_every_configuration_and_a_plot(tmp_path):
    plot = tmp_path / "training.svg"
    out = subprocess.run(
        [sys.executable, os.path.join(BENCHMARKS, "ddp_training.py"), "--scale", "0.05", "--seconds", "0.05",
         "--rounds", "1", "--warmup", "1", "--plot", str(plot)],
        capture_output=True, text=True, timeout=240,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    rows = re.findall(r"^(cnn|transformer)\s+[\d.]+M\s+(\S+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)%\s+([\d.]+)$", out.stdout, re.M)
    configs = ["gloo", "gloo+fp16", "fastcomm", "fastcomm+fp16", "fastcomm+powersgd"]
    assert [(m, c) for m, c, *_ in rows] == [(m, c) for m in ("cnn", "transformer") for c in configs], out.stdout
    assert all(float(r[2]) > 0 for r in rows) and [float(r[5]) for r in rows][0] == 1.0, out.stdout
    svg = plot.read_text()
    assert svg.startswith("<svg") and svg.count("<rect") >= 2 * 6 + 6, svg[:200]


@pytest.mark.parametrize("collective, sizes, expected", [("all_reduce", "8,4K", [8, 4096]),
                                                       ("all_gather", "12,6K", [12, 6144]),
                                                       ("reduce_scatter", "12,6K", [12, 6144])])
def test_arena_vs_ordinary_prints_a_row_per_size(collective, sizes, expected):
    """Each collective's run checks its results itself (exact inputs) before timing."""
    out = subprocess.run(
        [sys.executable, os.path.join(BENCHMARKS, "arena_vs_ordinary.py"), "--nproc", "3", "--sizes", sizes,
         "--seconds", "0.02", "--rounds", "1", "--warmup", "1", "--collective", collective],
        capture_output=True, text=True, timeout=240,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith(f"# {collective} sum float32, 3 ranks"), out.stdout
    rows = re.findall(r"^\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s", out.stdout, re.M)
    assert [int(r[0]) for r in rows] == expected and all(float(x) > 0 for r in rows for x in r[1:]), out.stdout


@pytest.mark.parametrize("api,round_ms", [("cpp", 0), ("process_group", 0), ("cpp", 40)])
def test_peers_run_prints_median_mean_and_tail_tables(api, round_ms):
    """benchmarks/peers/run.py with the libraries CI has (fastcomm, Gloo): the median, mean and
    90th percentile tables, a row per size, Gloo's ratio to fastcomm in each, the spreads in
    brackets (one round: its round-to-round spread is 1); the workers check each size's result.
    With --round-ms every library takes more than --iters samples where --iters take less time
    (3 samples of 8 B and 64 KiB take well under 40 ms here), and says how many."""
    out = subprocess.run(
        [sys.executable, os.path.join(BENCHMARKS, "peers", "run.py"), "--libraries", "fastcomm,gloo", "--api", api,
         "--sizes", "8,64K", "--rounds", "1", "--iters", "3", "--warmup", "1", "--round-ms", str(round_ms)],
        capture_output=True, text=True, timeout=240,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    counts = re.findall(r"^# samples per round \(fewest-most\): fastcomm (\d+)-(\d+) (\d+)-(\d+); "
                        r"gloo (\d+)-(\d+) (\d+)-(\d+)$", out.stdout, re.M)
    if round_ms:
        assert "x at least 3 samples and ~40 ms per size" in out.stdout and len(counts) == 1, out.stdout
        fewest_most = [int(c) for c in counts[0]]
        assert all(n > 3 for n in fewest_most) and fewest_most[0::2] == fewest_most[1::2], out.stdout  # one round
    else:
        assert "x 3 samples;" in out.stdout and not counts, out.stdout
    median_text, rest = out.stdout.split("# mean us", 1)
    mean_text, tail_text = rest.split("# 90th percentile us", 1)
    with_spread = r"^\s+(\d+)\s+([\d.]+) \(([\d.]+)\)\s+([\d.]+) \(([\d.]+)\) ([\d.]+)x$"
    medians = re.findall(with_spread, median_text, re.M)
    tails = re.findall(with_spread, tail_text, re.M)
    means = re.findall(r"^\s+(\d+)\s+([\d.]+)\s+([\d.]+) ([\d.]+)x$", mean_text, re.M)
    assert all(float(r[2]) >= 1 and float(r[4]) >= 1 for r in medians), out.stdout  # p90 / p10
    assert all(r[2] == r[4] == "1.00" for r in tails), out.stdout  # one round
    for rows in ([(r[0], r[1], r[3], r[5]) for r in medians], means, [(r[0], r[1], r[3], r[5]) for r in tails]):
        assert [int(r[0]) for r in rows] == [8, 65536], out.stdout
        for _, fastcomm_us, gloo_us, ratio in rows:
            mine, theirs = float(fastcomm_us), float(gloo_us)  # printed to 0.05 us
            assert mine > 0 and theirs > 0, out.stdout
            assert (theirs - 0.05) / (mine + 0.05) <= float(ratio) + 0.005 <= (theirs + 0.05) / (mine - 0.05) + 0.01, out.stdout
    assert f"through --api {api}" in out.stdout


def test_peers_timeline_prints_each_window_size():
    """benchmarks/peers/timeline.py: one job's samples cut into windows of each size asked for,
    the window medians' range (min <= max, ratio >= 1), then the first size's medians in order."""
    out = subprocess.run(
        [sys.executable, os.path.join(BENCHMARKS, "peers", "timeline.py"), "--size", "64K", "--samples", "400",
         "--window", "20,100", "--show", "5"],
        capture_output=True, text=True, timeout=240,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    ranges = re.findall(r"^# (\d+) windows of (\d+) samples .*: medians ([\d.]+)-([\d.]+) us, max/min ([\d.]+)$",
                        out.stdout, re.M)
    assert [(int(r[0]), int(r[1])) for r in ranges] == [(20, 20), (4, 100)], out.stdout
    for _, _, low, high, ratio in ranges:
        assert 0 < float(low) <= float(high) and float(ratio) >= 1, out.stdout
    medians = out.stdout.strip().splitlines()[-1].split()
    assert len(medians) == 5 and all(float(m) > 0 for m in medians), out.stdout


def test_real_models_record_and_doc_table(tmp_path):
    """The CNN (no transformers needed) beside a busy process: every configuration
    timed, the neighbour's work read, and the record's table written into a doc."""
    # as benchmarks/real_models.py names them (the module is not imported here: it is the script under test)
    configs = ["local", "noop", "gloo", "gloo+fp16", "fastcomm", "fastcomm+view", "fastcomm+fp16"]
    begin, end = "<!-- real_models table: generated by benchmarks/real_models.py --table -->", "<!-- end of table -->"

    record = tmp_path / "record.json"
    out = subprocess.run(
        [sys.executable, os.path.join(BENCHMARKS, "real_models.py"), "--models", "cnn", "--conditions", "busy",
         "--steps", "1", "--warmup", "1", "--record", str(record)],
        capture_output=True, text=True, timeout=600,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    import json

    data = json.loads(record.read_text())
    (row,) = data["conditions"][0]["rows"]
    assert list(row["step_s"]) == configs and all(t > 0 for t in row["step_s"].values()), row
    assert all(rate > 0 for rate in row["neighbour_work_per_s"].values()), row
    doc = tmp_path / "doc.md"
    doc.write_text(f"# title\n{begin}\nold\n{end}\ntail\n")
    subprocess.run([sys.executable, os.path.join(BENCHMARKS, "real_models.py"), "--table", str(record), "--doc",
                    str(doc)], check=True, timeout=120)
    text = doc.read_text()
    assert "old" not in text and text.endswith(f"{end}\ntail\n") and text.count("| cnn (30M) |") == len(configs), text
