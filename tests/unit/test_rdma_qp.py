"""The RC queue pair engine over an in-memory wire: placement, go-back-N, timeouts, errors, DCQCN."""

from __future__ import annotations

import random

import pytest

from testbed.rdma.dcqcn import DcqcnParams
from testbed.rdma.qp import QpConfig, QpState
from testbed.rdma.verbs import RdmaError, WcOpcode, WcStatus
from testbed.roce.layers import BTH, RETH, icrc_valid
from tests.unit.qpnet import Net, payload


@pytest.mark.parametrize("size", [0, 1, 1023, 1024, 1025, 100_003])
def test_write_places_bytes_exactly(size):
    net = Net()
    src, dst = payload(size), bytearray(size + 64)
    ma, mb = net.pd_a.reg_mr(src), net.pd_b.reg_mr(dst)
    net.a.post_write(7, ma, 0, size, mb.addr + 32, mb.rkey)
    (wc,) = net.wait(net.cq_a)
    assert wc.status is WcStatus.SUCCESS and wc.wr_id == 7 and wc.opcode is WcOpcode.RDMA_WRITE
    assert dst[32:32 + size] == src and dst[:32] == bytes(32) and dst[32 + size:] == bytes(32)
    assert net.a.stats.retransmissions == 0


def test_psn_wraps_inside_a_message():
    net = Net(psn_a=(1 << 24) - 2)
    src, dst = payload(8000), bytearray(8000)
    ma, mb = net.pd_a.reg_mr(src), net.pd_b.reg_mr(dst)
    net.a.post_write(1, ma, 0, 8000, mb.addr, mb.rkey)
    assert net.wait(net.cq_a)[0].status is WcStatus.SUCCESS and dst == src


def test_datagrams_are_valid_roce_for_scapy():
    """The engine's bytes, wrapped in the IP/UDP headers the kernel would add, dissect and verify."""
    net = Net()
    src, dst = payload(3000), bytearray(3000)
    ma, mb = net.pd_a.reg_mr(src), net.pd_b.reg_mr(dst)
    net.a.post_write(1, ma, 0, 3000, mb.addr, mb.rkey)
    net.wait(net.cq_a)
    first = net.sent["ab"][0][1]
    pkt = net.ip("ab", first, tos=2)
    assert pkt[BTH].opcode == 0x06 and pkt[RETH].dmalen == 3000 and pkt[RETH].rkey == mb.rkey
    assert icrc_valid(pkt)
    last = net.ip("ab", net.sent["ab"][2][1])
    assert last[BTH].opcode == 0x08 and last[BTH].ackreq == 1 and last[BTH].padcount == 0 and icrc_valid(last)


def test_single_loss_nak_and_go_back_n():
    lost = set()

    def drop(d, i, data):
        if d == "ab" and i == 3 and not lost:
            lost.add(i)
            return True
        return False

    net = Net(cfg_b=QpConfig(reorder=0), drop=drop)  # strict IB responder: NAK at the first gap
    src, dst = payload(10 * 1024), bytearray(10 * 1024)
    ma, mb = net.pd_a.reg_mr(src), net.pd_b.reg_mr(dst)
    net.a.post_write(1, ma, 0, len(src), mb.addr, mb.rkey)
    assert net.wait(net.cq_a)[0].status is WcStatus.SUCCESS and dst == src
    assert net.b.stats.naks_tx == 1 and net.a.stats.naks_rx == 1  # one NAK per sequence error
    assert net.a.stats.retransmissions >= 7 and net.a.stats.timeouts == 0  # went back to PSN 3 of 0..9


def test_reordered_packets_are_held_not_naked():
    held = []

    def drop(d, i, data):
        if d == "ab" and i == 2:
            held.append(data)
            return True
        if d == "ab" and i == 4:
            net.q["ab"].append((held.pop(), False))  # PSN 2 arrives after PSN 3
        return False

    net = Net(drop=drop)
    src, dst = payload(8 * 1024), bytearray(8 * 1024)
    ma, mb = net.pd_a.reg_mr(src), net.pd_b.reg_mr(dst)
    net.a.post_write(1, ma, 0, len(src), mb.addr, mb.rkey)
    assert net.wait(net.cq_a)[0].status is WcStatus.SUCCESS and dst == src
    assert net.b.stats.out_of_order_rx == 1 and net.b.stats.naks_tx == 0 and net.a.stats.retransmissions == 0


def test_gap_beyond_the_reorder_tolerance_is_naked():
    net = Net(cfg_b=QpConfig(reorder=4), drop=lambda d, i, data: d == "ab" and i == 1)
    src, dst = payload(12 * 1024), bytearray(12 * 1024)
    ma, mb = net.pd_a.reg_mr(src), net.pd_b.reg_mr(dst)
    net.a.post_write(1, ma, 0, len(src), mb.addr, mb.rkey)
    assert net.wait(net.cq_a)[0].status is WcStatus.SUCCESS and dst == src
    assert net.b.stats.naks_tx == 1 and net.a.stats.timeouts == 0


def test_random_loss_both_directions_is_repaired():
    rng = random.Random(4)
    net = Net(cfg_a=QpConfig(window=32), drop=lambda d, i, data: rng.random() < 0.05)
    size = 300_000
    src, dst = payload(size, 9), bytearray(size)
    ma, mb = net.pd_a.reg_mr(src), net.pd_b.reg_mr(dst)
    for k in range(3):
        net.a.post_write(k, ma, k * 100_000, 100_000, mb.addr + k * 100_000, mb.rkey)
    wcs = net.wait(net.cq_a, 3)
    assert [w.wr_id for w in wcs] == [0, 1, 2] and all(w.status is WcStatus.SUCCESS for w in wcs)
    assert dst == src and net.a.stats.retransmissions > 0


def test_timeout_retry_limit_moves_qp_to_error():
    net = Net(cfg_a=QpConfig(retry_limit=3, timeout=0.01), drop=lambda d, i, data: d == "ab")
    src, dst = payload(5000), bytearray(5000)
    ma, mb = net.pd_a.reg_mr(src), net.pd_b.reg_mr(dst)
    net.a.post_write(1, ma, 0, 5000, mb.addr, mb.rkey)
    net.a.post_write(2, ma, 0, 10, mb.addr, mb.rkey)
    wcs = net.wait(net.cq_a, 2)
    assert [w.status for w in wcs] == [WcStatus.RETRY_EXC_ERR, WcStatus.WR_FLUSH_ERR]
    assert net.a.state is QpState.ERROR and net.a.stats.timeouts == 4
    with pytest.raises(RdmaError, match="error state.*retries"):
        net.a.post_write(3, ma, 0, 1, mb.addr, mb.rkey)


def test_bad_rkey_and_out_of_bounds_are_remote_access_errors():
    net = Net()
    src, dst = payload(100), bytearray(100)
    ma, mb = net.pd_a.reg_mr(src), net.pd_b.reg_mr(dst)
    net.a.post_write(1, ma, 0, 100, mb.addr + 1, mb.rkey)  # one byte past the end
    assert net.wait(net.cq_a)[0].status is WcStatus.REM_ACCESS_ERR
    assert dst == bytes(100) and net.a.state is QpState.ERROR


def test_send_recv_with_immediate_and_rnr_retry():
    net = Net(cfg_a=QpConfig(rnr_delay=0.002))
    src = payload(2500)
    ma = net.pd_a.reg_mr(src)
    rbuf = bytearray(4096)
    mr_r = net.pd_b.reg_mr(rbuf)
    net.a.post_send(9, ma, 0, 2500, imm=0xC0FFEE)
    for _ in range(5):  # no receive posted yet: RNR NAKs
        net.step()
    assert net.a.stats.naks_rx >= 1 and net.cq_b.poll() == []
    net.b.post_recv(77, mr_r)
    send_wc = net.wait(net.cq_a)[0]
    recv_wc = net.cq_b.poll()[0]
    assert send_wc.status is WcStatus.SUCCESS and send_wc.opcode is WcOpcode.SEND
    assert (recv_wc.wr_id, recv_wc.byte_len, recv_wc.imm, recv_wc.opcode) == (77, 2500, 0xC0FFEE, WcOpcode.RECV)
    assert rbuf[:2500] == src


def test_write_with_immediate_consumes_a_receive():
    net = Net()
    src, dst = payload(5000), bytearray(5000)
    ma, mb = net.pd_a.reg_mr(src), net.pd_b.reg_mr(dst)
    net.b.post_recv(5, net.pd_b.reg_mr(bytearray(1)))
    net.a.post_write(1, ma, 0, 5000, mb.addr, mb.rkey, imm=1234)
    net.wait(net.cq_a)
    wc = net.cq_b.poll()[0]
    assert wc.opcode is WcOpcode.RECV_RDMA_WITH_IMM and wc.imm == 1234 and wc.byte_len == 5000 and dst == src


def test_ce_marks_trigger_cnps_and_rate_cuts():
    params = DcqcnParams(line_rate=1e9, cnp_interval=5e-3)
    net = Net(cfg_a=QpConfig(dcqcn=params), cfg_b=QpConfig(dcqcn=params),
              mark=lambda d, i, data: d == "ab")
    size = 200_000
    src, dst = payload(size), bytearray(size)
    ma, mb = net.pd_a.reg_mr(src), net.pd_b.reg_mr(dst)
    net.a.post_write(1, ma, 0, size, mb.addr, mb.rkey)
    assert net.wait(net.cq_a)[0].status is WcStatus.SUCCESS and dst == src
    assert net.b.stats.ce_rx > net.b.stats.cnps_tx >= 1  # at most one CNP per interval
    assert net.a.stats.cnps_rx == net.b.stats.cnps_tx and net.a.rp.rate < params.line_rate
    assert net.a.rp.cnps == net.a.stats.cnps_rx


def test_traffic_classes_data_acks_and_cnps():
    """As a ConnectX NIC by default: data ECT(0) on DSCP 26 (PFC priority 3), ACKs Not-ECT on the QP's DSCP,
    CNPs Not-ECT on DSCP 48 (priority 6); a QP given DSCP 0 sends its data and ACKs there, CNPs stay on 48."""
    from testbed.roce.opcodes import ACK, CNP

    params = DcqcnParams(line_rate=1e9, cnp_interval=5e-3)
    for dscp in (None, 0):
        cfg = QpConfig(dcqcn=params) if dscp is None else QpConfig(dcqcn=params, dscp=dscp)
        net = Net(cfg_a=cfg, cfg_b=cfg, mark=lambda d, i, data: d == "ab")
        src, dst = payload(50_000), bytearray(50_000)
        ma, mb = net.pd_a.reg_mr(src), net.pd_b.reg_mr(dst)
        net.a.post_write(1, ma, 0, 50_000, mb.addr, mb.rkey)
        assert net.wait(net.cq_a)[0].status is WcStatus.SUCCESS
        want = 26 if dscp is None else dscp
        by_op = {}
        for direction in ("ab", "ba"):
            for op, tos in net.tos[direction]:
                by_op.setdefault(op, set()).add(tos)
        assert by_op[0x06] | by_op[0x07] | by_op[0x08] == {want << 2 | 2}   # RC RDMA WRITE first/middle/last
        assert by_op[ACK] == {want << 2} and by_op[CNP] == {48 << 2}


def test_rate_limit_paces_a_qp_with_or_without_dcqcn():
    """A static per-QP limit (ibv_modify_qp_rate_limit): 200 KB at 8 Mb/s takes >= 0.2 s of the net's clock;
    with DCQCN (line rate 1 Gb/s, nothing marked) the limit still holds; without it the window is the limit."""
    size = 200_000

    def took(cfg):
        net = Net(cfg_a=cfg)
        src, dst = payload(size), bytearray(size)
        ma, mb = net.pd_a.reg_mr(src), net.pd_b.reg_mr(dst)
        net.a.post_write(1, ma, 0, size, mb.addr, mb.rkey)
        assert net.wait(net.cq_a)[0].status is WcStatus.SUCCESS and dst == src
        return net.now

    wire_bytes = size + (size // 1024 + 1) * 42
    assert took(QpConfig(rate_limit=8e6)) >= 0.95 * wire_bytes * 8 / 8e6
    assert took(QpConfig(rate_limit=8e6, dcqcn=DcqcnParams(line_rate=1e9))) >= 0.95 * wire_bytes * 8 / 8e6
    assert took(QpConfig()) < 0.05
    with pytest.raises(RdmaError, match="rate_limit"):
        QpConfig(rate_limit=0)


def test_dscp_out_of_range_is_refused():
    for bad in (-1, 64, 26.0, True):
        with pytest.raises(RdmaError, match="dscp"):
            QpConfig(dscp=bad)


def test_post_outside_region_raises():
    net = Net()
    ma = net.pd_a.reg_mr(bytearray(10))
    with pytest.raises(RdmaError, match="outside"):
        net.a.post_write(1, ma, 5, 10, 0, 0)


def test_garbage_datagrams_are_counted_not_raised():
    net = Net()
    for data in (b"", b"\x11" * 15, bytes([0x11]) + bytes(15), bytes([0x0C]) + bytes(40), bytes([0x06]) + bytes(20)):
        net.b.on_datagram(memoryview(data), len(data), False, 0.0)
    assert net.b.stats.malformed_rx >= 3 and net.b.state is QpState.RTS


@pytest.mark.parametrize("rate, lost", [(5e6, False), (1e9, True)])
def test_a_sender_that_wakes_late_for_its_pacing_counts_the_allowance_it_lost(rate, lost):
    """The in-memory wire wakes the QPs every 1 ms when nothing is in flight. At 5 Mbit/s a millisecond of
    tokens (625 bytes) fits the line-rate bucket's two frames (and the 16-MTU DCQCN cap): the pacer loses
    nothing. At 1 Gbit/s it brings 125 kB, of which all but the cap is allowance the sender could not use:
    a CPU-bound sender's mark."""
    params = DcqcnParams(line_rate=rate)
    net = Net(cfg_a=QpConfig(dcqcn=params, line_burst_frames=2), cfg_b=QpConfig(dcqcn=params))
    size = 40_000   # 64 ms at 5 Mbit/s: within the QP's retry timeout
    src, dst = payload(size), bytearray(size)
    ma, mb = net.pd_a.reg_mr(src), net.pd_b.reg_mr(dst)
    net.a.post_write(1, ma, 0, size, mb.addr, mb.rkey)
    assert net.wait(net.cq_a)[0].status is WcStatus.SUCCESS and dst == src
    s = net.a.stats
    share = s.pacing_lost_bytes / (s.pacing_lost_bytes + s.tx_bytes)
    if lost:
        assert share > 0.5 and 0.5e-3 < s.pacing_late_max_s <= 1e-3 + 1e-9
    else:
        assert s.pacing_lost_bytes == 0 and s.pacing_late_max_s <= 1e-3


def test_the_pacer_never_hands_the_wire_more_than_two_frames_beyond_the_line_rate():
    """After idle time DCQCN's bucket holds 16 frames of allowance. A NIC sends them at line rate; a
    userspace sender's socket would take them at once and leave a standing queue at the link that no CNP
    reaches. Counted on the in-memory wire's clock: from the first frame to any instant, the wire got at
    most what the line rate allows plus LINE_BURST_FRAMES frames (and the frame that started it)."""
    from testbed.rdma.qp import LINE_BURST_FRAMES

    line = 10e6
    params = DcqcnParams(line_rate=line)
    net = Net(cfg_a=QpConfig(dcqcn=params, line_burst_frames=LINE_BURST_FRAMES), cfg_b=QpConfig(dcqcn=params))
    for _ in range(500):                     # 0.5 s idle: DCQCN's bucket fills to its cap
        net.step()
    size = 60_000
    src, dst = payload(size), bytearray(size)
    ma, mb = net.pd_a.reg_mr(src), net.pd_b.reg_mr(dst)
    net.a.post_write(1, ma, 0, size, mb.addr, mb.rkey)
    assert net.wait(net.cq_a)[0].status is WcStatus.SUCCESS and dst == src
    sent = [(t, len(d) + 42) for t, d in net.sent["ab"]]
    t0, frame = sent[0][0], max(b for _, b in sent)
    total, ahead = 0, 0.0
    for t, b in sent:
        total += b
        ahead = max(ahead, total - (t - t0) * line / 8)
        assert total <= (t - t0) * line / 8 + (LINE_BURST_FRAMES + 1) * frame, (t - t0, total)
    assert ahead > frame   # the bucket did let a burst go: the bound is met, not missed by a slow pacer


def test_a_sender_held_below_the_line_rate_by_dcqcn_loses_nothing_to_the_line_bucket():
    """Below the line rate the line-rate bucket fills and overflows by design (DCQCN, not the line, holds the
    sender back): that overflow is no allowance lost. A sender cut by CNPs and woken on time counts none."""
    from testbed.dilation import Dilation

    params = DcqcnParams(line_rate=10e9).dilated(Dilation(2000))   # 5 Mbit/s, timers in ms as the wire's steps
    net = Net(cfg_a=QpConfig(dcqcn=params, timeout=30.0, line_burst_frames=2), cfg_b=QpConfig(dcqcn=params),
              mark=lambda d, i, b: d == "ab" and i % 4 == 0)      # CE marks: CNPs cut the rate
    size = 40_000
    src, dst = payload(size), bytearray(size)
    ma, mb = net.pd_a.reg_mr(src), net.pd_b.reg_mr(dst)
    net.a.post_write(1, ma, 0, size, mb.addr, mb.rkey)
    assert net.wait(net.cq_a)[0].status is WcStatus.SUCCESS and dst == src
    ideal = (size + (size // 1024 + 1) * 42) * 8 / 5e6
    assert net.a.stats.cnps_rx >= 1 and net.now > 1.5 * ideal         # cut: it ran below the line rate
    assert net.a.stats.pacing_lost_bytes == 0


def test_line_burst_frames_is_checked_and_off_by_default():
    """Off by default (a replica whose frame time is near the CPU's wake-up precision would lose line-rate time
    to it); a value that is not a positive integer is refused by name."""
    assert QpConfig().line_burst_frames is None
    for bad in (0, -1, 2.5, True, "2"):
        with pytest.raises(RdmaError, match="line_burst_frames"):
            QpConfig(line_burst_frames=bad)


def test_a_cnp_applies_to_the_next_frame_not_after_the_saved_up_allowance():
    """A sender that woke late holds up to 16 frames of allowance at its old rate. After a CNP it must not
    spend it: the frames sent after the cut are spaced at the new rate (here the CNP halves the rate: the
    frames after it leave at least 0.9 frame times of half the line rate apart on average)."""
    from testbed.dilation import Dilation

    params = DcqcnParams(line_rate=10e9).dilated(Dilation(2000))     # 5 Mbit/s: a frame every ~1.7 ms
    net = Net(cfg_a=QpConfig(dcqcn=params, timeout=30.0), cfg_b=QpConfig(dcqcn=params))
    size = 60_000
    src, dst = payload(size), bytearray(size)
    ma, mb = net.pd_a.reg_mr(src), net.pd_b.reg_mr(dst)
    net.a.post_write(1, ma, 0, size, mb.addr, mb.rkey)
    for _ in range(5):
        net.step()
    net.a._tokens = 16.0 * (1024 + 100)     # what a sender that woke late at line rate holds
    net.b._send_cnp()                       # the notification point's CNP, delivered now
    data, ce = net.q["ba"].pop()
    net.a.on_datagram(memoryview(data), len(data), ce, net.now)
    rate = net.a.rp.rate
    assert rate <= params.line_rate / 2 + 1
    first = len(net.sent["ab"])
    net.run(lambda: len(net.sent["ab"]) >= first + 6)
    after = [t for t, _ in net.sent["ab"][first:first + 6]]
    mean_gap = (after[-1] - after[0]) / (len(after) - 1)      # the wire's clock steps 1 ms: a mean, not each
    assert mean_gap >= 0.9 * (1024 + 42) * 8 / rate, (mean_gap, after)
