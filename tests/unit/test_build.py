"""What the build compiled."""

import os

import pytest
import torch

import fastcomm
from fastcomm._build_info import TORCH_VERSION


@pytest.mark.skipif(os.environ.get("FASTCOMM_EXPECT_CUDA_KERNELS") != "1", reason="only the CUDA build must have them")
def test_cuda_kernels_compiled_in_cuda_build():
    assert fastcomm.cuda_kernels_compiled()
    # the installed package, not the source tree, is under test
    assert "site-packages" in fastcomm.__file__, fastcomm.__file__


def test_build_recorded_the_torch_it_compiled_against():
    # setup.py writes fastcomm/_build_info.py; the import check compares it
    assert TORCH_VERSION == str(torch.__version__)
