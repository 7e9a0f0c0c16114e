"""A switch that disconnects (crash, or its controller connection cut) is routed around, and rejoins.

The controller's messages are applied to the fake OpenFlow pipeline; a dead switch is an empty table (its
bridge, and so its flows, are gone). The expectation is networkx's shortest paths on the fabric without
that switch, computed independently of the routing brain.
"""

from __future__ import annotations

import networkx as nx
import pytest
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from controllers.core import ControllerCore
from testbed.topo.graph import hosts
from tests.unit.fakeoftable import FakeFabric, FakeOFTable
from tests.unit.test_controller_core import FakeDP
from tests.unit.test_routing_brain import fat_tree


def _programmed():
    G = fat_tree(4)
    core = ControllerCore(G, started=0.0)
    fabric = FakeFabric(G)
    dps = {}
    for dpid, sw in core.by_dpid.items():
        dps[sw] = FakeDP(dpid)
        fabric.apply_all(core.join(dpid, dps[sw], 0.0))
    return G, core, fabric, dps


def _descs(G, sw):
    """The port-description reply of switch ``sw``: every port up."""
    return [parser.OFPPort(port_no=d["ports"][sw], hw_addr="02:00:00:00:00:01", name=f"{sw}-eth{d['ports'][sw]}".encode(),
                           config=0, state=ofp.OFPPS_LIVE, curr=0, advertised=0, supported=0, peer=0, curr_speed=0,
                           max_speed=0) for _, _, d in G.edges(sw, data=True)]


def _expected(G, src, dst, dead=()):
    H = G.copy()
    H.remove_nodes_from(dead)
    try:
        return {tuple(p) for p in nx.all_shortest_paths(H, src, dst)}
    except nx.NetworkXNoPath:
        return set()


def _check_all(G, fabric, dead=()):
    hs = [h for h in hosts(G) if not any(G.has_edge(h, d) for d in dead)]
    for src in hs[::3]:
        for dst in hs:
            if src != dst:
                got = {p for p, _ in fabric.deliveries(src, G.nodes[dst]["ip"])}
                assert got == _expected(G, src, dst, dead), (src, dst, dead)


@pytest.mark.parametrize("dead", ["cr0", "a2"])
def test_a_disconnected_switch_is_routed_around_and_rejoins(dead):
    G, core, fabric, dps = _programmed()
    fabric.tables[dead] = FakeOFTable()  # the switch crashed: its tables are gone
    # before the controller hears of it, traffic into it is lost
    assert any(p[-1] == "DROP" for s in hosts(G) for d in hosts(G) if s != d
               for p, _ in fabric.deliveries(s, G.nodes[d]["ip"]))
    pairs = core.disconnect(G.nodes[dead]["dpid"], 5.0, dps[dead])
    assert pairs and all(sw != dead for sw, _ in pairs)  # nothing is sent to the dead switch
    fabric.apply_all(pairs)
    _check_all(G, fabric, dead=[dead])
    ev = core.failovers[-1]
    assert (ev.kind, ev.link, ev.cause) == ("switch_down", (dead,), "datapath-disconnect")
    assert core.health_doc(6.0)["down_switches"] == [dead] and not core.health_doc(6.0)["ready"]
    # it comes back with empty tables (a restarted bridge) and reconnects
    dps[dead] = FakeDP(G.nodes[dead]["dpid"])
    back = core.join(G.nodes[dead]["dpid"], dps[dead], 9.0)
    assert back and all(sw == dead for sw, _ in back)  # only its own tables: nobody sends into it yet
    assert type(back[-1][1]).__name__ == "OFPPortDescStatsRequest"  # answered once those are in
    fabric.apply_all(back)
    _check_all(G, fabric, dead=[dead])  # still routed around
    # its port-description reply (in order, after its tables): now the others spread traffic over it
    ready = core.port_desc(G.nodes[dead]["dpid"], _descs(G, dead), 9.5)
    assert any(sw != dead for sw, _ in ready)
    fabric.apply_all(ready)
    _check_all(G, fabric)
    assert core.failovers[-1].kind == "switch_up" and core.health_doc(10.0)["down_switches"] == []


def test_a_stale_connection_ending_after_a_reconnect_changes_nothing():
    G, core, fabric, dps = _programmed()
    old, dpid = dps["cr1"], G.nodes["cr1"]["dpid"]
    fabric.apply_all(core.join(dpid, FakeDP(dpid), 1.0))  # same dpid, new connection (OVS reconnected)
    assert core.disconnect(dpid, 2.0, old) == []
    assert core.health_doc(2.0)["down_switches"] == [] and core.health_doc(2.0)["ready"]
    _check_all(G, fabric)


def test_a_dead_tor_makes_its_hosts_unreachable_without_loops():
    G, core, fabric, dps = _programmed()
    fabric.tables["t0"] = FakeOFTable()
    fabric.apply_all(core.disconnect(G.nodes["t0"]["dpid"], 1.0, dps["t0"]))
    under = [h for h in hosts(G) if G.has_edge(h, "t0")]
    for dst in under:  # dropped at the first switch (no route), never looping through the fabric
        for p, _ in fabric.deliveries("h15", G.nodes[dst]["ip"]):
            assert p[-1] == "DROP" and len(p) == 3
    _check_all(G, fabric, dead=["t0"])


def test_another_event_before_the_rejoin_is_ready_sends_the_held_messages_first():
    G, core, fabric, dps = _programmed()
    fabric.tables["cr2"] = FakeOFTable()
    fabric.apply_all(core.disconnect(G.nodes["cr2"]["dpid"], 1.0, dps["cr2"]))
    fabric.apply_all(core.join(G.nodes["cr2"]["dpid"], FakeDP(G.nodes["cr2"]["dpid"]), 2.0))
    # a link fails before cr2's port-description reply: held messages, then the reroute, all consistent
    fabric.down.add(frozenset(("a0", "cr0")))
    pairs = core.port_status(G.nodes["a0"]["dpid"], G.edges["a0", "cr0"]["ports"]["a0"], "a0-eth3",
                             "02:00:00:00:00:02", 0, ofp.OFPPS_LINK_DOWN, 3.0)
    fabric.apply_all(pairs)  # the fake table raises on a duplicate or missing group
    assert core.pending_join == {}
    for src in hosts(G)[::5]:
        for dst in hosts(G):
            if src != dst:
                H = G.copy()
                H.remove_edge("a0", "cr0")
                want = {tuple(p) for p in nx.all_shortest_paths(H, src, dst)}
                assert {p for p, _ in fabric.deliveries(src, G.nodes[dst]["ip"])} == want
