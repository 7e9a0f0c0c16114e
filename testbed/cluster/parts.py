"""One worker's share of a partitioned replica (pure): its sub-plan, its tunnels and their commands.

Every worker computes the *whole* plan from the same spec, overrides and capabilities (the plan is
deterministic), checks its digest against the coordinator's, and keeps its part::

    full ReplicaPlan --part_plan(plan, partition, w)--> PartPlan
        .plan     a ReplicaPlan with only w's hosts, switches and inner links (names, dpids, ports and
                  addresses unchanged: they are the fabric's, so the one controller routes every part)
        .tunnels  one Tunnel per cut link end on w: a VXLAN device named like the interface the link
                  would have had (``a1-eth3``), added to the switch as that OpenFlow port

    worker A                                underlay                                 worker B
    a1 [port 3 = vxlan a1-eth3, VNI 4096] ==== UDP 4789, A.underlay <-> B.underlay ==== [cr0-eth2] cr0

Link emulation across the cut: the plan's tc commands are per link end, each shaping that end's egress
(HTB rate; netem delay/loss), so each worker applies its own end's commands to its VXLAN device and every
direction is emulated exactly once, at its sender. The underlay itself is never shaped. A cut link the
plan gives to the userspace delay line (one process between the two ends) or with a BMv2 end is refused:
neither can sit on a tunnel yet (SpecError naming ``cluster``; run with link mode ``rates`` or on
workers whose kernel has netem).
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
from dataclasses import dataclass, replace

from testbed.errors import SpecError
from testbed.plan.capabilities import Capabilities
from testbed.plan.layout import Layout, host_batch, host_config

#: VXLAN's IANA UDP port.
VXLAN_PORT = 4789
#: Outer Ethernet + IPv4 + UDP + VXLAN headers a tunnel adds to each frame.
VXLAN_OVERHEAD = 50


@dataclass(frozen=True)
class Tunnel:
    """One worker's end of a cut link."""

    vni: int
    node: object          # the local switch (graph node)
    peer: object          # the switch at the other end (graph node)
    bridge: str           # the local switch's Mininet/OVS name
    port: int             # the OpenFlow port the link has in the plan
    intf: str             # the VXLAN device (the plan's interface name of this end)
    peer_worker: int
    backend: str          # the plan's link backend (none | htb | netem)
    tc: tuple = ()        # this end's tc argv from the plan


@dataclass(frozen=True)
class PartPlan:
    worker: int
    plan: object          # ReplicaPlan of this part
    tunnels: tuple


class PartLayout(Layout):
    """A part's layout: only its own hosts/switches/links are built, but every host's neighbour and route
    lines still name all the fabric's hosts (they are reachable through the tunnels)."""

    def __init__(self, full: Layout, hosts, switches, links):
        super().__init__(names=full.names, hosts=hosts, switches=switches, links=links)
        self.full = full

    def host_batch(self, host, dev, with_arp=True):
        return host_batch(self.full, host, dev, with_arp)

    def host_config(self, host, with_arp=True):
        return host_config(self.full, host, with_arp)


def plan_digest(plan) -> str:
    """A short hash of the plan's JSON: two machines computing the same plan get the same digest."""
    text = json.dumps(plan.to_json(), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def check_cut(plan, part) -> None:
    """Refuse cut links no tunnel can carry (see the module docstring)."""
    kinds = {s.node: s.kind for s in plan.switches}
    for c in part.cut:
        e = plan.link(c.u, c.v)
        if e.backend == "userspace":
            raise SpecError("cluster", f"link {c.u}--{c.v} crosses machines and needs the userspace delay line "
                                       f"({e.reason}); a tunnel cannot carry it yet: use link mode `rates`, or "
                                       "workers whose kernel has sch_netem")
        for node in (c.u, c.v):
            if kinds.get(node) != "ovs":
                raise SpecError("cluster", f"link {c.u}--{c.v} crosses machines at {node}, a {kinds.get(node)} "
                                           "switch; only Open vSwitch ends can take a tunnel port")


def part_plan(plan, part, worker: int) -> PartPlan:
    """Worker ``worker``'s sub-plan and tunnels (see the module docstring).

    Raises:
        SpecError: a cut link no tunnel can carry; ``worker`` out of range.
    """
    if not 0 <= worker < part.n:
        raise SpecError("cluster.worker", f"worker index {worker} out of range 0..{part.n - 1}")
    check_cut(plan, part)
    mine = {n for n, w in part.assign.items() if w == worker}
    lay = plan.layout
    inner = [e for e in plan.links if e.u in mine and e.v in mine]
    inner_keys = {frozenset((e.u, e.v)) for e in inner}
    sub_layout = PartLayout(lay, [h for h in lay.hosts if h.node in mine],
                            [s for s in lay.switches if s.node in mine],
                            [lk for lk in lay.links if frozenset((lk.u, lk.v)) in inner_keys])
    sub = replace(plan, layout=sub_layout, links=tuple(inner),
                  switches=tuple(s for s in plan.switches if s.node in mine),
                  endpoints=tuple(h for h in plan.endpoints if h.node in mine),
                  notes=plan.notes + (f"part {worker} of {part.n}: {len(mine)} nodes, "
                                      f"{sum(1 for c in part.cut if worker in (c.worker_u, c.worker_v))} tunnels",))
    tunnels = []
    for c in part.cut:
        if worker not in (c.worker_u, c.worker_v):
            continue
        node = c.u if c.worker_u == worker else c.v
        e = plan.link(c.u, c.v)
        port = e.port_u if e.u == node else e.port_v
        intf = e.intf_u if e.u == node else e.intf_v
        tc = next((argvs for n, argvs in e.tc if n == node), ())
        tunnels.append(Tunnel(c.vni, node, c.other(node), lay.names[node], port, intf, c.worker_of(c.other(node)),
                              e.backend, tc))
    return PartPlan(worker, sub, tuple(tunnels))


def tunnel_argv(t: Tunnel, local_ip: str, remote_ip: str, mtu: int) -> list[list[str]]:
    """Commands (root namespace) that make tunnel ``t`` a port of its switch, then emulate its end.

    The VXLAN device carries the fabric's MTU; ``df unset`` lets the kernel fragment the outer packet when
    the underlay's MTU is below ``mtu + VXLAN_OVERHEAD`` (correct, slower; the worker notes it).
    """
    for field, addr in (("underlay", local_ip), ("underlay", remote_ip)):
        try:
            ipaddress.ip_address(addr)
        except ValueError:
            raise SpecError(f"cluster.workers.{field}", f"{addr!r} is not an IP address") from None
    argv = [["ip", "link", "add", t.intf, "type", "vxlan", "id", str(t.vni), "local", local_ip,
             "remote", remote_ip, "dstport", str(VXLAN_PORT), "nolearning", "df", "unset"],
            ["ip", "link", "set", t.intf, "mtu", str(mtu), "up"],
            ["ethtool", "-K", t.intf, "tx", "off", "tso", "off", "gso", "off", "gro", "off"],
            ["ovs-vsctl", "--timeout=10", "add-port", t.bridge, t.intf, "--", "set", "Interface", t.intf,
             f"ofport_request={t.port}"]]
    return argv + [list(a) for a in t.tc]


def meet(capabilities) -> Capabilities:
    """What every worker can do: a feature only when all have it; every worker's ports in use skipped."""
    caps = list(capabilities)
    if not caps:
        raise SpecError("cluster.workers", "no workers")
    ports = frozenset().union(*(c.tcp_ports_in_use for c in caps))
    return Capabilities(netem=all(c.netem for c in caps), red=all(c.red for c in caps),
                        ovs_kernel=all(c.ovs_kernel for c in caps), tcp_ports_in_use=ports,
                        source="doctor" if all(c.source == "doctor" for c in caps) else "assumed")


def capabilities_json(c: Capabilities) -> dict:
    """Capabilities as data that travels (all ports, unlike ``Capabilities.to_json``)."""
    return {"netem": c.netem, "red": c.red, "ovs_kernel": c.ovs_kernel, "source": c.source,
            "tcp_ports_in_use": sorted(c.tcp_ports_in_use)}


def capabilities_from_json(doc: dict) -> Capabilities:
    return Capabilities(netem=bool(doc["netem"]), red=bool(doc["red"]), ovs_kernel=bool(doc["ovs_kernel"]),
                        tcp_ports_in_use=frozenset(int(p) for p in doc.get("tcp_ports_in_use", ())),
                        source=str(doc.get("source", "assumed")))


def overrides_json(ov) -> dict:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(ov).items()}


def overrides_from_json(doc: dict):
    from testbed.plan import Overrides

    fixed = {k: (tuple(v) if isinstance(v, list) else v) for k, v in doc.items()}
    return Overrides(**fixed)
