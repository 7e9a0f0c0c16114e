"""The shared DCQCN data sample check (testbed.roce.sample): the resend gap it judges at, its one-line
verdict, and the collective scenario failing a run whose sample fails. The long haul's use of it:
test_long_haul_data_check.py."""

from __future__ import annotations

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.utils import wrpcap

from testbed.roce.craft import rc_ack, rc_write
from testbed.roce.layers import cnp
from testbed.roce.sample import check_sample, retx_gap_for, sample_line

H0, H1 = "10.0.0.1", "10.0.0.2"
QP_H1, QP_H0 = 0x010102, 0x010201
SCALE = 1e4                    # the collective's: 100G host links emulated at 10 Mbit/s
FRAME_GAP_S = 0.82e-3          # a 1 KB frame at 10 Mbit/s
QP_TIMEOUT_S = 1.0             # the collective runner's cap on the QP timeout


def _ring_step(tos: int = 2, resend_after: float | None = None):
    """Rank 0 sends 4 frames of a 64 KiB SEND-sized WRITE (mid-QP PSN), an ACK comes back and a CNP; with
    ``resend_after``, the second frame is sent again that long after the last one (no NAK between)."""
    w = rc_write(H0, H1, QP_H1, 123_456, bytes(64 * 1024), tos=tos)[:4]
    for i, p in enumerate(w):
        p.time = 10.0 + i * FRAME_GAP_S
    ack = rc_ack(H1, H0, QP_H0, 123_457, 1)
    ack.time = 10.0 + 1.5 * FRAME_GAP_S
    c = Ether() / IP(src=H1, dst=H0, tos=0) / UDP(sport=50000, dport=4791) / cnp(QP_H0)
    c.time = 10.001
    pkts = sorted(w + [ack, c], key=lambda p: p.time)
    if resend_after is not None:
        again = rc_write(H0, H1, QP_H1, 123_456, bytes(64 * 1024), tos=tos)[1]
        again.time = pkts[-1].time + resend_after
        pkts.append(again)
    return pkts


def _check(tmp_path, pkts, retx_gap_s, frames=None):
    wrpcap(str(tmp_path / "data-h0.pcap"), pkts)
    return check_sample(tmp_path / "data-h0.pcap", 50e-6 * SCALE, retx_gap_s, frames or len(pkts))


def test_the_resend_gap_is_dilated_but_never_above_the_qp_timeout():
    assert retx_gap_for(2000) == pytest.approx(2.0)                     # the long haul: 1 ms x 2000
    assert retx_gap_for(SCALE) == pytest.approx(10.0)
    assert retx_gap_for(SCALE, QP_TIMEOUT_S) == pytest.approx(1.0)      # the collective: its 1 s timeout
    assert retx_gap_for(2000, 5.0) == pytest.approx(2.0)


def test_a_resend_after_the_qp_timeout_passes_one_within_it_is_a_duplicate(tmp_path):
    gap = retx_gap_for(SCALE, QP_TIMEOUT_S)
    # the rank's QP timed out (1 s, capped) and resent: explained at the capped gap
    assert _check(tmp_path, _ring_step(resend_after=1.05), gap)["ok"]
    # judged at the uncapped 10 s, that timeout's resend would have been called a duplicate
    dc = _check(tmp_path, _ring_step(resend_after=1.05), retx_gap_for(SCALE))
    assert not dc["ok"] and "PSN 123457 seen again" in dc["reasons"][0], dc["reasons"]
    # a resend 20 frame gaps later is still a duplicate at the capped gap
    dc = _check(tmp_path, _ring_step(resend_after=20 * FRAME_GAP_S), gap)
    assert not dc["ok"] and dc["violations"] == 1


def test_the_verdict_line_says_what_was_checked_or_why_it_failed(tmp_path):
    gap = retx_gap_for(SCALE, QP_TIMEOUT_S)
    dc = _check(tmp_path, _ring_step(), gap)
    assert dc["ok"] and dc["cut"] and dc["packets"] == 6 and dc["data_packets"] == 4 and dc["cnps"] == 1
    assert sample_line(dc) == ("data sample data-h0.pcap: 6 frames, 4 data (all ECT), 1 CNPs, 0 violations: "
                               "roce check --expect-ect ok")
    bad = _check(tmp_path, _ring_step(tos=0), gap)
    assert not bad["ok"] and bad["not_ect"] == 4
    line = sample_line(bad)
    assert line.startswith("data sample data-h0.pcap: 6 frames, 4 data (4 Not-ECT), 1 CNPs, 1 violations: FAIL: ")
    assert "PSN 123456" in line and "Not-ECT" in line.split("FAIL: ")[1]
    missing = check_sample(tmp_path / "none.pcap", 0.5, gap)
    assert sample_line(missing).startswith("data sample none.pcap: 0 frames, 0 data: FAIL: not checked: ")


def test_the_collective_fails_a_run_whose_sample_failed(tmp_path):
    from scenarios import collective as C

    gap = retx_gap_for(SCALE, QP_TIMEOUT_S)
    assert C.data_ok({"data_check": _check(tmp_path, _ring_step(), gap)})
    assert not C.data_ok({"data_check": _check(tmp_path, _ring_step(tos=0), gap)})
    assert C.data_ok({})          # --acceptance-only: no sweep, nothing sampled
