"""Root glue for soft-RDMA runs outside a full replica: two network namespaces joined by one veth,
optionally shaped with HTB, every object recorded in a :class:`~testbed.emu.registry.RunRegistry`::

    netns PREFIX-a  [PREFIX-a0 10.77.0.1/24] ==veth (HTB rate)== [PREFIX-b0 10.77.0.2/24]  netns PREFIX-b
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from testbed.emu import capture, ops
from testbed.emu.registry import RunRegistry
from testbed.links import tc


@dataclass(frozen=True)
class VethPath:
    ns_a: str
    ns_b: str
    intf_a: str
    intf_b: str
    ip_a: str
    ip_b: str


def addr_argv(path: VethPath) -> list[list[str]]:
    """Commands giving each end its address (pure, so tests can read them)."""
    return [["ip", "-n", path.ns_a, "addr", "add", f"{path.ip_a}/24", "dev", path.intf_a],
            ["ip", "-n", path.ns_b, "addr", "add", f"{path.ip_b}/24", "dev", path.intf_b]]


def make_path(run: RunRegistry, prefix: str, rate_bps: float | None = None, mtu: int | None = None,
              subnet: str = "10.77.0") -> VethPath:
    """Create the two namespaces and the veth (names start with ``prefix``, at most 8 characters)."""
    path = VethPath(f"{prefix}-a", f"{prefix}-b", f"{prefix}-a0", f"{prefix}-b0", f"{subnet}.1", f"{subnet}.2")
    run.add_netns(path.ns_a)
    run.add_netns(path.ns_b)
    run.add_veth(path.intf_a, path.intf_b, ns_a=path.ns_a, ns_b=path.ns_b, mtu=mtu)
    for argv in addr_argv(path):
        ops.run(argv, what=f"address {argv[-1]}")
    if rate_bps:
        for intf, ns in ((path.intf_a, path.ns_a), (path.intf_b, path.ns_b)):
            for argv in tc.htb_cmds(intf, rate_bps, netns=ns):
                ops.run(argv, what=f"shape {intf} to {rate_bps:g} b/s")
    return path


@contextmanager
def roce_capture(run: RunRegistry, path: VethPath, pcap: Path, snaplen: int = 0):
    """tcpdump of RoCEv2 (UDP 4791) on the ``b`` end of ``path`` while the block runs; yields ``pcap``.

    Starts only once tcpdump listens and stops only once the file has stopped growing
    (:func:`testbed.emu.capture.tcpdump`): a capture cut short would show the validator losses that never
    happened on the wire.
    """
    argv = capture.tcpdump_argv(path.intf_b, pcap, ["udp", "port", "4791"], snaplen=snaplen, buffer_kib=65536)
    with capture.tcpdump(lambda a, log: run.spawn(a, netns=path.ns_b, log=log), argv,
                         pcap.with_suffix(".tcpdump.log"), path.intf_b):
        yield pcap
