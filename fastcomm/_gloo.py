"""fastcomm's internal Gloo groups (the CPU fallback of every group, and the
host leaders' group of hierarchical ones), made one way.

Network interfaces follow torch's rule for its own gloo backend: the
comma-separated list in GLOO_SOCKET_IFNAME (or fastcomm's override,
FASTCOMM_SOCKET_IFNAME) names the interfaces to use, one Gloo device each;
without it Gloo binds to the address the hostname resolves to. A name this
host does not have is refused when the options are read (fastcomm/_options.py).
"""

from __future__ import annotations

import datetime

import torch.distributed as dist

from fastcomm._options import Options


def devices(options: Options) -> list:
    """The Gloo devices for `options.socket_ifname` (empty: the default device)."""
    if not options.socket_ifname:
        return [dist.ProcessGroupGloo.create_default_device()]
    return [dist.ProcessGroupGloo.create_device(interface=name) for name in options.socket_ifname.split(",")]


def make_gloo(
    store: dist.Store,
    prefix: str,
    rank: int,
    size: int,
    timeout: datetime.timedelta,
    options: Options,
    threads: int | None = None,
) -> dist.ProcessGroupGloo:
    """A Gloo backend over `prefix` of `store`, with fastcomm's interfaces and
    `threads` worker threads (default: FASTCOMM_GLOO_THREADS)."""
    gloo_options = dist.ProcessGroupGloo._Options()
    gloo_options._timeout = timeout
    gloo_options._devices = devices(options)
    gloo_options._threads = threads if threads is not None else options.gloo_threads
    return dist.ProcessGroupGloo(dist.PrefixStore(prefix, store), rank, size, gloo_options)
