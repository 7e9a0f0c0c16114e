"""``testbed roce check``: a per-QP protocol validator for RoCEv2 captures (pure; no root).

Every UDP/4791 packet goes through::

    decode (lengths, opcode, ext headers) --bad--> malformed (fails the check unless allowed)
       |-- ICRC (IBA §7.8.1 / A17.4.5) --bad--> icrc_bad, reported with QP and PSN (a NIC drops it)
       |-- requests   -> recorded per QP in capture order (SEND, WRITE, READ request, atomics; RC/UC/UD)
       |-- responses  -> ACK/NAK, READ responses, atomic ACKs: syndrome legal, MSN never goes back
       |-- CNP        -> BECN set, 16 zero bytes, P_Key 0xFFFF, rate per QP >= 1/interval
       '-- ECN        -> CE marks counted; Not-ECT data a violation only with ``expect_ect``

After the whole capture is read, :mod:`testbed.roce.analysis` pairs each QP's request stream with the
reverse stream of its responses and walks both (in capture order, then in PSN order), so the result
does not depend on where the capture was taken: before a lossy link (no holes, go-back-N resends show
up as copies) or after it (holes that a retransmission later fills). A QP is identified by (source IP,
destination IP, destination QP number), plus the source QP for UD, since QP numbers are only unique
per node.

Exit rule (:func:`failures`): any violation, bad ICRC, malformed packet, corrupt file, or a capture
without RoCE fails, the last three unless explicitly allowed.

A capture stopped at a packet count (``tcpdump -c N``) ends mid-traffic: told so (``cut_at=N``), a
capture holding N packets may end inside a message or a READ's responses without that being a
violation (counted as ``open_at_end``). Its start needs no option: a QP's first packet seen may be
anywhere in its PSN space or inside a message, and responses to what was sent before it are skipped.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

from testbed.roce import analysis
from testbed.roce import icrc as _icrc
from testbed.roce import opcodes as ops
from testbed.roce.capture import Malformed, RocePacket, read_records, roce_of

PSN_MOD = 1 << 24
#: Default ``retx_gap``: an idle time that explains a resend as a timeout (seconds, undilated).
RETX_GAP_S = 1e-3
#: Violations listed in full; beyond this only the count grows.
MAX_VIOLATIONS = 200
_BTH = struct.Struct("!BBHII")
#: Response opcodes that carry a PSN of the requester's space (and, but MIDDLE, an AETH).
RESPONSES = {0x0D, 0x0E, 0x0F, 0x10, ops.ACK, ops.ATOMIC_ACK}


@dataclass
class Request:
    """One request packet as seen (capture order ``idx``); ``u`` is the PSN unwrapped per stream."""

    idx: int
    ts: float
    u: int
    opcode: int
    paylen: int        # payload bytes excluding pad
    padcount: int
    dmalen: int | None
    ce: bool
    ipid: int | None = None   # IPv4 ID (None: IPv6); a copy with another ID was rebuilt by its sender


@dataclass
class Response:
    """An ACK/NAK, READ response or atomic ACK; ``psn`` is wrapped (the requester's PSN space)."""

    idx: int
    ts: float
    psn: int
    opcode: int
    paylen: int
    syndrome: int | None
    ce: bool


@dataclass
class QpState:
    src: str
    dst: str
    dqpn: int
    srcqp: int | None = None      # UD: the sending QP from the DETH
    packets: int = 0
    requests: int = 0
    retransmissions: int = 0
    reordered: int = 0
    duplicates: int = 0
    acks: int = 0
    naks: int = 0
    read_responses: int = 0
    atomic_acks: int = 0
    ce_marked: int = 0
    not_ect: int = 0
    cnps: int = 0
    last_cnp_ts: float | None = None
    min_cnp_gap: float | None = None
    msn: int | None = None
    next_u: int | None = None
    messages: int = 0
    message_bytes: int = 0
    reqs: list = field(default_factory=list)
    resps: list = field(default_factory=list)
    cnp_ts: list = field(default_factory=list)

    @property
    def name(self) -> str:
        ud = f" from qp 0x{self.srcqp:06x}" if self.srcqp is not None else ""
        return f"{self.src}->{self.dst} qp 0x{self.dqpn:06x}{ud}"


class Checker:
    """Feed packets with :meth:`feed`, then :meth:`report`.

    Args:
        cnp_interval: the notification point's minimum CNP spacing per QP (seconds, already dilated);
            CNPs closer than half of it (capture timestamps jitter) are a violation. 0 turns it off.
        require_ect: data packets without an ECN-capable codepoint are a violation (DCQCN runs).
        retx_gap: an idle time on a QP at least this long explains a resend as a timeout (seconds).
        cnp_wait: how long after CE-marked data its CNP may come (default: max(2 ms, 20 intervals)).
        cut_at: the packet count the capture was stopped at (``tcpdump -c``); a capture holding that many
            packets is ``cut``: a message (or a READ's responses) still open at its end is no violation.
            None (default): the capture holds the whole traffic, so an open message is one.
    """

    def __init__(self, cnp_interval: float = 50e-6, require_ect: bool = False, retx_gap: float = RETX_GAP_S,
                 cnp_wait: float | None = None, cut_at: int | None = None):
        self.cnp_interval = cnp_interval
        self.require_ect = require_ect
        self.retx_gap = retx_gap
        self.cnp_wait = cnp_wait if cnp_wait is not None else max(2e-3, 20 * cnp_interval)
        self.cut_at = cut_at
        self.cut = False
        self.open_at_end = 0
        self.packets = 0
        self.roce_packets = 0
        self.malformed = 0
        self.truncated = 0
        self.icrc_bad = 0
        self.cnp = 0
        self.last_ts: float | None = None
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
        idx = self.packets
        self.last_ts = pkt.ts if self.last_ts is None else max(self.last_ts, pkt.ts)
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
        if pkt.truncated and len(t) < 12 + ext:
            return
        dqpn = qpword & 0xFFFFFF
        psn = psnword & 0xFFFFFF
        srcqp = None
        if ops.is_ud(opcode):
            srcqp = struct.unpack_from("!I", t, 16)[0] & 0xFFFFFF
        key = (pkt.src, pkt.dst, dqpn, srcqp)
        qp = self.qps.get(key)
        if qp is None:
            qp = self.qps[key] = QpState(pkt.src, pkt.dst, dqpn, srcqp)
        qp.packets += 1
        if not pkt.truncated:
            try:
                crc = _icrc.icrc(pkt.ip, pkt.udp, t[:-4])
            except Exception:  # noqa: BLE001 - SpecError from a broken IP header counts as malformed
                self._malformed("IP header unusable for ICRC")
                return
            if _icrc.icrc_bytes(crc) != t[-4:]:
                self.icrc_bad += 1
                self._violation(qp, psn, f"{ops.op_name(opcode)}: ICRC 0x{t[-4:].hex()} on the wire, "
                                         f"0x{_icrc.icrc_bytes(crc).hex()} computed (a NIC drops it)")
                return
        if opcode == ops.CNP:
            self._cnp(qp, pkt, t, flags, pkey, qpword)
        elif opcode in RESPONSES:
            self._response(qp, pkt, t, length, opcode, flags, psn, ext, idx)
        elif ops.is_request(opcode):
            self._request(qp, pkt, t, length, opcode, flags, psn, ext, idx)

    # -- per kind ---------------------------------------------------------------------------------
    def _cnp(self, qp: QpState, pkt: RocePacket, t: bytes, flags: int, pkey: int, qpword: int) -> None:
        self.cnp += 1
        qp.cnps += 1
        qp.cnp_ts.append(pkt.ts)
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

    def _ecn(self, qp: QpState, pkt: RocePacket, psn: int) -> bool:
        """Counts the ECN codepoint of a data-carrying packet; returns True when CE-marked."""
        if pkt.ecn == 3:
            qp.ce_marked += 1
            return True
        if pkt.ecn == 0:
            if qp.not_ect == 0 and self.require_ect:
                self._violation(qp, psn, "data packet is not ECN-capable (Not-ECT) but --expect-ect")
            qp.not_ect += 1
        return False

    def _response(self, qp: QpState, pkt: RocePacket, t: bytes, length: int, opcode: int, flags: int,
                  psn: int, ext: int, idx: int) -> None:
        syndrome = None
        if opcode != 0x0E:  # every response but READ RESPONSE MIDDLE carries an AETH
            syndrome = t[12]
            msn = int.from_bytes(t[13:16], "big")
            kind = (syndrome >> 5) & 3
            if syndrome & 0x80 or kind == 2:
                self._violation(qp, psn, f"reserved AETH syndrome 0x{syndrome:02x}")
                return
            if kind in (1, 3) and opcode != ops.ACK:
                self._violation(qp, psn, f"{ops.op_name(opcode)} with a NAK syndrome 0x{syndrome:02x}")
            if kind == 3 and syndrome & 0x1F > 4:
                self._violation(qp, psn, f"NAK with reserved code {syndrome & 0x1F}")
            if qp.msn is not None and 0 < (qp.msn - msn) % PSN_MOD < PSN_MOD // 2:
                self._violation(qp, psn, f"MSN went back from {qp.msn} to {msn}")
            else:
                qp.msn = msn
            if kind == 0:
                qp.acks += opcode == ops.ACK
            else:
                qp.naks += 1
        ce = False
        paylen = length - 12 - ext - 4 - ((flags >> 4) & 3)
        if opcode in (0x0D, 0x0E, 0x0F, 0x10):
            qp.read_responses += 1
            ce = self._ecn(qp, pkt, psn)
        elif opcode == ops.ATOMIC_ACK:
            qp.atomic_acks += 1
        qp.resps.append(Response(idx, pkt.ts, psn, opcode, paylen, syndrome, ce))

    def _request(self, qp: QpState, pkt: RocePacket, t: bytes, length: int, opcode: int, flags: int,
                 psn: int, ext: int, idx: int) -> None:
        qp.requests += 1
        ce = self._ecn(qp, pkt, psn)
        padcount = (flags >> 4) & 3
        data = length - 12 - ext - 4
        dmalen = None
        if "RETH" in ops.EXT_HEADERS[opcode]:
            dmalen = struct.unpack_from("!I", t, 12 + 12)[0]
        if qp.next_u is None:
            u = psn
        else:
            diff = (psn - qp.next_u) % PSN_MOD
            u = qp.next_u + (diff - PSN_MOD if diff >= PSN_MOD // 2 else diff)
        qp.next_u = u + 1 if qp.next_u is None else max(qp.next_u, u + 1)
        ipid = int.from_bytes(pkt.ip[4:6], "big") if pkt.ip[0] >> 4 == 4 else None
        qp.reqs.append(Request(idx, pkt.ts, u, opcode, data - padcount, padcount, dmalen, ce, ipid))

    # -- after the capture ------------------------------------------------------------------------
    def report(self) -> dict:
        self.cut = self.cut_at is not None and self.packets >= self.cut_at
        analysis.analyse(self)
        qps = []
        for qp in sorted(self.qps.values(), key=lambda q: (q.src, q.dst, q.dqpn, q.srcqp or 0)):
            qps.append({"src": qp.src, "dst": qp.dst, "dqpn": qp.dqpn, "srcqp": qp.srcqp,
                        "packets": qp.packets, "requests": qp.requests,
                        "retransmissions": qp.retransmissions, "reordered": qp.reordered,
                        "duplicates": qp.duplicates, "acks": qp.acks, "naks": qp.naks,
                        "read_responses": qp.read_responses, "atomic_acks": qp.atomic_acks,
                        "ce_marked": qp.ce_marked, "not_ect": qp.not_ect, "cnps": qp.cnps,
                        "min_cnp_gap_us": None if qp.min_cnp_gap is None else qp.min_cnp_gap * 1e6,
                        "messages": qp.messages, "message_bytes": qp.message_bytes})
        return {"packets": self.packets, "roce_packets": self.roce_packets, "malformed": self.malformed,
                "malformed_reasons": self.malformed_reasons, "truncated": self.truncated,
                "icrc_bad": self.icrc_bad, "cnp": self.cnp, "cut": self.cut, "open_at_end": self.open_at_end,
                "violation_count": self.violation_count,
                "violations": self.violations, "qps": qps}

    # -- helpers ----------------------------------------------------------------------------------
    def _malformed(self, why: str) -> None:
        self.malformed += 1
        self.malformed_reasons[why] = self.malformed_reasons.get(why, 0) + 1

    def _violation(self, qp: QpState, psn: int | None, what: str) -> None:
        self.violation_count += 1
        if len(self.violations) < MAX_VIOLATIONS:
            self.violations.append({"qp": qp.name, "dqpn": qp.dqpn, "psn": psn, "what": what})


def check_capture(path: str | Path, cnp_interval: float = 50e-6, require_ect: bool = False,
                  **kw) -> dict:
    """Validate a pcap/pcapng file; returns the report (see :meth:`Checker.report`)."""
    checker = Checker(cnp_interval=cnp_interval, require_ect=require_ect, **kw)
    records, state = read_records(path)
    for rec in records:
        checker.feed_record(rec)
    report = checker.report()
    report["truncated_file"] = state["truncated_file"]
    return report


def failures(report: dict, allow_malformed: bool = False, allow_empty: bool = False) -> list[str]:
    """Why the capture fails the check (empty when it passes)."""
    out = []
    if report["violation_count"]:
        out.append(f"{report['violation_count']} protocol violations")
    if report["icrc_bad"]:
        out.append(f"{report['icrc_bad']} packets with a bad ICRC")
    if report["malformed"] and not allow_malformed:
        out.append(f"{report['malformed']} malformed RoCE packets (--allow-malformed to accept)")
    if report.get("truncated_file") and not allow_malformed:
        out.append("the capture file is corrupt or cut mid-record (--allow-malformed to accept)")
    if not report["roce_packets"] and not allow_empty:
        out.append(f"no RoCEv2 packet among {report['packets']} (--allow-empty to accept)")
    return out


def passed(report: dict, allow_malformed: bool = False, allow_empty: bool = False) -> bool:
    """The exit-status rule: see :func:`failures`."""
    return not failures(report, allow_malformed, allow_empty)
