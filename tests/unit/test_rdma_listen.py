"""Where the server listens: the namespace test on a fake /proc (hard links share an inode, like two
processes in one namespace), including the container case where /proc/1/ns/net is unreadable."""

from __future__ import annotations

import os

from testbed.rdma import listen


def _proc(tmp_path, self_ns, pid1_ns=None, chain=(), ns_files=None):
    """A fake /proc. ``chain``: (pid, namespace) from our parent up, each process's PPid the next one."""
    proc = tmp_path / "proc"
    spaces = tmp_path / "spaces"
    spaces.mkdir(parents=True)
    for name in ("root", "exp"):
        (spaces / name).write_text(name)

    def add(pid, ns, ppid):
        d = proc / pid
        (d / "ns").mkdir(parents=True)
        if ns is not None:
            os.link(spaces / ns, d / "ns" / "net")
        (d / "status").write_text(f"Name:\tx\nPPid:\t{ppid}\n")

    pids = [p for p, _ in chain]
    add("self", self_ns, pids[0] if pids else 1)
    for i, (pid, ns) in enumerate(chain):
        add(str(pid), ns, pids[i + 1] if i + 1 < len(pids) else 1)
    add("1", pid1_ns, 0)
    return proc


def _no_name():
    return ""


def test_pid1_readable(tmp_path):
    assert listen.in_initial_netns(_proc(tmp_path, "root", "root"), _no_name)[0] is True
    assert listen.in_initial_netns(_proc(tmp_path / "b", "exp", "root"), _no_name)[0] is False


def test_pid1_unreadable_falls_back_to_ip_netns_identify(tmp_path):
    proc = _proc(tmp_path, "exp", None, chain=[(50, "exp")])
    initial, how = listen.in_initial_netns(proc, lambda: "myns")
    assert initial is False and "myns" in how


def test_pid1_unreadable_unnamed_namespace_uses_the_oldest_ancestor(tmp_path):
    """mnexec / unshare: an unnamed namespace; the shell that started it is in the machine's own."""
    proc = _proc(tmp_path, "exp", None, chain=[(70, "exp"), (60, None), (40, "root")])
    initial, how = listen.in_initial_netns(proc, _no_name)
    assert initial is False and "40" in how
    proc = _proc(tmp_path / "b", "root", None, chain=[(70, "root"), (40, "root")])
    assert listen.in_initial_netns(proc, _no_name)[0] is True


def test_nothing_readable_means_loopback(tmp_path):
    proc = _proc(tmp_path, "exp", None, chain=[(70, None)])
    assert listen.in_initial_netns(proc, _no_name)[0] is True


def test_this_process_is_in_the_machines_own_namespace():
    """The suite runs in the machine's own namespace, where /proc/1 may be unreadable: still detected."""
    initial, how = listen.in_initial_netns()
    assert initial is True, how
    assert listen.default_bind()[0] == "127.0.0.1"


def test_default_bind_follows_the_namespace(monkeypatch):
    monkeypatch.setattr(listen, "in_initial_netns", lambda: (True, "test"))
    assert listen.default_bind()[0] == "127.0.0.1" and "--bind" in listen.default_bind()[1]
    monkeypatch.setattr(listen, "in_initial_netns", lambda: (False, "test"))
    assert listen.default_bind()[0] == "0.0.0.0"
