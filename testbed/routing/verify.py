"""A fake pipeline: walk packets switch to switch through route tables, every ECMP branch at once.

This is how the brain is tested without a switch (FAUCET's fake pipeline idea) and how the controller
answers "which paths do packets between A and B take right now" from the tables it installed.

    host A --port--> switch --lookup dst prefix--> {ports} --link--> switch ... --> host B

A walk fails loudly: a loop (a switch seen twice on one branch), a black hole (no route, or a port whose
link is down), or a packet delivered to the wrong host.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

import networkx as nx

from testbed.routing.brain import host_prefix
from testbed.topo.graph import HOST, hosts, neighbour_on_port


@dataclass
class Walk:
    """Outcome of walking every branch from one host to another."""

    src: str
    dst: str
    paths: list = field(default_factory=list)  # delivered paths, node lists
    loops: list = field(default_factory=list)
    blackholes: list = field(default_factory=list)
    misdelivered: list = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.paths) and not (self.loops or self.blackholes or self.misdelivered)


def lookup(table: dict, host_prefix_: str):
    """Longest-prefix match of a host's ``ip/32`` in one switch's ``{prefix: Route}`` table."""
    route = table.get(host_prefix_)
    if route is not None:
        return route
    ip = ipaddress.IPv4Address(host_prefix_.split("/")[0])
    best = None
    for prefix, r in table.items():
        net = ipaddress.IPv4Network(prefix)
        if ip in net and (best is None or net.prefixlen > best[0]):
            best = (net.prefixlen, r)
    return best[1] if best else None


def _first_hop(G: nx.Graph, host, down_links) -> tuple | None:
    for sw in G.neighbors(host):
        if frozenset((host, sw)) not in down_links and G.nodes[sw].get("role") != HOST:
            return sw
    return None


def walk(G: nx.Graph, tables: dict, src, dst, down_links=frozenset(), down_switches=frozenset(),
         use_backups: bool = False, max_paths: int = 10000) -> Walk:
    """Follow every ECMP branch from ``src`` towards ``dst``.

    Args:
        G: the fabric graph.
        tables: ``{switch: {prefix: Route}}`` (e.g. ``RoutingBrain.tables()``).
        down_links: frozensets of failed links; a packet sent onto one is lost (black hole).
        down_switches: failed switches; a packet reaching one is lost.
        use_backups: model fast-failover groups: a port whose link is down is replaced by its backup.
        max_paths: stop enumerating after this many (large fabrics have many paths).
    """
    result = Walk(src, dst)
    prefix = host_prefix(G, dst)
    first = _first_hop(G, src, down_links)
    if first is None:
        result.blackholes.append([src])
        return result
    stack = [[src, first]]
    while stack and len(result.paths) < max_paths:
        path = stack.pop()
        node = path[-1]
        if G.nodes[node].get("role") == HOST:
            (result.paths if node == dst else result.misdelivered).append(path)
            continue
        if node in down_switches:
            result.blackholes.append(path)
            continue
        route = lookup(tables.get(node, {}), prefix)
        if route is None or not route.ports:
            result.blackholes.append(path)
            continue
        for p in route.ports:
            nxt = neighbour_on_port(G, node, p)
            if frozenset((node, nxt)) in down_links or nxt in down_switches:
                backup = route.backup_for(p) if use_backups else None
                if backup is None:
                    result.blackholes.append(path + [nxt])
                    continue
                nxt = neighbour_on_port(G, node, backup)
                if frozenset((node, nxt)) in down_links or nxt in down_switches:
                    result.blackholes.append(path + [nxt])
                    continue
            if nxt in path:
                result.loops.append(path + [nxt])
                continue
            stack.append(path + [nxt])
    result.paths.sort()
    return result


def check_all_pairs(G: nx.Graph, tables: dict, down_links=frozenset(), down_switches=frozenset(),
                    use_backups: bool = False, pairs=None) -> list[Walk]:
    """Walk every ordered host pair (or ``pairs``); returns the walks that are not ``ok``."""
    hs = hosts(G)
    pairs = pairs if pairs is not None else [(a, b) for a in hs for b in hs if a != b]
    bad = []
    for a, b in pairs:
        w = walk(G, tables, a, b, down_links, down_switches, use_backups)
        if not w.ok:
            bad.append(w)
    return bad
