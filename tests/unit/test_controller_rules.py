"""OpenFlow rendering of routes, ARP replies and LLDP probes, serialised and parsed back offline."""

from __future__ import annotations

import pytest
from os_ken.lib.packet import arp, ethernet, packet
from os_ken.ofproto import ofproto_parser
from os_ken.ofproto import ofproto_v1_3 as ofp

from controllers import ofrules
from testbed.routing.brain import Route, RoutingBrain
from tests.unit.test_routing_brain import fat_tree


def _roundtrip(msg):
    """Serialise as the switch would receive it; the header must be OF1.3 and the length consistent."""
    msg.serialize()
    version, msg_type, msg_len, _xid = ofproto_parser.header(bytes(msg.buf))
    assert version == ofp.OFP_VERSION and msg_len == len(msg.buf)
    return msg_type


ECMP = Route("t0", "10.3.6.2/32", "h12", 13, (3, 4), ((3, 4), (4, 3)))
LAST = Route("t6", "10.3.6.2/32", "h12", 13, (1,), (), last_hop=True)
SINGLE_WITH_BACKUP = Route("s1", "10.0.0.2/32", "hB", 2, (2,), ((2, 1),))


def _kind(m):
    return type(m).__name__


def test_controller_mode_ecmp_multipath_and_indirect_members():
    dp = ofrules.proto()
    msgs, cleanup = ofrules.route_msgs(dp, ECMP, "controller", "02:00:00:00:00:0c", "add", basis=77)
    assert cleanup == []
    groups = [m for m in msgs if _kind(m) == "OFPGroupMod"]
    flows = [m for m in msgs if _kind(m) == "OFPFlowMod"]
    assert [g.group_id for g in groups] == [(13 << 8) | 3, (13 << 8) | 4]
    assert all(g.type == ofp.OFPGT_INDIRECT and len(g.buckets) == 1 for g in groups)
    assert [g.buckets[0].actions[-1].port for g in groups] == [3, 4]
    assert all(len(g.buckets[0].actions) == 1 for g in groups)  # no MAC rewrite before the last hop
    t1 = [f for f in flows if f.table_id == ofrules.TABLE_ECMP]
    assert [(f.match["reg0"], f.instructions[0].actions[0].group_id) for f in t1] == \
        [(0, (13 << 8) | 3), (1, (13 << 8) | 4)]
    (t0,) = [f for f in flows if f.table_id == 0]
    assert t0.match["ipv4_dst"] == "10.3.6.2"
    mp = t0.instructions[0].actions[0]
    assert mp.fields == ofrules.NX_HASH_FIELDS_SYMMETRIC_L3L4_UDP and mp.max_link == 1 and mp.basis == 77
    assert t0.instructions[1].table_id == ofrules.TABLE_ECMP
    # groups come before the flows that point at them
    assert msgs.index(groups[-1]) < msgs.index(t1[0]) < msgs.index(t0)
    for m in msgs:
        _roundtrip(m)


def test_fast_failover_members_fall_back_to_the_other_members():
    dp = ofrules.proto()
    groups = [m for m in ofrules.route_msgs(dp, ECMP, "fast-failover", None, "add")[0] if _kind(m) == "OFPGroupMod"]
    assert all(g.type == ofp.OFPGT_FF for g in groups)
    assert [[b.watch_port for b in g.buckets] for g in groups] == [[3, 4], [4, 3]]
    (ff, flow), _ = ofrules.route_msgs(dp, SINGLE_WITH_BACKUP, "fast-failover", None, "add")
    assert [b.watch_port for b in ff.buckets] == [2, 1]
    assert flow.instructions[0].actions[0].group_id == ff.group_id  # one port: no multipath
    (ind, _), _ = ofrules.route_msgs(dp, SINGLE_WITH_BACKUP, "controller", None, "add")
    assert ind.type == ofp.OFPGT_INDIRECT and len(ind.buckets) == 1
    for m in (ff, ind):
        _roundtrip(m)


def test_last_hop_rewrites_destination_mac():
    gm = ofrules.route_msgs(ofrules.proto(), LAST, "controller", "02:00:00:00:00:0c", "add")[0][0]
    setf, out = gm.buckets[0].actions
    assert setf.key == "eth_dst" and setf.value == "02:00:00:00:00:0c" and out.port == 1


def test_losing_a_member_is_one_flow_mod_then_cleanup():
    dp = ofrules.proto()
    shrunk = Route("t0", "10.3.6.2/32", "h12", 13, (4,))
    apply, cleanup = ofrules.route_msgs(dp, shrunk, "controller", None, "modify", old=ECMP)
    assert [_kind(m) for m in apply] == ["OFPFlowMod"]
    assert apply[0].table_id == 0 and apply[0].instructions[0].actions[0].group_id == (13 << 8) | 4
    assert [(_kind(m), m.command) for m in cleanup] == [
        ("OFPFlowMod", ofp.OFPFC_DELETE_STRICT), ("OFPFlowMod", ofp.OFPFC_DELETE_STRICT),
        ("OFPGroupMod", ofp.OFPGC_DELETE)]
    assert cleanup[-1].group_id == (13 << 8) | 3
    # in fast-failover mode the surviving member also loses its fallback
    apply, _ = ofrules.route_msgs(dp, shrunk, "fast-failover", None, "modify", old=ECMP)
    assert [(_kind(m), getattr(m, "command", None)) for m in apply] == [
        ("OFPGroupMod", ofp.OFPGC_MODIFY), ("OFPFlowMod", ofp.OFPFC_ADD)]
    grown, cleanup = ofrules.route_msgs(dp, ECMP, "controller", None, "modify", old=shrunk)
    assert [m.command for m in grown if _kind(m) == "OFPGroupMod"] == [ofp.OFPGC_ADD] and cleanup == []
    assert ofrules.route_msgs(dp, ECMP, "controller", None, "modify", old=ECMP) == ([], [])
    deleted, cleanup = ofrules.route_msgs(dp, ECMP, "controller", None, "delete")
    assert [m.command for m in cleanup][-2:] == [ofp.OFPGC_DELETE, ofp.OFPGC_DELETE]
    with pytest.raises(ValueError, match="mode"):
        ofrules.member_ports(ECMP, 3, "magic")


def test_hash_basis_differs_between_switches():
    assert len({ofrules.hash_basis(d) for d in range(1, 21)}) == 20


def test_diff_rendering_order_and_unconnected_switches():
    G = fat_tree(4)
    brain = RoutingBrain(G)
    brain.compute_all()
    old = dict(brain.routes)
    diff = brain.link_down("a0", "cr0", now=0)
    macs = {h: G.nodes[h]["mac"] for h in G if G.nodes[h]["role"] == "host"}
    dp = ofrules.proto()
    pairs = list(ofrules.diff_msgs(lambda s: dp if s != "a2" else None, diff, "controller", macs, old,
                                   first="cr0"))
    switches = [s for s, _ in pairs]
    assert "a2" not in switches and set(switches) == diff.switches() - {"a2"}
    assert switches[0] == "cr0"
    kinds = ["delete" if getattr(m, "command", 0) in (ofp.OFPFC_DELETE_STRICT, ofp.OFPGC_DELETE) else "apply"
             for _, m in pairs]
    assert kinds == sorted(kinds, key=lambda k: k == "delete")  # every apply before any cleanup
    a0 = [m for s, m in pairs if s == "a0" and getattr(m, "command", None) == ofp.OFPFC_ADD]
    assert len(a0) == 12  # one flow mod per destination outside pod 0 moves a0 off the dead port
    for _, m in pairs:
        _roundtrip(m)


def test_base_msgs_punt_arp_and_lldp_and_drop_the_rest():
    msgs = ofrules.base_msgs(ofrules.proto())
    for m in msgs:
        _roundtrip(m)
    matches = [dict(m.match.items()) for m in msgs[2:]]
    assert matches == [{"eth_type": 0x88CC}, {"eth_type": 0x0806}, {}]
    assert msgs[-1].instructions == []


def _arp_request(src_mac, src_ip, dst_ip) -> bytes:
    p = packet.Packet()
    p.add_protocol(ethernet.ethernet(dst="ff:ff:ff:ff:ff:ff", src=src_mac, ethertype=0x0806))
    p.add_protocol(arp.arp(opcode=arp.ARP_REQUEST, src_mac=src_mac, src_ip=src_ip, dst_ip=dst_ip))
    p.serialize()
    return bytes(p.data)


def test_arp_reply_from_the_address_plan():
    plan = {"10.0.0.2": "02:00:00:00:00:02"}
    frame = ofrules.arp_reply(_arp_request("02:00:00:00:00:01", "10.0.0.1", "10.0.0.2"), plan)
    reply = packet.Packet(frame).get_protocol(arp.arp)
    assert reply.opcode == arp.ARP_REPLY and reply.src_mac == "02:00:00:00:00:02"
    assert reply.dst_ip == "10.0.0.1" and reply.src_ip == "10.0.0.2"
    assert ofrules.arp_reply(_arp_request("02:00:00:00:00:01", "10.0.0.1", "10.9.9.9"), plan) is None
    assert ofrules.arp_reply(b"\x00" * 7, plan) is None


def test_lldp_roundtrip_and_foreign_frames():
    assert ofrules.parse_lldp(ofrules.lldp_frame(0x1234, 7)) == (0x1234, 7)
    assert ofrules.parse_lldp(_arp_request("02:00:00:00:00:01", "10.0.0.1", "10.0.0.2")) is None
