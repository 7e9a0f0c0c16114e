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
"""

from __future__ import annotations

import math

#: Largest fabric (nodes) ``topo show`` builds and walks; beyond it only the closed-form counts.
WALK_LIMIT = 2000


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
    else:
        return None
    return {"hosts": hosts, "switches": switches, "links": links, "nodes": hosts + switches}
