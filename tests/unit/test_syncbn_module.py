"""fastcomm.nn.SyncBatchNorm in one process (no group: plain batch norm on
fastcomm's kernels) against nn.BatchNorm*d in float64; conversion, state
dicts, autograd and torch's errors. Multi-rank behaviour: tests/multiproc/test_syncbn.py."""

import copy
import os
import sys

import pytest
import torch
from torch import nn

import fastcomm
from fastcomm._compat import batchnorm_has_bias_switch
from fastcomm.nn import SyncBatchNorm
from fastcomm.nn._syncbn_function import SyncBatchNormFunction

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "multiproc"))
from syncbn_reference import assert_close, batchnorm_class, forward_backward, global_batch, init_affine  # noqa: E402


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize(
    "feature_shape,channels_last",
    [((5,), False), ((3, 7), False), ((3, 5, 4), False), ((6, 5, 4), True), ((2, 3, 4, 5), True)],
    ids=str,
)
def test_matches_batchnorm_in_one_process(feature_shape, channels_last, dtype):
    param_dtype = torch.float64 if dtype == torch.float64 else torch.float32
    ours = SyncBatchNorm(feature_shape[0], dtype=param_dtype)
    ref = batchnorm_class(1 + len(feature_shape))(feature_shape[0], dtype=torch.float64)
    init_affine(ours)
    init_affine(ref)
    for step in range(2):
        x, dy = global_batch(6, feature_shape, dtype, seed=step, channels_last=channels_last)
        y, dx = forward_backward(ours, x, dy)
        y_ref, dx_ref = forward_backward(ref, x.double(), dy.double())
        assert_close(y, y_ref, dtype, "output")
        assert_close(dx, dx_ref, dtype, "input grad")
        assert_close(ours.weight.grad, ref.weight.grad, param_dtype, "weight grad")
        assert_close(ours.bias.grad, ref.bias.grad, param_dtype, "bias grad")
        assert_close(ours.running_var, ref.running_var, param_dtype, "running_var")
    ours.eval()
    ref.eval()
    x, _ = global_batch(3, feature_shape, dtype, seed=9, channels_last=channels_last)
    with torch.no_grad():
        assert_close(ours(x), ref(x.double()), dtype, "eval output")


def test_gradcheck_float64():
    x = torch.randn(4, 3, 5, dtype=torch.float64, requires_grad=True)
    w = torch.rand(3, dtype=torch.float64, requires_grad=True)
    b = torch.rand(3, dtype=torch.float64, requires_grad=True)
    fn = lambda x, w, b: SyncBatchNormFunction.apply(x, w, b, None, None, 1e-5, 0.1, None)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (x, w, b))
    xc = torch.randn(4, 3, 2, 2, dtype=torch.float64).contiguous(memory_format=torch.channels_last).requires_grad_()
    assert torch.autograd.gradcheck(fn, (xc, w, b))


def test_expanded_and_channels_last_output_gradients():
    """loss.sum() hands backward an expanded gradient (stride 0); any layout is accepted."""
    x, _ = global_batch(4, (3, 5, 6), torch.float32, seed=4, channels_last=True)
    ours, ref = SyncBatchNorm(3), nn.BatchNorm2d(3, dtype=torch.float64)
    xo, xr = x.clone().requires_grad_(), x.double().requires_grad_()
    ours(xo).sum().backward()
    ref(xr).sum().backward()
    assert_close(xo.grad, xr.grad, torch.float32, "input grad of sum()")
    xo.grad = None
    dy = torch.randn(4, 3, 5, 6).contiguous()  # NCHW gradient for a channels-last input
    ours(xo).backward(dy)
    xr.grad = None
    ref(xr).backward(dy.double())
    assert_close(xo.grad, xr.grad, torch.float32, "input grad, other layout")


@pytest.mark.parametrize("momentum", [0.1, None])
def test_running_statistics(momentum):
    ours, ref = SyncBatchNorm(3, momentum=momentum), nn.BatchNorm2d(3, momentum=momentum, dtype=torch.float64)
    for step in range(4):
        x, _ = global_batch(5, (3, 2, 2), torch.float32, seed=step)
        ours(x)
        ref(x.double())
    assert ours.num_batches_tracked.item() == ref.num_batches_tracked.item() == 4
    assert_close(ours.running_mean, ref.running_mean, torch.float32, "running_mean")
    assert_close(ours.running_var, ref.running_var, torch.float32, "running_var")


def test_variants_without_affine_or_tracking():
    x, dy = global_batch(6, (3, 4), torch.float32, seed=3)
    for kwargs in ({"affine": False}, {"track_running_stats": False}, {"bias": False}):
        if "bias" in kwargs and not batchnorm_has_bias_switch:
            with pytest.raises(TypeError, match="bias=False needs a torch whose BatchNorm takes it"):
                SyncBatchNorm(3, **kwargs)
            continue
        ours, ref = SyncBatchNorm(3, **kwargs), nn.BatchNorm1d(3, dtype=torch.float64, **kwargs)
        y, dx = forward_backward(ours, x, dy)
        y_ref, dx_ref = forward_backward(ref, x.double(), dy.double())
        assert_close(y, y_ref, torch.float32, f"{kwargs} output")
        assert_close(dx, dx_ref, torch.float32, f"{kwargs} input grad")
        if kwargs.get("bias") is False:
            assert ours.bias is None and ours.weight.grad is not None
    # untracked in eval: batch statistics, like torch
    ours, ref = (
        SyncBatchNorm(3, track_running_stats=False).eval(),
        nn.BatchNorm1d(3, track_running_stats=False, dtype=torch.float64).eval(),
    )
    with torch.no_grad():
        assert_close(ours(x), ref(x.double()), torch.float32, "untracked eval")


def test_convert_sync_batchnorm():
    model = nn.Sequential(
        nn.Conv2d(3, 4, 1),
        nn.BatchNorm2d(4),
        nn.Sequential(nn.BatchNorm1d(4, momentum=None, affine=False), nn.SyncBatchNorm(5, eps=1e-3)),
        nn.BatchNorm3d(2, track_running_stats=False),
        nn.LayerNorm(4),
    )
    model[1].eval()
    bn = model[1]
    weight, running_mean = bn.weight, bn.running_mean
    group = object()  # stands for a process group: stored as given
    converted = SyncBatchNorm.convert_sync_batchnorm(model, process_group=group)
    assert converted is model
    layers = [converted[1], converted[2][0], converted[2][1], converted[3]]
    assert all(type(m) is SyncBatchNorm and m.process_group is group for m in layers)
    assert converted[1].weight is weight and converted[1].running_mean is running_mean  # shared, not copied
    assert not converted[1].training and converted[2][0].training
    assert converted[2][0].momentum is None and not converted[2][0].affine
    assert converted[2][1].eps == 1e-3 and converted[2][1].num_features == 5
    assert converted[3].running_mean is None
    assert isinstance(converted[4], nn.LayerNorm)
    single = SyncBatchNorm.convert_sync_batchnorm(nn.BatchNorm1d(7))
    assert type(single) is SyncBatchNorm and single.num_features == 7
    assert SyncBatchNorm.convert_sync_batchnorm(single) is single  # already converted: unchanged


def test_state_dict_interchanges_with_batchnorm():
    ref = nn.BatchNorm2d(3)
    ref(torch.randn(4, 3, 2, 2))
    ours = SyncBatchNorm(3)
    ours.load_state_dict(ref.state_dict())
    for name, value in ref.state_dict().items():
        assert torch.equal(ours.state_dict()[name], value), name
    back = nn.BatchNorm2d(3)
    back.load_state_dict(copy.deepcopy(ours.state_dict()))
    assert torch.equal(back.running_var, ref.running_var)


def test_not_torch_syncbatchnorm():
    """DDP refuses torch.nn.SyncBatchNorm in CPU modules by type; ours must not be one."""
    assert not isinstance(SyncBatchNorm(3), nn.SyncBatchNorm)
    assert isinstance(SyncBatchNorm(3), nn.modules.batchnorm._BatchNorm)


def test_torch_errors():
    bn = SyncBatchNorm(3)
    with pytest.raises(ValueError, match=r"expected at least 2D input \(got 1D input\)"):
        bn(torch.randn(3))
    with pytest.raises(RuntimeError, match=r"^running_mean should contain 4 elements not 3$"):
        bn(torch.randn(5, 4, 2))
    with pytest.raises(
        ValueError, match=r"Expected more than 1 value per channel when training, got input size torch.Size\(\[1, 3\]\)"
    ):
        bn(torch.randn(1, 3))
    with pytest.raises(ValueError, match=r"Expected more than 1 value per channel when training"):
        bn(torch.randn(1, 3, 1, 1))
    bn.eval()
    assert bn(torch.randn(1, 3)).shape == (1, 3)  # eval needs no batch statistics


@pytest.mark.skipif(
    fastcomm.cuda_kernels_compiled() or not torch.cuda.is_available(), reason="needs a GPU and a CPU-only build"
)
def test_cuda_input_without_cuda_kernels():
    with pytest.raises(RuntimeError, match="fastcomm SyncBatchNorm: the input is a CUDA tensor but this build"):
        SyncBatchNorm(3).cuda()(torch.randn(4, 3, device="cuda"))
