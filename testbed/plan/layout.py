"""Layout of a replica: every name, port, dpid and address Mininet will be given (pure).

The one allocator of a replica's identifiers (with :mod:`testbed.plan.alloc` for Thrift ports and
device ids). :func:`testbed.plan.plan_replica` calls it; unit tests check names, addresses, ports and the
interfaces to record without root or Mininet::

    graph G  --layout()-->  Layout(hosts, switches, links [+ link nodes dl<i>])  --Replica-->  Mininet net

Mininet names every interface ``<node>-eth<port>`` and Linux limits names to 15 characters, so a graph
node whose name is not a short identifier gets a short alias (``n7``); :attr:`Layout.names` maps graph
node -> Mininet name.  Hosts without ``ip``/``mac`` get ``10.0.0.x/8`` and ``02:00:...`` addresses in
graph order (deterministic).  Ports come from the edge attribute ``ports``; edges without it get the
next free port of each end (graph order, also deterministic).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field

import networkx as nx

from testbed.errors import SpecError
from testbed.topo.graph import HOST

#: Linux IFNAMSIZ - 1 (interface names are at most 15 characters).
IFNAME_MAX = 15
_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
DEFAULT_BASE = ipaddress.ip_address("10.0.0.0")
DEFAULT_PREFIXLEN = 8


@dataclass
class HostPlan:
    node: object
    name: str
    ip: str
    prefixlen: int
    mac: str


@dataclass
class SwitchPlan:
    node: object
    name: str
    dpid: int
    attrs: dict


@dataclass
class LinkPlan:
    """One graph edge ``u``--``v``; ``via`` names the link node inserted between them (dpid ``via_dpid``)."""

    u: object
    v: object
    port_u: int
    port_v: int
    attrs: dict
    via: str | None = None
    via_dpid: int | None = None


@dataclass
class Layout:
    names: dict                      # graph node -> Mininet name
    hosts: list[HostPlan] = field(default_factory=list)
    switches: list[SwitchPlan] = field(default_factory=list)
    links: list[LinkPlan] = field(default_factory=list)

    def intf(self, node, port_no: int) -> str:
        """Mininet interface name of ``node``'s port ``port_no``."""
        return f"{self.names[node]}-eth{port_no}"

    def host(self, node) -> HostPlan:
        for h in self.hosts:
            if h.node == node:
                return h
        raise KeyError(node)


def _max_ports(G: nx.Graph) -> dict:
    most = {n: 0 for n in G.nodes}
    for u, v, d in G.edges(data=True):
        ports = d.get("ports") or {}
        for n in (u, v):
            most[n] = max(most[n], int(ports.get(n, 0) or 0))
    return most


def mininet_names(G: nx.Graph, reserved=()) -> dict:
    """Graph node -> Mininet name: the node itself when it is a short identifier, else ``n<index>``."""
    degree_ports = {n: max(G.degree(n), p) for n, p in _max_ports(G).items()}
    names, used = {}, set(reserved)
    for i, n in enumerate(G.nodes):
        want = str(n)
        suffix = len(f"-eth{max(degree_ports[n], 1)}")
        if not (isinstance(n, str) and _NAME_RE.match(want) and len(want) + suffix <= IFNAME_MAX) or want in used:
            want = f"n{i}"
            while want in used:
                want += "_"
        names[n] = want
        used.add(want)
    return names


def _ports(G: nx.Graph) -> dict:
    """(u, v) -> (port_u, port_v) from edge ``ports``, filling in missing ones deterministically."""
    taken = {n: set() for n in G.nodes}
    for u, v, d in G.edges(data=True):
        for n, p in (d.get("ports") or {}).items():
            if n not in (u, v):
                raise SpecError(f"edges.{u}-{v}.ports", f"names node {n!r}, which is not an end of the edge")
            if not isinstance(p, int) or p < 1:
                raise SpecError(f"edges.{u}-{v}.ports.{n}", f"must be an integer >= 1, got {p!r}")
            if p in taken[n]:
                raise SpecError(f"edges.{u}-{v}.ports.{n}", f"port {p} of {n} is used twice")
            taken[n].add(p)
    result = {}
    for u, v, d in G.edges(data=True):
        ports = d.get("ports") or {}
        pair = []
        for n in (u, v):
            p = ports.get(n)
            if p is None:
                p = 1
                while p in taken[n]:
                    p += 1
                taken[n].add(p)
            pair.append(p)
        result[(u, v)] = tuple(pair)
    return result


def default_mac(index: int) -> str:
    """Locally administered MAC for host number ``index`` (0-based)."""
    b = (index + 1).to_bytes(4, "big")
    return "02:00:" + ":".join(f"{x:02x}" for x in b)


def layout(G: nx.Graph, link_nodes=frozenset()) -> Layout:
    """Compute the layout of ``G``.

    Args:
        G: the fabric graph (contract in :mod:`testbed.topo.graph`).
        link_nodes: edges ``(u, v)`` (graph edge order) that get a link node named ``dl<i>`` between their
            ends (its port 1 faces u, port 2 faces v), with the next dpids after the switches'.

    Raises:
        SpecError: duplicate ports/dpids/addresses, bad attribute values.
    """
    link_nodes = {frozenset(e) for e in link_nodes}
    dl_names = [f"dl{i}" for i in range(G.number_of_edges())] if link_nodes else []
    names = mininet_names(G, reserved=dl_names)
    result = Layout(names=names)
    seen_ip, seen_mac = {}, {}
    host_index = 0
    for n, d in G.nodes(data=True):
        if d.get("role") != HOST:
            continue
        ip = d.get("ip") or str(DEFAULT_BASE + host_index + 1)
        prefixlen = int(d.get("prefixlen") or (DEFAULT_PREFIXLEN if not d.get("ip") else 24))
        mac = (d.get("mac") or default_mac(host_index)).lower()
        try:
            ipaddress.ip_interface(f"{ip}/{prefixlen}")
        except ValueError as exc:
            raise SpecError(f"nodes.{n}.ip", f"{ip}/{prefixlen} is not an address: {exc}") from None
        if not re.fullmatch(r"([0-9a-f]{2}:){5}[0-9a-f]{2}", mac):
            raise SpecError(f"nodes.{n}.mac", f"{mac!r} is not a MAC address like 02:00:00:00:00:01")
        for value, seen, what in ((ip, seen_ip, "ip"), (mac, seen_mac, "mac")):
            if value in seen:
                raise SpecError(f"nodes.{n}.{what}", f"{value} is also used by {seen[value]}")
            seen[value] = n
        result.hosts.append(HostPlan(n, names[n], ip, prefixlen, mac))
        host_index += 1
    used_dpids = {}
    next_dpid = 1
    for n, d in G.nodes(data=True):
        if d.get("role") == HOST:
            continue
        dpid = d.get("dpid")
        if dpid is None:
            while next_dpid in used_dpids or next_dpid in _explicit_dpids(G):
                next_dpid += 1
            dpid = next_dpid
        if not isinstance(dpid, int) or dpid < 1 or dpid >= 2 ** 64:
            raise SpecError(f"nodes.{n}.dpid", f"must be an integer in 1..2^64-1, got {dpid!r}")
        if dpid in used_dpids:
            raise SpecError(f"nodes.{n}.dpid", f"{dpid} is also used by {used_dpids[dpid]}")
        used_dpids[dpid] = n
        result.switches.append(SwitchPlan(n, names[n], dpid, dict(d)))
    ports = _ports(G)
    next_dpid = max(used_dpids, default=0) + 1
    for i, (u, v, d) in enumerate(G.edges(data=True)):
        pu, pv = ports[(u, v)]
        via = via_dpid = None
        if frozenset((u, v)) in link_nodes:
            via, via_dpid = dl_names[i], next_dpid
            next_dpid += 1
        result.links.append(LinkPlan(u, v, pu, pv, d, via, via_dpid))
    return result


def _explicit_dpids(G: nx.Graph) -> set:
    return {d["dpid"] for _, d in G.nodes(data=True) if d.get("dpid") is not None}


def interfaces(p: Layout) -> list[str]:
    """Every interface name the build will create (both ends of every link, link nodes included)."""
    names = []
    for link in p.links:
        if link.via:
            names += [p.intf(link.u, link.port_u), f"{link.via}-eth1", f"{link.via}-eth2",
                      p.intf(link.v, link.port_v)]
        else:
            names += [p.intf(link.u, link.port_u), p.intf(link.v, link.port_v)]
    return names


def static_arp(p: Layout) -> dict:
    """Host name -> [(ip, mac)] of every other host (so looped fabrics need no ARP flooding)."""
    return {h.name: [(o.ip, o.mac) for o in p.hosts if o is not h] for h in p.hosts}


def host_config(p: Layout, host: HostPlan, with_arp: bool = True) -> tuple[list, list]:
    """One host's neighbours and routes: ``([(ip, mac)], [subnet])`` = a permanent neighbour for every other
    host (``with_arp``) and an on-link route to every other host subnet (hosts of a flat L2 fabric may sit
    in several subnets, e.g. one per campus). Applied over netlink by ``testbed.emu.ops.configure_host``."""
    own = ipaddress.ip_interface(f"{host.ip}/{host.prefixlen}").network
    neighbours = [(o.ip, o.mac) for o in p.hosts if o is not host] if with_arp else []
    subnets = []
    for o in p.hosts:
        net = ipaddress.ip_interface(f"{o.ip}/{o.prefixlen}").network
        if o is not host and net != own and not net.overlaps(own) and net not in subnets:
            subnets.append(net)
    return neighbours, [str(net) for net in subnets]


def host_batch(p: Layout, host: HostPlan, dev: str, with_arp: bool = True) -> str:
    """:func:`host_config` as ``ip -batch`` text (for a shell on another machine, and dry runs)."""
    neighbours, routes = host_config(p, host, with_arp)
    lines = [f"neigh replace {ip} lladdr {mac} dev {dev} nud permanent" for ip, mac in neighbours]
    lines += [f"route replace {net} dev {dev}" for net in routes]
    return "".join(line + "\n" for line in lines)


def _methods():
    """Layout.interfaces() / .host_config() / .static_arp(): the root glue uses them without importing
    this package (emu must not import plan: plan -> links -> emu)."""
    Layout.interfaces = lambda self: interfaces(self)
    Layout.host_config = lambda self, host, with_arp=True: host_config(self, host, with_arp)
    Layout.host_batch = lambda self, host, dev, with_arp=True: host_batch(self, host, dev, with_arp)
    Layout.static_arp = lambda self: static_arp(self)


_methods()
