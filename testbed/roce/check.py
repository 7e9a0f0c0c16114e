"""``testbed roce check``: a per-QP protocol validator for RoCEv2 captures (pure; no root).

Every UDP/4791 packet goes through::

    decode (lengths, opcode, ext headers) --bad--> malformed
       |-- ICRC (IBA §7.8.1 / A17.4.5) --bad--> icrc_bad   (a NIC would drop it: no further checks)
       |-- requests  -> per-QP record by PSN: opcode sequence, retransmissions, holes, message sizes
       |-- ACK/NAK   -> syndrome legal, MSN never goes back, NAK codes counted
       |-- CNP       -> BECN set, 16 zero bytes, P_Key 0xFFFF, rate per QP >= 1/interval
       '-- ECN       -> data must be ECN-capable; CE marks counted

Requests are checked in PSN order after the whole capture is read, so the result does not depend on
where the capture was taken: before a lossy link (no holes, go-back-N resends show up as duplicates)
or after it (holes that a retransmission later fills). A QP is identified by (source IP, destination
IP, destination QP number), since QP numbers are only unique per node.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

from testbed.roce import icrc as _icrc
from testbed.roce import opcodes as ops
from testbed.roce.capture import Malformed, RocePacket, read_records, roce_of

PSN_MOD = 1 << 24
#: Violations listed in full; beyond this only the count grows.
MAX_VIOLATIONS = 200
_BTH = struct.Struct("!BBHII")


@dataclass
class _Pkt:
    opcode: int
    paylen: int        # payload bytes excluding pad
    padcount: int
    dmalen: int | None
    ts: float


@dataclass
class QpState:
    src: str
    dst: str
    dqpn: int
    packets: int = 0
    requests: int = 0
    retransmissions: int = 0
    acks: int = 0
    naks: int = 0
    ce_marked: int = 0
    not_ect: int = 0
    cnps: int = 0
    last_cnp_ts: float | None = None
    min_cnp_gap: float | None = None
    msn: int | None = None
    # requests by unwrapped PSN (first copy seen), the next expected unwrapped PSN
    by_psn: dict = field(default_factory=dict)
    next_u: int | None = None
    max_u: int | None = None
    messages: int = 0
    message_bytes: int = 0

    @property
    def name(self) -> str:
        return f"{self.src}->{self.dst} qp 0x{self.dqpn:06x}"


class Checker:
    """Feed packets with :meth:`feed`, then :meth:`report`.

    Args:
        cnp_interval: the notification point's minimum CNP spacing per QP (seconds, already dilated);
            CNPs closer than half of it (capture timestamps jitter) are a violation. 0 turns it off.
        require_ect: data packets without an ECN-capable codepoint are a violation.
    """

    def __init__(self, cnp_interval: float = 50e-6, require_ect: bool = True):
        self.cnp_interval = cnp_interval
        self.require_ect = require_ect
        self.packets = 0
        self.roce_packets = 0
        self.malformed = 0
        self.truncated = 0
        self.icrc_bad = 0
        self.cnp = 0
        self.violations: list[dict] = []
        self.violation_count = 0
        self.qps: dict[tuple, QpState] = {}
        self.malformed_reasons: dict[str, int] = {}

    # -- input ------------------------------------------------------------------------------------
    def feed_record(self, rec) -> None:
        self.packets += 1
        try:
            pkt = roce_of(rec)
        except Malformed as exc:
            self.roce_packets += 1
            self._malformed(str(exc).split(" ")[0] + " length")
            return
        except (struct.error, IndexError, ValueError):
            self.roce_packets += 1
            self._malformed("unparsable headers")
            return
        if pkt is not None:
            self.roce_packets += 1
            self.feed(pkt)

    def feed(self, pkt: RocePacket) -> None:
        t = pkt.transport
        length = pkt.length or len(t)
        if pkt.truncated:
            self.truncated += 1  # snaplen: headers are checked, ICRC and data cannot be
        if length < 16:
            self._malformed("shorter than BTH + ICRC")
            return
        if len(t) < 12:
            return  # cut inside the BTH: nothing to check
        opcode, flags, pkey, qpword, psnword = _BTH.unpack_from(t, 0)
        ext = ops.EXT_LEN.get(opcode)
        if ext is None:
            self._malformed(f"reserved opcode 0x{opcode:02x}")
            return
        if length < 12 + ext + 4:
            self._malformed(f"{ops.op_name(opcode)} shorter than its headers")
            return
        if flags & 0x0F:
            self._malformed("BTH transport header version is not 0")
            return
        if pkt.truncated:
            if len(t) < 12 + ext:
                return
        else:
            try:
                crc = _icrc.icrc(pkt.ip, pkt.udp, t[:-4])
            except Exception:  # noqa: BLE001 - SpecError from a broken IP header counts as malformed
                self._malformed("IP header unusable for ICRC")
                return
            if _icrc.icrc_bytes(crc) != t[-4:]:
                self.icrc_bad += 1
                return
        dqpn = qpword & 0xFFFFFF
        key = (pkt.src, pkt.dst, dqpn)
        qp = self.qps.get(key)
        if qp is None:
            qp = self.qps[key] = QpState(pkt.src, pkt.dst, dqpn)
        qp.packets += 1
        psn = psnword & 0xFFFFFF
        if opcode == ops.CNP:
            self._cnp(qp, pkt, t, flags, pkey, qpword)
        elif opcode == ops.ACK:
            self._ack(qp, t[12:16], psn)
        elif ops.is_request(opcode):
            self._request(qp, pkt, t, length, opcode, flags, psn, ext)

    # -- per kind ---------------------------------------------------------------------------------
    def _cnp(self, qp: QpState, pkt: RocePacket, t: bytes, flags: int, pkey: int, qpword: int) -> None:
        self.cnp += 1
        qp.cnps += 1
        if not (qpword >> 30) & 1:
            self._violation(qp, None, "CNP without BECN set")
        if pkey != 0xFFFF:
            self._violation(qp, None, f"CNP P_Key 0x{pkey:04x}, expected 0xffff")
        if (pkt.length or len(t)) != 12 + 16 + 4:
            self._violation(qp, None, f"CNP is {pkt.length or len(t)} bytes after UDP, expected 32")
        elif any(t[12:28]):
            self._violation(qp, None, "CNP reserved bytes are not zero")
        if qp.last_cnp_ts is not None:
            gap = pkt.ts - qp.last_cnp_ts
            qp.min_cnp_gap = gap if qp.min_cnp_gap is None else min(qp.min_cnp_gap, gap)
            if self.cnp_interval and gap < self.cnp_interval / 2:
                self._violation(qp, None, f"CNPs {gap * 1e6:.1f} us apart, interval is "
                                          f"{self.cnp_interval * 1e6:g} us")
        qp.last_cnp_ts = pkt.ts

    def _ack(self, qp: QpState, aeth: bytes, psn: int) -> None:
        syndrome = aeth[0]
        msn = int.from_bytes(aeth[1:4], "big")
        kind = (syndrome >> 5) & 3
        if syndrome & 0x80 or kind == 2:
            self._violation(qp, psn, f"reserved AETH syndrome 0x{syndrome:02x}")
            return
        if kind == 3:
            qp.naks += 1
            if syndrome & 0x1F > 4:
                self._violation(qp, psn, f"NAK with reserved code {syndrome & 0x1F}")
        else:
            qp.acks += 1
        if qp.msn is not None and 0 < (qp.msn - msn) % PSN_MOD < PSN_MOD // 2:
            self._violation(qp, psn, f"MSN went back from {qp.msn} to {msn}")
        else:
            qp.msn = msn

    def _request(self, qp: QpState, pkt: RocePacket, t: bytes, length: int, opcode: int, flags: int,
                 psn: int, ext: int) -> None:
        qp.requests += 1
        if pkt.ecn == 3:
            qp.ce_marked += 1
        elif pkt.ecn == 0 and self.require_ect:
            if qp.not_ect == 0:
                self._violation(qp, psn, "data packet is not ECN-capable (Not-ECT)")
            qp.not_ect += 1
        padcount = (flags >> 4) & 3
        data = length - 12 - ext - 4
        dmalen = None
        if "RETH" in ops.EXT_HEADERS[opcode]:
            dmalen = struct.unpack_from("!I", t, 12 + 12)[0]
        if qp.next_u is None:
            u = psn
            qp.next_u = qp.max_u = psn
        else:
            diff = (psn - qp.next_u) % PSN_MOD
            u = qp.next_u + (diff - PSN_MOD if diff >= PSN_MOD // 2 else diff)
        record = _Pkt(opcode, data - padcount, padcount, dmalen, pkt.ts)
        old = qp.by_psn.get(u)
        if old is not None:
            qp.retransmissions += 1
            if old.opcode != opcode or old.paylen != record.paylen:
                self._violation(qp, psn, f"retransmission changed {ops.op_name(old.opcode)} "
                                         f"to {ops.op_name(opcode)}")
            return
        if u < qp.max_u:
            qp.retransmissions += 1  # fills a hole: its first copy was lost before this capture point
        qp.by_psn[u] = record
        qp.max_u = max(qp.max_u, u)
        qp.next_u = max(qp.next_u, u + 1)

    # -- after the capture ------------------------------------------------------------------------
    def _sequence(self, qp: QpState) -> None:
        """Opcode order, holes and message sizes, walking each QP's requests in PSN order."""
        prev: _Pkt | None = None
        msg_len = 0
        msg_dmalen: int | None = None
        mtu: int | None = None
        expect_u: int | None = None
        for u in sorted(qp.by_psn):
            cur = qp.by_psn[u]
            psn = u % PSN_MOD
            if expect_u is not None and u != expect_u:
                self._violation(qp, expect_u % PSN_MOD,
                                f"PSNs {expect_u % PSN_MOD}..{(u - 1) % PSN_MOD} never seen")
                prev, msg_len, msg_dmalen = None, 0, None  # cannot judge across the hole
            expect_u = u + 1
            pos, fam = ops.position(cur.opcode), ops.family(cur.opcode)
            if prev is not None:
                in_msg = ops.position(prev.opcode) in (ops.FIRST, ops.MIDDLE)
                if in_msg and (pos not in (ops.MIDDLE, ops.LAST) or fam != ops.family(prev.opcode)):
                    self._violation(qp, psn, f"{ops.op_name(cur.opcode)} after "
                                             f"{ops.op_name(prev.opcode)}")
                elif not in_msg and pos not in (ops.FIRST, ops.ONLY):
                    self._violation(qp, psn, f"{ops.op_name(cur.opcode)} outside a message")
            if pos in (ops.FIRST, ops.MIDDLE) and cur.padcount:
                self._violation(qp, psn, f"{ops.op_name(cur.opcode)} with pad count {cur.padcount}")
            if ops.carries_payload(cur.opcode) and (cur.paylen + cur.padcount) % 4:
                self._violation(qp, psn, "payload plus pad is not a multiple of 4 bytes")
            if pos in (ops.FIRST, ops.ONLY):
                msg_len, msg_dmalen, mtu = 0, cur.dmalen, (cur.paylen if pos == ops.FIRST else None)
            elif pos == ops.MIDDLE and mtu is not None and cur.paylen != mtu:
                self._violation(qp, psn, f"middle packet of {cur.paylen} B in a message of {mtu} B packets")
            elif pos == ops.LAST and mtu is not None and not 0 < cur.paylen + cur.padcount <= mtu:
                self._violation(qp, psn, f"last packet of {cur.paylen} B exceeds the {mtu} B path MTU")
            msg_len += cur.paylen
            if pos in (ops.LAST, ops.ONLY):
                qp.messages += 1
                qp.message_bytes += msg_len
                if fam == "write" and msg_dmalen is not None and msg_len != msg_dmalen:
                    self._violation(qp, psn, f"RDMA WRITE carried {msg_len} B, RETH says {msg_dmalen}")
            prev = cur
        if prev is not None and ops.position(prev.opcode) in (ops.FIRST, ops.MIDDLE):
            self._violation(qp, None, "capture ends inside a message")

    def report(self) -> dict:
        for qp in self.qps.values():
            self._sequence(qp)
        qps = []
        for qp in sorted(self.qps.values(), key=lambda q: (q.src, q.dst, q.dqpn)):
            qps.append({"src": qp.src, "dst": qp.dst, "dqpn": qp.dqpn, "packets": qp.packets,
                        "requests": qp.requests, "retransmissions": qp.retransmissions,
                        "acks": qp.acks, "naks": qp.naks, "ce_marked": qp.ce_marked, "cnps": qp.cnps,
                        "min_cnp_gap_us": None if qp.min_cnp_gap is None else qp.min_cnp_gap * 1e6,
                        "messages": qp.messages, "message_bytes": qp.message_bytes})
        return {"packets": self.packets, "roce_packets": self.roce_packets, "malformed": self.malformed,
                "malformed_reasons": self.malformed_reasons, "truncated": self.truncated,
                "icrc_bad": self.icrc_bad, "cnp": self.cnp, "violation_count": self.violation_count,
                "violations": self.violations, "qps": qps}

    # -- helpers ----------------------------------------------------------------------------------
    def _malformed(self, why: str) -> None:
        self.malformed += 1
        self.malformed_reasons[why] = self.malformed_reasons.get(why, 0) + 1

    def _violation(self, qp: QpState, psn: int | None, what: str) -> None:
        self.violation_count += 1
        if len(self.violations) < MAX_VIOLATIONS:
            self.violations.append({"qp": qp.name, "dqpn": qp.dqpn, "psn": psn, "what": what})


def check_capture(path: str | Path, cnp_interval: float = 50e-6, require_ect: bool = True) -> dict:
    """Validate a pcap/pcapng file; returns the report (see :meth:`Checker.report`)."""
    checker = Checker(cnp_interval=cnp_interval, require_ect=require_ect)
    records, state = read_records(path)
    for rec in records:
        checker.feed_record(rec)
    report = checker.report()
    report["truncated_file"] = state["truncated_file"]
    return report


def passed(report: dict) -> bool:
    """The exit-status rule: no violation and no bad ICRC."""
    return report["violation_count"] == 0 and report["icrc_bad"] == 0
