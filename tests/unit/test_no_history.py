"""The repository's text states what the code does, not how it got there.

Development history (work sessions, "the build before", dated runs, issue
numbers) belongs in CHANGELOG.md only. This scans the user and contributor
text (README.md, docs/, csrc/, fastcomm/, benchmarks/) and lists every line
that carries such a word. The pattern checker is also run on made-up lines,
so the test fails when it stops seeing them.
"""

from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]

# Case-insensitive patterns of development history.
HISTORY = re.compile(
    r"\bsessions?\b"
    r"|\bsittings?\b"
    r"|build before"
    r"|old build"
    r"|\b20\d\d-[01]\d-[0-3]\d\b"  # a date
    r"|\bissue #?\d+",
    re.IGNORECASE,
)
# Code that uses those words and is not history: pytest's session (scoped
# fixtures, its hooks' `session` argument and attributes).
NOT_HISTORY = re.compile(r"""scope=["']session["']|\bdef pytest_session\w*\(session\b|\bsession\.\w""")

# Where to look, and which files there (by suffix).
SCANNED = {
    "docs": {".md"},
    "csrc": {".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh", ".txt"},
    "fastcomm": {".py", ".pyi"},
    "benchmarks": {".py", ".sh", ".md", ".c", ".cpp"},
}
# Benchmark records (JSON) and raw results are data, not text.
SKIPPED_DIRS = {ROOT / "benchmarks" / "results"}


def scanned_files() -> list[pathlib.Path]:
    files = [ROOT / "README.md"]
    for folder, suffixes in SCANNED.items():
        for path in sorted((ROOT / folder).rglob("*")):
            if not path.is_file() or path.suffix not in suffixes:
                continue
            if any(skipped in path.parents for skipped in SKIPPED_DIRS):
                continue
            files.append(path)
    return [path for path in files if path.exists()]


def history_hits(lines: list[str]) -> list[tuple[int, str]]:
    """(line number, matched text) for every line that carries a history word."""
    hits = []
    for number, line in enumerate(lines, start=1):
        for match in HISTORY.finditer(NOT_HISTORY.sub("", line)):
            hits.append((number, match.group(0)))
    return hits


def test_checker_sees_history_words():
    lines = [
        "Measured in the third session of the work.",
        "two sittings, alternating",
        "against the build before",
        "the old build took longer",
        "run on 2026-12-04",
        "see issue 14 and Issue #3",
        "a clean line: 2 MiB sessionless tissue 20260 issues/2957",
        '@pytest.fixture(scope="session")',
        "def pytest_sessionfinish(session, exitstatus):",
        "    config = session.config",
    ]
    found = history_hits(lines)
    assert [number for number, _ in found] == [1, 2, 3, 4, 5, 6, 6]
    assert [text.lower() for _, text in found] == [
        "session",
        "sittings",
        "build before",
        "old build",
        "2026-12-04",
        "issue 14",
        "issue #3",
    ]


def test_scan_covers_the_tree():
    files = {path.relative_to(ROOT).as_posix() for path in scanned_files()}
    assert "README.md" in files
    assert "fastcomm/_options.py" in files
    assert "csrc/transport/shm/engine.cpp" in files
    assert any(name.startswith("docs/") for name in files)
    assert not any(name.endswith(".json") for name in files)


def test_no_development_history_in_text():
    hits = []
    for path in scanned_files():
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        for number, text in history_hits(lines):
            hits.append(f"{path.relative_to(ROOT).as_posix()}:{number}: {text!r}")
    assert not hits, f"development history belongs in CHANGELOG.md, not in these lines ({len(hits)}):\n" + "\n".join(
        hits
    )
