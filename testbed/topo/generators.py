"""Fabric generators: structure only, in the graph contract of :mod:`testbed.topo.graph`.

Each generator adds its nodes and links to a :class:`~testbed.topo.builder.Builder` (a fresh one when
none is given) and returns the builder's graph. Link rates/distances come from the builder's LinkTable by
tier, so the same generator serves a bare call (100G everywhere) and a spec. Parameters are checked here
too (``ValueError``); the spec layer turns user input into :class:`~testbed.errors.SpecError` first.

Counts (H hosts, S switches, L links including host links)::

    fat_tree(k)                H = k^3/4     S = 5k^2/4          L = 3k^3/4
    spine_leaf(l, s, n)        H = l*n       S = l + s           L = l*n + l*s
    rail_optimized(v, g, s)    H = v*g       S = g + s           L = v*g + g*s
    dragonfly(a, p, h)         H = a*p*G     S = a*G             L = H + G*a(a-1)/2 + G(G-1)/2,  G = a*h+1
    torus(dims, n)             H = N*n       S = N = prod(dims)  L = H + N*len(dims)
    big_switch(n)              H = n         S = 1               L = n
    full_mesh(dims, n)         H = N*n       S = N               L = H + N*sum(d-1 for d in dims)/2
    slim_fly(q, p)             H = 2q^2*p    S = 2q^2            L = H + q^2*k',  k' = (3q - delta)/2
    rail_only(v, g)  (above)   plus v*g 'nic' nodes: S = g + v + v*g, L = 3*v*g (host, nvlink, rail)
"""

from __future__ import annotations

import itertools
import math

import networkx as nx

from testbed.topo.builder import Builder
from testbed.topo.galois import GF

#: Link tiers each kind uses (spec ``links:`` keys are checked against these).
TIERS = {
    "fat-tree": ("host", "edge-agg", "agg-core"),
    "spine-leaf": ("host", "leaf-spine"),
    "rail-optimized": ("host", "rail-spine"),
    "rail-only": ("host", "nvlink", "rail"),
    "dragonfly": ("host", "local", "global"),
    "torus": ("host", "torus"),
    "big-switch": ("host",),
    "full-mesh": ("host", "mesh"),
    "slim-fly": ("host", "local", "global"),
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
    """Rail-only (Wang et al., HOTI'24, "How to build low-cost networks for large language models
    (without sacrificing performance)"): rail switches and no spine, no Ethernet between rails.

    GPU g of every server sits on rail g; the only way from rail g to rail h is the server's NVLink
    domain, which is explicit::

        host(s,g) --host-- nic(s,g) --rail-- rail g          (Ethernet, one NIC per GPU)
                              |
                            nvlink
                              |
                          nvswitch(s)  --nvlink-- nic(s,h) --rail-- rail h

    A ``nic`` node (role ``nic``, tier 1, attributes server/gpu) is GPU g's I/O junction: its rail NIC
    and its NVLink ports. The host is the GPU's traffic end point. A cross-rail flow crosses one NVLink
    domain (at the source, NCCL's PXN, or at the destination; both are shortest), so it costs two NVLink
    hops more than a same-rail flow. Hosts are never transit and each host has a single link.
    """
    _positive("servers", servers)
    _positive("gpus_per_server", gpus_per_server)
    b = b or Builder(kind="rail-only")
    rails = [b.switch("rail", 2, rail=g) for g in range(gpus_per_server)]
    domains = [b.switch("nvswitch", 2, server=s) for s in range(servers)]
    for s in range(servers):
        for g in range(gpus_per_server):
            nic = b.switch("nic", 1, server=s, gpu=g, rail=g)
            b.link(b.host(server=s, gpu=g), nic, "host")
            b.link(nic, domains[s], "nvlink")
            b.link(nic, rails[g], "rail")
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
    """1D (a ring), 2D or 3D torus of switches with wrap-around links; every dimension >= 3 so no two links
    are parallel. The ring is the smallest fabric whose shortest-path routing closes a PFC buffer cycle."""
    dims = tuple(dims)
    if len(dims) not in (1, 2, 3):
        raise ValueError(f"dims must have 1, 2 or 3 entries, got {list(dims)}")
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


def slim_fly_degree(q: int) -> int:
    """Router-to-router degree k' = (3q - delta) / 2 of the MMS graph, q = 4w + delta, delta in {-1, 0, 1}."""
    delta = {1: 1, 0: 0, 3: -1}.get(q % 4) if isinstance(q, int) and q >= 3 else None
    if delta is None:
        raise ValueError(f"q must be a prime power >= 3 (3, 4, 5, 7, 8, 9, 11, 13, ...), got {q!r}")
    return (3 * q - delta) // 2


def _mms_generators(F: GF) -> tuple[set, set]:
    """Generator sets X (subgraph 0) and X' (subgraph 1) of the MMS graph (Besta & Hoefler, SC'14, §II-B,
    after Hafner 2004), from a primitive element xi of GF(q), q = 4w + delta."""
    q = F.q
    xi = F.primitive_element()
    w, delta = divmod(q, 4)
    if delta == 3:
        w, delta = w + 1, -1

    def powers(exps):
        return {F.power(xi, e) for e in exps}

    if delta == 1:
        return powers(range(0, q - 2, 2)), powers(range(1, q - 1, 2))
    if delta == 0:
        return powers(range(0, q - 1, 2)), powers(range(1, q, 2))
    return (powers(list(range(0, 2 * w - 1, 2)) + list(range(2 * w - 1, 4 * w - 2, 2))),
            powers(list(range(1, 2 * w, 2)) + list(range(2 * w, 4 * w - 1, 2))))


def mms_graph(q: int) -> nx.Graph:
    """The bare McKay-Miller-Siran router graph of a prime power q (nodes ``(s, x, y)``, edge attribute
    ``tier`` 'local' or 'global'); :func:`slim_fly` puts routers, hosts and ports on it.

    2q^2 routers (s, x, y), s in {0, 1}, x and y in GF(q); with X, X' the generator sets of
    :func:`_mms_generators`::

        (0, x, y) -- (0, x, y')   iff  y - y' in X       (tier 'local': same subgraph, same group x)
        (1, m, c) -- (1, m, c')   iff  c - c' in X'      (tier 'local')
        (0, x, y) -- (1, m, c)    iff  y = m*x + c       (tier 'global')

    Raises:
        ValueError: q is not a prime power of the form 4w + delta, delta in {-1, 0, 1} (so q >= 3).
    """
    slim_fly_degree(q)
    F = GF(q)
    X, Xp = _mms_generators(F)
    for name, gens in (("X", X), ("X'", Xp)):
        if {F.neg(a) for a in gens} != gens:
            raise AssertionError(f"MMS generator set {name} of GF({q}) is not symmetric")  # construction bug
    M = nx.Graph()
    M.add_nodes_from((s, x, y) for s in (0, 1) for x in range(q) for y in range(q))
    for s, gens in ((0, X), (1, Xp)):
        for x in range(q):
            for y in range(q):
                for y2 in range(y + 1, q):
                    if F.sub(y, y2) in gens:
                        M.add_edge((s, x, y), (s, x, y2), tier="local")
    for x in range(q):
        for m in range(q):
            for c in range(q):
                M.add_edge((0, x, F.add(F.mul(m, x), c)), (1, m, c), tier="global")
    return M


def slim_fly(q: int, hosts_per_router: int | None = None, b: Builder | None = None) -> nx.Graph:
    """Slim fly (Besta & Hoefler, SC'14): the MMS graph of :func:`mms_graph` with hosts on every router.

    Every router has k' = (3q - delta)/2 router links and the router graph has diameter 2.
    ``hosts_per_router`` defaults to ceil(k'/2), the paper's choice for full global bandwidth. Router
    attributes: ``subgraph`` (s), ``group`` (s*q + x, for layout and metrics), ``index`` (y or c).

    Raises:
        ValueError: q is not a prime power >= 3, or hosts_per_router < 1.
    """
    M = mms_graph(q)
    degree = slim_fly_degree(q)
    p = -(-degree // 2) if hosts_per_router is None else hosts_per_router
    _positive("hosts_per_router", p)
    b = b or Builder(kind="slim-fly")
    router = {key: b.switch("router", 1, subgraph=key[0], group=key[0] * q + key[1], index=key[2])
              for key in M.nodes}
    for key in M.nodes:
        for _ in range(p):
            b.link(b.host(group=key[0] * q + key[1]), router[key], "host")
    for u, v, d in M.edges(data=True):
        b.link(router[u], router[v], d["tier"])
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
    if kind == "slim-fly":
        q = params["q"]
        degree = slim_fly_degree(q)
        p = params.get("hosts_per_router") or -(-degree // 2)
        routers = 2 * q * q
        return {"hosts": routers * p, "switches": routers, "router_degree": degree,
                "links": routers * p + routers * degree // 2}
    raise KeyError(kind)
