"""The RC queue pair protocol engine (IBA Vol. 1 ch. 9.7, reliable connected service), pure: it takes
``now`` and hands datagrams to an ``out`` callable, so it runs over sockets or an in-memory wire.

Requester (this side posts work)::

    post_write/post_send -> WRs, each a PSN range of ceil(len / MTU) packets
    pump(now):  send PSNs [send, min(next, acked + window)) as the DCQCN rate allows;
                AckReq on each message's last packet and every ``ackreq_every`` PSNs
    ACK  psn p:             everything <= p done -> completions
    NAK  PSN sequence err:  everything <  p done, go back to p (go-back-N)
    NAK  RNR:               go back to p after ``rnr_delay``
    NAK  access/invalid:    QP -> ERROR, WR completes with the error, the rest flush
    timeout, no progress:   go back to acked; after ``retry_limit`` tries QP -> ERROR (RETRY_EXC_ERR)
    CNP:                    DCQCN reaction point cuts the rate

Responder (the peer's requests arrive here)::

    PSN == expected: place data byte-exactly (RETH va/rkey checked against the PD), advance,
                     ACK when AckReq is set (coalescing: one ACK covers everything before it)
    PSN <  expected: duplicate; re-ACK if AckReq
    PSN >  expected: held back (up to ``reorder`` packets: veth's per-CPU backlogs reorder a stream
                     when the sender migrates between CPUs, which a real fabric would not); beyond
                     that, NAK PSN sequence error, once until the expected PSN arrives
    CE-marked:       DCQCN notification point: CNP to the requester QP, <= 1 per interval
"""

from __future__ import annotations

import enum
import random
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from testbed.rdma import wire
from testbed.rdma.dcqcn import DcqcnParams, NotificationPoint, ReactionPoint
from testbed.rdma.verbs import (
    REMOTE_WRITE,
    CompletionQueue,
    MemoryRegion,
    ProtectionDomain,
    RdmaError,
    WcOpcode,
    WcStatus,
    WorkCompletion,
)
from testbed.roce import opcodes as ops

# RC opcodes used by the engine
SEND_FIRST, SEND_MIDDLE, SEND_LAST, SEND_LAST_IMM, SEND_ONLY, SEND_ONLY_IMM = 0x00, 0x01, 0x02, 0x03, 0x04, 0x05
WRITE_FIRST, WRITE_MIDDLE, WRITE_LAST, WRITE_LAST_IMM, WRITE_ONLY, WRITE_ONLY_IMM = 0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B
ACK = ops.ACK
CNP = ops.CNP
SYN_ACK = 0x1F
SYN_NAK_SEQ, SYN_NAK_INV, SYN_NAK_ACCESS, SYN_NAK_OP = 0x60, 0x61, 0x62, 0x63
SYN_RNR = 0x20 | 0x0E  # RNR NAK, timer code 14 (~1 ms, IBA Table 45)
_PAD = (b"", b"\x00", b"\x00\x00", b"\x00\x00\x00")

_FIRST = {SEND_FIRST, WRITE_FIRST}
_LAST = {SEND_LAST, SEND_LAST_IMM, WRITE_LAST, WRITE_LAST_IMM}
_ONLY = {SEND_ONLY, SEND_ONLY_IMM, WRITE_ONLY, WRITE_ONLY_IMM}
_IMM = {SEND_LAST_IMM, SEND_ONLY_IMM, WRITE_LAST_IMM, WRITE_ONLY_IMM}
_WRITES = {WRITE_FIRST, WRITE_MIDDLE, WRITE_LAST, WRITE_LAST_IMM, WRITE_ONLY, WRITE_ONLY_IMM}
_SENDS = {SEND_FIRST, SEND_MIDDLE, SEND_LAST, SEND_LAST_IMM, SEND_ONLY, SEND_ONLY_IMM}


class QpState(enum.Enum):
    RESET = "reset"
    RTS = "rts"          # connected: ready to send and receive
    ERROR = "error"


@dataclass(frozen=True)
class QpConfig:
    """Transport knobs; times already dilated (seconds of this replica)."""

    mtu: int = 1024
    window: int = 128            # unacknowledged packets in flight
    ackreq_every: int = 32
    timeout: float = 0.05        # local ACK timeout
    retry_limit: int = 7
    rnr_delay: float = 1e-3
    rnr_retry_limit: int = 7
    dcqcn: DcqcnParams | None = None
    loss: float = 0.0            # drop this share of our own datagrams (loss injection for tests)
    reorder: int = 32            # hold up to this many early packets before NAKing a PSN gap
    seed: int | None = None

    def __post_init__(self):
        if self.mtu not in wire.IB_MTUS:
            raise RdmaError(f"mtu must be one of {wire.IB_MTUS}, got {self.mtu}")
        if self.window < 1 or self.ackreq_every < 1 or self.reorder < 0:
            raise RdmaError("window and ackreq_every must be >= 1, reorder >= 0")


@dataclass(frozen=True)
class Remote:
    """What the out-of-band exchange tells about the peer QP."""

    qpn: int
    psn: int
    ip: str
    port: int


@dataclass
class QpStats:
    tx_packets: int = 0
    tx_bytes: int = 0
    rx_packets: int = 0
    retransmissions: int = 0
    timeouts: int = 0
    acks_tx: int = 0
    acks_rx: int = 0
    naks_tx: int = 0
    naks_rx: int = 0
    cnps_tx: int = 0
    cnps_rx: int = 0
    ce_rx: int = 0
    duplicates_rx: int = 0
    out_of_order_rx: int = 0
    malformed_rx: int = 0
    dropped_tx: int = 0
    acked_bytes: int = 0   # payload of completed work requests


@dataclass
class _SendWr:
    wr_id: int
    kind: str           # "write" | "send"
    mr: MemoryRegion
    offset: int
    length: int
    remote_addr: int
    rkey: int
    imm: int | None
    signaled: bool
    first: int          # unwrapped PSNs
    last: int


@dataclass
class _RecvWr:
    wr_id: int
    mr: MemoryRegion
    offset: int
    length: int


@dataclass
class _Inbound:
    """Responder cursor of the message being received."""

    kind: str = ""
    mr: MemoryRegion | None = None
    offset: int = 0
    left: int = 0
    total: int = 0
    recv: _RecvWr | None = None


class QueuePair:
    """One RC queue pair. ``out(parts, ecn)`` sends a datagram made of ``parts``; False = try later."""

    def __init__(self, qpn: int, pd: ProtectionDomain, cq: CompletionQueue, config: QpConfig,
                 out: Callable[[list, bool], bool], recv_cq: CompletionQueue | None = None):
        self.qpn = qpn
        self.pd = pd
        self.cq = cq
        self.recv_cq = recv_cq or cq
        self.cfg = config
        self._out = out
        self.state = QpState.RESET
        self.error: str | None = None
        self.stats = QpStats()
        self.remote: Remote | None = None
        self.path: wire.Path | None = None
        self.rp: ReactionPoint | None = None
        self.np = NotificationPoint(config.dcqcn) if config.dcqcn else None
        self._rng = random.Random(config.seed)
        self._ackreq_every = max(1, min(config.ackreq_every, config.window // 2 or 1))
        # a real loss must still be NAKed before the requester's window (same config both ends) runs dry
        self._reorder = min(config.reorder, config.window // 4)
        # requester
        self._wrs: deque[_SendWr] = deque()
        self._hint = 0
        self._next = self._send = self._acked = self._max_sent = 0
        self._timer: float | None = None
        self._retries = 0
        self._rnr_retries = 0
        self._pause_until = 0.0
        self._tokens = 0.0
        self._refill = 0.0
        self.pace_due: float | None = None
        # responder
        self._epsn = 0
        self._msn = 0
        self._nak_sent = False
        self._stash: dict[int, tuple] = {}   # PSN -> early packet, while waiting for a reordered one
        self._in = _Inbound()
        self._recvs: deque[_RecvWr] = deque()

    # -- connection --------------------------------------------------------------------------------
    def connect(self, remote: Remote, path: wire.Path, my_psn: int, now: float) -> None:
        """Move to RTS: ``my_psn`` is our first send PSN, ``remote.psn`` the peer's."""
        self.remote, self.path = remote, path
        self._next = self._send = self._acked = self._max_sent = my_psn & wire.PSN_MASK
        self._epsn = remote.psn & wire.PSN_MASK
        if self.cfg.dcqcn:
            self.rp = ReactionPoint(self.cfg.dcqcn, now)
            self._refill = now
        self.state = QpState.RTS

    # -- verbs ------------------------------------------------------------------------------------
    def _check_postable(self) -> None:
        if self.state is not QpState.RTS:
            reason = f": {self.error}" if self.error else ""
            raise RdmaError(f"QP 0x{self.qpn:06x} is in the {self.state.value} state{reason}")

    def post_write(self, wr_id: int, mr: MemoryRegion, offset: int, length: int, remote_addr: int,
                   rkey: int, imm: int | None = None, signaled: bool = True) -> None:
        self._post("write", wr_id, mr, offset, length, remote_addr, rkey, imm, signaled)

    def post_send(self, wr_id: int, mr: MemoryRegion, offset: int, length: int, imm: int | None = None,
                  signaled: bool = True) -> None:
        self._post("send", wr_id, mr, offset, length, 0, 0, imm, signaled)

    def post_recv(self, wr_id: int, mr: MemoryRegion, offset: int = 0, length: int | None = None) -> None:
        if self.state is QpState.ERROR:
            self._check_postable()
        length = mr.length - offset if length is None else length
        if offset < 0 or offset + length > mr.length:
            raise RdmaError(f"receive buffer [{offset}, {offset + length}) outside the region")
        self._recvs.append(_RecvWr(wr_id, mr, offset, length))

    def _post(self, kind, wr_id, mr, offset, length, remote_addr, rkey, imm, signaled) -> None:
        self._check_postable()
        if offset < 0 or length < 0 or offset + length > mr.length:
            raise RdmaError(f"local buffer [{offset}, {offset + length}) outside the region of {mr.length} B")
        if length >= 1 << 31:
            raise RdmaError(f"message of {length} B exceeds 2^31 B")
        npkts = max(1, -(-length // self.cfg.mtu))
        wr = _SendWr(wr_id, kind, mr, offset, length, remote_addr, rkey, imm, signaled,
                     self._next, self._next + npkts - 1)
        self._wrs.append(wr)
        self._next += npkts

    @property
    def outstanding(self) -> int:
        """Work requests posted and not yet completed."""
        return len(self._wrs)

    # -- requester: transmit ----------------------------------------------------------------------
    def pump(self, now: float, budget: int = 64) -> int:
        """Send up to ``budget`` packets allowed by window, pause and rate; returns packets sent."""
        if self.state is not QpState.RTS or now < self._pause_until:
            return 0
        sent = 0
        rp = self.rp
        if rp is not None:
            rp.advance(now)
            rate = rp.rate / 8
            self._tokens = min(self._tokens + (now - self._refill) * rate, 16.0 * (self.cfg.mtu + 100))
            self._refill = now
        self.pace_due = None
        limit = min(self._next, self._acked + self.cfg.window)
        while sent < budget and self._send < limit:
            parts, size = self._build(self._send)
            if rp is not None:
                if self._tokens < size + 42:
                    self.pace_due = now + (size + 42 - self._tokens) / (rp.rate / 8)
                    break
            if not self._emit(parts, True, size):
                break
            if rp is not None:
                self._tokens -= size + 42
                rp.on_sent(size + 42, now)
            if self._send < self._max_sent:
                self.stats.retransmissions += 1
            else:
                self._max_sent = self._send + 1
            self.stats.tx_bytes += size
            self._send += 1
            sent += 1
        if sent and self._timer is None:
            self._timer = now + self.cfg.timeout
        return sent

    def _wr_for(self, u: int) -> _SendWr:
        wrs = self._wrs
        i = self._hint if self._hint < len(wrs) and wrs[self._hint].first <= u else 0
        while wrs[i].last < u:
            i += 1
        self._hint = i
        return wrs[i]

    def _build(self, u: int) -> tuple[list, int]:
        """The datagram parts of unwrapped PSN ``u`` (header, payload view[, pad]) and their length."""
        wr = self._wr_for(u)
        i = u - wr.first
        mtu = self.cfg.mtu
        off = i * mtu
        n = min(mtu, wr.length - off)
        first, last = i == 0, u == wr.last
        write = wr.kind == "write"
        if first and last:
            opcode = (WRITE_ONLY if wr.imm is None else WRITE_ONLY_IMM) if write else \
                (SEND_ONLY if wr.imm is None else SEND_ONLY_IMM)
        elif first:
            opcode = WRITE_FIRST if write else SEND_FIRST
        elif last:
            opcode = (WRITE_LAST if wr.imm is None else WRITE_LAST_IMM) if write else \
                (SEND_LAST if wr.imm is None else SEND_LAST_IMM)
        else:
            opcode = WRITE_MIDDLE if write else SEND_MIDDLE
        pad = (-n) % 4 if last else 0
        ackreq = last or (u + 1) % self._ackreq_every == 0
        hdr = wire.bth(opcode, self.remote.qpn, u, ackreq=ackreq, padcount=pad)
        if first and write:
            hdr += wire.RETH.pack(wr.remote_addr, wr.rkey, wr.length)
        if last and wr.imm is not None:
            hdr += wire.U32.pack(wr.imm)
        start = wr.offset + off
        parts = [hdr, wr.mr.view[start:start + n]]
        if pad:
            parts.append(_PAD[pad])
        return parts, len(hdr) + n + pad

    def _emit(self, parts: list, ect: bool, length: int | None = None) -> bool:
        parts.append(self.path.tx_icrc(parts, length))
        if self.cfg.loss and self._rng.random() < self.cfg.loss:
            self.stats.dropped_tx += 1
            self.stats.tx_packets += 1
            return True
        if not self._out(parts, ect):
            parts.pop()
            return False
        self.stats.tx_packets += 1
        return True

    # -- timers -----------------------------------------------------------------------------------
    def next_deadline(self) -> float | None:
        times = [t for t in (self._timer, self.pace_due, self._pause_until or None) if t is not None]
        return min(times) if times else None

    def on_timer(self, now: float) -> None:
        """Retransmit timeout: go back to the oldest unacknowledged PSN, or give up."""
        if self._timer is None or now < self._timer or self.state is not QpState.RTS:
            return
        if self._acked >= self._max_sent:
            self._timer = None
            return
        self.stats.timeouts += 1
        self._retries += 1
        if self._retries > self.cfg.retry_limit:
            self._to_error(WcStatus.RETRY_EXC_ERR,
                           f"no ACK after {self.cfg.retry_limit} retries of {self.cfg.timeout:g} s")
            return
        self._send = self._acked
        self._hint = 0
        self._timer = now + self.cfg.timeout

    # -- receive ----------------------------------------------------------------------------------
    def on_datagram(self, buf, n: int, ce: bool, now: float) -> None:
        """Handle one datagram ``buf[:n]`` whose ICRC and source the device already checked."""
        self.stats.rx_packets += 1
        if n < 16:
            self.stats.malformed_rx += 1
            return
        opcode, flags, _pkey, _qpw, psnw = wire.BTH.unpack_from(buf, 0)
        psn = psnw & wire.PSN_MASK
        if opcode == CNP:
            self.stats.cnps_rx += 1
            if self.rp is not None:
                self.rp.on_cnp(now)
            return
        if self.state is not QpState.RTS:
            return
        if opcode == ACK:
            if n < 20:
                self.stats.malformed_rx += 1
                return
            self._on_ack(psn, buf[12], now)
            return
        if opcode in _WRITES or opcode in _SENDS:
            if ce:
                self.stats.ce_rx += 1
                if self.np is not None and self.np.on_ce(self.remote.qpn, now):
                    self._send_cnp()
            self._on_request(buf, n, opcode, (flags >> 4) & 3, bool(psnw >> 31), psn)
            while self._stash and self._epsn in self._stash:  # reordered packets now in sequence
                self._on_request(*self._stash.pop(self._epsn))
            return
        self.stats.malformed_rx += 1  # opcodes this endpoint does not implement (read, atomics, UD)

    def _on_ack(self, psn: int, syndrome: int, now: float) -> None:
        u = self._acked + wire.psn_diff(psn, self._acked & wire.PSN_MASK)
        kind = (syndrome >> 5) & 3
        if kind == 0:
            self.stats.acks_rx += 1
            if u + 1 > self._max_sent or u < self._acked - 1:
                return  # ACK for something never sent, or stale
            self._complete_to(u + 1, now)
        elif kind == 3:
            self.stats.naks_rx += 1
            if not self._acked <= u <= self._max_sent:
                return  # a NAK for a PSN outside the unacknowledged range is stale (or forged)
            code = syndrome & 0x1F
            if code == 0:
                self._complete_to(u, now)
                if self._send > u:
                    self._send = u
                    self._hint = 0
                return
            status = {1: WcStatus.REM_INV_REQ_ERR, 2: WcStatus.REM_ACCESS_ERR}.get(code, WcStatus.REM_OP_ERR)
            self._complete_to(u, now)
            self._to_error(status, f"peer answered PSN {psn} with {status.value}")
        elif kind == 1:
            self.stats.naks_rx += 1
            if not self._acked <= u <= self._max_sent:
                return
            self._complete_to(u, now)
            self._rnr_retries += 1
            if self._rnr_retries > self.cfg.rnr_retry_limit:
                self._to_error(WcStatus.RNR_RETRY_EXC_ERR, "peer had no receive buffer posted")
                return
            self._send = u
            self._hint = 0
            self._pause_until = now + self.cfg.rnr_delay

    def _complete_to(self, u: int, now: float) -> None:
        """Everything below unwrapped PSN ``u`` is acknowledged."""
        if u <= self._acked:
            return
        self._acked = u
        self._retries = 0
        self._rnr_retries = 0
        while self._wrs and self._wrs[0].last < u:
            wr = self._wrs.popleft()
            self._hint = max(0, self._hint - 1)
            self.stats.acked_bytes += wr.length
            if wr.signaled:
                op = WcOpcode.RDMA_WRITE if wr.kind == "write" else WcOpcode.SEND
                self.cq.push(WorkCompletion(wr.wr_id, WcStatus.SUCCESS, op, self.qpn, wr.length))
        if self._send < u:
            self._send = u
        self._timer = now + self.cfg.timeout if self._acked < self._max_sent else None

    def _on_request(self, buf, n: int, opcode: int, pad: int, ackreq: bool, psn: int) -> None:
        d = wire.psn_diff(psn, self._epsn)
        if d < 0:
            self.stats.duplicates_rx += 1
            if ackreq:
                self._send_ack((self._epsn - 1) & wire.PSN_MASK, SYN_ACK)
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
        start = 12
        first = opcode in _FIRST or opcode in _ONLY
        end_msg = opcode in _LAST or opcode in _ONLY
        inb = self._in
        if opcode in _WRITES:
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
        if opcode in _IMM:
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
            self._in = _Inbound()
        if ackreq:
            self._send_ack(psn, SYN_ACK)

    def _send_ack(self, psn: int, syndrome: int) -> None:
        if syndrome == SYN_ACK:
            self.stats.acks_tx += 1
        else:
            self.stats.naks_tx += 1
        parts = [wire.bth(ACK, self.remote.qpn, psn) + wire.AETH.pack((syndrome << 24) | self._msn)]
        self._emit(parts, False)

    def _send_cnp(self) -> None:
        self.stats.cnps_tx += 1
        parts = [wire.bth(CNP, self.remote.qpn, 0, becn=True) + bytes(16)]
        self._emit(parts, False)

    # -- errors -----------------------------------------------------------------------------------
    def _to_error(self, status: WcStatus, why: str) -> None:
        """QP -> ERROR: the head WR completes with ``status``, everything else is flushed."""
        self.state = QpState.ERROR
        self.error = f"{why} ({status.value})"
        first = True
        while self._wrs:
            wr = self._wrs.popleft()
            op = WcOpcode.RDMA_WRITE if wr.kind == "write" else WcOpcode.SEND
            self.cq.push(WorkCompletion(wr.wr_id, status if first else WcStatus.WR_FLUSH_ERR, op, self.qpn))
            first = False
        while self._recvs:
            rwr = self._recvs.popleft()
            self.recv_cq.push(WorkCompletion(rwr.wr_id, WcStatus.WR_FLUSH_ERR, WcOpcode.RECV, self.qpn))
        self._timer = None


@dataclass
class QpInfo:
    """The record exchanged out of band (like perftest's): enough to reach one QP and one region."""

    qpn: int
    psn: int
    ip: str
    port: int
    addr: int = 0
    rkey: int = 0
    length: int = 0
    mtu: int = 1024
    extra: dict = field(default_factory=dict)
