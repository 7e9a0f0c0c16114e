"""Receiving a real stack's packets: Linux rdma_rxe fills the IPv4 ID (``__ip_select_ident``), which
the ICRC covers and a UDP socket never shows. ``wire.Path.rx_icrc_ok`` falls back to solving for the ID
(CRC-32 is affine in the 16 ID bits). Checked on two packets captured from kernel rxe in the VM
harness (ibv_rc_pingpong -> testbed rdma rc-pingpong, IP IDs 56523 and 56567) and on packets built here
with every kind of ID; corruption elsewhere is still caught."""

from __future__ import annotations

import random
import zlib

import pytest

from testbed.rdma import wire
from testbed.roce import icrc

# From /mnt/out/pp1.pcap of the interop run: IP header .. ICRC, rxe 10.77.0.1 -> our endpoint 10.77.0.2.
RXE_SEND_FIRST = bytes.fromhex(
    "4500042cdccb4000401145590a4d00010a4d0002c2a712b7041800000000ffff006a4e6300f8ac2f") + b"\x7b" * 1024 \
    + bytes.fromhex("ddabaac3")
RXE_ACK = bytes.fromhex(
    "45000030dcf74000401149290a4d00010a4d0002c2a712b7001c00001100ffff006a4e6300c687b71f0000017ed54049")


def _datagram(packet: bytes) -> tuple[bytes, int, int]:
    """(UDP payload, IP ID, UDP source port) of an IPv4 packet."""
    ihl = (packet[0] & 0xF) * 4
    return packet[ihl + 8:], int.from_bytes(packet[4:6], "big"), int.from_bytes(packet[ihl:ihl + 2], "big")


@pytest.mark.parametrize("packet", [RXE_SEND_FIRST, RXE_ACK], ids=["send-first", "ack"])
def test_real_rxe_packets_pass_and_their_ip_id_is_recovered(packet):
    dgram, ident, sport = _datagram(packet)
    assert ident != 0
    path = wire.Path("10.77.0.2", 4791, "10.77.0.1", 4791)
    assert path.rx_icrc_ok(memoryview(dgram), len(dgram), sport)
    assert path.rx_id_solved == 1
    # The solver names the very ID on the wire: the syndrome of the ID-0 check is D(ident).
    ip0 = icrc.ipv4_header(bytes([10, 77, 0, 1]), bytes([10, 77, 0, 2]), len(packet), ident=0)
    crc0 = icrc.icrc(ip0, icrc.udp_header(sport, 4791, 8 + len(dgram)), dgram[:-4])
    assert wire._IdSolver.of(len(dgram)).solve(crc0 ^ int.from_bytes(dgram[-4:], "little")) == ident


@pytest.mark.parametrize("packet", [RXE_SEND_FIRST, RXE_ACK], ids=["send-first", "ack"])
def test_a_flipped_bit_in_a_real_packet_is_still_rejected(packet):
    dgram, _ident, sport = _datagram(packet)
    path = wire.Path("10.77.0.2", 4791, "10.77.0.1", 4791)
    for bit in range(0, (len(dgram) - 4) * 8, 7):
        if bit // 8 == 4:
            continue   # BTH byte 4 (reserved/FECN/BECN) is masked out of the ICRC by definition
        bad = bytearray(dgram)
        bad[bit // 8] ^= 1 << (bit % 8)
        assert not path.rx_icrc_ok(memoryview(bytes(bad)), len(bad), sport), bit
    assert not path.rx_icrc_ok(memoryview(dgram), len(dgram), sport + 1)   # the UDP header is covered too


@pytest.mark.parametrize("ident", [0, 1, 0x00FF, 0x1234, 0x8000, 0xFFFF])
@pytest.mark.parametrize("n", [16, 20, 36, 1052, 4124])
def test_any_ip_id_and_length(ident, n):
    rng = random.Random(ident * 7919 + n)
    body = bytes(rng.getrandbits(8) for _ in range(n - 4))
    ip = icrc.ipv4_header(bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2]), 20 + 8 + n, tos=0x02, ttl=17, ident=ident)
    dgram = body + icrc.icrc_bytes(icrc.icrc(ip, icrc.udp_header(0xC123, 4791, 8 + n), body))
    path = wire.Path("10.0.0.2", 4791, "10.0.0.1", 4791)
    assert path.rx_icrc_ok(memoryview(dgram), n, 0xC123)
    assert path.rx_id_solved == (ident != 0)   # our own packets (ID 0) never need the fallback


def test_the_sixteen_id_columns_are_independent():
    for n in (16, 1040, 4124):
        solver = wire._IdSolver.of(n)
        assert len(solver.rows) == 16
        size = 8 + 20 + 8 + n - 4   # pseudo-LRH, IPv4, UDP, the datagram without its ICRC
        seen = {solver.solve(zlib.crc32(bytes(size)) ^ zlib.crc32(bytes(12) + x.to_bytes(2, "big") + bytes(size - 14)))
                for x in range(0, 1 << 16, 257)}
        assert seen == set(range(0, 1 << 16, 257))


def test_ipv6_has_no_fallback():
    body = bytes(28)
    path = wire.Path("fd00::2", 4791, "fd00::1", 4791)
    assert not path.rx_icrc_ok(memoryview(body + b"\0\0\0\0"), 32, 4791)
