"""fastcomm/_ptracer.py: which ptracer the ranks of a host declare where Yama's
ptrace_scope is 1, read from fake /proc trees (this kernel may have no Yama)."""

from __future__ import annotations

import os

import pytest

from fastcomm import _ptracer


def _fake_proc(tmp_path, parents: dict[int, int], comm: str = "python3", sessions: dict[int, int] | None = None) -> str:
    """A /proc with a stat file per pid: `parents` maps pid -> parent pid,
    `sessions` pid -> session id (default: all in session 1)."""
    for pid, parent in parents.items():
        os.makedirs(tmp_path / str(pid))
        session = (sessions or {}).get(pid, 1)
        (tmp_path / str(pid) / "stat").write_text(f"{pid} ({comm}) S {parent} {pid} {session} 0 -1 4194560\n")
    return str(tmp_path)


def test_ancestry_walks_up_to_the_namespace_first_process(tmp_path):
    proc = _fake_proc(tmp_path, {1: 0, 50: 1, 700: 50, 701: 700})
    assert _ptracer.ancestry(701, proc) == [701, 700, 50, 1]
    assert _ptracer.ancestry(1, proc) == [1]
    assert _ptracer.ancestry(999, proc) == []  # gone


def test_ancestry_stops_at_the_session(tmp_path):
    # rank 701 -> torchrun 700 -> shell 650 (session leader 650) -> sshd 50 (session 50) -> init
    proc = _fake_proc(tmp_path, {1: 0, 50: 1, 650: 50, 700: 650, 701: 700}, sessions={1: 1, 50: 50})
    assert _ptracer.ancestry(701, proc) == [701, 700, 650]


def test_ranks_of_two_logins_share_nothing_to_declare(tmp_path):
    # two shells under one sshd, each its own session: they meet only in sshd, outside both
    parents = {1: 0, 50: 1, 600: 50, 601: 600, 650: 50, 651: 650}
    proc = _fake_proc(tmp_path, parents, sessions={1: 1, 50: 50, 600: 600, 601: 600, 650: 650, 651: 650})
    chains = [_ptracer.ancestry(601, proc), _ptracer.ancestry(651, proc)]
    assert _ptracer.choose_ptracer(chains, initial_namespace=True) == (None, "the ranks share no ancestor visible here")


def test_a_later_group_never_narrows_the_declaration(monkeypatch):
    calls = []
    monkeypatch.setattr(_ptracer, "_prctl_set_ptracer", lambda pid: calls.append(pid) or 0)
    monkeypatch.setattr(_ptracer, "_declared", None)
    own = [701, 700, 650]  # rank, its launcher, the script that started two launchers
    wide = _ptracer._declare(1, 650, "wide", own)
    assert (wide.chosen, wide.declared, calls) == (650, True, [650])
    narrow = _ptracer._declare(1, 700, "narrow", own)  # a subgroup of this launcher's ranks only
    assert (narrow.chosen, narrow.declared, calls) == (650, True, [650]) and "kept pid 650" in narrow.reason
    monkeypatch.setattr(_ptracer, "_declared", 700)
    assert _ptracer._declare(1, 650, "wider", own).chosen == 650 and calls == [650, 650]


def test_a_refused_declaration_is_reported(monkeypatch):
    monkeypatch.setattr(_ptracer, "_prctl_set_ptracer", lambda pid: 22)
    monkeypatch.setattr(_ptracer, "_declared", None)
    refused = _ptracer._declare(1, 700, "launcher", [701, 700])
    assert (refused.chosen, refused.declared) == (700, False) and "Invalid argument" in refused.reason
    assert _ptracer._declared is None


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
