"""The responder half of a queue pair (IBA Vol. 1 §9.7.5, §9.4.3-9.4.5), mixed into
:class:`testbed.rdma.qp.QueuePair`: it owns the expected PSN, the MSN, and the queue of what it owes the
requester (READ responses, ACKs queued behind them, atomic ACKs)::

    PSN == expected  SEND/WRITE: place data byte-exactly (RETH va/rkey checked), ACK when AckReq
                     READ: check va/rkey for REMOTE_READ, reserve ceil(len / MTU) PSNs, queue responses
                     ATOMIC: CmpSwp / FetchAdd on an aligned 8-byte word (host order, as rxe on x86),
                     remember the original for a resent request, ATOMIC ACKNOWLEDGE with it
    PSN <  expected  duplicate: re-ACK; a READ is executed again from its PSN (IBA §9.4.3.1); an
                     atomic is answered from memory, never executed twice
    PSN >  expected  held back (``reorder``), then NAK PSN sequence error once (RC); UC drops the message
    CE-marked        DCQCN notification point: CNP to the requester QP, <= 1 per interval

Responses leave in order: an ACK for a later WRITE waits behind the READ responses before it, so the
requester never sees a PSN acknowledged before the READ data under it.
"""

from __future__ import annotations

import struct
from collections import OrderedDict, deque
from dataclasses import dataclass

from testbed.rdma import wire
from testbed.rdma.verbs import (
    REMOTE_ATOMIC,
    REMOTE_READ,
    REMOTE_WRITE,
    MemoryRegion,
    WcOpcode,
    WcStatus,
    WorkCompletion,
)
from testbed.roce import opcodes as ops

SEND_FIRST, SEND_MIDDLE, SEND_LAST, SEND_LAST_IMM, SEND_ONLY, SEND_ONLY_IMM = 0x00, 0x01, 0x02, 0x03, 0x04, 0x05
WRITE_FIRST, WRITE_MIDDLE, WRITE_LAST, WRITE_LAST_IMM, WRITE_ONLY, WRITE_ONLY_IMM = 0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B
READ_REQUEST = 0x0C
READ_FIRST, READ_MIDDLE, READ_LAST, READ_ONLY = 0x0D, 0x0E, 0x0F, 0x10
CMP_SWAP, FETCH_ADD = 0x13, 0x14
ACK, ATOMIC_ACK, CNP = ops.ACK, ops.ATOMIC_ACK, ops.CNP
SYN_ACK = 0x1F
SYN_NAK_SEQ, SYN_NAK_INV, SYN_NAK_ACCESS, SYN_NAK_OP = 0x60, 0x61, 0x62, 0x63
SYN_RNR = 0x20 | 0x0E  # RNR NAK, timer code 14 (~1 ms, IBA Table 45)
PAD = (b"", b"\x00", b"\x00\x00", b"\x00\x00\x00")
ATOMIC_ETH = struct.Struct("!QIQQ")
U64_HOST = struct.Struct("<Q")
U64 = struct.Struct("!Q")
#: Atomic results kept for resent requests (IBA: at least max_rd_atomic of them).
ATOMIC_MEMORY = 64

FIRST_OPS = {SEND_FIRST, WRITE_FIRST}
LAST_OPS = {SEND_LAST, SEND_LAST_IMM, WRITE_LAST, WRITE_LAST_IMM}
ONLY_OPS = {SEND_ONLY, SEND_ONLY_IMM, WRITE_ONLY, WRITE_ONLY_IMM}
IMM_OPS = {SEND_LAST_IMM, SEND_ONLY_IMM, WRITE_LAST_IMM, WRITE_ONLY_IMM}
WRITES = {WRITE_FIRST, WRITE_MIDDLE, WRITE_LAST, WRITE_LAST_IMM, WRITE_ONLY, WRITE_ONLY_IMM}
SENDS = {SEND_FIRST, SEND_MIDDLE, SEND_LAST, SEND_LAST_IMM, SEND_ONLY, SEND_ONLY_IMM}
REQUESTS = WRITES | SENDS | {READ_REQUEST, CMP_SWAP, FETCH_ADD}


@dataclass
class Inbound:
    """Responder cursor of the message being received."""

    kind: str = ""
    mr: MemoryRegion | None = None
    offset: int = 0
    left: int = 0
    total: int = 0
    recv: object = None


@dataclass
class ReadJob:
    """READ responses still owed: from PSN ``psn``, ``left`` bytes at ``mr[offset:]``."""

    psn: int
    mr: MemoryRegion
    offset: int
    left: int
    first: bool
    msn: int


class Responder:
    """Responder state and handlers; the host class provides ``cfg``, ``pd``, ``stats``, ``remote``,
    ``_emit``, ``_recvs``, ``recv_cq``, ``qpn``, ``uc``."""

    def _init_responder(self) -> None:
        self._epsn = 0
        self._msn = 0
        self._nak_sent = False
        self._stash: dict[int, tuple] = {}   # PSN -> early packet, while waiting for a reordered one
        self._in = Inbound()
        self._rsp_q: deque = deque()         # ReadJob or datagram parts, in order
        self._atomic_done: OrderedDict[int, int] = OrderedDict()   # PSN -> original value

    # -- dispatch ---------------------------------------------------------------------------------
    def _on_request_packet(self, buf, n: int, opcode: int, pad: int, ackreq: bool, psn: int) -> None:
        d = wire.psn_diff(psn, self._epsn)
        if self.uc:
            self._uc_sync(opcode, psn, d)
            if wire.psn_diff(psn, self._epsn) != 0:
                return
            d = 0
        if d < 0:
            self._duplicate(buf, n, opcode, ackreq, psn)
            return
        if d > 0:
            self.stats.out_of_order_rx += 1
            if d <= self._reorder and len(self._stash) < self._reorder:
                self._stash.setdefault(psn, (bytes(buf[:n]), n, opcode, pad, ackreq, psn))
                return
            self._stash.clear()
            if not self._nak_sent:
                self._nak_sent = True
                self._send_ack(self._epsn, SYN_NAK_SEQ)
            return
        if opcode == READ_REQUEST:
            self._on_read(buf, n, psn, False)
        elif opcode in (CMP_SWAP, FETCH_ADD):
            self._on_atomic(buf, n, opcode, psn)
        else:
            self._on_data(buf, n, opcode, pad, ackreq, psn)

    def _uc_sync(self, opcode: int, psn: int, d: int) -> None:
        """UC: a PSN gap loses the message in progress; the next FIRST/ONLY starts afresh."""
        if d == 0:
            return
        self.stats.out_of_order_rx += 1
        self._in = Inbound()
        if opcode in FIRST_OPS or opcode in ONLY_OPS:
            self._epsn = psn
        else:
            self._epsn = (psn + 1) & wire.PSN_MASK  # drop this one and the rest of its message

    def _duplicate(self, buf, n: int, opcode: int, ackreq: bool, psn: int) -> None:
        self.stats.duplicates_rx += 1
        if opcode == READ_REQUEST:
            self._on_read(buf, n, psn, True)
        elif opcode in (CMP_SWAP, FETCH_ADD):
            orig = self._atomic_done.get(psn)
            if orig is not None:
                self._queue(self._atomic_ack_parts(psn, orig))
        elif ackreq:
            self._send_ack((self._epsn - 1) & wire.PSN_MASK, SYN_ACK)

    # -- READ -------------------------------------------------------------------------------------
    def _on_read(self, buf, n: int, psn: int, duplicate: bool) -> None:
        if n < 12 + 16 + 4:
            self.stats.malformed_rx += 1
            return
        va, rkey, length = wire.RETH.unpack_from(buf, 12)
        mr = self.pd.lookup(rkey)
        if mr is None or not mr.access & REMOTE_READ or not mr.contains(va, length):
            if not duplicate:
                self._send_ack(psn, SYN_NAK_ACCESS)
            return
        npkts = max(1, -(-length // self.cfg.mtu))
        if not duplicate:
            self._epsn = (self._epsn + npkts) & wire.PSN_MASK
            self._nak_sent = False
            self._msn = (self._msn + 1) & wire.PSN_MASK
        self.stats.reads_rx += 1
        self._rsp_q.append(ReadJob(psn, mr, va - mr.addr, length, True, self._msn))

    def _read_parts(self, job: ReadJob) -> tuple[list, int]:
        """The next READ response packet of ``job`` (advancing it)."""
        mtu = self.cfg.mtu
        n = min(mtu, job.left)
        last = job.left <= mtu
        if job.first and last:
            opcode = READ_ONLY
        elif job.first:
            opcode = READ_FIRST
        else:
            opcode = READ_LAST if last else READ_MIDDLE
        pad = (-n) % 4 if last else 0
        hdr = wire.bth(opcode, self.remote.qpn, job.psn, padcount=pad)
        if opcode != READ_MIDDLE:
            hdr += wire.AETH.pack((SYN_ACK << 24) | job.msn)
        parts = [hdr, job.mr.view[job.offset:job.offset + n]]
        if pad:
            parts.append(PAD[pad])
        job.psn = (job.psn + 1) & wire.PSN_MASK
        job.offset += n
        job.left -= n
        job.first = False
        return parts, len(hdr) + n + pad

    # -- atomics ----------------------------------------------------------------------------------
    def _on_atomic(self, buf, n: int, opcode: int, psn: int) -> None:
        if n < 12 + 28 + 4:
            self.stats.malformed_rx += 1
            return
        va, rkey, swap_add, compare = ATOMIC_ETH.unpack_from(buf, 12)
        mr = self.pd.lookup(rkey)
        if mr is None or not mr.access & REMOTE_ATOMIC or not mr.contains(va, 8):
            self._send_ack(psn, SYN_NAK_ACCESS)
            return
        if va % 8:
            self._send_ack(psn, SYN_NAK_INV)  # IBA §9.4.5: atomics need an 8-byte aligned address
            return
        off = va - mr.addr
        orig = U64_HOST.unpack_from(mr.view, off)[0]
        if opcode == FETCH_ADD:
            new = (orig + swap_add) & 0xFFFF_FFFF_FFFF_FFFF
        else:
            new = swap_add if orig == compare else orig
        U64_HOST.pack_into(mr.view, off, new)
        self._epsn = (self._epsn + 1) & wire.PSN_MASK
        self._nak_sent = False
        self._msn = (self._msn + 1) & wire.PSN_MASK
        self.stats.atomics_rx += 1
        self._atomic_done[psn] = orig
        while len(self._atomic_done) > ATOMIC_MEMORY:
            self._atomic_done.popitem(last=False)
        self._queue(self._atomic_ack_parts(psn, orig))

    def _atomic_ack_parts(self, psn: int, orig: int) -> list:
        return [wire.bth(ATOMIC_ACK, self.remote.qpn, psn) + wire.AETH.pack((SYN_ACK << 24) | self._msn)
                + U64.pack(orig)]

    # -- SEND / WRITE -----------------------------------------------------------------------------
    def _on_data(self, buf, n: int, opcode: int, pad: int, ackreq: bool, psn: int) -> None:
        start = 12
        first = opcode in FIRST_OPS or opcode in ONLY_OPS
        end_msg = opcode in LAST_OPS or opcode in ONLY_OPS
        inb = self._in
        if opcode in WRITES:
            if first:
                if n < 12 + 16 + 4:
                    self.stats.malformed_rx += 1
                    return
                va, rkey, dmalen = wire.RETH.unpack_from(buf, 12)
                start = 28
                mr = self.pd.lookup(rkey)
                if mr is None or not mr.access & REMOTE_WRITE or not mr.contains(va, dmalen):
                    self._send_ack(psn, SYN_NAK_ACCESS)
                    return
                inb.kind, inb.mr, inb.offset, inb.left, inb.total, inb.recv = \
                    "write", mr, va - mr.addr, dmalen, dmalen, None
            elif inb.kind != "write":
                self._send_ack(psn, SYN_NAK_INV)
                return
        else:
            if first:
                if not self._recvs:
                    self._send_ack(psn, SYN_RNR)
                    return
                rwr = self._recvs[0]
                inb.kind, inb.mr, inb.offset, inb.left, inb.total, inb.recv = \
                    "send", rwr.mr, rwr.offset, rwr.length, 0, rwr
            elif inb.kind != "send":
                self._send_ack(psn, SYN_NAK_INV)
                return
        imm = None
        if opcode in IMM_OPS:
            if n < start + 4 + 4:
                self.stats.malformed_rx += 1
                return
            imm = wire.U32.unpack_from(buf, start)[0]
            start += 4
            if inb.kind == "write" and not self._recvs:
                self._send_ack(psn, SYN_RNR)
                return
        end = n - 4 - pad
        length = end - start
        if length < 0 or length > self.cfg.mtu or length > inb.left:
            self._send_ack(psn, SYN_NAK_INV)
            return
        if inb.kind == "write" and end_msg and inb.left != length:
            self._send_ack(psn, SYN_NAK_INV)
            return
        if length:
            inb.mr.view[inb.offset:inb.offset + length] = buf[start:end]
        inb.offset += length
        inb.left -= length
        if inb.kind == "send":
            inb.total += length
        self._epsn = (self._epsn + 1) & wire.PSN_MASK
        self._nak_sent = False
        if end_msg:
            self._msn = (self._msn + 1) & wire.PSN_MASK
            if inb.kind == "send":
                rwr = self._recvs.popleft()
                self.recv_cq.push(WorkCompletion(rwr.wr_id, WcStatus.SUCCESS, WcOpcode.RECV, self.qpn,
                                                 inb.total, imm))
            elif imm is not None:
                rwr = self._recvs.popleft()
                self.recv_cq.push(WorkCompletion(rwr.wr_id, WcStatus.SUCCESS, WcOpcode.RECV_RDMA_WITH_IMM,
                                                 self.qpn, inb.total, imm))
            self._in = Inbound()
        if ackreq:
            self._send_ack(psn, SYN_ACK)

    # -- output -----------------------------------------------------------------------------------
    def _send_ack(self, psn: int, syndrome: int) -> None:
        if self.uc:
            return  # UC has no acknowledgements; errors just lose the message
        if syndrome == SYN_ACK:
            self.stats.acks_tx += 1
        else:
            self.stats.naks_tx += 1
        self._queue([wire.bth(ACK, self.remote.qpn, psn) + wire.AETH.pack((syndrome << 24) | self._msn)])

    def _queue(self, parts: list) -> None:
        """Send now, or behind the READ responses still queued (responses stay in PSN order)."""
        if self._rsp_q or not self._emit(parts, False):
            self._rsp_q.append(parts)

    def _pump_responses(self, now: float, budget: int) -> int:
        """Send queued responses, paced like requests when DCQCN runs; returns packets sent."""
        sent = 0
        q = self._rsp_q
        while q and sent < budget:
            head = q[0]
            if isinstance(head, ReadJob):
                if not self._tokens_for(self.cfg.mtu + 40, now):
                    break
                saved = (head.psn, head.offset, head.left, head.first)
                parts, size = self._read_parts(head)
                if not self._emit(parts, True, size):
                    head.psn, head.offset, head.left, head.first = saved
                    break
                self._spend(size, now)
                self.stats.tx_bytes += size
                if head.left <= 0:
                    q.popleft()
            else:
                if not self._emit(head, False):
                    break
                q.popleft()
            sent += 1
        return sent

    def _send_cnp(self) -> None:
        self.stats.cnps_tx += 1
        parts = [wire.bth(CNP, self.remote.qpn, 0, becn=True) + bytes(16)]
        self._emit(parts, False, tos=wire.CNP_TOS)
