"""Addressing plan: every host gets an IPv4 address, prefix length and MAC that say where it sits.

    ip   = 10.<campus>.<X>.<Y>/8         mac = 02:0a:00:<campus>:<X>:<Y>   (hex octets)

    kind with servers (rail-optimized, rail-only):   X = server,                 Y = gpu + 1
    every other kind:                                X = index of the host's     Y = index of the host
                                                         first-tier switch           on that switch + 1
                                                         within its campus
                                                         (a switch with more than 254
                                                         hosts takes several X values)

The first-tier switch of a host is its neighbour across its 'host'-tier link. All hosts share one /8, so
the fabric is one flat L2/L3 domain and forwarding never depends on the plan; the plan only makes
addresses readable (``10.0.3.2`` = campus 0, ToR 3, second host). The MAC mirrors the IP, hence unique;
``02`` marks it locally administered.

A single-campus fabric that needs more than 256 X values (fat-tree k >= 24 has more than 256 ToRs; k = 64
has 2,048) uses the *wide* plan, where X takes the campus octet too::

    ip   = 10.<X div 256>.<X mod 256>.<Y>/8   mac = 02:0a:01:<X div 256>:<X mod 256>:<Y>

(``01`` in the third MAC octet marks the wide plan, so the two plans never collide.) Limits: 256 campuses
of 256 X values, or one campus of 65,536 X values (first-tier switches, or servers); 254 hosts (GPUs) per
X value. Beyond that :func:`plan` raises SpecError naming the limit.
"""

from __future__ import annotations

import networkx as nx

from testbed.errors import SpecError
from testbed.topo.graph import hosts

PREFIXLEN = 8


def first_tier_switch(G: nx.Graph, host) -> str:
    """The switch at the other end of ``host``'s 'host'-tier link (its NIC)."""
    for nbr in G.neighbors(host):
        if G.edges[host, nbr]["tier"] == "host":
            return nbr
    raise KeyError(f"host {host} has no 'host'-tier link")


def plan(G: nx.Graph) -> dict:
    """Pure: ``{host: (campus, X, Y)}`` following the module docstring.

    A switch with more than 254 hosts (a big switch) takes as many consecutive X values as it needs.

    Returns ``(campus, X, Y)``; in the wide plan (see the module docstring) campus is None.

    Raises:
        SpecError: ("addressing") when the fabric exceeds the plan's octets.
    """
    attach = {}
    count: dict = {}
    for h in hosts(G):
        data = G.nodes[h]
        if not ("server" in data and "gpu" in data):
            attach[h] = sw = first_tier_switch(G, h)
            count[sw] = count.get(sw, 0) + 1
    base: dict = {}
    used: dict = {}
    for sw in count:  # first-tier switches in order of their first host
        campus = G.nodes[sw].get("campus") or 0
        base[sw] = used.get(campus, 0)
        used[campus] = base[sw] + -(-count[sw] // 254)
    slots = {}
    seen: dict = {}
    raw = []
    for h in hosts(G):
        data = G.nodes[h]
        campus = data.get("campus") or 0
        if h not in attach:
            x, y = data["server"], data["gpu"] + 1
        else:
            sw = attach[h]
            i = seen[sw] = seen.get(sw, -1) + 1
            x, y = base[sw] + i // 254, i % 254 + 1
        raw.append((h, campus, x, y))
    campuses = {c for _, c, _, _ in raw}
    wide = len(campuses) == 1 and max((x for _, _, x, _ in raw), default=0) > 255
    for h, campus, x, y in raw:
        if y > 254:
            raise SpecError("addressing", f"host {h} needs host number {y}: at most 254 hosts per first-tier "
                                          "switch block, 254 GPUs per server")
        if wide:
            if x > 65535:
                raise SpecError("addressing", f"host {h} needs first-tier block {x}: one campus holds at most "
                                              "65,536 first-tier switches (or servers) of 254 hosts; use a "
                                              "smaller fabric")
            slots[h] = (None, x, y)
        elif campus > 255 or x > 255:
            raise SpecError("addressing", f"host {h} needs 10.{campus}.{x}.{y}: a fabric of several campuses "
                                          "holds at most 256 campuses of 256 first-tier switches (or servers) "
                                          "of 254 hosts each")
        else:
            slots[h] = (campus, x, y)
    return slots


def assign(G: nx.Graph) -> nx.Graph:
    """Set ``ip``, ``prefixlen`` and ``mac`` on every host of ``G`` (in place) and return ``G``."""
    for h, (campus, x, y) in plan(G).items():
        if campus is None:  # the wide plan
            hi, lo = divmod(x, 256)
            G.nodes[h].update(ip=f"10.{hi}.{lo}.{y}", prefixlen=PREFIXLEN, mac=f"02:0a:01:{hi:02x}:{lo:02x}:{y:02x}")
        else:
            G.nodes[h].update(ip=f"10.{campus}.{x}.{y}", prefixlen=PREFIXLEN,
                              mac=f"02:0a:00:{campus:02x}:{x:02x}:{y:02x}")
    return G
