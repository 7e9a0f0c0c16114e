"""What a rail-only fabric gives up, measured on its graph (pure).

Rail-only (Wang et al., HOTI'24) removes the spine of a rail-optimized fabric: GPU g of every server is
on rail g and nothing joins the rails but the servers' NVLink domains. That saves every spine port and
every rail uplink (with its optics) and keeps same-rail bandwidth; what it costs is measured here:

* ``ethernet_cross_rail``: whether any Ethernet-only path joins two rails (always False for rail-only;
  True for rail-optimized). Computed with every NVLink edge removed.
* hop counts (links, host to host, shortest paths that never transit a host): same server, same rail
  on another server, other rail on another server -- and how many of those links are NVLink.
* ``rail_bisection_gbps``: max-flow between the two halves of one rail's hosts over Ethernet alone,
  and ``cross_rail_bisection_gbps``: between the hosts on the first half of the rails in the first half
  of the servers and those on the other rails in the other servers (every flow changes rail and server),
  over Ethernet alone (0 for rail-only) and with the NVLink domains (the only way across).
* ``vs_rail_optimized``: ports and links a rail-optimized fabric with full-bisection spines over the
  same rails would add (each rail gets as many uplinks as it has servers).
"""

from __future__ import annotations

import networkx as nx

from testbed.topo.graph import hosts, switches

NVLINK = "nvlink"


def _by_server_gpu(G: nx.Graph) -> dict:
    return {(G.nodes[h]["server"], G.nodes[h]["gpu"]): h for h in hosts(G)}


def _hops(G: nx.Graph, a, b) -> tuple[int, int]:
    """(links, NVLink links) of one shortest host-to-host path that never transits a host."""
    S = G.subgraph(switches(G) + [a, b])
    path = nx.shortest_path(S, a, b)
    links = list(zip(path, path[1:], strict=False))
    return len(links), sum(1 for u, v in links if G.edges[u, v]["tier"] == NVLINK)


def _max_flow_gbps(G: nx.Graph, left, right, drop_tiers=()) -> float:
    F = nx.DiGraph()
    for u, v, d in G.edges(data=True):
        if d["tier"] in drop_tiers:
            continue
        F.add_edge(u, v, capacity=d["rate_bps"] / 1e9)
        F.add_edge(v, u, capacity=d["rate_bps"] / 1e9)
    src, dst = ("__src__",), ("__dst__",)
    for h in left:
        F.add_edge(src, h, capacity=float("inf"))
    for h in right:
        F.add_edge(h, dst, capacity=float("inf"))
    F.add_nodes_from((src, dst))
    return round(nx.maximum_flow_value(F, src, dst), 6)


def ethernet_rail_reach(G: nx.Graph) -> dict:
    """``{rail: sorted rails reachable from it}`` over Ethernet only (NVLink edges removed)."""
    E = nx.Graph((u, v) for u, v, d in G.edges(data=True) if d["tier"] != NVLINK)
    E.add_nodes_from(G.nodes)
    rails = {n: G.nodes[n]["rail"] for n in G.nodes if G.nodes[n]["role"] == "rail"}
    reach = {}
    for n, r in rails.items():
        comp = nx.node_connected_component(E, n)
        reach[r] = sorted(rails[m] for m in comp if m in rails)
    return reach


def report(G: nx.Graph) -> dict:
    """The measurements of the module docstring for a rail-only (or rail-optimized) graph."""
    at = _by_server_gpu(G)
    servers = 1 + max(s for s, _ in at)
    gpus = 1 + max(g for _, g in at)
    reach = ethernet_rail_reach(G)
    doc = {"servers": servers, "gpus_per_server": gpus,
           "ethernet_cross_rail": any(len(r) > 1 for r in reach.values())}
    hops = {}
    if gpus > 1:
        hops["same_server"] = _hops(G, at[0, 0], at[0, 1])
    if servers > 1:
        hops["same_rail"] = _hops(G, at[0, 0], at[1, 0])
        if gpus > 1:
            hops["cross_rail"] = _hops(G, at[0, 0], at[1, 1])
    doc["hops"] = {k: {"links": n, "nvlink_links": nv} for k, (n, nv) in hops.items()}
    half = servers // 2
    if half:
        left = [at[s, 0] for s in range(half)]
        right = [at[s, 0] for s in range(half, servers)]
        doc["rail_bisection_gbps"] = _max_flow_gbps(G, left, right, drop_tiers=(NVLINK,))
    if gpus > 1 and half:
        left = [h for (s, g), h in at.items() if g < gpus // 2 and s < half]
        right = [h for (s, g), h in at.items() if g >= gpus // 2 and s >= half]
        doc["cross_rail_bisection_gbps"] = {
            "ethernet_only": _max_flow_gbps(G, left, right, drop_tiers=(NVLINK,)),
            "with_nvlink": _max_flow_gbps(G, left, right),
        }
    if G.graph.get("kind") == "rail-only":
        doc["vs_rail_optimized"] = {"extra_switch_ports": 2 * servers * gpus, "extra_links": servers * gpus,
                                    "note": "full-bisection spines: one uplink per server on every rail"}
    return doc
