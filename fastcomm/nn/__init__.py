"""fastcomm's neural-network modules."""
from fastcomm.nn.syncbn import SyncBatchNorm

__all__ = ["SyncBatchNorm"]
