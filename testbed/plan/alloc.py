"""The one allocator of the numbers switches need: Thrift ports, BMv2 device ids and VXLAN VNIs.

Numbers are handed out in order from a base and skip TCP ports something on this machine already
listens on (another run, another tool), so two switches never share a port. A replica's numbers come
from the one :class:`Allocator` inside :func:`testbed.plan.plan_replica` (names, dpids and addresses
come from :mod:`testbed.plan.layout`), which is given the ports in use as data
(:attr:`testbed.plan.Capabilities.tcp_ports_in_use`) so that planning stays pure. Stand-alone switches
(benchmarks, tests) make one Allocator per run (FAUCET's ``serve_ports``; never class-level counters).
"""

from __future__ import annotations

import socket
from typing import Callable

#: VXLAN network identifiers of a partitioned replica's tunnels (24 bits; 0 is reserved).
VNI_BASE = 4096
VNI_MAX = (1 << 24) - 1


def tcp_ports_in_use() -> frozenset:
    """TCP ports something listens on (from /proc/net/tcp and tcp6; no root needed)."""
    ports = set()
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(name).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 3 and fields[3] == "0A":  # TCP_LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return frozenset(ports)


def tcp_port_free(port: int, host: str = "127.0.0.1") -> bool:
    """True when nothing listens on ``host:port`` (we can bind it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


class Allocator:
    """Thrift ports (from ``thrift_base``) and device ids (from 1) for one run.

    Args:
        thrift_base: first Thrift port tried (BMv2's default is 9090).
        port_free: predicate used to skip ports in use (injectable for tests).
    """

    def __init__(self, thrift_base: int = 9090, port_free: Callable[[int], bool] = tcp_port_free,
                 vni_base: int = VNI_BASE):
        if not 1024 <= thrift_base <= 65000:
            raise ValueError(f"thrift_base must be in 1024..65000, got {thrift_base}")
        if not 1 <= vni_base <= VNI_MAX:
            raise ValueError(f"vni_base must be in 1..{VNI_MAX}, got {vni_base}")
        self._next_port = thrift_base
        self._next_device = 1
        self._next_vni = vni_base
        self._port_free = port_free
        self.given: dict[str, dict] = {}

    def thrift_port(self) -> int:
        port = self._next_port
        while not self._port_free(port):
            port += 1
            if port > 65535:
                raise RuntimeError("no free TCP port for a Thrift server")
        self._next_port = port + 1
        return port

    def device_id(self) -> int:
        dev = self._next_device
        self._next_device += 1
        return dev

    def vni(self) -> int:
        """The next VXLAN network identifier (a tunnel of a partitioned replica, testbed.cluster)."""
        vni = self._next_vni
        if vni > VNI_MAX:
            raise RuntimeError("no VXLAN network identifier left (24 bits)")
        self._next_vni += 1
        return vni

    def switch(self, name: str) -> dict:
        """Numbers for switch ``name``: ``{"thrift_port", "device_id"}`` (same answer if asked again)."""
        if name not in self.given:
            self.given[name] = {"thrift_port": self.thrift_port(), "device_id": self.device_id()}
        return self.given[name]
