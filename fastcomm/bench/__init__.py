"""fastcomm-bench: nccl-tests-style benchmarks for any torch.distributed backend (see cli.py)."""
