"""A fluid model of senders sharing one ECN-marking bottleneck, to exercise DCQCN without a network.

Each step of ``dt`` seconds::

    senders (ReactionPoint.rate) --> queue (drains at capacity) --> RED marking on queue depth
                                                                   |  p(q) = 0 below kmin, pmax at kmax, 1 above
    CNP after one RTT  <-- NotificationPoint (1 per QP per interval) <--'

Marks are drawn per packet from a seeded RNG so runs are repeatable. It is the "test marker" for
fairness checks until a real switch marks (links/ or BMv2); it is not a packet-level simulator.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from testbed.rdma.dcqcn import DcqcnParams, NotificationPoint, ReactionPoint


@dataclass(frozen=True)
class Bottleneck:
    capacity: float          # bit/s
    kmin: float = 5e3        # bytes
    kmax: float = 200e3      # bytes
    pmax: float = 0.01
    mtu: int = 1024
    rtt: float = 10e-6

    def mark_probability(self, queue_bytes: float) -> float:
        if queue_bytes <= self.kmin:
            return 0.0
        if queue_bytes >= self.kmax:
            return 1.0
        return self.pmax * (queue_bytes - self.kmin) / (self.kmax - self.kmin)


def simulate(params: DcqcnParams, link: Bottleneck, starts: list[float], duration: float,
             dt: float = 1e-6, seed: int = 1, sample_every: float = 1e-4) -> dict:
    """Run senders starting at ``starts`` (seconds) for ``duration``; returns samples and averages.

    Returns:
        ``{"t": [...], "rates": [[...] per sender], "queue": [...], "cnps": [...]}``.
    """
    rng = random.Random(seed)
    rps = [None] * len(starts)
    np_ = NotificationPoint(params)
    pending: list[tuple[float, int]] = []   # (arrival time, sender) CNPs in flight
    queue = 0.0
    credit = [0.0] * len(starts)
    out = {"t": [], "rates": [[] for _ in starts], "queue": [], "cnps": [0] * len(starts)}
    steps = int(duration / dt)
    next_sample = 0.0
    for step in range(steps):
        now = step * dt
        for i, start in enumerate(starts):
            if rps[i] is None and now >= start:
                rps[i] = ReactionPoint(params, now)
        while pending and pending[0][0] <= now:
            _, i = pending.pop(0)
            rps[i].on_cnp(now)
            out["cnps"][i] += 1
        for i, rp in enumerate(rps):
            if rp is None:
                continue
            rp.advance(now)
            credit[i] += rp.rate * dt / 8
            while credit[i] >= link.mtu:
                credit[i] -= link.mtu
                queue += link.mtu
                rp.on_sent(link.mtu, now)
                if rng.random() < link.mark_probability(queue) and np_.on_ce(i, now):
                    pending.append((now + link.rtt, i))
        queue = max(0.0, queue - link.capacity * dt / 8)
        if now >= next_sample:
            out["t"].append(now)
            out["queue"].append(queue)
            for i, rp in enumerate(rps):
                out["rates"][i].append(rp.rate if rp else 0.0)
            next_sample += sample_every
    return out
