"""After the capture: what :mod:`testbed.roce.check` can only judge with every packet in hand (pure).

::

    pair streams   each reverse stream (ACK/NAK, READ responses, atomic ACKs, CNPs to QP X) with the
                   request stream it answers: the only one between the two hosts, else the one whose
                   PSNs its responses name (PSN spaces are random 24-bit, so the match is decisive)
    capture order  per request stream: a PSN seen again is a go-back-N resend if a NAK, an idle gap
                   or ``retx_gap`` since its first copy (a timeout) explains it, or it continues such
                   a resend, or its IPv4 ID differs from the first copy's (the sender built the packet
                   again: Linux rdma_rxe gives every packet a new ID and may resend within
                   microseconds when its retry timer fires as a new message starts); otherwise a
                   duplicate (a switch or link copying a packet, ID and all: microseconds).
                   A PSN filling a hole is a resend (same rules, or a READ retry inside a READ's range)
                   or, when new PSNs follow it, reordering
    PSN order      opcode sequence, holes, message sizes; a READ request reserves one PSN per response
                   packet (ceil(DMA length / path MTU), IBA §9.4.3), so the next request PSN jumps by that
    responses      an ACK/NAK, READ response or atomic ACK names a PSN that was sent (a READ's range,
                   an atomic's PSN); each READ gets its responses, FIRST..LAST, MTU-sized, DMA length
    CE -> CNP      every CE-marked data packet is answered by a CNP to its sender within ``cnp_wait``
                   (or was covered by one within the last CNP interval)

The path MTU is not on the wire; it is taken from FIRST/MIDDLE packets of the same QP pair (requests or
READ responses). Without any, a READ may reserve anything from ceil(len/4096) to ceil(len/256) PSNs.
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING

from testbed.roce import opcodes as ops

if TYPE_CHECKING:
    from testbed.roce.check import Checker, QpState, Request

PSN_MOD = 1 << 24
READ_REQUEST = 0x0C
ATOMICS = (0x13, 0x14)
RESP_FIRST, RESP_MIDDLE, RESP_LAST, RESP_ONLY = 0x0D, 0x0E, 0x0F, 0x10


def _psn_diff(a: int, b: int) -> int:
    d = (a - b) % PSN_MOD
    return d - PSN_MOD if d >= PSN_MOD // 2 else d


def _span(req: "Request", pmtu: int | None) -> tuple[int, int]:
    """(fewest, most) PSNs a request occupies: a READ one per response packet, others one."""
    if req.opcode != READ_REQUEST or req.dmalen is None:
        return 1, 1
    if pmtu:
        n = max(1, -(-req.dmalen // pmtu))
        return n, n
    return max(1, -(-req.dmalen // 4096)), max(1, -(-req.dmalen // 256))


def analyse(ck: "Checker") -> None:
    """Run every post-capture check on ``ck`` (a :class:`~testbed.roce.check.Checker`), in place."""
    pair = _pair(ck)                      # reverse stream key -> request stream key
    reverse: dict[tuple, tuple] = {}      # request stream key -> its busiest reverse stream key
    for rkey, fkey in pair.items():
        best = reverse.get(fkey)
        if best is None or len(ck.qps[rkey].resps) > len(ck.qps[best].resps):
            reverse[fkey] = rkey
    for key, qp in ck.qps.items():
        if not qp.reqs:
            continue
        rev = ck.qps.get(reverse.get(key)) if key in reverse else None
        pmtu = _pmtu(qp, rev)
        walk = _arrival(ck, qp, rev, pmtu)
        _sequence(ck, qp, walk, pmtu)
        if rev is not None:
            _responses(ck, qp, rev, walk, pmtu)
    _ce_answered(ck, reverse)


# -- pairing ------------------------------------------------------------------------------------------
def _pair(ck: "Checker") -> dict[tuple, tuple]:
    out = {}
    for rkey, rev in ck.qps.items():
        if not rev.resps and not rev.cnps:
            continue
        cands = [k for k, q in ck.qps.items()
                 if q.src == rev.dst and q.dst == rev.src and q.srcqp is None and q.reqs]
        if len(cands) == 1:
            out[rkey] = cands[0]
            continue
        psns = {r.psn for r in rev.resps}
        best, score = None, 0
        for k in cands:
            hits = sum(1 for r in ck.qps[k].reqs if r.u % PSN_MOD in psns)
            if hits > score:
                best, score = k, hits
        if best is not None:
            out[rkey] = best
    return out


def _pmtu(qp: "QpState", rev: "QpState | None") -> int | None:
    sizes = [r.paylen for r in qp.reqs if ops.position(r.opcode) in (ops.FIRST, ops.MIDDLE)]
    if rev is not None:
        sizes += [r.paylen for r in rev.resps if r.opcode in (RESP_FIRST, RESP_MIDDLE)]
    return max(sizes) if sizes else None


# -- capture order ------------------------------------------------------------------------------------
class _Walk:
    """What the capture-order walk learnt: first copies by PSN, READ retries, and the highest PSN
    reserved as a function of capture position (for judging responses)."""

    def __init__(self):
        self.first: dict[int, "Request"] = {}
        self.retries: set[int] = set()
        self.idx: list[int] = []
        self.top: list[int] = []


def _naks(rev: "QpState | None") -> list[tuple[int, int]]:
    """(capture index, PSN) of what tells a requester to go back: NAKs, and the implied NAKs of READ
    responses that skip a PSN (IBA §9.7.5.1.3: the requester re-requests from the first missing one)."""
    out = []
    prev = None
    for r in rev.resps if rev else ():
        if r.syndrome is not None and (r.syndrome >> 5) & 3 in (1, 3):
            out.append((r.idx, r.psn))
        if r.opcode not in (RESP_FIRST, RESP_MIDDLE, RESP_LAST, RESP_ONLY):
            continue
        if prev is None:
            if r.opcode in (RESP_MIDDLE, RESP_LAST):
                out.append((r.idx, r.psn))  # the FIRST went missing
        else:
            skipped = r.opcode in (RESP_MIDDLE, RESP_LAST) and r.psn != (prev.psn + 1) % PSN_MOD
            cut = r.opcode in (RESP_FIRST, RESP_ONLY) and prev.opcode in (RESP_FIRST, RESP_MIDDLE)
            if skipped or cut:
                out.append((r.idx, (prev.psn + 1) % PSN_MOD))
        prev = r
    return out


def _arrival(ck: "Checker", qp: "QpState", rev: "QpState | None", pmtu: int | None) -> _Walk:
    naks = _naks(rev)
    nak_idx = [i for i, _ in naks]
    w = _Walk()
    reads: list[tuple[int, int]] = []    # (first PSN, last PSN) of READ ranges
    top: int | None = None
    prev_u, prev_cls, prev_ts = None, None, None
    pending: list["Request"] = []

    def nak_between(lo: int, hi: int) -> bool:
        i = bisect.bisect_right(nak_idx, lo)
        return i < len(nak_idx) and nak_idx[i] < hi

    def nak_for(r: "Request") -> bool:
        return any(i < r.idx and p == r.u % PSN_MOD for i, p in naks)

    for r in qp.reqs:
        lo_span, hi_span = _span(r, pmtu)
        end = r.u + hi_span - 1 if pmtu else r.u + lo_span - 1
        in_run = prev_cls in ("copy", "fill") and prev_u is not None and prev_u < r.u
        idle = prev_ts is not None and r.ts - prev_ts >= ck.retx_gap
        if r.u in w.first:
            old = w.first[r.u]
            qp.retransmissions += 1
            if old.opcode != r.opcode or old.paylen != r.paylen:
                ck._violation(qp, r.u % PSN_MOD, f"retransmission changed {ops.op_name(old.opcode)} "
                                                 f"to {ops.op_name(r.opcode)}")
            pending = []   # a resend run follows the hole fillers: they were resends too
            # a timeout resend comes >= one timeout after the original left; a capture behind a busy
            # softirq backlog may see the original late, but never within microseconds of the resend
            late = r.ts - old.ts >= ck.retx_gap
            rebuilt = old.ipid is not None and r.ipid is not None and old.ipid != r.ipid
            if not (in_run or idle or late or rebuilt or nak_between(old.idx, r.idx)):
                qp.duplicates += 1
                ck._violation(qp, r.u % PSN_MOD, f"{ops.op_name(r.opcode)} PSN {r.u % PSN_MOD} seen again "
                                                 "with no NAK or timeout before it (duplicate)")
            cls = "copy"
        elif top is not None and r.u <= top:
            w.first[r.u] = r
            qp.retransmissions += 1
            inside_read = any(a < r.u <= b for a, b in reads)
            if inside_read and r.opcode == READ_REQUEST:
                w.retries.add(r.u)
            elif not (in_run and not pending) and not idle and not nak_for(r):
                pending.append(r)
            cls = "fill"
        else:
            w.first[r.u] = r
            for p in pending:
                qp.retransmissions -= 1
                qp.reordered += 1
                ck._violation(qp, p.u % PSN_MOD, f"{ops.op_name(p.opcode)} PSN {p.u % PSN_MOD} arrived "
                                                 f"after PSN {top % PSN_MOD} (reordered)")
            pending = []
            cls = "new"
        if r.opcode == READ_REQUEST and r.u not in w.retries:
            reads.append((r.u, end))
        top = end if top is None else max(top, end)
        w.idx.append(r.idx)
        w.top.append(top)
        prev_u, prev_cls, prev_ts = r.u, cls, r.ts
    return w


# -- PSN order ----------------------------------------------------------------------------------------
def _sequence(ck: "Checker", qp: "QpState", w: _Walk, pmtu: int | None) -> None:
    """Opcode order, holes and message sizes, walking the request first copies in PSN order."""
    prev: "Request | None" = None
    msg_len = 0
    msg_dmalen: int | None = None
    mtu: int | None = None
    expect: int | None = None       # next PSN, and the most it may be after a READ of unknown size
    expect_max: int | None = None
    read_at: int | None = None
    for u in sorted(w.first):
        cur = w.first[u]
        psn = u % PSN_MOD
        if expect is not None and u < expect:
            if u in w.retries:
                continue  # a READ retried from the first missing response
            ck._violation(qp, psn, f"{ops.op_name(cur.opcode)} at a PSN the READ at PSN "
                                   f"{(read_at or 0) % PSN_MOD} reserved for its responses")
            continue
        if expect is not None and u > expect_max:
            ck._violation(qp, expect % PSN_MOD, f"PSNs {expect % PSN_MOD}..{(u - 1) % PSN_MOD} never seen")
            prev, msg_len, msg_dmalen = None, 0, None  # cannot judge across the hole
        lo, hi = _span(cur, pmtu)
        expect, expect_max = u + lo, u + hi
        read_at = u if cur.opcode == READ_REQUEST else read_at
        pos, fam = ops.position(cur.opcode), ops.family(cur.opcode)
        if prev is not None:
            in_msg = ops.position(prev.opcode) in (ops.FIRST, ops.MIDDLE)
            if in_msg and (pos not in (ops.MIDDLE, ops.LAST) or fam != ops.family(prev.opcode)):
                ck._violation(qp, psn, f"{ops.op_name(cur.opcode)} after {ops.op_name(prev.opcode)}")
            elif not in_msg and pos not in (ops.FIRST, ops.ONLY):
                ck._violation(qp, psn, f"{ops.op_name(cur.opcode)} outside a message")
        if pos in (ops.FIRST, ops.MIDDLE) and cur.padcount:
            ck._violation(qp, psn, f"{ops.op_name(cur.opcode)} with pad count {cur.padcount}")
        if ops.carries_payload(cur.opcode) and (cur.paylen + cur.padcount) % 4:
            ck._violation(qp, psn, "payload plus pad is not a multiple of 4 bytes")
        if pos in (ops.FIRST, ops.ONLY):
            msg_len, msg_dmalen, mtu = 0, cur.dmalen, (cur.paylen if pos == ops.FIRST else None)
        elif pos == ops.MIDDLE and mtu is not None and cur.paylen != mtu:
            ck._violation(qp, psn, f"middle packet of {cur.paylen} B in a message of {mtu} B packets")
        elif pos == ops.LAST and mtu is not None and not 0 < cur.paylen + cur.padcount <= mtu:
            ck._violation(qp, psn, f"last packet of {cur.paylen} B exceeds the {mtu} B path MTU")
        if ops.carries_payload(cur.opcode):
            msg_len += cur.paylen
        if pos in (ops.LAST, ops.ONLY):
            qp.messages += 1
            qp.message_bytes += msg_len if fam != "read" else (cur.dmalen or 0)
            if fam == "write" and msg_dmalen is not None and msg_len != msg_dmalen:
                ck._violation(qp, psn, f"RDMA WRITE carried {msg_len} B, RETH says {msg_dmalen}")
        prev = cur
    if prev is not None and ops.position(prev.opcode) in (ops.FIRST, ops.MIDDLE):
        ck.open_at_end += 1
        if not ck.cut:   # a capture stopped at its packet count ends where it was stopped
            ck._violation(qp, None, "capture ends inside a message")


# -- responses ----------------------------------------------------------------------------------------
def _responses(ck: "Checker", qp: "QpState", rev: "QpState", w: _Walk, pmtu: int | None) -> None:
    """Responses on ``rev`` name PSNs that ``qp`` sent; every READ gets its responses."""
    if not w.first:
        return
    lowest = min(w.first)
    reads = {u: r for u, r in w.first.items() if r.opcode == READ_REQUEST and u not in w.retries}
    atomics = {u for u, r in w.first.items() if r.opcode in ATOMICS}
    starts = sorted(reads)
    got: dict[int, list] = {}      # unwrapped PSN -> responses carrying it
    last_resp_u: int | None = None
    for r in rev.resps:
        i = bisect.bisect_left(w.idx, r.idx) - 1
        if i < 0:
            continue  # nothing sent yet in this capture: answers something from before it began
        top = w.top[i]
        u = top + _psn_diff(r.psn, top % PSN_MOD)
        if u < lowest:
            continue
        what = ops.op_name(r.opcode)
        if u > top:
            ck._violation(rev, r.psn, f"{what} for PSN {r.psn}, which was never sent "
                                      f"(highest sent {top % PSN_MOD})")
            continue
        if r.opcode in (RESP_FIRST, RESP_MIDDLE, RESP_LAST, RESP_ONLY):
            j = bisect.bisect_right(starts, u) - 1
            lo, hi = _span(reads[starts[j]], pmtu) if j >= 0 else (0, 0)
            if j < 0 or u >= starts[j] + hi:
                ck._violation(rev, r.psn, f"{what} at PSN {r.psn}, outside every READ request's range")
                continue
        elif r.opcode == ops.ATOMIC_ACK and u not in atomics:
            ck._violation(rev, r.psn, f"ATOMIC ACKNOWLEDGE for PSN {r.psn}, which is no atomic request")
            continue
        got.setdefault(u, []).append(r)
        last_resp_u = u if last_resp_u is None else max(last_resp_u, u)
    if last_resp_u is None:
        return
    for start in starts:
        req = reads[start]
        lo, hi = _span(req, pmtu)
        if lo != hi or req.dmalen is None:
            continue
        mine = [u for u in range(start, start + lo) if u in got]
        if (not mine or ck.cut) and last_resp_u < start + lo:
            continue  # the capture ends before the responder got here (or was stopped before it was done)
        missing = [u for u in range(start, start + lo) if u not in got]
        if missing:
            ck._violation(rev, missing[0] % PSN_MOD, f"READ at PSN {start % PSN_MOD}: responses "
                                                     f"{missing[0] % PSN_MOD}..{missing[-1] % PSN_MOD} never seen")
            continue
        if any(start < u < start + lo for u in w.retries):
            continue  # retried: responses restart with FIRST at the retry PSN
        _read_order(ck, rev, req, [got[u][0] for u in range(start, start + lo)], pmtu)


def _read_order(ck: "Checker", rev: "QpState", req: "Request", resps: list, pmtu: int | None) -> None:
    n = len(resps)
    want = [RESP_ONLY] if n == 1 else [RESP_FIRST] + [RESP_MIDDLE] * (n - 2) + [RESP_LAST]
    for r, op in zip(resps, want, strict=True):
        if r.opcode != op:
            ck._violation(rev, r.psn, f"{ops.op_name(r.opcode)} where {ops.op_name(op)} belongs "
                                      f"(READ of {req.dmalen} B at PSN {req.u % PSN_MOD})")
            return
        if op in (RESP_FIRST, RESP_MIDDLE) and pmtu and r.paylen != pmtu:
            ck._violation(rev, r.psn, f"{ops.op_name(op)} of {r.paylen} B, path MTU {pmtu} B")
            return
    total = sum(r.paylen for r in resps)
    if total != req.dmalen:
        ck._violation(rev, resps[-1].psn, f"READ at PSN {req.u % PSN_MOD} asked {req.dmalen} B, "
                                          f"responses carried {total} B")
    else:
        rev.messages += 1
        rev.message_bytes += total


# -- CE -> CNP ----------------------------------------------------------------------------------------
def _ce_answered(ck: "Checker", reverse: dict[tuple, tuple]) -> None:
    if ck.last_ts is None:
        return
    directions = {(q.src, q.dst) for q in ck.qps.values()}
    lookback = max(1.5 * ck.cnp_interval, 1e-6)
    for key, qp in ck.qps.items():
        marked = [(r.ts, r.u % PSN_MOD) for r in qp.reqs if r.ce]
        cnp_stream = None
        if qp.srcqp is not None:
            cnp_stream = ck.qps.get((qp.dst, qp.src, qp.srcqp, None))
        elif key in reverse:
            cnp_stream = ck.qps[reverse[key]]
        if (qp.dst, qp.src) not in directions:
            continue  # the reverse direction is not in this capture
        _judge(ck, qp, marked, cnp_stream.cnp_ts if cnp_stream else [], lookback)
    for fkey, rkey in reverse.items():  # CE-marked READ responses: the CNP goes to the responder QP
        rev, fwd = ck.qps[rkey], ck.qps[fkey]
        marked = [(r.ts, r.psn) for r in rev.resps if r.ce]
        _judge(ck, rev, marked, fwd.cnp_ts, lookback)


def _judge(ck: "Checker", qp: "QpState", marked: list, cnps: list, lookback: float) -> None:
    if not marked:
        return
    cnps = sorted(cnps)
    unanswered = []
    for ts, psn in marked:
        if ts + ck.cnp_wait > ck.last_ts:
            continue  # the capture ends before a CNP was due
        i = bisect.bisect_left(cnps, ts - lookback)
        if i >= len(cnps) or cnps[i] > ts + ck.cnp_wait:
            unanswered.append(psn)
    if unanswered:
        ck._violation(qp, unanswered[0], f"{len(unanswered)} CE-marked packets never answered by a CNP "
                                         f"within {ck.cnp_wait * 1e3:g} ms (first at PSN {unanswered[0]})")
