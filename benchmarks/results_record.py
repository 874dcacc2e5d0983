"""Benchmark records: what every benchmark script writes, and benchmarks/render.py reads.

A record is one JSON object:

    {"benchmark": name, "schema": 1,
     "machine": {"cpu_model", "cores", "arch", "kernel", "memory_gib"},
     "versions": {"python", "torch", "fastcomm", ... the peer libraries used},
     "commit": `git rev-parse HEAD` or null outside git, "dirty": uncommitted changes to the code (null: unknown),
     "date": UTC, ISO 8601, "command": [argv, paths relative to the repository root],
     "settings": {the script's options}, "results": [one object per row]}

A script adds `--record PATH` (default benchmarks/results/<name>.json) and
`--no-record` with add_arguments(), and calls save() once it has its rows. The
file is replaced atomically: a reader never sees half a record. NaN and
infinities are written as null (JSON has neither).
"""

from __future__ import annotations

import datetime
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
from typing import Any

SCHEMA = 1
RESULTS_DIR = os.path.join("benchmarks", "results")
# Where changes do not alter what a benchmark measures: the records themselves and generated text.
NOT_CODE = (":(exclude)benchmarks/results", ":(exclude)docs", ":(exclude)*.md")
# Libraries a record names when a script imported them.
OPTIONAL_LIBRARIES = ("transformers", "deepspeed", "mpi4py")


def repo_root(script: str) -> str:
    """The repository that holds `script`: git's top level, else the folder above its benchmarks/ folder."""
    here = os.path.dirname(os.path.abspath(script))
    top = _git(here, "rev-parse", "--show-toplevel")
    if top:
        return top
    path = here
    while os.path.basename(path) != "benchmarks" and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return os.path.dirname(path) if os.path.basename(path) == "benchmarks" else here


def default_path(root: str, name: str) -> str:
    return os.path.join(root, RESULTS_DIR, f"{name}.json")


def add_arguments(parser, name: str) -> None:
    """--record PATH and --no-record."""
    parser.add_argument(
        "--record", metavar="PATH", default=None, help=f"write the JSON record here (default {RESULTS_DIR}/{name}.json)"
    )
    parser.add_argument("--no-record", action="store_true", help="write no record")


def _git(cwd: str, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def commit_of(root: str) -> tuple[str | None, bool | None]:
    """(HEAD's commit, whether the code has uncommitted changes), (None, None) outside git."""
    head = _git(root, "rev-parse", "HEAD")
    if head is None:
        return None, None
    status = _git(root, "status", "--porcelain", "--", ".", *NOT_CODE)
    return head, None if status is None else bool(status)


def _first(path: str, key: str) -> str | None:
    try:
        with open(path) as f:
            for line in f:
                name, _, value = line.partition(":")
                if name.strip() == key:
                    return value.strip()
    except OSError:
        pass
    return None


def machine() -> dict[str, Any]:
    memory = _first("/proc/meminfo", "MemTotal")  # "24576000 kB"
    return {
        "cpu_model": _first("/proc/cpuinfo", "model name") or platform.processor() or None,
        "cores": os.cpu_count(),
        "arch": platform.machine(),
        "kernel": f"{platform.system()} {platform.release()}",
        "memory_gib": round(int(memory.split()[0]) / 2**20, 1) if memory else None,
    }


def versions(extra: dict[str, str | None] | None = None) -> dict[str, str | None]:
    """Python, torch, fastcomm and the optional libraries this process imported, then `extra`."""
    import torch

    try:
        import fastcomm

        fastcomm_version = fastcomm.__version__
    except ImportError:
        fastcomm_version = None
    out = {"python": platform.python_version(), "torch": torch.__version__, "fastcomm": fastcomm_version}
    for name in OPTIONAL_LIBRARIES:
        module = sys.modules.get(name)
        if module is not None and getattr(module, "__version__", None):
            out[name] = module.__version__
    out.update(extra or {})
    return out


def portable(value: str, root: str) -> str:
    """A path argument as a record keeps it: relative to the repository when inside it,
    else its file name; anything else as given."""
    if not os.path.isabs(value):
        return value
    relative = os.path.relpath(value, root)
    return os.path.basename(value) if relative.startswith("..") else relative


def command(program: list[str], argv: list[str], root: str) -> list[str]:
    """`program` and its arguments as run from the repository root, without --record (where
    the record went is not how it was made) and without absolute paths."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg == "--record":
            skip = True
            continue
        if arg.startswith("--record="):
            continue
        name, eq, value = arg.partition("=")
        out.append(f"{name}={portable(value, root)}" if eq and name.startswith("--") else portable(arg, root))
    return [*program, *out]


def settings_of(args, root: str, drop: tuple[str, ...] = ()) -> dict[str, Any]:
    """A script's parsed options (argparse Namespace) as a record keeps them."""
    out = {}
    for key, value in sorted(vars(args).items()):
        if key in ("record", "no_record", *drop):
            continue
        if isinstance(value, str):
            value = portable(value, root)
        out[key] = value
    return clean(out)


def clean(value: Any) -> Any:
    """JSON-safe: tuples as lists, NaN and infinities as None, other objects as text."""
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (bool, int, str)):
        return value
    return str(value)


def build(
    name: str,
    settings: dict,
    results: list,
    *,
    command: list[str],
    root: str,
    extra_versions: dict[str, str | None] | None = None,
) -> dict[str, Any]:
    commit, dirty = commit_of(root)
    return {
        "benchmark": name,
        "schema": SCHEMA,
        "machine": machine(),
        "versions": versions(extra_versions),
        "commit": commit,
        "dirty": dirty,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": command,
        "settings": clean(settings),
        "results": clean(results),
    }


# The record's keys and their types (None allowed where marked).
FIELDS = {
    "benchmark": (str,),
    "schema": (int,),
    "machine": (dict,),
    "versions": (dict,),
    "commit": (str, type(None)),
    "dirty": (bool, type(None)),
    "date": (str, type(None)),
    "command": (list,),
    "settings": (dict,),
    "results": (list,),
}
MACHINE_FIELDS = ("cpu_model", "cores", "arch", "kernel", "memory_gib")


def problems(record: Any) -> list[str]:
    """What keeps `record` from being a schema 1 record (empty: nothing)."""
    if not isinstance(record, dict):
        return ["not a JSON object"]
    out = [f"no {key!r}" for key in FIELDS if key not in record]
    out += [
        f"{key!r} is {type(record[key]).__name__}"
        for key, types in FIELDS.items()
        if key in record and not isinstance(record[key], types)
    ]
    if record.get("schema") != SCHEMA:
        out.append(f"schema {record.get('schema')!r}, not {SCHEMA}")
    if isinstance(record.get("machine"), dict):
        out += [f"machine has no {key!r}" for key in MACHINE_FIELDS if key not in record["machine"]]
    if isinstance(record.get("versions"), dict):
        out += [f"versions has no {key!r}" for key in ("python", "torch", "fastcomm") if key not in record["versions"]]
    if isinstance(record.get("results"), list) and not all(isinstance(row, dict) for row in record["results"]):
        out.append("a result row is not an object")
    if any(isinstance(arg, str) and os.path.isabs(arg) for arg in record.get("command") or []):
        out.append("an absolute path in the command")
    return out


def dumps(record: dict) -> str:
    return json.dumps(record, indent=1, allow_nan=False) + "\n"


def write(record: dict, path: str) -> None:
    """Writes `record` to `path` atomically (a temporary file in the same folder, then a rename)."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".record-", suffix=".json", dir=folder)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(dumps(record))
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def save(
    args,
    name: str,
    results: list,
    *,
    script: str,
    argv: list[str] | None,
    settings: dict | None = None,
    extra_versions: dict[str, str | None] | None = None,
    drop: tuple[str, ...] = (),
) -> str | None:
    """Builds and writes the record of a script's run, unless --no-record; returns its path.
    `argv`: the arguments main() was given (None: sys.argv[1:]); `settings`: defaults to the
    parsed options less `drop`."""
    if args.no_record:
        return None
    root = repo_root(script)
    program = ["python", portable(os.path.abspath(script), root)]
    record = build(
        name,
        settings if settings is not None else settings_of(args, root, drop),
        results,
        command=command(program, sys.argv[1:] if argv is None else list(argv), root),
        root=root,
        extra_versions=extra_versions,
    )
    path = args.record or default_path(root, name)
    write(record, path)
    print(f"# record: {args.record or os.path.relpath(path)}")
    return path
