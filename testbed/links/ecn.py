"""ECN on raw Ethernet frames: read the codepoint, set CE (RFC 3168), keep the IPv4 checksum right.

Pure byte manipulation used by the delay line in its hot path, so it avoids Scapy and parses only the
fields it needs::

    Ethernet (14 B) [802.1Q tag (4 B)]* | IPv4: ver/ihl, TOS = DSCP(6) ECN(2), ..., checksum at +10
                                        | IPv6: ver(4) TC(8) flow(20): ECN = low 2 bits of TC

RoCEv2's ICRC masks the ECN bits (DOMAIN.md), so setting CE on a RoCE packet needs no ICRC update.
"""

from __future__ import annotations

#: ECN codepoints (RFC 3168 section 5).
NOT_ECT, ECT1, ECT0, CE = 0, 1, 2, 3
#: Returned by :func:`ecn_codepoint` for frames that carry neither IPv4 nor IPv6.
NOT_IP = -1

_VLAN_TYPES = (0x8100, 0x88A8)


def _l3(frame) -> tuple[int, int]:
    """(ethertype, offset of the L3 header), skipping VLAN tags; (0, 0) when the frame is too short."""
    off = 12
    while len(frame) >= off + 2:
        etype = (frame[off] << 8) | frame[off + 1]
        if etype in _VLAN_TYPES:
            off += 4
            continue
        return etype, off + 2
    return 0, 0


def ecn_codepoint(frame) -> int:
    """The ECN field (0-3) of an IPv4/IPv6 frame, or :data:`NOT_IP`."""
    etype, off = _l3(frame)
    if etype == 0x0800 and len(frame) >= off + 20 and frame[off] >> 4 == 4:
        return frame[off + 1] & 0x03
    if etype == 0x86DD and len(frame) >= off + 40 and frame[off] >> 4 == 6:
        return (frame[off + 1] >> 4) & 0x03
    return NOT_IP


def ipv4_checksum(header) -> int:
    """RFC 791 header checksum of ``header`` (its checksum field must be zero or is summed as is)."""
    total = 0
    for i in range(0, len(header) - 1, 2):
        total += (header[i] << 8) | header[i + 1]
    if len(header) % 2:
        total += header[-1] << 8
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def set_ce(frame) -> bytes:
    """Copy of ``frame`` with ECN = CE; the IPv4 header checksum is recomputed.

    Raises:
        ValueError: the frame is not IPv4/IPv6 (only ECN-capable IP packets may be marked).
    """
    etype, off = _l3(frame)
    out = bytearray(frame)
    if etype == 0x0800 and len(out) >= off + 20 and out[off] >> 4 == 4:
        ihl = (out[off] & 0x0F) * 4
        if ihl < 20 or len(out) < off + ihl:
            raise ValueError(f"bad IPv4 header length {ihl}")
        out[off + 1] |= CE
        out[off + 10] = out[off + 11] = 0
        csum = ipv4_checksum(out[off:off + ihl])
        out[off + 10], out[off + 11] = csum >> 8, csum & 0xFF
        return bytes(out)
    if etype == 0x86DD and len(out) >= off + 40 and out[off] >> 4 == 6:
        out[off + 1] |= CE << 4
        return bytes(out)
    raise ValueError("not an IPv4/IPv6 frame; cannot set CE")
