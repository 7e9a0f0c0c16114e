"""Fabric generators: structure only, in the graph contract of :mod:`testbed.topo.graph`.

Each generator adds its nodes and links to a :class:`~testbed.topo.builder.Builder` (a fresh one when
none is given) and returns the builder's graph. Link rates/distances come from the builder's LinkTable by
tier, so the same generator serves a bare call (100G everywhere) and a spec. Parameters are checked here
too (``ValueError``); the spec layer turns user input into :class:`~testbed.errors.SpecError` first.

Counts (H hosts, S switches, L links including host links)::

    fat_tree(k)                H = k^3/4     S = 5k^2/4          L = 3k^3/4
    spine_leaf(l, s, n)        H = l*n       S = l + s           L = l*n + l*s
    rail_optimized(v, g, s)    H = v*g       S = g + s           L = v*g + g*s
    rail_only(v, g)            H = v*g       S = g + v           L = 2*v*g      (v NVSwitch domains)
    dragonfly(a, p, h)         H = a*p*G     S = a*G             L = H + G*a(a-1)/2 + G(G-1)/2,  G = a*h+1
    torus(dims, n)             H = N*n       S = N = prod(dims)  L = H + N*len(dims)
    big_switch(n)              H = n         S = 1               L = n
    full_mesh(dims, n)         H = N*n       S = N               L = H + N*sum(d-1 for d in dims)/2
"""

from __future__ import annotations

import itertools
import math

import networkx as nx

from testbed.topo.builder import Builder

#: Link tiers each kind uses (spec ``links:`` keys are checked against these).
TIERS = {
    "fat-tree": ("host", "edge-agg", "agg-core"),
    "spine-leaf": ("host", "leaf-spine"),
    "rail-optimized": ("host", "rail-spine"),
    "rail-only": ("host", "rail"),
    "dragonfly": ("host", "local", "global"),
    "torus": ("host", "torus"),
    "big-switch": ("host",),
    "full-mesh": ("host", "mesh"),
    "cross-campus": ("campus-dci", "dci"),
}


def _positive(name: str, value, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def fat_tree(k: int, b: Builder | None = None) -> nx.Graph:
    """Three-tier fat-tree (Al-Fares et al., SIGCOMM'08): k pods of k/2 ToRs and k/2 aggs, (k/2)^2 cores.

    ToR ports 1..k/2 face hosts, k/2+1..k face aggs; agg ports 1..k/2 face ToRs, the rest face cores.
    """
    _positive("k", k, 2)
    if k % 2:
        raise ValueError(f"k must be even, got {k}")
    b = b or Builder(kind="fat-tree")
    half = k // 2
    tors = [[b.switch("tor", 1, pod=p) for _ in range(half)] for p in range(k)]
    aggs = [[b.switch("agg", 2, pod=p) for _ in range(half)] for p in range(k)]
    cores = [b.switch("core", 3) for _ in range(half * half)]
    for p in range(k):
        for t in tors[p]:
            for _ in range(half):
                b.link(b.host(pod=p), t, "host")
    for p in range(k):
        for t in tors[p]:
            for a in aggs[p]:
                b.link(t, a, "edge-agg")
    for p in range(k):
        for i, a in enumerate(aggs[p]):
            for c in cores[i * half:(i + 1) * half]:
                b.link(a, c, "agg-core")
    return b.finish()


def spine_leaf(leaves: int, spines: int, hosts_per_leaf: int, b: Builder | None = None) -> nx.Graph:
    """Two-tier Clos: every leaf connects to every spine; oversubscription comes from the rates."""
    for name, value in (("leaves", leaves), ("spines", spines), ("hosts_per_leaf", hosts_per_leaf)):
        _positive(name, value)
    b = b or Builder(kind="spine-leaf")
    leaf_nodes = [b.switch("leaf", 1) for _ in range(leaves)]
    spine_nodes = [b.switch("spine", 2) for _ in range(spines)]
    for leaf in leaf_nodes:
        for _ in range(hosts_per_leaf):
            b.link(b.host(), leaf, "host")
    for leaf in leaf_nodes:
        for spine in spine_nodes:
            b.link(leaf, spine, "leaf-spine")
    return b.finish()


def rail_optimized(servers: int, gpus_per_server: int, spines: int, b: Builder | None = None) -> nx.Graph:
    """Rail-optimized: NIC g of every server goes to rail switch g; every rail connects to every spine.

    Hosts are NICs (one per GPU) with ``server`` and ``gpu`` attributes; cross-rail traffic crosses a spine.
    """
    for name, value in (("servers", servers), ("gpus_per_server", gpus_per_server), ("spines", spines)):
        _positive(name, value)
    b = b or Builder(kind="rail-optimized")
    rails = [b.switch("rail", 1, rail=g) for g in range(gpus_per_server)]
    spine_nodes = [b.switch("spine", 2) for _ in range(spines)]
    for s in range(servers):
        for g in range(gpus_per_server):
            b.link(b.host(server=s, gpu=g), rails[g], "host")
    for rail in rails:
        for spine in spine_nodes:
            b.link(rail, spine, "rail-spine")
    return b.finish()


def rail_only(servers: int, gpus_per_server: int, b: Builder | None = None) -> nx.Graph:
    """Rail-only (Wang et al., HOTI'24): rail switches and no spine. Each server is a high-bandwidth
    domain: its GPUs (hosts, tier 'host' link) hang off the server's ``nvswitch``, which holds the server's
    NICs, one per rail (tier 'rail' link to rail switch g). Cross-rail traffic first moves inside the
    source server to the NIC of the destination's rail, then along that rail -- NCCL's PXN. Hosts are
    never transit, and each host has a single link."""
    _positive("servers", servers)
    _positive("gpus_per_server", gpus_per_server)
    b = b or Builder(kind="rail-only")
    rails = [b.switch("rail", 2, rail=g) for g in range(gpus_per_server)]
    domains = [b.switch("nvswitch", 1, server=s) for s in range(servers)]
    for s in range(servers):
        for g in range(gpus_per_server):
            b.link(b.host(server=s, gpu=g), domains[s], "host")
    for s in range(servers):
        for g in range(gpus_per_server):
            b.link(domains[s], rails[g], "rail")
    return b.finish()


def dragonfly(a: int, p: int, h: int, b: Builder | None = None) -> nx.Graph:
    """Canonical dragonfly (Kim et al., ISCA'08): g = a*h + 1 groups of ``a`` routers (full mesh inside),
    ``p`` hosts and ``h`` global links per router, exactly one global link between every pair of groups.

    Global ports use the "absolute" arrangement: group i's global port j (0 <= j < a*h, on router j // h)
    goes to group j if j < i else j + 1.
    """
    for name, value in (("a", a), ("p", p), ("h", h)):
        _positive(name, value)
    b = b or Builder(kind="dragonfly")
    groups = a * h + 1
    routers = [[b.switch("router", 1, group=gi) for _ in range(a)] for gi in range(groups)]
    for gi in range(groups):
        for r in routers[gi]:
            for _ in range(p):
                b.link(b.host(group=gi), r, "host")
    for gi in range(groups):
        for r1, r2 in itertools.combinations(routers[gi], 2):
            b.link(r1, r2, "local")
    for gi, gj in itertools.combinations(range(groups), 2):
        port_i = gj - 1          # gj > gi: port index gj - 1 on group gi
        port_j = gi              # gi < gj: port index gi on group gj
        b.link(routers[gi][port_i // h], routers[gj][port_j // h], "global")
    return b.finish()


def _switch_grid(b: Builder, dims: tuple[int, ...], hosts_per_switch: int) -> tuple[list, dict]:
    """One switch per grid coordinate, each with its hosts; returns (coordinates, {coordinate: switch})."""
    coords = list(itertools.product(*(range(d) for d in dims)))
    node = {c: b.switch("switch", 1, coord=c) for c in coords}
    for c in coords:
        for _ in range(hosts_per_switch):
            b.link(b.host(coord=c), node[c], "host")
    return coords, node


def torus(dims: tuple[int, ...], hosts_per_switch: int = 1, b: Builder | None = None) -> nx.Graph:
    """2D/3D torus of switches with wrap-around links; every dimension >= 3 so no two links are parallel."""
    dims = tuple(dims)
    if len(dims) not in (2, 3):
        raise ValueError(f"dims must have 2 or 3 entries, got {list(dims)}")
    for d in dims:
        _positive("dims", d, 3)
    _positive("hosts_per_switch", hosts_per_switch)
    b = b or Builder(kind="torus")
    coords, node = _switch_grid(b, dims, hosts_per_switch)
    for c in coords:
        for dim, size in enumerate(dims):
            nxt = list(c)
            nxt[dim] = (c[dim] + 1) % size
            b.link(node[c], node[tuple(nxt)], "torus", dim=dim)
    return b.finish()


def big_switch(hosts: int, b: Builder | None = None) -> nx.Graph:
    """One logical switch (a flattened chassis) with ``hosts`` host ports."""
    _positive("hosts", hosts)
    b = b or Builder(kind="big-switch")
    sw = b.switch("switch", 1)
    for _ in range(hosts):
        b.link(b.host(), sw, "host")
    return b.finish()


def full_mesh(dims: tuple[int, ...], hosts_per_switch: int = 1, b: Builder | None = None) -> nx.Graph:
    """nD full-mesh (UB-Mesh style): switches on a grid, fully meshed along every dimension, i.e. two
    switches are linked when their coordinates differ in exactly one dimension."""
    dims = tuple(dims)
    if not 1 <= len(dims) <= 4:
        raise ValueError(f"dims must have 1 to 4 entries, got {list(dims)}")
    for d in dims:
        _positive("dims", d, 2)
    _positive("hosts_per_switch", hosts_per_switch)
    b = b or Builder(kind="full-mesh")
    coords, node = _switch_grid(b, dims, hosts_per_switch)
    for dim, size in enumerate(dims):
        for c in coords:
            for v in range(c[dim] + 1, size):
                other = c[:dim] + (v,) + c[dim + 1:]
                b.link(node[c], node[other], "mesh", dim=dim)
    return b.finish()


def cross_campus(campuses: list, dci_per_campus: int = 1, b: Builder | None = None) -> nx.Graph:
    """Campuses joined by long-haul DCI links.

    Args:
        campuses: one callable per campus, ``fn(builder)``, that adds that campus's fabric
            (e.g. ``lambda b: fat_tree(4, b)``); every node it adds gets ``campus=<index>``.
        dci_per_campus: DCI switches per campus; each connects to every top-tier switch of its campus
            ('campus-dci' tier), and DCI switch d of every campus connects to DCI switch d of every other
            campus ('dci' tier, the long-haul links).
    """
    if len(campuses) < 2:
        raise ValueError(f"need at least 2 campuses, got {len(campuses)}")
    _positive("dci_per_campus", dci_per_campus)
    b = b or Builder(kind="cross-campus")
    for i, add in enumerate(campuses):
        b.campus = i
        add(b)
    b.campus = None
    top = max(d["tier"] for _, d in b.G.nodes(data=True))
    dci = []
    for i in range(len(campuses)):
        members = [n for n, d in b.G.nodes(data=True) if d.get("campus") == i]
        campus_top = max(b.G.nodes[n]["tier"] for n in members)
        uplinks = [n for n in members if b.G.nodes[n]["tier"] == campus_top]
        b.campus = i
        mine = [b.switch("dci", top + 1) for _ in range(dci_per_campus)]
        b.campus = None
        for d in mine:
            for n in uplinks:
                b.link(n, d, "campus-dci")
        dci.append(mine)
    for i, j in itertools.combinations(range(len(campuses)), 2):
        for d in range(dci_per_campus):
            b.link(dci[i][d], dci[j][d], "dci")
    return b.finish()


def expected_counts(kind: str, **params) -> dict:
    """Closed-form host/switch/link counts (the table above), used by tests and ``topo show``."""
    if kind == "fat-tree":
        k = params["k"]
        return {"hosts": k ** 3 // 4, "switches": 5 * k * k // 4, "links": 3 * k ** 3 // 4}
    if kind == "dragonfly":
        a, p, h = params["a"], params["p"], params["h"]
        g = a * h + 1
        hosts = a * p * g
        return {"hosts": hosts, "switches": a * g, "groups": g,
                "links": hosts + g * a * (a - 1) // 2 + g * (g - 1) // 2}
    if kind == "torus":
        n = math.prod(params["dims"])
        hosts = n * params.get("hosts_per_switch", 1)
        return {"hosts": hosts, "switches": n, "links": hosts + n * len(params["dims"])}
    if kind == "full-mesh":
        dims = params["dims"]
        n = math.prod(dims)
        hosts = n * params.get("hosts_per_switch", 1)
        return {"hosts": hosts, "switches": n, "links": hosts + n * sum(d - 1 for d in dims) // 2}
    raise KeyError(kind)
