"""Connection-data formats of the real RDMA stack's test tools, so ``testbed rdma`` can meet them (pure).

rdma-core ``ibv_rc_pingpong`` (libibverbs/examples/rc_pingpong.c, pingpong.c), over TCP port 18515::

    client -> server  "LLLL:QQQQQQ:PPPPPP:GGGG...G\\0"   52 bytes: lid %04x, qpn %06x, psn %06x, wire GID
    server -> client  the same record for the server's QP (after it moved its QP to RTR/RTS)
    client -> server  "done\\0"                          5 bytes

  The wire GID is the 16 GID bytes as 32 lower-case hex digits, in order (``gid_to_wire_gid`` prints each
  32-bit word through ``htobe32``). On RoCE the LID is 0 and the GID names the peer: ``::ffff:a.b.c.d``
  for an IPv4 address (RoCEv2), the IPv6 address itself otherwise.

perftest ``ib_*_bw`` / ``ib_*_lat`` (src/perftest_communication.h), one record per QP and per handshake::

    "%04x:%04x:%06x:%06x:%08x:%016llx:" lid, out_reads, qpn, psn, rkey, vaddr
    + 16 x "%02x:" the GID bytes + "%08x:" the SRQ number, NUL   108 bytes (with a GID: RoCE)
    without a GID (IB, -x not given):  "...:%016llx:%08x" + NUL        59 bytes

  Around the records perftest also exchanges its version string, cycle-buffer and cache-line sizes,
  the MTU and a parameter block, and ends with a bandwidth report; see docs/rdma.md for the order.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from testbed.rdma.verbs import RdmaError

#: sizeof "0000:000000:000000:00000000000000000000000000000000" (rc_pingpong.c, the msg buffer).
PINGPONG_MSG_SIZE = 52
PINGPONG_DONE = b"done\x00"
#: perftest_communication.h KEY_MSG_SIZE / KEY_MSG_SIZE_GID.
PERFTEST_KEY_SIZE = 59
PERFTEST_KEY_SIZE_GID = 108


def gid_of_ip(ip: str) -> bytes:
    """The RoCEv2 GID of an IP address: IPv4-mapped for IPv4 (as rdma_rxe fills its GID table)."""
    addr = ipaddress.ip_address(ip)
    if addr.version == 4:
        return ipaddress.IPv6Address("::ffff:" + str(addr)).packed
    return addr.packed


def ip_of_gid(gid: bytes) -> str:
    """The IP address a RoCEv2 GID stands for (IPv4-mapped -> IPv4)."""
    if len(gid) != 16:
        raise RdmaError(f"a GID is 16 bytes, got {len(gid)}")
    addr = ipaddress.IPv6Address(gid)
    return str(addr.ipv4_mapped) if addr.ipv4_mapped else str(addr)


@dataclass(frozen=True)
class PingpongDest:
    """``struct pingpong_dest`` of rc_pingpong.c: what one side tells the other."""

    lid: int
    qpn: int
    psn: int
    gid: bytes

    @property
    def ip(self) -> str:
        return ip_of_gid(self.gid)


def format_pingpong(dest: PingpongDest) -> bytes:
    """``sprintf(msg, "%04x:%06x:%06x:%s", lid, qpn, psn, wire_gid)``, sent as ``sizeof msg`` bytes."""
    text = "%04x:%06x:%06x:%s" % (dest.lid, dest.qpn, dest.psn, dest.gid.hex())
    return text.encode().ljust(PINGPONG_MSG_SIZE, b"\x00")[:PINGPONG_MSG_SIZE]


def parse_pingpong(msg: bytes) -> PingpongDest:
    """``sscanf(msg, "%x:%x:%x:%s", ...)`` + ``wire_gid_to_gid``; raises :class:`RdmaError` on junk."""
    if len(msg) != PINGPONG_MSG_SIZE:
        raise RdmaError(f"ibv_rc_pingpong record is {PINGPONG_MSG_SIZE} bytes, got {len(msg)}")
    text = msg.split(b"\x00", 1)[0].decode("ascii", "replace")
    parts = text.split(":")
    if len(parts) != 4 or len(parts[3]) != 32:
        raise RdmaError(f"not an ibv_rc_pingpong record: {text!r} (want LID:QPN:PSN:GID)")
    try:
        lid, qpn, psn = (int(p, 16) for p in parts[:3])
        gid = bytes.fromhex(parts[3])
    except ValueError:
        raise RdmaError(f"not an ibv_rc_pingpong record: {text!r} (fields must be hex)") from None
    return PingpongDest(lid, qpn & 0xFFFFFF, psn & 0xFFFFFF, gid)


@dataclass(frozen=True)
class PerftestDest:
    """The part of perftest's ``struct pingpong_dest`` that crosses the wire."""

    lid: int
    out_reads: int
    qpn: int
    psn: int
    rkey: int
    vaddr: int
    gid: bytes | None      # None: the 59-byte record without GID (InfiniBand)
    srqn: int = 0

    @property
    def ip(self) -> str:
        if self.gid is None:
            raise RdmaError("this perftest record carries no GID (peer ran without -x on IB)")
        return ip_of_gid(self.gid)


def format_perftest(dest: PerftestDest) -> bytes:
    """KEY_PRINT_FMT_GID (or KEY_PRINT_FMT without a GID), sent as KEY_MSG_SIZE[_GID] bytes."""
    head = "%04x:%04x:%06x:%06x:%08x:%016x" % (dest.lid, dest.out_reads, dest.qpn, dest.psn, dest.rkey,
                                             dest.vaddr)
    if dest.gid is None:
        text, size = head + ":%08x" % dest.srqn, PERFTEST_KEY_SIZE
    else:
        if len(dest.gid) != 16:
            raise RdmaError(f"a GID is 16 bytes, got {len(dest.gid)}")
        text = head + ":" + "".join("%02x:" % b for b in dest.gid) + "%08x:" % dest.srqn
        size = PERFTEST_KEY_SIZE_GID
    raw = text.encode()
    if len(raw) >= size:
        raise RdmaError(f"perftest record field too wide for {size} bytes: {text!r}")
    return raw.ljust(size, b"\x00")


def parse_perftest(msg: bytes) -> PerftestDest:
    """Parse a 108-byte (GID) or 59-byte record as ``ethernet_read_keys`` does."""
    if len(msg) not in (PERFTEST_KEY_SIZE, PERFTEST_KEY_SIZE_GID):
        raise RdmaError(f"perftest record is {PERFTEST_KEY_SIZE_GID} (or {PERFTEST_KEY_SIZE}) bytes, "
                        f"got {len(msg)}")
    text = msg.split(b"\x00", 1)[0].decode("ascii", "replace")
    parts = text.split(":")
    try:
        if len(msg) == PERFTEST_KEY_SIZE:
            if len(parts) != 7:
                raise ValueError
            lid, out_reads, qpn, psn, rkey, vaddr, srqn = (int(p, 16) for p in parts)
            return PerftestDest(lid, out_reads, qpn, psn, rkey, vaddr, None, srqn)
        if len(parts) < 23:
            raise ValueError
        lid, out_reads, qpn, psn, rkey, vaddr = (int(p, 16) for p in parts[:6])
        gid = bytes(int(p, 16) for p in parts[6:22])
        return PerftestDest(lid, out_reads, qpn, psn, rkey, vaddr, gid, int(parts[22], 16))
    except ValueError:
        raise RdmaError(f"not a perftest connection record: {text[:80]!r}") from None
