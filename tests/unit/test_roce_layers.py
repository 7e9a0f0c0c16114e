"""RoCEv2 Scapy layers: real captured bytes, build -> dissect round trips, ICRC over IPv4/IPv6, tshark."""

from __future__ import annotations

import json
import subprocess

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.packet import Raw
from scapy.utils import import_hexcap, wrpcap

from testbed.errors import SpecError
from testbed.roce.layers import (
    AETH,
    BTH,
    DETH,
    IETH,
    RETH,
    SYNDROME_NAK_PSN_SEQ,
    AtomicAckETH,
    AtomicETH,
    CNPPadding,
    ImmDt,
    ack,
    cnp,
    icrc_of,
    icrc_valid,
)
from testbed.roce.opcodes import EXT_HEADERS, OPCODE_NAMES

# A CNP captured on a ConnectX-4 Lx (Scapy's test/contrib/roce.uts, "RoCE CNP captured on ConnectX-4 Lx").
CX4_CNP = """0x0000:  e41d 2dab 2bc2 7cfe 9064 3b32 0800 45c2
0x0010:  003c 718c 4000 4011 9161 0a00 1101 0a00
0x0020:  1201 0000 12b7 0028 0000 8100 ffff 4000
0x0030:  0118 0000 0000 0000 0000 0000 0000 0000
0x0040:  0000 0000 0000 82fd 002a
"""


def _ether(*layers):
    pkt = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
    for layer in layers:
        pkt = pkt / layer
    return pkt


def test_connectx_cnp_dissects_and_icrc_verifies():
    raw = import_hexcap(CX4_CNP)
    pkt = Ether(raw)
    assert pkt[BTH].opcode == 0x81 and pkt[BTH].becn == 1 and pkt[BTH].dqpn == 0x118
    assert CNPPadding in pkt and pkt[CNPPadding].reserved1 == 0
    assert pkt[BTH].icrc == 0x82FD002A
    assert icrc_valid(pkt)
    rebuilt = pkt.copy()
    rebuilt[BTH].icrc = None
    assert bytes(rebuilt) == raw  # our ICRC reproduces the NIC's bytes


def test_connectx_cnp_with_flipped_payload_bit_fails_icrc():
    raw = bytearray(import_hexcap(CX4_CNP))
    raw[0x40] ^= 0x01  # inside the CNP padding
    assert not icrc_valid(Ether(bytes(raw)))


def test_icrc_ignores_mutable_fields():
    """Switches rewrite TTL, DSCP/ECN and the checksums; the ICRC must not change."""
    pkt = Ether(import_hexcap(CX4_CNP))
    pkt[IP].ttl, pkt[IP].tos, pkt[IP].chksum, pkt[UDP].chksum = 3, 0x03, None, 0x1234
    pkt[BTH].fecn = 1
    assert icrc_valid(Ether(bytes(pkt)))
    pkt[IP].id += 1  # not a mutable field
    assert not icrc_valid(Ether(bytes(pkt)))


def test_scapy_uc_send_only_reference_icrc():
    """Scapy's own 'RoCE layer' regression packet and its expected ICRC."""
    pkt = (Ether(dst="24:8a:07:a8:fa:22", src="24:8a:07:a8:fa:22")
           / IP(version=4, ihl=5, tos=0x1, id=1144, flags="DF", frag=0, ttl=64,
                src="192.168.0.7", dst="192.168.0.7", len=64)
           / UDP(sport=49152, dport=4791, len=44)
           / BTH(opcode="UC_SEND_ONLY", migreq=1, padcount=2, pkey=0xFFFF, dqpn=211, psn=13571856)
           / Raw(b"F0\x81\x8b\xe2\x895\xd9\x0e\x9a\x95PT\x01\xbe\x88^P\x00\x00"))
    dissected = Ether(bytes(pkt))
    assert dissected[BTH].icrc == 0x78F353F3


@pytest.mark.parametrize("opcode", sorted(OPCODE_NAMES))
@pytest.mark.parametrize("ip", ["v4", "v6"])
def test_every_opcode_round_trips(opcode, ip):
    l3 = IP(src="10.0.0.1", dst="10.0.0.2") if ip == "v4" else IPv6(src="fd00::1", dst="fd00::2")
    values = {"RETH": RETH(va=0x1122334455667788, rkey=0xABCD, dmalen=4096),
              "DETH": DETH(qkey=0x11111111, srcqp=0x123456),
              "AETH": AETH(syndrome=0x1F, msn=0x00ABCD),
              "AtomicETH": AtomicETH(va=0x1000, rkey=9, swapdt=5, cmpdt=6),
              "AtomicAckETH": AtomicAckETH(origremdt=0xFEEDFACE),
              "ImmDt": ImmDt(imm=0xCAFEBABE), "IETH": IETH(rkey=0x77), "CNPPadding": CNPPadding()}
    pkt = l3 / UDP(sport=50000, dport=4791) / BTH(opcode=opcode, dqpn=0xABCDEF, psn=0xFFFFFF, ackreq=1)
    for name in EXT_HEADERS[opcode]:
        pkt = pkt / values[name]
    pkt = pkt / Raw(b"\x5a" * 8)
    wire = bytes(_ether(pkt))
    back = Ether(wire)
    assert back[BTH].opcode == opcode and back[BTH].dqpn == 0xABCDEF and back[BTH].psn == 0xFFFFFF
    for name in EXT_HEADERS[opcode]:
        layer = type(values[name])
        assert layer in back, f"{OPCODE_NAMES[opcode]}: {name} not dissected"
        assert bytes(back[layer])[:len(bytes(values[name]))] == bytes(values[name])
    assert back[Raw].load == b"\x5a" * 8
    assert icrc_valid(back)


def test_icrc_matches_between_ipv4_and_independent_field_edit():
    pkt = Ether(bytes(_ether(IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=1, dport=4791)
                             / BTH(opcode=0x0A) / RETH(dmalen=4) / Raw(b"abcd"))))
    before = pkt[BTH].icrc
    pkt[Raw].load = b"abce"
    assert icrc_of(pkt) != before


def test_unsupported_stack_raises_never_zero():
    with pytest.raises(SpecError, match="UDP underlayer"):
        bytes(BTH(opcode=0x04) / Raw(b"x"))
    with pytest.raises(SpecError, match="IPv4 or IPv6"):
        bytes(UDP(dport=4791) / BTH(opcode=0x04))


def test_factories():
    c = cnp(0x1234)
    assert c.opcode == 0x81 and c.becn == 1 and c.pkey == 0xFFFF and len(bytes(c[CNPPadding])) == 16
    nak = ack(5, 100, 7, SYNDROME_NAK_PSN_SEQ)
    assert nak[AETH].syndrome == 0x60 and nak[BTH].psn == 100


def _tshark_fields(pcap, fields):
    cmd = ["tshark", "-r", str(pcap), "-d", "udp.port==4791,infiniband", "-T", "json"]
    for f in fields:
        cmd += ["-e", f]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    return [p["_source"]["layers"] for p in json.loads(out)]


@pytest.mark.tool("tshark")
def test_tshark_decodes_our_fields(tmp_path):
    base = IP(src="10.0.0.1", dst="10.0.0.2", tos=2) / UDP(sport=49152, dport=4791)
    pkts = [
        _ether(base / BTH(opcode=0x06, dqpn=0x000123, psn=0x000456, ackreq=1)
               / RETH(va=0x1000200030004000, rkey=0xBEEF, dmalen=65536) / Raw(b"\x00" * 1024)),
        _ether(base / ack(0x000321, 0x000456, 42, SYNDROME_NAK_PSN_SEQ)),
        _ether(base / cnp(0x000321)),
    ]
    pcap = tmp_path / "roce.pcap"
    wrpcap(str(pcap), pkts)
    fields = ["infiniband.bth.opcode", "infiniband.bth.destqp", "infiniband.bth.psn",
              "infiniband.bth.a", "infiniband.reth.va", "infiniband.reth.r_key",
              "infiniband.reth.dmalen", "infiniband.aeth.syndrome", "infiniband.aeth.msn",
              "infiniband.invariant.crc", "infiniband.vendor"]
    write, nak, cnp_pkt = _tshark_fields(pcap, fields)
    assert write["infiniband.bth.opcode"] == ["6"]
    assert int(write["infiniband.bth.destqp"][0], 0) == 0x123
    assert int(write["infiniband.bth.psn"][0], 0) == 0x456
    assert write["infiniband.bth.a"] == ["1"]
    assert int(write["infiniband.reth.va"][0], 0) == 0x1000200030004000
    assert int(write["infiniband.reth.r_key"][0], 0) == 0xBEEF
    assert int(write["infiniband.reth.dmalen"][0], 0) == 65536
    assert nak["infiniband.bth.opcode"] == ["17"]
    assert int(nak["infiniband.aeth.syndrome"][0], 0) == 0x60
    assert int(nak["infiniband.aeth.msn"][0], 0) == 42
    assert cnp_pkt["infiniband.bth.opcode"] == ["129"]
    assert int(cnp_pkt["infiniband.bth.destqp"][0], 0) == 0x321
    # Wireshark 4.0 knows no CNP header: it shows the 16 reserved bytes and the ICRC as vendor data
    vendor = cnp_pkt["infiniband.vendor"][-1].replace(":", "")
    assert vendor == "00" * 16 + bytes(pkts[2])[-4:].hex()
    assert int(write["infiniband.invariant.crc"][0], 16) == int.from_bytes(bytes(pkts[0])[-4:], "big")
