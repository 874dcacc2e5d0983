"""benchmarks/results_record.py: the record every benchmark script writes, and the
records kept in benchmarks/results/ (each must be a schema 1 record)."""

import argparse
import glob
import json
import os
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import results_record  # noqa: E402


def test_command_is_relative_to_the_repository_and_leaves_out_the_record():
    argv = [
        "--sizes",
        "8,4K",
        "--record",
        "/tmp/x/out.json",
        f"--plot={ROOT}/docs/a.svg",
        "--record=/tmp/y.json",
        "--json",
        "/elsewhere/raw.json",
        f"{ROOT}/benchmarks/x.py",
    ]
    assert results_record.command(["python", "benchmarks/x.py"], argv, ROOT) == [
        "python",
        "benchmarks/x.py",
        "--sizes",
        "8,4K",
        "--plot=docs/a.svg",
        "--json",
        "raw.json",
        "benchmarks/x.py",
    ]


def test_clean_makes_values_json_safe():
    cleaned = results_record.clean(
        {"a": (1, float("nan")), "b": float("inf"), 3: {"c": [1.5, None, True]}, "d": argparse.Namespace}
    )
    assert cleaned == {"a": [1, None], "b": None, "3": {"c": [1.5, None, True]}, "d": str(argparse.Namespace)}


def test_built_record_has_the_schema(tmp_path):
    record = results_record.build(
        "demo",
        {"nproc": 2, "ratio": float("nan")},
        [{"bytes": 8, "fastcomm_s": 1e-5}],
        command=["python", "benchmarks/demo.py"],
        root=ROOT,
    )
    assert results_record.problems(record) == []
    assert record["benchmark"] == "demo" and record["schema"] == 1
    assert record["settings"] == {"nproc": 2, "ratio": None}
    assert record["results"] == [{"bytes": 8, "fastcomm_s": 1e-5}]
    assert record["machine"]["cores"] == os.cpu_count()
    assert record["versions"]["python"] == ".".join(map(str, sys.version_info[:3]))
    assert record["date"].endswith("+00:00")
    assert record["commit"] is None or len(record["commit"]) == 40
    path = tmp_path / "sub" / "demo.json"
    results_record.write(record, str(path))
    assert json.loads(path.read_text()) == record
    assert [p.name for p in path.parent.iterdir()] == ["demo.json"]  # the temporary file is gone


def test_problems_names_what_is_wrong():
    record = results_record.build("demo", {}, [], command=["python", "benchmarks/demo.py"], root=ROOT)
    assert results_record.problems({**record, "schema": 2}) == ["schema 2, not 1"]
    assert results_record.problems({**record, "results": [1]}) == ["a result row is not an object"]
    assert results_record.problems({**record, "command": ["python", "/abs/x.py"]}) == [
        "an absolute path in the command"
    ]
    missing = {k: v for k, v in record.items() if k != "date"}
    assert results_record.problems(missing) == ["no 'date'"]
    assert results_record.problems([]) == ["not a JSON object"]


def test_save_writes_to_the_given_path_or_nothing(tmp_path, capsys):
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", default="8")
    results_record.add_arguments(p, "demo")
    script = os.path.join(ROOT, "benchmarks", "demo.py")
    target = tmp_path / "demo.json"
    args = p.parse_args(["--record", str(target)])
    assert results_record.save(args, "demo", [{"x": 1}], script=script, argv=["--record", str(target)]) == str(target)
    record = json.loads(target.read_text())
    assert record["command"] == ["python", "benchmarks/demo.py"] and record["settings"] == {"sizes": "8"}
    assert f"# record: {target}" in capsys.readouterr().out
    args = p.parse_args(["--no-record"])
    assert results_record.save(args, "demo", [], script=script, argv=["--no-record"]) is None
    assert results_record.default_path(ROOT, "demo") == os.path.join(ROOT, "benchmarks", "results", "demo.json")


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(ROOT, "benchmarks", "results", "*.json"))))
def test_kept_records_have_the_schema(path):
    with open(path) as f:
        record = json.load(f)
    assert results_record.problems(record) == [], path
    assert record["results"], path
