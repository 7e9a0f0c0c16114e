"""Generators: exact counts from the issue and the closed-form formulas, and the graph contract."""

import itertools
from collections import Counter

import pytest

from testbed.topo import generators as gen
from testbed.topo.addressing import first_tier_switch
from testbed.topo.graph import hosts, neighbour_on_port, port, switches


def _roles(G):
    return Counter(d["role"] for _, d in G.nodes(data=True))


ALL = {
    "fat-tree-4": lambda: gen.fat_tree(4),
    "spine-leaf": lambda: gen.spine_leaf(3, 2, 5),
    "rail-optimized": lambda: gen.rail_optimized(3, 4, 2),
    "rail-only": lambda: gen.rail_only(3, 4),
    "dragonfly": lambda: gen.dragonfly(4, 2, 2),
    "torus-2d": lambda: gen.torus((3, 4), 2),
    "torus-3d": lambda: gen.torus((3, 3, 4)),
    "big-switch": lambda: gen.big_switch(7),
    "full-mesh": lambda: gen.full_mesh((3, 4), 2),
    "slim-fly": lambda: gen.slim_fly(5, 2),
    "cross-campus": lambda: gen.cross_campus([lambda b: gen.fat_tree(4, b),
                                              lambda b: gen.spine_leaf(2, 2, 3, b)], 2),
}


def test_fat_tree_k4_exact_counts():
    G = gen.fat_tree(4)
    assert (len(switches(G)), len(hosts(G)), G.number_of_edges()) == (20, 16, 48)
    assert _roles(G) == {"host": 16, "tor": 8, "agg": 8, "core": 4}


def test_fat_tree_k8_exact_counts():
    G = gen.fat_tree(8)
    assert (len(switches(G)), len(hosts(G)), G.number_of_edges()) == (80, 128, 384)
    assert all(G.degree(s) == 8 for s in switches(G) if G.nodes[s]["role"] != "core")
    assert all(G.degree(s) == 8 for s in switches(G))


def test_fat_tree_rejects_odd_k():
    with pytest.raises(ValueError, match="even"):
        gen.fat_tree(5)


def test_dragonfly_a4_p2_h2_exact_counts():
    G = gen.dragonfly(4, 2, 2)
    routers = [n for n, d in G.nodes(data=True) if d["role"] == "router"]
    groups = {G.nodes[r]["group"] for r in routers}
    assert (len(groups), len(routers), len(hosts(G))) == (9, 36, 72)
    assert gen.expected_counts("dragonfly", a=4, p=2, h=2)["links"] == G.number_of_edges()


@pytest.mark.parametrize("a,p,h", [(4, 2, 2), (2, 1, 1), (3, 2, 3)])
def test_dragonfly_one_global_link_per_group_pair(a, p, h):
    G = gen.dragonfly(a, p, h)
    pairs = Counter()
    for u, v, d in G.edges(data=True):
        if d["tier"] == "global":
            pairs[frozenset((G.nodes[u]["group"], G.nodes[v]["group"]))] += 1
    g = a * h + 1
    assert len(pairs) == g * (g - 1) // 2 and set(pairs.values()) == {1}
    for r in (n for n, d in G.nodes(data=True) if d["role"] == "router"):
        tiers = Counter(G.edges[r, n]["tier"] for n in G.neighbors(r))
        assert tiers == {"host": p, "local": a - 1, "global": h}


@pytest.mark.parametrize("dims,n", [((3, 3), 1), ((4, 5), 2), ((3, 3, 3), 1), ((4, 3, 5), 2)])
def test_torus_matches_formula(dims, n):
    G = gen.torus(dims, n)
    want = gen.expected_counts("torus", dims=dims, hosts_per_switch=n)
    assert (len(hosts(G)), len(switches(G)), G.number_of_edges()) == (want["hosts"], want["switches"],
                                                                       want["links"])
    assert all(G.degree(s) == 2 * len(dims) + n for s in switches(G))


@pytest.mark.parametrize("dims", [(2, 4), (2,), (3, 3, 3, 3), ()])
def test_torus_rejects_small_or_wrong_dims(dims):
    with pytest.raises(ValueError):
        gen.torus(dims)


def test_a_one_dimensional_torus_is_a_ring():
    G = gen.torus((5,), 1)
    ring = sorted(switches(G))
    assert len(ring) == 5 and all(G.degree(s) == 3 for s in ring)          # two ring neighbours + a host
    sub = G.subgraph(ring)
    assert sub.number_of_edges() == 5 and all(d == 2 for _, d in sub.degree())


@pytest.mark.parametrize("dims,n", [((4,), 1), ((4, 4), 2), ((2, 3, 4), 1)])
def test_full_mesh_matches_formula(dims, n):
    G = gen.full_mesh(dims, n)
    want = gen.expected_counts("full-mesh", dims=dims, hosts_per_switch=n)
    assert (len(hosts(G)), len(switches(G)), G.number_of_edges()) == (want["hosts"], want["switches"],
                                                                       want["links"])
    assert all(G.degree(s) == sum(d - 1 for d in dims) + n for s in switches(G))


@pytest.mark.parametrize("servers,gpus,spines", [(4, 8, 4), (2, 2, 1), (5, 3, 2)])
def test_rail_optimized_formula_and_rails(servers, gpus, spines):
    G = gen.rail_optimized(servers, gpus, spines)
    assert len(hosts(G)) == servers * gpus
    assert len(switches(G)) == gpus + spines
    assert G.number_of_edges() == servers * gpus + gpus * spines
    for h in hosts(G):  # NIC g of every server lands on rail g
        assert G.nodes[first_tier_switch(G, h)]["rail"] == G.nodes[h]["gpu"]


@pytest.mark.parametrize("servers,gpus", [(4, 8), (3, 2)])
def test_rail_only_formula_and_no_spine(servers, gpus):
    G = gen.rail_only(servers, gpus)
    roles = _roles(G)
    assert roles == {"host": servers * gpus, "rail": gpus, "nvswitch": servers, "nic": servers * gpus}
    assert G.number_of_edges() == 3 * servers * gpus
    assert Counter(d["tier"] for _, _, d in G.edges(data=True)) == {
        "host": servers * gpus, "nvlink": servers * gpus, "rail": servers * gpus}
    for h in hosts(G):
        assert G.degree(h) == 1
        nic = first_tier_switch(G, h)
        assert (G.nodes[nic]["server"], G.nodes[nic]["gpu"]) == (G.nodes[h]["server"], G.nodes[h]["gpu"])
    for r in (n for n, d in G.nodes(data=True) if d["role"] == "rail"):
        assert {G.nodes[n]["role"] for n in G.neighbors(r)} == {"nic"}
        assert {G.nodes[n]["gpu"] for n in G.neighbors(r)} == {G.nodes[r]["rail"]}
        assert G.degree(r) == servers


def test_spine_leaf_and_big_switch_counts():
    G = gen.spine_leaf(4, 3, 6)
    assert _roles(G) == {"leaf": 4, "spine": 3, "host": 24}
    assert G.number_of_edges() == 24 + 12
    B = gen.big_switch(9)
    assert (len(switches(B)), len(hosts(B)), B.number_of_edges()) == (1, 9, 9)


def test_cross_campus_joins_campuses_through_dci():
    G = ALL["cross-campus"]()
    dci = [n for n, d in G.nodes(data=True) if d["role"] == "dci"]
    assert len(dci) == 4  # 2 per campus
    long_haul = [(u, v) for u, v, d in G.edges(data=True) if d["tier"] == "dci"]
    assert len(long_haul) == 2  # one per DCI index between the 2 campuses
    for u, v in long_haul:
        assert G.nodes[u]["campus"] != G.nodes[v]["campus"]
    assert {d["campus"] for _, d in G.nodes(data=True)} == {0, 1}
    top = max(d["tier"] for n, d in G.nodes(data=True) if d["role"] != "dci")
    assert all(G.nodes[d]["tier"] == top + 1 for d in dci)
    # every DCI switch of campus 0 reaches all 4 cores of the fat-tree
    assert {G.nodes[n]["role"] for n in G.neighbors(dci[0])} == {"core", "dci"}


@pytest.mark.parametrize("name", sorted(ALL))
def test_graph_contract(name):
    G = ALL[name]()
    for n in G.nodes:
        assert len(f"{n}-eth{max(G.degree(n), 1)}") <= 15
    for n in G.nodes:
        used = sorted(G.edges[n, m]["ports"][n] for m in G.neighbors(n))
        assert used == list(range(1, G.degree(n) + 1))  # unique and contiguous
        for m in G.neighbors(n):
            assert neighbour_on_port(G, n, port(G, n, m)) == m
    for h in hosts(G):
        assert G.degree(h) == 1
        (nbr,) = G.neighbors(h)
        assert G.edges[h, nbr]["tier"] == "host" and port(G, h, nbr) == 1
        assert G.nodes[h]["tier"] == 0
    dpids = [G.nodes[s]["dpid"] for s in switches(G)]
    assert len(set(dpids)) == len(dpids) and min(dpids) >= 1
    for s in switches(G):
        assert G.nodes[s]["tier"] >= 1
    for _, _, d in G.edges(data=True):
        assert d["rate_bps"] > 0 and d["delay_s"] >= 0 and d["tier"] in (set(gen.TIERS[G.graph["kind"]])
                                                                          | {t for ts in gen.TIERS.values()
                                                                             for t in ts})


@pytest.mark.parametrize("name", sorted(ALL))
def test_generators_are_deterministic(name):
    a, b = ALL[name](), ALL[name]()
    assert list(a.nodes(data=True)) == list(b.nodes(data=True))
    assert [(u, v, d["ports"]) for u, v, d in a.edges(data=True)] == \
        [(u, v, d["ports"]) for u, v, d in b.edges(data=True)]


def test_parallel_links_refused():
    from testbed.topo.builder import Builder

    b = Builder()
    x, y = b.switch("switch", 1), b.switch("switch", 1)
    b.link(x, y, "mesh")
    with pytest.raises(ValueError, match="parallel"):
        b.link(y, x, "mesh")


def test_dragonfly_groups_fully_meshed():
    G = gen.dragonfly(3, 1, 1)
    by_group = {}
    for n, d in G.nodes(data=True):
        if d["role"] == "router":
            by_group.setdefault(d["group"], []).append(n)
    for routers in by_group.values():
        for r1, r2 in itertools.combinations(routers, 2):
            assert G.edges[r1, r2]["tier"] == "local"
