"""The queue pair protocol engine (IBA Vol. 1 ch. 9.7), pure: it takes ``now`` and hands datagrams to an
``out`` callable, so it runs over sockets or an in-memory wire. Transports: RC (reliable connected), UC
(unreliable connected: no ACKs, a loss drops the message) and UD (datagrams with a DETH carrying the
Q_Key and the source QP; one packet per message, each WR names its destination).

Requester (this side posts work)::

    post_write/post_send/post_read/post_atomic -> WRs, each a PSN range: ceil(len / MTU) packets
                            (a READ sends one request per window/2 packets of responses, each request
                            reserving that many PSNs)
    pump(now):  send PSNs [send, min(next, acked + window)) as the DCQCN rate allows;
                AckReq on each message's last packet and every ``ackreq_every`` PSNs
    ACK  psn p:             everything <= p done -> completions
    NAK  PSN sequence err:  everything <  p done, go back to p (go-back-N)
    NAK  RNR:               go back to p after ``rnr_delay``
    NAK  access/invalid:    QP -> ERROR, WR completes with the error, the rest flush
    timeout, no progress:   go back to acked; after ``retry_limit`` tries QP -> ERROR (RETRY_EXC_ERR)
    READ response psn p:    data placed at (p - first) * MTU; implicitly ACKs the SENDs/WRITEs
                            before it; out of sequence: re-request from the first missing PSN
    ATOMIC ACK psn p:       the original remote value lands in the local 8-byte buffer
    CNP:                    DCQCN reaction point cuts the rate
    UC/UD:                  a WR completes when its last packet is sent

The responder half is :mod:`testbed.rdma.responder`. Early packets are held back (up to ``reorder``:
veth's per-CPU backlogs reorder a stream when the sender migrates between CPUs, which a real fabric
would not) before a NAK.
"""

from __future__ import annotations

import enum
import random
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from testbed.rdma import wire
from testbed.rdma.dcqcn import DcqcnParams, NotificationPoint, ReactionPoint
from testbed.rdma.responder import (
    ACK,
    ATOMIC_ACK,
    CMP_SWAP,
    CNP,
    FETCH_ADD,
    PAD,
    READ_FIRST,
    READ_LAST,
    READ_MIDDLE,
    READ_ONLY,
    READ_REQUEST,
    REQUESTS,
    SEND_FIRST,
    SEND_LAST,
    SEND_LAST_IMM,
    SEND_MIDDLE,
    SEND_ONLY,
    SEND_ONLY_IMM,
    SENDS,
    U64,
    U64_HOST,
    WRITE_FIRST,
    WRITE_LAST,
    WRITE_LAST_IMM,
    WRITE_MIDDLE,
    WRITE_ONLY,
    WRITE_ONLY_IMM,
    WRITES,
    Responder,
)
from testbed.rdma.verbs import (
    CompletionQueue,
    MemoryRegion,
    ProtectionDomain,
    RdmaError,
    WcOpcode,
    WcStatus,
    WorkCompletion,
)
from testbed.roce import opcodes as ops

TRANSPORTS = ("rc", "uc", "ud")
UD_SEND_ONLY, UD_SEND_ONLY_IMM = ops.UD_SEND_ONLY, ops.UD_SEND_ONLY_IMM
#: ``QpConfig.line_burst_frames`` of a sender that keeps to its NIC's line rate (long_haul_cnp's): two frames
#: absorb a late wake-up of one frame time.
LINE_BURST_FRAMES = 2
#: Room a UD receive buffer keeps for the GRH before the payload (IBA §11.4.1.2; rxe fills it).
GRH_LEN = 40
_WC_OP = {"write": WcOpcode.RDMA_WRITE, "send": WcOpcode.SEND, "read": WcOpcode.RDMA_READ,
          "cas": WcOpcode.COMP_SWAP, "faa": WcOpcode.FETCH_ADD}
_RD_KINDS = ("read", "cas", "faa")   # completed by responses, not by ACKs


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
    max_rd_atomic: int = 16      # READs and atomics outstanding (ibv_qp_attr.max_rd_atomic)
    seed: int | None = None
    dscp: int = wire.ROCE_DSCP   # the QP's traffic class (its priority in a PFC fabric); ECN bits apart
    rate_limit: float | None = None   # bit/s: a static per-QP limit (ibv_modify_qp_rate_limit), with or without DCQCN
    #: Frames the pacer may hand the socket at once beyond DCQCN's line rate (None: no line-rate bucket). A NIC's
    #: rate limiter sits in front of its serialiser: what it releases goes out at line rate and a CNP's cut
    #: applies to the next frame. A socket takes any burst at once and the link behind it queues what exceeds
    #: the line rate: DCQCN's 16-frame catch-up bucket (full after any idle time) left a standing 16-frame queue
    #: at line rate that no cut reached (14 us at 10G against fast CNP's 0.7 us loop; docs/validation.md). The
    #: price: a sender woken later than ``line_burst_frames - 1`` frame times loses line-rate time (counted in
    #: ``pacing_lost_bytes``), so it suits replicas whose frame time is well above the CPU's wake-up precision
    #: (long_haul_cnp: 1.7 ms), not a 0.2 ms one (validate's DCQCN experiment keeps None).
    line_burst_frames: int | None = None

    def __post_init__(self):
        if self.rate_limit is not None and not (isinstance(self.rate_limit, (int, float)) and self.rate_limit > 0):
            raise RdmaError(f"rate_limit must be a positive rate in bit/s, got {self.rate_limit!r}")
        if isinstance(self.dscp, bool) or not isinstance(self.dscp, int) or not 0 <= self.dscp <= 63:
            raise RdmaError(f"dscp must be an integer 0..63, got {self.dscp!r}")
        if self.line_burst_frames is not None and (isinstance(self.line_burst_frames, bool)
                                                   or not isinstance(self.line_burst_frames, int)
                                                   or self.line_burst_frames < 1):
            raise RdmaError(f"line_burst_frames must be an integer >= 1 or None, got {self.line_burst_frames!r}")
        if self.mtu not in wire.IB_MTUS:
            raise RdmaError(f"mtu must be one of {wire.IB_MTUS}, got {self.mtu}")
        if self.window < 1 or self.ackreq_every < 1 or self.reorder < 0 or self.max_rd_atomic < 1:
            raise RdmaError("window, ackreq_every and max_rd_atomic must be >= 1, reorder >= 0")


@dataclass(frozen=True)
class Remote:
    """What the out-of-band exchange tells about the peer QP."""

    qpn: int
    psn: int
    ip: str
    port: int


@dataclass(frozen=True)
class UdDest:
    """A UD work request's destination (an address handle plus remote QPN and Q_Key)."""

    ip: str
    port: int
    qpn: int
    qkey: int


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
    reads_rx: int = 0
    atomics_rx: int = 0
    read_retries: int = 0
    ud_dropped_rx: int = 0      # UD: bad Q_Key, no receive posted, or too long for it
    acked_bytes: int = 0   # payload of completed work requests
    # DCQCN allowance (bytes) the requester could not use: it was waiting for tokens, and its loop woke so
    # late that they overflowed the burst cap. A NIC's pacer never does; a sender the CPU held back does.
    pacing_lost_bytes: int = 0
    pacing_late_max_s: float = 0.0   # the latest wake-up after a pacing deadline


@dataclass
class _SendWr:
    wr_id: int
    kind: str           # "write" | "send" | "read" | "cas" | "faa"
    mr: MemoryRegion
    offset: int
    length: int
    remote_addr: int
    rkey: int
    imm: int | None
    signaled: bool
    first: int          # unwrapped PSNs
    last: int
    swap_add: int = 0
    compare: int = 0
    dest: UdDest | None = None


@dataclass
class _RecvWr:
    wr_id: int
    mr: MemoryRegion
    offset: int
    length: int


class QueuePair(Responder):
    """One queue pair. ``out(parts, ecn[, (ip, port)])`` sends a datagram made of ``parts`` (UD names the
    destination); False = try later."""

    def __init__(self, qpn: int, pd: ProtectionDomain, cq: CompletionQueue, config: QpConfig,
                 out: Callable[..., bool], recv_cq: CompletionQueue | None = None, transport: str = "rc",
                 qkey: int = 0x11111111):
        if transport not in TRANSPORTS:
            raise RdmaError(f"transport must be one of {', '.join(TRANSPORTS)}, got {transport!r}")
        self.qpn = qpn
        self.pd = pd
        self.cq = cq
        self.recv_cq = recv_cq or cq
        self.cfg = config
        self._tos = (wire.tos(config.dscp, False), wire.tos(config.dscp, True))   # [ect]
        self.transport = transport
        self.uc = transport == "uc"
        self.unreliable = transport != "rc"
        self.qkey = qkey
        self._out = out
        self.state = QpState.RESET
        self.error: str | None = None
        self.stats = QpStats()
        self.remote: Remote | None = None
        self.path: wire.Path | None = None
        self.sport: int | None = None        # UDP source port (the device sets it)
        self._ud_paths: dict[tuple, wire.Path] = {}
        self._ud_local: tuple[str, int, int] | None = None
        self.rp: ReactionPoint | None = None
        self.np = NotificationPoint(config.dcqcn) if config.dcqcn else None
        self._rng = random.Random(config.seed)
        self._ackreq_every = max(1, min(config.ackreq_every, config.window // 2 or 1))
        # a real loss must still be NAKed before the requester's window (same config both ends) runs dry
        self._reorder = min(config.reorder, config.window // 4)
        #: a READ WR longer than this many packets goes out as several READ requests (each reserving its
        #: own PSNs), so that READ responses in flight stay within the window as WRITE packets do
        self._read_chunk = max(1, config.window // 2)
        # requester
        self._wrs: deque[_SendWr] = deque()
        self._hint = 0
        self._next = self._send = self._acked = self._max_sent = 0
        self._timer: float | None = None
        self._retries = 0
        self._rnr_retries = 0
        self._pause_until = 0.0
        self._tokens = 0.0
        self._line_tokens = 0.0   # the line-rate bucket (``line_burst_frames``), with DCQCN only
        self._refill = 0.0
        self._rd_retry: int | None = None
        self.pace_due: float | None = None
        self._recvs: deque[_RecvWr] = deque()
        self._init_responder()

    # -- connection --------------------------------------------------------------------------------
    def connect(self, remote: Remote, path: wire.Path, my_psn: int, now: float) -> None:
        """Move to RTS: ``my_psn`` is our first send PSN, ``remote.psn`` the peer's (RC, UC)."""
        if self.transport == "ud":
            raise RdmaError("a UD QP is not connected; use ready_ud() and post_send(dest=...)")
        self.remote, self.path = remote, path
        self._start(my_psn, now)
        self._epsn = remote.psn & wire.PSN_MASK

    def ready_ud(self, local_ip: str, local_port: int, rx_port: int, my_psn: int, now: float) -> None:
        """Move a UD QP to RTS: it sends from ``local_ip:local_port`` and receives on ``rx_port``."""
        if self.transport != "ud":
            raise RdmaError("ready_ud() is for UD QPs")
        self._ud_local = (local_ip, local_port, rx_port)
        self._start(my_psn, now)

    def _start(self, my_psn: int, now: float) -> None:
        self._next = self._send = self._acked = self._max_sent = my_psn & wire.PSN_MASK
        if self.cfg.dcqcn:
            self.rp = ReactionPoint(self.cfg.dcqcn, now)
        self._refill = now
        self.state = QpState.RTS

    def ud_path(self, ip: str, port: int) -> wire.Path:
        """The path (ICRC headers) between this UD QP and ``ip:port``."""
        key = (ip, port)
        path = self._ud_paths.get(key)
        if path is None:
            if len(self._ud_paths) > 1024:
                self._ud_paths.clear()
            lip, lport, rx = self._ud_local
            path = self._ud_paths[key] = wire.Path(lip, lport, ip, port, rx_port=rx)
        return path

    # -- verbs ------------------------------------------------------------------------------------
    def _check_postable(self) -> None:
        if self.state is not QpState.RTS:
            reason = f": {self.error}" if self.error else ""
            raise RdmaError(f"QP 0x{self.qpn:06x} is in the {self.state.value} state{reason}")

    def post_write(self, wr_id: int, mr: MemoryRegion, offset: int, length: int, remote_addr: int,
                   rkey: int, imm: int | None = None, signaled: bool = True) -> None:
        if self.transport == "ud":
            raise RdmaError("UD QPs carry SENDs only")
        self._post("write", wr_id, mr, offset, length, remote_addr, rkey, imm, signaled)

    def post_send(self, wr_id: int, mr: MemoryRegion, offset: int, length: int, imm: int | None = None,
                  signaled: bool = True, dest: UdDest | None = None) -> None:
        if (self.transport == "ud") != (dest is not None):
            raise RdmaError("a UD SEND needs dest=UdDest(...); RC/UC SENDs take none")
        if dest is not None and length > self.cfg.mtu:
            raise RdmaError(f"a UD message is one packet: {length} B exceeds the {self.cfg.mtu} B MTU")
        self._post("send", wr_id, mr, offset, length, 0, 0, imm, signaled, dest=dest)

    def post_read(self, wr_id: int, mr: MemoryRegion, offset: int, length: int, remote_addr: int,
                  rkey: int, signaled: bool = True) -> None:
        """RDMA READ ``length`` bytes at ``remote_addr`` into ``mr[offset:]`` (RC only)."""
        if self.unreliable:
            raise RdmaError("RDMA READ needs an RC QP")
        self._post("read", wr_id, mr, offset, length, remote_addr, rkey, None, signaled)

    def post_atomic(self, wr_id: int, mr: MemoryRegion, offset: int, remote_addr: int, rkey: int,
                    op: str, swap_add: int, compare: int = 0, signaled: bool = True) -> None:
        """Fetch-and-add (``op="faa"``) or compare-and-swap (``"cas"``) on the 8 bytes at ``remote_addr``;
        the original value lands in ``mr[offset:offset + 8]`` (host byte order) (RC only)."""
        if self.unreliable:
            raise RdmaError("atomics need an RC QP")
        if op not in ("faa", "cas"):
            raise RdmaError(f"atomic op must be 'faa' or 'cas', got {op!r}")
        if remote_addr % 8:
            raise RdmaError(f"atomic address 0x{remote_addr:x} is not 8-byte aligned")
        self._post(op, wr_id, mr, offset, 8, remote_addr, rkey, None, signaled,
                   swap_add=swap_add & 0xFFFF_FFFF_FFFF_FFFF, compare=compare & 0xFFFF_FFFF_FFFF_FFFF)

    def post_recv(self, wr_id: int, mr: MemoryRegion, offset: int = 0, length: int | None = None) -> None:
        if self.state is QpState.ERROR:
            self._check_postable()
        length = mr.length - offset if length is None else length
        if offset < 0 or offset + length > mr.length:
            raise RdmaError(f"receive buffer [{offset}, {offset + length}) outside the region")
        self._recvs.append(_RecvWr(wr_id, mr, offset, length))

    def _post(self, kind, wr_id, mr, offset, length, remote_addr, rkey, imm, signaled, **extra) -> None:
        self._check_postable()
        if offset < 0 or length < 0 or offset + length > mr.length:
            raise RdmaError(f"local buffer [{offset}, {offset + length}) outside the region of {mr.length} B")
        if length >= 1 << 31:
            raise RdmaError(f"message of {length} B exceeds 2^31 B")
        npkts = 1 if kind in ("cas", "faa") else max(1, -(-length // self.cfg.mtu))
        wr = _SendWr(wr_id, kind, mr, offset, length, remote_addr, rkey, imm, signaled,
                     self._next, self._next + npkts - 1, **extra)
        self._wrs.append(wr)
        self._next += npkts

    @property
    def outstanding(self) -> int:
        """Work requests posted and not yet completed."""
        return len(self._wrs)

    # -- requester: transmit ----------------------------------------------------------------------
    def _pace_rate(self) -> float | None:
        """Bytes per second the QP may send at: DCQCN's current rate and the static limit, the lower; None
        when neither applies (window only)."""
        rp, limit = self.rp, self.cfg.rate_limit
        if rp is None:
            return None if limit is None else limit / 8
        return rp.rate / 8 if limit is None else min(rp.rate, limit) / 8

    def _line_rate(self) -> float | None:
        """Bytes per second of the NIC's wire: DCQCN's line rate (None without DCQCN: no line rate known)."""
        if self.rp is None or self.cfg.line_burst_frames is None:
            return None
        return self.rp.p.line_rate / 8

    def _tokens_for(self, size: int, now: float) -> bool:
        """Pacing (DCQCN, rate limit, line rate): enough tokens for a datagram of ``size``? (sets ``pace_due``
        if not: when the scarcer bucket has them)."""
        rate, line, need = self._pace_rate(), self._line_rate(), size + 42
        due = None
        if rate is not None and self._tokens < need:
            due = now + (need - self._tokens) / rate
        if line is not None and self._line_tokens < need:
            due = max(due or now, now + (need - self._line_tokens) / line)
        if due is not None:
            self.pace_due = due
            return False
        return True

    def _spend(self, size: int, now: float) -> None:
        if self._line_rate() is not None:
            self._line_tokens -= size + 42
        if self.rp is not None or self.cfg.rate_limit is not None:
            self._tokens -= size + 42
        if self.rp is not None:
            self.rp.on_sent(size + 42, now)

    def pump(self, now: float, budget: int = 64) -> int:
        """Send up to ``budget`` packets allowed by window, pause and rate; returns packets sent."""
        if self.state is not QpState.RTS:
            return 0
        if self.rp is not None:
            self.rp.advance(now)
        rate, line = self._pace_rate(), self._line_rate()
        if rate is not None:
            elapsed = now - self._refill
            gained, cap = self._tokens + elapsed * rate, 16.0 * (self.cfg.mtu + 100)
            lost = max(0.0, gained - cap)
            if line is not None:
                line_gained, line_cap = self._line_tokens + elapsed * line, self.cfg.line_burst_frames * (self.cfg.mtu + 100)
                if gained >= line_gained:   # the line held it back, not DCQCN: its overflow is time lost
                    lost = max(lost, line_gained - line_cap)   # (below the line rate it overflows by design)
                self._line_tokens = min(line_gained, line_cap)
            if self.pace_due is not None:   # it stopped for tokens: time past the deadline is lateness
                self.stats.pacing_late_max_s = max(self.stats.pacing_late_max_s, now - self.pace_due)
                self.stats.pacing_lost_bytes += int(lost)
            self._tokens = min(gained, cap)
            self._refill = now
        self.pace_due = None
        sent = self._pump_responses(now, budget) if self._rsp_q else 0
        if now < self._pause_until:
            return sent
        limit = min(self._next, self._acked + self.cfg.window)
        while sent < budget and self._send < limit:
            wr = self._wr_for(self._send)
            if wr.kind in _RD_KINDS and not self._may_send_rd(wr):
                break
            parts, size = self._build(wr, self._send)
            if not self._tokens_for(size, now):
                break
            if not self._emit(parts, True, size, wr.dest):
                break
            self._spend(size, now)
            if self._send < self._max_sent:
                self.stats.retransmissions += 1
            nxt = self._chunk_end(wr, self._send) + 1 if wr.kind == "read" else self._send + 1
            self._max_sent = max(self._max_sent, nxt)
            self.stats.tx_bytes += size
            self._send = nxt
            sent += 1
            if self.unreliable and nxt > wr.last:
                self._complete_to(nxt, now)  # UC/UD: done once on the wire
        if sent and self._timer is None and not self.unreliable and self._acked < self._max_sent:
            self._timer = now + self.cfg.timeout
        return sent

    def _may_send_rd(self, wr: _SendWr) -> bool:
        """READs/atomics: at most ``max_rd_atomic`` WRs outstanding, and the responses a READ request asks
        for fit the window unless nothing else is in flight (a burst longer than the path's queue would
        only be lost: the responder, like rxe's, does not pace READ responses)."""
        if self._send == wr.first:
            busy = sum(1 for w in self._wrs if w.kind in _RD_KINDS and w.first < self._send)
            if busy >= self.cfg.max_rd_atomic:
                return False
        return self._chunk_end(wr, self._send) < self._acked + self.cfg.window or self._send == self._acked

    def _chunk_end(self, wr: _SendWr, u: int) -> int:
        """Last PSN of the READ request that starts at (or is retried from) ``u``: chunks keep their
        boundaries from the WR's first PSN, so a retry never reaches into PSNs the responder has not
        reserved (it re-executes a duplicate READ without moving its expected PSN)."""
        c = self._read_chunk
        return min(wr.last, wr.first + ((u - wr.first) // c + 1) * c - 1)

    def _wr_for(self, u: int) -> _SendWr:
        wrs = self._wrs
        i = self._hint if self._hint < len(wrs) and wrs[self._hint].first <= u else 0
        while wrs[i].last < u:
            i += 1
        self._hint = i
        return wrs[i]

    def _build(self, wr: _SendWr, u: int) -> tuple[list, int]:
        """The datagram parts of unwrapped PSN ``u`` (header, payload view[, pad]) and their length."""
        if wr.kind == "read":  # one request per chunk of at most half a window of responses
            off = (u - wr.first) * self.cfg.mtu
            n = min(wr.length - off, (self._chunk_end(wr, u) - u + 1) * self.cfg.mtu)
            hdr = wire.bth(READ_REQUEST, self.remote.qpn, u, ackreq=True) + \
                wire.RETH.pack(wr.remote_addr + off, wr.rkey, n)
            return [hdr], len(hdr)
        if wr.kind in ("cas", "faa"):
            hdr = wire.bth(CMP_SWAP if wr.kind == "cas" else FETCH_ADD, self.remote.qpn, u, ackreq=True) + \
                wire.ATOMIC_ETH.pack(wr.remote_addr, wr.rkey, wr.swap_add, wr.compare)
            return [hdr], len(hdr)
        if wr.dest is not None:  # UD SEND ONLY: BTH, DETH, [ImmDt], payload
            pad = (-wr.length) % 4
            hdr = wire.bth(UD_SEND_ONLY if wr.imm is None else UD_SEND_ONLY_IMM, wr.dest.qpn, u,
                           padcount=pad, solicited=False) + wire.DETH.pack(wr.dest.qkey, self.qpn)
            if wr.imm is not None:
                hdr += wire.U32.pack(wr.imm)
            parts = [hdr, wr.mr.view[wr.offset:wr.offset + wr.length]]
            if pad:
                parts.append(PAD[pad])
            return parts, len(hdr) + wr.length + pad
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
        if self.uc:
            opcode += 0x20
        pad = (-n) % 4 if last else 0
        ackreq = not self.uc and (last or (u + 1) % self._ackreq_every == 0)
        hdr = wire.bth(opcode, self.remote.qpn, u, ackreq=ackreq, padcount=pad)
        if first and write:
            hdr += wire.RETH.pack(wr.remote_addr, wr.rkey, wr.length)
        if last and wr.imm is not None:
            hdr += wire.U32.pack(wr.imm)
        start = wr.offset + off
        parts = [hdr, wr.mr.view[start:start + n]]
        if pad:
            parts.append(PAD[pad])
        return parts, len(hdr) + n + pad

    def _emit(self, parts: list, ect: bool, length: int | None = None, dest: UdDest | None = None,
              tos: int | None = None) -> bool:
        """Send one datagram (ICRC appended): ECT(0) data or Not-ECT control at the QP's DSCP, or ``tos``."""
        path = self.path if dest is None else self.ud_path(dest.ip, dest.port)
        parts.append(path.tx_icrc(parts, length))
        if self.cfg.loss and self._rng.random() < self.cfg.loss:
            self.stats.dropped_tx += 1
            self.stats.tx_packets += 1
            return True
        if tos is None:
            tos = self._tos[ect]
        ok = self._out(parts, tos) if dest is None else self._out(parts, tos, (dest.ip, dest.port))
        if not ok:
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
        pad = (flags >> 4) & 3
        if opcode == CNP:
            self.stats.cnps_rx += 1
            if self.rp is not None:
                before = self._pace_rate()
                self.rp.on_cnp(now)
                # A NIC's pacer applies a cut to its next frame. Allowance saved up from late wake-ups at the
                # old rate (up to 16 frames) is no right to send at it after the cut: kept, it sent that many
                # frames at the old rate past every CNP (30 km, 10G: the DCI's queue peaked ~25 frames above
                # the discrete simulation's, and each extra frame marked is another CNP). At most one
                # frame's worth is kept, at the new rate.
                self._tokens = min(self._tokens, self.cfg.mtu + 100.0) * (self._pace_rate() / before)
            return
        if self.state is not QpState.RTS:
            return
        if self.transport == "ud":
            if opcode in (UD_SEND_ONLY, UD_SEND_ONLY_IMM):
                self._on_ud(buf, n, opcode, pad)
            else:
                self.stats.malformed_rx += 1
            return
        if opcode == ACK and not self.uc:
            if n < 20:
                self.stats.malformed_rx += 1
                return
            self._on_ack(psn, buf[12], now)
            return
        if opcode in (READ_FIRST, READ_MIDDLE, READ_LAST, READ_ONLY) and not self.uc:
            self._on_read_response(buf, n, opcode, pad, psn, now)
            return
        if opcode == ATOMIC_ACK and not self.uc:
            self._on_atomic_ack(buf, n, psn, now)
            return
        base = opcode - 0x20 if self.uc else opcode
        if (0 <= base < 0x20 and base in REQUESTS and (not self.uc or base in WRITES or base in SENDS)):
            if ce:
                self.stats.ce_rx += 1
                if self.np is not None and self.np.on_ce(self.remote.qpn, now):
                    self._send_cnp()
            self._on_request_packet(buf, n, base, pad, bool(psnw >> 31), psn)
            while self._stash and self._epsn in self._stash:  # reordered packets now in sequence
                self._on_request_packet(*self._stash.pop(self._epsn))
            return
        self.stats.malformed_rx += 1  # an opcode of another transport, or one this endpoint lacks

    def _unwrap(self, psn: int) -> int:
        return self._acked + wire.psn_diff(psn, self._acked & wire.PSN_MASK)

    def _first_rd_before(self, u: int) -> _SendWr | None:
        """The oldest READ/atomic WR that starts before unwrapped PSN ``u`` (responses still owed)."""
        for w in self._wrs:
            if w.first >= u:
                return None
            if w.kind in _RD_KINDS:
                return w
        return None

    def _on_ack(self, psn: int, syndrome: int, now: float) -> None:
        u = self._unwrap(psn)
        kind = (syndrome >> 5) & 3
        if kind == 0:
            self.stats.acks_rx += 1
            if u + 1 > self._max_sent or u < self._acked - 1:
                return  # ACK for something never sent, or stale
            self._complete_to(self._clip(u + 1), now)
        elif kind == 3:
            self.stats.naks_rx += 1
            if not self._acked <= u <= self._max_sent:
                return  # a NAK for a PSN outside the unacknowledged range is stale (or forged)
            code = syndrome & 0x1F
            if code == 0:
                self._complete_to(self._clip(u), now)
                if self._send > self._acked:
                    self._send = self._acked
                    self._hint = 0
                return
            status = {1: WcStatus.REM_INV_REQ_ERR, 2: WcStatus.REM_ACCESS_ERR}.get(code, WcStatus.REM_OP_ERR)
            self._complete_to(self._clip(u), now)
            self._to_error(status, f"peer answered PSN {psn} with {status.value}")
        elif kind == 1:
            self.stats.naks_rx += 1
            if not self._acked <= u <= self._max_sent:
                return
            self._complete_to(self._clip(u), now)
            self._rnr_retries += 1
            if self._rnr_retries > self.cfg.rnr_retry_limit:
                self._to_error(WcStatus.RNR_RETRY_EXC_ERR, "peer had no receive buffer posted")
                return
            self._send = self._acked
            self._hint = 0
            self._pause_until = now + self.cfg.rnr_delay

    def _clip(self, u: int) -> int:
        """An ACK never completes a READ or atomic: only their responses do."""
        rd = self._first_rd_before(u)
        return min(u, rd.first) if rd is not None else u

    def _response_in_sequence(self, u: int, wr: _SendWr, now: float) -> bool:
        """A response for PSN ``u`` of ``wr`` may be taken: it is the next one, or it starts ``wr`` and
        implicitly acknowledges the SENDs/WRITEs before it (IBA §9.7.5.1.2)."""
        if u == self._acked:
            return True
        if u == wr.first and self._first_rd_before(u) is None:
            self._complete_to(u, now)
            return True
        self.stats.out_of_order_rx += 1
        if self._rd_retry != self._acked:  # re-request from the first response that is missing
            self._rd_retry = self._acked
            self.stats.read_retries += 1
            self._send = self._acked
            self._hint = 0
        return False

    def _on_read_response(self, buf, n: int, opcode: int, pad: int, psn: int, now: float) -> None:
        u = self._unwrap(psn)
        if not self._acked <= u < self._max_sent:
            self.stats.duplicates_rx += 1
            return
        wr = self._wr_for(u)
        if wr.kind != "read":
            self.stats.malformed_rx += 1
            return
        if not self._response_in_sequence(u, wr, now):
            return
        start = 12 if opcode == READ_MIDDLE else 16
        off = (u - wr.first) * self.cfg.mtu
        length = n - 4 - pad - start
        if length != min(self.cfg.mtu, wr.length - off) or length < 0:
            self.stats.malformed_rx += 1
            return
        if opcode != READ_MIDDLE and (buf[12] >> 5) & 3:
            self.stats.malformed_rx += 1
            return
        if length:
            at = wr.offset + off
            wr.mr.view[at:at + length] = buf[start:start + length]
        self._rd_retry = None
        self._complete_to(u + 1, now)

    def _on_atomic_ack(self, buf, n: int, psn: int, now: float) -> None:
        u = self._unwrap(psn)
        if n < 12 + 4 + 8 + 4 or not self._acked <= u < self._max_sent:
            self.stats.duplicates_rx += 1
            return
        wr = self._wr_for(u)
        if wr.kind not in ("cas", "faa") or not self._response_in_sequence(u, wr, now):
            return
        U64_HOST.pack_into(wr.mr.view, wr.offset, U64.unpack_from(buf, 16)[0])
        self._rd_retry = None
        self._complete_to(u + 1, now)

    def _on_ud(self, buf, n: int, opcode: int, pad: int) -> None:
        start = 12 + 8 + (4 if opcode == UD_SEND_ONLY_IMM else 0)
        if n < start + 4:
            self.stats.malformed_rx += 1
            return
        qkey, srcqp = wire.DETH.unpack_from(buf, 12)
        imm = wire.U32.unpack_from(buf, 20)[0] if opcode == UD_SEND_ONLY_IMM else None
        length = n - 4 - pad - start
        if qkey != self.qkey or length < 0 or not self._recvs:
            self.stats.ud_dropped_rx += 1
            return
        rwr = self._recvs.popleft()
        if GRH_LEN + length > rwr.length:
            self.stats.ud_dropped_rx += 1
            self.recv_cq.push(WorkCompletion(rwr.wr_id, WcStatus.LOC_LEN_ERR, WcOpcode.RECV, self.qpn))
            return
        at = rwr.offset
        rwr.mr.view[at:at + GRH_LEN] = bytes(GRH_LEN)
        rwr.mr.view[at + GRH_LEN:at + GRH_LEN + length] = buf[start:start + length]
        self.recv_cq.push(WorkCompletion(rwr.wr_id, WcStatus.SUCCESS, WcOpcode.RECV, self.qpn,
                                         GRH_LEN + length, imm, srcqp & 0xFFFFFF))

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
                self.cq.push(WorkCompletion(wr.wr_id, WcStatus.SUCCESS, _WC_OP[wr.kind], self.qpn, wr.length))
        if self._send < u:
            self._send = u
        self._timer = now + self.cfg.timeout if self._acked < self._max_sent and not self.unreliable else None

    # -- errors -----------------------------------------------------------------------------------
    def _to_error(self, status: WcStatus, why: str) -> None:
        """QP -> ERROR: the head WR completes with ``status``, everything else is flushed."""
        self.state = QpState.ERROR
        self.error = f"{why} ({status.value})"
        first = True
        while self._wrs:
            wr = self._wrs.popleft()
            self.cq.push(WorkCompletion(wr.wr_id, status if first else WcStatus.WR_FLUSH_ERR, _WC_OP[wr.kind],
                                        self.qpn))
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
