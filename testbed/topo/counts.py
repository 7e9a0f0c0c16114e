"""How big a spec's fabric is, in closed form, before (or instead of) building its graph (pure).

``testbed topo show`` walks the graph (all host pairs for hops and ECMP): about 4 s at fat-tree k=16 (1,344 nodes) and
growing with the square, 22 s at fat-tree k=24 on a 2-core machine, and a fat-tree k=1024 graph (268
million hosts) would not even fit in memory. Above :data:`WALK_LIMIT` nodes it reports the counts below
instead, exact by the generators' construction, and names what it did not compute.

    fat-tree k        hosts k^3/4        switches 5k^2/4             links 3k^3/4
    spine-leaf        hosts L*H          switches L+S                links L*H + L*S
    torus / full-mesh hosts N*hps        switches N = prod(dims)     links N*hps + N*len(dims) (torus),
                                                                           N*hps + N*sum(d-1)/2 (mesh)
    big-switch        hosts n            switches 1                  links n
    dragonfly a,p,h   g = a*h+1 groups: hosts g*a*p, switches g*a,   links g*a*p + g*a(a-1)/2 + g(g-1)/2
    rail-optimized    hosts s*g          switches g + S              links s*g + g*S
    rail-only         hosts s*g          switches g + s + s*g (NICs) links 3*s*g
    slim-fly q, p     R = 2q^2 routers:  hosts R*p, switches R,      links R*p + R*k'/2  (k' router degree)
    cross-campus      the campuses' sums, plus d DCI switches per campus, each linked to every top-tier
                      switch of its campus, and DCI switch i of every campus to DCI switch i of every other

Every kind has a formula, so a spec is sized before anything is built: ``topo show`` and ``plan`` answer
in closed form beyond :data:`WALK_LIMIT`, and :func:`check_graph_size` refuses a graph beyond
:data:`GRAPH_LIMIT` (a graph costs about 0.6 KB per node or link: fat-tree k=48, 113,472 of them, took
1.8 s and 109 MB of peak RSS, 2026-12-02) instead of letting it grow past the machine's memory.
"""

from __future__ import annotations

import math

#: Largest fabric (nodes) ``topo show`` builds and walks; beyond it only the closed-form counts.
WALK_LIMIT = 2000

#: Largest graph (nodes + links) any command builds: about 300 MB; fat-tree k=64 (267,264) fits.
GRAPH_LIMIT = 500_000


def closed_form(kind: str, params) -> dict | None:
    """``{"hosts", "switches", "links", "nodes"}`` of a fabric of ``kind``, or None for kinds without a formula."""
    p = dict(params)
    if kind == "fat-tree":
        k = p["k"]
        hosts, switches, links = k ** 3 // 4, 5 * k * k // 4, 3 * k ** 3 // 4
    elif kind == "spine-leaf":
        L, S, H = p["leaves"], p["spines"], p["hosts_per_leaf"]
        hosts, switches, links = L * H, L + S, L * H + L * S
    elif kind in ("torus", "full-mesh"):
        n, hps = math.prod(p["dims"]), p.get("hosts_per_switch", 1)
        between = n * len(p["dims"]) if kind == "torus" else n * sum(d - 1 for d in p["dims"]) // 2
        hosts, switches, links = n * hps, n, n * hps + between
    elif kind == "big-switch":
        hosts, switches, links = p["hosts"], 1, p["hosts"]
    elif kind == "dragonfly":
        a, hp, h = p["a"], p["p"], p["h"]
        g = a * h + 1
        hosts, switches, links = g * a * hp, g * a, g * a * hp + g * a * (a - 1) // 2 + g * (g - 1) // 2
    elif kind == "rail-optimized":
        s, g, spines = p["servers"], p["gpus_per_server"], p.get("spines", 1)
        hosts, switches, links = s * g, g + spines, s * g + g * spines
    elif kind == "rail-only":
        s, g = p["servers"], p["gpus_per_server"]
        hosts, switches, links = s * g, g + s + s * g, 3 * s * g
    elif kind == "slim-fly":
        from testbed.topo.generators import slim_fly_degree

        routers, degree = 2 * p["q"] ** 2, slim_fly_degree(p["q"])
        per_router = p.get("hosts_per_router") or -(-degree // 2)
        hosts, switches, links = routers * per_router, routers, routers * per_router + routers * degree // 2
    elif kind == "cross-campus":
        return _cross_campus(p["campuses"], p.get("dci_per_campus", 1))
    else:
        return None
    return {"hosts": hosts, "switches": switches, "links": links, "nodes": hosts + switches}


def _top_tier(kind: str, params, counts: dict) -> int | None:
    """Switches in the top tier of one campus (those its DCI switches connect to)."""
    p = dict(params)
    if kind == "fat-tree":
        return (p["k"] // 2) ** 2
    if kind in ("spine-leaf", "rail-optimized"):
        return p.get("spines", 1)
    if kind == "rail-only":
        return p["gpus_per_server"] + p["servers"]  # rails and NVLink domains share the top tier
    if kind in ("big-switch", "dragonfly", "torus", "full-mesh", "slim-fly"):
        return counts["switches"]  # one tier of switches
    return None


def _cross_campus(campuses, dci: int) -> dict | None:
    hosts = switches = links = top = 0
    for c in campuses:
        kind, params = (c.kind, c.params) if hasattr(c, "kind") else (c["kind"], c.get("params") or {})
        counts = closed_form(kind, params)
        tier = _top_tier(kind, params, counts) if counts else None
        if tier is None:
            return None
        hosts, switches, links, top = hosts + counts["hosts"], switches + counts["switches"], \
            links + counts["links"], top + tier
    n = len(campuses)
    switches += n * dci
    links += dci * top + dci * n * (n - 1) // 2
    return {"hosts": hosts, "switches": switches, "links": links, "nodes": hosts + switches}


def check_graph_size(spec) -> dict | None:
    """Raise :class:`~testbed.errors.SpecError` (exit 2) when ``spec``'s graph is beyond
    :data:`GRAPH_LIMIT` nodes + links; its closed-form counts otherwise (None for a kind without one)."""
    from testbed.errors import SpecError

    counts = closed_form(spec.kind, spec.params)
    if counts is not None and counts["nodes"] + counts["links"] > GRAPH_LIMIT:
        raise SpecError("params", f"{spec.name} has {counts['nodes']:,} nodes and {counts['links']:,} links; "
                                  f"a graph is built up to {GRAPH_LIMIT:,} nodes + links: use a smaller "
                                  "instance (`testbed topo show` gives this one's figures in closed form)")
    return counts
