"""The controller's emitted OpenFlow, applied to a fake pipeline, delivers every packet along exactly the
equal-cost shortest paths networkx finds (an expectation computed without the routing brain), rewrites the
last hop's MAC, survives a cut link after the controller's reroute, and (fast-failover) before it."""

from __future__ import annotations

import networkx as nx
import pytest
from os_ken.ofproto import ofproto_v1_3 as ofp

from controllers.core import ControllerCore
from testbed.topo.graph import hosts
from tests.unit.fakeoftable import FakeFabric, OpenFlowError
from tests.unit.test_controller_core import FakeDP
from tests.unit.test_routing_brain import fat_tree


def _programmed(mode="controller", aggregate=False, ecmp="multipath"):
    G = fat_tree(4)
    core = ControllerCore(G, mode=mode, aggregate=aggregate, started=0.0, ecmp=ecmp)
    fabric = FakeFabric(G)
    for dpid, sw in core.by_dpid.items():
        for msg in core.connect(dpid, FakeDP(dpid)):
            fabric.apply(sw, msg)
    return G, core, fabric


def _sources(G):
    """Every third host (each pod, both ToRs' hosts among them): all destinations from each."""
    return hosts(G)[::3]


def _expected(G, src, dst, down=()):
    H = G.copy()
    H.remove_edges_from(tuple(e) for e in down)
    return {tuple(p) for p in nx.all_shortest_paths(H, src, dst)}


def _cut(core, fabric, a, b, now=5.0, apply_reroute=True) -> int:
    fabric.down.add(frozenset((a, b)))
    n = 0
    for sw, nbr in ((a, b), (b, a)):
        pairs = core.port_status(core.G.nodes[sw]["dpid"], core.G.edges[sw, nbr]["ports"][sw], f"{sw}-x",
                                 "02:00:00:00:00:99", 0, ofp.OFPPS_LINK_DOWN, now)
        if apply_reroute:
            n += fabric.apply_all(pairs)
    return n


@pytest.mark.parametrize("ecmp", ["multipath", "select"])
@pytest.mark.parametrize("aggregate", [False, True])
def test_every_pair_takes_exactly_the_equal_cost_shortest_paths(aggregate, ecmp):
    G, _, fabric = _programmed(aggregate=aggregate, ecmp=ecmp)
    hs = hosts(G)
    for src in _sources(G):
        for dst in hs:
            if src == dst:
                continue
            got = fabric.deliveries(src, G.nodes[dst]["ip"])
            assert {p for p, _ in got} == _expected(G, src, dst), (src, dst)
            assert {mac for _, mac in got} == {G.nodes[dst]["mac"]}


@pytest.mark.parametrize("ecmp", ["multipath", "select"])
def test_cut_link_rerouted_by_the_controller_avoids_it(ecmp):
    G, core, fabric = _programmed(ecmp=ecmp)
    assert _cut(core, fabric, "a0", "cr0") > 0
    hs = hosts(G)
    for src in _sources(G):
        for dst in hs:
            if src != dst:
                got = {p for p, _ in fabric.deliveries(src, G.nodes[dst]["ip"])}
                assert got == _expected(G, src, dst, down=[("a0", "cr0")]), (src, dst)


def _lost(G, fabric):
    return {(s, d): got for s in _sources(G) for d in hosts(G) if s != d
            for got in [fabric.deliveries(s, G.nodes[d]["ip"])] if any(p[-1] == "DROP" for p, _ in got)}


@pytest.mark.parametrize("ecmp", ["multipath", "select"])
def test_before_the_reroute_controller_mode_drops_and_fast_failover_repairs_locally(ecmp):
    # controller mode: INDIRECT groups keep sending into the dead link until the controller acts
    G, core, fabric = _programmed("controller", ecmp=ecmp)
    _cut(core, fabric, "a0", "cr0", apply_reroute=False)
    lost_indirect = _lost(G, fabric)
    assert lost_indirect  # the outage the failover benchmark measures
    # fast-failover: with no controller message, a0 moves its share onto its other uplinks (watch ports);
    # only cr0, which has no other way down into pod 0, still drops (until the controller reroutes above it)
    G, core, fabric = _programmed("fast-failover", ecmp=ecmp)
    _cut(core, fabric, "a0", "cr0", apply_reroute=False)
    lost_ff = _lost(G, fabric)
    assert len(lost_ff) < len(lost_indirect)
    pod0 = {h for h in hosts(G) if G.nodes[h].get("pod") == G.nodes["a0"].get("pod")}
    assert pod0 and not any(s in pod0 for s, _ in lost_ff)  # traffic leaving a0 is repaired locally
    for got in lost_ff.values():
        assert {p[-2] for p, _ in got if p[-1] == "DROP"} == {"cr0"}


def test_the_fake_table_rejects_what_a_switch_would():
    G, core, fabric = _programmed()
    sw = "t0"
    dpid = G.nodes[sw]["dpid"]
    route = next(m for m in core.connect(dpid, FakeDP(dpid)) if type(m).__name__ == "OFPGroupMod"
                 and m.command == ofp.OFPGC_ADD)
    with pytest.raises(OpenFlowError, match="added twice"):
        fabric.apply(sw, route)  # connect() replays routes without its clean-slate delete: a switch refuses


def test_switching_the_ecmp_method_live_replaces_every_route_cleanly():
    G, core, fabric = _programmed(ecmp="multipath")
    for ecmp in ("select", "multipath", "select"):
        fabric.apply_all(core.set_ecmp(ecmp))  # the fake table refuses a duplicate or dangling group
        for src in _sources(G)[:2]:
            for dst in hosts(G):
                if src != dst:
                    assert {p for p, _ in fabric.deliveries(src, G.nodes[dst]["ip"])} == _expected(G, src, dst)
    kinds = {type(m).__name__ for _, m in core.set_ecmp("multipath")}
    assert kinds == {"OFPGroupMod", "OFPFlowMod"}
    with pytest.raises(KeyError, match="ecmp must be one of"):
        core.set_ecmp("random")
    # select mode uses no table 1 and no Nicira action: any OpenFlow 1.3 switch can run it
    core.set_ecmp("select")
    dpid = G.nodes["a0"]["dpid"]
    msgs = core.connect(dpid, FakeDP(dpid))
    assert not any(getattr(m, "table_id", 0) == 1 for m in msgs)
    assert not any(type(a).__name__.startswith("NX") for m in msgs for i in getattr(m, "instructions", [])
                   for a in getattr(i, "actions", []))
    assert any(type(m).__name__ == "OFPGroupMod" and m.type == ofp.OFPGT_SELECT for m in msgs)
