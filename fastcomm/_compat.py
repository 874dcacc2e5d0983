"""Differences between the torch versions fastcomm supports, settled once."""

import inspect

import torch.distributed as dist
from torch import nn

# torch 2.13 renamed all_gather_into_tensor (now deprecated) to all_gather_single.
all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor

# BatchNorm's `bias` switch (an affine weight without a bias) is not in torch 2.11's _BatchNorm.
batchnorm_has_bias_switch = "bias" in inspect.signature(nn.modules.batchnorm._BatchNorm.__init__).parameters
