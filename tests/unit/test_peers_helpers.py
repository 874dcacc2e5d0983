"""benchmarks/peers helpers: how many samples a round of equal time takes (rounds.py), and
run.py's jobs without address-space randomization."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks", "peers"))
import run  # noqa: E402
from rounds import more_samples  # noqa: E402


def test_equal_count_takes_no_more():
    assert more_samples(30, 0.0, 1000, 0.001) == 0


def test_equal_time_fills_the_round_up_to_the_cap():
    assert more_samples(30, 100.0, 200000, 0.003) == 970  # 30 in 3 ms: 1000 in 100 ms
    assert more_samples(30, 100.0, 200000, 0.0031) == 938  # ceil(967.7) - 30
    assert more_samples(30, 100.0, 500, 0.003) == 470  # at most max_samples in all
    assert more_samples(30, 100.0, 200000, 0.25) == 0  # the first 30 already took longer
    assert more_samples(30, 100.0, 20, 0.001) == 0  # a cap under --iters takes nothing more


def test_fixed_layout_turns_randomization_off_in_the_job_and_its_children():
    """The flag is set before exec and survives it, in a grandchild too (ranks under mpiexec)."""
    def flags(preexec_fn):
        out = subprocess.run(["sh", "-c", "cat /proc/self/personality"], capture_output=True, text=True,
                             preexec_fn=preexec_fn, check=True)
        return int(out.stdout, 16)
    assert not flags(None) & run.ADDR_NO_RANDOMIZE
    assert flags(run._fixed_layout) & run.ADDR_NO_RANDOMIZE
