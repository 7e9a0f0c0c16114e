"""PFC frames as bytes, without Scapy: the per-packet path of the link node's Python reference.

    dst 01:80:C2:00:00:01 | src | 0x8808 | opcode 0x0101 | class-enable (16) | time[0..7] (8 x 16) | 26 B zero

The Scapy layer for building, dissecting and printing is :mod:`testbed.pfc.frame`; the unit tests check that
both produce the same bytes. Also here: the DSCP -> priority classification of data frames ("trust dscp").
"""

from __future__ import annotations

import struct

from testbed.pfc.state import PauseFrame

MAC_CONTROL_ETHERTYPE = 0x8808
OPCODE_PAUSE = 0x0001
OPCODE_PFC = 0x0101

#: Destination of PAUSE and PFC frames (IEEE 802.1Q "MAC Control" reserved group address).
PFC_DST = "01:80:c2:00:00:01"

#: A MAC Control frame is a minimum-size frame: 64 B on the wire, 60 B without the FCS.
MIN_FRAME_NO_FCS = 60

_PFC_BODY = struct.Struct("!HHH8H")   # ethertype, opcode, class-enable vector, 8 pause times
_DST_BYTES = bytes.fromhex(PFC_DST.replace(":", ""))


def encode(frame: PauseFrame, src: bytes | str) -> bytes:
    """The 60 wire bytes (no FCS) of ``frame`` sent from MAC ``src``."""
    if isinstance(src, str):
        src = bytes.fromhex(src.replace(":", ""))
    if len(src) != 6:
        raise ValueError(f"source MAC must be 6 bytes, got {len(src)}")
    body = _PFC_BODY.pack(MAC_CONTROL_ETHERTYPE, OPCODE_PFC, frame.class_enable, *frame.quanta)
    out = _DST_BYTES + src + body
    return out + b"\x00" * (MIN_FRAME_NO_FCS - len(out))


def decode(raw: bytes) -> PauseFrame | None:
    """The :class:`PauseFrame` of a captured PFC frame, or None when ``raw`` is not one (untagged only).

    Any destination is accepted (a MAC consumes MAC Control frames by ethertype); reserved vector bits are
    ignored, as the standard asks of a receiver.
    """
    if len(raw) < 12 + _PFC_BODY.size:
        return None
    etype, opcode, vector, *times = _PFC_BODY.unpack_from(raw, 12)
    if etype != MAC_CONTROL_ETHERTYPE or opcode != OPCODE_PFC:
        return None
    return PauseFrame.from_wire(vector & 0xFF, times)


def dscp_of(raw: bytes) -> int | None:
    """DSCP of an IPv4/IPv6 frame (VLAN tags skipped), or None for anything else (no IP, too short)."""
    off = 12
    while len(raw) >= off + 2:
        etype = raw[off] << 8 | raw[off + 1]
        if etype in (0x8100, 0x88A8):
            off += 4
            continue
        off += 2
        if etype == 0x0800 and len(raw) >= off + 20 and raw[off] >> 4 == 4:
            return raw[off + 1] >> 2
        if etype == 0x86DD and len(raw) >= off + 40 and raw[off] >> 4 == 6:
            return ((raw[off] & 0x0F) << 4 | raw[off + 1] >> 4) >> 2
        return None
    return None


def priority_of(raw: bytes, config) -> int:
    """The PFC priority of a data frame: its DSCP through the config's map ("trust dscp"); 0 if not IP."""
    d = dscp_of(raw)
    return 0 if d is None else config.priority_of(d)

