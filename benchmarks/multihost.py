"""fastcomm against Gloo across hosts: two namespace hosts of 2 ranks
(tests/multihost/namespace_hosts.py: own network, hostname, /dev/shm and
pids) joined through a switch by links shaped with tc to each --rates value.
Per rate, one run after another:
  - fastcomm-bench all_reduce, all_gather, reduce_scatter --compare gloo
    (float32, sizes -b .. -e by -f; fastcomm and Gloo alternate per size),
  - benchmarks/fsdp2_vs_gloo.py (an FSDP2 step, alternating rounds),
each launched with torchrun --nnodes=2 on both hosts as a user would. Prints
one markdown table (ratio = gloo time / fastcomm time, > 1: fastcomm faster),
writes its rows as a record (benchmarks/results/multihost.json unless --record
PATH or --no-record) and every raw result as JSON with --json. Needs root.

    python benchmarks/multihost.py                          # 1gbit and 10gbit, 256K .. 64M
    python benchmarks/multihost.py --rates 1gbit -b 1M -e 16M
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "multihost"))

import namespace_hosts  # noqa: E402
import results_record  # noqa: E402

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")
LAYOUT = [2, 2]
TIMEOUT = 900  # seconds for one job


def _job(hosts, program: list[str], out_dir: str, what: str) -> None:
    codes, logs = hosts.torchrun(LAYOUT, program, cwd=out_dir, timeout=TIMEOUT)
    if codes != [0] * len(LAYOUT):
        sys.exit(f"multihost: {what} failed (exit statuses {codes}):\n" + "\n".join(log[-4000:] for log in logs))
    print(f"  {what}: done", file=sys.stderr, flush=True)


def measure(rate: str, args, out_dir: str) -> dict:
    results = {}
    with namespace_hosts.NamespaceHosts(len(LAYOUT), rate=rate) as hosts:
        for collective in COLLECTIVES:
            path = os.path.join(out_dir, f"{rate}-{collective}.json")
            program = [
                "-m",
                "fastcomm.bench",
                collective,
                "-b",
                args.minbytes,
                "-e",
                args.maxbytes,
                "-f",
                str(args.stepfactor),
                "-n",
                str(args.iters),
                "-w",
                "1",
                "--compare",
                "gloo",
                "--json",
                path,
            ]
            _job(hosts, program, out_dir, f"{rate} {collective}")
            with open(path) as f:
                results[collective] = json.load(f)
        path = os.path.join(out_dir, f"{rate}-fsdp2.json")
        _job(
            hosts,
            [os.path.join(HERE, "fsdp2_vs_gloo.py"), "--record", path, *args.fsdp2.split()],
            out_dir,
            f"{rate} fsdp2",
        )
        with open(path) as f:
            results["fsdp2"] = json.load(f)["results"][0]
    return results


def _best(row: dict) -> dict:
    return row["out_of_place"] or row["in_place"]


def rows_of(all_results: dict[str, dict]) -> list[dict]:
    """One row per link, collective and size, then the FSDP2 step: fastcomm's and Gloo's seconds."""
    out = []
    for rate, results in all_results.items():
        for collective in COLLECTIVES:
            rows = results[collective]["results"]
            for fc, gl in zip(rows["fastcomm"]["rows"], rows["gloo"]["rows"]):
                out.append(
                    {
                        "link": rate,
                        "what": collective,
                        "bytes": fc["size"],
                        "params": None,
                        "fastcomm_s": _best(fc)["time_us"] * 1e-6,
                        "gloo_s": _best(gl)["time_us"] * 1e-6,
                    }
                )
        step = results["fsdp2"]
        out.append(
            {
                "link": rate,
                "what": "FSDP2 step",
                "bytes": None,
                "params": step["params"],
                "fastcomm_s": step["fastcomm_s"],
                "gloo_s": step["gloo_s"],
            }
        )
    return out


def table(rows: list[dict]) -> str:
    lines = ["| link | collective | bytes | fastcomm ms | gloo ms | ratio |", "|---|---|---:|---:|---:|---:|"]
    for row in rows:
        if row["bytes"] is None:
            what, size = f"{row['what']} ({row['params'] * 4 / 2**20:.0f} MiB params)", ""
        else:
            what, size = row["what"], row["bytes"]
        lines.append(
            f"| {row['link']} | {what} | {size} | {row['fastcomm_s'] * 1e3:.2f} | "
            f"{row['gloo_s'] * 1e3:.2f} | {row['gloo_s'] / row['fastcomm_s']:.2f} |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rates", default="1gbit,10gbit", help="comma-separated link rates (tc tbf: Nmbit or Ngbit)")
    p.add_argument("-b", "--minbytes", default="256K")
    p.add_argument("-e", "--maxbytes", default="64M")
    p.add_argument("-f", "--stepfactor", type=int, default=4)
    p.add_argument("-n", "--iters", type=int, default=5, help="timed calls per size and backend")
    p.add_argument("--fsdp2", default="", help="extra arguments of fsdp2_vs_gloo.py, e.g. '--layers 2 --width 64'")
    p.add_argument("--json", help="write every raw result here")
    results_record.add_arguments(p, "multihost")
    args = p.parse_args(argv)
    why_not = namespace_hosts.available()
    if why_not:
        p.error(f"namespace hosts: {why_not}")
    all_results = {}
    with tempfile.TemporaryDirectory(prefix="fastcomm-multihost-") as out_dir:
        os.chmod(out_dir, 0o777)
        for rate in args.rates.split(","):
            all_results[rate] = measure(rate, args, out_dir)
    print("# 2 namespace hosts x 2 ranks, links shaped with tc; float32; ratio = gloo time / fastcomm time")
    rows = rows_of(all_results)
    print(table(rows))
    results_record.save(args, "multihost", rows, script=__file__, argv=argv)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(all_results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
