"""How long a round of one size lasts: the one rule every worker follows
(torch_worker.py, mpi_worker.py; oneccl_worker.cpp repeats it in C++).

With --round-ms 0 a round is --iters samples. With --round-ms T, after the
first --iters samples rank 0 sees how long they took (barriers included) and
every rank takes as many more as make the size's loop last about T ms, at most
--max-samples in all: equal time, not equal count. A fast library's 30 samples
cover a far shorter stretch of the machine's own variation (docs/shm_benchmarks.md,
"What spreads the rounds") than a slow library's, so with equal counts the
round-to-round spread compares unlike stretches.
"""
import math

DEFAULT_MAX_SAMPLES = 200000


def more_samples(iters: int, round_ms: float, max_samples: int, seconds: float) -> int:
    """Samples to take after the first `iters`, which took `seconds`."""
    if round_ms <= 0:
        return 0
    wanted = math.ceil(iters * round_ms / 1e3 / max(seconds, 1e-9))
    return max(0, min(wanted, max_samples) - iters)
