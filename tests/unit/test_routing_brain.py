"""The routing brain against a fake pipeline: ECMP paths, failures, incremental recomputation, backups."""

from __future__ import annotations

import random

import networkx as nx
import pytest

from testbed.errors import SpecError
from testbed.routing.brain import RoutingBrain, aggregates
from testbed.routing.verify import check_all_pairs, walk


def fat_tree(k: int = 4) -> nx.Graph:
    """A k-ary fat-tree with the graph contract's attributes (hosts: ip/mac; switches: dpid; ports)."""
    G = nx.Graph(name=f"ft{k}", kind="fat-tree")
    next_port: dict = {}

    def link(a, b, tier):
        pa = next_port[a] = next_port.get(a, 0) + 1
        pb = next_port[b] = next_port.get(b, 0) + 1
        G.add_edge(a, b, tier=tier, ports={a: pa, b: pb}, rate_bps=1e9, delay_s=0.0)

    dpid = iter(range(1, 1000))
    half = k // 2
    cores = [f"cr{i}" for i in range(half * half)]
    for c in cores:
        G.add_node(c, role="core", tier=3, dpid=next(dpid))
    h = 0
    for p in range(k):
        aggs = [f"a{p * half + i}" for i in range(half)]
        tors = [f"t{p * half + i}" for i in range(half)]
        for a in aggs:
            G.add_node(a, role="agg", tier=2, pod=p, dpid=next(dpid))
        for t in tors:
            G.add_node(t, role="tor", tier=1, pod=p, dpid=next(dpid))
        for t in tors:
            for j in range(half):
                name = f"h{h}"
                G.add_node(name, role="host", tier=0, pod=p, ip=f"10.{p}.{t[1:]}.{j + 2}", prefixlen=8,
                           mac=f"02:00:00:00:{h // 256:02x}:{h % 256:02x}")
                link(t, name, "host")
                h += 1
        for t in tors:
            for a in aggs:
                link(t, a, "tor-agg")
        for i, a in enumerate(aggs):
            for j in range(half):
                link(a, cores[i * half + j], "agg-core")
    return G


@pytest.fixture
def ft():
    return fat_tree(4)


def test_four_equal_cost_paths_between_pods(ft):
    brain = RoutingBrain(ft)
    brain.compute_all()
    w = walk(ft, brain.tables(), "h0", "h15")
    assert w.ok
    assert len(w.paths) == 4
    assert w.paths == brain.equal_cost_paths("h0", "h15")
    same_pod = walk(ft, brain.tables(), "h0", "h2")
    assert len(same_pod.paths) == 2


def test_all_pairs_delivered_and_loop_free(ft):
    brain = RoutingBrain(ft)
    diff = brain.compute_all()
    assert len(diff.add) == 20 * 16 and not diff.modify and not diff.delete
    assert check_all_pairs(ft, brain.tables()) == []


def test_core_link_failure_reroutes_everything(ft):
    brain = RoutingBrain(ft)
    brain.compute_all()
    diff = brain.link_down("a0", "cr0", now=1.0)
    assert diff.modify and not diff.add
    down = frozenset({frozenset(("a0", "cr0"))})
    assert check_all_pairs(ft, brain.tables(), down_links=down) == []
    for src, dst in [("h0", "h15"), ("h15", "h0"), ("h4", "h1")]:
        for path in walk(ft, brain.tables(), src, dst, down_links=down).paths:
            assert all({path[i], path[i + 1]} != {"a0", "cr0"} for i in range(len(path) - 1))
    assert len(walk(ft, brain.tables(), "h0", "h15", down_links=down).paths) == 3
    assert brain.events[-1].kind == "link_down" and brain.events[-1].now == 1.0


def test_incremental_equals_full_recompute(ft):
    rng = random.Random(7)
    brain = RoutingBrain(ft)
    brain.compute_all()
    switch_links = [(a, b) for a, b in ft.edges if ft.nodes[a]["role"] != "host" and ft.nodes[b]["role"] != "host"]
    for step in range(40):
        a, b = rng.choice(switch_links)
        if brain.is_link_up(a, b):
            brain.link_down(a, b, now=step)
        else:
            brain.link_up(a, b, now=step)
        fresh = RoutingBrain(ft, down_links=set(brain.down_links))
        fresh.compute_all()
        assert fresh.routes == brain.routes, f"step {step}: incremental state diverged"


def test_only_affected_destinations_recomputed(ft):
    brain = RoutingBrain(ft)
    brain.compute_all()
    diff = brain.link_down("t0", "a0", now=0)
    assert brain.events[-1].destinations < len(ft) - 20 + 16  # not everything
    # the routes of hosts behind t0 towards the other pods stay untouched on the cores
    assert all(r.switch != "cr3" for r in diff.modify)
    assert brain.link_down("t0", "a0", now=1) == type(diff)()  # idempotent
    back = brain.link_up("t0", "a0", now=2)
    assert back
    fresh = RoutingBrain(ft)
    fresh.compute_all()
    assert brain.routes == fresh.routes


def test_switch_failure_and_return(ft):
    brain = RoutingBrain(ft)
    brain.compute_all()
    diff = brain.switch_down("cr1", now=0)
    assert {r.switch for r in diff.delete} == {"cr1"}
    assert check_all_pairs(ft, brain.tables(), down_switches=frozenset({"cr1"})) == []
    diff = brain.switch_up("cr1", now=1)
    assert {r.switch for r in diff.add} == {"cr1"}
    assert check_all_pairs(ft, brain.tables()) == []


def test_partition_gives_blackhole_not_loop(ft):
    brain = RoutingBrain(ft)
    brain.compute_all()
    brain.link_down("t0", "a0", now=0)
    brain.link_down("t0", "a1", now=0)
    down = frozenset(brain.down_links)
    bad = check_all_pairs(ft, brain.tables(), down_links=down)
    assert bad and all(not w.loops for w in bad)
    assert {w.src for w in bad} | {w.dst for w in bad} >= {"h0", "h1"}
    assert brain.equal_cost_paths("h0", "h15") == []


def test_backups_are_loop_free_local_repair(ft):
    """Without recomputation, fast-failover backups alone keep every pair delivered after an uplink fails."""
    brain = RoutingBrain(ft)
    brain.compute_all()
    stale = brain.tables()
    for a, b in [("t0", "a0"), ("a0", "cr0")]:
        down = frozenset({frozenset((a, b))})
        for w in check_all_pairs(ft, stale, down_links=down, use_backups=True):
            assert not w.loops
        # upward traffic from the failed link's lower end is repaired locally
        src = "h0"
        assert walk(ft, stale, src, "h15", down_links=down, use_backups=True).ok
    for r in brain.routes.values():
        for primary, backup in r.backups:
            assert primary != backup and primary in r.ports


def test_single_nexthop_backup_found_on_a_triangle():
    """In a triangle a single next hop has a loop-free alternative: the neighbour at the same distance."""
    G = nx.Graph()
    names = ["s1", "s2", "s3"]
    for i, s in enumerate(names):
        G.add_node(s, role="switch", dpid=i + 1)
    ports: dict = {}

    def link(a, b):
        pa = ports[a] = ports.get(a, 0) + 1
        pb = ports[b] = ports.get(b, 0) + 1
        G.add_edge(a, b, ports={a: pa, b: pb})

    for i in range(3):
        link(names[i], names[(i + 1) % 3])
    G.add_node("hA", role="host", ip="10.0.0.1")
    G.add_node("hB", role="host", ip="10.0.0.2")
    link("s1", "hA")
    link("s3", "hB")
    brain = RoutingBrain(G)
    brain.compute_all()
    r = brain.routes[("s1", "10.0.0.2/32")]
    assert len(r.ports) == 1 and r.backup_for(r.ports[0]) == 1  # s1-s2 is s1's port 1
    down = frozenset({frozenset(("s1", "s3"))})
    assert not walk(G, brain.tables(), "hA", "hB", down_links=down).ok
    w = walk(G, brain.tables(), "hA", "hB", down_links=down, use_backups=True)
    assert w.ok and w.paths == [["hA", "s1", "s2", "s3", "hB"]]


def test_bad_input_names_the_field(ft):
    brain = RoutingBrain(ft)
    with pytest.raises(SpecError, match="link"):
        brain.link_down("h0", "h1", now=0)
    with pytest.raises(SpecError, match="switch"):
        brain.switch_down("h0", now=0)
    G = ft.copy()
    del G.nodes["h0"]["ip"]
    with pytest.raises(SpecError, match=r"nodes\.h0\.ip"):
        RoutingBrain(G)


def test_aggregates_follow_the_address_plan(ft):
    blocks = aggregates(ft)
    assert set(blocks) == {f"t{i}" for i in range(8)}
    assert blocks["t0"] == ("10.0.0.2/31", ["h0", "h1"])
    from testbed.topo import addressing
    from testbed.topo import generators as gen

    G = addressing.assign(gen.fat_tree(4))
    assert aggregates(G)["t0"][0] == "10.0.0.0/30"
    G.nodes["h5"]["ip"] = "10.0.0.3"  # a foreign host inside t0's block: no aggregate for t0
    assert "t0" not in aggregates(G)


def test_aggregated_routes_deliver_before_and_after_failures(ft):
    brain = RoutingBrain(ft, aggregate=True)
    brain.compute_all()
    tables = brain.tables()
    assert len(tables["cr0"]) == 8 and all(not p.endswith("/32") for p in tables["cr0"])
    assert sorted(p for p in tables["t0"] if p.endswith("/32")) == ["10.0.0.2/32", "10.0.0.3/32"]
    assert len(tables["t0"]) == 7 + 2
    assert not any(r.last_hop for r in tables["a0"].values())
    assert check_all_pairs(ft, tables) == []
    assert len(walk(ft, tables, "h0", "h15").paths) == 4
    rng = random.Random(3)
    switch_links = [(a, b) for a, b in ft.edges if ft.nodes[a]["role"] != "host" and ft.nodes[b]["role"] != "host"]
    for step in range(15):
        a, b = rng.choice(switch_links)
        (brain.link_down if brain.is_link_up(a, b) else brain.link_up)(a, b, now=step)
        fresh = RoutingBrain(ft, down_links=set(brain.down_links), aggregate=True)
        fresh.compute_all()
        assert fresh.routes == brain.routes
    brain2 = RoutingBrain(ft, aggregate=True)
    brain2.compute_all()
    brain2.link_down("a0", "cr0", now=1)
    down = frozenset({frozenset(("a0", "cr0"))})
    assert check_all_pairs(ft, brain2.tables(), down_links=down) == []
