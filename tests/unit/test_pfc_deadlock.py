"""Deadlock analysis: buffer dependencies from the routing brain's routes; cycles in rings and tori, none in
an up-down Clos, one in a Clos whose failover reroute goes up-down-up."""

from __future__ import annotations

from testbed.routing.brain import RoutingBrain, route_dict
from testbed.routing.deadlock import dependency_graph, find_deadlocks
from testbed.topo import generators as gen
from testbed.topo.builder import Builder


def ring(n: int):
    """n switches in a ring, one host each."""
    b = Builder(kind="ring")
    sw = [b.switch("switch", 1) for _ in range(n)]
    for s in sw:
        b.link(b.host(), s, "host")
    for i in range(n):
        b.link(sw[i], sw[(i + 1) % n], "torus")
    return b.finish(), sw


def line(n: int):
    b = Builder(kind="line")
    sw = [b.switch("switch", 1) for _ in range(n)]
    for s in sw:
        b.link(b.host(), s, "host")
    for i in range(n - 1):
        b.link(sw[i], sw[i + 1], "torus")
    return b.finish(), sw


def routes(G, down=()):
    brain = RoutingBrain(G)
    brain.compute_all()
    for a, b in down:
        brain.link_down(a, b, 1.0)
    return list(brain.routes.values())


def test_dependencies_of_a_line_by_hand():
    G, (x0, x1, x2) = line(3)
    D = dependency_graph(G, routes(G))
    # only x0 -> x1 -> x2 (h2's traffic from h0) and back make a switch wait for a switch
    assert set(D.edges) == {((x0, x1), (x1, x2)), ((x2, x1), (x1, x0))}
    assert find_deadlocks(G, routes(G)) == []


def test_ring_with_shortest_paths_closes_a_cycle():
    G, sw = ring(6)
    found = find_deadlocks(G, routes(G))
    assert found, "a 6-ring under shortest-path routing has a cyclic buffer dependency"
    d = found[0]
    assert d.priority == 3 and len(d.cycle) >= 3
    D = dependency_graph(G, routes(G))
    for a, b in zip(d.cycle, d.cycle[1:] + d.cycle[:1], strict=True):
        assert D.has_edge(a, b) and a[1] == b[0]             # a real chain of channels
    assert "->" in d.describe() and d.as_dict()["priority"] == 3


def test_a_three_ring_has_only_one_hop_routes_and_no_cycle():
    G, _ = ring(3)
    assert find_deadlocks(G, routes(G)) == []


def test_torus_closes_a_cycle():
    G = gen.torus((4, 3))
    assert find_deadlocks(G, routes(G))


def test_up_down_clos_is_deadlock_free():
    for G in (gen.spine_leaf(4, 2, 1), gen.fat_tree(4)):
        r = routes(G)
        assert find_deadlocks(G, r) == []
        assert find_deadlocks(G, r, backups=True) == []
        assert dependency_graph(G, r).number_of_edges() > 0    # dependencies exist, they just never close


def test_clos_failover_reroute_up_down_up_deadlocks():
    G = gen.spine_leaf(4, 2, 1)
    down = [("l0", "s0"), ("l1", "s1")]                       # s0 cannot reach l0 and s1 cannot reach l1
    r = routes(G, down)
    found = find_deadlocks(G, r)
    assert found, "the up-down-up reroute after two failures closes a cycle"
    D = dependency_graph(G, r)
    role = {n: G.nodes[n]["role"] for n in G}
    hosts_of = {G.nodes[h]["ip"] + "/32": next(iter(G[h])) for h in G if role[h] == "host"}
    for d in found:
        # each cycle has a frame going down from a spine to a leaf and up again to the other spine ...
        bounces = [(a, b) for a, b in zip(d.cycle, d.cycle[1:] + d.cycle[:1], strict=True)
                   if role[a[0]] == "spine" and role[a[1]] == "leaf" and role[b[1]] == "spine"]
        assert bounces
        # ... and only traffic to the cut-off leaves bounces
        for a, b in bounces:
            assert {hosts_of[p] for p in D.edges[a, b]["prefixes"]} <= {"l0", "l1"}
    assert find_deadlocks(G, [route_dict(x) for x in r]) == found     # the JSON form gives the same
    assert find_deadlocks(G, routes(G, down[:1])) == []               # one failure: no bounce needed


def test_each_priority_has_its_own_buffers():
    G, _ = ring(6)
    r = routes(G)
    found = find_deadlocks(G, {3: r, 4: []}, priorities=(3, 4))
    assert {d.priority for d in found} == {3}
    assert {d.priority for d in find_deadlocks(G, r, priorities=(3, 4))} == {3, 4}
