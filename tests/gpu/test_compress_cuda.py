"""The compression kernels and hooks on CUDA (skipped without a GPU): the CUDA
operators against the same plain references as the CPU ones, no host
synchronisation in any operator or in the hooks, and every hook through NCCL
in a 1-rank group."""

import datetime
import os
import sys

import pytest
import torch
import torch.distributed as dist
from torch import nn

import fastcomm
import fastcomm.hooks

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "multiproc"))
from compress_cases import DTYPES, SIZES, check_int8, check_pack_unpack, check_sign, check_topk  # noqa: E402

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or not fastcomm.cuda_kernels_compiled(),
    reason="needs a CUDA device and fastcomm built with its CUDA kernels",
)
ops = torch.ops.fastcomm


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("dst_dtype", DTYPES, ids=str)
@pytest.mark.parametrize("limit", [float("inf"), 100.0])
def test_pack_unpack(dtype, dst_dtype, limit):
    check_pack_unpack("cuda", dtype, dst_dtype, limit)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("with_error", [False, True])
def test_int8(n, dtype, with_error):
    check_int8("cuda", n, dtype, 64, with_error)


def test_int8_stochastic_matches_cpu():
    """The same counter-based draws on both devices: bitwise the same payload."""
    x = torch.randn(10000)
    cpu = ops.compress_int8_quantize(x, None, 256, True, 5)
    gpu = ops.compress_int8_quantize(x.cuda(), None, 256, True, 5)
    assert torch.equal(cpu, gpu.cpu())


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("with_error", [False, True])
def test_topk(n, dtype, with_error):
    for k in sorted({1, max(1, n // 100), n}):
        check_topk("cuda", n, dtype, k, with_error)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("with_error", [False, True])
def test_sign(n, dtype, with_error):
    check_sign("cuda", n, dtype, with_error)


def test_operators_do_not_sync():
    x = torch.randn(100000, device="cuda")
    err = torch.zeros_like(x)
    out = torch.empty_like(x)
    half = torch.empty(100000, dtype=torch.float16, device="cuda")
    counter = torch.zeros(1, dtype=torch.long, device="cuda")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        ops.compress_multi_tensor_pack([x], half, 0.5, 100.0, counter)
        ops.compress_multi_tensor_unpack(half, [out], 2.0)
        p = ops.compress_int8_quantize(x, err, 256, True, 1)
        ops.compress_int8_dequantize_sum(p.view(1, -1), out, 256, 1.0)
        p = ops.compress_topk(x, err, 1000)
        ops.compress_topk_sum(p.view(1, -1), out, 1.0)
        p = ops.compress_sign(x, err)
        ops.compress_sign_sum(p.view(1, -1), out, 1.0)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()


def _kernels_of_the_hooks(x, err, out, half, counter):
    """Each compression operator and its sum, as the hooks call them; their outputs."""
    ops.compress_multi_tensor_pack([x], half, 0.5, 100.0, counter)
    ops.compress_multi_tensor_unpack(half, [out], 2.0)
    results = [half.clone(), out.clone()]
    p = ops.compress_int8_quantize(x, err, 256, False, 1)
    ops.compress_int8_dequantize_sum(p.view(1, -1), out, 256, 1.0)
    results += [p, out.clone()]
    p = ops.compress_topk(x, err, 1000)
    ops.compress_topk_sum(p.view(1, -1), out, 1.0)
    results += [p, out.clone()]
    p = ops.compress_sign(x, err)
    ops.compress_sign_sum(p.view(1, -1), out, 1.0)
    return results + [p, out.clone(), err.clone()]


def test_hook_kernels_capture_in_a_cuda_graph():
    """The hooks' kernels can be captured in a CUDA graph (no host
    synchronisation, no allocation outside the graph's pool): a replay gives
    what the same calls give eagerly, error feedback included."""
    x = torch.randn(100000, device="cuda")

    def buffers():  # error feedback, output, fp16 payload, clamp counter
        return (
            torch.zeros_like(x),
            torch.empty_like(x),
            torch.empty(100000, dtype=torch.float16, device="cuda"),
            torch.zeros(1, dtype=torch.long, device="cuda"),
        )

    err, out, half, counter = buffers()
    expected = _kernels_of_the_hooks(x, err, out, half, counter)
    err, out, half, counter = buffers()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture, as torch's graph docs ask
        _kernels_of_the_hooks(x, torch.zeros_like(err), torch.empty_like(out), torch.empty_like(half), counter.clone())
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = _kernels_of_the_hooks(x, err, out, half, counter)
    graph.replay()
    torch.cuda.synchronize()
    for i, (got, want) in enumerate(zip(captured, expected)):
        assert torch.equal(got, want), f"result {i} of the captured kernels differs from the eager one"


@pytest.mark.parametrize("op", ["compress_int8_dequantize_sum", "compress_sign_sum"])
def test_misaligned_payloads_refused(op):
    """A gathered buffer that does not start 4-byte aligned is refused before a kernel
    loads its float32 scales (a misaligned load would fault), as on CPU."""
    gathered = torch.zeros(9, dtype=torch.uint8, device="cuda")[1:].view(1, 8)
    args = (
        (gathered, torch.zeros(4, device="cuda"), 4, 1.0)
        if "int8" in op
        else (gathered, torch.zeros(32, device="cuda"), 1.0)
    )
    with pytest.raises(RuntimeError, match=f"fastcomm {op}: the gathered payloads must start 4-byte aligned"):
        getattr(ops, op)(*args)
    torch.cuda.synchronize()  # nothing was launched that could have faulted


@pytest.fixture(scope="module")
def nccl_group():
    """A 1-rank fastcomm group (CUDA collectives go to NCCL)."""
    if dist.is_initialized():
        yield None
        return
    store = dist.HashStore()
    dist.init_process_group("fastcomm", store=store, rank=0, world_size=1, timeout=datetime.timedelta(seconds=60))
    yield None
    dist.destroy_process_group()


@pytest.mark.parametrize("name", fastcomm.hooks.HOOK_NAMES)
def test_hooks_on_cuda(nccl_group, name):
    """Every hook trains a CUDA DDP model through NCCL without a host sync inside
    the hook (after DDP's first step), and a world of one gets its gradient
    back (exactly for the lossless hooks)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)).cuda()
    reference = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)).cuda()
    reference.load_state_dict(model.state_dict())
    ddp = nn.parallel.DistributedDataParallel(model)
    # PowerSGD compresses from the first step (torch's default waits 1000).
    state = fastcomm.hooks.make_state(name, **({"start_powerSGD_iter": 0} if name == "powersgd" else {}))
    state.bind(ddp)
    hook = fastcomm.hooks.registry.HOOKS[name][1]
    checking = {"on": False}

    def checked(state, bucket):
        torch.cuda.set_sync_debug_mode("error" if checking["on"] else "default")
        try:
            return hook(state, bucket)
        finally:
            torch.cuda.set_sync_debug_mode("default")

    ddp.register_comm_hook(state, checked)
    x = torch.randn(32, 64, device="cuda")
    for step in range(3):
        checking["on"] = step > 0  # the first step allocates the state's buffers
        ddp.zero_grad()
        ddp(x).square().mean().backward()
    reference(x).square().mean().backward()
    for p, r in zip(model.parameters(), reference.parameters()):
        assert torch.isfinite(p.grad).all()
        if name == "allreduce":
            torch.testing.assert_close(p.grad, r.grad)
    assert state.stats()["steps"] == 3
