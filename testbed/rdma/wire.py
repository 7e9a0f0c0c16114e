"""Bytes of the soft-RDMA data path: BTH and extended headers packed with ``struct``, ICRC with a
per-path prefix cache. No Scapy here: this runs once per packet.

A datagram handed to the kernel is the UDP payload of a RoCEv2 packet::

    BTH (12) | [RETH (16) | DETH (8) | AtomicETH (28)] | [ImmDt (4)] | [AETH (4) [AtomicAckETH (8)]]
             | payload + pad | ICRC (4)

The ICRC covers the IP and UDP headers the kernel will add (IBA Annex A17.4.5), so a :class:`Path`
knows both addresses and ports and rebuilds those headers exactly as sent: IPv4 with DF and ID 0
(unconnected UDP socket with path-MTU discovery on) or IPv6.

Receiving, a UDP socket does not show the IPv4 header, and the ICRC covers its 16-bit ID, which
Linux rdma_rxe fills with ``__ip_select_ident`` (non-zero, unknown to us). A datagram whose ICRC fails
with ID 0 is therefore checked once more for *some* ID: CRC-32 is affine, so over a fixed length
``crc(ID=x) = crc(ID=0) ^ D(x)`` with ``D`` linear in the 16 bits of ``x``; :class:`_IdSolver` holds
``D``'s 16 columns in echelon form per datagram length and solves ``D(x) = syndrome`` in 16 steps.
That leaves 16 of the ICRC's 32 bits to catch corruption of a packet from a real stack (a random error
passes with probability 2^-16; :attr:`Path.rx_id_solved` counts such packets); our own packets (ID 0)
keep the full check.
"""

from __future__ import annotations

import ipaddress
import struct
import zlib
from dataclasses import dataclass, field

from testbed.roce import icrc as _icrc

BTH = struct.Struct("!BBHII")
RETH = struct.Struct("!QII")
DETH = struct.Struct("!II")          # Q_Key, reserved byte + source QP
ATOMIC_ETH = struct.Struct("!QIQQ")  # VA, R_Key, swap/add data, compare data
U32 = struct.Struct("!I")
AETH = struct.Struct("!I")
PSN_MASK = 0xFFFFFF
PSN_MOD = 1 << 24
ICRC_LEN = 4
#: IB path MTUs (IBA §9.? PMTU enum 1..5) that carry the payload of one packet.
IB_MTUS = (256, 512, 1024, 2048, 4096)

#: Traffic classes as NVIDIA NICs set them by default (DOMAIN.md): RoCE on DSCP 26 (priority 3, the lossless
#: one in a PFC fabric), CNPs on DSCP 48 (priority 6, never paused). A QP's DSCP is its own
#: (``QpConfig.dscp``, as ``ibv_modify_qp``'s traffic class); the CNP's is the NIC's.
ROCE_DSCP = 26
CNP_DSCP = 48
ECT0 = 0x02


def tos(dscp: int, ect: bool) -> int:
    """The IPv4 TOS / IPv6 traffic class byte: DSCP in the high six bits, ECT(0) or Not-ECT below."""
    return dscp << 2 | (ECT0 if ect else 0)


#: Data frames are ECT(0) so switches mark them (DCQCN); ACKs, NAKs and CNPs are Not-ECT.
DATA_TOS = tos(ROCE_DSCP, True)
CNP_TOS = tos(CNP_DSCP, False)


def ib_mtu_for(ip_mtu: int, ipv6: bool = False) -> int:
    """Largest IB MTU whose packets (IP + UDP + BTH + RETH + ImmDt + ICRC) fit an IP MTU."""
    overhead = (40 if ipv6 else 20) + 8 + 12 + 16 + 4 + 4
    fits = [m for m in IB_MTUS if m + overhead <= ip_mtu]
    if not fits:
        raise ValueError(f"IP MTU {ip_mtu} is too small for RoCEv2 (needs {256 + overhead})")
    return fits[-1]


def bth(opcode: int, dqpn: int, psn: int, ackreq: bool = False, padcount: int = 0,
        solicited: bool = False, becn: bool = False, pkey: int = 0xFFFF) -> bytes:
    return BTH.pack(opcode, (solicited << 7) | (padcount << 4), pkey, (becn << 30) | dqpn,
                    (ackreq << 31) | (psn & PSN_MASK))


@dataclass(frozen=True)
class Header:
    """A parsed BTH (plus the fields of the first extended headers the data path uses)."""

    opcode: int
    padcount: int
    dqpn: int
    becn: bool
    ackreq: bool
    psn: int


def parse_bth(buf) -> Header:
    opcode, flags, _pkey, qpw, psnw = BTH.unpack_from(buf, 0)
    return Header(opcode, (flags >> 4) & 3, qpw & 0xFFFFFF, bool(qpw >> 30 & 1), bool(psnw >> 31), psnw & PSN_MASK)


def psn_diff(a: int, b: int) -> int:
    """Signed distance a - b on the 24-bit PSN circle, in [-2^23, 2^23)."""
    d = (a - b) & PSN_MASK
    return d - PSN_MOD if d >= PSN_MOD // 2 else d


def qp_source_port(qpn: int) -> int:
    """The UDP source port of a QP as Linux rdma_rxe picks it (``rxe_qp.c``: ``RXE_ROCE_V2_SPORT +
    (hash_32(qp_num, 14) & 0x3fff)``, with ``hash_32`` the golden-ratio multiply of ``linux/hash.h``):
    one flow per QP, different QPs on different ECMP paths. In 0xC000..0xFFFF."""
    return 0xC000 + ((((qpn * 0x61C88647) & 0xFFFFFFFF) >> (32 - 14)) & 0x3FFF)


@dataclass
class Path:
    """Where one QP's packets go: local (source) and remote IP/port, the local port datagrams arrive on
    (``rx_port``, default the source port); the ICRC prefix per datagram length."""

    local_ip: str
    local_port: int
    remote_ip: str
    remote_port: int
    rx_port: int | None = None
    _prefix: dict = field(default_factory=dict, repr=False)
    _rx_prefix: dict = field(default_factory=dict, repr=False)
    #: received datagrams whose ICRC held only with a non-zero IPv4 ID (a real stack's packets)
    rx_id_solved: int = field(default=0, repr=False, compare=False)

    def __post_init__(self):
        if self.rx_port is None:
            self.rx_port = self.local_port
        self._lip = ipaddress.ip_address(self.local_ip)
        self._rip = ipaddress.ip_address(self.remote_ip)
        if self._lip.version != self._rip.version:
            raise ValueError(f"mixed IP versions on a path: {self.local_ip} -> {self.remote_ip}")

    def _headers(self, src, dst, sport, dport, udp_len):
        if src.version == 4:
            ip = _icrc.ipv4_header(src.packed, dst.packed, 20 + udp_len)
        else:
            ip = _icrc.ipv6_header(src.packed, dst.packed, udp_len)
        return _icrc.prefix_crc(ip, _icrc.udp_header(sport, dport, udp_len))

    def tx_icrc(self, parts, length: int | None = None) -> bytes:
        """ICRC bytes for a datagram we send, made of ``parts`` (BTH first; ``length`` = their total)."""
        length = (sum(len(p) for p in parts) if length is None else length) + ICRC_LEN
        prefix = self._prefix.get(length)
        if prefix is None:
            prefix = self._prefix[length] = self._headers(self._lip, self._rip, self.local_port,
                                                          self.remote_port, 8 + length)
        return _crc_parts(prefix, parts).to_bytes(4, "little")

    def rx_icrc_ok(self, buf, n: int, src_port: int) -> bool:
        """Check the ICRC of a received datagram ``buf[:n]`` from the remote end of this path."""
        key = (n, src_port)
        prefix = self._rx_prefix.get(key)
        if prefix is None:
            if len(self._rx_prefix) > 4096:
                self._rx_prefix.clear()
            prefix = self._rx_prefix[key] = self._headers(self._rip, self._lip, src_port,
                                                          self.rx_port, 8 + n)
        crc = zlib.crc32(buf[5:n - ICRC_LEN], zlib.crc32(_FF, zlib.crc32(buf[:4], prefix)))
        got = int.from_bytes(buf[n - ICRC_LEN:n], "little")
        if crc == got:
            return True
        if self._rip.version != 4:
            return False
        if _IdSolver.of(n).solve(crc ^ got) is None:
            return False
        self.rx_id_solved += 1
        return True


class _IdSolver:
    """Which IPv4 ID makes a received datagram's ICRC right, if any (see the module docstring).

    The ICRC's message is pseudo-LRH (8) | IPv4 header (20) | UDP (8) | the datagram without its ICRC,
    so the ID sits at bytes 12..13 and the message is ``36 + n - 4`` bytes for an ``n``-byte datagram.
    """

    _cache: dict = {}
    ID_OFFSET = 8 + 4

    def __init__(self, n: int):
        size = 8 + 20 + 8 + n - ICRC_LEN
        zero = bytes(size)
        base = zlib.crc32(zero)
        rows: list[tuple[int, int]] = []        # (syndrome bits, ID bits), reduced to distinct pivots
        for bit in range(16):
            msg = bytearray(zero)
            msg[self.ID_OFFSET:self.ID_OFFSET + 2] = (1 << bit).to_bytes(2, "big")
            vec, ids = zlib.crc32(msg) ^ base, 1 << bit
            for rvec, rids in rows:
                if vec ^ rvec < vec:
                    vec, ids = vec ^ rvec, ids ^ rids
            if vec:   # CRC-32 sees every burst of <= 32 bits, so all 16 columns are independent
                rows.append((vec, ids))
                rows.sort(reverse=True)
        self.rows = rows

    @classmethod
    def of(cls, n: int) -> _IdSolver:
        solver = cls._cache.get(n)
        if solver is None:
            if len(cls._cache) > 512:
                cls._cache.clear()
            solver = cls._cache[n] = cls(n)
        return solver

    def solve(self, syndrome: int) -> int | None:
        """The ID ``x`` with ``D(x) == syndrome``, or None when no ID explains it."""
        ids = 0
        for vec, rids in self.rows:
            if syndrome ^ vec < syndrome:
                syndrome, ids = syndrome ^ vec, ids ^ rids
        return ids if syndrome == 0 else None


_FF = b"\xff"


def _crc_parts(prefix: int, parts) -> int:
    first = parts[0]
    crc = zlib.crc32(first[5:], zlib.crc32(_FF, zlib.crc32(first[:4], prefix)))
    for p in parts[1:]:
        crc = zlib.crc32(p, crc)
    return crc
