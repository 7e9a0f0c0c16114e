"""The fabric graph: the one data structure every layer shares.

A fabric is a :class:`networkx.Graph` (no parallel links). Everything is an attribute; roles are never
parsed from names.

Graph attributes (``G.graph``)::

    name   str      spec name
    kind   str      fat-tree | spine-leaf | rail-optimized | rail-only | dragonfly | torus |
                    big-switch | full-mesh | cross-campus
    mtu    int      bytes (default 1500)

Node attributes::

    role   str      'host' for end hosts/NICs; switches: tor, leaf, spine, agg, core, rail, router,
                    dci, switch, nvswitch (a server's scale-up domain in rail-only)
    tier   int      0 hosts, 1 first switch tier (ToR/leaf/rail/router), 2, 3 ... upwards; dci highest
    pod, group, campus, server, gpu, rail   int, optional, where the kind has them; coord tuple (torus,
                    full-mesh)
    hosts:    ip (str), prefixlen (int), mac (str)          -- set by topo.addressing
    switches: dpid (int > 0, unique), p4 (str | None)       -- p4 program name when the spec says so

Edge attributes (real-world units, before time dilation)::

    rate_bps    float    line rate
    delay_s     float    one-way propagation delay
    distance_m  float    cable/fibre length (0 when not given)
    tier        str      host | edge-agg | agg-core | leaf-spine | rail-spine | rail | local | global |
                         torus | mesh | campus-dci | dci   (testbed.topo.generators.TIERS per kind)
    ports       dict     {node: port number}, 1-based, unique per node, deterministic
    link        LinkParams | None   extra emulation parameters (loss, jitter, queue, RED) from testbed.links
    dim         int      torus/full-mesh links: the dimension the link runs along

Every host has exactly one link, its NIC, tier 'host', on port 1. Generators live in
:mod:`testbed.topo.generators`, specs in :mod:`testbed.topo.spec` (``load_spec`` -> ``build_graph``).
"""

from __future__ import annotations

import networkx as nx

HOST = "host"


def is_host(G: nx.Graph, node) -> bool:
    return G.nodes[node].get("role") == HOST


def hosts(G: nx.Graph) -> list:
    """Host nodes in insertion order."""
    return [n for n, d in G.nodes(data=True) if d.get("role") == HOST]


def switches(G: nx.Graph) -> list:
    """Switch nodes (every role but host) in insertion order."""
    return [n for n, d in G.nodes(data=True) if d.get("role") != HOST]


def port(G: nx.Graph, node, neighbour) -> int:
    """Port number of ``node`` facing ``neighbour``."""
    return G.edges[node, neighbour]["ports"][node]


def neighbour_on_port(G: nx.Graph, node, port_no: int):
    for nbr in G.neighbors(node):
        if G.edges[node, nbr]["ports"][node] == port_no:
            return nbr
    raise KeyError(f"{node} has no port {port_no}")
