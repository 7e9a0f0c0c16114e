"""Pure parts of the delay line: ECN rewriting, its command line, probe summaries."""

import json

import pytest

from testbed.links import ecn
from testbed.links.delayline import build_argv
from testbed.links.model import LinkParams, RedParams
from testbed.links.probe import summarise


def _ipv4(tos):
    ip = bytearray(20)
    ip[0], ip[1], ip[8], ip[9] = 0x45, tos, 64, 6
    ip[10:12] = ecn.ipv4_checksum(ip).to_bytes(2, "big")
    return bytes(ip)


@pytest.mark.parametrize("prefix", [bytes(12) + b"\x08\x00", bytes(12) + b"\x81\x00\x00\x05\x08\x00"])
def test_set_ce_ipv4_keeps_checksum_valid(prefix):
    frame = prefix + _ipv4(0xB8 | ecn.ECT0) + b"payload"
    assert ecn.ecn_codepoint(frame) == ecn.ECT0
    marked = ecn.set_ce(frame)
    off = len(prefix)
    assert ecn.ecn_codepoint(marked) == ecn.CE
    assert marked[off + 1] >> 2 == 0xB8 >> 2  # DSCP untouched
    assert ecn.ipv4_checksum(marked[off:off + 20]) == 0
    assert marked[off + 20:] == frame[off + 20:]


def test_set_ce_ipv6_and_non_ip():
    ip6 = bytearray(40)
    ip6[0], ip6[1] = 0x60 | 0x0A, 0x10  # TC = 0xA1 -> ECN = 01 (ECT(1))
    frame = bytes(12) + b"\x86\xdd" + bytes(ip6)
    assert ecn.ecn_codepoint(frame) == ecn.ECT1
    marked = ecn.set_ce(frame)
    assert ecn.ecn_codepoint(marked) == ecn.CE and marked[14] == frame[14] and marked[15] == 0x30 | 0x10
    arp = bytes(12) + b"\x08\x06" + bytes(28)
    assert ecn.ecn_codepoint(arp) == ecn.NOT_IP
    with pytest.raises(ValueError):
        ecn.set_ce(arp)


def test_checksum_known_value():
    # RFC 1071 example header (Wikipedia "IPv4 header checksum"): checksum 0xB861
    hdr = bytes.fromhex("450000730000400040110000c0a80001c0a800c7")
    assert ecn.ipv4_checksum(hdr) == 0xB861


def test_build_argv_carries_params_round_trip(tmp_path):
    p = LinkParams(rate_bps=1e6, delay_s=0.05, red=RedParams(10, 20, 0.5, unit="packets"))
    argv = build_argv("lkda", "lkdb", p, tmp_path / "s.json", python="py", seed=3)
    assert argv[:3] == ["py", "-m", "testbed.links.delayline"]
    assert argv[argv.index("--a") + 1] == "lkda" and argv[argv.index("--seed") + 1] == "3"
    assert LinkParams.from_dict(json.loads(argv[argv.index("--params") + 1])) == p


def test_probe_summary_counts_loss_ce_and_gaps_between_consecutive_numbers():
    result = {"seq": [0, 1, 3, 4], "tx_ns": [0, 10, 30, 40], "rx_ns": [100, 120, 160, 175],
              "ecn": [2, 3, 3, 0]}
    s = summarise(result, sent=5)
    assert s["lost"] == 1 and s["loss"] == pytest.approx(0.2)
    assert s["ce"] == 2 and s["ce_fraction"] == pytest.approx(0.5)
    assert s["delays_s"] == pytest.approx([100e-9, 110e-9, 130e-9, 135e-9])
    assert s["gaps_s"] == pytest.approx([20e-9, 15e-9])  # 1->3 skipped
