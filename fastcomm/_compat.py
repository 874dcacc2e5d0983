"""Differences between the torch versions fastcomm supports, settled once."""

import torch.distributed as dist

# torch 2.13 renamed all_gather_into_tensor (now deprecated) to all_gather_single.
all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
