"""fastcomm/_ptracer.py: which ptracer the ranks of a host declare where Yama's
ptrace_scope is 1, read from fake /proc trees (this kernel may have no Yama)."""

from __future__ import annotations

import os

import pytest

from fastcomm import _ptracer


def _fake_proc(tmp_path, parents: dict[int, int], comm: str = "python3") -> str:
    """A /proc with a stat file per pid: `parents` maps pid -> parent pid."""
    for pid, parent in parents.items():
        os.makedirs(tmp_path / str(pid))
        (tmp_path / str(pid) / "stat").write_text(f"{pid} ({comm}) S {parent} {pid} {pid} 0 -1 4194560\n")
    return str(tmp_path)


def test_ancestry_walks_up_to_the_namespace_first_process(tmp_path):
    proc = _fake_proc(tmp_path, {1: 0, 50: 1, 700: 50, 701: 700})
    assert _ptracer.ancestry(701, proc) == [701, 700, 50, 1]
    assert _ptracer.ancestry(1, proc) == [1]
    assert _ptracer.ancestry(999, proc) == []  # gone


def test_ancestry_reads_commands_with_spaces_and_parentheses(tmp_path):
    proc = _fake_proc(tmp_path, {1: 0, 9: 1, 12: 9}, comm="a) b (c")
    assert _ptracer.ancestry(12, proc) == [12, 9, 1]


def test_siblings_declare_their_launcher():
    chains = [[701, 700, 50, 1], [702, 700, 50, 1], [703, 700, 50, 1]]
    assert _ptracer.choose_ptracer(chains, initial_namespace=True) == (700, "the ranks' launcher (pid 700)")


def test_a_rank_that_launched_the_others_is_their_ancestor():
    assert _ptracer.choose_ptracer([[700, 50, 1], [702, 700, 50, 1]], initial_namespace=True)[0] == 700


def test_ranks_started_apart_declare_nothing_on_the_host():
    ptracer, why = _ptracer.choose_ptracer([[701, 600, 1], [702, 650, 1]], initial_namespace=True)
    assert ptracer is None and "host's init" in why


def test_inside_a_container_the_container_init_may_be_declared():
    assert _ptracer.choose_ptracer([[7, 1], [8, 1]], initial_namespace=False)[0] == 1


def test_no_common_ancestor():
    assert _ptracer.choose_ptracer([[7, 3], [8, 4]], initial_namespace=False) == (
        None,
        "the ranks share no ancestor visible here",
    )


@pytest.mark.parametrize("text, scope", [("1\n", 1), ("0", 0), ("3\n", 3), ("x", None)])
def test_yama_scope(tmp_path, text, scope):
    path = tmp_path / "ptrace_scope"
    path.write_text(text)
    assert _ptracer.yama_scope(str(path)) == scope
    assert _ptracer.yama_scope(str(tmp_path / "absent")) is None


def test_this_process_ancestry_starts_with_itself():
    chain = _ptracer.ancestry()
    assert chain[:2] == [os.getpid(), os.getppid()]
