"""Fabric metrics without emulation: counts, hops, ECMP width, bisection, oversubscription, optics, cost.

Everything is computed from the graph alone (pure, no root), so ``testbed topo show`` can compare fabrics
of any size before building one. Definitions (also in docs/specs.md):

* ``diameter`` / ``avg_hops``: host-to-host path length in links over shortest paths that never transit
  a host (the routing brain's rule); ``switch_diameter`` over switches only.
* ``ecmp``: number of equal-cost shortest paths between hosts on different first-tier switches
  (min / mean / max over host pairs).
* ``bisection_gbps``: exact max-flow (= min cut) between the first and second half of the hosts in
  generation order (pod-, group-, server- or coordinate-major, campus 0 first), each host able to send at
  its link rate. For the symmetric kinds this half split is a minimum bisection; ``full_bisection_gbps``
  is half the hosts' link capacity, and ``bisection_ratio`` their quotient (1.0 = full bisection).
* ``oversubscription``: per switch, capacity towards lower tiers / capacity towards higher tiers; the
  largest per role, and the largest overall (None for flat kinds, which have no up/down).
* cabling and cost: priced by :mod:`testbed.topo.cost` (ports by speed, media by reach; docs/cost.md).
"""

from __future__ import annotations

from collections import Counter, deque

import networkx as nx

from testbed.topo.addressing import first_tier_switch
from testbed.topo.cost import COST_TABLE, graph_cost  # noqa: F401  (COST_TABLE re-exported for spec.py)
from testbed.topo.graph import hosts, switches
from testbed.units import format_duration, format_rate, format_size

BISECTION_METHOD = ("max-flow between the first and second half of the hosts in generation order "
                    "(pod/group/server/coordinate-major)")


def _switch_bfs(S: nx.Graph, source) -> tuple[dict, dict]:
    """Distances and shortest-path counts from ``source`` over the switch graph (Brandes' sigma)."""
    dist = {source: 0}
    sigma = {source: 1}
    queue = deque([source])
    while queue:
        u = queue.popleft()
        for v in S[u]:
            if v not in dist:
                dist[v] = dist[u] + 1
                sigma[v] = 0
                queue.append(v)
            if dist[v] == dist[u] + 1:
                sigma[v] += sigma[u]
    return dist, sigma


def paths(G: nx.Graph) -> dict:
    """Host-to-host hop statistics and ECMP widths over paths that never transit a host."""
    S = G.subgraph(switches(G))
    per_switch = Counter(first_tier_switch(G, h) for h in hosts(G))
    edge_switches = list(per_switch)
    total_pairs = hop_sum = 0
    diameter = 0
    ecmp = []
    ecmp_weight = 0
    ecmp_sum = 0.0
    for a in edge_switches:
        dist, sigma = _switch_bfs(S, a)
        na = per_switch[a]
        for b in edge_switches:
            nb = per_switch[b]
            pairs = na * (na - 1) if a == b else na * nb
            if not pairs:
                continue
            if b not in dist:
                raise ValueError(f"switch {b} is unreachable from {a}: the fabric is disconnected")
            hops = dist[b] + 2
            total_pairs += pairs
            hop_sum += pairs * hops
            diameter = max(diameter, hops)
            if a != b:
                ecmp.append(sigma[b])
                ecmp_sum += pairs * sigma[b]
                ecmp_weight += pairs
    return {
        "diameter": diameter,
        "switch_diameter": nx.diameter(S) if S.number_of_nodes() > 1 else 0,
        "avg_hops": round(hop_sum / total_pairs, 4) if total_pairs else 0.0,
        "ecmp": {"min": min(ecmp), "mean": round(ecmp_sum / ecmp_weight, 3), "max": max(ecmp)} if ecmp
        else {"min": 1, "mean": 1.0, "max": 1},
    }


def _host_rate(G: nx.Graph, h) -> float:
    return sum(G.edges[h, n]["rate_bps"] for n in G.neighbors(h))


def bisection(G: nx.Graph) -> dict:
    """Max-flow across the half split of hosts (see module docstring); rates in Gbit/s."""
    hs = hosts(G)
    half = len(hs) // 2
    left, right = hs[:half], hs[half:]
    if not left:
        return {"bisection_gbps": 0.0, "full_bisection_gbps": 0.0, "bisection_ratio": 1.0,
                "bisection_method": BISECTION_METHOD}
    F = nx.DiGraph()
    for u, v, data in G.edges(data=True):
        cap = data["rate_bps"] / 1e9
        F.add_edge(u, v, capacity=cap)
        F.add_edge(v, u, capacity=cap)
    src, dst = ("__src__",), ("__dst__",)
    for h in left:
        F.add_edge(src, h, capacity=_host_rate(G, h) / 1e9)
    for h in right:
        F.add_edge(h, dst, capacity=_host_rate(G, h) / 1e9)
    value = nx.maximum_flow_value(F, src, dst)
    full = min(sum(_host_rate(G, h) for h in left), sum(_host_rate(G, h) for h in right)) / 1e9
    return {"bisection_gbps": round(value, 6), "full_bisection_gbps": round(full, 6),
            "bisection_ratio": round(value / full, 6) if full else 1.0, "bisection_method": BISECTION_METHOD}


def oversubscription(G: nx.Graph) -> dict:
    """Largest down/up capacity ratio per switch role, and overall (None when no switch has both)."""
    by_role: dict = {}
    for s in switches(G):
        tier = G.nodes[s]["tier"]
        down = up = 0.0
        for n in G.neighbors(s):
            rate = G.edges[s, n]["rate_bps"]
            if G.nodes[n]["tier"] < tier:
                down += rate
            elif G.nodes[n]["tier"] > tier:
                up += rate
        if down and up:
            role = G.nodes[s]["role"]
            by_role[role] = round(max(by_role.get(role, 0.0), down / up), 6)
    return {"oversubscription": max(by_role.values()) if by_role else None,
            "oversubscription_by_role": by_role}


def cabling(G: nx.Graph, table: dict | None = None) -> dict:
    """Cables, optics and cost per link tier, ports and cost per host port: :func:`testbed.topo.cost.graph_cost`."""
    return graph_cost(G, table)


def dilation_table(G: nx.Graph, scale: float | None = None) -> list[dict]:
    """Real -> emulated mapping per link tier (rate / scale, delay * scale, buffer kept in packets).

    ``scale`` defaults to the graph's own (``G.graph['scale']``)."""
    scale = G.graph.get("scale", 1.0) if scale is None else scale
    mtu = G.graph.get("mtu", 1500)
    rows = []
    seen: dict = {}
    for _, _, data in G.edges(data=True):
        seen.setdefault(data["tier"], []).append(data)
    for tier, edges in seen.items():
        rate = max(e["rate_bps"] for e in edges)
        delay = max(e["delay_s"] for e in edges)
        bdp_pkts = rate * 2 * delay / (8 * mtu)
        rows.append({"tier": tier, "links": len(edges),
                     "real_rate": format_rate(rate), "emulated_rate": format_rate(rate / scale),
                     "real_delay": format_duration(delay), "emulated_delay": format_duration(delay * scale),
                     "bdp_packets": round(bdp_pkts, 3),
                     "real_rate_bps": rate, "emulated_rate_bps": rate / scale,
                     "real_delay_s": delay, "emulated_delay_s": delay * scale})
    buffer_bytes = G.graph.get("buffer_bytes")
    if buffer_bytes:
        rows.append({"tier": "buffer (per port)", "links": None, "real_rate": format_size(buffer_bytes),
                     "emulated_rate": f"{buffer_bytes / mtu:.0f} packets", "real_delay": "", "emulated_delay": "",
                     "bdp_packets": None, "buffer_packets": round(buffer_bytes / mtu)})
    return rows


def summary(G: nx.Graph) -> dict:
    """Every metric above in one JSON-able document (the output of ``testbed topo show --json``)."""
    spec = G.graph.get("spec")
    roles = Counter(d["role"] for _, d in G.nodes(data=True))
    tiers = Counter(d["tier"] for _, _, d in G.edges(data=True))
    doc = {
        "name": G.graph.get("name"), "kind": G.graph.get("kind"),
        "switches": len(switches(G)), "hosts": len(hosts(G)), "links": G.number_of_edges(),
        "nodes_by_role": dict(roles), "links_by_tier": dict(tiers),
    }
    for attr, key in (("group", "groups"), ("pod", "pods"), ("campus", "campuses"), ("server", "servers")):
        values = {(d.get("campus"), d[attr]) for _, d in G.nodes(data=True) if d.get(attr) is not None}
        if values:
            doc[key] = len(values)
    doc.update(paths(G))
    doc.update(bisection(G))
    doc.update(oversubscription(G))
    doc.update(cabling(G, dict(spec.cost) if spec is not None else None))
    if G.graph.get("kind") == "rail-only":
        from testbed.topo import railonly

        doc["rail_only"] = railonly.report(G)
    doc["scale"] = G.graph.get("scale", 1.0)
    doc["mtu"] = G.graph.get("mtu", 1500)
    doc["mapping"] = dilation_table(G)
    return doc


def mapping_table(rows: list[dict], scale: float):
    """The real -> emulated mapping as a rich Table (printed by ``topo show`` and by every replica run)."""
    from rich.table import Table

    m = Table(title=f"real -> emulated (scale {scale:g})", title_justify="left")
    for col in ("tier", "real rate", "emulated rate", "real delay", "emulated delay", "BDP pkts"):
        m.add_column(col)
    for r in rows:
        m.add_row(r["tier"], r["real_rate"], r["emulated_rate"], r["real_delay"], r["emulated_delay"],
                  "" if r["bdp_packets"] is None else f"{r['bdp_packets']:g}")
    return m
