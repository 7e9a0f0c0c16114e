"""The controller core driven like the os-ken app drives it, with offline datapaths and a fake clock."""

from __future__ import annotations

import random

import pytest
from os_ken.lib.packet import arp, ethernet, packet
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from controllers import ofrules
from controllers.core import ControllerCore
from tests.unit.test_routing_brain import fat_tree


class FakeDP:
    """Enough of an os-ken Datapath for building messages."""

    def __init__(self, dpid):
        self.id = dpid
        self.ofproto = ofp
        self.ofproto_parser = parser


@pytest.fixture
def core():
    G = fat_tree(4)
    c = ControllerCore(G, started=100.0)
    for dpid in c.by_dpid:
        c.connect(dpid, FakeDP(dpid))
    return c


def _port_of(core, a, b):
    return core.G.edges[a, b]["ports"][a]


def _dpid(core, s):
    return core.G.nodes[s]["dpid"]


def test_connect_programs_routes_and_asks_for_ports():
    G = fat_tree(4)
    c = ControllerCore(G)
    msgs = c.connect(G.nodes["t0"]["dpid"], FakeDP(G.nodes["t0"]["dpid"]))
    assert type(msgs[-1]).__name__ == "OFPPortDescStatsRequest"
    flows = [m for m in msgs if type(m).__name__ == "OFPFlowMod" and m.table_id == 0 and "ipv4_dst" in m.match]
    assert len(flows) == 16  # one route per host
    assert c.health_doc(1.0)["switches_connected"] == 1 and not c.health_doc(1.0)["ready"]


def test_unknown_datapath_is_recorded_not_programmed(core):
    assert core.connect(0xDEAD, FakeDP(0xDEAD)) == []
    assert core.packet_in(0xDEAD, 1, b"junk") == []
    assert list(core.port_status(0xDEAD, 1, "x", "00:00:00:00:00:01", 0, ofp.OFPPS_LINK_DOWN, 1.0)) == []
    assert core.health_doc(2.0)["unknown_datapaths"] == [0xDEAD]


def test_port_down_reroutes_and_logs_a_failover_event(core):
    a0, cr0 = _dpid(core, "a0"), _dpid(core, "cr0")
    pairs = list(core.port_status(a0, _port_of(core, "a0", "cr0"), "a0-eth3", "00:00:00:00:00:01",
                                  ofp.OFPPC_PORT_DOWN, ofp.OFPPS_LINK_DOWN, 105.0))
    assert pairs and pairs[0][0] == "a0"
    ev = core.failovers[-1]
    assert (ev.kind, set(ev.link), ev.time, ev.cause) == ("link_down", {"a0", "cr0"}, 105.0, "port-status")
    # the other end reporting the same link adds nothing
    assert list(core.port_status(cr0, _port_of(core, "cr0", "a0"), "cr0-eth1", "00:00:00:00:00:02", 0,
                                 ofp.OFPPS_LINK_DOWN, 105.01)) == []
    doc = core.paths_doc("h0", "h15")
    assert doc["ok"] and doc["equal_cost"] == 3
    assert all({p[i], p[i + 1]} != {"a0", "cr0"} for p in doc["paths"] for i in range(len(p) - 1))
    # the link returns only when both ends are up
    assert list(core.port_status(a0, _port_of(core, "a0", "cr0"), "a0-eth3", "00:00:00:00:00:01", 0, 0,
                                 106.0)) == []
    back = list(core.port_status(cr0, _port_of(core, "cr0", "a0"), "cr0-eth1", "00:00:00:00:00:02", 0, 0,
                                 106.5))
    assert back and core.failovers[-1].kind == "link_up"
    assert core.paths_doc("h0", "h15")["equal_cost"] == 4
    events = core.events_doc()
    assert [e["kind"] for e in events["failovers"]] == ["link_down", "link_up"]


def test_port_desc_learns_names_and_sends_lldp(core):
    t0 = _dpid(core, "t0")
    descs = [parser.OFPPort(port_no=p, hw_addr="00:00:00:00:00:0%d" % p, name=f"t0-eth{p}".encode(), config=0,
                            state=0, curr=0, advertised=0, supported=0, peer=0, curr_speed=0, max_speed=0)
             for p in (1, 2, 3, 4)] + [parser.OFPPort(port_no=ofp.OFPP_LOCAL, hw_addr="00:00:00:00:00:09",
                                                      name=b"t0", config=0, state=0, curr=0, advertised=0,
                                                      supported=0, peer=0, curr_speed=0, max_speed=0)]
    pairs = core.port_desc(t0, descs, 101.0)
    assert len(pairs) == 4 and all(type(m).__name__ == "OFPPacketOut" for _, m in pairs)
    assert core.topology_doc()["port_names"]["t0:3"] == "t0-eth3"


def test_lldp_cross_check_reports_mismatches(core):
    t0, a0, a1 = _dpid(core, "t0"), _dpid(core, "a0"), _dpid(core, "a1")
    # as wired: a0's port facing t0 receives t0's probe from t0's port facing a0
    frame = ofrules.lldp_frame(t0, _port_of(core, "t0", "a0"))
    assert core.packet_in(a0, _port_of(core, "a0", "t0"), frame) == []
    assert core.mismatches == []
    # miswired: the same probe arrives on a1
    core.packet_in(a1, _port_of(core, "a1", "t0"), frame)
    assert core.mismatches == [{"switch": "a1", "port": _port_of(core, "a1", "t0"),
                                "expected": f"t0:{_port_of(core, 't0', 'a1')}",
                                "seen": f"t0:{_port_of(core, 't0', 'a0')}"}]
    links = {(x["a"], x["b"]): x["lldp_seen"] for x in core.topology_doc()["links"]}
    assert links.get(("t0", "a0"), links.get(("a0", "t0"))) is True


def test_arp_is_answered_from_the_address_plan(core):
    t0 = _dpid(core, "t0")
    p = packet.Packet()
    p.add_protocol(ethernet.ethernet(dst="ff:ff:ff:ff:ff:ff", src=core.G.nodes["h0"]["mac"], ethertype=0x0806))
    p.add_protocol(arp.arp(opcode=arp.ARP_REQUEST, src_mac=core.G.nodes["h0"]["mac"],
                           src_ip=core.G.nodes["h0"]["ip"], dst_ip=core.G.nodes["h15"]["ip"]))
    p.serialize()
    ((sw, out),) = core.packet_in(t0, 1, bytes(p.data))
    assert sw == "t0" and out.actions[0].port == 1
    reply = packet.Packet(out.data).get_protocol(arp.arp)
    assert reply.src_mac == core.G.nodes["h15"]["mac"]
    assert core.stats["arp_replies"] == 1


def test_fuzzed_packet_ins_never_raise(core):
    rng = random.Random(4)
    t0 = _dpid(core, "t0")
    base = ofrules.lldp_frame(1, 1)
    for n in range(300):
        if n % 3 == 0:
            data = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 80)))
        else:  # truncated or bit-flipped LLDP / ARP-typed frames
            data = bytearray(base[:rng.randrange(len(base))])
            if data:
                data[rng.randrange(len(data))] ^= 0xFF
            if n % 3 == 2 and len(data) > 14:
                data[12:14] = b"\x08\x06"
            data = bytes(data)
        core.packet_in(t0, rng.randrange(1, 5), data)
    assert core.stats["packet_ins"] == 300
    assert core.health_doc(200.0)["status"] == "ok"


def test_admin_link_and_switch_become_port_mods(core):
    pairs = core.admin_link("a0", "cr0", down=True)
    assert {s for s, _ in pairs} == {"a0", "cr0"}
    assert all(m.config == ofp.OFPPC_PORT_DOWN and m.mask == ofp.OFPPC_PORT_DOWN for _, m in pairs)
    up = core.admin_link("t0", "h0", down=False)
    assert [(s, m.port_no, m.config) for s, m in up] == [("t0", _port_of(core, "t0", "h0"), 0)]
    assert len(core.admin_switch("cr0", down=True)) == 2 * 4
    with pytest.raises(KeyError, match="no link"):
        core.admin_link("h0", "cr0", True)
    with pytest.raises(KeyError, match="not a switch"):
        core.admin_switch("h0", True)


def test_mode_switch_replaces_groups(core):
    pairs = core.set_mode("fast-failover")
    groups = [m for _, m in pairs if type(m).__name__ == "OFPGroupMod" and m.command == ofp.OFPGC_ADD]
    assert groups and all(m.type == ofp.OFPGT_FF for m in groups)
    assert core.set_mode("fast-failover") == []
    with pytest.raises(KeyError, match="mode"):
        core.set_mode("psychic")


def test_port_counters_and_docs(core):
    stat = parser.OFPPortStats(port_no=3, rx_packets=1, tx_packets=2, rx_bytes=100, tx_bytes=200,
                               rx_dropped=0, tx_dropped=0, rx_errors=0, tx_errors=0, rx_frame_err=0,
                               rx_over_err=0, rx_crc_err=0, collisions=0, duration_sec=0, duration_nsec=0)
    core.port_stats(_dpid(core, "a0"), [stat], 110.0)
    doc = core.ports_doc()
    assert doc["a0"]["3"]["tx_bytes"] == 200 and doc["a0"]["3"]["neighbour"] == "cr0"
    assert len(core.routes_doc("t0")) == 16
    with pytest.raises(KeyError):
        core.paths_doc("h0", "cr0")


def test_aggregated_controller_installs_prefix_routes():
    G = fat_tree(4)
    c = ControllerCore(G, aggregate=True)
    dpid = G.nodes["a0"]["dpid"]
    msgs = c.connect(dpid, FakeDP(dpid))
    t0 = [m for m in msgs if type(m).__name__ == "OFPFlowMod" and m.table_id == 0 and "ipv4_dst" in m.match]
    assert len(t0) == 8  # one per ToR block instead of one per host
    masked = [m for m in t0 if isinstance(m.match["ipv4_dst"], tuple)]
    assert len(masked) == 8 and all(m.priority == ofrules.PRIO_ROUTE + 31 for m in masked)
    for m in msgs:
        m.serialize()
    assert c.paths_doc("h0", "h15")["equal_cost"] == 4


def test_a_port_that_stops_being_live_with_carrier_up_is_a_link_down(core):
    """OVS clears OFPPS_LIVE when a port's BFD session goes down while carrier stays up."""
    a0, cr0 = _dpid(core, "a0"), _dpid(core, "cr0")
    pa, pc = _port_of(core, "a0", "cr0"), _port_of(core, "cr0", "a0")
    live = ofp.OFPPS_LIVE
    assert list(core.port_status(a0, pa, "a0-eth3", "00:00:00:00:00:01", 0, live, 1.0)) == []
    assert list(core.port_status(cr0, pc, "cr0-eth1", "00:00:00:00:00:02", 0, live, 1.0)) == []
    pairs = list(core.port_status(a0, pa, "a0-eth3", "00:00:00:00:00:01", 0, 0, 2.0))  # carrier up, not live
    assert pairs and core.failovers[-1].kind == "link_down"
    assert core.paths_doc("h0", "h15")["equal_cost"] == 3
    assert list(core.port_status(a0, pa, "a0-eth3", "00:00:00:00:00:01", 0, live, 3.0))
    assert core.failovers[-1].kind == "link_up" and core.paths_doc("h0", "h15")["equal_cost"] == 4
    # a switch that never reports LIVE is judged by carrier alone
    t0 = _dpid(core, "t0")
    assert list(core.port_status(t0, _port_of(core, "t0", "a0"), "t0-eth3", "00:00:00:00:00:03", 0, 0, 4.0)) == []


# -- gray failure from counters ----------------------------------------------------------------------------
class _Stat:
    def __init__(self, port_no, tx, rx):
        self.port_no, self.tx_packets, self.rx_packets = port_no, tx, rx
        self.tx_bytes = self.rx_bytes = self.tx_dropped = self.rx_dropped = 0


def _feed(c, t, sent, lost):
    """Counters of every switch port at time ``t``: ``sent`` packets each way on every link so far, and
    a0 -> cr0 lost ``lost`` of its ``sent``."""
    per_switch: dict = {}
    for a, b, d in c.G.edges(data=True):
        for x, y in ((a, b), (b, a)):
            if x not in c.dps:
                continue
            rx = sent - (lost if (y, x) == ("a0", "cr0") else 0)
            per_switch.setdefault(x, []).append(_Stat(d["ports"][x], sent, rx))
    for sw, body in per_switch.items():
        c.port_stats(_dpid(c, sw), body, t)
    return list(c.gray_check(t))


def test_a_lossy_link_is_routed_around_then_given_back_after_the_hold():
    from testbed.routing.gray import GrayPolicy

    G = fat_tree(4)
    c = ControllerCore(G, started=100.0, gray=GrayPolicy(window_s=0.3, hold_s=1.0))
    for dpid in c.by_dpid:
        c.connect(dpid, FakeDP(dpid))
    t, sent, lost, msgs = 100.0, 0, 0, []
    while t < 101.0 and not msgs:
        t, sent, lost = t + 0.1, sent + 100, lost + 10    # 1000 pps, 10 % lost a0 -> cr0
        msgs = _feed(c, t, sent, lost)
    ev = c.failovers[-1]
    assert msgs and (ev.kind, ev.cause, ev.link) == ("link_down", "gray-loss", ("a0", "cr0"))
    assert 0.08 < ev.detail["loss"] < 0.12 and t - 100.0 <= 0.6
    assert not c.brain.is_link_up("a0", "cr0") and c.paths_doc("h0", "h15")["equal_cost"] == 3
    # a port-status saying the port is fine does not bring a gray link back early
    assert list(c.port_status(_dpid(c, "a0"), _port_of(c, "a0", "cr0"), "a0-eth3", "00:00:00:00:00:01", 0,
                              ofp.OFPPS_LIVE, t + 0.05)) == []
    assert not c.brain.is_link_up("a0", "cr0")
    # routed around: the link carries nothing now; after the hold it is given back
    while t < 102.5 and c.failovers[-1].kind != "link_up":
        t += 0.1
        _feed(c, t, sent, lost)
    assert (c.failovers[-1].kind, c.failovers[-1].cause) == ("link_up", "gray-release")
    assert c.brain.is_link_up("a0", "cr0") and c.paths_doc("h0", "h15")["equal_cost"] == 4


def test_gray_detection_is_off_unless_asked(core):
    assert _feed(core, 101.0, 1000, 500) == [] and _feed(core, 101.5, 2000, 1000) == []
    assert core.failovers == []
