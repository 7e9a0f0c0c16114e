"""RoCEv2 packet layers for Scapy: the extended transport headers Scapy lacks, opcode bindings and an
ICRC that works for IPv4 and IPv6.

Scapy's ``scapy.contrib.roce`` provides GRH, BTH, AETH and CNPPadding, but computes the ICRC only over
IPv4 (and silently returns 0 otherwise). This module extends it::

    Ether / IP|IPv6 / UDP(dport=4791) / BTH / [RETH|DETH|AETH|AtomicETH|IETH] / [ImmDt|AtomicAckETH] / data
                                        \\__ icrc: trailing 4 bytes, computed in post_build (None)

Header widths follow the InfiniBand Architecture Specification Vol. 1 (IBA), chapter 9.3 "Extended
transport headers"; the opcode -> header chain is IBA Table 38 (§9.2.1). RD (reliable datagram) is not
carried by RoCE and is left out. CNP (opcode 0x81) is the RoCEv2 congestion notification (Annex A17.9.2).

Importing this module rebinds UDP port 4791 to this module's :class:`BTH`.
"""

from __future__ import annotations

import struct

import scapy.contrib.roce as _contrib
from scapy.contrib.roce import CNP_OPCODE, GRH  # noqa: F401 - re-exported
from scapy.fields import BitField, ByteEnumField, IntField, XBitField, XByteField, XIntField, XLongField
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.packet import Packet, Raw, bind_layers, split_bottom_up

from testbed.errors import SpecError
from testbed.roce import icrc as _icrc
from testbed.roce.opcodes import EXT_HEADERS, OPCODE_NAMES, ROCE_UDP_PORT


class BTH(_contrib.BTH):
    """Base Transport Header (IBA §9.2), 12 bytes, plus the trailing ICRC (IBA §7.8.1, Annex A17.4.5).

    Same fields as Scapy's contrib BTH; ``icrc=None`` is computed in post_build over IPv4 or IPv6 and
    anything else raises :class:`~testbed.errors.SpecError` instead of sending a zero ICRC.
    """

    name = "BTH"
    fields_desc = list(_contrib.BTH.fields_desc)
    fields_desc[0] = ByteEnumField("opcode", 0, OPCODE_NAMES)

    def compute_icrc(self, p: bytes) -> bytes:
        """ICRC bytes for ``p`` = this BTH + everything after it + 4 placeholder bytes."""
        udp = self.underlayer
        if not isinstance(udp, UDP):
            raise SpecError("bth.icrc", f"ICRC needs a UDP underlayer, got {getattr(udp, 'name', None)}")
        ip = udp.underlayer
        transport = p[:-4]
        udp_len = udp.len if udp.len is not None else 8 + len(p)
        udp_hdr = _icrc.udp_header(udp.sport, udp.dport, udp_len)
        if isinstance(ip, IP):
            hdr = ip.copy()
            hdr.remove_payload()
            hdr.proto = ip.getfieldval("proto")  # the UDP binding overloads it; keep what is sent
            hdr.len = None
            ihl_len = len(bytes(hdr))
            hdr.len = ip.len if ip.len is not None else ihl_len + udp_len
            ip_hdr = bytes(hdr)
        elif isinstance(ip, IPv6):
            hdr = ip.copy()
            hdr.remove_payload()
            hdr.plen = ip.plen if ip.plen is not None else udp_len
            hdr.nh = ip.getfieldval("nh")
            ip_hdr = bytes(hdr)[:40]
        else:
            raise SpecError("bth.icrc", "ICRC is defined for UDP over IPv4 or IPv6 only, "
                                        f"got {getattr(ip, 'name', None)} under UDP")
        return _icrc.icrc_bytes(_icrc.icrc(ip_hdr, udp_hdr, transport))

    def post_build(self, p: bytes, pay: bytes) -> bytes:
        p += pay
        if self.icrc is None:
            p = p[:-4] + self.compute_icrc(p)
        return p

    def guess_payload_class(self, payload):
        chain = EXT_HEADERS.get(self.opcode)
        if chain:
            return _LAYER[chain[0]]
        return Raw


class _ExtHeader(Packet):
    """An extended transport header whose successor depends on the BTH opcode, not on its own fields."""

    def extract_padding(self, s):
        return s, b""  # keep payload (data) with us: nothing trails inside the BTH

    def guess_payload_class(self, payload):
        bth = self.underlayer
        while bth is not None and not isinstance(bth, _contrib.BTH):
            bth = bth.underlayer
        chain = EXT_HEADERS.get(bth.opcode, ()) if bth is not None else ()
        name = type(self).__name__
        if name in chain and chain.index(name) + 1 < len(chain):
            return _LAYER[chain[chain.index(name) + 1]]
        return Raw


class RETH(_ExtHeader):
    """RDMA Extended Transport Header (IBA §9.3.3): virtual address, R_Key, DMA length; 16 bytes."""

    name = "RETH"
    fields_desc = [XLongField("va", 0), XIntField("rkey", 0), IntField("dmalen", 0)]


class DETH(_ExtHeader):
    """Datagram Extended Transport Header (IBA §9.3.2): Q_Key, source QP; 8 bytes (UD only)."""

    name = "DETH"
    fields_desc = [XIntField("qkey", 0), BitField("resv8", 0, 8), BitField("srcqp", 0, 24)]


class AtomicETH(_ExtHeader):
    """Atomic Extended Transport Header (IBA §9.3.4): VA, R_Key, swap/add data, compare data; 28 bytes."""

    name = "AtomicETH"
    fields_desc = [XLongField("va", 0), XIntField("rkey", 0), XLongField("swapdt", 0),
                   XLongField("cmpdt", 0)]


class AtomicAckETH(_ExtHeader):
    """Atomic Acknowledge Extended Transport Header (IBA §9.3.6): original remote data; 8 bytes."""

    name = "AtomicAckETH"
    fields_desc = [XLongField("origremdt", 0)]


class ImmDt(_ExtHeader):
    """Immediate Data Extended Transport Header (IBA §9.3.7): 4 bytes handed to the receiver's CQE."""

    name = "ImmDt"
    fields_desc = [XIntField("imm", 0)]


class IETH(_ExtHeader):
    """Invalidate Extended Transport Header (IBA §9.3.8): the R_Key to invalidate; 4 bytes."""

    name = "IETH"
    fields_desc = [XIntField("rkey", 0)]


class AETH(_ExtHeader):
    """ACK Extended Transport Header (IBA §9.3.5): syndrome (ACK / RNR NAK / NAK + code) and MSN."""

    name = "AETH"
    fields_desc = [XByteField("syndrome", 0), XBitField("msn", 0, 24)]


class CNPPadding(_contrib.CNPPadding):
    """The 16 reserved zero bytes after the BTH of a CNP (Annex A17.9.2)."""


_LAYER = {"RETH": RETH, "DETH": DETH, "AtomicETH": AtomicETH, "AtomicAckETH": AtomicAckETH,
          "ImmDt": ImmDt, "IETH": IETH, "AETH": AETH, "CNPPadding": CNPPadding}

#: AETH syndromes (IBA §9.7.5.1, Table 43): bits 6:5 = 00 ACK, 01 RNR NAK, 11 NAK; bits 4:0 the code.
SYNDROME_ACK = 0x1F  # ACK with "unlimited credits" credit count (0b11111)
SYNDROME_NAK_PSN_SEQ = 0x60
SYNDROME_NAK_INVALID_REQUEST = 0x61
SYNDROME_NAK_REMOTE_ACCESS = 0x62
SYNDROME_NAK_REMOTE_OP = 0x63


def cnp(dqpn: int) -> Packet:
    """A congestion notification packet for QP ``dqpn`` (the *sender's* QP): BTH + 16 zero bytes."""
    return BTH(opcode=CNP_OPCODE, becn=1, pkey=0xFFFF, dqpn=dqpn, psn=0) / CNPPadding()


def ack(dqpn: int, psn: int, msn: int, syndrome: int = SYNDROME_ACK) -> Packet:
    """An RC ACKNOWLEDGE for PSN ``psn`` (use a NAK syndrome for a NAK)."""
    return BTH(opcode=0x11, dqpn=dqpn, psn=psn) / AETH(syndrome=syndrome, msn=msn)


def icrc_of(pkt: Packet) -> int:
    """The ICRC as Scapy's ``icrc`` field would show it, recomputed for ``pkt`` (containing a BTH)."""
    bth = pkt[BTH] if BTH in pkt else pkt[_contrib.BTH]
    body = bytes(bth)
    fresh = bth.copy()
    fresh.icrc = None
    crc = BTH.compute_icrc(fresh, body)
    return struct.unpack("!I", crc)[0]


def icrc_valid(pkt: Packet) -> bool:
    """True when the packet's ICRC matches the one recomputed from its headers and payload."""
    bth = pkt[BTH] if BTH in pkt else pkt[_contrib.BTH]
    return bth.icrc == icrc_of(pkt)


split_bottom_up(UDP, _contrib.BTH, dport=ROCE_UDP_PORT)
bind_layers(UDP, BTH, dport=ROCE_UDP_PORT)
for _op, _chain in EXT_HEADERS.items():
    if _chain:
        bind_layers(BTH, _LAYER[_chain[0]], opcode=_op)
