"""benchmarks/render.py: the docs' tables, plots and the README's headline come from
the records alone (exact numbers from small made-up records), the same records
give the same bytes, --check sees drift, and the repository's generated files
match its records."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
RENDER = os.path.join(ROOT, "benchmarks", "render.py")


def _record(name: str, settings: dict, results: list) -> dict:
    return {
        "benchmark": name,
        "schema": 1,
        "machine": {"cpu_model": "Test CPU", "cores": 4, "arch": "x86_64", "kernel": "Linux 6.1", "memory_gib": 16.0},
        "versions": {"python": "3.11.7", "torch": "2.13.0+cpu", "fastcomm": "0.1.0"},
        "commit": "0123456789abcdef0123456789abcdef01234567",
        "dirty": False,
        "date": "2030-01-02T03:04:05+00:00",
        "command": ["python", f"benchmarks/{name}.py"],
        "settings": settings,
        "results": results,
    }


ALLREDUCE = _record(
    "allreduce_vs_gloo",
    {
        "op": "all_reduce",
        "reduce_op": "sum",
        "dtype": "float",
        "api": "dist",
        "nproc": 2,
        "ranks_per_host": 0,
        "rounds": 5,
    },
    [
        {"bytes": b, "fastcomm_s": fc, "gloo_s": gl, "bus_factor": 1.0, "wrong_fastcomm": 0, "wrong_gloo": 0}
        for b, fc, gl in ((8, 10e-6, 50e-6), (4096, 1e-5, 1e-5), (32768, 20e-6, 30e-6), (1 << 20, 250e-6, 1000e-6))
    ],
)

REAL_MODELS = _record(
    "real_models",
    {"nproc": 2, "steps": 2, "passes": 4},
    [
        {
            "condition": "quiet",
            "busy": 0,
            "model": "gpt2",
            "params": 124439808,
            "step_s": {"local": 4.0, "noop": 4.1, "gloo": 5.0, "fastcomm": 4.5, "fastcomm+view": 4.2},
            "samples_s": {
                "local": [3.9, 4.0, 4.3],
                "noop": [4.1],
                "gloo": [4.8, 5.0, 5.2],
                "fastcomm": [4.5],
                "fastcomm+view": [4.2],
            },
            "neighbour_work_per_s": None,
        },
        {
            "condition": "beside 1 busy process(es)",
            "busy": 1,
            "model": "gpt2",
            "params": 124439808,
            "step_s": {"local": 6.0, "noop": 6.2, "gloo": 7.0, "fastcomm": 6.6, "fastcomm+view": 6.4},
            "samples_s": None,
            "neighbour_work_per_s": {
                "local": 100.0,
                "noop": 90.0,
                "gloo": 80.0,
                "fastcomm": 100.0,
                "fastcomm+view": 120.0,
            },
        },
    ],
)


def _tree(tmp_path, records: list[dict]):
    """A results folder with `records`, a README and a training page with their markers."""
    results, docs = tmp_path / "benchmarks" / "results", tmp_path / "docs"
    results.mkdir(parents=True)
    docs.mkdir()
    for record in records:
        (results / f"{record['benchmark']}.json").write_text(json.dumps(record))
    (tmp_path / "README.md").write_text("# x\n<!-- headline:begin -->\nold\n<!-- headline:end -->\nafter\n")
    (docs / "training.md").write_text("# t\n<!-- real_models:begin -->\n<!-- real_models:end -->\nend\n")
    return results, docs


def _render(tmp_path, *extra, docs=None):
    docs = docs or tmp_path / "docs"
    return subprocess.run(
        [
            sys.executable,
            RENDER,
            "--results",
            str(tmp_path / "benchmarks" / "results"),
            "--docs",
            str(docs),
            "--readme",
            str(tmp_path / "README.md"),
            "--training",
            str(tmp_path / "docs" / "training.md"),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_headline_gives_the_records_ratios_against_gloo(tmp_path):
    _tree(tmp_path, [ALLREDUCE, REAL_MODELS])
    out = _render(tmp_path)
    assert out.returncode == 0, out.stderr
    readme = (tmp_path / "README.md").read_text()
    head, table = readme.split("<!-- headline:begin -->\n")
    table, tail = table.split("<!-- headline:end -->")
    assert head == "# x\n" and tail == "\nafter\n"
    rows = [line for line in table.splitlines() if line.startswith("| ")]
    assert rows == [
        "| fastcomm against Gloo, CPU | fastcomm | Gloo | Gloo / fastcomm |",
        "| GPT-2 (124M) DDP step, DDP's defaults on both | 4.50 s | 5.00 s | 1.11 |",
        "| GPT-2 (124M) DDP step, fastcomm with gradient_as_bucket_view=True | 4.20 s | 5.00 s | 1.19 |",
        "| all_reduce float32, 8 B | 10.0 us | 50.0 us | 5.00 |",
        "| all_reduce float32, 32 KiB | 20.0 us | 30.0 us | 1.50 |",
        "| all_reduce float32, 1 MiB | 250.0 us | 1.0 ms | 4.00 |",
    ]
    assert "[record](benchmarks/results/real_models.json), 2 ranks on Test CPU, 4 CPUs" in table
    assert "[docs/benchmarks.md](docs/benchmarks.md)" in table


def test_docs_tables_and_plot_come_from_the_records(tmp_path):
    _tree(tmp_path, [ALLREDUCE, REAL_MODELS])
    assert _render(tmp_path).returncode == 0
    page = (tmp_path / "docs" / "benchmarks.md").read_text()
    assert "| 8 B | 10.0 | 50.0 | 0.001 | 0.000 | 5.00 |" in page
    assert "| 4 KiB | 10.0 | 10.0 | 0.410 | 0.410 | 1.00 |" in page
    assert "| 32 KiB | 20.0 | 30.0 | 1.638 | 1.092 | 1.50 |" in page
    assert "Run: `python benchmarks/allreduce_vs_gloo.py`, record `benchmarks/results/allreduce_vs_gloo.json`" in page
    assert "](../" not in page  # no links out of docs/ (the docs site holds only docs/)
    assert "Machine: Test CPU, 4 CPUs, 16.0 GiB, Linux 6.1, x86_64" in page
    assert "commit 0123456789; measured 2 Jan 2030" in page
    assert "![Collectives against Gloo](allreduce_vs_gloo.svg)" in page
    svg = (tmp_path / "docs" / "allreduce_vs_gloo.svg").read_text()
    assert svg.startswith("<svg") and svg.count("<title>fastcomm: ") == 4 and "<title>Gloo: 50 us</title>" in svg
    # the benchmarks without a record say so, and get no plot
    assert "No record yet: `python benchmarks/ddp_training.py` writes `benchmarks/results/ddp_training.json`" in page
    assert not (tmp_path / "docs" / "ddp_training.svg").exists()


def test_training_table_gives_what_communication_adds(tmp_path):
    _tree(tmp_path, [REAL_MODELS])
    assert _render(tmp_path).returncode == 0
    doc = (tmp_path / "docs" / "training.md").read_text()
    assert doc.startswith("# t\n<!-- real_models:begin -->\nRun: `python benchmarks/real_models.py`")
    assert doc.endswith("\n<!-- real_models:end -->\nend\n")
    rows = {
        tuple(cell.strip() for cell in line.split("|")[2:4]): line
        for line in doc.splitlines()
        if line.startswith("| gpt2")
    }
    assert rows[("quiet", "gloo")] == "| gpt2 (124M) | quiet | gloo | 5.000 | 4.80-5.20 | 900 | 1.00 | 1.00 |  |"
    assert (
        rows[("quiet", "fastcomm")] == "| gpt2 (124M) | quiet | fastcomm | 4.500 | 4.50-4.50 | 400 | 0.44 | 1.11 |  |"
    )
    assert (
        rows[("quiet", "fastcomm+view")]
        == "| gpt2 (124M) | quiet | fastcomm+view | 4.200 | 4.20-4.20 | 200 vs local |  | 1.19 |  |"
    )
    busy = "beside 1 busy process(es)"
    assert rows[(busy, "fastcomm")].endswith("| 6.600 | 6.60-6.60 | 400 | 0.50 | 1.06 | 1.25 |")
    assert rows[(busy, "fastcomm+view")].endswith("| 400 vs local |  | 1.09 | 1.50 |")
    # no all_reduce record: the headline says so and still has the DDP rows
    readme = (tmp_path / "README.md").read_text()
    assert "all_reduce: no record yet (`python benchmarks/allreduce_vs_gloo.py`)" in readme
    assert "| GPT-2 (124M) DDP step, DDP's defaults on both | 4.50 s | 5.00 s | 1.11 |" in readme


def test_same_records_give_the_same_bytes(tmp_path):
    _tree(tmp_path, [ALLREDUCE, REAL_MODELS])
    assert _render(tmp_path).returncode == 0
    assert _render(tmp_path, docs=tmp_path / "again").returncode == 0
    for name in ("benchmarks.md", "allreduce_vs_gloo.svg", "real_models.svg"):
        assert (tmp_path / "docs" / name).read_bytes() == (tmp_path / "again" / name).read_bytes(), name


def test_check_sees_a_changed_record_and_an_edited_doc(tmp_path):
    results, docs = _tree(tmp_path, [ALLREDUCE, REAL_MODELS])
    assert _render(tmp_path, "--check").returncode == 1  # nothing rendered yet
    assert _render(tmp_path).returncode == 0
    out = _render(tmp_path, "--check")
    assert out.returncode == 0 and out.stderr == "", out.stderr
    changed = json.loads(json.dumps(ALLREDUCE))
    changed["results"][0]["gloo_s"] = 60e-6
    (results / "allreduce_vs_gloo.json").write_text(json.dumps(changed))
    out = _render(tmp_path, "--check")
    assert out.returncode == 1
    stale = sorted(line.split()[1] for line in out.stderr.splitlines())
    assert [os.path.basename(p) for p in stale] == ["README.md", "allreduce_vs_gloo.svg", "benchmarks.md"], out.stderr
    assert _render(tmp_path).returncode == 0 and _render(tmp_path, "--check").returncode == 0
    page = docs / "benchmarks.md"
    page.write_text(page.read_text().replace("| 1.50 |", "| 9.99 |"))
    assert _render(tmp_path, "--check").returncode == 1


def test_missing_markers_and_bad_records_are_errors(tmp_path):
    results, _ = _tree(tmp_path, [REAL_MODELS])
    (tmp_path / "README.md").write_text("# no markers\n")
    out = _render(tmp_path)
    assert out.returncode == 1 and "no lines '<!-- headline:begin -->' and '<!-- headline:end -->'" in out.stderr
    assert (tmp_path / "docs" / "benchmarks.md").exists()  # the rest is written
    (results / "broken.json").write_text(json.dumps({"benchmark": "x", "schema": 2}))
    out = _render(tmp_path)
    assert out.returncode == 1 and "broken.json is not a benchmark record" in out.stderr


@pytest.mark.skipif(not os.path.isdir(os.path.join(ROOT, ".git")), reason="outside the repository")
def test_repository_docs_match_its_records():
    out = subprocess.run([sys.executable, RENDER, "--check"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
