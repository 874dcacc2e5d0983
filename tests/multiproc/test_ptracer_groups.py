"""Where Yama's ptrace_scope is 1, a new group's ranks declare their launcher as
ptracer and single copy stays exact (checks_ptracer.py)."""

import checks_ptracer as checks
from harness import single_copy_env


def test_launcher_declared_and_single_copy_exact(pool_of, tmp_path):
    scope = tmp_path / "ptrace_scope"
    scope.write_text("1\n")
    pool_of(2, single_copy_env(2)).run(checks.launcher_declared_and_single_copy_exact, scope_file=str(scope))
