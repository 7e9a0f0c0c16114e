"""Where ``testbed rdma server`` listens by default: on every address inside a network namespace other
than the machine's own (a replica host, or a user's ``ip netns exec``: such a namespace holds only links
someone made for the experiment), on loopback in the machine's own namespace, so that nothing the testbed
starts is reachable from the real network unless asked for with ``--bind``.

"The machine's own namespace" is decided by comparing ``/proc/self/ns/net`` with a process known to live
there, trying in turn::

    /proc/1/ns/net                 pid 1 (often unreadable in a container: then)
    ip netns identify              a named namespace (``ip netns add``) -> not the machine's own
    oldest readable ancestor       walking PPid up to pid 1: the session that started us (``ip netns
                                   exec`` and ``mnexec`` switch namespace, their parents do not)
    none of them readable          assume the machine's own (loopback: the safe side)
"""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path
from typing import Callable


def _ns_inode(proc: Path, pid: str) -> int | None:
    try:
        return os.stat(proc / pid / "ns" / "net").st_ino
    except OSError:
        return None


def _ppid(proc: Path, pid: str) -> int | None:
    try:
        for line in (proc / pid / "status").read_text().splitlines():
            if line.startswith("PPid:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _ip_netns_identify() -> str:
    try:
        res = subprocess.run(["ip", "netns", "identify"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return ""
    return res.stdout.strip() if res.returncode == 0 else ""


def oldest_ancestor(proc: Path = Path("/proc")) -> str | None:
    """The pid (as text) of our oldest ancestor below pid 1 whose namespace we can read."""
    found = None
    pid = "self"
    for _ in range(256):
        ppid = _ppid(proc, pid)
        if ppid is None or ppid <= 1:
            break
        pid = str(ppid)
        if _ns_inode(proc, pid) is not None:
            found = pid
    return found


def in_initial_netns(proc: Path = Path("/proc"),
                     identify: Callable[[], str] = _ip_netns_identify) -> tuple[bool, str]:
    """(True if this process is in the machine's own network namespace, how that was decided)."""
    mine = _ns_inode(proc, "self")
    if mine is None:
        return True, "own namespace unreadable"
    ref = _ns_inode(proc, "1")
    if ref is not None:
        return mine == ref, "compared with pid 1"
    name = identify()
    if name:
        return False, f"in network namespace {name!r}"
    anc = oldest_ancestor(proc)
    if anc is not None:
        return mine == _ns_inode(proc, anc), f"compared with ancestor pid {anc}"
    return True, "no reference namespace readable"


def default_bind() -> tuple[str, str]:
    """(address to listen on, why): ``0.0.0.0`` in another namespace, ``127.0.0.1`` in the machine's own."""
    initial, how = in_initial_netns()
    if initial:
        return "127.0.0.1", f"loopback only: the machine's own network namespace ({how}); use --bind ADDR"
    return "0.0.0.0", f"all addresses: a network namespace of its own ({how})"


def open_listener(bind: str | None, port: int, backlog: int) -> tuple[socket.socket, str, str]:
    """A listening TCP socket for a server's connection exchange: (socket, address, why that address).

    ``bind`` None means :func:`default_bind`. One place for both servers (perftest-like and rc_pingpong),
    so they listen, and fail to, the same way.

    Raises:
        RdmaError: the address cannot be bound (names the address and port).
    """
    from testbed.rdma.verbs import RdmaError

    why = "--bind"
    if bind is None:
        bind, why = default_bind()
    family = socket.AF_INET6 if ":" in bind else socket.AF_INET
    lsock = socket.socket(family, socket.SOCK_STREAM)
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        lsock.bind((bind, port))
    except OSError as exc:
        lsock.close()
        raise RdmaError(f"cannot listen on {bind}:{port}: {exc.strerror}") from exc
    lsock.listen(backlog)
    return lsock, bind, why
