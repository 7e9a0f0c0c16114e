"""Two queue pairs joined by an in-memory wire (one FIFO per direction), for the QP engine's tests.

What a link would do and nothing more: losses decided by ``drop(direction, index, datagram)``, CE marks
by ``mark(direction, index, datagram)``, every datagram's ICRC checked on arrival as the receiving NIC
checks it, and a capture of what the wire carried after the losses (``pcap``), with the IP/UDP headers
the kernel would add. Time advances 1 ms only when nothing moved, so timeouts fire but runs stay short.
"""

from __future__ import annotations

import random
from collections import deque

from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw
from scapy.utils import wrpcap

from testbed.rdma import wire
from testbed.rdma.qp import QpConfig, QueuePair, Remote
from testbed.rdma.verbs import CompletionQueue, ProtectionDomain
from testbed.roce.check import check_capture

A_IP, B_IP = "10.0.0.1", "10.0.0.2"
QPN_A, QPN_B = 0x11, 0x22
PORT = 4791


class Net:
    """QP ``a`` (``A_IP``, ``QPN_A``) and QP ``b`` of one transport; ``sent[direction]`` holds
    ``(time, datagram)`` of everything sent, ``wire`` what survived the losses, in order."""

    def __init__(self, transport="rc", cfg_a=None, cfg_b=None, drop=None, mark=None, psn_a=5,
                 psn_b=(1 << 24) - 3, qkey_b=0x1234):
        self.now = 0.0
        self.seq = 0
        self.wire = []
        self.q = {"ab": deque(), "ba": deque()}
        self.count = {"ab": 0, "ba": 0}
        self.tos = {"ab": [], "ba": []}   # the TOS byte each datagram was sent with, by opcode: (opcode, tos)
        self.sent = {"ab": [], "ba": []}
        self.drop = drop or (lambda d, i, b: False)
        self.mark = mark or (lambda d, i, b: False)
        self.pd_a, self.pd_b = ProtectionDomain(1), ProtectionDomain(2)
        self.cq_a, self.cq_b = CompletionQueue(), CompletionQueue()
        self.sport = {"ab": wire.qp_source_port(QPN_A), "ba": wire.qp_source_port(QPN_B)}
        self.a = QueuePair(QPN_A, self.pd_a, self.cq_a, cfg_a or QpConfig(), self._out("ab"), transport=transport)
        self.b = QueuePair(QPN_B, self.pd_b, self.cq_b, cfg_b or QpConfig(), self._out("ba"), transport=transport,
                           qkey=qkey_b)
        if transport == "ud":
            self.a.ready_ud(A_IP, self.sport["ab"], PORT, psn_a, 0.0)
            self.b.ready_ud(B_IP, self.sport["ba"], PORT, psn_b, 0.0)
        else:
            self.a.connect(Remote(QPN_B, psn_b, B_IP, PORT), wire.Path(A_IP, self.sport["ab"], B_IP, PORT, PORT),
                           psn_a, 0.0)
            self.b.connect(Remote(QPN_A, psn_a, A_IP, PORT), wire.Path(B_IP, self.sport["ba"], A_IP, PORT, PORT),
                           psn_b, 0.0)

    def _out(self, direction):
        def out(parts, tos, dest=None):
            data = b"".join(bytes(p) for p in parts)
            self.tos[direction].append((data[0], tos))
            i = self.count[direction]
            self.count[direction] += 1
            self.seq += 1
            self.sent[direction].append((self.now + self.seq * 1e-7, data))
            if not self.drop(direction, i, data):
                self.q[direction].append((data, self.mark(direction, i, data)))
                self.wire.append((direction, self.now + self.seq * 1e-7, data))
            return True
        return out

    def step(self):
        did = self.a.pump(self.now) + self.b.pump(self.now)
        for direction, dst, src_ip in (("ab", self.b, A_IP), ("ba", self.a, B_IP)):
            while self.q[direction]:
                data, ce = self.q[direction].popleft()
                path = dst.ud_path(src_ip, self.sport[direction]) if dst.transport == "ud" else dst.path
                assert path.rx_icrc_ok(memoryview(data), len(data), self.sport[direction])
                dst.on_datagram(memoryview(data), len(data), ce, self.now)
                did += 1
        if not did:
            self.now += 1e-3
        self.a.on_timer(self.now)
        self.b.on_timer(self.now)

    def run(self, cond, steps=200000):
        for _ in range(steps):
            if cond():
                return
            self.step()
        raise AssertionError("did not finish")

    def wait(self, cq, n=1):
        """Run until ``cq`` has given ``n`` completions; returns them."""
        got = []
        self.run(lambda: got.extend(cq.poll()) or len(got) >= n)
        return got

    def ip(self, direction: str, data: bytes, tos: int = 0) -> IP:
        """``data`` as the IP packet the kernel would send for ``direction`` (DF, ID 0), re-dissected."""
        src, dst = (A_IP, B_IP) if direction == "ab" else (B_IP, A_IP)
        return IP(bytes(IP(src=src, dst=dst, flags="DF", id=0, tos=tos) /
                        UDP(sport=self.sport[direction], dport=PORT) / data))

    def pcap(self, path):
        """Both directions as the wire carries them after the losses (IPv4 DF, ID 0, ECT(0), per-QP
        source port), like tcpdump on a link behind loss injected at the senders."""
        frames = []
        ends = {"ab": (A_IP, B_IP), "ba": (B_IP, A_IP)}
        for direction, t, data in self.wire:
            src, dst = ends[direction]
            f = Ether() / IP(src=src, dst=dst, tos=2, flags="DF", id=0) / \
                UDP(sport=self.sport[direction], dport=PORT) / Raw(data)
            f.time = 1000 + t
            frames.append(f)
        wrpcap(str(path), frames)
        return check_capture(path)


def payload(n, seed=0) -> bytearray:
    """``n`` reproducible pseudo-random bytes."""
    return bytearray(random.Random(seed).randbytes(n))
