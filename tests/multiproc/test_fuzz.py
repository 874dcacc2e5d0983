"""Random sequences of collectives (programs/fuzz.py): every op gives every rank
the exact result or raises on every rank, on one host (ranks bound to
different CPUs, options that may differ set differently), with the engine off,
and across simulated hosts. The short form runs here; the long form:

    python tests/multiproc/test_fuzz.py --ops 3000 --seed 7 [--ranks 3] [--env FASTCOMM_SHM=0]
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import sys
import tempfile

import pytest

from harness import run_ranks

PROGRAM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "programs", "fuzz.py")


def run_fuzz(envs: list[dict], seed: int, ops: int, mismatches: bool, store_dir: str, timeout: float) -> str:
    """Runs one fuzz rank per entry of `envs`; checks every op's outcomes agree; returns the output."""
    store = os.path.join(store_dir, "store")
    text = run_ranks(
        lambda rank: [
            sys.executable,
            PROGRAM,
            str(rank),
            str(len(envs)),
            store,
            str(seed),
            str(ops),
            "1" if mismatches else "0",
        ],
        envs,
        timeout,
    )
    check_outcomes(text, len(envs), ops)
    return text


def check_outcomes(text: str, ranks: int, ops: int) -> None:
    """Every rank finished and reported every op; per op every rank the same
    outcome: 'ok' (checked exact) where the ranks called alike, 'raised' where
    one called something else."""
    assert len(re.findall(r"^DONE \d+$", text, re.MULTILINE)) == ranks, text[-5000:]
    outcomes = collections.defaultdict(dict)
    for rank, k, outcome, expect, rest in re.findall(r"^OUTCOME (\d+) (\d+) (\S+) (\S+) (.*)$", text, re.MULTILINE):
        outcomes[int(k)][int(rank)] = (outcome, expect, rest)
    assert sorted(outcomes) == list(range(ops)), text[-5000:]
    for k, per_rank in sorted(outcomes.items()):
        seen = {outcome for outcome, _, _ in per_rank.values()}
        expect = next(iter(per_rank.values()))[1]
        wanted = {"raised"} if expect == "mismatch" else {"ok"}
        assert seen == wanted, f"op {k}: {per_rank}"


# (name, per-rank extra environment, mismatches drawn)
CASES = [
    # one host; rank 1 bound to one CPU, the options that may differ set differently per rank
    (
        "one-host",
        [
            {"FASTCOMM_SHM_ASYNC_MIN_BYTES": "0", "FASTCOMM_GLOO_THREADS": "1"},
            {"FUZZ_BIND_ONE_CPU": "1", "FASTCOMM_SHM_ASYNC_MIN_BYTES": "65536", "FASTCOMM_SHM_BIND_CPUS": "0"},
        ],
        True,
    ),
    ("three-ranks", [{}, {"FASTCOMM_SHM_UNBOUND_MIN_BYTES": "0"}, {"FASTCOMM_SHM_BIND_CPUS": "1"}], True),
    ("engine-off", [{"FASTCOMM_SHM": "0"}] * 3, True),
    # a mismatch across hosts breaks the group (hierarchical.h): none drawn there
    ("two-hosts", [{"FASTCOMM_RANKS_PER_HOST": "2"}] * 4, False),
]


@pytest.mark.parametrize("name, envs, mismatches", CASES, ids=[c[0] for c in CASES])
def test_fuzz_short(tmp_path, name, envs, mismatches):
    if any(e.get("FUZZ_BIND_ONE_CPU") for e in envs) and len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 CPUs")
    run_fuzz(envs, seed=sum(map(ord, name)), ops=40, mismatches=mismatches, store_dir=str(tmp_path), timeout=240)


def main() -> None:
    parser = argparse.ArgumentParser(description="The long form of the fuzz run.")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--ops", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--env", action="append", default=[], help="K=V for every rank (repeatable)")
    parser.add_argument("--no-mismatches", action="store_true", help="(needed across hosts)")
    args = parser.parse_args()
    env = dict(kv.split("=", 1) for kv in args.env)
    with tempfile.TemporaryDirectory() as store_dir:
        text = run_fuzz(
            [env] * args.ranks,
            args.seed,
            args.ops,
            not args.no_mismatches,
            store_dir,
            timeout=max(600.0, args.ops * 1.0),
        )
    raised = len(re.findall(r"^OUTCOME 0 \d+ raised", text, re.MULTILINE))
    print(
        f"{args.ops} ops on {args.ranks} ranks: every op exact on every rank or raised on every rank "
        f"({raised} mismatches drawn, each raised everywhere)"
    )


if __name__ == "__main__":
    main()
