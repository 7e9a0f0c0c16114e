"""Hops, ECMP width and bisection of a fabric in closed form, for fabrics too big to build or walk (pure).

``testbed topo show`` computes these by walking the graph (:mod:`testbed.topo.metrics`): exact, but it
needs the graph, and a fat-tree k=1024 (268 million hosts) would not fit in memory. For the regular kinds
the same figures follow from the construction, with the same definitions as the graph walk (host-to-host
paths that never transit a host; ECMP over pairs on different first-tier switches, mean weighted by host
pairs; bisection = max-flow between the first and second half of the hosts in generation order)::

    fat-tree k      (h = k/2 hosts per ToR, k/2 ToRs and aggs per pod, (k/2)^2 cores)
        same ToR 2 hops; same pod 4 hops, ECMP k/2; other pod 6 hops, ECMP (k/2)^2
        bisection = k^3/8 * min(rate host, edge-agg, agg-core)   (every tier has k^2/4 links per pod)
    spine-leaf L, S, H
        same leaf 2 hops; other leaf 4 hops, ECMP S
        bisection: min cut with all spines on one side (the cut is concave in the number of spines on
        the source side, so an end is optimal); per leaf the cheaper of cutting its hosts or its uplinks
    big-switch n    2 hops, no ECMP, full bisection

The unit tests check every formula against the graph walk and networkx's max-flow on small instances of
many shapes and rates (an independent computation, not this code again).
"""

from __future__ import annotations

#: Kinds with closed-form paths and bisection.
KINDS = ("fat-tree", "spine-leaf", "big-switch")

METHOD = "closed form from the construction (same definitions as the graph walk)"


def _ecmp(groups: list[tuple[int, int]]) -> dict:
    """``groups`` = [(host pairs, equal-cost paths)] over pairs on different first-tier switches."""
    groups = [(n, w) for n, w in groups if n > 0]
    if not groups:
        return {"min": 1, "mean": 1.0, "max": 1}
    total = sum(n for n, _ in groups)
    return {"min": min(w for _, w in groups), "mean": round(sum(n * w for n, w in groups) / total, 3),
            "max": max(w for _, w in groups)}


def _hops(groups: list[tuple[int, int]]) -> tuple[int, float]:
    """``groups`` = [(host pairs, hops)] -> (diameter, average hops) over the pairs that exist."""
    groups = [(n, h) for n, h in groups if n > 0]
    total = sum(n for n, _ in groups)
    if not total:
        return 0, 0.0
    return max(h for _, h in groups), round(sum(n * h for n, h in groups) / total, 4)


def fat_tree(k: int, rate_host: float, rate_edge_agg: float, rate_agg_core: float) -> dict:
    """Paths and bisection of a fat-tree ``k`` with per-tier rates in bit/s (host pairs counted per host)."""
    h = k // 2
    hosts = k ** 3 // 4
    same_tor, same_pod, other_pod = h - 1, (h - 1) * h, (k - 1) * h * h
    diameter, avg = _hops([(same_tor, 2), (same_pod, 4), (other_pod, 6)])
    half = hosts // 2
    bisection = k ** 3 / 8 * min(rate_host, rate_edge_agg, rate_agg_core) / 1e9
    full = half * rate_host / 1e9
    return {"diameter": diameter, "switch_diameter": 4, "avg_hops": avg,
            "ecmp": _ecmp([(same_pod, h), (other_pod, h * h)]),
            **_bisection(bisection, full)}


def spine_leaf(leaves: int, spines: int, hosts_per_leaf: int, rate_host: float, rate_uplink: float) -> dict:
    """Paths and bisection of a spine-leaf fabric, rates in bit/s."""
    L, S, H = leaves, spines, hosts_per_leaf
    diameter, avg = _hops([(H - 1, 2), ((L - 1) * H, 4)])
    half = L * H // 2
    left_only, a = divmod(half, H)                 # leaves wholly left of the split, left hosts of the split leaf
    b = H - a if a else 0
    right_only = L - left_only - (1 if a else 0)
    host_cap, up_cap = H * rate_host, S * rate_uplink
    spines_right = left_only * min(host_cap, up_cap) + (min(a * rate_host, b * rate_host + up_cap) if a else 0)
    spines_left = right_only * min(host_cap, up_cap) + (min(b * rate_host, a * rate_host + up_cap) if a else 0)
    if S == 0:
        spines_left = spines_right
    return {"diameter": diameter, "switch_diameter": (2 if L > 1 else 1) if S else 0, "avg_hops": avg,
            "ecmp": _ecmp([((L - 1) * H, S)]),
            **_bisection(min(spines_right, spines_left) / 1e9, half * rate_host / 1e9)}


def big_switch(hosts: int, rate_host: float) -> dict:
    diameter, avg = _hops([(hosts - 1, 2)])
    half = hosts // 2
    return {"diameter": diameter, "switch_diameter": 0, "avg_hops": avg, "ecmp": _ecmp([]),
            **_bisection(half * rate_host / 1e9, half * rate_host / 1e9)}


def _bisection(value_gbps: float, full_gbps: float) -> dict:
    return {"bisection_gbps": round(value_gbps, 6), "full_bisection_gbps": round(full_gbps, 6),
            "bisection_ratio": round(value_gbps / full_gbps, 6) if full_gbps else 1.0,
            "bisection_method": METHOD}


def metrics(spec) -> dict | None:
    """Closed-form hops, ECMP and bisection of a validated spec (:class:`testbed.topo.spec.Spec`), or None
    for kinds without formulas."""
    p, rate = dict(spec.params), {tier: lp.rate_bps for tier, lp in spec.links.items()}
    if spec.kind == "fat-tree":
        return fat_tree(p["k"], rate["host"], rate["edge-agg"], rate["agg-core"])
    if spec.kind == "spine-leaf":
        return spine_leaf(p["leaves"], p["spines"], p["hosts_per_leaf"], rate["host"], rate["leaf-spine"])
    if spec.kind == "big-switch":
        return big_switch(p["hosts"], rate["host"])
    return None
