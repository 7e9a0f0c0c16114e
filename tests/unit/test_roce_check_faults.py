"""``roce check`` on crafted captures of every transport: clean traffic gives 0 violations, each induced
fault is reported with its QP and PSN, and the exit rules (malformed, empty, corrupt, broken pipe) hold."""

from __future__ import annotations

import random
import subprocess
import sys

from scapy.layers.inet import IP
from scapy.layers.l2 import Ether
from scapy.utils import wrpcap

from testbed.cli import main
from testbed.roce.check import check_capture, failures, passed
from testbed.roce.craft import (
    atomic,
    atomic_ack,
    rc_ack,
    rc_read,
    rc_write,
    read_responses,
    uc_write,
    ud_send,
)
from testbed.roce.layers import BTH, cnp

A, B = "10.0.0.1", "10.0.0.2"
QP_B, QP_A = 0x000022, 0x000011
T0 = 1000.0


def _data(n, seed=0):
    return random.Random(seed).randbytes(n)


def _timed(pkts, start=T0, step=1e-6):
    """Capture timestamps 1 us apart, in list order."""
    for i, p in enumerate(pkts):
        p.time = start + i * step
    return pkts


def _check(tmp_path, pkts, timed=True, **kw):
    path = tmp_path / "c.pcap"
    wrpcap(str(path), _timed(pkts) if timed else pkts)
    return check_capture(path, **kw)


def _read_exchange(psn, length, msn, mtu=1024, seed=1):
    """A READ request A->B and B's responses; the next request PSN is psn + ceil(length / mtu)."""
    data = _data(length, seed)
    return [rc_read(A, B, QP_B, psn, length)] + read_responses(B, A, QP_A, psn, data, msn, mtu=mtu)


def _what(rep):
    return [v["what"] for v in rep["violations"]]


# -- clean captures of every transport ------------------------------------------------------------
def test_read_reserves_one_psn_per_response_packet(tmp_path):
    """READ of 5000 B at MTU 1024 takes PSNs 10..14; the WRITE after it starts at 15 (as rxe sends)."""
    pkts = _read_exchange(10, 5000, 1)
    w = rc_write(A, B, QP_B, 15, _data(2048))
    pkts += w + [rc_ack(B, A, QP_A, 16, 2)]
    pkts += _read_exchange(17, 100, 3)  # a READ ONLY response
    rep = _check(tmp_path, pkts)
    assert passed(rep), rep["violations"]
    req = next(q for q in rep["qps"] if q["dqpn"] == QP_B)
    rsp = next(q for q in rep["qps"] if q["dqpn"] == QP_A)
    assert req["messages"] == 3 and rsp["read_responses"] == 6 and rsp["messages"] == 2
    assert rsp["message_bytes"] == 5100


def test_read_without_responses_in_capture_still_reserves(tmp_path):
    """Only the request direction was captured: the PSN jump after a READ is no hole (MTU from the WRITE)."""
    pkts = rc_write(A, B, QP_B, 0, _data(3000)) + [rc_read(A, B, QP_B, 3, 4096)] + \
        rc_write(A, B, QP_B, 7, _data(1000))
    rep = _check(tmp_path, pkts)
    assert passed(rep), rep["violations"]


def test_request_inside_a_reads_range_is_a_violation(tmp_path):
    pkts = _read_exchange(0, 4096, 1) + rc_write(A, B, QP_B, 2, _data(100))
    rep = _check(tmp_path, pkts)
    assert any("reserved for its responses" in w for w in _what(rep))


def test_atomics_clean(tmp_path):
    pkts = [atomic(A, B, QP_B, 5, 0x13, swap_add=7, compare=0), atomic_ack(B, A, QP_A, 5, 1, 0),
            atomic(A, B, QP_B, 6, 0x14, swap_add=3), atomic_ack(B, A, QP_A, 6, 2, 7)]
    rep = _check(tmp_path, pkts)
    assert passed(rep), rep["violations"]
    assert next(q for q in rep["qps"] if q["dqpn"] == QP_A)["atomic_acks"] == 2


def test_uc_and_ud_clean(tmp_path):
    pkts = uc_write(A, B, QP_B, 40, _data(3000)) + uc_write(A, B, QP_B, 43, _data(10))
    pkts += [ud_send(A, B, 0x33, 7 + i, _data(200, i), srcqp=0x44) for i in range(3)]
    pkts += [ud_send(B, A, 0x44, 900, _data(64), srcqp=0x33)]
    rep = _check(tmp_path, pkts)
    assert passed(rep), rep["violations"]
    ud = next(q for q in rep["qps"] if q["dqpn"] == 0x33)
    assert ud["srcqp"] == 0x44 and ud["messages"] == 3 and ud["message_bytes"] == 600


def test_not_ect_only_with_expect_ect(tmp_path, capsys):
    pkts = rc_write(A, B, QP_B, 0, _data(2048), tos=0) + [rc_ack(B, A, QP_A, 1, 1)]
    assert passed(_check(tmp_path, pkts))
    rep = _check(tmp_path, pkts, require_ect=True)
    assert any("Not-ECT" in w for w in _what(rep))
    capsys.readouterr()
    assert main(["roce", "check", str(tmp_path / "c.pcap")]) == 0
    assert main(["roce", "check", str(tmp_path / "c.pcap"), "--expect-ect"]) == 1
    # the per-QP table and the verdict are data: stdout (`roce check c.pcap | grep` works)
    printed = capsys.readouterr()
    assert "dest QP" in printed.out and "fails:" in printed.out and "Not-ECT" in printed.out, printed
    assert "dest QP" not in printed.err


def test_a_capture_cut_at_its_packet_count_may_end_inside_a_message(tmp_path, capsys):
    # tcpdump -c 5 stopped mid-WRITE: the sample starts mid-QP (PSN 700) and ends inside a message
    w = rc_write(A, B, QP_B, 700, _data(8 * 1024))
    pkts = w[:3] + [rc_ack(B, A, QP_A, 701, 1)] + w[3:4]
    whole = _check(tmp_path, pkts)
    assert _what(whole) == ["capture ends inside a message"] and not whole["cut"]
    cut = _check(tmp_path, pkts, cut_at=5)
    assert passed(cut) and cut["cut"] and cut["open_at_end"] == 1, cut["violations"]
    # a count the capture did not reach: it holds the whole traffic, the open message stays a violation
    assert _what(_check(tmp_path, pkts, cut_at=6)) == ["capture ends inside a message"]
    # the cut excuses only the end: a hole inside the sample is still a lost packet
    holed = _check(tmp_path, w[:1] + w[2:5], cut_at=4)
    assert _what(holed) == ["PSNs 701..701 never seen"]
    # a READ whose responses the cut stopped is open, not missing; without the cut they are missing
    reads = _read_exchange(50, 4096, 1)
    assert passed(_check(tmp_path, reads[:3], cut_at=3))
    assert any("never seen" in x for x in _what(_check(tmp_path, reads[:3])))
    capsys.readouterr()
    assert main(["roce", "check", str(tmp_path / "c.pcap"), "--cut-at", "3"]) == 0
    assert "end inside a message" in capsys.readouterr().out
    assert main(["roce", "check", str(tmp_path / "c.pcap"), "--cut-at", "0"]) == 2
    assert "--cut-at" in capsys.readouterr().err


# -- induced faults, each with its QP and PSN ------------------------------------------------------
def _violation(rep, text):
    hits = [v for v in rep["violations"] if text in v["what"]]
    assert hits, rep["violations"]
    return hits[0]


def test_dropped_packet(tmp_path):
    w = rc_write(A, B, QP_B, 100, _data(5 * 1024))
    rep = _check(tmp_path, w[:2] + w[3:] + [rc_ack(B, A, QP_A, 104, 1)])
    v = _violation(rep, "never seen")
    assert v["psn"] == 102 and v["dqpn"] == QP_B


def test_corrupted_icrc(tmp_path):
    w = rc_write(A, B, QP_B, 100, _data(3 * 1024))
    raw = bytearray(bytes(w[1]))
    raw[60] ^= 0x01  # one payload bit
    pkts = [w[0], Ether(bytes(raw)), w[2]]
    rep = _check(tmp_path, pkts)
    v = _violation(rep, "ICRC")
    assert v["psn"] == 101 and v["dqpn"] == QP_B and rep["icrc_bad"] == 1 and not passed(rep)


def test_reordering(tmp_path):
    w = rc_write(A, B, QP_B, 100, _data(6 * 1024))
    rep = _check(tmp_path, w[:2] + [w[3], w[2]] + w[4:])
    v = _violation(rep, "reordered")
    assert v["psn"] == 102 and v["dqpn"] == QP_B
    assert rep["qps"][0]["reordered"] == 1


def test_duplicate(tmp_path):
    w = rc_write(A, B, QP_B, 100, _data(4 * 1024))
    rep = _check(tmp_path, w[:3] + [w[2].copy()] + w[3:])
    v = _violation(rep, "duplicate")
    assert v["psn"] == 102 and v["dqpn"] == QP_B


def test_a_copy_rebuilt_with_a_new_ip_id_is_a_resend_not_a_duplicate(tmp_path):
    """Linux rdma_rxe resent a SEND FIRST 0.3 ms after the original, no NAK between (its retry timer
    fired as the message started; seen in the VM interop capture): a new IPv4 ID tells a packet the
    sender built again from one a switch copied. The same copy with the original's ID stays a duplicate."""
    w = rc_write(A, B, QP_B, 100, _data(4 * 1024))
    for i, p in enumerate(w):
        p[IP].id = 0x6AC0 + i
    again = w[2].copy()
    again[IP].id = 0x6AD0
    again[BTH].icrc = None       # recomputed over the new ID, as the sender does
    del again[IP].chksum
    rep = _check(tmp_path, w[:3] + [again] + w[3:])
    assert passed(rep), rep["violations"]
    assert rep["qps"][0]["retransmissions"] == 1 and rep["qps"][0]["duplicates"] == 0
    copied = w[2].copy()
    rep = _check(tmp_path, w[:3] + [copied] + w[3:])
    assert _violation(rep, "duplicate")["psn"] == 102


def test_go_back_n_after_nak_is_no_duplicate(tmp_path):
    """Sender-side capture: PSN 2 is lost later on the path, B NAKs it, A resends 2..3."""
    w = rc_write(A, B, QP_B, 0, _data(4 * 1024))
    pkts = w + [rc_ack(B, A, QP_A, 2, 0, syndrome=0x60)] + [p.copy() for p in w[2:]] + [rc_ack(B, A, QP_A, 3, 1)]
    rep = _check(tmp_path, pkts)
    assert passed(rep), rep["violations"]


def test_timeout_resend_is_no_duplicate(tmp_path):
    """The last packet's ACK never came: after an idle gap (a timeout) A resends it."""
    w = rc_write(A, B, QP_B, 0, _data(2 * 1024))
    resend = w[1].copy()
    _timed(w)
    resend.time = T0 + 0.05
    ack = rc_ack(B, A, QP_A, 1, 1)
    ack.time = T0 + 0.0501
    rep = _check(tmp_path, w + [resend, ack], timed=False)
    assert passed(rep), rep["violations"]


def test_ack_for_unsent_psn(tmp_path):
    w = rc_write(A, B, QP_B, 100, _data(2048))
    rep = _check(tmp_path, w + [rc_ack(B, A, QP_A, 101, 1), rc_ack(B, A, QP_A, 150, 2)])
    v = _violation(rep, "never sent")
    assert v["psn"] == 150 and v["dqpn"] == QP_A


def test_read_response_outside_any_read(tmp_path):
    pkts = _read_exchange(0, 1024, 1) + read_responses(B, A, QP_A, 1, _data(64), 2)
    rep = _check(tmp_path, pkts)
    assert any("never sent" in w or "outside every READ" in w for w in _what(rep))


def test_read_response_missing(tmp_path):
    pkts = _read_exchange(0, 4096, 1)
    del pkts[2]  # the second response (PSN 1)
    pkts += rc_write(A, B, QP_B, 4, _data(8)) + [rc_ack(B, A, QP_A, 4, 2)]
    rep = _check(tmp_path, pkts)
    v = _violation(rep, "responses 1..1 never seen")
    assert v["dqpn"] == QP_A


def _ce_capture(answered: bool):
    w = rc_write(A, B, QP_B, 100, _data(4 * 1024))
    w[1][IP].tos = 3
    pkts = _timed(w)
    tail = rc_write(A, B, QP_B, 104, _data(1024))
    if answered:
        c = Ether() / IP(src=B, dst=A, tos=0) / __import__("scapy.layers.inet", fromlist=["UDP"]).UDP(
            sport=1, dport=4791) / cnp(QP_A)
        c.time = T0 + 5e-6
        pkts.append(c)
    ack = rc_ack(B, A, QP_A, 103, 1)
    ack.time = T0 + 10e-6
    for i, p in enumerate(tail):
        p.time = T0 + 0.01 + i * 1e-6  # the capture runs on past the CNP deadline
    return pkts + [ack] + tail + [rc_ack(B, A, QP_A, 104, 2)]


def test_ce_without_cnp(tmp_path):
    rep = _check(tmp_path, _ce_capture(False), timed=False)
    v = _violation(rep, "never answered by a CNP")
    assert v["psn"] == 101 and v["dqpn"] == QP_B
    rep = _check(tmp_path, _ce_capture(True), timed=False)
    assert passed(rep), rep["violations"]


# -- exit rules -------------------------------------------------------------------------------------
def test_malformed_fails_unless_allowed(tmp_path):
    from scapy.layers.inet import UDP

    bad = [Ether() / IP(src=A, dst=B) / UDP(sport=1, dport=4791) / BTH(opcode=0x1D, dqpn=1)
           for _ in range(5)]  # reserved opcode
    path = tmp_path / "m.pcap"
    wrpcap(str(path), bad)
    rep = check_capture(path)
    assert rep["malformed"] == 5 and not passed(rep)
    assert passed(rep, allow_malformed=True)
    assert main(["roce", "check", str(path)]) == 1
    assert main(["roce", "check", str(path), "--allow-malformed"]) == 0


def test_no_roce_fails_unless_allowed(tmp_path):
    from scapy.layers.inet import UDP

    path = tmp_path / "e.pcap"
    wrpcap(str(path), [Ether() / IP(src=A, dst=B) / UDP(sport=1, dport=53)])
    rep = check_capture(path)
    assert any("no RoCEv2" in f for f in failures(rep))
    assert main(["roce", "check", str(path)]) == 1
    assert main(["roce", "check", str(path), "--allow-empty"]) == 0


def test_corrupt_pcap_fails(tmp_path):
    import struct

    path = tmp_path / "x.pcap"
    w = rc_write(A, B, QP_B, 0, _data(100))
    wrpcap(str(path), w)
    blob = path.read_bytes()
    # a record header claiming 1 GB after the valid packet
    path.write_bytes(blob + struct.pack("<IIII", 1, 0, 1 << 30, 1 << 30) + b"junk")
    rep = check_capture(path)
    assert rep["truncated_file"] and not passed(rep)
    assert main(["roce", "check", str(path)]) == 1


def test_closed_pipe_ends_quietly(tmp_path):
    pkts = []
    psn = 0
    for i in range(40):
        w = rc_write(A, B, QP_B + i, psn, _data(2048, i))
        pkts += w + [rc_ack(B, A, QP_A + i, psn + 1, 1)]
    path = tmp_path / "many.pcap"
    wrpcap(str(path), pkts)
    cmd = f"{sys.executable} -m testbed.cli roce check {path} --json | head -1"
    res = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], capture_output=True, text=True, timeout=60)
    assert res.stdout.strip() == "{"
    assert "Traceback" not in res.stderr and "BrokenPipe" not in res.stderr, res.stderr


def test_ce_marked_read_responses_need_a_cnp_to_the_responder(tmp_path):
    """READ data flows B -> A: CE on a response is answered by A's CNP to B's QP (the request stream)."""
    from scapy.layers.inet import UDP

    pkts = _timed(_read_exchange(0, 4096, 1))
    pkts[2][IP].tos = 3
    later = _timed(rc_write(A, B, QP_B, 4, _data(8)) + [rc_ack(B, A, QP_A, 4, 2)], start=T0 + 0.01)
    rep = _check(tmp_path, pkts + later, timed=False)
    v = _violation(rep, "never answered by a CNP")
    assert v["psn"] == 1 and v["dqpn"] == QP_A
    c = Ether() / IP(src=A, dst=B) / UDP(sport=1, dport=4791) / cnp(QP_B)
    c.time = T0 + 3e-6
    rep = _check(tmp_path, pkts + [c] + later, timed=False)
    assert passed(rep), rep["violations"]


def test_not_ect_read_responses_count_with_expect_ect(tmp_path):
    data = _data(2048, 3)
    pkts = [rc_read(A, B, QP_B, 0, 2048)] + read_responses(B, A, QP_A, 0, data, 1, tos=0)
    assert passed(_check(tmp_path, pkts))
    rep = _check(tmp_path, pkts, require_ect=True)
    assert _violation(rep, "Not-ECT")["dqpn"] == QP_A
