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


def _ip(src: str, dst: str, tos: int = 2) -> Packet:
    return Ether(**_MAC) / IP(src=src, dst=dst, tos=tos, flags="DF", id=0) / UDP(sport=49152, dport=4791)


def rc_read(src: str, dst: str, dqpn: int, psn: int, length: int, va: int = 0x2000,
            rkey: int = 0x5678, tos: int = 2) -> Packet:
    """An RC RDMA READ request for ``length`` bytes (it reserves one PSN per response packet)."""
    return (_ip(src, dst, tos) / BTH(opcode=0x0C, dqpn=dqpn, psn=psn % (1 << 24), ackreq=1)
            / RETH(va=va, rkey=rkey, dmalen=length))


def read_responses(src: str, dst: str, dqpn: int, psn: int, data: bytes, msn: int, mtu: int = 1024,
                   tos: int = 2) -> list[Packet]:
    """The READ RESPONSE packets (FIRST/MIDDLE/LAST or ONLY) carrying ``data`` from PSN ``psn``."""
    chunks = [data[i:i + mtu] for i in range(0, len(data), mtu)] or [b""]
    out = []
    for i, chunk in enumerate(chunks):
        first, last = i == 0, i == len(chunks) - 1
        opcode = 0x10 if first and last else 0x0D if first else 0x0F if last else 0x0E
        pad = (-len(chunk)) % 4 if last else 0
        pkt = _ip(src, dst, tos) / BTH(opcode=opcode, dqpn=dqpn, psn=(psn + i) % (1 << 24), padcount=pad)
        if opcode != 0x0E:
            pkt = pkt / AETH(syndrome=0x1F, msn=msn)
        out.append(pkt / Raw(chunk + b"\x00" * pad))
    return out


def atomic(src: str, dst: str, dqpn: int, psn: int, opcode: int = 0x14, va: int = 0x3000,
           rkey: int = 0x9ABC, swap_add: int = 1, compare: int = 0) -> Packet:
    """COMPARE_SWAP (0x13) or FETCH_ADD (0x14) on the 8 bytes at ``va``."""
    return (_ip(src, dst) / BTH(opcode=opcode, dqpn=dqpn, psn=psn % (1 << 24), ackreq=1)
            / AtomicETH(va=va, rkey=rkey, swapdt=swap_add, cmpdt=compare))


def atomic_ack(src: str, dst: str, dqpn: int, psn: int, msn: int, original: int) -> Packet:
    return (_ip(src, dst) / BTH(opcode=0x12, dqpn=dqpn, psn=psn % (1 << 24))
            / AETH(syndrome=0x1F, msn=msn) / AtomicAckETH(origremdt=original))


def uc_write(src: str, dst: str, dqpn: int, psn: int, data: bytes, mtu: int = 1024) -> list[Packet]:
    """An unreliable-connected RDMA WRITE: the RC packets with the UC opcodes (RC + 0x20)."""
    pkts = rc_write(src, dst, dqpn, psn, data, mtu=mtu)
    for p in pkts:
        p[BTH].opcode += 0x20
        p[BTH].ackreq = 0
    return pkts


def ud_send(src: str, dst: str, dqpn: int, psn: int, data: bytes, srcqp: int, qkey: int = 0x11111111,
            tos: int = 2) -> Packet:
    """A UD SEND ONLY with its DETH (Q_Key, source QP)."""
    pad = (-len(data)) % 4
    return (_ip(src, dst, tos) / BTH(opcode=0x64, dqpn=dqpn, psn=psn % (1 << 24), padcount=pad)
            / DETH(qkey=qkey, srcqp=srcqp) / Raw(data + b"\x00" * pad))


def fuzzed(count: int, seed: int = 1, src: str = "10.0.0.1", dst: str = "10.0.0.2") -> list[bytes]:
    """``count`` RoCEv2 IPv4 packets (no Ethernet header: pcap link type RAW) with every layer
    randomised by Scapy's ``fuzz()`` (IP, UDP, BTH, extended headers), cycling through all opcodes,
    and every fourth one cut short at a random length.

    The same ``seed`` gives the same packets: Scapy's fuzzed fields draw from the ``random`` module's
    global generator, so it is seeded for the build and the caller's generator state restored after
    (a test that failed on one draw can then be rerun on that draw)."""
    saved = random.getstate()
    try:
        random.seed(seed)
        return _fuzzed(count, random.Random(seed), src, dst)
    finally:
        random.setstate(saved)


def _fuzzed(count: int, rng: random.Random, src: str, dst: str) -> list[bytes]:
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
