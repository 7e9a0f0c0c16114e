"""One direction of an emulated link as a pure, clock-driven model (the delay line's brain).

The caller hands each arriving frame and the current time to :meth:`Direction.admit`; the model
decides its fate and, if it survives, the time it leaves the far end of the wire::

    arrive(now) --> tail drop at limit --> RED/ECN on the instantaneous queue
                --> serialise: depart = max(now, busy_until) + len*8/rate     (virtual egress queue)
                --> wire loss (random / Gilbert-Elliott)
                --> release = depart + delay + U(-jitter, +jitter), never before the previous release

Time is an argument (FAUCET's ``now``), so unit tests drive it without sockets or sleeps. Frames are
never reordered (a wire keeps order), so releases are monotonic and a FIFO suffices downstream.
"""

from __future__ import annotations

import random
from collections import deque

from testbed.links import ecn
from testbed.links.model import BYTES, LinkParams

#: Per-frame overhead on the wire not seen by AF_PACKET: preamble+SFD (8), FCS (4), inter-frame gap (12).
#: Left at 0 so that the configured rate is the rate of frames as captured (Mininet-HiFi's 1514*8/rate).
WIRE_OVERHEAD_BYTES = 0

COUNTERS = ("rx_packets", "rx_bytes", "forwarded_packets", "forwarded_bytes", "drop_loss", "drop_red", "drop_tail",
            "ce_marked", "ecn_marks_already_ce")


def release_time(depart: float, delay: float, jitter: float, rng: random.Random, last_release: float) -> float:
    """When a frame whose serialisation ends at ``depart`` leaves the far end of the wire: ``depart + delay``
    plus uniform jitter (one draw from ``rng``, only when ``jitter`` is set, as the compiled core draws: its
    Mersenne Twister gives the same sequence), never before ``depart`` (jitter does not make light faster)
    and never before the previous frame's release (a wire keeps order). The one rule for every link model:
    this line and PFC's."""
    release = depart + delay
    if jitter:
        release += rng.uniform(-jitter, jitter)
        if release < depart:
            release = depart
    return release if release >= last_release else last_release

class LossDraw:
    """One direction's loss decisions (Bernoulli, or Gilbert-Elliott with its good/bad state), drawn from the
    direction's rng in the order linkcore.c draws them; shared by the plain and the PFC queue models."""

    def __init__(self, loss, rng: random.Random):
        self.loss, self.rng, self.bad = loss, rng, False

    def __call__(self) -> bool:
        loss, rnd = self.loss, self.rng.random
        if loss.kind == "random":
            return rnd() < loss.rate
        if self.bad:
            if rnd() < loss.r:
                self.bad = False
        elif rnd() < loss.p:
            self.bad = True
        return rnd() < (loss.loss_bad if self.bad else loss.loss_good)


class Direction:
    """Egress queue + wire of one direction.

    Args:
        params: the *emulated* (already scaled) link parameters.
        rng: random source (seeded in tests).
        sample_interval: minimum seconds between queue-depth samples.
        max_samples: cap on the stored time series (oldest kept; a counter says how many were skipped).
    """

    def __init__(self, params: LinkParams, rng: random.Random | None = None, sample_interval: float = 1e-3,
                 max_samples: int = 200_000):
        self.params = params
        self.rng = rng or random.Random()
        self.rate_Bps = params.rate_bps / 8.0 if params.rate_bps else None
        self.delay = params.one_way_delay_s
        self.jitter = params.jitter_s
        self.limit, unit = params.queue_limit
        self.limit_in_bytes = unit == BYTES
        self.red = params.red
        self.red_in_bytes = self.red is not None and self.red.unit == BYTES
        self.loss = params.loss if params.loss is not None and params.loss.active else None
        self._lost = LossDraw(self.loss, self.rng)
        self.busy_until = 0.0
        self.last_release = 0.0
        self._queue: deque = deque()  # (depart_time, length) of frames not yet fully serialised
        self.queue_bytes = 0
        self.counters = dict.fromkeys(COUNTERS, 0)
        self.max_queue_packets = 0
        self.max_queue_bytes = 0
        self.samples: list = []
        self.samples_skipped = 0
        self._sample_interval = sample_interval
        self._max_samples = max_samples
        self._next_sample = 0.0

    def set_loss(self, loss) -> None:
        """Change the loss model from the next frame on (a :class:`LossModel` or None), counters kept:
        the runtime impairment of :mod:`testbed.links.control`."""
        self.loss = loss if loss is not None and loss.active else None
        self._lost = LossDraw(self.loss, self.rng)

    # -- queue state ---------------------------------------------------------------------------------
    def _drain(self, now: float) -> None:
        q = self._queue
        while q and q[0][0] <= now:
            self.queue_bytes -= q.popleft()[1]

    def depth(self, now: float) -> tuple[int, int]:
        """(packets, bytes) waiting or being serialised at ``now``."""
        self._drain(now)
        return len(self._queue), self.queue_bytes

    # -- the decision ----------------------------------------------------------------------------------
    def admit(self, now: float, frame: bytes) -> tuple[float | None, bytes]:
        """Decide the fate of ``frame`` arriving at ``now``.

        Returns:
            (release_time, frame_out): ``release_time`` is None when the frame is dropped; ``frame_out`` is
            the frame to send (CE set when RED marked it).
        """
        c = self.counters
        length = len(frame)
        c["rx_packets"] += 1
        c["rx_bytes"] += length
        if self.rate_Bps is None:
            depart = now
        else:
            self._drain(now)
            qlen = len(self._queue)
            qbytes = self.queue_bytes
            if (qbytes + length > self.limit) if self.limit_in_bytes else (qlen + 1 > self.limit):
                c["drop_tail"] += 1
                return None, frame
            if self.red is not None:
                p = self.red.probability(qbytes if self.red_in_bytes else qlen)
                if p > 0 and (p >= 1.0 or self.rng.random() < p):
                    code = ecn.ecn_codepoint(frame) if self.red.ecn else ecn.NOT_ECT
                    if code in (ecn.ECT0, ecn.ECT1):
                        frame = ecn.set_ce(frame)
                        c["ce_marked"] += 1
                    elif code == ecn.CE:
                        c["ecn_marks_already_ce"] += 1
                    else:
                        c["drop_red"] += 1
                        return None, frame
            start = self.busy_until if self.busy_until > now else now
            depart = start + (length + WIRE_OVERHEAD_BYTES) / self.rate_Bps
            self.busy_until = depart
            self._queue.append((depart, length))
            self.queue_bytes = qbytes + length
            if qlen + 1 > self.max_queue_packets:
                self.max_queue_packets = qlen + 1
            if self.queue_bytes > self.max_queue_bytes:
                self.max_queue_bytes = self.queue_bytes
            if now >= self._next_sample:
                self._sample(now, qlen + 1, self.queue_bytes)
        if self.loss is not None and self._lost():
            c["drop_loss"] += 1
            return None, frame
        release = self.last_release = release_time(depart, self.delay, self.jitter, self.rng, self.last_release)
        c["forwarded_packets"] += 1
        c["forwarded_bytes"] += length
        return release, frame

    def _sample(self, now: float, packets: int, nbytes: int) -> None:
        self._next_sample = now + self._sample_interval
        if len(self.samples) < self._max_samples:
            self.samples.append((round(now, 6), packets, nbytes))
        else:
            self.samples_skipped += 1

    def snapshot(self, with_series: bool = False) -> dict:
        """Counters (and optionally the queue-depth series ``[t, packets, bytes]``) as a JSON-able dict."""
        doc = dict(self.counters)
        doc.update(loss_rate_now=self.loss.mean if self.loss is not None else 0.0, max_queue_packets=self.max_queue_packets, max_queue_bytes=self.max_queue_bytes,
                   samples_skipped=self.samples_skipped)
        if with_series:
            doc["queue_series"] = [list(s) for s in self.samples]
        return doc


#: Fate of a frame, by the counter its admission moved (the C core's trace mode prints the same words).
_FATES = (("drop_tail", "tail"), ("drop_red", "red"), ("drop_loss", "loss"), ("ce_marked", "ce"),
          ("ecn_marks_already_ce", "already_ce"))


def run_trace(params: LinkParams, seed: int, trace) -> tuple[list[tuple], dict]:
    """Feed ``trace`` ([(arrival_s, frame)]) to one :class:`Direction` seeded with ``seed``.

    The reference side of the equivalence test with the compiled core
    (:func:`testbed.links.core.run_trace` returns the same shape).

    Returns:
        ([(fate, release_s | None, marked frame | None)], counters incl. max_queue_packets/bytes).
    """
    d = Direction(params, random.Random(seed))
    rows = []
    for t, frame in trace:
        before = dict(d.counters)
        release, out = d.admit(t, bytes(frame))
        fate = next((name for key, name in _FATES if d.counters[key] != before[key]), "fwd")
        rows.append((fate, release, out if fate == "ce" else None))
    counters = dict(d.counters)
    counters.update(max_queue_packets=d.max_queue_packets, max_queue_bytes=d.max_queue_bytes,
                    samples=len(d.samples))
    return rows, counters
