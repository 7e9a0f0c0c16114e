"""The capture validator on crafted captures: clean transfers pass; each kind of fault is reported."""

from __future__ import annotations

import json
import random

import pytest
from scapy.layers.inet import IP
from scapy.layers.l2 import Ether
from scapy.utils import wrpcap

from testbed.cli import main
from testbed.roce.check import check_capture, passed
from testbed.roce.craft import fuzzed, rc_ack, rc_write
from testbed.roce.layers import BTH, CNPPadding, cnp, icrc_valid

A, B = "10.0.0.1", "10.0.0.2"
QP_B, QP_A = 0x000022, 0x000011


def _data(n, seed=0):
    return random.Random(seed).randbytes(n)


def _write_acked(psn, data, msn, mtu=1024):
    pkts = rc_write(A, B, QP_B, psn, data, mtu=mtu)
    return pkts, rc_ack(B, A, QP_A, psn + len(pkts) - 1, msn)


def _check(tmp_path, pkts, **kw):
    path = tmp_path / "c.pcap"
    wrpcap(str(path), pkts)
    return check_capture(path, **kw)


def test_clean_transfer_passes(tmp_path):
    pkts, psn = [], 100
    for msn in range(1, 4):
        w, a = _write_acked(psn, _data(5000, msn), msn)
        pkts += w + [a]
        psn += len(w)
    rep = _check(tmp_path, pkts)
    assert passed(rep), rep["violations"]
    req = next(q for q in rep["qps"] if q["dqpn"] == QP_B)
    assert req["messages"] == 3 and req["message_bytes"] == 15000 and req["retransmissions"] == 0
    assert rep["roce_packets"] == len(pkts) and rep["malformed"] == 0


def test_psn_wraps_without_violation(tmp_path):
    w, a = _write_acked((1 << 24) - 2, _data(4096), 1)
    assert [p[BTH].psn for p in w] == [(1 << 24) - 2, (1 << 24) - 1, 0, 1]
    rep = _check(tmp_path, w + [a])
    assert passed(rep), rep["violations"]


def test_loss_nak_and_go_back_n_seen_after_the_loss(tmp_path):
    """Receiver-side capture: PSN 3 lost, NAK, go-back-N resends 3..5; the hole is filled."""
    w = rc_write(A, B, QP_B, 0, _data(6 * 1024))
    pkts = w[:3] + w[4:5] + [rc_ack(B, A, QP_A, 3, 0, syndrome=0x60)] + w[3:] + [rc_ack(B, A, QP_A, 5, 1)]
    rep = _check(tmp_path, pkts)
    assert passed(rep), rep["violations"]
    req = next(q for q in rep["qps"] if q["dqpn"] == QP_B)
    ack = next(q for q in rep["qps"] if q["dqpn"] == QP_A)
    assert req["retransmissions"] == 2 and ack["naks"] == 1  # 3 fills the hole, 4 is a duplicate and req["messages"] == 1


def test_hole_never_filled_is_a_violation(tmp_path):
    w = rc_write(A, B, QP_B, 0, _data(4 * 1024))
    rep = _check(tmp_path, w[:2] + w[3:])
    assert not passed(rep)
    assert any("never seen" in v["what"] for v in rep["violations"])


def test_opcode_sequence_violation(tmp_path):
    w1 = rc_write(A, B, QP_B, 0, _data(2048))
    w2 = rc_write(A, B, QP_B, 1, _data(3072))
    rep = _check(tmp_path, w1 + w2[1:])  # a MIDDLE right after a LAST
    assert any("outside a message" in v["what"] for v in rep["violations"])


def test_retransmission_with_other_opcode_is_a_violation(tmp_path):
    w = rc_write(A, B, QP_B, 0, _data(3072))
    bogus = w[1].copy()
    bogus[BTH].opcode = 0x08  # same PSN, now a LAST
    rep = _check(tmp_path, w + [Ether(bytes(bogus))])
    assert any("retransmission changed" in v["what"] for v in rep["violations"])


def test_write_length_mismatch(tmp_path):
    w = rc_write(A, B, QP_B, 0, _data(3000))
    from testbed.roce.layers import RETH
    w[0][RETH].dmalen = 4000
    w[0][BTH].icrc = None
    rep = _check(tmp_path, w)
    assert any("RETH says 4000" in v["what"] for v in rep["violations"])


def test_bad_icrc_fails(tmp_path):
    w = rc_write(A, B, QP_B, 0, _data(1000))
    raw = bytearray(bytes(w[0]))
    raw[-10] ^= 0xFF
    rep = _check(tmp_path, [Ether(bytes(raw))])
    assert rep["icrc_bad"] == 1 and not passed(rep)


def test_ecn_codepoints(tmp_path):
    w = rc_write(A, B, QP_B, 0, _data(4096))
    w[1][IP].tos = 3  # CE: a switch marked it
    rep = _check(tmp_path, w)
    assert passed(rep) and rep["qps"][0]["ce_marked"] == 1
    rep = _check(tmp_path, rc_write(A, B, QP_B, 0, _data(1024), tos=0), require_ect=True)
    assert any("ECN" in v["what"] for v in rep["violations"])


def _cnp_frame(dqpn, t, **bth):
    pkt = Ether() / IP(src=B, dst=A, tos=2) / __import__("scapy.layers.inet", fromlist=["UDP"]).UDP(
        sport=1, dport=4791) / cnp(dqpn)
    for k, v in bth.items():
        setattr(pkt[BTH], k, v)
    pkt.time = t
    return pkt


def test_cnp_format_and_rate(tmp_path):
    ok = [_cnp_frame(QP_A, 1.0), _cnp_frame(QP_A, 1.0001)]
    rep = _check(tmp_path, ok)
    assert passed(rep) and rep["cnp"] == 2
    rep = _check(tmp_path, [_cnp_frame(QP_A, 1.0), _cnp_frame(QP_A, 1.00001)])
    assert any("apart" in v["what"] for v in rep["violations"])
    rep = _check(tmp_path, [_cnp_frame(QP_A, 1.0, becn=0)])
    assert any("BECN" in v["what"] for v in rep["violations"])
    bad_pad = _cnp_frame(QP_A, 1.0)
    bad_pad[CNPPadding].reserved2 = 5
    rep = _check(tmp_path, [bad_pad])
    assert any("reserved bytes" in v["what"] for v in rep["violations"])


def test_malformed_and_truncated_never_crash(tmp_path):
    frames = fuzzed(500, seed=7)
    path = tmp_path / "fuzz.pcap"
    wrpcap(str(path), frames, linktype=101)
    rep = check_capture(path)
    assert rep["packets"] == 500 and rep["roce_packets"] > 450
    assert rep["malformed"] > 100  # every fourth is cut short, lengths are random
    # a capture file cut mid-record: through the 251st record's header (24-byte file header, then
    # a 16-byte header and the frame per record), so the cut never lands on a record boundary
    blob = path.read_bytes()
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(blob[: 24 + sum(16 + len(f) for f in frames[:250]) + 8])
    rep = check_capture(cut)
    assert rep["truncated_file"] and rep["packets"] == 250


def test_cli_json_and_exit_status(tmp_path, capsys):
    w, a = _write_acked(0, _data(3000), 1)
    good = tmp_path / "good.pcap"
    wrpcap(str(good), w + [a])
    assert main(["roce", "check", str(good), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    for key in ("packets", "roce_packets", "malformed", "icrc_bad", "cnp", "violations", "qps"):
        assert key in doc
    assert {"dqpn", "packets", "retransmissions", "naks", "ce_marked"} <= set(doc["qps"][0])
    bad = tmp_path / "bad.pcap"
    wrpcap(str(bad), w[:1] + w[2:])
    assert main(["roce", "check", str(bad)]) == 1


@pytest.mark.parametrize("content", [b"", b"not a pcap at all"])
def test_cli_rejects_non_captures(tmp_path, content, capsys):
    path = tmp_path / "x.pcap"
    path.write_bytes(content)
    assert main(["roce", "check", str(path)]) == 2
    assert "not a pcap" in capsys.readouterr().err


def test_snaplen_capture_checks_headers(tmp_path):
    """tcpdump -s 96: packets are cut after the headers; sequence and sizes still check, ICRC cannot."""
    import struct

    w = rc_write(A, B, QP_B, 0, _data(6 * 1024))
    pkts = w[:3] + w[4:5] + [rc_ack(B, A, QP_A, 3, 0, syndrome=0x60)] + w[3:] + [rc_ack(B, A, QP_A, 5, 1)]
    path = tmp_path / "snap.pcap"
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 96, 1))
        for i, p in enumerate(pkts):
            raw = bytes(p)
            f.write(struct.pack("<IIII", 1, i, min(96, len(raw)), len(raw)) + raw[:96])
    rep = check_capture(path)
    assert passed(rep), rep["violations"]
    req = next(q for q in rep["qps"] if q["dqpn"] == QP_B)
    assert rep["truncated"] == 7 and req["retransmissions"] == 2 and req["message_bytes"] == 6 * 1024


def test_real_capture_of_the_soft_rdma_endpoint():
    """tests/data/soft_rdma_write_loss.pcap: tcpdump on the receiver's veth while ``testbed rdma write-bw
    --size 20001 --iters 6 --loss 3% --window 16`` ran between two namespaces. The IP/UDP headers are the
    kernel's, so a valid ICRC proves the endpoint predicts them (DF, IP ID 0)."""
    from pathlib import Path

    from scapy.utils import rdpcap

    pcap = Path(__file__).resolve().parent.parent / "data" / "soft_rdma_write_loss.pcap"
    rep = check_capture(pcap)
    assert passed(rep) and rep["icrc_bad"] == 0 and rep["malformed"] == 0, rep["violations"]
    data = max(rep["qps"], key=lambda q: q["requests"])
    acks = next(q for q in rep["qps"] if q is not data)
    assert data["messages"] == 6 and data["message_bytes"] == 6 * 20001 and data["retransmissions"] > 0
    assert acks["naks"] > 0
    first = rdpcap(str(pcap), count=1)[0]
    assert first[IP].flags == "DF" and first[IP].id == 0 and first[IP].tos & 3 == 2
    assert icrc_valid(first) and first[BTH].opcode == 0x06


@pytest.mark.tool("editcap")
def test_pcapng_reads_like_pcap(tmp_path):
    import subprocess
    from pathlib import Path

    src = Path(__file__).resolve().parent.parent / "data" / "soft_rdma_write_loss.pcap"
    ng = tmp_path / "x.pcapng"
    subprocess.run(["editcap", "-F", "pcapng", str(src), str(ng)], check=True)
    a, b = check_capture(src), check_capture(ng)
    assert a["qps"] == b["qps"] and b["packets"] == a["packets"] and passed(b)


@pytest.mark.parametrize("linktype,header", [
    (113, bytes(14) + b"\x08\x00"),                   # Linux cooked (tcpdump -i any)
    (276, b"\x08\x00" + bytes(18)),                   # Linux cooked v2
    (101, b""),                                        # raw IP
])
def test_link_types(tmp_path, linktype, header):
    import struct

    w, a = _write_acked(0, _data(3000), 1)
    path = tmp_path / "l.pcap"
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, linktype))
        for i, p in enumerate(w + [a]):
            frame = header + bytes(p[IP])
            f.write(struct.pack("<IIII", 1, i, len(frame), len(frame)) + frame)
    rep = check_capture(path)
    data = max(rep["qps"], key=lambda q: q["requests"])
    assert passed(rep) and rep["roce_packets"] == 4 and data["messages"] == 1, rep
