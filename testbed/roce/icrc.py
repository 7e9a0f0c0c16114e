"""Invariant CRC (ICRC) of RoCEv2 packets, on bytes (no Scapy), shared by the layers, the validator and
the soft-RDMA data path.

IBA Vol. 1 §7.8.1 defines the ICRC over the fields that no switch may change; RoCEv2 (IBA Annex A17,
§A17.4.5.1) replaces the LRH/GRH by the IP and UDP headers and masks the mutable fields with ones::

    8 x 0xFF (pseudo LRH) | IP header, masked | UDP header, checksum = 0xFFFF | BTH, byte 4 = 0xFF | rest
      IPv4 mask: TOS (DSCP+ECN), TTL, header checksum
      IPv6 mask: traffic class, flow label, hop limit

The CRC is the Ethernet CRC-32 (``zlib.crc32``) and it is sent least-significant byte first, so the
value read big-endian from the wire (Scapy's ``icrc`` field) is the byte-swapped CRC.

A data path computes the fixed part once per header template with :func:`prefix_crc` and continues it
over each packet's BTH and payload with ``zlib.crc32(data, prefix)``.
"""

from __future__ import annotations

import struct
import zlib

from testbed.errors import SpecError

_PSEUDO_LRH = b"\xff" * 8
#: RoCEv2 UDP destination port (IANA).
ROCE_UDP_PORT = 4791


def mask_ipv4(header: bytes) -> bytes:
    """IPv4 header with TOS, TTL and checksum set to all ones (options kept as they are)."""
    if len(header) < 20 or header[0] >> 4 != 4:
        raise SpecError("ip", f"not an IPv4 header ({len(header)} bytes, version {header[:1].hex()})")
    h = bytearray(header)
    h[1] = 0xFF
    h[8] = 0xFF
    h[10:12] = b"\xff\xff"
    return bytes(h)


def mask_ipv6(header: bytes) -> bytes:
    """IPv6 fixed header with traffic class, flow label and hop limit set to all ones."""
    if len(header) != 40 or header[0] >> 4 != 6:
        raise SpecError("ip", f"not an IPv6 fixed header ({len(header)} bytes)")
    h = bytearray(header)
    h[0] |= 0x0F
    h[1:4] = b"\xff\xff\xff"
    h[7] = 0xFF
    return bytes(h)


def mask_ip(header: bytes) -> bytes:
    """Mask an IPv4 or IPv6 header; anything else raises (never a zero ICRC)."""
    version = header[0] >> 4 if header else None
    if version == 4:
        return mask_ipv4(header)
    if version == 6:
        return mask_ipv6(header)
    raise SpecError("ip", f"ICRC needs an IPv4 or IPv6 header, got IP version {version}")


def prefix_crc(ip_header: bytes, udp_header: bytes) -> int:
    """Running CRC over the pseudo LRH, the masked IP header and the UDP header (checksum masked)."""
    if len(udp_header) != 8:
        raise SpecError("udp", f"UDP header must be 8 bytes, got {len(udp_header)}")
    return zlib.crc32(_PSEUDO_LRH + mask_ip(ip_header) + udp_header[:6] + b"\xff\xff")


def continue_crc(prefix: int, transport: bytes | memoryview) -> int:
    """Continue a :func:`prefix_crc` over BTH + headers + payload (without the ICRC); masks BTH byte 4."""
    crc = zlib.crc32(transport[:4], prefix)
    crc = zlib.crc32(b"\xff", crc)
    return zlib.crc32(transport[5:], crc)


def icrc(ip_header: bytes, udp_header: bytes, transport: bytes) -> int:
    """ICRC of one packet as an integer CRC-32 (wire bytes are ``icrc_bytes(value)``).

    Args:
        ip_header: the IPv4 header (with options) or the IPv6 fixed header, as on the wire.
        udp_header: the 8-byte UDP header as on the wire.
        transport: BTH through the last payload byte, without the 4 ICRC bytes.
    """
    if len(transport) < 12:
        raise SpecError("bth", f"transport part is {len(transport)} bytes, shorter than a BTH (12)")
    return continue_crc(prefix_crc(ip_header, udp_header), transport)


def icrc_bytes(crc: int) -> bytes:
    """The 4 ICRC bytes as sent (least-significant byte first)."""
    return struct.pack("<I", crc & 0xFFFFFFFF)


def ipv4_header(src: bytes, dst: bytes, total_length: int, tos: int = 0, ttl: int = 64,
                ident: int = 0, dont_fragment: bool = True) -> bytes:
    """A 20-byte IPv4 header as the kernel sends it for a UDP socket (checksum left zero: it is masked).

    An unconnected UDP socket with path-MTU discovery on (DF set) sends IP ID 0, which is what makes
    the ICRC computable in user space before the kernel adds the header.
    """
    flags = 0x4000 if dont_fragment else 0
    return struct.pack("!BBHHHBBH4s4s", 0x45, tos, total_length, ident, flags, ttl, 17, 0, src, dst)


def ipv6_header(src: bytes, dst: bytes, payload_length: int) -> bytes:
    """A 40-byte IPv6 header carrying UDP (traffic class, flow label, hop limit are masked anyway)."""
    return struct.pack("!IHBB16s16s", 6 << 28, payload_length, 17, 64, src, dst)


def udp_header(sport: int, dport: int, length: int) -> bytes:
    return struct.pack("!HHHH", sport, dport, length, 0)
