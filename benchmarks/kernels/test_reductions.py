"""The shared-memory engine's reduction kernel (csrc/kernels/cpu/reduce.cpp),
two 16 MiB sources into a third (and eight, a host of eight ranks), against
torch's add and a plain copy of the same size. Bytes: the sources read, the
destination written."""

import pytest
import torch

from bench_helpers import run
from fastcomm import _C

N = 1 << 22


@pytest.mark.benchmark(group="reduce 2 x 16 MiB float32")
@pytest.mark.parametrize("impl", ["fastcomm sum", "torch add", "copy"])
def test_reduce_float32(benchmark, impl):
    a, b, out = torch.randn(N), torch.randn(N), torch.empty(N)
    if impl == "fastcomm sum":
        run(benchmark, lambda: _C.reduce_buffers([a, b], out, "sum"), 12 * N)
    elif impl == "torch add":
        run(benchmark, lambda: torch.add(a, b, out=out), 12 * N)
    else:
        run(benchmark, lambda: out.copy_(a), 8 * N)


@pytest.mark.benchmark(group="reduce 2 x 8 MiB bfloat16 (float32 accumulation)")
@pytest.mark.parametrize("impl", ["fastcomm sum", "torch add", "copy"])
def test_reduce_bfloat16(benchmark, impl):
    a, b = torch.randn(N).bfloat16(), torch.randn(N).bfloat16()
    out = torch.empty(N, dtype=torch.bfloat16)
    if impl == "fastcomm sum":
        run(benchmark, lambda: _C.reduce_buffers([a, b], out, "sum"), 6 * N)
    elif impl == "torch add":  # torch rounds the same way for two sources
        run(benchmark, lambda: torch.add(a, b, out=out), 6 * N)
    else:
        run(benchmark, lambda: out.copy_(a), 4 * N)


@pytest.mark.benchmark(group="reduce 8 x 16 MiB float32 (a host of 8 ranks)")
@pytest.mark.parametrize("impl", ["fastcomm sum", "torch add", "copy"])
def test_reduce_float32_eight_sources(benchmark, impl):
    sources, out = [torch.randn(N) for _ in range(8)], torch.empty(N)
    if impl == "fastcomm sum":  # one pass over all eight
        run(benchmark, lambda: _C.reduce_buffers(sources, out, "sum"), 36 * N)
    elif impl == "torch add":  # seven passes, as a torch program would sum them

        def add_all():
            torch.add(sources[0], sources[1], out=out)
            for s in sources[2:]:
                out.add_(s)

        run(benchmark, add_all, 36 * N)
    else:
        run(benchmark, lambda: out.copy_(sources[0]), 8 * N)
