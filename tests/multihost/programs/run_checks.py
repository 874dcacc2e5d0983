"""Runs check functions on a fastcomm group launched by torchrun, as a user's job would.

    run_checks.py OUT_DIR module.function [module.function ...]

Modules are tests/multiproc's checks_*.py; each check is
``check(rank, world_size)`` and asserts its own values. After each check the
rank writes OUT_DIR/rank<r>.json: {"checks": {name: "ok" | traceback},
"host": what this rank saw of its host}. The first failing check ends the
rank with exit status 1 (torchrun then stops the job) rather than leaving its
peers to wait for collectives it will not issue.
"""

import datetime
import importlib
import json
import os
import socket
import sys
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "multiproc"))


def main() -> None:
    out_dir, names = sys.argv[1], sys.argv[2:]
    import torch
    import torch.distributed as dist

    import fastcomm

    torch.set_num_threads(1)
    dist.init_process_group("fastcomm", timeout=datetime.timedelta(seconds=60))
    rank, world_size = dist.get_rank(), dist.get_world_size()
    backend = fastcomm.fastcomm_backend()
    report = {
        "checks": {},
        "host": {
            "hostname": socket.gethostname(),
            "local_rank": int(os.environ["LOCAL_RANK"]),
            "algorithms": backend.algorithm_names(),
            "socket_ifname": backend.config.socket_ifname,
            "host_of_rank": list(backend.config.host_of_rank),
        },
    }
    path = os.path.join(out_dir, f"rank{rank}.json")

    def write() -> None:
        with open(path + ".tmp", "w") as f:
            json.dump(report, f)
        os.replace(path + ".tmp", path)

    for name in names:
        module, function = name.rsplit(".", 1)
        try:
            getattr(importlib.import_module(module), function)(rank, world_size)
            report["checks"][name] = "ok"
        except BaseException:
            report["checks"][name] = traceback.format_exc()
            write()
            sys.stdout.flush()
            os._exit(1)
        write()
    dist.destroy_process_group()
    report["host"]["dev_shm_after_destroy"] = sorted(os.listdir("/dev/shm"))
    write()


if __name__ == "__main__":
    main()
