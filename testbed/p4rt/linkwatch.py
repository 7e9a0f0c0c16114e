"""Port-down detection for a BMv2 fabric: the kernel's netlink link events on the switches' own ports.

    ip link set s1-eth2 down / peer gone / carrier lost
        kernel: RTM_NEWLINK (flags without IFF_UP or IFF_LOWER_UP), multicast group RTMGRP_LINK
            |  (sent while the kernel changes the state: no polling interval)
            v
    LinkWatcher thread: recv -> parse_link_messages -> PortStates.update -> link transitions
            |                                                 every ``resync_s``: sysfs operstate of every
            v                                                 port (a missed event, e.g. ENOBUFS) and
    P4Fabric.link_down / link_up / switch_down                whether each BMv2 process still runs
                                                              (a pidfd per BMv2 process: its exit at once)

Why netlink: BMv2 switches in a replica run in the root namespace on veth ports the replica made, so the
state of each port is exactly what the kernel says about that interface. ``simple_switch`` itself only
learns it by polling (its port monitor reads the same operstate, and Thrift ``bm_dev_mgr_show_ports`` or
its nanomsg port events would give it to us later still); a poll of every port of every switch costs CPU
on a shared 2-core machine and adds half its interval on average. Netlink is the kernel's own
notification, delivered as the state changes -- what Open vSwitch's userspace datapath listens to as well.
A port counts as up when it is administratively up and has carrier (``IFF_UP`` and ``IFF_LOWER_UP``);
a link is up when every watched end of it is. Host ports live in the hosts' namespaces and are not
watched; the switch's end of a host link is.

The parser and :class:`PortStates` are pure (unit-tested with crafted messages); :class:`LinkWatcher`
opens the socket (no root needed to listen) and runs the thread.
"""

from __future__ import annotations

import os
import select
import socket
import struct
import threading
import time
from pathlib import Path
from typing import Callable, Iterable, Mapping

NETLINK_ROUTE = 0
RTMGRP_LINK = 1
RTM_NEWLINK, RTM_DELLINK = 16, 17
IFLA_IFNAME = 3
IFF_UP, IFF_LOWER_UP = 0x1, 0x10000
_NLMSG = struct.Struct("=IHHII")
_IFINFO = struct.Struct("=BxHiII")
_RTA = struct.Struct("=HH")
#: Default period of the sysfs resync and BMv2 liveness check (seconds).
RESYNC_S = 0.1


def parse_link_messages(data: bytes) -> list[tuple[str, bool]]:
    """``[(ifname, up)]`` from a datagram of netlink route messages (pure; other messages are skipped)."""
    out = []
    off = 0
    while off + _NLMSG.size <= len(data):
        length, kind, _, _, _ = _NLMSG.unpack_from(data, off)
        if length < _NLMSG.size or off + length > len(data):
            break
        if kind in (RTM_NEWLINK, RTM_DELLINK) and length >= _NLMSG.size + _IFINFO.size:
            _, _, _, flags, _ = _IFINFO.unpack_from(data, off + _NLMSG.size)
            name = None
            a = off + _NLMSG.size + _IFINFO.size
            while a + _RTA.size <= off + length:
                rlen, rtype = _RTA.unpack_from(data, a)
                if rlen < _RTA.size:
                    break
                if rtype == IFLA_IFNAME:
                    name = data[a + _RTA.size:a + rlen].split(b"\0", 1)[0].decode(errors="replace")
                a += (rlen + 3) & ~3
            if name is not None:
                up = kind == RTM_NEWLINK and bool(flags & IFF_UP) and bool(flags & IFF_LOWER_UP)
                out.append((name, up))
        off += (length + 3) & ~3
    return out


def link_message(name: str, flags: int, kind: int = RTM_NEWLINK) -> bytes:
    """A netlink link message as the kernel sends it (for tests and dry runs)."""
    raw = name.encode() + b"\0"
    attr = _RTA.pack(_RTA.size + len(raw), IFLA_IFNAME) + raw
    attr += bytes(-len(attr) % 4)
    body = _IFINFO.pack(0, 1, 7, flags, 0xFFFFFFFF) + attr
    return _NLMSG.pack(_NLMSG.size + len(body), kind, 0, 0, 0) + body


def sysfs_up(name: str, root: Path = Path("/sys/class/net")) -> bool:
    """Operstate ``up`` of an interface (a missing one is down)."""
    try:
        return (root / name / "operstate").read_text().strip() == "up"
    except OSError:
        return False


class PortStates:
    """Watched switch ports -> link transitions (pure).

    Args:
        ends: ``{(a, b): [interface names of the switch ends of link a-b]}``.
        up: the initial state of every port (default all up).
    """

    def __init__(self, ends: Mapping[tuple, Iterable[str]], up: Mapping[str, bool] | None = None):
        self.ends = {link: tuple(names) for link, names in ends.items()}
        self.link_of = {n: link for link, names in self.ends.items() for n in names}
        self.port_up = {n: True for n in self.link_of}
        self.port_up.update({n: v for n, v in (up or {}).items() if n in self.link_of})
        self.link_up = {link: self._all_up(link) for link in self.ends}

    def _all_up(self, link) -> bool:
        return all(self.port_up[n] for n in self.ends[link])

    def update(self, name: str, up: bool) -> tuple | None:
        """A port's new state; returns ``(link, now_up)`` when the link's state changed, else None."""
        link = self.link_of.get(name)
        if link is None:
            return None
        self.port_up[name] = up
        now = self._all_up(link)
        if now == self.link_up[link]:
            return None
        self.link_up[link] = now
        return (link, now)


class LinkWatcher:
    """Watches a running BMv2 fabric's ports and processes; calls ``fabric`` on every change.

    Args:
        fabric: a :class:`testbed.p4rt.failover.P4Fabric` (``link_down/link_up/switch_down``).
        ends: ``{(a, b): [switch-side interface names]}`` of the links to watch.
        alive: ``{switch: callable returning False once its BMv2 process has exited}``.
        resync_s: period of the sysfs resync and liveness check.
        on_error: called with an exception the handler raised (the thread keeps going).
    """

    def __init__(self, fabric, ends: Mapping[tuple, Iterable[str]], alive: Mapping[str, Callable] | None = None,
                 resync_s: float = RESYNC_S, on_error: Callable | None = None, pids: Mapping[str, int] | None = None):
        self.fabric = fabric
        self.alive = dict(alive or {})
        # a pidfd turns readable when its process exits: a dead BMv2 is seen at once, not at the next resync
        self.pidfds = {}
        for sw, pid in (pids or {}).items():
            try:
                self.pidfds[os.pidfd_open(pid)] = sw
            except (OSError, AttributeError):  # gone already, or no pidfd here: the resync's check remains
                continue
        self.dead: set = set()
        self.resync_s = resync_s
        self.on_error = on_error
        self.errors: list = []
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        self.sock.bind((0, RTMGRP_LINK))
        names = [n for names in ends.values() for n in names]
        self.states = PortStates(ends, {n: sysfs_up(n) for n in names})  # after bind: no change is missed
        self._stop_r, self._stop_w = os.pipe()
        self._thread = threading.Thread(target=self._run, name="p4-linkwatch", daemon=True)

    def start(self) -> "LinkWatcher":
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread.is_alive():
            os.write(self._stop_w, b"x")
            self._thread.join(timeout=10)
        self.sock.close()
        for fd in (self._stop_r, self._stop_w, *self.pidfds):
            os.close(fd)

    def __enter__(self) -> "LinkWatcher":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _handle(self, name: str, up: bool, t: float) -> None:
        change = self.states.update(name, up)
        if change is None:
            return
        (a, b), now_up = change
        try:
            (self.fabric.link_up if now_up else self.fabric.link_down)(a, b, detected=t)
        except Exception as exc:  # noqa: BLE001 - the watcher must outlive one bad event
            self.errors.append(f"{'link_up' if now_up else 'link_down'} {a}-{b}: {exc}")
            if self.on_error is not None:
                self.on_error(exc)

    def _switch_dead(self, sw, t: float) -> None:
        if sw in self.dead:
            return
        self.dead.add(sw)
        try:
            self.fabric.switch_down(sw, detected=t)
        except Exception as exc:  # noqa: BLE001 - the watcher must outlive one bad event
            self.errors.append(f"switch_down {sw}: {exc}")

    def _resync(self) -> None:
        t = time.time()
        for name in list(self.states.port_up):
            self._handle(name, sysfs_up(name), t)
        for sw, alive in self.alive.items():
            if sw not in self.dead and not alive():
                self._switch_dead(sw, t)

    def _run(self) -> None:
        next_sync = time.monotonic() + self.resync_s
        while True:
            wait = max(0.0, next_sync - time.monotonic())
            live_pidfds = [fd for fd, sw in self.pidfds.items() if sw not in self.dead]
            ready, _, _ = select.select([self.sock, self._stop_r, *live_pidfds], [], [], wait)
            if self._stop_r in ready:
                return
            for fd in ready:
                if fd in self.pidfds:
                    self._switch_dead(self.pidfds[fd], time.time())
            if self.sock in ready:
                try:
                    data = self.sock.recv(1 << 16)
                except OSError:  # ENOBUFS: events were dropped; the resync below catches up
                    data = b""
                    next_sync = 0.0
                t = time.time()
                for name, up in parse_link_messages(data):
                    self._handle(name, up, t)
            if time.monotonic() >= next_sync:
                self._resync()
                next_sync = time.monotonic() + self.resync_s
