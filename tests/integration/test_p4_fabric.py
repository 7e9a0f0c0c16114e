"""Packet tests of p4/fabric.p4 on a live BMv2 (PTF style: send with Scapy, expect exact packets).

    test side            switch (simple_switch_fast, fabric.p4)
    p4fab-t1 ----- p4fab-s1  port 1: senders      10.0.1.0/24
    p4fab-t2 ----- p4fab-s2  port 2: \\ ECMP       10.0.2.0/24
    p4fab-t3 ----- p4fab-s3  port 3: /
    p4fab-t4 ----- p4fab-s4  port 4: slow, mode ecn       (kmin 3, kmax 6, pmax 0)   10.0.4.0/24
    p4fab-t5 ----- p4fab-s5  port 5: slow, mode fast-cnp  (kmin 0, kmax 1, no rate limit)   10.0.5.0/24
    p4fab-t6 ----- p4fab-s6  port 6: slow, mode fast-cnp  (kmin 0, kmax 1, 1 CNP per 30 s)  10.0.6.0/24

Slow ports drain 20 packets/s, so a burst builds a queue whose depth at enqueue is at most the packet's
index in the burst: the first ``kmax`` packets can never be marked, later ones can. "Nothing else came"
is checked with a barrier packet sent after the others (the switch handles a port's packets in order).
Every test uses its own addresses, and counters and registers are reset, so tests are independent.

PFC: DSCP 26 is lossless in priority 3 (``pfc_priority``) for every test; a PFC test gives port 1 its own
``pfc_config`` (thresholds of a few 1000-byte frames, so a burst to a 20 pps port crosses them at once and
drains in tenths of a second); the table is cleared between tests, so elsewhere nothing is accounted.
"""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import pytest

from testbed.poll import poll

pytestmark = [pytest.mark.root, pytest.mark.bmv2]

N_PORTS = 6
PFC_DSCP, PFC_PRIO = 26, 3
#: PFC frames from the link node behind port 4 are relayed to port 1 (its feeder) in the relay test.
RELAY = {4: [1]}
#: Bytes of every PFC test frame as BMv2 counts them (no FCS): the thresholds are multiples of it.
FRAME = 1000
QUANTA = 0x1234
SLOW_PPS = 20
ROUTER_MAC = "02:fe:00:00:00:01"
SENDER_MAC = "02:0a:00:01:00:01"
DMAC = {1: SENDER_MAC, 2: "02:0a:00:02:00:01", 4: "02:0a:00:04:00:01", 5: "02:0a:00:05:00:01",
        6: "02:0a:00:06:00:01"}


class Wire:
    """Scapy sockets and sniffers on the test side of every port; keeps what the switch sent."""

    def __init__(self, ifaces: dict):
        from scapy.all import AsyncSniffer, conf

        self.got = {p: [] for p in ifaces}
        self.lock = threading.Lock()
        self.socks = {p: conf.L2socket(iface=i) for p, i in ifaces.items()}
        self.sniffers = []
        started = []
        for p, i in ifaces.items():
            s = AsyncSniffer(iface=i, store=False, lfilter=lambda pkt: pkt.src == ROUTER_MAC,
                             prn=lambda pkt, p=p: self._add(p, pkt), started_callback=lambda: started.append(1))
            s.start()
            self.sniffers.append(s)
        poll(lambda: len(started) == len(ifaces), timeout=10, what="sniffers to start")

    def _add(self, port, pkt):
        with self.lock:
            self.got[port].append(pkt)

    def clear(self):
        with self.lock:
            for v in self.got.values():
                v.clear()

    def send(self, port, pkts):
        for pkt in pkts if isinstance(pkts, list) else [pkts]:
            self.socks[port].send(pkt)

    def wait(self, port, n, timeout=15.0, what=None) -> list:
        poll(lambda: len(self.got[port]) >= n, timeout=timeout, interval=0.02,
             what=what or f"{n} packets on port {port}")
        with self.lock:
            return list(self.got[port])

    def close(self):
        for s in self.sniffers:
            s.stop(join=True)
        for s in self.socks.values():
            s.close()


@pytest.fixture(scope="module")
def fabric(tmp_path_factory):
    from testbed.emu.registry import RunRegistry
    from testbed.p4rt import entries as E
    from testbed.p4rt.compile import compile_p4
    from testbed.p4rt.switch import Bmv2Config, Bmv2Process
    from testbed.plan.alloc import Allocator
    from testbed.scenario import REPO_ROOT

    json_path = compile_p4(REPO_ROOT / "p4" / "fabric.p4")
    out = tmp_path_factory.mktemp("p4fab")
    with RunRegistry("p4-fabric-test") as run:
        ports = {}
        for i in range(1, N_PORTS + 1):
            run.add_veth(f"p4fab-s{i}", f"p4fab-t{i}")
            for name in (f"p4fab-s{i}", f"p4fab-t{i}"):
                subprocess.run(["sysctl", "-qw", f"net.ipv6.conf.{name}.disable_ipv6=1"], check=False)
            ports[i] = f"p4fab-s{i}"
        cfg = Bmv2Config(name="p4fab", json_path=json_path, ports=ports, log_dir=out,
                         **Allocator(29090).switch("p4fab"))
        sw = Bmv2Process(cfg).start(run)
        sw.wait_ready()
        client = sw.client()
        prog = E.switch_config_entries(ROUTER_MAC)
        prog += E.route_entries("10.0.1.0/24", 1, [1], ROUTER_MAC, DMAC[1])
        prog += E.route_entries("10.0.2.0/24", 2, [2, 3], ROUTER_MAC, DMAC[2])
        for p in (4, 5, 6):
            prog += E.route_entries(f"10.0.{p}.0/24", p, [p], ROUTER_MAC, DMAC[p])
        prog += E.ecn_entries(E.EcnConfig(3, 6, pmax=0.0, mode="ecn"), port=4)
        prog += E.ecn_entries(E.EcnConfig(0, 1, mode="fast-cnp", cnp_interval_s=0.0), port=5)
        prog += E.ecn_entries(E.EcnConfig(0, 1, mode="fast-cnp", cnp_interval_s=30.0), port=6)
        prog += E.pfc_priority_entries({PFC_DSCP: PFC_PRIO}, [PFC_PRIO])
        client.apply(prog)
        for session, port in E.mirror_sessions(ports):
            client.mirroring_add(session, port)
        for group, members in E.pfc_relay_entries(RELAY)[1]:   # the relay test's group; its entry per test
            client.mc_group(group, members)
        for p in (4, 5, 6):
            client.set_queue_rate(SLOW_PPS, port=p)
        wire = Wire({p: f"p4fab-t{p}" for p in ports})
        try:
            yield client, wire, sw
        finally:
            wire.close()
            client.close()
            sw.stop()


@pytest.fixture
def sw(fabric):
    client, wire, proc = fabric
    proc.check_alive()
    for name in ("marks", "cnps", "drops", "cnp_skipped", "pfc_rx", "pfc_pause_sent", "pfc_xon_sent"):
        client.counter_reset(name)
    for name in ("sender_qp", "cnp_last_us", "pfc_bytes", "pfc_paused_at", "pfc_egress_held", "pfc_xon_owed"):
        client.register_reset(name)
    client.table_clear("pfc_config")
    client.table_clear("pfc_relay")
    wire.clear()
    return client, wire


def _udp(dst, sport=1000, src="10.0.1.1", ttl=64, tos=0, payload=b"x" * 64, ident=1):
    from scapy.all import IP, UDP, Ether, Raw

    return Ether(src=SENDER_MAC, dst=ROUTER_MAC) / IP(src=src, dst=dst, ttl=ttl, tos=tos, id=ident) / \
        UDP(sport=sport, dport=7000) / Raw(payload)


def _roce(dst, src="10.0.1.1", qp=0x456, psn=0, opcode=0x04, ecn=2, sport=0xC000, ident=1, dscp=0):
    from scapy.all import IP, UDP, Ether, Raw

    from testbed.roce.layers import BTH

    return Ether(src=SENDER_MAC, dst=ROUTER_MAC) / IP(src=src, dst=dst, tos=dscp << 2 | ecn, id=ident) / \
        UDP(sport=sport, dport=4791) / BTH(opcode=opcode, dqpn=qp, psn=psn) / Raw(b"d" * 256)


def _ack(src, dst, sender_qp, port_mac):
    from scapy.all import IP, UDP, Ether

    from testbed.roce.layers import ack

    return Ether(src=port_mac, dst=ROUTER_MAC) / IP(src=src, dst=dst) / UDP(sport=0xC001, dport=4791) / \
        ack(sender_qp, psn=0, msn=1)


def test_forwarding_rewrites_macs_and_ttl_exactly(sw):
    client, wire = sw
    pkt = _udp("10.0.4.7", ttl=9)
    wire.send(1, pkt)
    got = wire.wait(4, 1)
    expected = pkt.copy()
    expected.src, expected.dst = ROUTER_MAC, DMAC[4]
    expected["IP"].ttl = 8
    del expected["IP"].chksum
    assert bytes(got[0]) == bytes(expected)


def test_ecmp_spreads_flows_over_members_and_keeps_a_flow_on_one(sw):
    client, wire = sw
    flows = 64
    wire.send(1, [_udp("10.0.2.9", sport=20000 + i) for i in range(flows)])
    poll(lambda: len(wire.got[2]) + len(wire.got[3]) >= flows, timeout=15, what="all ECMP packets")
    per = {p: {pkt["UDP"].sport for pkt in wire.got[p]} for p in (2, 3)}
    assert len(per[2]) + len(per[3]) == flows and not per[2] & per[3]
    assert min(len(per[2]), len(per[3])) >= flows // 5  # crc16 of the 5-tuple spreads roughly evenly
    wire.clear()
    sport = sorted(per[2])[0]
    wire.send(1, [_udp("10.0.2.9", sport=sport, ident=i) for i in range(10)])
    assert len(wire.wait(2, 10)) == 10


def test_arp_request_is_answered_by_the_switch(sw):
    from scapy.all import ARP, Ether

    client, wire = sw
    wire.send(1, Ether(src=SENDER_MAC, dst="ff:ff:ff:ff:ff:ff") /
              ARP(op=1, hwsrc=SENDER_MAC, psrc="10.0.1.1", pdst="10.0.2.9"))
    reply = wire.wait(1, 1)[0]
    assert reply[ARP].op == 2 and reply[ARP].hwsrc == ROUTER_MAC and reply[ARP].psrc == "10.0.2.9"
    assert reply[ARP].pdst == "10.0.1.1" and reply.dst == SENDER_MAC


def _burst(wire, port, n, **kw):
    wire.send(1, [_roce(f"10.0.{port}.9", ident=i, psn=i, **kw) for i in range(n)])
    return sorted(wire.wait(port, n, what=f"{n} packets through slow port {port}"), key=lambda p: p["IP"].id)


def test_marking_under_and_over_the_thresholds(sw):
    client, wire = sw
    # under kmin: an idle queue never marks
    wire.send(1, _roce("10.0.4.9", ident=0))
    assert wire.wait(4, 1)[0]["IP"].tos & 3 == 2
    wire.clear()
    # a burst: packet i sees a queue of at most i, so the first kmax (6) are never marked; later ones are
    n = 24
    got = _burst(wire, 4, n)
    ce = [p["IP"].tos & 3 == 3 for p in got]
    assert not any(ce[:6])
    assert sum(ce) >= 6 and ce[-1]
    assert client.counter_read("marks", 4).packets == sum(ce)
    # marking keeps the packet valid: ICRC covers no ECN bit
    from testbed.roce.layers import icrc_valid

    assert all(icrc_valid(p) for p in got)


def test_non_ect_packets_past_kmax_are_dropped_and_counted(sw):
    client, wire = sw
    n = 24
    wire.send(1, [_roce("10.0.4.9", ident=i, ecn=0) for i in range(n)])
    poll(lambda: client.counter_read("drops", 3).packets + len(wire.got[4]) >= n, timeout=15,
         what="burst of non-ECT packets to be forwarded or dropped")
    barrier = _roce("10.0.4.9", ident=999, ecn=2)
    wire.send(1, barrier)
    poll(lambda: any(p["IP"].id == 999 for p in wire.got[4]), timeout=15, what="barrier packet")
    forwarded = [p for p in wire.got[4] if p["IP"].id != 999]
    drops = client.counter_read("drops", 3).packets
    assert drops >= 1 and drops + len(forwarded) == n
    assert all(p["IP"].tos & 3 == 0 for p in forwarded)
    assert client.counter_read("marks", 4).packets == 0


def _expected_cnp(data, sender_qp):
    from scapy.all import IP, UDP, Ether

    from testbed.roce.layers import cnp

    return Ether(src=ROUTER_MAC, dst=data.src) / \
        IP(src=data["IP"].dst, dst=data["IP"].src, tos=data["IP"].tos & 0xFC, id=0, flags="DF", ttl=64) / \
        UDP(sport=data["UDP"].sport, dport=4791, chksum=0) / cnp(sender_qp)


def test_fast_cnp_learned_from_acks_is_a_valid_cnp_to_the_sender_qp(sw, tmp_path):
    from scapy.all import wrpcap

    from testbed.roce.check import check_capture, passed
    from testbed.roce.layers import BTH, icrc_valid

    client, wire = sw
    # no ACK seen yet: the switch does not know the sender's QP, so no CNP
    got = _burst(wire, 5, 6, src="10.0.1.5")
    assert client.counter_read("cnp_skipped", 1).packets >= 1
    assert client.counter_read("cnps", 5).packets == 0
    # the receiver's ACK (receiver -> sender, DestQP = sender QP 0x1234) teaches it
    wire.send(5, _ack("10.0.5.9", "10.0.1.5", 0x1234, DMAC[5]))
    wire.wait(1, 1, what="the ACK forwarded to the sender")
    wire.clear()
    data = _roce("10.0.5.9", src="10.0.1.5")
    got = _burst(wire, 5, 6, src="10.0.1.5")
    assert all(p["IP"].tos & 3 == 2 for p in got)  # fast-cnp mode does not mark
    generated = client.counter_read("cnps", 5).packets
    assert generated >= 1  # packets 2.. of the burst met a queue
    cnps = [p for p in wire.wait(1, generated, what="the CNPs back to the sender") if BTH in p]
    assert len(cnps) == generated and all(p[BTH].opcode == 0x81 for p in cnps)
    for c in cnps:
        assert len(bytes(c)) == 74 and icrc_valid(c)
        assert bytes(c) == bytes(_expected_cnp(data, 0x1234)), c.show(dump=True)
    # what `testbed roce check` says about them
    wrpcap(str(tmp_path / "cnps.pcap"), cnps)
    report = check_capture(tmp_path / "cnps.pcap", cnp_interval=0.0)
    assert passed(report), report


def test_control_plane_qp_map_takes_precedence(sw):
    from testbed.p4rt import entries as E
    from testbed.roce.layers import BTH

    client, wire = sw
    client.apply([E.qp_map_entry("10.0.1.6", "10.0.5.9", 0x456, 0xABC)])
    wire.send(5, _ack("10.0.5.9", "10.0.1.6", 0x777, DMAC[5]))  # learned value loses to the table
    wire.wait(1, 1)
    wire.clear()
    _burst(wire, 5, 5, src="10.0.1.6")
    cnps = wire.wait(1, 1, what="a CNP")
    assert len(cnps) == client.counter_read("cnps", 5).packets
    assert {c[BTH].dqpn for c in cnps} == {0xABC}


def test_cnp_rate_limit_one_per_interval_per_flow(sw):
    from testbed.p4rt import entries as E
    from testbed.roce.layers import BTH

    client, wire = sw
    client.apply([E.qp_map_entry("10.0.1.7", "10.0.6.9", 0x456, 0x99),
                  E.qp_map_entry("10.0.1.8", "10.0.6.9", 0x456, 0x98)])
    n = 8
    _burst(wire, 6, n, src="10.0.1.7")
    barrier = _udp("10.0.1.1", ident=4242)
    wire.send(6, barrier)
    wire.wait(1, 2, what="one CNP and the barrier")
    cnps = [p for p in wire.got[1] if BTH in p]
    assert len(cnps) == 1 and cnps[0][BTH].dqpn == 0x99
    assert client.counter_read("cnps", 6).packets == 1
    assert client.counter_read("cnp_skipped", 0).packets >= 1  # later congested packets of the flow
    # another flow has its own budget
    wire.clear()
    _burst(wire, 6, 6, src="10.0.1.8")
    assert [p[BTH].dqpn for p in wire.wait(1, 1) if BTH in p] == [0x98]


def test_cnp_overtakes_a_queue_of_data_in_its_priority_queue(sw):
    """A CNP sent behind a queue of data on a slow port leaves right after the frame in service, not
    last: CNPs travel in strict priority (BMv2 counts a queue's rate in packets, so behind N frames a
    74-byte CNP would wait N full-MTU slots, which on the long haul was tens of us of false feedback)."""
    from scapy.all import IP, UDP, Ether

    from testbed.roce.layers import BTH, cnp

    client, wire = sw
    data = [_udp("10.0.4.9", src="10.0.1.5", ident=100 + i) for i in range(5)]   # below kmax: none dropped
    wire.send(1, data)
    wire.send(1, Ether(src=SENDER_MAC, dst=ROUTER_MAC) / IP(src="10.0.1.5", dst="10.0.4.9") /
              UDP(sport=0xC002, dport=4791) / cnp(0x321))
    got = wire.wait(4, 6, what="5 data frames and the CNP out of the 20 pps port")
    order = ["cnp" if BTH in p else p[IP].id for p in got]
    assert order.index("cnp") <= 1, f"the CNP waited behind the data queue: {order}"
    assert [o for o in order if o != "cnp"] == [100 + i for i in range(5)]   # data keeps its order


def test_malformed_truncated_and_unroutable_packets_are_dropped_and_counted(sw):
    from scapy.all import IP, UDP, Ether, Raw

    client, wire = sw
    eth = Ether(src=SENDER_MAC, dst=ROUTER_MAC)
    good = bytes(_udp("10.0.2.9", ident=5))
    bad = [
        bytes(eth)[:12] + b"\x08\x00" + bytes(IP(dst="10.0.2.9"))[:10],               # truncated IPv4
        bytes(eth / IP(dst="10.0.2.9", ihl=6, options=[]) / UDP() / Raw(b"x" * 8)),  # IHL 6 unsupported
        bytes(eth / IP(dst="10.0.2.9", version=5) / UDP() / Raw(b"x" * 8)),          # not IPv4
        bytes(eth / IP(dst="10.0.2.9", chksum=0x1234) / UDP() / Raw(b"x" * 8)),      # bad checksum
        bytes(eth / IP(dst="10.0.2.9") / UDP(sport=1, dport=4791) / Raw(b"\x04" * 5)),  # truncated BTH
    ]
    wire.send(1, [Ether(b) for b in bad])
    wire.send(1, [_udp("10.7.7.7"), _udp("10.0.2.9", ttl=1)])
    wire.send(1, Ether(good))
    poll(lambda: len(wire.got[2]) + len(wire.got[3]) >= 1, timeout=15, what="the barrier packet")
    arrived = wire.got[2] + wire.got[3]
    assert [p["IP"].id for p in arrived] == [5]
    counts = [client.counter_read("drops", i).packets for i in range(3)]
    assert counts == [len(bad), 1, 1]  # malformed, no route, ttl


def test_queue_registers_and_tail_drop_accounting(sw):
    client, wire = sw
    for name in ("to_port", "from_queue"):
        client.counter_reset(name)
    for name in ("qdepth_last", "qdepth_peak", "qdepth_sum", "qdepth_pkts", "first_signal_us"):
        client.register_reset(name)
    client.set_queue_depth(5, port=4)
    barriers = []

    def barrier_seen() -> bool:
        # a barrier meeting a full queue is dropped too: send another until one comes through
        if any(p["IP"].id >= 1000 for p in wire.got[4]):
            return True
        barriers.append(_roce("10.0.4.9", ident=1000 + len(barriers)))
        wire.send(1, barriers[-1])
        return False

    try:
        n = 20
        wire.send(1, [_roce("10.0.4.9", ident=i, psn=i) for i in range(n)])
        poll(barrier_seen, timeout=30, interval=0.3, what="a barrier packet behind the burst")
    finally:
        client.set_queue_depth(64, port=4)
    poll(lambda: client.counter_read("to_port", 4).packets == n + len(barriers), timeout=5, what="counters")
    got = list(wire.got[4])
    data = [p for p in got if p["IP"].id < 1000]
    tail_drops = client.counter_read("to_port", 4).packets - client.counter_read("from_queue", 4).packets
    assert client.counter_read("from_queue", 4).packets >= len(got)
    assert n - len(data) >= 1  # 20 packets cannot fit a 5-packet queue draining 20/s
    assert tail_drops >= n - len(data)
    peak = client.register_read("qdepth_peak", 4)
    assert 1 <= peak <= 5  # a queue built up, and never beyond its 5 slots
    pkts = client.register_read("qdepth_pkts", 4)
    assert pkts >= len(got) and client.register_read("qdepth_sum", 4) <= peak * pkts
    assert client.register_read("qdepth_last", 4) <= peak   # the latest packet's depth, after the burst
    assert client.register_read("first_signal_us", 4) == 0  # never reached kmax (6): never congested


def _lossless(dst, ident, dscp=PFC_DSCP, ecn=2, src="10.0.1.1"):
    """A FRAME-byte UDP packet of DSCP ``dscp`` (ECT(0) by default: port 4's RED then marks, never drops)."""
    pkt = _udp(dst, src=src, tos=dscp << 2 | ecn, ident=ident, payload=b"")
    return _udp(dst, src=src, tos=dscp << 2 | ecn, ident=ident, payload=b"p" * (FRAME - len(pkt)))


def _pfc_on_port1(client, xoff=3, xon=1, limit=20, refresh_us=10_000_000, frame=FRAME):
    """PFC thresholds of ingress port 1, in frames; a 10 s refresh (default) means one PAUSE per episode."""
    from testbed.p4rt import entries as E

    client.apply(E.pfc_entries(1, E.PfcPortConfig(xoff * frame, xon * frame, limit * frame, QUANTA, refresh_us)))


def _pfc_frames(wire, port=1) -> list:
    with wire.lock:
        return [p for p in wire.got[port] if p.type == 0x8808]


def _slot(port=1, prio=PFC_PRIO) -> int:
    return port * 8 + prio


def _drained(client, port=1, prio=PFC_PRIO) -> bool:
    return client.register_read("pfc_bytes", _slot(port, prio)) == 0


def test_pfc_pause_at_xoff_and_xon_once_the_queue_drained(sw, tmp_path):
    from scapy.all import wrpcap

    from testbed.pfc.state import PauseFrame
    from testbed.pfc.wire import decode, encode
    from tests.integration.pfcwire import decode_pfc

    client, wire = sw
    _pfc_on_port1(client)   # xoff 3 frames, xon 1
    n = 6
    wire.send(1, [_lossless("10.0.4.9", ident=i) for i in range(n)])
    got = sorted(wire.wait(4, n, what="the lossless burst through slow port 4"), key=lambda p: p["IP"].id)
    frames = poll(lambda: (f := _pfc_frames(wire)) and len(f) >= 2 and f, timeout=10, what="PAUSE and XON")
    pause, xon = PauseFrame.of({PFC_PRIO: QUANTA}), PauseFrame.of({PFC_PRIO: 0})
    assert [decode(bytes(f)) for f in frames] == [pause, xon]
    # byte for byte what a link node sends (testbed/pfc/wire.py): 60 bytes, router MAC, zero pad
    assert bytes(frames[0]) == encode(pause, ROUTER_MAC) and bytes(frames[1]) == encode(xon, ROUTER_MAC)
    # the PAUSE left while the queue was full (the third frame needs 100 ms through a 20 pps port); the
    # XON only after the fourth frame had left (at most xon = 1 frame accounted)
    assert frames[0].time < got[2].time and frames[1].time > got[3].time
    assert client.counter_read("pfc_pause_sent", 1).packets == 1      # 10 s refresh: once per episode
    assert client.counter_read("pfc_xon_sent", 1).packets == 1
    poll(lambda: _drained(client), timeout=5, what="pfc_bytes of (port 1, priority 3) back to 0")
    assert client.register_read("pfc_paused_at", _slot()) == 0
    assert client.counter_read("drops", 5).packets == 0
    # an independent dissector reads the same: MAC Control PFC, class 3 enabled, its pause time
    wrpcap(str(tmp_path / "pfc.pcap"), frames)
    layers = decode_pfc(tmp_path / "pfc.pcap")
    assert [(f["eth.dst"], f["macc.opcode"], f["macc.cbfc.enbv"], f["macc.cbfc.pause_time.c3"]) for f in layers] \
        == [(["01:80:c2:00:00:01"], ["0x0101"], ["0x0008"], [str(q)]) for q in (QUANTA, 0)]


def test_pfc_lossy_burst_sends_no_pause(sw):
    client, wire = sw
    _pfc_on_port1(client)
    n = 6
    wire.send(1, [_lossless("10.0.4.9", ident=i, dscp=0) for i in range(n)])
    wire.wait(4, n, what="the lossy burst through slow port 4")
    # a PAUSE would have left at admission, 200+ ms before the last frame got through the 20 pps port
    assert _pfc_frames(wire) == []
    assert client.counter_read("pfc_pause_sent", 1).packets == 0
    assert client.register_read_all("pfc_bytes")[_slot(1, 0):_slot(1, 8)] == [0] * 8


def test_pfc_past_limit_drops_as_headroom_after_pausing(sw):
    from testbed.pfc.state import PauseFrame
    from testbed.pfc.wire import decode

    client, wire = sw
    for name in ("to_port", "from_queue"):
        client.counter_reset(name)
    _pfc_on_port1(client, xoff=3, xon=1, limit=5)
    n = 10
    wire.send(1, [_lossless("10.0.4.9", ident=i) for i in range(n)])
    drops = lambda: client.counter_read("drops", 5).packets   # noqa: E731
    poll(lambda: drops() + len(wire.got[4]) >= n, timeout=15, what="burst forwarded or dropped")
    poll(lambda: len(_pfc_frames(wire)) >= 2, timeout=10, what="PAUSE and XON")
    forwarded = len(wire.got[4])
    # a frame is refused only once 5 frames are held, so the 3 that crossed xoff were admitted first
    assert drops() >= 1 and forwarded >= 5 and drops() + forwarded == n
    assert [decode(bytes(f)) for f in _pfc_frames(wire)] == [PauseFrame.of({PFC_PRIO: q}) for q in (QUANTA, 0)]
    assert client.counter_read("pfc_pause_sent", 1).packets == 1
    # refused in ingress: never queued, so never a tail drop (to_port - from_queue) on top
    poll(lambda: _drained(client), timeout=5, what="pfc_bytes back to 0")
    assert client.counter_read("to_port", 4).packets == forwarded == client.counter_read("from_queue", 4).packets
    assert client.counter_read("drops", 3).packets == 0


def test_pfc_pause_is_refreshed_while_the_queue_stays_above_xoff(sw):
    from testbed.pfc.wire import decode

    client, wire = sw
    refresh_us = 100_000
    _pfc_on_port1(client, xoff=3, xon=1, limit=50, refresh_us=refresh_us)
    sent = 10   # above xoff for ~350 ms at 20 pps
    wire.send(1, [_lossless("10.0.4.9", ident=i) for i in range(sent)])
    poll(lambda: _pfc_frames(wire), timeout=10, what="the first PAUSE")
    first_at = client.register_read("pfc_paused_at", _slot())   # switch clock (us) of that PAUSE

    def second_pause():
        nonlocal sent
        if len(_pfc_frames(wire)) >= 2:
            return True
        wire.send(1, _lossless("10.0.4.9", ident=sent))   # a PAUSE is only sent on an arriving packet
        sent += 1
        return False

    poll(second_pause, timeout=5, interval=0.02, what="a refreshed PAUSE")
    second_at = client.register_read("pfc_paused_at", _slot())
    # not per packet (the burst's later frames came in right after the first PAUSE), not before refresh_us
    assert first_at > 0 and second_at - first_at >= refresh_us
    wire.wait(4, sent, what="every frame through slow port 4")
    poll(lambda: _drained(client), timeout=5, what="pfc_bytes back to 0")
    frames = poll(lambda: (f := _pfc_frames(wire)) and decode(bytes(f[-1])).quanta[PFC_PRIO] == 0 and f,
                  timeout=5, what="the XON")
    times = [decode(bytes(f)).quanta[PFC_PRIO] for f in frames]
    # PAUSE, PAUSE (still paused: no XON between), ..., one XON at the end
    assert times[:2] == [QUANTA, QUANTA] and times[-1] == 0 and times.count(0) == 1
    assert client.counter_read("pfc_pause_sent", 1).packets == len(times) - 1
    assert client.counter_read("pfc_xon_sent", 1).packets == 1
    assert client.register_read("pfc_paused_at", _slot()) == 0


def test_pfc_xon_wins_over_the_fast_cnp_of_the_same_packet(sw):
    """The packet whose departure takes the slot down to xon is also congested on a fast-CNP port: BMv2
    sends one clone per pass, and it must be the XON (a lost XON leaves the sender paused)."""
    from testbed.p4rt import entries as E
    from testbed.pfc.wire import decode
    from testbed.roce.layers import BTH

    client, wire = sw
    client.apply([E.qp_map_entry("10.0.1.9", "10.0.5.9", 0x456, 0xAB)])
    size = len(_roce("10.0.5.9", dscp=PFC_DSCP))
    _pfc_on_port1(client, frame=size)
    n = 6
    wire.send(1, [_roce("10.0.5.9", src="10.0.1.9", ident=i, psn=i, dscp=PFC_DSCP) for i in range(n)])
    wire.wait(5, n, what="the lossless RoCE burst through fast-CNP port 5")
    frames = poll(lambda: (f := _pfc_frames(wire)) and len(f) >= 2 and f, timeout=10, what="PAUSE and XON")
    assert [decode(bytes(f)).quanta[PFC_PRIO] for f in frames] == [QUANTA, 0]
    assert client.counter_read("cnp_skipped", E.CNP_SKIP_REASONS["pfc_xon"]).packets == 1
    # the other congested packets still made their CNPs, each one sent
    cnps = client.counter_read("cnps", 5).packets
    assert cnps >= 1 and len([p for p in wire.got[1] if BTH in p]) == cnps
    poll(lambda: _drained(client), timeout=5, what="pfc_bytes back to 0")


def _tx_packets() -> dict:
    return {p: int(Path(f"/sys/class/net/p4fab-s{p}/statistics/tx_packets").read_text())
            for p in range(1, N_PORTS + 1)}


def test_pfc_and_pause_frames_received_are_counted_and_consumed(sw):
    from scapy.all import Ether

    from testbed.pfc.state import PauseFrame
    from testbed.pfc.wire import MIN_FRAME_NO_FCS, encode

    client, wire = sw
    before = _tx_packets()
    pfc = encode(PauseFrame.of({PFC_PRIO: 0xFFFF}), SENDER_MAC)
    pause_8023x = bytes.fromhex("0180c2000001") + bytes.fromhex(SENDER_MAC.replace(":", "")) + \
        bytes.fromhex("88080001ffff")
    wire.send(1, [Ether(pfc), Ether(pause_8023x.ljust(MIN_FRAME_NO_FCS, b"\0"))])
    wire.send(1, _udp("10.0.2.9", ident=77))   # barrier: after the MAC Control frames
    poll(lambda: len(wire.got[2]) + len(wire.got[3]) >= 1, timeout=15, what="the barrier packet")
    assert client.counter_read("pfc_rx", 1).packets == 2
    # the switch sent the barrier and nothing else, on any port (the kernel counts what BMv2 transmits)
    after = _tx_packets()
    assert sum(after[p] - before[p] for p in after) == 1
    assert client.counter_read("drops", 4).packets == 0   # consumed as MAC Control, not "not IP"


def test_pfc_from_the_link_node_behind_a_port_is_relayed_and_holds_back_the_accountings_xon(sw):
    """A PFC frame arriving by port 4 (from the link node behind it, which holds what the switch drains into
    it) is relayed unchanged to port 4's feeders (here port 1) and marks egress 4 held; the accounting of
    ingress 1 then reaches xon while its frames sit behind that egress, so its XON is owed, not sent (it
    would resume the sender the relayed PAUSE stopped). The link node's XON, relayed, resumes the sender;
    its next frame clears the slot's paused state."""
    from scapy.all import Ether

    from testbed.p4rt import entries as E
    from testbed.pfc.state import PauseFrame
    from testbed.pfc.wire import decode, encode

    client, wire = sw
    entries, groups = E.pfc_relay_entries(RELAY)
    assert groups == [(E.pfc_relay_group(4), (1,))]       # created by the fixture (a group outlives the test)
    client.apply(entries)
    _pfc_on_port1(client)   # xoff 3 frames, xon 1
    held, owed = _slot(4), _slot(1)
    node = DMAC[4]          # the link node's frames carry its own MAC
    before = _tx_packets()
    wire.socks[4].send(Ether(encode(PauseFrame.of({PFC_PRIO: QUANTA}), node)))
    poll(lambda: client.register_read("pfc_egress_held", held) == 1, timeout=5, what="egress 4 held")
    poll(lambda: _tx_packets()[1] - before[1] == 1, timeout=5, what="the PAUSE relayed out of port 1")
    assert {p: n - before[p] for p, n in _tx_packets().items() if n != before[p]} == {1: 1}   # only there
    n = 6
    wire.send(1, [_lossless("10.0.4.9", ident=i) for i in range(n)])
    wire.wait(4, n, what="the lossless burst through slow port 4")
    poll(lambda: _drained(client), timeout=5, what="pfc_bytes of ingress 1 back to 0")
    assert [decode(bytes(f)) for f in _pfc_frames(wire)] == [PauseFrame.of({PFC_PRIO: QUANTA})]   # no XON
    assert client.register_read("pfc_xon_owed", owed) == 1 and client.register_read("pfc_paused_at", owed) != 0
    assert client.counter_read("pfc_xon_sent", 1).packets == 0
    # the link node drained: its XON, relayed, resumes the sender
    mid = _tx_packets()
    wire.socks[4].send(Ether(encode(PauseFrame.of({PFC_PRIO: 0}), node)))
    poll(lambda: client.register_read("pfc_egress_held", held) == 0, timeout=5, what="egress 4 released")
    poll(lambda: _tx_packets()[1] - mid[1] == 1, timeout=5, what="the XON relayed out of port 1")
    wire.send(1, _lossless("10.0.4.9", ident=n))        # the resumed sender's next frame
    wire.wait(4, n + 1, what="the resumed sender's frame")
    assert client.register_read("pfc_xon_owed", owed) == 0 and client.register_read("pfc_paused_at", owed) == 0
    assert len(_pfc_frames(wire)) == 1 and client.counter_read("pfc_rx", 4).packets == 2


def test_non_ect_lossless_packets_past_kmax_are_not_dropped(sw):
    client, wire = sw
    client.register_reset("qdepth_peak")
    n = 24
    wire.send(1, [_lossless("10.0.4.9", ident=i, ecn=0) for i in range(n)])
    poll(lambda: client.counter_read("drops", 3).packets + len(wire.got[4]) >= n, timeout=20,
         what="burst of non-ECT lossless packets to be forwarded or dropped")
    got = list(wire.got[4])
    assert sorted(p["IP"].id for p in got) == list(range(n))
    assert client.register_read("qdepth_peak", 4) >= 6   # the queue did pass kmax (6)
    assert client.counter_read("drops", 3).packets == 0
    assert all(p["IP"].tos == PFC_DSCP << 2 for p in got)   # nor marked: not ECT


def test_thrift_port_listens_on_loopback_only(fabric):
    """simple_switch binds Thrift to every interface by itself; the preloaded shim keeps it on loopback."""
    _, _, proc = fabric
    port = proc.cfg.thrift_port
    out = subprocess.run(["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True, check=True).stdout
    local = [line.split()[3] for line in out.splitlines() if line.strip()]
    assert local, f"nothing listens on the Thrift port {port}"
    for addr in local:
        host = addr.rsplit(":", 1)[0].strip("[]")
        assert host in ("127.0.0.1", "::ffff:127.0.0.1", "::1"), f"Thrift listens on {addr}"
