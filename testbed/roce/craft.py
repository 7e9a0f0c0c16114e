"""Crafting RoCEv2 traffic with Scapy: RC message segmentation and fuzzed packets.

Used by tests and tools that need well-formed or deliberately broken packets on the wire; the
soft-RDMA data path builds its bytes directly (see :mod:`testbed.rdma.wire`) for speed.
"""

from __future__ import annotations

import random

from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Packet, Raw, fuzz

from testbed.roce.layers import AETH, BTH, DETH, IETH, RETH, AtomicAckETH, AtomicETH, CNPPadding, ImmDt
from testbed.roce.opcodes import EXT_HEADERS, OPCODE_NAMES

_MAC = {"src": "02:00:00:00:00:01", "dst": "02:00:00:00:00:02"}


def rc_write(src: str, dst: str, dqpn: int, psn: int, data: bytes, mtu: int = 1024, va: int = 0x1000,
             rkey: int = 0x1234, tos: int = 2, sport: int = 49152, imm: int | None = None) -> list[Packet]:
    """The packets of one RC RDMA WRITE (FIRST/MIDDLE/LAST or ONLY), PSNs from ``psn`` (wrapping)."""
    chunks = [data[i:i + mtu] for i in range(0, len(data), mtu)] or [b""]
    out = []
    for i, chunk in enumerate(chunks):
        first, last = i == 0, i == len(chunks) - 1
        if first and last:
            opcode = 0x0B if imm is not None else 0x0A
        elif first:
            opcode = 0x06
        elif last:
            opcode = 0x09 if imm is not None else 0x08
        else:
            opcode = 0x07
        pad = (-len(chunk)) % 4 if last else 0
        bth = BTH(opcode=opcode, dqpn=dqpn, psn=(psn + i) % (1 << 24), ackreq=int(last), padcount=pad)
        pkt = Ether(**_MAC) / IP(src=src, dst=dst, tos=tos, flags="DF", id=0) / UDP(sport=sport, dport=4791) / bth
        if first:
            pkt = pkt / RETH(va=va, rkey=rkey, dmalen=len(data))
        if last and imm is not None:
            pkt = pkt / ImmDt(imm=imm)
        out.append(pkt / Raw(chunk + b"\x00" * pad))
    return out


def rc_ack(src: str, dst: str, dqpn: int, psn: int, msn: int, syndrome: int = 0x1F) -> Packet:
    return (Ether(**_MAC) / IP(src=src, dst=dst, flags="DF", id=0) / UDP(sport=49152, dport=4791)
            / BTH(opcode=0x11, dqpn=dqpn, psn=psn % (1 << 24)) / AETH(syndrome=syndrome, msn=msn))


def fuzzed(count: int, seed: int = 1, src: str = "10.0.0.1", dst: str = "10.0.0.2") -> list[bytes]:
    """``count`` RoCEv2 IPv4 packets (no Ethernet header: pcap link type RAW) with every layer
    randomised by Scapy's ``fuzz()`` (IP, UDP, BTH, extended headers), cycling through all opcodes,
    and every fourth one cut short at a random length."""
    rng = random.Random(seed)
    layer = {"RETH": RETH, "DETH": DETH, "AETH": AETH, "AtomicETH": AtomicETH,
             "AtomicAckETH": AtomicAckETH, "ImmDt": ImmDt, "IETH": IETH, "CNPPadding": CNPPadding}
    templates = []  # one fuzzed template per opcode; every build draws fresh random field values
    for opcode in sorted(OPCODE_NAMES):
        ip = fuzz(IP(src=src, dst=dst, version=4, ihl=5, proto=17, frag=0, flags="DF"))
        pkt = ip / fuzz(UDP(dport=4791)) / fuzz(BTH(opcode=opcode))
        for name in EXT_HEADERS[opcode]:
            pkt = pkt / fuzz(layer[name]())
        templates.append(pkt / fuzz(Raw()))
    frames = []
    for i in range(count):
        frame = bytes(templates[i % len(templates)])
        if i % 4 == 3:
            frame = frame[:rng.randrange(1, len(frame))]
        frames.append(frame)
    return frames


def fuzzed_datagrams(count: int, seed: int = 1) -> list[bytes]:
    """UDP payloads (BTH .. ICRC) cut from :func:`fuzzed` packets, for sending to a live endpoint
    through an ordinary UDP socket; those too short to carry a UDP header come out empty."""
    return [frame[28:] for frame in fuzzed(count, seed)]
