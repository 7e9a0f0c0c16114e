"""The one allocator every generator uses: node names, port numbers, dpids, link attributes.

Generators describe *structure* (who connects to whom, in which tier); the :class:`Builder` gives every
node a short unique name (``h0``, ``t3``, ``cr1`` ... so that Mininet's ``<node>-eth<port>`` stays within
the 15 characters Linux allows), every link end the next free port of its node (1-based, in the order
links are added, so port numbers are deterministic), and every edge its physical attributes looked up by
tier in a :class:`LinkTable`.

A cross-campus fabric runs several generators on one shared builder: names stay unique because the
counters are shared, and ``builder.campus`` stamps a ``campus`` attribute on every node it creates.

    gen.fat_tree(k, b) --+
    gen.spine_leaf(.., b) +--> Builder --> nx.Graph  --finish()--> dpids assigned
                                 |
                           LinkTable(tier) -> rate_bps, distance_m, delay_s, link (LinkParams)
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace

import networkx as nx

from testbed.links.model import LinkParams
from testbed.topo import addressing
from testbed.topo.graph import HOST

#: Link rate used when neither the spec nor the caller gives one (bits/s).
DEFAULT_RATE_BPS = 100e9

#: Cable length assumed per tier when the spec gives neither distance nor delay (metres); see docs/specs.md.
DEFAULT_DISTANCE_M = {"host": 2.0, "campus-dci": 100.0}
DEFAULT_OTHER_DISTANCE_M = 30.0

#: Node-name prefix for each role (names are labels only; roles live in attributes).
#: ``cr`` for cores because Mininet names its default controller ``c0``.
PREFIX = {HOST: "h", "tor": "t", "agg": "a", "core": "cr", "leaf": "l", "spine": "s", "rail": "r",
          "nvswitch": "n", "router": "g", "switch": "x", "dci": "d"}


def tier_default(tier: str) -> LinkParams:
    """The link of a tier nobody configured: 100G over the tier's default cable length."""
    return LinkParams(rate_bps=DEFAULT_RATE_BPS,
                      distance_m=DEFAULT_DISTANCE_M.get(tier, DEFAULT_OTHER_DISTANCE_M))


@dataclass
class LinkTable:
    """Per-tier :class:`~testbed.links.model.LinkParams`; ``lookup(tier)`` -> edge attributes.

    Tiers absent from ``tiers`` get :func:`tier_default`. The edge keeps the LinkParams itself in its
    ``link`` attribute (rate and delay filled in) for the link-emulation layer.
    """

    tiers: dict = field(default_factory=dict)

    def lookup(self, tier: str) -> dict:
        lp = self.tiers.get(tier) or tier_default(tier)
        rate = lp.rate_bps if lp.rate_bps is not None else DEFAULT_RATE_BPS
        return link_attrs(lp.with_defaults(rate_bps=rate))


def link_attrs(lp: LinkParams) -> dict:
    """Edge attributes of a link: the LinkParams itself (``link``, the one source) and the flat
    ``rate_bps``/``distance_m``/``delay_s`` derived from it for metrics and drawings."""
    return {"rate_bps": float(lp.rate_bps), "distance_m": float(lp.distance_m),
            "delay_s": float(lp.one_way_delay_s), "link": lp}


def set_link(G: nx.Graph, u, v, **changes) -> LinkParams:
    """Change edge u--v's link (``rate_bps=``, ``delay_s=``, ``distance_m=``, ``limit=`` ...), keeping
    the flat attributes in step; returns the new LinkParams. A distance given alone replaces the delay."""
    attrs = G.edges[u, v]
    lp = attrs.get("link") or LinkParams(rate_bps=attrs.get("rate_bps"), delay_s=attrs.get("delay_s"))
    if "distance_m" in changes and "delay_s" not in changes:
        changes["delay_s"] = None
    lp = replace(lp, **changes)
    attrs.update(link_attrs(lp))
    return lp


class Builder:
    """Accumulates one fabric graph; see the module docstring.

    Args:
        links: per-tier link parameters (default: 100G everywhere, tier-default distances).
        name, kind: stored in ``G.graph``.
    """

    def __init__(self, links: LinkTable | None = None, name: str = "fabric", kind: str = "custom",
                 mtu: int = 1500):
        self.G = nx.Graph(name=name, kind=kind, mtu=mtu)
        self.links = links or LinkTable()
        self.campus: int | None = None
        self._names: Counter = Counter()
        self._next_port: Counter = Counter()

    def _node(self, role: str, tier: int, attrs: dict) -> str:
        prefix = PREFIX.get(role, "x")
        name = f"{prefix}{self._names[prefix]}"
        self._names[prefix] += 1
        if self.campus is not None:
            attrs = {"campus": self.campus, **attrs}
        self.G.add_node(name, role=role, tier=tier, **attrs)
        return name

    def host(self, **attrs) -> str:
        """Add an end host (a NIC); its first link should be its 'host'-tier link (port 1)."""
        return self._node(HOST, 0, attrs)

    def switch(self, role: str, tier: int, **attrs) -> str:
        """Add a switch with ``role`` (tor, leaf, spine, ...) at ``tier`` (1 = first switch tier)."""
        if role == HOST or tier < 1:
            raise ValueError(f"switch role {role!r} tier {tier} is not a switch")
        return self._node(role, tier, {"p4": None, **attrs})

    def link(self, a: str, b: str, tier: str, **attrs) -> None:
        """Connect ``a`` and ``b`` with the next free port on each; refuses parallel links and loops."""
        if a == b or self.G.has_edge(a, b):
            raise ValueError(f"refusing {'self-loop' if a == b else 'parallel link'} {a}-{b}")
        ports = {}
        for node in (a, b):
            self._next_port[node] += 1
            ports[node] = self._next_port[node]
        self.G.add_edge(a, b, tier=tier, ports=ports, **self.links.lookup(tier), **attrs)

    def finish(self) -> nx.Graph:
        """Assign dpids (1, 2, ... in switch insertion order) and host addresses; return the graph.

        Idempotent: a cross-campus build calls it once per campus and once at the end.
        """
        dpid = 0
        for _, data in self.G.nodes(data=True):
            if data["role"] != HOST:
                dpid += 1
                data["dpid"] = dpid
        return addressing.assign(self.G)
