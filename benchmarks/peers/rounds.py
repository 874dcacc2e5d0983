"""How long a round of one size lasts: the one rule every worker follows
(torch_worker.py, mpi_worker.py; oneccl_worker.cpp repeats it in C++).

With --round-ms 0 a round is --iters samples. With --round-ms T, after the
first --iters samples rank 0 sees how long they took (barriers included) and
every rank takes as many more as make the size's loop last about T ms, at most
--max-samples in all: equal time, not equal count. A fast library's 30 samples
cover a far shorter stretch of the machine's own variation than a slow library's, so with equal counts the
round-to-round spread compares unlike stretches.
"""

import math
import time

DEFAULT_MAX_SAMPLES = 200000


def add_arguments(parser) -> None:
    """A worker's --round-ms and --max-samples (oneccl.py passes them on to its C++ worker)."""
    parser.add_argument(
        "--round-ms",
        type=float,
        default=0.0,
        help="more samples than --iters until each size's loop lasts about this long (0: --iters)",
    )
    parser.add_argument("--max-samples", type=int, default=DEFAULT_MAX_SAMPLES, help="per size, with --round-ms")


def more_samples(iters: int, round_ms: float, max_samples: int, seconds: float) -> int:
    """Samples to take after the first `iters`, which took `seconds`."""
    if round_ms <= 0:
        return 0
    wanted = math.ceil(iters * round_ms / 1e3 / max(seconds, 1e-9))
    return max(0, min(wanted, max_samples) - iters)


def take_round(take, agree_max, rank: int, args) -> list[float]:
    """One size's samples on this rank: take(k) takes k samples (and ends with
    the library's untimed barrier); agree_max(n) returns the largest n over the
    ranks (only rank 0's count is not 0, so every rank takes the same number)."""
    start = time.perf_counter()
    samples = list(take(args.iters))
    if args.round_ms > 0:
        seconds = time.perf_counter() - start
        extra = agree_max(more_samples(args.iters, args.round_ms, args.max_samples, seconds) if rank == 0 else 0)
        if extra > 0:
            samples += list(take(extra))
    return samples
