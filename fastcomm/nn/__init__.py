"""fastcomm's neural-network modules: SyncBatchNorm, a drop-in for
torch.nn.SyncBatchNorm that also runs on CPU and inside DDP on CPU modules."""

from fastcomm.nn.syncbn import SyncBatchNorm

__all__ = ["SyncBatchNorm"]
