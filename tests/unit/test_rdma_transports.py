"""READ, atomics, UC and UD in the queue pair engine over an in-memory wire; every byte checked, and the
datagrams of each transport, wrapped in the IP/UDP headers the kernel would add, pass ``roce check``."""

from __future__ import annotations

import random
import struct

import pytest

from testbed.rdma import wire
from testbed.rdma.qp import GRH_LEN, QpConfig, QpState, UdDest
from testbed.rdma.verbs import (
    LOCAL_WRITE,
    REMOTE_ATOMIC,
    REMOTE_READ,
    REMOTE_WRITE,
    RdmaError,
    WcOpcode,
    WcStatus,
)
from testbed.roce.check import passed
from tests.unit.qpnet import B_IP, PORT, QPN_A, QPN_B, Net, payload

ALL = LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ | REMOTE_ATOMIC


def _opcodes(net, direction):
    return [data[0] for _, data in net.sent[direction]]


def _psns(net, direction):
    return [struct.unpack_from("!I", data, 8)[0] & 0xFFFFFF for _, data in net.sent[direction]]


# -- READ -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("size", [0, 1, 1024, 5000, 100_003])
def test_read_is_byte_exact_and_reserves_psns(size, tmp_path):
    net = Net()
    remote, local = payload(size, 3), bytearray(size + 16)
    mb = net.pd_b.reg_mr(remote, ALL)
    ma = net.pd_a.reg_mr(local)
    net.a.post_read(4, ma, 8, size, mb.addr, mb.rkey)
    (wc,) = net.wait(net.cq_a)
    assert wc.status is WcStatus.SUCCESS and wc.opcode is WcOpcode.RDMA_READ and wc.byte_len == size
    assert local[8:8 + size] == remote and local[:8] == bytes(8) and local[8 + size:] == bytes(8)
    n = max(1, -(-size // 1024))
    chunks = -(-n // 64)  # one READ request per half window (64) of responses
    assert _opcodes(net, "ab") == [0x0C] * chunks
    assert _psns(net, "ab") == [5 + 64 * k for k in range(chunks)]
    want = []
    for k in range(chunks):
        m = min(64, n - 64 * k)
        want += [0x10] if m == 1 else [0x0D] + [0x0E] * (m - 2) + [0x0F]
    assert _opcodes(net, "ba") == want
    assert _psns(net, "ba") == [(5 + i) % (1 << 24) for i in range(n)]
    # the next request takes the PSN after the READ's reservation
    mw = net.pd_b.reg_mr(bytearray(4))
    net.a.post_write(5, ma, 0, 4, mw.addr, mw.rkey)
    net.wait(net.cq_a)
    assert _psns(net, "ab")[-1] == 5 + n
    rep = net.pcap(tmp_path / "read.pcap")
    assert passed(rep), rep["violations"]


def test_lost_read_response_is_re_requested():
    net = Net(drop=lambda d, i, data: d == "ba" and i == 3)
    remote, local = payload(20_000, 5), bytearray(20_000)
    mb, ma = net.pd_b.reg_mr(remote, ALL), net.pd_a.reg_mr(local)
    net.a.post_read(1, ma, 0, 20_000, mb.addr, mb.rkey)
    assert net.wait(net.cq_a)[0].status is WcStatus.SUCCESS and local == remote
    assert net.a.stats.read_retries == 1 and net.b.stats.duplicates_rx == 1  # re-executed (IBA 9.4.3.1)
    retry = net.sent["ab"][1][1]
    assert retry[0] == 0x0C and struct.unpack_from("!I", retry, 8)[0] & 0xFFFFFF == 5 + 3
    assert struct.unpack_from("!QII", retry, 12)[2] == 20_000 - 3 * 1024  # the rest from the lost one


def test_read_without_remote_read_access():
    net = Net()
    mb = net.pd_b.reg_mr(bytearray(100), LOCAL_WRITE | REMOTE_WRITE)
    ma = net.pd_a.reg_mr(bytearray(100))
    net.a.post_read(1, ma, 0, 100, mb.addr, mb.rkey)
    assert net.wait(net.cq_a)[0].status is WcStatus.REM_ACCESS_ERR and net.a.state is QpState.ERROR


def test_write_read_write_complete_in_order_with_loss(tmp_path):
    rng = random.Random(2)
    net = Net(cfg_a=QpConfig(window=32, timeout=0.01), drop=lambda d, i, data: rng.random() < 0.05)
    src = payload(30_000, 1)
    remote = bytearray(30_000)
    back = bytearray(30_000)
    ma, mb, mback = net.pd_a.reg_mr(src), net.pd_b.reg_mr(remote, ALL), net.pd_a.reg_mr(back)
    net.a.post_write(1, ma, 0, 10_000, mb.addr, mb.rkey)
    net.a.post_read(2, mback, 0, 10_000, mb.addr, mb.rkey)   # reads what WRITE 1 placed
    net.a.post_write(3, ma, 10_000, 20_000, mb.addr + 10_000, mb.rkey)
    net.a.post_read(4, mback, 10_000, 20_000, mb.addr + 10_000, mb.rkey)
    wcs = net.wait(net.cq_a, 4)
    assert [w.wr_id for w in wcs] == [1, 2, 3, 4] and all(w.status is WcStatus.SUCCESS for w in wcs)
    assert remote == src and back == src and net.a.stats.retransmissions > 0
    rep = net.pcap(tmp_path / "mixed.pcap")
    assert passed(rep), rep["violations"]


# -- atomics ---------------------------------------------------------------------------------------
def test_fetch_add_and_compare_swap(tmp_path):
    net = Net()
    target = bytearray(16)
    mb = net.pd_b.reg_mr(target, ALL)
    res = bytearray(8 * 12)
    ma = net.pd_a.reg_mr(res)
    for i in range(10):
        net.a.post_atomic(i, ma, 8 * i, mb.addr + 8, mb.rkey, "faa", 3)
    net.a.post_atomic(10, ma, 80, mb.addr + 8, mb.rkey, "cas", 77, compare=30)   # matches: swaps
    net.a.post_atomic(11, ma, 88, mb.addr + 8, mb.rkey, "cas", 99, compare=30)   # no longer: keeps
    wcs = net.wait(net.cq_a, 12)
    assert all(w.status is WcStatus.SUCCESS for w in wcs)
    assert [w.opcode for w in wcs] == [WcOpcode.FETCH_ADD] * 10 + [WcOpcode.COMP_SWAP] * 2
    originals = [struct.unpack_from("<Q", res, 8 * i)[0] for i in range(12)]
    assert originals == [3 * i for i in range(10)] + [30, 77]
    assert struct.unpack_from("<Q", target, 8)[0] == 77 and target[:8] == bytes(8)
    assert set(_opcodes(net, "ba")) == {0x12}
    rep = net.pcap(tmp_path / "atomic.pcap")
    assert passed(rep), rep["violations"]


def test_resent_atomic_is_answered_from_memory_not_executed_twice():
    lost = []

    def drop(d, i, data):
        if d == "ba" and data[0] == 0x12 and not lost:
            lost.append(i)
            return True
        return False

    net = Net(cfg_a=QpConfig(timeout=0.01), drop=drop)
    target = bytearray(8)
    mb, ma = net.pd_b.reg_mr(target, ALL), net.pd_a.reg_mr(bytearray(8))
    net.a.post_atomic(1, ma, 0, mb.addr, mb.rkey, "faa", 5)
    assert net.wait(net.cq_a)[0].status is WcStatus.SUCCESS
    assert net.a.stats.timeouts == 1 and net.b.stats.duplicates_rx == 1
    assert struct.unpack("<Q", target)[0] == 5 and net.b.stats.atomics_rx == 1


def test_atomic_alignment_is_checked():
    net = Net()
    ma = net.pd_a.reg_mr(bytearray(8))
    with pytest.raises(RdmaError, match="aligned"):
        net.a.post_atomic(1, ma, 0, 0x1004, 1, "faa", 1)


# -- UC ---------------------------------------------------------------------------------------------
def test_uc_write_and_send_without_acks(tmp_path):
    net = Net("uc")
    src, dst = payload(5000, 8), bytearray(5000)
    ma, mb = net.pd_a.reg_mr(src), net.pd_b.reg_mr(dst)
    rbuf = bytearray(4096)
    net.b.post_recv(9, net.pd_b.reg_mr(rbuf))
    net.a.post_write(1, ma, 0, 5000, mb.addr, mb.rkey)
    net.a.post_send(2, ma, 0, 3000)
    wcs = net.wait(net.cq_a, 2)
    net.run(lambda: len(net.cq_b) > 0)
    assert [w.opcode for w in wcs] == [WcOpcode.RDMA_WRITE, WcOpcode.SEND]
    assert dst == src and rbuf[:3000] == src[:3000] and net.cq_b.poll()[0].byte_len == 3000
    assert net.sent["ba"] == [] and all(0x20 <= op < 0x40 for op in _opcodes(net, "ab"))
    rep = net.pcap(tmp_path / "uc.pcap")
    assert passed(rep), rep["violations"]


def test_uc_loss_drops_the_message_not_the_next():
    net = Net("uc", drop=lambda d, i, data: d == "ab" and i == 1)  # the middle of message 1
    src = payload(6000, 4)
    d1, d2 = bytearray(3000), bytearray(3000)
    ma, m1, m2 = net.pd_a.reg_mr(src), net.pd_b.reg_mr(d1), net.pd_b.reg_mr(d2)
    net.a.post_write(1, ma, 0, 3000, m1.addr, m1.rkey)
    net.a.post_write(2, ma, 3000, 3000, m2.addr, m2.rkey)
    net.wait(net.cq_a, 2)
    net.run(lambda: not net.q["ab"])
    assert d2 == src[3000:] and d1[1024:2048] == bytes(1024)
    assert net.b.state is QpState.RTS and net.a.stats.retransmissions == 0


# -- UD ---------------------------------------------------------------------------------------------
def test_ud_send_with_deth_qkey_and_grh_room(tmp_path):
    net = Net("ud")
    src = payload(1000, 6)
    ma = net.pd_a.reg_mr(src)
    rbuf = bytearray(3 * 2048)
    mr = net.pd_b.reg_mr(rbuf)
    for i in range(3):
        net.b.post_recv(i, mr, i * 2048, 2048)
    dest = UdDest(B_IP, PORT, QPN_B, 0x1234)
    net.a.post_send(1, ma, 0, 1000, dest=dest)
    net.a.post_send(2, ma, 0, 1000, dest=UdDest(B_IP, PORT, QPN_B, 0x9999))  # wrong Q_Key: dropped
    net.a.post_send(3, ma, 0, 500, imm=0xABCD, dest=dest)
    assert [w.status for w in net.wait(net.cq_a, 3)] == [WcStatus.SUCCESS] * 3
    net.run(lambda: not net.q["ab"])
    recvs = net.cq_b.poll()
    assert [(w.wr_id, w.byte_len, w.src_qp, w.imm) for w in recvs] == \
        [(0, GRH_LEN + 1000, QPN_A, None), (1, GRH_LEN + 500, QPN_A, 0xABCD)]
    assert rbuf[GRH_LEN:GRH_LEN + 1000] == src and rbuf[2048 + GRH_LEN:2048 + GRH_LEN + 500] == src[:500]
    assert net.b.stats.ud_dropped_rx == 1
    assert _opcodes(net, "ab") == [0x64, 0x64, 0x65]
    deth = struct.unpack_from("!II", net.sent["ab"][0][1], 12)
    assert deth == (0x1234, QPN_A)
    rep = net.pcap(tmp_path / "ud.pcap")
    assert passed(rep), rep["violations"]


def test_ud_message_larger_than_mtu_is_refused():
    net = Net("ud")
    ma = net.pd_a.reg_mr(bytearray(2000))
    with pytest.raises(RdmaError, match="one packet"):
        net.a.post_send(1, ma, 0, 2000, dest=UdDest(B_IP, PORT, QPN_B, 1))
    with pytest.raises(RdmaError, match="SENDs only"):
        net.a.post_write(1, ma, 0, 10, 0, 0)


# -- UDP source port per QP -------------------------------------------------------------------------
def test_source_port_per_qp_spreads_and_stays_in_the_dynamic_range():
    ports = [wire.qp_source_port(q) for q in range(1, 5000)]
    assert all(0xC000 <= p <= 0xFFFF for p in ports)
    assert len(set(ports)) > 3000  # a hash, not a constant
    assert wire.qp_source_port(0x11) == wire.qp_source_port(0x11)
    # Linux hash_32(val, 14) = (val * 0x61C88647 mod 2^32) >> 18: the multiply wraps at 32 bits
    assert wire.qp_source_port(0xFFFFFF) == 0xC000 + (((0xFFFFFF * 0x61C88647) % (1 << 32)) >> 18)
