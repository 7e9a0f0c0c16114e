"""Packet tests of p4/aggregation.p4 on a live BMv2: the slot lifecycle, checked packet by packet against
the pure model (testbed.agg.model), which must agree on every output and every counter.

    test side          switch (simple_switch_fast, aggregation.p4, programmed by testbed.agg.program)
    agT1 ----- agS1   port 1  h1  job 1 rank 0, job 2 rank 0
    agT2 ----- agS2   port 2  h2  job 1 rank 1, job 2 rank 1
    agT3 ----- agS3   port 3  h3  job 1 rank 2
    agT4 ----- agS4   port 4  h4  (not a worker: its packets are bad-worker drops)
    agT5 ----- agS5   port 5  h5  parameter server of job 1 (window 6, 4 switch slots: 4, 5 spill)

"Nothing else came" is checked with barrier packets (sent on the same port right after the packet under test
and routed to every port; BMv2 keeps order within one ingress port), so no test waits for a fixed time.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

import numpy as np
import pytest

from testbed.agg.model import DROP, MULTICAST, SPILL, UNICAST, SwitchModel
from testbed.agg.program import STATS_COUNTER, AggJob, AggPlan
from testbed.agg.protocol import (
    AGG_PORT,
    ELEMS,
    FLAG_RESULT,
    FLAG_SPILL,
    AggHeader,
    Stat,
    decode,
    encode,
    job_port,
)
from testbed.poll import poll

pytestmark = [pytest.mark.root, pytest.mark.bmv2]

REPO = Path(__file__).resolve().parents[2]
AGG_IP = "10.255.0.1"
N_PORTS = 5
BARRIER_PORT = 9


def _graph():
    from testbed.topo.addressing import assign
    from testbed.topo.generators import big_switch

    G = assign(big_switch(N_PORTS))
    G.nodes[next(n for n in G if G.nodes[n]["role"] != "host")]["p4"] = "aggregation"
    return G


class Wire:
    """AF_PACKET sockets on the test side; ``exchange`` sends a packet and returns what each port got."""

    def __init__(self, ifaces: dict, hosts: dict):
        self.hosts = hosts                              # port -> (mac, ip)
        self.socks = {}
        for p, i in ifaces.items():
            s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0800))
            s.bind((i, 0))
            s.setblocking(False)
            self.socks[p] = s
        self.barrier_no = 0

    def frame(self, port, payload: bytes, dst_ip=AGG_IP, sport=None, dport=AGG_PORT) -> bytes:
        from scapy.all import IP, UDP, Ether
        mac, ip = self.hosts[port]
        return bytes(Ether(src=mac, dst="02:ff:00:00:00:01") / IP(src=ip, dst=dst_ip) /
                     UDP(sport=sport or AGG_PORT, dport=dport) / payload)

    def _read(self, port) -> list[bytes]:
        out = []
        while True:
            try:
                data, addr = self.socks[port].recvfrom(4096)
            except BlockingIOError:
                return out
            if addr[2] != socket.PACKET_OUTGOING:
                out.append(data)

    def exchange(self, port, frame: bytes) -> dict:
        """Send ``frame`` on ``port``; return {port: [(ip src, ip dst, udp dport, header, values)]}."""
        self.socks[port].send(frame)
        self.barrier_no += 1
        tag = f"barrier-{self.barrier_no}".encode()
        # Barriers enter on the same port as the packet under test: BMv2 keeps order within one ingress
        # port, not across ports (each port's receive thread races the others).
        for p in self.socks:
            self.socks[port].send(self.frame(port, tag, dst_ip=self.hosts[p][1], dport=BARRIER_PORT))
        got = {p: [] for p in self.socks}
        done = set()

        def collect():
            for p in self.socks:
                for data in self._read(p):
                    if tag in data:
                        done.add(p)
                    elif data[23] == 17 and p not in done:
                        udp = data[34:42]
                        got[p].append((socket.inet_ntoa(data[26:30]), socket.inet_ntoa(data[30:34]),
                                       int.from_bytes(udp[2:4], "big"), *decode(data[42:])))
            return len(done) == len(self.socks)

        poll(collect, timeout=10, interval=0.005, what=f"barrier {self.barrier_no} on every port")
        return {p: v for p, v in got.items() if v}


@pytest.fixture(scope="module")
def rig(tmp_path_factory):
    from testbed.emu import RunRegistry
    from testbed.p4rt.compile import compile_p4
    from testbed.p4rt.switch import Bmv2Config, Bmv2Process
    from testbed.plan.alloc import Allocator

    G = _graph()
    hs = [n for n in G if G.nodes[n]["role"] == "host"]
    sw = next(n for n in G if G.nodes[n]["role"] != "host")
    plan = AggPlan(G, sw, AGG_IP, [AggJob(1, tuple(hs[:3]), window=6, switch_slots=4, ps=hs[4]),
                                   AggJob(2, tuple(hs[:2]), window=2)])
    port_of = {h: G.edges[sw, h]["ports"][sw] for h in hs}
    hosts = {port_of[h]: (G.nodes[h]["mac"], G.nodes[h]["ip"]) for h in hs}
    out = tmp_path_factory.mktemp("agg")
    with RunRegistry("agg-switch-test") as run:
        for p in range(1, N_PORTS + 1):
            run.add_veth(f"agT{p}", f"agS{p}")
            for i in (f"agT{p}", f"agS{p}"):
                with open(f"/proc/sys/net/ipv6/conf/{i}/disable_ipv6", "w") as f:
                    f.write("1")
        cfg = Bmv2Config(name="agg1", json_path=compile_p4(REPO / "p4" / "aggregation.p4"),
                         ports={p: f"agS{p}" for p in range(1, N_PORTS + 1)}, log_dir=out,
                         **Allocator().switch("agg1"))
        proc = Bmv2Process(cfg).start(run)
        proc.wait_ready()
        with proc.client() as c:
            prog = plan.switch_program(sw)
            c.apply(prog.entries)
            for g, ports in prog.mc_groups.items():
                c.mc_group(g, ports)
            wire = Wire({p: f"agT{p}" for p in range(1, N_PORTS + 1)}, hosts)
            model = SwitchModel(list(plan.entries_by_job.values()))
            yield {"wire": wire, "model": model, "client": c, "plan": plan, "hosts": hosts,
                   "ports": [port_of[h] for h in hs]}


def vec(seed):
    return np.random.default_rng(seed).integers(-(2 ** 31), 2 ** 31, size=ELEMS, dtype=np.int64).astype(np.int32)


def send(rig, worker_port, h: AggHeader, values) -> str:
    """Send one contribution, check the switch did exactly what the model says; return the action."""
    wire, model, hosts = rig["wire"], rig["model"], rig["hosts"]
    got = wire.exchange(worker_port, wire.frame(worker_port, encode(h, values), sport=job_port(h.job)))
    v = model.process(h, values)
    job = next((j for j in rig["plan"].jobs if j.job == h.job), None)
    members = [rig["ports"][rank] for rank in range(len(job.workers))] if job else []
    if v.action == DROP:
        assert got == {}
    elif v.action in (MULTICAST, UNICAST):
        want_ports = sorted(members) if v.action == MULTICAST else [worker_port]
        assert sorted(got) == want_ports
        for p in want_ports:
            (src, ip, dport, rh, rv), = got[p]
            assert (src, ip, dport) == (AGG_IP, hosts[p][1], job_port(h.job))
            assert rh == v.header and rh.flags & FLAG_RESULT
            assert np.array_equal(rv, v.values)
    elif v.action == SPILL:
        ps_ip = rig["plan"].entries_by_job[h.job].ps_ip
        (p, [(_, ip, dport, rh, rv)]), = got.items()
        assert hosts[p][1] == ps_ip == ip and dport == AGG_PORT
        assert rh.flags & FLAG_SPILL and np.array_equal(rv, values)
    return v.action


def h1(worker, slot, shadow=0, seq=0, job=1, **kw):
    return AggHeader(job=job, worker=worker, slot=slot, shadow=shadow, seq=seq, **kw)


def test_slot_lifecycle_first_duplicate_complete_shadow_reuse(rig):
    P = rig["ports"]
    assert send(rig, P[0], h1(0, 0, exponent=-3), vec(1)) == DROP          # first contribution
    assert send(rig, P[0], h1(0, 0), vec(2)) == DROP                         # duplicate ignored
    assert send(rig, P[1], h1(1, 0, exponent=9), vec(3)) == DROP
    assert send(rig, P[2], h1(2, 0), vec(4)) == MULTICAST                    # result to the 3 workers
    assert send(rig, P[1], h1(1, 0), vec(5)) == UNICAST                      # shadow copy answers
    for w in range(3):                                                       # next use: the other copy
        send(rig, P[w], h1(w, 0, shadow=1, seq=6), vec(10 + w))
    for w in range(3):                                                       # copy 0 reused, no stale sum
        send(rig, P[w], h1(w, 0, seq=12), vec(20 + w))
    c = rig["client"]
    assert c.register_read("AggIngress.slots.bitmap", 0) == 0b111


def test_job_isolation_and_malformed_drops(rig):
    P = rig["ports"]
    send(rig, P[0], h1(0, 1, job=2), vec(30))                                # job 2 slot 1 = switch slot 5
    before = dict(rig["model"].stats)
    for port, h in [(P[0], h1(0, 1, job=7)),                                 # unknown job
                    (P[0], h1(0, 6)),                                        # index beyond job 1's limit
                    (P[0], h1(0, 2, job=2)),                                 # beyond job 2's window
                    (P[3], h1(3, 1)),                                        # not a member of job 1
                    (P[0], h1(0, 1, count=ELEMS - 1)),                       # wrong element count
                    (P[1], h1(1, 1, job=2, flags=FLAG_RESULT))]:             # a forged result
        assert send(rig, port, h, vec(99)) == DROP
    assert sum(rig["model"].stats.values()) - sum(before.values()) == 6
    assert send(rig, P[1], h1(1, 1, job=2), vec(31)) == MULTICAST            # job 2 unharmed
    for w in range(3):                                                        # job 1's slot 1 unharmed
        send(rig, P[w], h1(w, 1), vec(40 + w))


def test_exhausted_indices_spill_to_the_parameter_server(rig):
    P = rig["ports"]
    assert send(rig, P[0], h1(0, 4), vec(50)) == SPILL
    assert send(rig, P[2], h1(2, 5, shadow=1), vec(51)) == SPILL


def test_random_traffic_agrees_with_the_model(rig):
    rng = random.Random(8)
    P = rig["ports"]
    for i in range(60):
        job = rng.choice([1, 1, 2])
        worker = rng.randrange(3 if job == 1 else 2)
        h = h1(worker, rng.randrange(4 if job == 1 else 2), shadow=rng.randrange(2), seq=i, job=job,
               exponent=rng.randrange(-20, 20))
        send(rig, P[worker], h, vec(100 + i))


def test_counters_match_the_model(rig):
    c, model = rig["client"], rig["model"]
    for stat in Stat:
        assert c.counter_read(STATS_COUNTER, int(stat)).packets == model.stats[stat], stat.name
