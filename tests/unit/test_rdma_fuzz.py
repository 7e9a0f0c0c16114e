"""Fuzzed RoCE datagrams into a live soft-RDMA endpoint on loopback while a transfer runs beside them."""

from __future__ import annotations

import socket

import pytest

from testbed.rdma import wire
from testbed.rdma.device import Device
from testbed.rdma.qp import QpConfig, QpState, Remote
from testbed.rdma.verbs import CompletionQueue, WcStatus
from testbed.roce.craft import fuzzed_datagrams


def test_fuzz_beside_a_transfer():
    a, b = Device("127.0.0.1", 0, seed=1), Device("127.0.0.1", 0, seed=2)
    try:
        pa, pb = a.alloc_pd(), b.alloc_pd()
        cqa = CompletionQueue()
        qa = a.create_qp(pa, cqa, QpConfig(timeout=0.02))
        qb = b.create_qp(pb, CompletionQueue(), QpConfig())
        a.connect(qa, Remote(qb.qpn, 7, b.ip, b.port), 3)
        b.connect(qb, Remote(qa.qpn, 3, a.ip, a.port), 7)
        size = 2_000_000
        src, dst = bytearray(range(256)) * (size // 256), bytearray(size - size % 256)
        src = src[:len(dst)]
        ma, mb = pa.reg_mr(src), pb.reg_mr(dst)
        qa.post_write(1, ma, 0, len(src), mb.addr, mb.rkey)
        datagrams = fuzzed_datagrams(600, seed=3)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as fz:
            fz.bind(("127.0.0.1", 0))
            # half of them aimed at the live QPs with a correct ICRC, so they reach the QP engine
            paths = {b.port: wire.Path("127.0.0.1", fz.getsockname()[1], b.ip, b.port),
                     a.port: wire.Path("127.0.0.1", fz.getsockname()[1], a.ip, a.port)}
            wcs = []
            for i, d in enumerate(datagrams):
                target, qpn = ((b.port, qb.qpn), (a.port, qa.qpn))[i % 2]
                if i % 4 < 2 and len(d) >= 16:
                    body = bytearray(d[:-4])
                    body[5:8] = qpn.to_bytes(3, "big")
                    d = bytes(body) + paths[target].tx_icrc([bytes(body)])
                fz.sendto(d, ("127.0.0.1", target))
                a.progress()
                b.progress()
                wcs += cqa.poll()
            for _ in range(200000):
                if wcs:
                    break
                a.progress(timeout=0.001)
                b.progress(timeout=0.001)
                wcs += cqa.poll()
        assert wcs and wcs[0].status is WcStatus.SUCCESS, qa.error
        assert dst == src and qa.state is QpState.RTS and qb.state is QpState.RTS
        rejected = sum(d.stats[k] for d in (a, b) for k in ("rx_malformed", "rx_icrc_bad", "rx_unknown_qp"))
        engine = sum(q.stats.malformed_rx + q.stats.out_of_order_rx + q.stats.duplicates_rx for q in (qa, qb))
        assert rejected > 200 and engine > 0  # the fuzz was seen and set aside, not applied
    finally:
        a.close()
        b.close()


@pytest.mark.ipv6
def test_ipv6_loopback_write():
    """The same data path over IPv6 (the ICRC then covers the IPv6 header with its masked fields)."""
    a, b = Device("::1", 0, seed=1), Device("::1", 0, seed=2)
    with a, b:
        pa, pb = a.alloc_pd(), b.alloc_pd()
        cq = CompletionQueue()
        qa = a.create_qp(pa, cq)
        qb = b.create_qp(pb, CompletionQueue())
        a.connect(qa, Remote(qb.qpn, 1, b.ip, b.port), 2)
        b.connect(qb, Remote(qa.qpn, 2, a.ip, a.port), 1)
        src, dst = bytearray(range(256)) * 100, bytearray(25600)
        ma, mb = pa.reg_mr(src), pb.reg_mr(dst)
        qa.post_write(1, ma, 0, len(src), mb.addr, mb.rkey)
        a_done = []
        for _ in range(100000):
            a.progress()
            b.progress()
            a_done += cq.poll()
            if a_done:
                break
        assert a_done[0].status is WcStatus.SUCCESS and dst == src
        assert b.stats["rx_icrc_bad"] == 0
