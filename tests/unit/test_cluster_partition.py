"""The partitioner and the per-worker part plans (pure): optimality against brute force on small fabrics,
balance, hosts never split from their switch, VNIs, and that the parts plus the tunnels rebuild exactly
the whole plan (every link once, every direction's emulation once)."""

from __future__ import annotations

import itertools
from dataclasses import replace

import networkx as nx
import pytest

from testbed.cluster import checks
from testbed.cluster.partition import DEFAULT_IMBALANCE, node_loads, partition, partition_from_json
from testbed.cluster.parts import (
    PartLayout,
    capabilities_from_json,
    capabilities_json,
    check_cut,
    meet,
    part_plan,
    plan_digest,
    tunnel_argv,
)
from testbed.errors import SpecError
from testbed.plan import ASSUMED, Capabilities, Overrides, plan_replica
from testbed.plan.alloc import VNI_BASE
from testbed.topo.spec import build_graph, load_spec, parse_spec, resolve_spec
from testbed.topo.workers import parse_cluster, parse_workers


def graph(name):
    return build_graph(load_spec(resolve_spec(name)))


def switch_cut(G, assign):
    return sum(d["rate_bps"] for u, v, d in G.edges(data=True) if assign[u] != assign[v])


def brute_force_min_cut(G, imbalance):
    """The smallest cut capacity over every 2-way split of the switches that the partitioner may choose
    (hosts with their switch; load within the same window as ``_bisect``'s)."""
    loads = node_loads(G)
    switches = [n for n, d in G.nodes(data=True) if d["role"] != "host"]
    owner = {h: next(iter(G.neighbors(h))) for h, d in G.nodes(data=True) if d["role"] == "host"}
    weight = {s: loads[s] for s in switches}
    total = sum(weight.values())
    slack = imbalance * 0.5 * total
    best = None
    first, rest = switches[0], switches[1:]
    for bits in itertools.product((0, 1), repeat=len(rest)):
        side = {first: 0, **dict(zip(rest, bits, strict=True))}
        a = sum(weight[s] for s in switches if side[s] == 0)
        if abs(a - total / 2) > slack or all(side.values()) or not any(side.values()):
            continue
        assign = {**side, **{h: side[s] for h, s in owner.items()}}
        cut = switch_cut(G, assign)
        best = cut if best is None or cut < best else best
    return best


@pytest.mark.parametrize("name", ["spine-leaf", "rail-optimized"])
def test_two_way_cut_is_the_brute_force_optimum(name):
    G = graph(name)
    part = partition(G, 2)
    assert part.cut_capacity_bps == brute_force_min_cut(G, DEFAULT_IMBALANCE)


def test_fat_tree_cut_is_its_bisection():
    # A k-ary fat-tree's bisection is k^3/8 links (Al-Fares et al.): no balanced split cuts fewer.
    for k, name in ((4, "fat-tree-k4"), (8, "fat-tree-k8")):
        G = graph(name)
        part = partition(G, 2)
        assert len(part.cut) == k ** 3 // 8
        assert part.load_spread() <= 1 + DEFAULT_IMBALANCE


@pytest.mark.parametrize("name,n", [("fat-tree-k8", 4), ("fat-tree-k8", 3), ("dragonfly-a4-p2-h2", 3),
                                    ("torus-2d", 2), ("slim-fly-q5", 5)])
def test_parts_are_balanced_complete_and_hosts_stay_with_their_switch(name, n):
    G = graph(name)
    part = partition(G, n)
    assert set(part.assign) == set(G.nodes) and set(part.assign.values()) == set(range(n))
    for h, d in G.nodes(data=True):
        if d["role"] == "host":
            assert part.assign[h] == part.assign[next(iter(G.neighbors(h)))]
    assert part.load_spread() <= 1 + 2 * DEFAULT_IMBALANCE     # recursive bisection compounds per level
    loads = node_loads(G)
    assert part.loads == tuple(sum(loads[x] for x in part.nodes(w)) for w in range(n))
    # the cut is exactly the links between parts, each with its own VNI from the allocator's base
    expected = [(u, v) for u, v in G.edges() if part.assign[u] != part.assign[v]]
    assert [(c.u, c.v) for c in part.cut] == expected
    assert [c.vni for c in part.cut] == list(range(VNI_BASE, VNI_BASE + len(expected)))
    assert part.cut_capacity_bps == switch_cut(G, part.assign)


def test_partition_is_deterministic_and_travels_as_json():
    G = graph("fat-tree-k8")
    a, b = partition(G, 4), partition(graph("fat-tree-k8"), 4)
    assert a == b
    assert partition_from_json(a.to_json(), G) == a
    doc = a.to_json()
    doc["parts"][0]["nodes"].remove("t0")
    with pytest.raises(SpecError, match="job.partition"):
        partition_from_json(doc, G)


def test_a_load_skewed_fabric_balances_load_not_switch_count():
    # spine-leaf where leaf l0 carries 8x the hosts: the part holding it must hold fewer switches.
    G = nx.Graph(name="skew")
    for s in ("s0", "s1"):
        G.add_node(s, role="spine")
    for i in range(6):
        G.add_node(f"l{i}", role="leaf")
        for s in ("s0", "s1"):
            G.add_edge(f"l{i}", s, rate_bps=1e9)
        for j in range(16 if i == 0 else 2):
            G.add_node(f"h{i}_{j}", role="host")
            G.add_edge(f"h{i}_{j}", f"l{i}", rate_bps=1e9)
    part = partition(G, 2)
    heavy = part.assign["l0"]
    switches = [sum(1 for x in part.nodes(w) if G.nodes[x]["role"] != "host") for w in (0, 1)]
    assert switches[heavy] < switches[1 - heavy]
    assert part.load_spread() <= 1 + DEFAULT_IMBALANCE


def test_worker_counts_out_of_range_are_refused_by_field():
    G = graph("fat-tree-k4")
    for n in (0, -1, True, 21):
        with pytest.raises(SpecError) as err:
            partition(G, n, field="--workers")
        assert err.value.field == "--workers"
    single = partition(G, 1)
    assert single.cut == () and set(single.assign.values()) == {0}


# -- part plans ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def k4():
    G = graph("fat-tree-k4")
    plan = plan_replica(G, ASSUMED, Overrides(links="rates", static_arp=False))
    return G, plan, partition(G, 2)


def test_parts_and_tunnels_rebuild_the_whole_plan(k4):
    G, plan, part = k4
    parts = [part_plan(plan, part, w) for w in range(2)]
    inner = [(e.u, e.v) for p in parts for e in p.plan.links]
    cut = [(c.u, c.v) for c in part.cut]
    assert sorted(inner + cut) == sorted((e.u, e.v) for e in plan.links)
    assert len(set(inner)) == len(inner)
    hosts = [h.node for p in parts for h in p.plan.layout.hosts]
    assert sorted(hosts) == sorted(h.node for h in plan.layout.hosts)
    intfs = [set(p.plan.layout.interfaces()) | {t.intf for t in p.tunnels} for p in parts]
    assert not intfs[0] & intfs[1]
    assert intfs[0] | intfs[1] == set(plan.layout.interfaces())
    by_vni = {}
    for p in parts:
        for t in p.tunnels:
            by_vni.setdefault(t.vni, []).append((p.worker, t))
    assert sorted(by_vni) == [c.vni for c in part.cut]
    for c in part.cut:
        (wa, a), (wb, b) = by_vni[c.vni]
        assert {wa, wb} == {0, 1} and a.peer == b.node and b.peer == a.node
        e = plan.link(c.u, c.v)
        assert {a.intf, b.intf} == {e.intf_u, e.intf_v}
        assert {(a.node, a.port), (b.node, b.port)} == {(e.u, e.port_u), (e.v, e.port_v)}
        # each direction emulated once, at its sender: the two ends' tc together are the plan's
        assert sorted([(a.node, a.tc), (b.node, b.tc)]) == sorted(e.tc)
        assert all(argv[argv.index("dev") + 1] == t.intf for t in (a, b) for argv in t.tc)


def test_part_layout_keeps_every_host_as_a_neighbour(k4):
    G, plan, part = k4
    pp = part_plan(plan, part, 0)
    assert isinstance(pp.plan.layout, PartLayout)
    h = pp.plan.layout.hosts[0]
    batch = pp.plan.layout.host_batch(h, "h0-eth1", with_arp=True)
    remote = [x for x in plan.layout.hosts if part.assign[x.node] == 1]
    assert remote and all(f"neigh replace {x.ip} lladdr {x.mac}" in batch for x in remote)


def test_cut_links_no_tunnel_can_carry_are_refused(k4):
    G, _, part = k4
    delay_line = plan_replica(G, ASSUMED, Overrides(link_backend="userspace", static_arp=False))
    with pytest.raises(SpecError) as err:
        check_cut(delay_line, part)
    assert err.value.field == "cluster" and "userspace delay line" in str(err.value)
    netem = plan_replica(G, Capabilities(netem=True, red=True), Overrides(static_arp=False))
    check_cut(netem, part)   # netem across the cut is per end: allowed
    assert {e.backend for e in netem.links if part.assign[e.u] != part.assign[e.v]} == {"netem"}
    p4 = plan_replica(G, ASSUMED, Overrides(links="rates", p4_program="fabric", static_arp=False))
    with pytest.raises(SpecError, match="bmv2 switch"):
        check_cut(p4, part)


def test_tunnel_commands(k4):
    G, plan, part = k4
    t = part_plan(plan, part, 1).tunnels[0]
    argv = tunnel_argv(t, "10.99.0.2", "10.99.0.1", 1500)
    assert argv[0][:5] == ["ip", "link", "add", t.intf, "type"]
    assert argv[0][argv[0].index("id") + 1] == str(t.vni) and argv[0][argv[0].index("remote") + 1] == "10.99.0.1"
    assert argv[3][:5] == ["ovs-vsctl", "--timeout=10", "add-port", t.bridge, t.intf]
    assert f"ofport_request={t.port}" in argv[3]
    assert argv[4:] == [list(a) for a in t.tc]
    with pytest.raises(SpecError, match="underlay"):
        tunnel_argv(t, "h1.example", "10.99.0.1", 1500)


def test_plan_digest_and_capabilities_travel(k4):
    G, plan, _ = k4
    again = plan_replica(graph("fat-tree-k4"), ASSUMED, Overrides(links="rates", static_arp=False))
    assert plan_digest(again) == plan_digest(plan)
    other = plan_replica(G, ASSUMED, Overrides(links="rates", static_arp=False, scale=2000))
    assert plan_digest(other) != plan_digest(plan)
    caps = Capabilities(netem=True, red=False, ovs_kernel=True, tcp_ports_in_use=frozenset({22, 9090}),
                        source="doctor")
    assert capabilities_from_json(capabilities_json(caps)) == caps
    both = meet([caps, replace(caps, netem=False, tcp_ports_in_use=frozenset({9091}))])
    assert (both.netem, both.ovs_kernel, both.tcp_ports_in_use) == (False, True, frozenset({22, 9090, 9091}))


# -- configuration ------------------------------------------------------------------------------------------
def test_workers_from_the_command_line():
    ws = parse_workers("root@10.1.0.1,admin@h2:2222", underlay="10.1.0.1,10.1.0.2")
    assert [(w.user, w.host, w.port, w.underlay) for w in ws] == [("root", "10.1.0.1", 22, "10.1.0.1"),
                                                                  ("admin", "h2", 2222, "10.1.0.2")]
    assert parse_workers("root@10.1.0.1")[0].underlay == "10.1.0.1"
    assert parse_workers("root@h1")[0].underlay is None
    for text, field in (("h1", "--workers[0]"), ("root@h1,root@h1", "--workers[1]"), ("root@h1:99999", "--workers[0]"),
                        ("", "--workers")):
        with pytest.raises(SpecError) as err:
            parse_workers(text)
        assert err.value.field == field
    with pytest.raises(SpecError) as err:
        parse_workers("root@h1,root@h2", underlay="10.0.0.1")
    assert err.value.field == "--underlay"


def test_cluster_block_of_a_spec():
    cfg = parse_cluster({"workers": ["root@10.1.0.1", {"ssh": "root@127.0.0.1:2202", "underlay": "10.99.0.2",
                                                        "python": "/opt/testbed-venv/bin/python"}],
                         "imbalance": 0.2})
    assert cfg.workers[1].port == 2202 and cfg.workers[1].underlay == "10.99.0.2" and cfg.imbalance == 0.2
    bad = [({"workers": [{"ssh": "root@h1", "password": "x"}]}, "cluster.workers[0].password"),
           ({"workers": ["root@h1"], "password": "x"}, "cluster.password"),
           ({"workers": ["root@h1", {"ssh": "root@h2", "colour": 1}]}, "cluster.workers[1].colour"),
           ({"workers": []}, "cluster.workers"),
           ({"workers": ["root@h1"], "imbalance": 2}, "cluster.imbalance"),
           ({"workers": [{"ssh": "root@h1", "underlay": "nowhere"}]}, "cluster.workers[0].underlay"),
           ({"workers": [{"ssh": "root@h1", "python": "venv/bin/python"}]}, "cluster.workers[0].python")]
    for raw, field in bad:
        with pytest.raises(SpecError) as err:
            parse_cluster(raw)
        assert err.value.field == field, raw
    doc = {"name": "x", "kind": "fat-tree", "params": {"k": 4}, "cluster": {"workers": ["root@10.1.0.1", "bob"]}}
    with pytest.raises(SpecError) as err:
        parse_spec(doc)
    assert err.value.field == "cluster.workers[1]"
    doc["cluster"]["workers"][1] = "root@10.1.0.2"
    assert len(parse_spec(doc).cluster.workers) == 2


# -- the checks' verdicts -----------------------------------------------------------------------------------
def test_iperf_verdict():
    good = checks.iperf_verdict(9.3e6, 10e6, 1500, 0.10)      # 1448/1514 of 10 Mbit/s = 9.56
    assert good["passed"] and 0.95 < good["ratio"] < 1.0
    assert not checks.iperf_verdict(8.0e6, 10e6, 1500, 0.10)["passed"]
    assert not checks.iperf_verdict(10.2e6, 10e6, 1500, 0.10)["passed"]   # above the shaper: leaking


def test_bottleneck_is_the_slowest_emulated_link(k4):
    G, plan, part = k4
    src, dst = checks.iperf_pair(type("C", (), {"partition": part, "plan": plan})())
    assert part.assign[src.node] == 0 and part.assign[dst.node] == 1
    assert checks.bottleneck_bps(plan, src.node, dst.node) == pytest.approx(100e6)   # 100G / scale 1000


def test_failover_helpers(k4):
    G, plan, part = k4
    paths = [["h0", "t0", "a0", "cr0", "a4", "t4", "h8"], ["h0", "t0", "a1", "cr2", "a5", "t4", "h8"]]
    edge = checks.cut_edge_on_paths(paths, part)
    assert edge is not None and part.assign[edge[0]] != part.assign[edge[1]]
    assert checks.cut_edge_on_paths([["h0", "t0", "a0", "t1", "h2"]], part) is None
    assert checks.ping_loss("20 packets transmitted, 19 received, 5% packet loss, time 3804ms") == 5.0
    assert checks.ping_loss("no summary") is None
