"""The IPv6 ICRC against a vector built here from the IBA rules, without the code under test.

IBA Vol. 1 Annex A17.4.5.1 (RoCEv2 ICRC): the CRC-32 of Ethernet (reflected polynomial 0xEDB88320,
initial value and final XOR all ones) over

    8 bytes 0xFF (stand-in for the LRH) | IPv6 header with traffic class, flow label and hop limit set to
    all ones | UDP header with its checksum set to 0xFFFF | BTH with its reserved byte 4 set to 0xFF |
    extended headers and payload

sent least-significant byte first. The CRC below is a bit-by-bit loop, not zlib.
"""

from __future__ import annotations

import struct

from scapy.layers.inet6 import IPv6
from scapy.utils import wrpcap

from testbed.roce.check import check_capture

SRC = bytes.fromhex("fd000000000000000000000000000001")
DST = bytes.fromhex("fd000000000000000000000000000002")


def _crc32_bitwise(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0xEDB88320 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def _packet(tclass=0x02, flow=0x12345, hop=64, payload=b"RoCEv2 over IPv6!!!!", psn=77):
    bth = struct.pack("!BBHII", 0x04, 0, 0xFFFF, 0x000123, (1 << 31) | psn)  # RC SEND ONLY, AckReq
    udp_len = 8 + len(bth) + len(payload) + 4
    udp = struct.pack("!HHHH", 0xC123, 4791, udp_len, 0x0000)
    ip = struct.pack("!IHBB16s16s", (6 << 28) | (tclass << 20) | flow, udp_len, 17, hop, SRC, DST)
    masked_ip = struct.pack("!IHBB16s16s", (6 << 28) | (0xFF << 20) | 0xFFFFF, udp_len, 17, 0xFF, SRC, DST)
    masked_udp = udp[:6] + b"\xff\xff"
    masked_bth = bth[:4] + b"\xff" + bth[5:]
    crc = _crc32_bitwise(b"\xff" * 8 + masked_ip + masked_udp + masked_bth + payload)
    return ip + udp + bth + payload + struct.pack("<I", crc)


def _check(tmp_path, frames):
    path = tmp_path / "v6.pcap"
    wrpcap(str(path), [IPv6(f) for f in frames], linktype=101)
    return check_capture(path)


def test_independent_vector_validates(tmp_path):
    rep = _check(tmp_path, [_packet()])
    assert rep["roce_packets"] == 1 and rep["malformed"] == 0
    assert rep["icrc_bad"] == 0, rep["violations"]


def test_mutable_fields_do_not_count(tmp_path):
    """Routers change hop limit, traffic class (ECN) and may change the flow label: the ICRC holds."""
    good = _packet()
    mutated = bytearray(good)
    mutated[7] = 3                      # hop limit
    mutated[0:4] = struct.pack("!I", (6 << 28) | (0x03 << 20) | 0xABCDE)  # CE-marked, other flow label
    rep = _check(tmp_path, [bytes(mutated)])
    assert rep["icrc_bad"] == 0, rep["violations"]


def test_invariant_fields_count(tmp_path):
    for offset in (8, 24 + 15, 40 + 0, 48 + 8, 48 + 13):  # src, dst, UDP sport, BTH dqpn, payload
        bad = bytearray(_packet())
        bad[offset] ^= 0x01
        rep = _check(tmp_path, [bytes(bad)])
        assert rep["icrc_bad"] == 1, offset
