"""The fuzz run (tests/multiproc/programs/fuzz.py) on namespace hosts, launched
with torchrun as users launch: 2 hosts of 2 ranks (hierarchical; no mismatches
drawn, since one breaks a hierarchical group) and 2 hosts of 1 rank (Gloo
between them, every call compared first; mismatches drawn). Needs root;
skipped elsewhere."""

import os
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
MULTIPROC = os.path.join(HERE, "..", "multiproc")
sys.path.insert(0, MULTIPROC)
sys.path.insert(0, HERE)

import namespace_hosts  # noqa: E402
from test_fuzz import check_outcomes  # noqa: E402

_why_not = namespace_hosts.available()
pytestmark = pytest.mark.skipif(bool(_why_not), reason=f"namespace hosts: {_why_not}")

OPS = 30


@pytest.mark.parametrize("layout, mismatches", [([2, 2], False), ([1, 1], True)], ids=["2+2", "1+1"])
def test_fuzz_on_separate_hosts(layout, mismatches):
    program = [
        os.path.join(MULTIPROC, "programs", "fuzz.py"),
        "env",
        "env",
        "env",
        "11",
        str(OPS),
        "1" if mismatches else "0",
    ]
    with tempfile.TemporaryDirectory(prefix="fastcomm-nsfuzz-") as out_dir:
        os.chmod(out_dir, 0o777)
        with namespace_hosts.NamespaceHosts(len(layout)) as hosts:
            codes, logs = hosts.torchrun(layout, program, cwd=out_dir, timeout=300)
    text = "\n".join(logs)
    assert codes == [0] * len(layout), f"exit statuses {codes}\n{text[-6000:]}"
    check_outcomes(text, sum(layout), OPS)
