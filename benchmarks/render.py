"""Renders the benchmark records (benchmarks/results/*.json) into the docs.

    python benchmarks/render.py            # write what changed
    python benchmarks/render.py --check    # exit 1 where a generated file differs from what the records give

Writes docs/benchmarks.md (a section per benchmark: what was run, its tables
and plots), the plots next to it (docs/<record>.svg), the README's headline
table between its lines `<!-- headline:begin -->` and `<!-- headline:end -->`,
and docs/training.md's real-model table between `<!-- real_models:begin -->`
and `<!-- real_models:end -->`. The output is a function of the records alone:
the same records give the same bytes. A benchmark without a record gets "no
record yet"; a file without its marker lines is an error (exit 1).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys

import results_record
from rendering import headline, page, training
from rendering.text import between_markers, provenance

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAINING_BEGIN, TRAINING_END = "<!-- real_models:begin -->", "<!-- real_models:end -->"


def load(results: str) -> list[tuple[str, dict]]:
    """(file stem, record) of every record in `results`, sorted by stem."""
    out = []
    for path in sorted(glob.glob(os.path.join(results, "*.json"))):
        with open(path) as f:
            record = json.load(f)
        wrong = results_record.problems(record)
        if wrong:
            raise SystemExit(f"render: {path} is not a benchmark record: {'; '.join(wrong)}")
        out.append((os.path.splitext(os.path.basename(path))[0], record))
    return out


def _link(target: str, start: str) -> str:
    return os.path.relpath(target, start).replace(os.sep, "/")


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return None


def outputs(
    records: list[tuple[str, dict]], results: str, docs: str, readme: str, training_doc: str
) -> tuple[dict[str, str], list[str]]:
    """{path: content} of every generated file, and the problems (files without their markers)."""
    files, problems = {}, []
    readme_dir = os.path.dirname(os.path.abspath(readme))  # the repository root
    markdown, plots = page.page(records, _link(results, readme_dir))
    files[os.path.join(docs, "benchmarks.md")] = markdown
    for name, svg in plots.items():
        files[os.path.join(docs, name)] = svg
    canonical = {stem: record for stem, record in records if stem == record["benchmark"]}

    table = headline.headline(
        canonical.get("real_models"),
        canonical.get("allreduce_vs_gloo"),
        _link(os.path.join(docs, "benchmarks.md"), readme_dir),
        _link(results, readme_dir),
    )
    _fill(readme, headline.BEGIN, headline.END, table, files, problems)

    record = canonical.get("real_models")
    if record is None:
        block = (
            "No record yet: `python benchmarks/real_models.py` writes `benchmarks/results/real_models.json`, "
            "then `python benchmarks/render.py` renders its table here."
        )
    else:
        block = (
            provenance(record, _link(os.path.join(results, "real_models.json"), readme_dir))
            + "\n\n"
            + training.real_models_table(record)
        )
    _fill(training_doc, TRAINING_BEGIN, TRAINING_END, block, files, problems)
    return files, problems


def _fill(path: str, begin: str, end: str, block: str, files: dict[str, str], problems: list[str]) -> None:
    doc = _read(path)
    filled = None if doc is None else between_markers(doc, begin, end, block)
    if filled is None:
        problems.append(f"{path}: no lines {begin!r} and {end!r}")
    else:
        files[path] = filled


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", default=os.path.join(ROOT, "benchmarks", "results"), help="the records' folder")
    p.add_argument("--docs", default=os.path.join(ROOT, "docs"), help="where benchmarks.md and the plots go")
    p.add_argument("--readme", default=os.path.join(ROOT, "README.md"))
    p.add_argument("--training", default=os.path.join(ROOT, "docs", "training.md"))
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 where a file differs")
    args = p.parse_args(argv)
    files, problems = outputs(load(args.results), args.results, args.docs, args.readme, args.training)
    stale = [path for path, content in files.items() if _read(path) != content]
    shown = lambda path: os.path.relpath(path)  # noqa: E731
    if args.check:
        for path in stale:
            print(f"render: {shown(path)} differs from the records (run python benchmarks/render.py)", file=sys.stderr)
    else:
        for path in stale:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            with open(path, "w") as f:
                f.write(files[path])
            print(f"render: wrote {shown(path)}")
    for problem in problems:
        print(f"render: {problem}", file=sys.stderr)
    return 1 if problems or (args.check and stale) else 0


if __name__ == "__main__":
    sys.exit(main())
