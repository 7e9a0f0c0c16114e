"""A discrete-event *model check* of PFC: N senders incast into one switch port, with and without PFC.

This chains the pure pieces (:class:`~testbed.pfc.state.PfcEgress` at each sender,
:class:`~testbed.pfc.state.PfcIngress` per switch ingress port, :func:`~testbed.pfc.headroom.headroom`)
over modelled wires. It is not the emulated result the lossless-Ethernet issue asks for (that runs real
frames through the link node); it shows the model is self-consistent: with headroom from physics an N:1
incast loses nothing, without PFC the same buffer memory overflows, and an undersized headroom drops::

    sender i --(rate R, delay d)--> [ingress i: PfcIngress] --+
       ^  PfcEgress gate                                      +--> shared egress FIFO --(R)--> receiver
       +------ PAUSE / XON (84 B + d, then response time) ----+

Senders transmit back to back at line rate; a PAUSE takes effect ``response`` after it arrives, and the
frame on the wire is finished (the gate is asked only before a frame starts). Time runs in emulated
seconds: rates are divided and delays multiplied by the dilation, pause quanta are real bit times dilated,
so the outcome (losses, pauses, bytes of headroom used) does not depend on the scale.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field

from testbed.dilation import Dilation
from testbed.pfc.config import FRAME_OVERHEAD, PfcConfig
from testbed.pfc.headroom import PAUSE_WIRE_BYTES, QUANTUM_BITS, headroom, response_quanta
from testbed.pfc.state import DROP, HOLD, PfcEgress, PfcIngress
from testbed.units import FIBRE_DELAY_S_PER_M

PRIORITY = 3


@dataclass
class IncastResult:
    """What one model run did (bytes are wire bytes of data frames)."""

    sent: int = 0
    delivered: int = 0
    drops: dict = field(default_factory=lambda: {"tail": 0, "pfc_headroom": 0, "pfc_watchdog": 0})
    pause_sent: int = 0
    xon_sent: int = 0
    headroom_bytes: float = 0.0
    max_headroom_used: float = 0.0    #: largest ingress occupancy above xoff, bytes
    max_queue_bytes: float = 0.0
    duration_s: float = 0.0           #: emulated seconds until the last frame was delivered
    paused_s: float = 0.0             #: summed over senders, emulated seconds

    @property
    def lost(self) -> int:
        return sum(self.drops.values())


def incast(senders: int = 4, rate_bps: float = 100e9, distance_m: float = 1000.0, mtu: int = 1500,
           frames_per_sender: int = 2000, pfc: PfcConfig | None = None, headroom_bytes: float | None = None,
           buffer_bytes: float | None = None, dilation: Dilation | None = None) -> IncastResult:
    """Run an N:1 incast of ``frames_per_sender`` maximum frames from each sender.

    Args:
        senders: N.
        rate_bps: real line rate of every link.
        distance_m: fibre length of the sender links (5 us/km one way).
        mtu: frames are ``mtu + 38`` bytes on the wire.
        pfc: PFC on priority 3 (every frame is on it) when given; None = no PFC, tail drop.
        headroom_bytes: per ingress port; None = :func:`~testbed.pfc.headroom.headroom` of the link.
        buffer_bytes: the switch's buffer for the incast; None = N * (xoff + headroom), the memory PFC
            reserves, so the comparison with and without PFC is at equal memory.
        dilation: the replica's dilation (the outcome must not depend on it).
    """
    d = dilation or Dilation(1.0)
    frame = mtu + FRAME_OVERHEAD
    config = pfc or PfcConfig()
    one_way = distance_m * FIBRE_DELAY_S_PER_M
    hr = headroom_bytes if headroom_bytes is not None else headroom(rate_bps, one_way, mtu).total
    buffer = buffer_bytes if buffer_bytes is not None else senders * (config.xoff_bytes + hr)
    rate = d.rate(rate_bps) / 8                      # emulated bytes/s
    delay = d.time(one_way)
    ser = frame / rate
    response = d.time(response_quanta(rate_bps) * QUANTUM_BITS / rate_bps)
    pause_flight = PAUSE_WIRE_BYTES / rate + delay

    res = IncastResult(headroom_bytes=hr)
    egress = [PfcEgress(config, rate_bps, d) for _ in range(senders)]
    ingress = [PfcIngress(config, rate_bps, hr, d) for _ in range(senders)]
    remaining = [frames_per_sender] * senders
    holding = [False] * senders
    token = [0] * senders        # the live "send" event of each sender (a wake-up by XON supersedes it)
    fifo: deque = deque()        # (ingress port) of frames in the switch buffer, in order
    queue_bytes = 0
    egress_busy = False
    events: list = []
    seq = 0

    def push(t, kind, *args):
        nonlocal seq
        seq += 1
        heapq.heappush(events, (t, seq, kind, args))

    def send_pfc(t, i, frames):
        for f in frames:
            res.pause_sent += sum(1 for _, q in f.times if q)
            res.xon_sent += sum(1 for _, q in f.times if not q)
            push(t + pause_flight + response, "pfc_apply", i, f)
        if frames and any(q for f in frames for _, q in f.times):   # a PAUSE went out: its refresh is due
            push(max(ingress[i].next_deadline(), t), "tick", i)

    def schedule_send(t, i):
        token[i] += 1
        push(t, "send", i, token[i])

    def start_egress(t):
        nonlocal egress_busy
        if fifo and not egress_busy:
            egress_busy = True
            push(t + ser, "depart")

    for i in range(senders):
        schedule_send(0.0, i)
    now = 0.0
    while events:
        now, _, kind, args = heapq.heappop(events)
        if kind == "send":
            i, tok = args
            if tok != token[i]:
                continue
            holding[i] = False
            if not remaining[i]:
                continue
            verdict = egress[i].gate(now, PRIORITY) if pfc is not None else "send"
            if verdict == HOLD:
                holding[i] = True
                schedule_send(egress[i].resume_at(PRIORITY), i)
                continue
            remaining[i] -= 1
            if verdict == DROP:
                res.drops["pfc_watchdog"] += 1
                schedule_send(now, i)
                continue
            res.sent += frame
            push(now + ser + delay, "arrive", i)
            schedule_send(now + ser, i)
        elif kind == "arrive":
            (i,) = args
            if pfc is not None:
                reason, frames = ingress[i].arrive(now, PRIORITY, frame)
                send_pfc(now, i, frames)
                if reason is not None:
                    res.drops[reason] += 1
                    continue
                used = ingress[i].bytes[PRIORITY] - config.xoff_bytes
                res.max_headroom_used = max(res.max_headroom_used, used)
            elif queue_bytes + frame > buffer:
                res.drops["tail"] += 1
                continue
            fifo.append(i)
            queue_bytes += frame
            res.max_queue_bytes = max(res.max_queue_bytes, queue_bytes)
            start_egress(now)
        elif kind == "depart":
            i = fifo.popleft()
            queue_bytes -= frame
            egress_busy = False
            res.delivered += frame
            res.duration_s = now
            if pfc is not None:
                send_pfc(now, i, ingress[i].depart(now, PRIORITY, frame))
            start_egress(now)
        elif kind == "tick":
            (i,) = args
            send_pfc(now, i, ingress[i].tick(now))
        elif kind == "pfc_apply":
            i, f = args
            egress[i].receive(now, f)
            if holding[i] and not egress[i].paused(now, PRIORITY):
                schedule_send(now, i)
    if pfc is not None:
        res.paused_s = sum(e.paused_time(now, PRIORITY) for e in egress)
    return res
