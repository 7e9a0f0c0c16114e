"""The soft NIC's receive buffer and the PAUSE it sends when the host does not drain it (a slow receiver).

A RoCE NIC with PFC on sends PAUSE for the lossless priority when its receive buffer passes xoff -- the host
(PCIe, memory, a busy CPU) takes frames off it slower than the wire brings them -- refreshes it while the
buffer stays above xon and sends XON (pause time 0) once it drained. Here the buffer is the soft NIC's UDP
socket (:mod:`testbed.rdma.device`): its receive memory (``SO_MEMINFO``'s ``rmem_alloc``: what the kernel
holds for the socket, per datagram its true size) is read after every receive round, and the frames go out
of the host's interface by ``AF_PACKET`` into the link node on its link, whose switch-side direction then
holds that priority: the switch's egress to this host is paused, and the pause spreads as any other.

    RxPause.check(rmem_bytes, now) --> [PauseFrame]   pure: thresholds, refresh, counters
    NicPauser(ip, ...)                                 root glue: the interface of ``ip``, its MAC, the socket

The pause time is a number of quanta at the *real* line rate (the link node dilates it); the NIC refreshes
it every ``refresh_s`` of its own (emulated) clock, which must be below the pause time as dilated.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass, field

from testbed.errors import SpecError
from testbed.pfc.config import MAX_QUANTA, PRIORITIES
from testbed.pfc.state import PauseFrame

SO_MEMINFO = getattr(socket, "SO_MEMINFO", 55)
_MEMINFO = struct.Struct("9I")     # SK_MEMINFO_VARS; [0] = SK_MEMINFO_RMEM_ALLOC


@dataclass
class RxPause:
    """PFC of a NIC's receive buffer (pure; ``now`` in seconds of the replica's clock)."""

    xoff_bytes: float
    xon_bytes: float
    refresh_s: float
    priority: int = 3
    quanta: int = MAX_QUANTA
    paused: bool = False
    pause_sent: int = 0
    xon_sent: int = 0
    paused_s: float = 0.0
    max_bytes: int = 0
    _since: float = field(default=0.0, repr=False)
    _refresh_at: float = field(default=0.0, repr=False)

    def __post_init__(self):
        if not 0 <= self.xon_bytes < self.xoff_bytes:
            raise SpecError("nic_pfc.xon", f"must be below xoff ({self.xon_bytes!r} >= {self.xoff_bytes!r})")
        if not self.refresh_s > 0:
            raise SpecError("nic_pfc.refresh_s", f"must be positive, got {self.refresh_s!r}")
        if not 0 <= self.priority < PRIORITIES:
            raise SpecError("nic_pfc.priority", f"must be 0..{PRIORITIES - 1}, got {self.priority!r}")
        if not 1 <= self.quanta <= MAX_QUANTA:
            raise SpecError("nic_pfc.quanta", f"must be 1..{MAX_QUANTA}, got {self.quanta!r}")

    def check(self, held_bytes: int, now: float) -> list[PauseFrame]:
        """The buffer holds ``held_bytes`` at ``now``: the frames to send (PAUSE, its refresh, or XON)."""
        self.max_bytes = max(self.max_bytes, held_bytes)
        if not self.paused:
            if held_bytes < self.xoff_bytes:
                return []
            self.paused, self._since = True, now
            return [self._pause(now)]
        if held_bytes <= self.xon_bytes:
            self.paused = False
            self.paused_s += now - self._since
            self.xon_sent += 1
            return [PauseFrame.of({self.priority: 0})]
        return [self._pause(now)] if now >= self._refresh_at else []

    def _pause(self, now: float) -> PauseFrame:
        self.pause_sent += 1
        self._refresh_at = now + self.refresh_s
        return PauseFrame.of({self.priority: self.quanta})

    def counters(self, now: float) -> dict:
        held = now - self._since if self.paused else 0.0
        return {"pause_sent": self.pause_sent, "xon_sent": self.xon_sent, "paused_s": self.paused_s + held,
                "max_bytes": self.max_bytes, "paused_now": self.paused}


def rmem_alloc(sock: socket.socket) -> int:
    """Bytes the kernel holds for ``sock``'s receive queue (true sizes: a 1 KB datagram costs ~2.3 KB)."""
    return _MEMINFO.unpack(sock.getsockopt(socket.SOL_SOCKET, SO_MEMINFO, _MEMINFO.size))[0]


def socket_drops(sock: socket.socket) -> int:
    """Datagrams the kernel dropped at ``sock`` (its receive queue full: ``SK_MEMINFO_DROPS``): where a NIC
    without PFC loses frames to a host that does not keep up."""
    return _MEMINFO.unpack(sock.getsockopt(socket.SOL_SOCKET, SO_MEMINFO, _MEMINFO.size))[8]


def interface_of(ip: str) -> str:
    """The interface holding IPv4 address ``ip`` in this network namespace."""
    import fcntl

    siocgifaddr = 0x8915
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _index, name in socket.if_nameindex():
            try:
                raw = fcntl.ioctl(s.fileno(), siocgifaddr, struct.pack("256s", name.encode()[:15]))
            except OSError:
                continue
            if socket.inet_ntoa(raw[20:24]) == ip:
                return name
    raise SpecError("nic_pfc", f"no interface holds {ip} in this namespace (the NIC's PAUSE needs one)")


class NicPauser:
    """Sends an :class:`RxPause`'s frames out of the interface of ``ip`` (AF_PACKET: root in the namespace)."""

    def __init__(self, ip: str, state: RxPause):
        from pathlib import Path

        from testbed.pfc.wire import encode

        self.state, self._encode = state, encode
        self.intf = interface_of(ip)
        self.mac = bytes.fromhex(Path(f"/sys/class/net/{self.intf}/address").read_text().strip().replace(":", ""))
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        self.sock.bind((self.intf, 0))

    def check(self, rx_sock: socket.socket, now: float) -> int:
        """Read the buffer and send what the state says; frames sent."""
        frames = self.state.check(rmem_alloc(rx_sock), now)
        for f in frames:
            self.sock.send(self._encode(f, self.mac))
        return len(frames)

    def close(self) -> None:
        self.sock.close()
