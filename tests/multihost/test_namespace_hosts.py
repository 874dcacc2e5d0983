"""Every conformance check and two training checks on hosts that are really
separate (tests/multihost/namespace_hosts.py: own network, hostname, /dev/shm
and pids), launched as users launch: ``torchrun --nnodes=H`` on each host with
c10d rendezvous over the hosts' network. The hostname of each host resolves
to 127.0.1.1 (the Debian default), so this is also the GLOO_SOCKET_IFNAME case.

Layouts: 2+2 ranks (2 hosts of 2) and 2+1 (hosts of different sizes). One job
per layout runs every check in turn; each test reads one check's result.
Needs root; skipped elsewhere.
"""

import json
import os
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "multiproc"))
sys.path.insert(0, HERE)

import namespace_hosts  # noqa: E402
from test_collectives import CHECKS as COLLECTIVE_CHECKS  # noqa: E402

LAYOUTS = {"2+2": [2, 2], "2+1": [2, 1]}
CHECKS = [f"checks_collectives.{c.__name__}" for c in COLLECTIVE_CHECKS] + [
    "checks_training.ddp_parity",
    "checks_training.fsdp2",
]
JOB_TIMEOUT = 600  # seconds for one layout's whole job (start-up, every check, shutdown)

_why_not = namespace_hosts.available()
pytestmark = pytest.mark.skipif(bool(_why_not), reason=f"namespace hosts: {_why_not}")


def run_job(layout: list[int], out_dir: str) -> tuple[dict[int, dict], str]:
    """Runs every check on namespace hosts of `layout`; returns each rank's report and the job's output."""
    program = [os.path.join(HERE, "programs", "run_checks.py"), out_dir, *CHECKS]
    with namespace_hosts.NamespaceHosts(len(layout)) as hosts:
        codes, logs = hosts.torchrun(layout, program, cwd=out_dir, timeout=JOB_TIMEOUT)
    output = f"exit statuses {codes}\n" + "".join(f"--- host {h}:\n{log[-6000:]}\n" for h, log in enumerate(logs))
    reports = {}
    for name in os.listdir(out_dir):
        if name.startswith("rank") and name.endswith(".json"):
            with open(os.path.join(out_dir, name)) as f:
                reports[int(name[4:-5])] = json.load(f)
    return reports, output


_jobs: dict[str, tuple[dict[int, dict], str]] = {}


@pytest.fixture(params=list(LAYOUTS), scope="module")
def job(request):
    layout = request.param
    if layout not in _jobs:
        with tempfile.TemporaryDirectory(prefix="fastcomm-nshosts-") as out_dir:
            os.chmod(out_dir, 0o777)
            _jobs[layout] = run_job(LAYOUTS[layout], out_dir)
    return LAYOUTS[layout], *_jobs[layout]


def test_job_ran_on_separate_hosts(job):
    layout, reports, output = job
    world_size = sum(layout)
    assert sorted(reports) == list(range(world_size)), output
    hostnames = {r: reports[r]["host"]["hostname"] for r in reports}
    assert len(set(hostnames.values())) == len(layout), hostnames
    host_of_rank = reports[0]["host"]["host_of_rank"]
    assert sorted(host_of_rank.count(h) for h in set(host_of_rank)) == sorted(layout), host_of_rank
    for r, report in reports.items():
        assert report["host"]["socket_ifname"] == namespace_hosts.INTERFACE
        assert "allreduce_hierarchical" in report["host"]["algorithms"], report["host"]["algorithms"]


@pytest.mark.parametrize("check", CHECKS)
def test_check_on_separate_hosts(job, check):
    layout, reports, output = job
    assert len(reports) == sum(layout), output
    failures = {r: rep["checks"].get(check, "did not run") for r, rep in reports.items()}
    failures = {r: v for r, v in failures.items() if v != "ok"}
    assert not failures, "\n".join(f"--- rank {r}:\n{v}" for r, v in failures.items()) + "\n" + output


def test_nothing_left_in_dev_shm(job):
    """Every host's own /dev/shm is empty once the group is destroyed (segments are memfds)."""
    layout, reports, output = job
    assert len(reports) == sum(layout), output
    for r, report in reports.items():
        assert report["host"].get("dev_shm_after_destroy") == [], (r, report["host"], output)
