"""Just enough pcap to read tcpdump's captures: (timestamp ns, frame) records and probe sequence numbers.

The fidelity benchmark measures the emulated link from outside, as Mininet-HiFi did: kernel capture
timestamps on the sender's egress and the receiver's ingress (``tcpdump --time-stamp-precision nano``).
Pure: no Scapy in the per-packet path (tens of thousands of records), unit-tested with built bytes.

    pcap global header (24 B): magic a1b2c3d4 (us) | a1b23c4d (ns), either byte order
    record header (16 B): ts_sec, ts_frac, caplen, origlen; then caplen bytes
"""

from __future__ import annotations

import struct
from pathlib import Path

MAGIC_US = 0xA1B2C3D4
MAGIC_NS = 0xA1B23C4D
LINKTYPE_ETHERNET = 1


def read_pcap(path: str | Path) -> list[tuple[int, bytes, int]]:
    """Records of a pcap file as (timestamp in ns, captured bytes, original frame length).

    Raises:
        ValueError: not a pcap file, or not Ethernet.
    """
    data = Path(path).read_bytes()
    if len(data) < 24:
        raise ValueError(f"{path}: too short for a pcap file")
    for endian in ("<", ">"):
        (magic,) = struct.unpack_from(endian + "I", data)
        if magic in (MAGIC_US, MAGIC_NS):
            break
    else:
        raise ValueError(f"{path}: not a pcap file (magic {data[:4].hex()})")
    scale = 1 if magic == MAGIC_NS else 1000
    (linktype,) = struct.unpack_from(endian + "I", data, 20)
    if linktype != LINKTYPE_ETHERNET:
        raise ValueError(f"{path}: link type {linktype}, expected Ethernet (1)")
    rec = struct.Struct(endian + "IIII")
    out = []
    off = 24
    while off + 16 <= len(data):
        sec, frac, caplen, orig = rec.unpack_from(data, off)
        off += 16
        out.append((sec * 1_000_000_000 + frac * scale, data[off:off + caplen], orig))
        off += caplen
    return out


def write_pcap(path: str | Path, records, nanosecond: bool = True) -> None:
    """Write (ts_ns, frame) records, uncut (tests build captures with it)."""
    magic = MAGIC_NS if nanosecond else MAGIC_US
    parts = [struct.pack("<IHHiIII", magic, 2, 4, 0, 0, 65535, LINKTYPE_ETHERNET)]
    for ts, frame in records:
        frac = ts % 1_000_000_000 if nanosecond else (ts % 1_000_000_000) // 1000
        parts.append(struct.pack("<IIII", ts // 1_000_000_000, frac, len(frame), len(frame)) + frame)
    Path(path).write_bytes(b"".join(parts))


def udp_payload(frame: bytes, port: int | None = None) -> bytes | None:
    """UDP payload of an Ethernet/IPv4 frame (to ``port`` when given), else None."""
    if len(frame) < 42 or frame[12:14] != b"\x08\x00" or frame[23] != 17:
        return None
    ihl = (frame[14] & 0x0F) * 4
    udp = 14 + ihl
    if port is not None and int.from_bytes(frame[udp + 2:udp + 4], "big") != port:
        return None
    return frame[udp + 8:]


def probe_arrivals(records, port: int) -> dict[int, tuple[int, int, int]]:
    """seq -> (timestamp ns, frame length, ECN bits) of the probes (see :mod:`testbed.links.probe`) in a capture.

    The first capture of a sequence number wins (a probe is never legitimately seen twice).
    """
    out: dict[int, tuple[int, int, int]] = {}
    for ts, frame, length in records:
        payload = udp_payload(frame, port)
        if payload is None or len(payload) < 8:
            continue
        seq = int.from_bytes(payload[:8], "big")
        if seq not in out:
            out[seq] = (ts, length, frame[15] & 0x03)
    return out
