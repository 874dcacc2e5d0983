"""Random sequences of collectives, checked op by op: one rank of a fuzz run.

    python fuzz.py RANK WORLD_SIZE STORE_PATH SEED OPS [MISMATCHES]
    torchrun ... fuzz.py env env env SEED OPS [MISMATCHES]    # rank, size and store from torchrun

Every rank draws the same sequence from SEED: collective, dtype, size, reduce
op, root, layout (contiguous, a strided view, an input that aliases an output
block, its own or another rank's), and, with MISMATCHES=1, now and then one
rank calls something else than the others (another size, dtype, reduce op or
collective). Inputs are small integers, so every result is exact and each rank
computes it from everyone's inputs. Per op a rank prints
'OUTCOME <rank> <op> ok|raised|WRONG <what>': 'ok' only after checking the
result exactly; the test then requires every rank to report the same outcome
for every op, 'raised' exactly where a mismatch was drawn, and no 'WRONG'.
Per-rank configuration (options that may differ, CPU affinity) comes from the
environment the test gives each rank; FUZZ_BIND_ONE_CPU=1 binds the rank to
one CPU before the group is made (a launcher's doing).
"""

import copy
import datetime
import os
import random
import sys

import torch
import torch.distributed as dist

import fastcomm  # noqa: F401  (registers the backend)

R = dist.ReduceOp
DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.int32, torch.int64]
NUMELS = [1, 3, 1024, (16 << 10) + 3, 256 << 10, (1 << 20) + 1]
REDUCE_OPS = {"sum": R.SUM, "max": R.MAX, "min": R.MIN}
# Collectives that run on the shared-memory engine on one host; gather and
# scatter go to Gloo there. A mismatch that sends one rank to the engine and
# another to Gloo is caught only by the timeout, and leaves the engine
# unusable: the drawn mismatches stay within one of the two sets.
ENGINE_OPS = [
    "all_reduce",
    "broadcast",
    "all_gather_into_tensor",
    "all_gather",
    "reduce_scatter_tensor",
    "reduce",
    "all_to_all_single",
    "barrier",
]
GLOO_OPS = ["gather", "scatter"]


def values(rank: int, k: int, numel: int, dtype: torch.dtype) -> torch.Tensor:
    """Rank `rank`'s input of op k: integers in [-4, 4] (sums of 8 ranks stay exact in bfloat16)."""
    g = torch.Generator().manual_seed(k * 1009 + rank)
    return torch.randint(-4, 5, (numel,), generator=g).to(dtype)


def reduce_all(tensors: list, op: str) -> torch.Tensor:
    stacked = torch.stack([t.double() for t in tensors])
    out = {"sum": stacked.sum(0), "max": stacked.max(0).values, "min": stacked.min(0).values}[op]
    return out.to(tensors[0].dtype)


def layout(rng: random.Random, numel: int, dtype: torch.dtype, data: torch.Tensor, kind: str) -> torch.Tensor:
    """`data` in a fresh tensor, or as a strided view of a larger buffer."""
    if kind == "strided":
        buffer = torch.zeros(2 * numel, dtype=dtype)
        view = buffer[::2]
        view.copy_(data)
        return view
    return data.clone()


class Call:
    """One drawn op, as every rank draws it (before any rank's mismatch)."""

    def __init__(self, rng: random.Random, ops: list) -> None:
        self.op = rng.choice(ops)
        self.dtype = rng.choice(DTYPES)
        self.numel = rng.choice(NUMELS)
        self.reduce = rng.choice(list(REDUCE_OPS))
        self.layout = rng.choice(["contiguous", "contiguous", "strided", "alias"])
        self.root = 0
        self.alias_block = 0


def run_op(c: Call, k: int, rank: int, n: int, rng: random.Random) -> str:
    """Runs op k on this rank and checks its result; returns 'ok' or raises AssertionError."""
    everyone = [values(r, k, c.numel, c.dtype) for r in range(n)]
    mine = layout(rng, c.numel, c.dtype, everyone[rank], c.layout)
    op = REDUCE_OPS[c.reduce]
    if c.op == "all_reduce":
        dist.all_reduce(mine, op=op)
        expected = reduce_all(everyone, c.reduce)
        assert torch.equal(mine, expected), "all_reduce"
    elif c.op == "broadcast":
        dist.broadcast(mine, src=c.root)
        assert torch.equal(mine, everyone[c.root]), "broadcast"
    elif c.op == "reduce":
        dist.reduce(mine, dst=c.root, op=op)
        if rank == c.root:
            assert torch.equal(mine, reduce_all(everyone, c.reduce)), "reduce"
    elif c.op == "all_gather_into_tensor":
        out = torch.zeros(n * c.numel, dtype=c.dtype)
        if c.layout == "alias":  # the input is block alias_block of the output (this rank's own, or not)
            block = out[c.alias_block * c.numel : (c.alias_block + 1) * c.numel]
            block.copy_(everyone[rank])
            mine = block
        dist.all_gather_into_tensor(out, mine)
        assert torch.equal(out, torch.cat(everyone)), "all_gather_into_tensor"
    elif c.op == "all_gather":
        outs = [torch.zeros(c.numel, dtype=c.dtype) for _ in range(n)]
        dist.all_gather(outs, mine)
        assert all(torch.equal(o, e) for o, e in zip(outs, everyone)), "all_gather"
    elif c.op == "reduce_scatter_tensor":
        blocks = [[values(r, k * 31 + b, c.numel, c.dtype) for b in range(n)] for r in range(n)]
        inp = torch.cat(blocks[rank])
        out = torch.zeros(c.numel, dtype=c.dtype)
        if c.layout == "alias":  # the output is block alias_block of the input
            out = inp[c.alias_block * c.numel : (c.alias_block + 1) * c.numel]
        dist.reduce_scatter_tensor(out, inp, op=op)
        assert torch.equal(out, reduce_all([blocks[r][rank] for r in range(n)], c.reduce)), "reduce_scatter_tensor"
    elif c.op == "all_to_all_single":
        blocks = [[values(r, k * 37 + b, c.numel, c.dtype) for b in range(n)] for r in range(n)]
        inp = torch.cat(blocks[rank])
        out = inp if c.layout == "alias" else torch.zeros(n * c.numel, dtype=c.dtype)
        dist.all_to_all_single(out, inp)
        assert torch.equal(out, torch.cat([blocks[s][rank] for s in range(n)])), "all_to_all_single"
    elif c.op == "gather":
        outs = [torch.zeros(c.numel, dtype=c.dtype) for _ in range(n)] if rank == c.root else None
        dist.gather(mine, outs, dst=c.root)
        if rank == c.root:
            assert all(torch.equal(o, e) for o, e in zip(outs, everyone)), "gather"
    elif c.op == "scatter":
        out = torch.zeros(c.numel, dtype=c.dtype)
        dist.scatter(out, everyone if rank == c.root else None, src=c.root)
        assert torch.equal(out, everyone[rank]), "scatter"
    elif c.op == "barrier":
        dist.barrier()
    return "ok"


def mismatch(c: Call, rng: random.Random, ops: list) -> str:
    """Changes `c` into another call (the odd rank's); returns what changed."""
    kind = rng.choice(["numel", "dtype", "reduce", "op"]) if c.op != "barrier" else "op"
    if kind == "numel":
        c.numel += 1
    elif kind == "dtype":
        c.dtype = rng.choice([d for d in DTYPES if d != c.dtype])
    elif kind == "reduce" and c.op in ("all_reduce", "reduce", "reduce_scatter_tensor"):
        c.reduce = rng.choice([r for r in REDUCE_OPS if r != c.reduce])
    else:
        kind = "op"
        c.op = rng.choice([o for o in ops if o != c.op and o != "barrier"])
    return kind


def main() -> None:
    seed, count = int(sys.argv[4]), int(sys.argv[5])
    mismatches = len(sys.argv) > 6 and sys.argv[6] == "1"
    if os.environ.get("FUZZ_BIND_ONE_CPU") == "1":
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    torch.set_num_threads(1)
    timeout = datetime.timedelta(seconds=30)
    if sys.argv[3] == "env":
        dist.init_process_group("fastcomm", timeout=timeout)
    else:
        n = int(sys.argv[2])
        dist.init_process_group(
            "fastcomm", store=dist.FileStore(sys.argv[3], n), rank=int(sys.argv[1]), world_size=n, timeout=timeout
        )
    rank, n = dist.get_rank(), dist.get_world_size()
    rng = random.Random(seed)  # the same draws on every rank
    layout_rng = random.Random(seed * 7 + rank)  # this rank's own views
    for k in range(count):
        ops = rng.choice([ENGINE_OPS, ENGINE_OPS, GLOO_OPS])
        c = Call(rng, ops)
        c.root = rng.randrange(n)
        c.alias_block = rng.randrange(n)
        odd_rank = rng.randrange(n) if mismatches and rng.random() < 0.15 else -1
        changed = "-"
        if odd_rank >= 0:  # every rank draws the odd call, so the draws stay in step
            odd = copy.copy(c)
            changed = mismatch(odd, rng, ops)
            if odd_rank == rank:
                c = odd
            else:
                changed = "other rank"
        try:
            outcome = run_op(c, k, rank, n, layout_rng)
        except AssertionError as error:
            outcome = f"WRONG {error}"
        except RuntimeError as error:
            outcome = "raised " + " ".join(str(error).split())[:200]
        expect = "mismatch" if odd_rank >= 0 else "match"
        emit(
            f"OUTCOME {rank} {k} {outcome.split()[0]} {expect} {c.op} {c.dtype} {c.numel} {c.layout} {changed} | {outcome}"
        )
    dist.destroy_process_group()
    emit(f"DONE {rank}")


def emit(line: str) -> None:
    """One line in one write: the ranks share the launcher's pipe, and print's
    separate writes of the text and its newline interleaved ("DONE 2DONE 3")."""
    sys.stdout.flush()
    os.write(sys.stdout.fileno(), (line + "\n").encode())


main()
