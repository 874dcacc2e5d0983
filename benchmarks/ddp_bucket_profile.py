"""Where a DDP step's communication time goes, bucket by bucket.

Runs real_models.py's models under DDP on a fastcomm group (or Gloo, for
comparison) with a hook that all_reduces each bucket as DDP's default does
(divide by the world size, all_reduce), and records on every rank, with the
host's monotonic clock (shared by the ranks of one host):

  ready     when DDP handed the bucket to the hook (its gradients were ready)
  done      when the bucket's all_reduce completed on this rank

and for the step: when the forward pass ended, when backward returned (DDP
waits there for every bucket), and when the optimizer step ended. Per bucket
it then reports:

  skew      the last rank's ready minus the first rank's: how long the first
            rank's bucket waits for its peers before any byte can move
  transfer  done minus the last rank's ready (slowest rank): the all_reduce
            itself, once every rank has arrived
  tail      how long after the last bucket was ready backward returned (the
            step waits for communication only here)

The step is also timed without the profiling hook (DDP's own all_reduce), with
a hook that returns each bucket untouched (noop: DDP's own costs, no
communication) and locally (no DDP), in alternating order, so the hook's own
cost and DDP's show apart from communication's.

    python benchmarks/ddp_bucket_profile.py                      # GPT-2 small on fastcomm and on Gloo
    python benchmarks/ddp_bucket_profile.py --models cnn --busy 1  # the CNN beside a busy process

The rows go to benchmarks/results/ddp_bucket_profile.json unless --no-record.
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import resource
import threading
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import results_record  # noqa: E402
from real_models import build_model, model_library_versions, noop_hook, run_condition  # noqa: E402

from fastcomm.bench.harness import DDP_WARMUP_STEPS, measured  # noqa: E402

MODES = ["local", "noop", "default", "profiled"]


class BucketClock:
    """The profiling hook's state: per bucket of the current step, [index, bytes,
    ready, done, page faults and CPU seconds of the all_reduce call itself]."""

    def __init__(self, group) -> None:
        self.group = group
        self.world = group.size()
        self.buckets: list[list[float]] = []

    def hook(self, _state, bucket):
        entry = [bucket.index(), bucket.buffer().numel() * bucket.buffer().element_size(), time.monotonic(), 0.0]
        self.buckets.append(entry)
        buffer = bucket.buffer()
        buffer.div_(self.world)
        u0 = resource.getrusage(resource.RUSAGE_THREAD)
        fut = dist.all_reduce(buffer, group=self.group, async_op=True).get_future()
        u1 = resource.getrusage(resource.RUSAGE_THREAD)
        entry += [u1.ru_minflt - u0.ru_minflt, u1.ru_utime + u1.ru_stime - u0.ru_utime - u0.ru_stime]

        def finished(f):
            entry[3] = time.monotonic()
            return f.value()[0]

        return fut.then(finished)


def thread_times() -> dict[str, tuple[float, float]]:
    """(seconds on a CPU, seconds runnable but waiting for one) per thread of
    this process, from /proc's schedstat: the caller's own thread is "main"."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                run_ns, wait_ns, _ = f.read().split()
        except OSError:  # the thread ended
            continue
        key = "main" if int(tid) == threading.get_native_id() else tid
        out[key] = (int(run_ns) / 1e9, int(wait_ns) / 1e9)
    return out


def _cpu_delta(before: dict, after: dict) -> dict[str, float]:
    """CPU and run-queue seconds of the step: the main thread's, and all others' together."""
    d = {"main_cpu": 0.0, "main_wait": 0.0, "other_cpu": 0.0, "other_wait": 0.0}
    for key, (run, wait) in after.items():
        run0, wait0 = before.get(key, (0.0, 0.0))
        who = "main" if key == "main" else "other"
        d[f"{who}_cpu"] += run - run0
        d[f"{who}_wait"] += wait - wait0
    return d


def _timed_step(net, optimizer, loss_of, rank) -> dict:
    optimizer.zero_grad(set_to_none=False)
    threads = thread_times()
    u0 = resource.getrusage(resource.RUSAGE_THREAD)
    t0 = time.monotonic()
    loss = loss_of(net, rank)
    t1 = time.monotonic()
    u1 = resource.getrusage(resource.RUSAGE_THREAD)
    loss.backward()
    t2 = time.monotonic()
    u2 = resource.getrusage(resource.RUSAGE_THREAD)
    optimizer.step()
    t3 = time.monotonic()
    u3 = resource.getrusage(resource.RUSAGE_THREAD)
    usage = {}
    for phase, (a, b) in {"forward": (u0, u1), "backward": (u1, u2), "optimizer": (u2, u3)}.items():
        usage[f"{phase}_user"] = b.ru_utime - a.ru_utime
        usage[f"{phase}_system"] = b.ru_stime - a.ru_stime
        usage[f"{phase}_faults"] = b.ru_minflt - a.ru_minflt
    return {
        "start": t0,
        "forward_end": t1,
        "backward_end": t2,
        "step_end": t3,
        **usage,
        **_cpu_delta(threads, thread_times()),
    }


def _phase_name(key: str) -> str:
    """A step record's key as the summary names it: seconds end in _s, counts do not."""
    return key if key.endswith("_faults") else f"{key}_s"


def _summarise(steps_by_rank: list[list[dict]]) -> dict:
    """Per-bucket skew/transfer and per-step phases from every rank's records."""
    world = len(steps_by_rank)
    per_bucket: dict[int, dict[str, list[float]]] = {}
    phases = {"forward_s": [], "backward_s": [], "optimizer_s": [], "step_s": [], "tail_s": [], "first_ready_s": []}
    usage_keys = [f"{p}_{k}" for p in ("forward", "backward", "optimizer") for k in ("user", "system", "faults")]
    for key in ("main_cpu", "main_wait", "other_cpu", "other_wait", *usage_keys):
        phases[_phase_name(key)] = []
    for s in range(len(steps_by_rank[0])):
        ranks = [steps_by_rank[r][s] for r in range(world)]
        start = min(r["start"] for r in ranks)
        phases["step_s"].append(max(r["step_end"] for r in ranks) - start)
        phases["forward_s"].append(max(r["forward_end"] - r["start"] for r in ranks))
        phases["backward_s"].append(max(r["backward_end"] - r["forward_end"] for r in ranks))
        phases["optimizer_s"].append(max(r["step_end"] - r["backward_end"] for r in ranks))
        for key in ("main_cpu", "main_wait", "other_cpu", "other_wait", *usage_keys):
            phases[_phase_name(key)].append(statistics.mean(r[key] for r in ranks))
        if not ranks[0]["buckets"]:
            continue
        last_ready = max(max(b[2] for b in r["buckets"]) for r in ranks)
        phases["tail_s"].append(max(r["backward_end"] for r in ranks) - last_ready)
        phases["first_ready_s"].append(min(min(b[2] for b in r["buckets"]) for r in ranks) - start)
        for position in range(len(ranks[0]["buckets"])):
            entries = [r["buckets"][position] for r in ranks]
            index, nbytes = entries[0][0], entries[0][1]
            ready = [e[2] for e in entries]
            cell = per_bucket.setdefault(
                position, {"index": index, "bytes": nbytes, "skew": [], "transfer": [], "ready": []}
            )
            cell["skew"].append(max(ready) - min(ready))
            cell["transfer"].append(max(e[3] for e in entries) - max(ready))
            cell["ready"].append(min(ready) - start)
            cell.setdefault("call_faults", []).append(statistics.mean(e[4] for e in entries))
            cell.setdefault("call_cpu", []).append(statistics.mean(e[5] for e in entries))
    buckets = [
        {
            "position": p,
            "index": c["index"],
            "bytes": c["bytes"],
            "ready_s": statistics.median(c["ready"]),
            "skew_s": statistics.median(c["skew"]),
            "transfer_s": statistics.median(c["transfer"]),
            "call_faults": statistics.median(c["call_faults"]),
            "call_cpu_s": statistics.median(c["call_cpu"]),
        }
        for p, c in sorted(per_bucket.items())
    ]
    return {"phases": {k: statistics.median(v) for k, v in phases.items() if v}, "buckets": buckets}


def _rank(rank: int, nproc: int, store, args, neighbour_path: str, busy: int) -> list[dict]:
    import fastcomm  # noqa: F401  (registers the backend)

    torch.set_num_threads(1)
    torch.set_flush_denormal(True)
    dist.init_process_group(
        "fastcomm", store=store, rank=rank, world_size=nproc, timeout=datetime.timedelta(seconds=600)
    )
    groups = {"fastcomm": dist.group.WORLD, "gloo": dist.new_group(backend="gloo")}
    control = dist.new_group(backend="gloo")
    rows = []
    for name in args.models:
        model, loss_of = build_model(name)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
        for backend in args.backends:
            records: dict[str, list[dict]] = {m: [] for m in MODES}
            for p_index in range(args.passes):
                for mode in MODES if p_index % 2 == 0 else list(reversed(MODES)):
                    clock = BucketClock(groups[backend])
                    if mode == "local":
                        net = model
                    else:
                        net = DDP(model, process_group=groups[backend], gradient_as_bucket_view=args.view)
                        if mode == "profiled":
                            net.register_comm_hook(None, clock.hook)
                        elif mode == "noop":
                            net.register_comm_hook(None, noop_hook)
                    for s in range(args.warmup + args.steps):
                        dist.barrier(group=control)
                        clock.buckets = []
                        step = _timed_step(net, optimizer, loss_of, rank)
                        step["buckets"] = clock.buckets
                        if s >= args.warmup:
                            records[mode].append(step)
                    del net
            row = {"model": name, "backend": backend, "view": args.view, "busy": busy}
            for mode in MODES:
                gathered: list = [None] * nproc
                dist.all_gather_object(gathered, records[mode], group=control)
                row[mode] = _summarise(gathered)
            rows.append(row)
            measured(rank, f"{name} on {backend} ({'beside %d busy' % busy if busy else 'quiet'})")
        del model, optimizer
    dist.destroy_process_group()
    return rows


def print_row(row: dict) -> None:
    ms = 1e3
    print(f"\n{row['model']} on {row['backend']}{' +view' if row['view'] else ''}, busy={row['busy']}")
    for mode in MODES:
        ph = row[mode]["phases"]
        extra = ""
        if "tail_s" in ph:
            extra = (
                f"  first bucket ready {ph['first_ready_s'] * ms:.0f}  tail after last ready {ph['tail_s'] * ms:.0f}"
            )
        print(
            f"  {mode:9s} step {ph['step_s'] * ms:7.0f} ms  forward {ph['forward_s'] * ms:6.0f}"
            f"  backward {ph['backward_s'] * ms:6.0f}  optimizer {ph['optimizer_s'] * ms:5.0f}{extra}"
        )
        print(
            f"  {'':9s} per rank: caller's thread on CPU {ph['main_cpu_s'] * ms:6.0f} ms, runnable waiting"
            f" {ph['main_wait_s'] * ms:5.0f}; other threads on CPU {ph['other_cpu_s'] * ms:5.0f}, waiting"
            f" {ph['other_wait_s'] * ms:5.0f}"
        )
        print(
            f"  {'':9s} caller's thread user/system ms, minor faults: "
            + ";  ".join(
                f"{p} {ph[p + '_user_s'] * ms:.0f}/{ph[p + '_system_s'] * ms:.0f}, {ph[p + '_faults']:.0f}"
                for p in ("forward", "backward", "optimizer")
            )
        )
    buckets = row["profiled"]["buckets"]
    if buckets:
        print("  bucket  MiB    ready ms  skew ms  transfer ms  GB/s  call: faults  cpu ms")
        for b in buckets:
            mib = b["bytes"] / 2**20
            rate = b["bytes"] / b["transfer_s"] / 1e9 if b["transfer_s"] > 0 else float("inf")
            print(
                f"  {b['index']:6d} {mib:6.1f} {b['ready_s'] * ms:9.1f} {b['skew_s'] * ms:8.1f}"
                f" {b['transfer_s'] * ms:11.1f} {rate:6.2f}  {b['call_faults']:12.0f} {b['call_cpu_s'] * ms:7.1f}"
            )
        total = sum(b["transfer_s"] for b in buckets)
        print(f"  sum of transfers {total * ms:.0f} ms, sum of skews {sum(b['skew_s'] for b in buckets) * ms:.0f} ms")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--models", nargs="+", default=["gpt2"])
    p.add_argument("--backends", nargs="+", choices=["fastcomm", "gloo"], default=["fastcomm", "gloo"])
    p.add_argument("--view", action="store_true", help="gradient_as_bucket_view=True")
    p.add_argument("--busy", type=int, default=0, help="busy processes beside the ranks")
    p.add_argument("--warmup", type=int, default=DDP_WARMUP_STEPS, help="untimed steps after each DDP is built")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--passes", type=int, default=2, help="passes over the configurations, alternating order")
    results_record.add_arguments(p, "ddp_bucket_profile")
    args = p.parse_args(argv)
    rows = run_condition(args, args.busy, _rank)
    for row in rows:
        print_row(row)
    results_record.save(
        args, "ddp_bucket_profile", rows, script=__file__, argv=argv, extra_versions=model_library_versions()
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
