"""The PFC state machine of one port, pure and clock-driven: ingress accounting and egress pausing.

A lossless hop has two halves; the link node (or a NIC) runs both, one per direction::

        upstream device                                      this port
     +------------------+   data (priority p)   +-----------------------------------------+
     | PfcEgress        | --------------------> | PfcIngress: bytes[p] += len on arrive   |
     |  gate(now, p):   |                       |   >= xoff  -> PAUSE(p, quanta) upstream |
     |  send/hold/drop  | <-------------------- |   <= xon   -> XON (pause time 0)        |
     +------------------+   PAUSE / XON         |   > xoff + headroom -> drop pfc_headroom |
                                                |   refresh PAUSE before it expires        |
                                                +-----------------------------------------+

Time is an argument (``now``, seconds of the *emulated* clock), FAUCET style, like
:class:`testbed.links.queue.Direction`, so traces drive it deterministically. Pause times are counted in
quanta of 512 bit times at the *real* line rate and dilated by the replica's
:class:`~testbed.dilation.Dilation`: a quantum at 100G is 5.12 ns real, 5.12 us emulated at scale 1000.

Every method returns what must go on the wire (:class:`PauseFrame` values) instead of sending it, so the
same core serves the Python model, the discrete-event check (:mod:`testbed.pfc.sim`) and, mirrored in C,
the compiled link core.
"""

from __future__ import annotations

from dataclasses import dataclass

from testbed.dilation import Dilation
from testbed.pfc.config import MAX_QUANTA, PRIORITIES, PfcConfig
from testbed.pfc.headroom import QUANTUM_BITS

#: Drop reasons (counter ``drop_<reason>``).
DROP_HEADROOM = "pfc_headroom"
DROP_WATCHDOG = "pfc_watchdog"

#: Egress verdicts of :meth:`PfcEgress.gate`.
SEND, HOLD, DROP = "send", "hold", "drop"


#: A PAUSE is repeated when this fraction of its pause time has passed and the port is still above xoff
#: (:class:`PfcIngress`'s default; the plan gives fabric.p4 the same, as ``refresh_us``).
REFRESH = 0.5


def quanta_seconds(quanta: int, rate_bps: float, dilation: Dilation | None = None) -> float:
    """Emulated duration of ``quanta`` pause quanta at the real ``rate_bps``: quanta * 512 / rate, dilated."""
    real = quanta * QUANTUM_BITS / rate_bps
    return dilation.time(real) if dilation is not None else real


@dataclass(frozen=True)
class PauseFrame:
    """What a PFC frame says: a pause time (quanta) for each enabled priority; 0 = XON (resume).

    Attributes:
        times: ``((priority, quanta), ...)`` sorted by priority; only enabled classes appear.
    """

    times: tuple[tuple[int, int], ...]

    def __post_init__(self):
        seen = set()
        for p, q in self.times:
            if not 0 <= p < PRIORITIES or p in seen:
                raise ValueError(f"bad or repeated priority {p} in a PFC frame")
            if not 0 <= q <= MAX_QUANTA:
                raise ValueError(f"pause time {q} of priority {p} is not 0..65535")
            seen.add(p)

    @classmethod
    def of(cls, times: dict) -> "PauseFrame":
        """``PauseFrame.of({3: 0xFFFF, 6: 0})``."""
        return cls(tuple(sorted(times.items())))

    @property
    def class_enable(self) -> int:
        """The 16-bit class-enable vector (bit p = priority p)."""
        vector = 0
        for p, _ in self.times:
            vector |= 1 << p
        return vector

    @property
    def quanta(self) -> tuple[int, ...]:
        """The eight pause-time fields as on the wire (0 where a class is not enabled)."""
        q = [0] * PRIORITIES
        for p, t in self.times:
            q[p] = t
        return tuple(q)

    @classmethod
    def from_wire(cls, class_enable: int, quanta) -> "PauseFrame":
        """From the wire fields; only classes whose enable bit is set count (802.1Qbb: others are ignored)."""
        return cls(tuple((p, int(quanta[p])) for p in range(PRIORITIES) if class_enable >> p & 1))


class PfcIngress:
    """Per-priority ingress accounting of one port: decides when to send PAUSE and XON upstream.

    The caller reports every frame of a priority when it enters this port's buffer (:meth:`arrive`) and when
    it leaves it (:meth:`depart`), and calls :meth:`tick` at :meth:`next_deadline` to refresh pauses.
    Non-lossless priorities are admitted without accounting (their queue's own tail drop applies).

    Args:
        config: the fabric's PFC block.
        rate_bps: the *real* rate of the link towards the upstream sender (pause quanta are its bit times).
        headroom_bytes: bytes above xoff this port absorbs (``auto`` resolved per port by the caller).
        dilation: the replica's time dilation.
        refresh: a PAUSE is repeated when this fraction of its pause time has passed and the queue is still
            above XON (so the sender never resumes on expiry while the queue is full).
    """

    def __init__(self, config: PfcConfig, rate_bps: float, headroom_bytes: float, dilation: Dilation | None = None,
                 refresh: float = REFRESH):
        if not rate_bps > 0:
            raise ValueError(f"rate must be positive, got {rate_bps!r}")
        if not 0 < refresh < 1:
            raise ValueError(f"refresh must be a fraction of the pause time (0..1), got {refresh!r}")
        self.config = config
        self.rate_bps = rate_bps
        self.headroom_bytes = float(headroom_bytes)
        self.dilation = dilation or Dilation(1.0)
        self.pause_s = quanta_seconds(config.quanta, rate_bps, self.dilation)
        self.refresh_s = refresh * self.pause_s
        self.limit = config.xoff_bytes + self.headroom_bytes
        self.bytes = [0] * PRIORITIES
        self.max_bytes = [0] * PRIORITIES
        self.xoff = [False] * PRIORITIES          # a PAUSE is outstanding for the priority
        self.next_refresh: list = [None] * PRIORITIES
        self.counters = {p: {"pause_sent": 0, "xon_sent": 0, "drop_pfc_headroom": 0, "drop_pfc_headroom_bytes": 0}
                         for p in config.priorities}

    def _pause(self, now: float, priorities) -> PauseFrame:
        for p in priorities:
            self.xoff[p] = True
            self.next_refresh[p] = now + self.refresh_s
            self.counters[p]["pause_sent"] += 1
        return PauseFrame.of({p: self.config.quanta for p in priorities})

    def arrive(self, now: float, priority: int, length: int) -> tuple[str | None, list]:
        """A frame of ``priority`` wants to enter the buffer at ``now``.

        Returns:
            (drop_reason, frames): ``drop_reason`` is None when admitted, :data:`DROP_HEADROOM` when the
            headroom overflowed (the frame is not buffered); ``frames`` are PAUSE frames to send upstream.
        """
        if not self.config.lossless(priority):
            return None, []
        b = self.bytes[priority]
        if b + length > self.limit:
            c = self.counters[priority]
            c["drop_pfc_headroom"] += 1
            c["drop_pfc_headroom_bytes"] += length
            return DROP_HEADROOM, []
        b += length
        self.bytes[priority] = b
        if b > self.max_bytes[priority]:
            self.max_bytes[priority] = b
        if b >= self.config.xoff_bytes and not self.xoff[priority]:
            return None, [self._pause(now, (priority,))]
        return None, []

    def depart(self, now: float, priority: int, length: int) -> list:
        """A frame of ``priority`` (admitted earlier) left the buffer; returns XON frames to send upstream."""
        if not self.config.lossless(priority):
            return []
        b = self.bytes[priority] - length
        if b < 0:
            raise ValueError(f"priority {priority}: more bytes departed than arrived")
        self.bytes[priority] = b
        if self.xoff[priority] and b <= self.config.xon_bytes:
            self.xoff[priority] = False
            self.next_refresh[priority] = None
            self.counters[priority]["xon_sent"] += 1
            return [PauseFrame.of({priority: 0})]
        return []

    def next_deadline(self) -> float | None:
        """When :meth:`tick` must run next (the earliest refresh), or None."""
        due = [t for t in self.next_refresh if t is not None]
        return min(due) if due else None

    def tick(self, now: float) -> list:
        """Refresh every outstanding PAUSE whose refresh time has come, in one frame."""
        due = [p for p in range(PRIORITIES) if self.next_refresh[p] is not None and self.next_refresh[p] <= now]
        return [self._pause(now, due)] if due else []

    def snapshot(self) -> dict:
        """Counters and occupancy per lossless priority (JSON-able)."""
        return {str(p): dict(c, bytes=self.bytes[p], max_bytes=self.max_bytes[p], xoff=self.xoff[p])
                for p, c in self.counters.items()}


class PfcEgress:
    """The sending side of one port: honours PAUSE/XON from the peer, per priority.

    The caller hands each received PFC frame to :meth:`receive` (the frame is consumed, never forwarded)
    and asks :meth:`gate` before it *starts* transmitting a frame of a priority: a frame already on the wire
    is finished, as a MAC does. A held priority may resume at :meth:`resume_at` (expiry) or earlier (XON).
    Other priorities are unaffected. PAUSE for a priority that is not lossless here is counted and ignored.

    Args:
        config: the fabric's PFC block.
        rate_bps: the *real* line rate of this port (a quantum is 512 of its bit times).
        dilation: the replica's time dilation.
    """

    def __init__(self, config: PfcConfig, rate_bps: float, dilation: Dilation | None = None):
        if not rate_bps > 0:
            raise ValueError(f"rate must be positive, got {rate_bps!r}")
        self.config = config
        self.rate_bps = rate_bps
        self.dilation = dilation or Dilation(1.0)
        self.paused_until = [0.0] * PRIORITIES
        self.paused_since: list = [None] * PRIORITIES   # start of the current continuous pause
        self.last_pause = [None] * PRIORITIES           # last non-zero pause time received
        self.override: list = [None] * PRIORITIES       # watchdog action in force: None, "drop", "ignore"
        self._paused_total = [0.0] * PRIORITIES         # closed pause intervals
        self.counters = {p: {"pause_received": 0, "xon_received": 0, "drop_pfc_watchdog": 0}
                         for p in config.priorities}
        self.ignored = [0] * PRIORITIES                 # PAUSE for priorities that are not lossless here

    def _close(self, p: int, at: float) -> None:
        if self.paused_since[p] is not None:
            self._paused_total[p] += max(0.0, at - self.paused_since[p])
            self.paused_since[p] = None

    def _expire(self, now: float, p: int) -> None:
        if self.paused_since[p] is not None and self.paused_until[p] <= now:
            self._close(p, self.paused_until[p])

    def receive(self, now: float, frame: PauseFrame) -> None:
        """A PFC frame from the peer arrived at ``now``: each enabled lossless class pauses or resumes."""
        for p, quanta in frame.times:
            if not self.config.lossless(p):
                self.ignored[p] += 1
                continue
            self._expire(now, p)
            if quanta == 0:
                self.counters[p]["xon_received"] += 1
                if self.paused_since[p] is not None:
                    self._close(p, now)
                self.paused_until[p] = now
                continue
            self.counters[p]["pause_received"] += 1
            self.last_pause[p] = now
            if self.paused_since[p] is None:
                self.paused_since[p] = now
            self.paused_until[p] = now + quanta_seconds(quanta, self.rate_bps, self.dilation)

    def paused(self, now: float, priority: int) -> bool:
        """The peer's PAUSE for ``priority`` is in force at ``now`` (regardless of a watchdog override)."""
        return now < self.paused_until[priority]

    def gate(self, now: float, priority: int) -> str:
        """May a frame of ``priority`` start at ``now``? :data:`SEND`, :data:`HOLD` or :data:`DROP`.

        DROP only while the watchdog declared the queue in storm with action ``drop``; with ``ignore`` the
        pause is disregarded.
        """
        if not self.config.lossless(priority):
            return SEND
        if self.override[priority] == "drop":
            self.counters[priority]["drop_pfc_watchdog"] += 1
            return DROP
        if self.override[priority] == "ignore":
            return SEND
        return HOLD if self.paused(now, priority) else SEND

    def resume_at(self, priority: int) -> float:
        """When a held priority may send again unless an XON comes first (emulated seconds)."""
        return self.paused_until[priority]

    def paused_time(self, now: float, priority: int) -> float:
        """Total emulated seconds ``priority`` has been paused up to ``now``."""
        total = self._paused_total[priority]
        since = self.paused_since[priority]
        if since is not None:
            total += max(0.0, min(now, self.paused_until[priority]) - since)
        return total

    def snapshot(self, now: float) -> dict:
        """Counters and paused time (emulated and real seconds) per lossless priority (JSON-able)."""
        return {str(p): dict(c, paused_s=self.paused_time(now, p),
                             paused_real_s=self.dilation.real_time(self.paused_time(now, p)),
                             override=self.override[p])
                for p, c in self.counters.items()}
