"""A long-haul trial's data check: ``roce check --expect-ect`` of its bounded data sample, as the trial's
``data_check``, and a failed one making the trial INVALID (testbed.validate.longhaul_captures, trials)."""

from __future__ import annotations

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.utils import wrpcap

from testbed.roce.craft import rc_ack, rc_write
from testbed.roce.layers import cnp
from testbed.roce.sample import data_verdict
from testbed.validate import longhaul_captures as LC
from testbed.validate import longhaul_report as report
from testbed.validate import longhaul_setup as S
from testbed.validate import trial_ledger as TL

H0, H2 = "10.0.0.1", "10.0.1.1"
QP_H2, QP_H0 = 0x000302, 0x000101
SCALE = 2000.0
CNP_INTERVAL_S = 50e-6 * SCALE
FRAME_GAP_S = 1.7e-3            # a 1 KB frame at 5 Mbit/s (10G / 2000)


def _cnp_to_h0(t: float):
    p = Ether() / IP(src=H2, dst=H0, tos=0) / UDP(sport=50000, dport=4791) / cnp(QP_H0)
    p.time = t
    return p


def _write(tos: int = 2, psn: int = 7_000_000):
    """The first 5 data frames of h0's 1 MB WRITE, mid-QP PSN, one frame gap apart."""
    w = rc_write(H0, H2, QP_H2, psn, bytes(1024 * 1024), tos=tos)[:5]
    for i, p in enumerate(w):
        p.time = 100.0 + i * FRAME_GAP_S
    return w


def _sample(tos: int = 2, late_cnp: bool = True):
    """h0's frames as tcpdump -c 8 saw them: 5 data frames, an ACK back, two CNPs 0.15 s apart (the
    emulated interval is 0.1 s); the count was reached inside the WRITE."""
    ack = rc_ack(H2, H0, QP_H0, 7_000_001, 1)
    ack.time = 100.0 + 2.5 * FRAME_GAP_S
    cnps = [_cnp_to_h0(100.001)] + ([_cnp_to_h0(100.151)] if late_cnp else [])
    return sorted(_write(tos) + [ack] + cnps, key=lambda p: p.time)


def _check(tmp_path, pkts, monkeypatch, count=8, scale=SCALE):
    monkeypatch.setattr(S, "DATA_SAMPLE_FRAMES", count)
    wrpcap(str(tmp_path / "data-h0.pcap"), pkts)
    return LC.data_check(tmp_path, "h0", CNP_INTERVAL_S, scale)


def _trial_validity(data_check):
    block = TL.metrics_block([], 0, {}, {})
    return TL.verdict({"mode": "ecn", "switch_cnps": 0, "cnps_rx": 2, "marks": 5, "data_check": data_check},
                      block, [])


def test_an_ect_sample_cut_mid_message_passes_and_says_what_it_checked(tmp_path, monkeypatch):
    dc = _check(tmp_path, _sample(), monkeypatch)
    assert dc["ok"] and dc["reasons"] == [], dc
    assert dc["capture"] == "data-h0.pcap" and dc["packets"] == 8 and dc["data_packets"] == 5
    assert dc["ect"] and dc["not_ect"] == 0 and dc["cnps"] == 2 and dc["violations"] == 0
    assert dc["cut"] and dc["open_at_end"] == 1          # stopped by -c inside the WRITE: not a violation
    v = _trial_validity(dc)
    assert v["validity"] == {"valid": True, "reasons": []} and v["data_check"] is dc
    assert report.data_cell(dc) == "8 ECT"


def test_not_ect_data_makes_the_trial_invalid_naming_the_qp_and_psn(tmp_path, monkeypatch):
    dc = _check(tmp_path, _sample(tos=0), monkeypatch)
    assert not dc["ok"] and not dc["ect"] and dc["not_ect"] == 5 and dc["violations"] == 1
    assert dc["first_violations"][0]["psn"] == 7_000_000 and "Not-ECT" in dc["first_violations"][0]["what"]
    assert "1 protocol violations (first: 10.0.0.1->10.0.1.1 qp 0x000302 PSN 7000000" in dc["reasons"][0]
    v = _trial_validity(dc)["validity"]
    assert not v["valid"] and v["reasons"] == [f"data check (data-h0.pcap, roce check --expect-ect): {dc['reasons'][0]}"]
    assert report.data_cell(dc) == "FAIL" and TL.label(v).startswith("INVALID: data check")


def test_a_sample_that_never_reached_its_count_must_be_whole(tmp_path, monkeypatch):
    # 8 frames but a count of 9: tcpdump was stopped at the trial's end, so the open message is a fault
    dc = _check(tmp_path, _sample(), monkeypatch, count=9)
    assert not dc["ok"] and not dc["cut"] and "capture ends inside a message" in dc["reasons"][0]


def test_times_are_dilated_a_resend_within_frame_gaps_is_a_duplicate(tmp_path, monkeypatch):
    pkts = _sample(late_cnp=False)
    again = _write()[1]
    again.time = pkts[-1].time + FRAME_GAP_S           # PSN 7000001 again 5 ms later, no NAK, no timeout
    dc = _check(tmp_path, pkts + [again], monkeypatch)
    assert not dc["ok"] and "PSN 7000001 seen again" in dc["reasons"][0], dc["reasons"]
    # undilated (retx_gap 1 ms), the frame gap alone would have excused it as a timeout
    assert _check(tmp_path, pkts + [again], monkeypatch, scale=1.0)["ok"]


def test_cnps_closer_than_the_emulated_interval_fail(tmp_path, monkeypatch):
    pkts = sorted(_sample(late_cnp=False) + [_cnp_to_h0(100.02)], key=lambda p: p.time)
    dc = _check(tmp_path, pkts, monkeypatch)
    assert not dc["ok"] and "CNPs 19000.0 us apart" in dc["reasons"][0], dc["reasons"]


@pytest.mark.parametrize("content, why", [(None, "cannot read capture"), (b"not a pcap", "not a pcap")])
def test_a_missing_or_broken_sample_fails_the_check(tmp_path, content, why):
    if content is not None:
        (tmp_path / "data-h0.pcap").write_bytes(content)
    dc = LC.data_check(tmp_path, "h0", CNP_INTERVAL_S, SCALE)
    assert not dc["ok"] and dc["packets"] == 0 and why in dc["reasons"][0]
    assert not _trial_validity(dc)["validity"]["valid"]


def test_a_sample_without_data_fails(tmp_path, monkeypatch):
    dc = _check(tmp_path, [_cnp_to_h0(100.0)], monkeypatch)
    assert not dc["ok"] and dc["reasons"] == ["no data packet in the sample"]
    empty = data_verdict({"packets": 0, "roce_packets": 0, "malformed": 0, "truncated": 0, "icrc_bad": 0,
                             "cnp": 0, "cut": False, "open_at_end": 0, "violation_count": 0, "violations": [],
                             "qps": [], "truncated_file": False}, "data-h0.pcap")
    assert not empty["ok"] and "no RoCEv2 packet among 0" in empty["reasons"][0]


def test_rows_without_a_data_check_are_not_judged_on_it():
    # results from before the check (rows.json read by testbed validate --long-haul) keep their verdict
    assert _trial_validity(None)["validity"]["valid"] and report.data_cell(None) == "-"
