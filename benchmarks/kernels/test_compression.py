"""Compression kernels (fastcomm::compress_* operators) against a plain copy
and torch's own way of doing the same job. Bytes per kernel: gradient in,
error feedback in and out, payload out; for the decompress-and-sum kernels the
gathered payloads of RANKS ranks in and the bucket out."""

import pytest
import torch

import fastcomm  # noqa: F401  (loads the operators)
from bench_helpers import run

ops = torch.ops.fastcomm
RANKS = 2
SIZES = [1 << 22]  # float32 elements (16 MiB)


@pytest.fixture(scope="module", params=SIZES, ids=lambda n: f"{4 * n >> 20}MiB")
def bufs(request):
    n = request.param
    g = torch.randn(n, generator=torch.Generator().manual_seed(0))
    k = max(1, n // 20)
    return {
        "n": n,
        "k": k,
        "g": g,
        "error": torch.zeros(n),
        "out": torch.empty(n),
        "half": torch.empty(n, dtype=torch.float16),
        "int8": ops.compress_int8_quantize(g, None, 256, False, 0).repeat(RANKS, 1),
        "topk": ops.compress_topk(g, None, k).repeat(RANKS, 1),
        "sign": ops.compress_sign(g, None).repeat(RANKS, 1),
        "sources": [g, *(torch.randn(n, generator=torch.Generator().manual_seed(q)) for q in range(1, 8))],
    }


def _torch_low_precision_sum(sources, out):
    """The native fp16 all_reduce's sum done with torch ops: each source scaled into float16, summed in
    float32 in order, rounded to float16 once, widened into out."""
    wire = [s.mul(1 / len(sources)).to(torch.float16) for s in sources]
    total = wire[0].float()
    for w in wire[1:]:
        total += w
    out.copy_(total.to(torch.float16))


def _low_precision_sum(n):
    return (
        lambda b: fastcomm._C.low_precision_sum(b["sources"][:n], b["out"], "float16", 1 / n, 65504.0 / n),
        lambda elements, k: 4 * (n + 1) * elements,
    )


# group -> implementation -> (call(bufs), bytes(n, k)). "copy" (the memory
# bandwidth reference) joins every group; "torch" is how torch's hooks do the job.
GROUPS = {
    "fp16 compress": {
        "fastcomm": (
            lambda b: ops.compress_multi_tensor_pack([b["g"]], b["half"], 1 / RANKS, 65504.0 / RANKS),
            lambda n, k: 6 * n,
        ),
        "torch": (lambda b: b["g"].div_(1.0).to(torch.float16), lambda n, k: 6 * n),  # divide in place, convert
    },
    "fp16 decompress": {
        "fastcomm": (lambda b: ops.compress_multi_tensor_unpack(b["half"], [b["out"]], 1.0), lambda n, k: 6 * n),
        "torch": (lambda b: b["out"].copy_(b["half"]), lambda n, k: 6 * n),
    },
    "bf16 compress": {
        "fastcomm": (
            lambda b: ops.compress_multi_tensor_pack([b["g"]], b["half"].view(torch.bfloat16), 1 / RANKS, float("inf")),
            lambda n, k: 6 * n,
        ),
        "torch": (lambda b: b["g"].mul(1 / RANKS).to(torch.bfloat16), lambda n, k: 6 * n),
    },
    # The native fp16 all_reduce's sum over the ranks of a host (compress::low_precision_sum_cpu): 2-8
    # sources read in one loop; "copy" moves 8 bytes per element where these move 12-36.
    "fp16 low-precision sum": {
        "fastcomm 2 sources": _low_precision_sum(2),
        "fastcomm 3 sources": _low_precision_sum(3),
        "fastcomm 4 sources": _low_precision_sum(4),
        "fastcomm 8 sources": _low_precision_sum(8),
        "torch 4 sources": (lambda b: _torch_low_precision_sum(b["sources"][:4], b["out"]), lambda n, k: 20 * n),
    },
    "compression kernels": {
        "int8 quantize + EF": (
            lambda b: ops.compress_int8_quantize(b["g"], b["error"], 256, False, 0),
            lambda n, k: 13 * n,
        ),
        "int8 quantize stochastic": (
            lambda b: ops.compress_int8_quantize(b["g"], None, 256, True, 1),
            lambda n, k: 5 * n,
        ),
        "int8 dequantize-sum": (
            lambda b: ops.compress_int8_dequantize_sum(b["int8"], b["out"], 256, 1 / RANKS),
            lambda n, k: (RANKS + 4) * n,
        ),
        "topk 5% + EF": (lambda b: ops.compress_topk(b["g"], b["error"], b["k"]), lambda n, k: 12 * n),
        "torch.topk 5%": (lambda b: torch.topk(b["g"].abs(), b["k"]), lambda n, k: 4 * n),  # the selection alone
        "topk-sum": (
            lambda b: ops.compress_topk_sum(b["topk"], b["out"], 1 / RANKS),
            lambda n, k: 4 * n + 8 * k * RANKS,
        ),
        "sign + EF": (lambda b: ops.compress_sign(b["g"], b["error"]), lambda n, k: 12 * n),
        "sign-sum": (
            lambda b: ops.compress_sign_sum(b["sign"], b["out"], 1 / RANKS),
            lambda n, k: 4 * n + RANKS * n // 8,
        ),
    },
}
COPY = (lambda b: b["out"].copy_(b["g"]), lambda n, k: 8 * n)
CASES = [(group, impl) for group, impls in GROUPS.items() for impl in [*impls, "copy"]]


@pytest.mark.parametrize("group, impl", CASES, ids=[f"{g}: {i}" for g, i in CASES])
def test_compression(benchmark, bufs, group, impl):
    benchmark.group = group
    call, nbytes = COPY if impl == "copy" else GROUPS[group][impl]
    run(benchmark, lambda: call(bufs), nbytes(bufs["n"], bufs["k"]))


@pytest.mark.benchmark(group="powersgd products (1024x1024, rank 4)")
@pytest.mark.parametrize("impl", ["fastcomm", "torch"])
def test_powersgd_products(benchmark, impl):
    g = torch.Generator().manual_seed(0)
    m, q = torch.randn(1024, 1024, generator=g), torch.randn(1024, 4, generator=g)
    if impl == "fastcomm":
        p = torch.empty(1024, 4)
        run(benchmark, lambda: ops.compress_powersgd_project(m, q, p), 4 * m.numel())
    else:
        run(benchmark, lambda: torch.mm(m, q), 4 * m.numel())
