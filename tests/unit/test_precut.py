"""Probes lost before a failover run's first cut (testbed.routing.precut) and the counters that explain them
(testbed.emu.probewatch, on text captured on this machine: Debian 12, kernel 6.18, OVS 3.1.0)."""

from __future__ import annotations

import importlib.util

import pytest

from testbed.emu import probewatch
from testbed.routing import precut as P
from testbed.scenario import REPO_ROOT

INTERVAL = 0.05


def flow(n: int, lost=(), transit: float = 0.01, t0: float = 100.0, late: dict | None = None) -> dict:
    """A flow_table entry: rounds every INTERVAL from ``t0``, each delivered ``transit`` s later (``late``:
    {seq: transit} for single ones) except ``lost``."""
    sends = [t0 + i * INTERVAL for i in range(n)]
    late = late or {}
    return {"send_times": sends, "interval": INTERVAL,
            "arrivals": [(i, t + late.get(i, transit)) for i, t in enumerate(sends) if i not in lost]}


# ------------------------------------------------------------------------------------ split_losses
def test_a_loss_followed_by_a_delivery_before_the_cut_is_lost_before_it():
    # cut at t0 + 2.0 s (round 40), window to round 39; round 10 lost, round 11 arrived long before the cut
    flows = {("h0", "h15"): flow(60, lost={10})}
    sp = P.split_losses(flows, 100.0 + 1.95, 102.0, crosses={("h0", "h15")})
    assert (sp["lost"], sp["in_flight_at_cut"]) == (1, 0)
    assert sp["bounds"] == [pytest.approx(100.0 + 11 * INTERVAL + 0.01)]    # before round 11 arrived
    assert sp["flows"] == {"h0->h15": {"lost": 1, "in_flight_at_cut": 0}}


def test_datagrams_still_in_the_fabric_when_the_cut_came_are_the_cuts():
    # the fabric took 200 ms from round 35 on (a busy ovs-vswitchd): rounds 36-38 were sent before the
    # window's end (t0 + 1.95) and lost by the cut at t0 + 2.0, nothing after them arrived before it
    late = {i: 0.2 for i in range(35, 60)}
    flows = {("h0", "h15"): flow(60, lost={36, 37, 38, 40, 41}, late=late)}
    sp = P.split_losses(flows, 101.95, 102.0, crosses={("h0", "h15")})
    assert (sp["lost"], sp["in_flight_at_cut"]) == (0, 3)     # 40, 41: the cut's own window, not counted here
    # the old rule (lost from the first delivery to t_cut - interval) counted those three as lost before it
    # the same losses on a flow whose paths never cross the cut are not the cut's
    sp = P.split_losses(flows, 101.95, 102.0, crosses=set())
    assert (sp["lost"], sp["in_flight_at_cut"]) == (3, 0)
    assert sp["bounds"][0] == pytest.approx(100.0 + 39 * INTERVAL + 0.2)   # round 39 arrived after the cut


def test_nothing_counts_before_the_first_delivery_or_without_one():
    flows = {("h1", "h2"): flow(60, lost={0, 1, 2}), ("h2", "h1"): flow(60, lost=set(range(60)))}
    sp = P.split_losses(flows, 101.95, 102.0, crosses=set(flows))
    assert (sp["lost"], sp["in_flight_at_cut"], sp["flows"]) == (0, 0, {})


def test_crossing_flows_are_those_with_a_path_over_the_cut_links_either_way():
    paths = {("h0", "h15"): (("h0", "t0", "a0", "cr0", "a6", "t7", "h15"), ("h0", "t0", "a1", "cr2", "a7", "t7", "h15")),
             ("h15", "h0"): (("h15", "t7", "a6", "cr1", "a0", "t0", "h0"),),
             ("h0", "h1"): (("h0", "t0", "h1"),)}
    assert P.crossing(paths, [("cr0", "a0")]) == {("h0", "h15")}
    assert P.crossing(paths, [("a0", "cr0"), ("a0", "cr1")]) == {("h0", "h15"), ("h15", "h0")}
    assert P.crossing(paths, []) == set()


# ------------------------------------------------------------------------------------ attribution
def snap(t, hosts=None, **machine):
    doc = {"t": t, "hosts": hosts or {"h0": {"rcvbuf_errors": 0, "sndbuf_errors": 0, "if_drops": 0}}}
    doc.update({k: 0 for k in ("switch_if_drops", "switch_queue_drops", "ovs_port_sockets", "ovs_datapath")})
    doc["ovs_drop_flows"] = {}
    doc.update(machine)
    return doc


def test_counter_causes_are_the_differences_per_cause():
    before = snap((1.0, 1.1), {"h0": {"rcvbuf_errors": 3, "sndbuf_errors": 0, "if_drops": 1},
                               "h1": {"rcvbuf_errors": 0, "sndbuf_errors": 2, "if_drops": 0}},
                  ovs_drop_flows={"m1": 5, "m2": 9})
    after = snap((2.0, 2.1), {"h0": {"rcvbuf_errors": 5, "sndbuf_errors": 0, "if_drops": 1},
                              "h1": {"rcvbuf_errors": 1, "sndbuf_errors": 3, "if_drops": 0}},
                 ovs_drop_flows={"m1": 6, "m3": 1}, switch_queue_drops=4)   # m2 expired, m3 new
    causes = P.counter_causes(before, after)
    assert causes == {"receiver_socket_buffer": 3, "host_interfaces": 0, "switch_interfaces": 0,
                      "ovs_port_sockets": 0, "ovs_datapath": 0, "host_queues": 1, "switch_queues": 4,
                      "ovs_pipeline": 2}
    assert set(causes) == set(P.CAUSES)


def test_attribution_names_the_emulator_first_then_the_model_then_nothing():
    split = {"lost": 6, "bounds": [1.0, 1.1, 1.2, 1.3, 1.4, 9.0]}
    causes = dict.fromkeys(P.CAUSES, 0) | {"receiver_socket_buffer": 2, "switch_queues": 1, "ovs_pipeline": 7}
    doc = P.attribute(split, causes, counted_until=1.5)
    assert doc["by_cause"] == {"receiver_socket_buffer": 2, "switch_queues": 1, "ovs_pipeline": 2}
    assert (doc["emulator"], doc["modelled"], doc["unattributed"], doc["after_counters"]) == (2, 3, 1, 1)
    # nothing counted: every loss without a cause
    none = P.attribute(split, dict.fromkeys(P.CAUSES, 0), counted_until=1.5)
    assert (none["by_cause"], none["unattributed"]) == ({}, 6)
    # counters not read cleanly (their read ran into the cut): none of them is trusted
    unread = P.attribute(split, causes, counted_until=None)
    assert (unread["emulator"], unread["modelled"], unread["unattributed"], unread["after_counters"]) == (0, 0, 6, 6)
    assert P.attribute({"lost": 0, "bounds": []}, causes, 1.5)["by_cause"] == {}


def test_transit_is_taken_from_the_probes_own_timestamps():
    doc = {"tx_ns": [int(100e9), int(100.5e9), int(103e9)], "rx_ns": [int(100.010e9), int(100.7e9), int(103.001e9)]}
    t = P.transit_ms({"h1": doc}, 100.0, 102.0)
    assert t["n"] == 2 and t["p50"] == pytest.approx(200.0) and t["max"] == pytest.approx(200.0)
    assert P.transit_ms({"h1": doc}, 200.0, 201.0) == {"p50": None, "p99": None, "max": None, "n": 0}


# ------------------------------------------------------------------------------------ probewatch parsers
SNMP = """\
Ip: Forwarding DefaultTTL InReceives InHdrErrors InAddrErrors ForwDatagrams InUnknownProtos InDiscards
Ip: 1 64 1201 0 0 0 0 0
Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
Udp: 549299 0 7 549354 5 2 0 0 0
UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
UdpLite: 0 0 0 0 9 9 0 0 0
"""

DEV = """\
Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo: 1848489659 1140259    0    4    0     0          0         0 1848489659 1140259    0    4    0     0       0          0
h3-eth1:  912345    4011    0    2    0     0          0         0   880021    3985    0    3    0     0       0          0
"""

COVERAGE = """\
Event coverage, avg rate over last: 5 seconds, last minute, last hour,  hash=2ff8a6b1:
ofproto_recv_openflow      0.0/sec     0.000/sec        0.0017/sec   total: 974
datapath_drop_upcall_error   0.0/sec     0.000/sec        0.0061/sec   total: 22
datapath_drop_userspace_action_error   0.0/sec     4.000/sec        0.4336/sec   total: 1561
drop_action_of_pipeline    1.2/sec     6.883/sec        0.6169/sec   total: 2221
drop_action_too_many_resubmit   0.0/sec     0.000/sec        0.0000/sec   total: 3
netdev_sent              0.0/sec     0.000/sec        0.0000/sec   total: 72692
287 events never hit
"""


# `ovs-appctl dpctl/dump-flows` during a quick run (IPv6 lines as captured: the replica's own ND/MLD frames,
# which coverage's drop_action_of_pipeline counts too); the IPv4 lines written in the same format
DUMP = """\
recirc_id(0),in_port(78),packet_type(ns=0,id=0),eth_type(0x86dd),ipv6(frag=no), packets:4, bytes:320, used:5.017s, actions:drop
recirc_id(0),in_port(73),packet_type(ns=0,id=0),eth_type(0x86dd),ipv6(frag=no), packets:3, bytes:230, used:5.784s, actions:drop
recirc_id(0),in_port(5),packet_type(ns=0,id=0),eth_type(0x0800),ipv4(dst=10.0.0.16,frag=no), packets:2, bytes:484, used:0.120s, actions:drop
recirc_id(0),in_port(5),packet_type(ns=0,id=0),eth_type(0x0800),ipv4(dst=10.0.0.15,frag=no), packets:30, bytes:7260, used:0.010s, actions:set(eth(dst=02:00:00:00:00:0f)),3
"""


def test_the_tables_drops_are_the_ipv4_drop_flows_only():
    assert probewatch.ipv4_dropped(DUMP) == {"recirc_id(0),in_port(5),packet_type(ns=0,id=0),eth_type(0x0800),"
                                             "ipv4(dst=10.0.0.16,frag=no)": 2}
    assert probewatch.ipv4_dropped("") == {}


def test_udp_counters_come_from_the_udp_row_not_udplite():
    assert probewatch.snmp_udp(SNMP) == {"rcvbuf_errors": 5, "sndbuf_errors": 2}
    assert probewatch.snmp_udp("") == {"rcvbuf_errors": 0, "sndbuf_errors": 0}


def test_interface_drops_leave_out_loopback():
    assert probewatch.netdev_drops(DEV) == 5


def test_coverage_splits_the_tables_decision_from_the_datapaths_drops():
    cov = probewatch.coverage_totals(COVERAGE)
    assert cov["drop_action_of_pipeline"] == 2221 and cov["netdev_sent"] == 72692 and "Event" not in cov
    texts = {"link": "[]", "qdisc": "[]", "ss": "", "coverage": COVERAGE, "flows": DUMP,
             "dpctl": "netdev@ovs-netdev:\n  lookups: hit:10 missed:4 lost:3\n  flows: 2\n"}
    m = probewatch.machine_counters(texts, ["a0-eth3"], pid=None)
    assert sum(m["ovs_drop_flows"].values()) == 2      # not coverage's 2221
    assert m["ovs_datapath"] == 3 + 22 + 1561 + 3      # lost upcalls + datapath_drop_* + other drop_action_*


def test_switch_drops_count_the_replicas_ports_and_root_queues_only():
    links = ('[{"ifname": "a0-eth3", "stats64": {"rx": {"dropped": 1}, "tx": {"dropped": 2}}},'
             ' {"ifname": "other", "stats64": {"rx": {"dropped": 50}, "tx": {"dropped": 0}}}]')
    qdiscs = ('[{"dev": "a0-eth3", "root": true, "drops": 7}, {"dev": "a0-eth3", "parent": "5:1", "drops": 7},'
              ' {"dev": "other", "root": true, "drops": 9}]')
    assert probewatch.switch_drops(links, qdiscs, ["a0-eth3"]) == {"if_drops": 3, "queue_drops": 7}


# ------------------------------------------------------------------------------------ the scenario's glue
@pytest.fixture(scope="module")
def scenario():
    spec = importlib.util.spec_from_file_location("fabric_failover", REPO_ROOT / "scenarios" / "fabric_failover.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_pre_cut_trusts_counters_only_when_read_before_the_cut(scenario):
    from argparse import Namespace

    from testbed.topo.spec import build_graph, load_spec

    G = build_graph(load_spec(REPO_ROOT / "scenarios" / "specs" / "fat-tree-k4.yaml"))
    t0 = 100.0
    flows = {("h0", "h15"): flow(60, lost={10}, t0=t0)}
    before = {("h0", "h15"): (("h0", "t0", "a0", "cr0", "a6", "t7", "h15"),)}
    record = {"log": [{"kind": "link_down", "target": ["a0", "cr0"], "at_s": 2.0}]}
    args = Namespace(interval=INTERVAL, duration=9.0)
    recv = {"h15": {"tx_ns": [int(t0 * 1e9)], "rx_ns": [int((t0 + 0.01) * 1e9)]}}
    clean = [snap((t0 - 0.2, t0 - 0.1)), snap((t0 + 1.85, t0 + 1.9))]
    clean[1]["hosts"] = {"h0": {"rcvbuf_errors": 1, "sndbuf_errors": 0, "if_drops": 0}}
    pre = scenario.pre_cut(G, flows, recv, before, record, clean, t0, args)
    assert (pre["lost"], pre["emulator"], pre["unattributed"], pre["counters_before_cut"]) == (1, 1, 0, True)
    assert pre["by_cause"] == {"receiver_socket_buffer": 1}
    assert "1 receiver socket buffer" in scenario.pre_cut_line(pre)
    # the same read, ending after the cut started: its counters may hold the cut's drops
    late = [clean[0], {**clean[1], "t": (t0 + 1.95, t0 + 2.05)}]
    pre = scenario.pre_cut(G, flows, recv, before, record, late, t0, args)
    assert (pre["lost"], pre["emulator"], pre["unattributed"], pre["counters_before_cut"]) == (1, 0, 1, False)
    assert "1 without a counted cause" in scenario.pre_cut_line(pre)
