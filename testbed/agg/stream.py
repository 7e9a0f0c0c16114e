"""One worker's side of an allreduce through the switch: windowed, retransmitting (pure; takes ``now``).

The tensor is cut into chunks of ELEMS elements. Packets are numbered by *position* ``p``; position ``p``
uses slot ``p % window`` and copy ``(p // window) % 2`` (:func:`~testbed.agg.protocol.slot_of`), and the
next position of a slot is sent only when the current one's result arrives — so at most ``window``
packets are in flight and a slot copy is never reused too early (SwitchML's self-clocking).

    exact (int32):   position p carries chunk p                          (N positions)
    float32:         position p carries chunk p - W (zeros for p < W), and in its exponent field the
                     worker's own exponent for chunk p; the result of p brings back the max over the
                     workers, which is the scale every worker uses for chunk p at position p + W.
                                                                         (N + W positions)

A packet not answered within the retransmission timeout is sent again (same payload); the switch's
bitmap makes the retransmission harmless and its shadow copy answers if the slot already completed.
The timeout adapts as TCP's does (RFC 6298: SRTT + 4 RTTVAR from samples of packets sent once, Karn's
rule), never below ``timeout``: queueing at the links makes the round trip grow with the window.

    stream = WorkerStream(job=1, worker=0, n_workers=8, tensor=x, window=64, timeout=0.05)
    out = stream.start(now)                     # payloads to send
    out = stream.on_packet(payload, now)        # a result arrived
    out = stream.on_timer(now)                  # retransmissions due
    stream.done, stream.result()
"""

from __future__ import annotations

import numpy as np

from testbed.agg import quant
from testbed.agg.protocol import ELEMS, AggHeader, chunks_for, decode, encode, slot_of
from testbed.errors import SpecError

#: retransmission timeout ceiling after back-off, seconds
MAX_TIMEOUT_S = 2.0


class WorkerStream:
    def __init__(self, *, job: int, worker: int, n_workers: int, tensor: np.ndarray, window: int,
                 timeout: float, base_slot: int = 0):
        if tensor.dtype not in (np.int32, np.float32):
            raise SpecError("tensor.dtype", f"must be int32 (exact) or float32 (quantized), got {tensor.dtype}")
        if window < 1:
            raise SpecError("window", f"must be at least 1, got {window!r}")
        if timeout <= 0:
            raise SpecError("timeout", f"must be positive, got {timeout!r}")
        self.job, self.worker, self.n_workers = job, worker, n_workers
        self.window, self.timeout, self.base_slot = window, timeout, base_slot
        self.exact = tensor.dtype == np.int32
        self.size = tensor.size
        self.n_chunks = chunks_for(self.size)
        padded = np.zeros(self.n_chunks * ELEMS, dtype=tensor.dtype)
        padded[: self.size] = tensor.ravel()
        self.chunks = padded.reshape(self.n_chunks, ELEMS)
        self.offset = 0 if self.exact else window
        self.positions = self.n_chunks + self.offset
        self.out = np.zeros((self.n_chunks, ELEMS), dtype=tensor.dtype)
        self._exp_local = None if self.exact else [quant.chunk_exponent(c) for c in self.chunks]
        self._exp_global: dict[int, int] = {}       # chunk -> agreed exponent
        self._inflight: dict[int, tuple[int, bytes, float]] = {}   # slot -> (position, payload, sent)
        self._next = 0                              # next position not yet sent
        self._received = 0
        self.retransmits = 0
        self.sent = 0
        self.min_timeout = timeout
        self._srtt: float | None = None
        self._rttvar = 0.0
        self._resent: set[int] = set()             # positions sent more than once (no RTT sample)
        self.rtt_samples: list[float] = []

    # -- building packets -------------------------------------------------------------------------

    def _payload(self, p: int) -> bytes:
        slot, shadow = slot_of(p, self.window, self.base_slot)
        chunk = p - self.offset
        if self.exact:
            values, exponent = self.chunks[chunk], 0
        else:
            exponent = self._exp_local[p] if p < self.n_chunks else 0
            if chunk >= 0:
                values = quant.quantize(self.chunks[chunk], self._exp_global[chunk], self.n_workers)
            else:
                values = np.zeros(ELEMS, dtype=np.int32)
        return encode(AggHeader(job=self.job, worker=self.worker, slot=slot, shadow=shadow, seq=p,
                                exponent=exponent), values)

    def _send(self, p: int, now: float) -> bytes:
        payload = self._payload(p)
        self._inflight[slot_of(p, self.window, self.base_slot)[0]] = (p, payload, now)
        self.sent += 1
        return payload

    # -- events -----------------------------------------------------------------------------------

    def start(self, now: float) -> list[bytes]:
        out = []
        while self._next < min(self.window, self.positions):
            out.append(self._send(self._next, now))
            self._next += 1
        return out

    def on_packet(self, payload: bytes, now: float) -> list[bytes]:
        """Handle a result; returns the next position of that slot (if any). Stale results are ignored."""
        header, values = decode(payload)
        if not header.is_result or header.job != self.job:
            return []
        entry = self._inflight.get(header.slot)
        if entry is None or entry[0] != header.seq:
            return []                                # duplicate (multicast + shadow) or stale
        p = header.seq
        sent = entry[2]
        del self._inflight[header.slot]
        if p in self._resent:
            self._resent.discard(p)
        else:
            self._sample(now - sent)
        self._received += 1
        chunk = p - self.offset
        if chunk >= 0:
            if self.exact:
                self.out[chunk] = values
            else:
                self.out[chunk] = quant.dequantize(values, self._exp_global[chunk], self.n_workers)
        if not self.exact and p < self.n_chunks:
            self._exp_global[p] = header.exponent
        nxt = p + self.window
        if nxt < self.positions:
            return [self._send(nxt, now)]
        return []

    def on_timer(self, now: float) -> list[bytes]:
        """Payloads whose result is overdue (sent again, timer restarted)."""
        out = []
        for slot, (p, payload, sent) in list(self._inflight.items()):
            if now - sent >= self.timeout:
                self._inflight[slot] = (p, payload, now)
                self._resent.add(p)
                self.retransmits += 1
                self.sent += 1
                out.append(payload)
        if out:   # back off (RFC 6298 5.5): without it, a timeout below the RTT never gets a clean sample
            self.timeout = min(2 * self.timeout, MAX_TIMEOUT_S)
        return out

    def _sample(self, rtt: float) -> None:
        self.rtt_samples.append(rtt)
        if self._srtt is None:
            self._srtt, self._rttvar = rtt, rtt / 2
        else:
            self._rttvar = 0.75 * self._rttvar + 0.25 * abs(self._srtt - rtt)
            self._srtt = 0.875 * self._srtt + 0.125 * rtt
        self.timeout = max(self.min_timeout, self._srtt + 4 * self._rttvar)

    def next_deadline(self) -> float | None:
        if not self._inflight:
            return None
        return min(sent for _, _, sent in self._inflight.values()) + self.timeout

    @property
    def done(self) -> bool:
        return self._received == self.positions

    def result(self) -> np.ndarray:
        if not self.done:
            raise RuntimeError(f"worker {self.worker}: {self.positions - self._received} positions missing")
        return self.out.ravel()[: self.size].copy()
