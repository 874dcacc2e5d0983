"""fastcomm-bench's specs at world sizes 2 and 3: every collective, dtype and op
checks clean on fastcomm, and a corrupted result on one rank is counted on all."""

import torch.distributed as dist

from fastcomm.bench.collectives import COLLECTIVES, DTYPES, OPS
from fastcomm.bench.harness import SweepConfig, exit_status, sweep


def _cfg(name: str) -> SweepConfig:
    ops = tuple(OPS) if COLLECTIVES[name].reduces else ("none",)
    root = dist.get_world_size() - 1 if COLLECTIVES[name].rooted else 0
    return SweepConfig(name, (8, 1000), tuple(DTYPES), ops, root, 1, 0, 1, 1, False, "cpu")


def every_collective_clean(rank, world_size):
    control = dist.new_group(backend="gloo")
    for name in COLLECTIVES:
        rows = sweep(_cfg(name), {"fastcomm": dist.group.WORLD}, control)
        bad = [
            (r.dtype, r.op, r.size, m.wrong, m.error)
            for r in rows["fastcomm"]
            for m in (r.out_of_place, r.in_place)
            if m is not None and (m.wrong or m.error)
        ]
        assert not bad, f"{name}: {bad[:5]}"
    dist.destroy_process_group(control)


def corruption_on_one_rank_is_caught(rank, world_size):
    control = dist.new_group(backend="gloo")
    spec = COLLECTIVES["all_gather"]

    def prepare(*args):
        buffers = spec.prepare(*args)
        run = buffers.run

        def run_then_corrupt(group, async_op):
            for w in run(group, False):
                w.wait()
            if rank == world_size - 1:
                buffers.result[0] += 1  # one wrong element on one rank
            return []

        buffers.run = run_then_corrupt
        return buffers

    cfg = SweepConfig("all_gather", (64,), ("int32",), ("none",), 0, 1, 0, 1, 1, False, "cpu")
    rows = sweep(cfg, {"fastcomm": dist.group.WORLD}, control, prepare=prepare)
    row = rows["fastcomm"][0]
    assert row.out_of_place.wrong == 1 and row.in_place.wrong == 1, row
    assert exit_status(rows) == 1
    dist.destroy_process_group(control)
