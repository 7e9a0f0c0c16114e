"""Reading captures without dissecting them in Scapy: pcap/pcapng records -> the IP/UDP/RoCE bytes.

The validator needs speed (a 64 MB transfer is ~65k packets) and must survive anything, so this module
works on raw bytes with ``struct`` and reports what it could not read instead of raising::

    pcap record --(link type)--> IPv4/IPv6 header --(UDP dport 4791)--> RocePacket(ip, udp, transport)
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from testbed.errors import UsageError
from testbed.roce.opcodes import ROCE_UDP_PORT

# pcap link types (tcpdump.org/linktypes.html)
LINKTYPE_NULL, LINKTYPE_ETHERNET, LINKTYPE_RAW, LINKTYPE_LINUX_SLL = 0, 1, 101, 113
LINKTYPE_IPV4, LINKTYPE_IPV6, LINKTYPE_LINUX_SLL2 = 228, 229, 276


@dataclass
class Record:
    """One captured frame: timestamp (s), link type, captured bytes, original length on the wire."""

    ts: float
    linktype: int
    data: bytes
    wirelen: int


@dataclass
class RocePacket:
    """A UDP/4791 datagram split into the parts the ICRC and the BTH checks need."""

    ts: float
    ip: bytes          # IPv4 header with options, or the IPv6 fixed header
    udp: bytes         # 8-byte UDP header
    transport: bytes   # BTH .. ICRC (the UDP payload)
    src: str
    dst: str
    ecn: int           # IP ECN codepoint: 0 Not-ECT, 1 ECT(1), 2 ECT(0), 3 CE
    truncated: bool    # the capture cut the packet short (snaplen)
    length: int = 0    # UDP payload length the headers claim (== len(transport) unless truncated)


class Malformed(Exception):
    """A UDP/4791 packet whose headers do not add up; the message says why."""


def read_records(path: str | Path) -> tuple[Iterator[Record], dict]:
    """Iterate the records of a pcap or pcapng file.

    Returns the iterator and a dict whose ``"truncated_file"`` becomes True if the file ends mid-record.

    Raises:
        UsageError: the file is missing or is neither pcap nor pcapng.
    """
    path = Path(path)
    try:
        blob = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read capture {path}: {exc.strerror}") from exc
    state = {"truncated_file": False}
    magic = blob[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4", b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d"):
        return _pcap(blob, state), state
    if magic == b"\x0a\x0d\x0d\x0a":
        return _pcapng(path, state), state
    raise UsageError(f"{path} is not a pcap or pcapng capture (magic {magic.hex() or 'empty'})")


def _pcap(blob: bytes, state: dict) -> Iterator[Record]:
    little = blob[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1")
    nano = blob[:4] in (b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d")
    endian = "<" if little else ">"
    if len(blob) < 24:
        state["truncated_file"] = True
        return
    linktype = struct.unpack_from(endian + "I", blob, 20)[0] & 0x0FFFFFFF
    rec = struct.Struct(endian + "IIII")
    off, div = 24, (1e9 if nano else 1e6)
    while off < len(blob):
        if off + 16 > len(blob):
            state["truncated_file"] = True
            return
        sec, frac, caplen, wirelen = rec.unpack_from(blob, off)
        off += 16
        if off + caplen > len(blob):
            state["truncated_file"] = True
            return
        yield Record(sec + frac / div, linktype, blob[off:off + caplen], wirelen)
        off += caplen


def _pcapng(path: Path, state: dict) -> Iterator[Record]:
    from scapy.error import Scapy_Exception
    from scapy.utils import RawPcapNgReader

    try:
        reader = RawPcapNgReader(str(path))
    except Scapy_Exception as exc:
        raise UsageError(f"{path}: unreadable pcapng ({exc})") from exc
    packets = iter(reader)
    try:
        while True:
            try:
                data, meta = next(packets)
            except (StopIteration, EOFError):
                return
            except (Scapy_Exception, struct.error, ValueError):
                state["truncated_file"] = True
                return
            ts = ((meta.tshigh << 32) + meta.tslow) / (meta.tsresol or 1e6)
            yield Record(ts, meta.linktype, data, meta.wirelen)
    finally:
        reader.close()


def _l3(rec: Record) -> tuple[int, int] | None:
    """(ethertype-like L3 protocol, offset of the IP header) or None for frames that are not IP."""
    d, lt = rec.data, rec.linktype
    if lt == LINKTYPE_ETHERNET:
        if len(d) < 14:
            return None
        etype, off = struct.unpack_from("!H", d, 12)[0], 14
        while etype in (0x8100, 0x88A8) and len(d) >= off + 4:
            etype, off = struct.unpack_from("!H", d, off + 2)[0], off + 4
        return etype, off
    if lt == LINKTYPE_LINUX_SLL:
        return (struct.unpack_from("!H", d, 14)[0], 16) if len(d) >= 16 else None
    if lt == LINKTYPE_LINUX_SLL2:
        return (struct.unpack_from("!H", d, 0)[0], 20) if len(d) >= 20 else None
    if lt in (LINKTYPE_RAW, 12, LINKTYPE_IPV4, LINKTYPE_IPV6):
        if not d:
            return None
        return (0x0800 if d[0] >> 4 == 4 else 0x86DD), 0
    if lt == LINKTYPE_NULL:
        if len(d) < 5:
            return None
        return (0x0800 if d[4] >> 4 == 4 else 0x86DD), 4
    return None


def roce_of(rec: Record) -> RocePacket | None:
    """The RoCEv2 packet in ``rec``, None if it is not UDP/4791 at all.

    Raises:
        Malformed: a UDP/4791 packet whose IP/UDP lengths are inconsistent or too short for a BTH.
    """
    l3 = _l3(rec)
    if l3 is None:
        return None
    etype, off = l3
    d = rec.data
    if etype == 0x0800:
        if len(d) < off + 20 or d[off] >> 4 != 4:
            return None
        ihl = (d[off] & 0x0F) * 4
        total = struct.unpack_from("!H", d, off + 2)[0]
        frag = struct.unpack_from("!H", d, off + 6)[0] & 0x3FFF
        if d[off + 9] != 17 or frag or len(d) < off + ihl + 8 or ihl < 20:
            return None
        udp_off = off + ihl
        ecn = d[off + 1] & 3
        src = ".".join(str(b) for b in d[off + 12:off + 16])
        dst = ".".join(str(b) for b in d[off + 16:off + 20])
        ip_payload = total - ihl
    elif etype == 0x86DD:
        if len(d) < off + 48 or d[off] >> 4 != 6 or d[off + 6] != 17:
            return None
        ihl, udp_off = 40, off + 40
        ecn = (struct.unpack_from("!I", d, off)[0] >> 20) & 3
        src, dst = _v6(d[off + 8:off + 24]), _v6(d[off + 24:off + 40])
        ip_payload = struct.unpack_from("!H", d, off + 4)[0]
    else:
        return None
    dport = struct.unpack_from("!H", d, udp_off + 2)[0]
    if dport != ROCE_UDP_PORT:
        return None
    udp_len = struct.unpack_from("!H", d, udp_off + 4)[0]
    truncated = len(d) < rec.wirelen
    if udp_len != ip_payload:
        raise Malformed(f"UDP length {udp_len} != IP payload length {ip_payload}")
    if udp_len < 8 + 12 + 4:
        raise Malformed(f"UDP length {udp_len} too short for BTH + ICRC")
    end = udp_off + udp_len
    if end > len(d) and not truncated:
        raise Malformed(f"IP/UDP lengths claim {end - off} bytes, frame holds {len(d) - off}")
    return RocePacket(rec.ts, d[off:off + ihl], d[udp_off:udp_off + 8], d[udp_off + 8:end], src, dst,
                      ecn, truncated or end > len(d), udp_len - 8)


def _v6(b: bytes) -> str:
    import ipaddress

    return str(ipaddress.IPv6Address(b))
