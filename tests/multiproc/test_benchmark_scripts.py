"""The benchmark scripts run end to end (tiny sizes; the times are not checked,
only that both backends were timed, each size's result was exact on both, and
the table is complete), and each writes its record (benchmarks/results_record.py's
schema, a row per case, the command relative to the repository) where --record
says: never into benchmarks/results/ from here."""

import json
import os
import re
import subprocess
import sys

import pytest

BENCHMARKS = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks"))
sys.path.insert(0, BENCHMARKS)
import results_record  # noqa: E402  (pure Python: no torch at import)


def _record(path, name: str, script: str) -> dict:
    """The record at `path`: schema 1, of `name`, its command run from the repository root."""
    record = json.loads(path.read_text())
    assert results_record.problems(record) == [], record
    assert record["benchmark"] == name and record["command"][:2] == ["python", f"benchmarks/{script}"], record
    assert "--record" not in record["command"] and record["versions"]["fastcomm"], record
    return record


def _positive(rows: list[dict], *keys: str) -> bool:
    return all(isinstance(row[k], float) and row[k] > 0 for row in rows for k in keys)


@pytest.mark.parametrize(
    "api, op, extra",
    [
        ("dist", "all_reduce", []),
        ("cpp", "sendrecv", []),
        ("process_group", "sendrecv", ["--nproc", "3"]),
        ("process_group", "reduce_scatter", []),
        ("cpp", "all_to_all", []),
        ("cpp", "all_reduce", ["--nproc", "4", "--ranks-per-host", "2"]),
    ],
)
def test_allreduce_vs_gloo_prints_a_row_per_size(api, op, extra, tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            os.path.join(BENCHMARKS, "allreduce_vs_gloo.py"),
            "--api",
            api,
            "--op",
            op,
            "--sizes",
            "8,4K",
            "--seconds",
            "0.02",
            "--rounds",
            "1",
            "--warmup",
            "1",
            *extra,
            "--record",
            str(tmp_path / "r.json"),
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    rows = re.findall(r"^\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+[\d.]+\s+[\d.]+\s+([\d.]+)$", out.stdout, re.M)
    nproc = int(extra[1]) if extra else 2
    smallest = 4 * nproc if op in ("reduce_scatter", "all_to_all") else 8  # split ops: a float per rank at least
    assert [int(r[0]) for r in rows] == [smallest, 4096], out.stdout
    assert "WRONG" not in out.stdout
    assert all(float(r[1]) > 0 and float(r[2]) > 0 for r in rows), out.stdout
    assert f"api {api}" in out.stdout
    record = _record(tmp_path / "r.json", "allreduce_vs_gloo", "allreduce_vs_gloo.py")
    assert record["settings"]["op"] == op and record["settings"]["nproc"] == nproc
    assert [r["bytes"] for r in record["results"]] == [smallest, 4096]
    assert _positive(record["results"], "fastcomm_s", "gloo_s")
    assert all(r["wrong_fastcomm"] == r["wrong_gloo"] == 0 for r in record["results"])


def test_pipeline_vs_gloo_prints_both_step_times(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            os.path.join(BENCHMARKS, "pipeline_vs_gloo.py"),
            "--nproc",
            "3",
            "--widths",
            "16",
            "--microbatches",
            "4",
            "--rows",
            "2",
            "--seconds",
            "0.05",
            "--rounds",
            "1",
            "--warmup",
            "1",
            "--record",
            str(tmp_path / "r.json"),
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    row = re.search(r"^\s+16\s+128\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)$", out.stdout, re.M)
    assert row and float(row.group(1)) > 0 and float(row.group(2)) > 0, out.stdout
    (result,) = _record(tmp_path / "r.json", "pipeline_vs_gloo", "pipeline_vs_gloo.py")["results"]
    assert result["width"] == 16 and result["message_bytes"] == 128 and _positive([result], "fastcomm_s", "gloo_s")


def test_sync_convergence_prints_every_configuration(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            os.path.join(BENCHMARKS, "sync_convergence.py"),
            "--steps",
            "16",
            "--period",
            "4",
            "--record",
            str(tmp_path / "r.json"),
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    rows = re.findall(
        r"^(teacher|markov)\s+(.+?)\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)$", out.stdout, re.M
    )
    assert len(rows) == 12, out.stdout
    ratio = {(task, name): float(r) for task, name, _, _, _, r, _ in rows}
    assert ratio[("teacher", "full 4")] == 4.0 and ratio[("markov", "full 4")] == 4.0, out.stdout
    recorded = _record(tmp_path / "r.json", "sync_convergence", "sync_convergence.py")["results"]
    assert [(r["task"], r["configuration"], r["sent_bytes"]) for r in recorded] == [
        (task, name, int(sent)) for task, name, _, _, sent, _, _ in rows
    ]
    sent = {(r["task"], r["configuration"]): r["sent_bytes"] for r in recorded}
    assert sent[("teacher", "ddp")] == 4 * sent[("teacher", "full 4")] > 0, sent
    assert _positive(recorded, "loss", "step_s")


@pytest.mark.parametrize(
    "layout", [["--nproc", "4", "--ranks-per-host", "2"], ["--nproc", "2", "--arena"]], ids=["two-hosts", "arena"]
)
def test_fsdp2_vs_gloo_prints_both_step_times(layout, tmp_path):
    """Two simulated hosts (FSDP2's all_gather and reduce_scatter run hierarchical), and
    one host with fastcomm's buffers in its arena: both copies agree after one step (the
    script exits 1 otherwise)."""
    out = subprocess.run(
        [
            sys.executable,
            os.path.join(BENCHMARKS, "fsdp2_vs_gloo.py"),
            *layout,
            "--layers",
            "2",
            "--width",
            "64",
            "--batch",
            "4",
            "--seconds",
            "0.1",
            "--rounds",
            "1",
            "--warmup",
            "1",
            "--record",
            str(tmp_path / "r.json"),
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    row = re.search(r"^\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.e+-]+)$", out.stdout, re.M)
    assert row and float(row.group(1)) > 0 and float(row.group(2)) > 0, out.stdout
    assert float(row.group(4)) <= 1e-4, out.stdout
    (result,) = _record(tmp_path / "r.json", "fsdp2_vs_gloo", "fsdp2_vs_gloo.py")["results"]
    assert result["params"] == 2 * (64 * 64 + 64) and result["nproc"] == int(layout[1])
    assert _positive([result], "fastcomm_s", "gloo_s") and result["worst_relative_difference"] <= 1e-4


def test_multihost_benchmark_prints_every_row(tmp_path):
    """benchmarks/multihost.py end to end on one tiny size and one rate (needs root)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "multihost"))
    import namespace_hosts

    why_not = namespace_hosts.available()
    if why_not:
        pytest.skip(f"namespace hosts: {why_not}")
    out = subprocess.run(
        [
            sys.executable,
            os.path.join(BENCHMARKS, "multihost.py"),
            "--rates",
            "1gbit",
            "-b",
            "64K",
            "-e",
            "64K",
            "-n",
            "1",
            "--fsdp2=--layers 2 --width 64 --batch 4 --seconds 0.1 --rounds 1 --warmup 1",
            "--json",
            str(tmp_path / "raw.json"),
            "--record",
            str(tmp_path / "r.json"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    rows = re.findall(r"^\| 1gbit \| (\w+) .*\| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|$", out.stdout, re.M)
    assert [r[0] for r in rows] == ["all_reduce", "all_gather", "reduce_scatter", "FSDP2"], out.stdout
    assert all(float(r[1]) > 0 and float(r[2]) > 0 for r in rows), out.stdout
    recorded = _record(tmp_path / "r.json", "multihost", "multihost.py")["results"]
    assert [(r["link"], r["what"], r["bytes"]) for r in recorded] == [
        ("1gbit", c, 65536) for c in ("all_reduce", "all_gather", "reduce_scatter")
    ] + [("1gbit", "FSDP2 step", None)]
    assert _positive(recorded, "fastcomm_s", "gloo_s")


def test_ddp_training_prints_every_configuration_and_renders_a_plot(tmp_path):
    results = tmp_path / "results"
    out = subprocess.run(
        [
            sys.executable,
            os.path.join(BENCHMARKS, "ddp_training.py"),
            "--scale",
            "0.05",
            "--seconds",
            "0.05",
            "--rounds",
            "1",
            "--warmup",
            "1",
            "--record",
            str(results / "ddp_training.json"),
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    rows = re.findall(
        r"^(cnn|transformer)\s+[\d.]+M\s+(\S+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)%\s+([\d.]+)$", out.stdout, re.M
    )
    configs = ["gloo", "gloo+fp16", "fastcomm", "fastcomm+fp16", "fastcomm+powersgd"]
    assert [(m, c) for m, c, *_ in rows] == [(m, c) for m in ("cnn", "transformer") for c in configs], out.stdout
    assert all(float(r[2]) > 0 for r in rows) and [float(r[5]) for r in rows][0] == 1.0, out.stdout
    record = _record(results / "ddp_training.json", "ddp_training", "ddp_training.py")
    assert [r["model"] for r in record["results"]] == ["cnn", "transformer"]
    assert all(
        sorted(r["step_s"]) == sorted([*configs, "local"]) and all(t > 0 for t in r["step_s"].values())
        for r in record["results"]
    ), record["results"]
    docs = _render(tmp_path, results)
    svg = (docs / "ddp_training.svg").read_text()
    assert svg.startswith("<svg") and svg.count("<rect") >= 2 * 6 + 6, svg[:200]
    page = (docs / "benchmarks.md").read_text()
    assert sum(line.startswith(("| CNN", "| GPT-style")) for line in page.splitlines()) == 2 * 6, page


def _render(tmp_path, results):
    """benchmarks/render.py on the records in `results` (a README and a training page with
    their markers beside them); returns the docs folder."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (tmp_path / "README.md").write_text("<!-- headline:begin -->\n<!-- headline:end -->\n")
    (docs / "training.md").write_text("<!-- real_models:begin -->\n<!-- real_models:end -->\n")
    out = subprocess.run(
        [
            sys.executable,
            os.path.join(BENCHMARKS, "render.py"),
            "--results",
            str(results),
            "--docs",
            str(docs),
            "--readme",
            str(tmp_path / "README.md"),
            "--training",
            str(docs / "training.md"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return docs


@pytest.mark.parametrize(
    "collective, sizes, expected",
    [("all_reduce", "8,4K", [8, 4096]), ("all_gather", "12,6K", [12, 6144]), ("reduce_scatter", "12,6K", [12, 6144])],
)
def test_arena_vs_ordinary_prints_a_row_per_size(collective, sizes, expected, tmp_path):
    """Each collective's run checks its results itself (exact inputs) before timing."""
    out = subprocess.run(
        [
            sys.executable,
            os.path.join(BENCHMARKS, "arena_vs_ordinary.py"),
            "--nproc",
            "3",
            "--sizes",
            sizes,
            "--seconds",
            "0.02",
            "--rounds",
            "1",
            "--warmup",
            "1",
            "--collective",
            collective,
            "--record",
            str(tmp_path / "r.json"),
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith(f"# {collective} sum float32, 3 ranks"), out.stdout
    rows = re.findall(r"^\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s", out.stdout, re.M)
    assert [int(r[0]) for r in rows] == expected and all(float(x) > 0 for r in rows for x in r[1:]), out.stdout
    record = _record(tmp_path / "r.json", "arena_vs_ordinary", "arena_vs_ordinary.py")
    assert record["settings"]["collective"] == collective and [r["bytes"] for r in record["results"]] == expected
    assert _positive(record["results"], "arena_s", "ordinary_s", "gloo_s")


@pytest.mark.parametrize("api,round_ms", [("cpp", 0), ("process_group", 0), ("cpp", 40)])
def test_peers_run_prints_median_mean_and_tail_tables(api, round_ms, tmp_path):
    """benchmarks/peers/run.py with the libraries CI has (fastcomm, Gloo): the median, mean and
    90th percentile tables, a row per size, Gloo's ratio to fastcomm in each, the spreads in
    brackets (one round: its round-to-round spread is 1); the workers check each size's result.
    With --round-ms every library takes more than --iters samples where --iters take less time
    (3 samples of 8 B and 64 KiB take well under 40 ms here), and says how many."""
    out = subprocess.run(
        [
            sys.executable,
            os.path.join(BENCHMARKS, "peers", "run.py"),
            "--libraries",
            "fastcomm,gloo",
            "--api",
            api,
            "--sizes",
            "8,64K",
            "--rounds",
            "1",
            "--iters",
            "3",
            "--warmup",
            "1",
            "--round-ms",
            str(round_ms),
            "--record",
            str(tmp_path / "r.json"),
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    counts = re.findall(
        r"^# samples per round \(fewest-most\): fastcomm (\d+)-(\d+) (\d+)-(\d+); "
        r"gloo (\d+)-(\d+) (\d+)-(\d+)$",
        out.stdout,
        re.M,
    )
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
            assert (theirs - 0.05) / (mine + 0.05) <= float(ratio) + 0.005 <= (theirs + 0.05) / (mine - 0.05) + 0.01, (
                out.stdout
            )
    assert f"through --api {api}" in out.stdout
    record = json.loads((tmp_path / "r.json").read_text())
    assert results_record.problems(record) == [] and record["benchmark"] == "peers"
    assert record["command"][:2] == ["python", "benchmarks/peers/run.py"], record["command"]
    got = {(r["library"], r["bytes"]): r for r in record["results"]}
    assert sorted(got) == [("fastcomm", 8), ("fastcomm", 65536), ("gloo", 8), ("gloo", 65536)]
    for (lib, size), r in got.items():
        assert r["samples"] >= 3 and 0 < r["p10_s"] <= r["median_s"] <= r["p90_s"], r
        assert len(r["round_medians_s"]) == 1 and len(r["others_cpu_share"]) == 1, r
    printed = {int(size): float(us) for size, us in re.findall(r"^\s+(\d+)\s+([\d.]+) \(", median_text, re.M)}
    assert {size: round(got[("fastcomm", size)]["median_s"] * 1e6, 1) for size in (8, 65536)} == printed


def test_peers_timeline_prints_each_window_size():
    """benchmarks/peers/timeline.py: one job's samples cut into windows of each size asked for,
    the window medians' range (min <= max, ratio >= 1), then the first size's medians in order."""
    out = subprocess.run(
        [
            sys.executable,
            os.path.join(BENCHMARKS, "peers", "timeline.py"),
            "--size",
            "64K",
            "--samples",
            "400",
            "--window",
            "20,100",
            "--show",
            "5",
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    ranges = re.findall(
        r"^# (\d+) windows of (\d+) samples .*: medians ([\d.]+)-([\d.]+) us, max/min ([\d.]+)$", out.stdout, re.M
    )
    assert [(int(r[0]), int(r[1])) for r in ranges] == [(20, 20), (4, 100)], out.stdout
    for _, _, low, high, ratio in ranges:
        assert 0 < float(low) <= float(high) and float(ratio) >= 1, out.stdout
    medians = out.stdout.strip().splitlines()[-1].split()
    assert len(medians) == 5 and all(float(m) > 0 for m in medians), out.stdout


def _real_models_cnn_row(record, *args: str) -> dict:
    """benchmarks/real_models.py on the CNN (no transformers needed), one untimed and one
    timed step per configuration, recorded at `record`; the record's one row."""
    out = subprocess.run(
        [sys.executable, os.path.join(BENCHMARKS, "real_models.py"), "--models", "cnn", "--steps", "1"]
        + ["--warmup", "1", "--record", str(record), *args],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    (row,) = _record(record, "real_models", "real_models.py")["results"]
    return row


def test_real_models_queue_configuration(tmp_path):
    """The opt-in fastcomm+queue configuration runs DDP's buckets on its group's op queue."""
    row = _real_models_cnn_row(
        tmp_path / "real_models.json", "--conditions", "quiet", "--configs", "gloo", "fastcomm", "fastcomm+queue"
    )
    assert list(row["step_s"]) == ["gloo", "fastcomm", "fastcomm+queue"] and all(t > 0 for t in row["step_s"].values())
    assert row["queued_ops"] > 0, row  # the CNN's buckets are larger than the queue's 1 MiB


def test_real_models_record_and_rendered_table(tmp_path):
    """The CNN beside a busy process: every configuration timed, the neighbour's work
    read, and the record rendered into docs/training.md's table."""
    # as benchmarks/real_models.py names them (the module is not imported here: it is the script under test)
    configs = ["local", "noop", "gloo", "gloo+fp16", "fastcomm", "fastcomm+view", "fastcomm+fp16"]
    results = tmp_path / "results"
    row = _real_models_cnn_row(results / "real_models.json", "--conditions", "busy")
    assert row["condition"] == "beside 1 busy process(es)" and row["busy"] == 1 and row["model"] == "cnn"
    assert list(row["step_s"]) == configs and all(t > 0 for t in row["step_s"].values()), row
    # the one untimed step of each configuration, kept apart from the timed ones
    assert list(row["warmup_s"]) == configs and all(len(v) == 1 and v[0] > 0 for v in row["warmup_s"].values()), row
    assert all(rate > 0 for rate in row["neighbour_work_per_s"].values()), row
    text = (_render(tmp_path, results) / "training.md").read_text()
    assert text.count("| cnn (30M) | beside 1 busy process(es) |") == len(configs), text
    (gloo,) = [line for line in text.splitlines() if "| gloo |" in line]
    assert gloo.endswith("| 1.00 | 1.00 |"), gloo  # Gloo's step / itself, the neighbour's work / itself


def test_ddp_bucket_profile_records_every_bucket_and_renders(tmp_path):
    """The CNN on fastcomm and Gloo, one step: every configuration's phases, and per bucket of
    the profiled step its bytes (together exactly the model's gradients), skew and all_reduce
    time; rendered into docs/benchmarks.md's section."""
    results = tmp_path / "results"
    out = subprocess.run(
        [
            sys.executable,
            os.path.join(BENCHMARKS, "ddp_bucket_profile.py"),
            "--models",
            "cnn",
            "--steps",
            "1",
            "--warmup",
            "1",
            "--passes",
            "1",
            "--record",
            str(results / "ddp_bucket_profile.json"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    rows = _record(results / "ddp_bucket_profile.json", "ddp_bucket_profile", "ddp_bucket_profile.py")["results"]
    assert [(r["model"], r["backend"]) for r in rows] == [("cnn", "fastcomm"), ("cnn", "gloo")], rows
    sys.path.insert(0, BENCHMARKS)
    from ddp_training import VggNet

    gradient_bytes = sum(p.numel() * p.element_size() for p in VggNet().parameters())
    for row in rows:
        for mode in ("local", "noop", "default", "profiled"):
            phases = row[mode]["phases"]
            assert phases["step_s"] > 0 and phases["main_cpu_s"] > 0 and phases["backward_faults"] >= 0, (mode, row)
        buckets = row["profiled"]["buckets"]
        assert sum(b["bytes"] for b in buckets) == gradient_bytes, buckets
        assert all(b["transfer_s"] > 0 and b["skew_s"] >= 0 for b in buckets), buckets
        assert row["local"]["buckets"] == [] and "tail_s" in row["profiled"]["phases"], row
    text = (_render(tmp_path, results) / "benchmarks.md").read_text()
    assert "**CNN on fastcomm, quiet**" in text and "**CNN on gloo, quiet**" in text, text
    assert text.count("| DDP, no communication (noop hook) |") == 2, text


def test_peer_patterns_prints_every_cell_and_the_neighbours_share(tmp_path):
    """benchmarks/peers/patterns.py with the libraries CI has (fastcomm through torch.distributed and
    through the backend object, the latter also without the spin budget, Gloo), 2 ranks, quiet and beside a busy neighbour: a row per cell
    (skewed all_reduces and the ping-pong) with every library's time, the neighbour's share, and a
    record with the same rows; the loops check their results (exact values) before timing."""
    out = subprocess.run(
        [
            sys.executable,
            os.path.join(BENCHMARKS, "peers", "patterns.py"),
            "--libraries",
            "fastcomm,fastcomm-backend,fastcomm-backend-nobudget,gloo",
            "--nproc",
            "2",
            "--rounds",
            "1",
            "--budget",
            "0.005",
            "--record",
            str(tmp_path / "r.json"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    record = _record(tmp_path / "r.json", "peer_patterns", "peers/patterns.py")
    timed = [r for r in record["results"] if r["pattern"] != "neighbour"]
    cells = {(r["pattern"], r["size"], r["width_us"]) for r in timed}
    assert len(cells) == 15 and {c[0] for c in cells} == {"skew", "pingpong"}, cells
    assert len(timed) == 15 * 4 * 2  # every cell, library and condition
    assert all(isinstance(r["us_per_op"], float) and len(r["rounds_us"]) == 1 for r in timed), timed
    kept = {r["library"]: r["neighbour_kept"] for r in record["results"] if r["pattern"] == "neighbour"}
    assert sorted(kept) == ["fastcomm", "fastcomm-backend", "fastcomm-backend-nobudget", "gloo"], kept
    assert all(v > 0 for v in kept.values()), kept
    for condition in ("quiet", "busy"):
        assert f"# 2 ranks, {condition}: us per op beyond the compute" in out.stdout, out.stdout
    rows = re.findall(r"^(skew|pingpong)\s+(\d+)\s+(\d+)\s+([-\d.]+) \(1\.00\)", out.stdout, re.M)
    assert len(rows) == 30, out.stdout
    assert "# the neighbour's work beside each library" in out.stdout
