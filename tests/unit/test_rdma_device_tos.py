"""The soft NIC's traffic classes on real sockets: the TOS byte the kernel puts on the wire (loopback).

A PFC fabric classifies by DSCP, so the byte that leaves the host is what matters, not what the QP asked
for: the default class comes from the socket's own TOS, any other from per-datagram ancillary data.
"""

from __future__ import annotations

import socket

from testbed.rdma import wire
from testbed.rdma.device import IP_RECVTOS, Device
from testbed.rdma.qp import QpConfig, Remote
from testbed.rdma.verbs import CompletionQueue


def _listener():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IP, IP_RECVTOS, 1)
    s.bind(("127.0.0.1", 0))
    s.settimeout(2.0)
    return s


def _tos_of_next(s) -> int:
    _data, anc, _flags, _addr = s.recvmsg(4096, 64)
    return next(d[0] for lvl, typ, d in anc if lvl == socket.IPPROTO_IP and typ == socket.IP_TOS)


def _first_data_tos(cfg: QpConfig) -> int:
    with Device("127.0.0.1", 0, seed=3) as dev, _listener() as peer:
        pd, cq = dev.alloc_pd(), CompletionQueue()
        qp = dev.create_qp(pd, cq, cfg)
        dev.connect(qp, Remote(0x42, 0, "127.0.0.1", peer.getsockname()[1]), 0)
        src = pd.reg_mr(bytearray(64))
        qp.post_write(1, src, 0, 64, 0x1000, 0x1234)
        dev.progress()
        return _tos_of_next(peer)


def test_data_leaves_on_roce_dscp_with_ect0_by_default():
    assert _first_data_tos(QpConfig()) == 26 << 2 | 2


def test_a_qp_of_another_dscp_gets_it_per_datagram():
    assert _first_data_tos(QpConfig(dscp=0)) == 0 << 2 | 2
    assert _first_data_tos(QpConfig(dscp=10)) == 10 << 2 | 2


def test_cnp_class_reaches_the_wire():
    with Device("127.0.0.1", 0, seed=4) as dev, _listener() as peer:
        qp = dev.create_qp(dev.alloc_pd(), CompletionQueue(), QpConfig())
        assert qp._out([b"\x81" + bytes(31)], wire.CNP_TOS, ("127.0.0.1", peer.getsockname()[1]))
        assert _tos_of_next(peer) == 48 << 2
