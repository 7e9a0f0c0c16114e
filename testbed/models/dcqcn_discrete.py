"""A packet-level discrete-event simulation of DCQCN at one RED/ECN bottleneck: the second reference.

The fluid model (:mod:`testbed.models.dcqcn_fluid`) is a mean field: it replaces each random mark, each
CNP and each cut by its expected rate. Near the p = 1 cliff above Kmax the mean of the discrete process
need not follow the mean-field equations, so a replica trajectory may disagree with the fluid model and
still be right. This simulation is the discrete process itself, written from the papers (Zhu et al.,
SIGCOMM'15 "Congestion Control for Large-Scale RDMA Deployments", §3; the Mellanox reaction point as the
HPCC ns-3 simulator documents it), not from :mod:`testbed.rdma.dcqcn`, with which it shares no code::

    sender i (RP): paced at R_C --> FIFO, C, RED on the --> one way --> receiver (NP): CNP if marked and
                                    instantaneous depth                 none sent for this flow within tau
         ^                          at enqueue, tail drop                   |
         '---------------------------------- one way + CNP serialisation ---'

Reaction point (per flow), rates capped at the line rate and floored at ``min_rate_bps``:

* CNP: R_T = R_C, R_C = R_C (1 - alpha / 2); the increase timer restarts, the timer and byte-counter
  expiry counts T and BC and the byte count go to 0; the alpha window notes that a CNP arrived.
* alpha timer, every tau': alpha = (1 - g) alpha + g if a CNP arrived in the window, else (1 - g) alpha
  (the fluid model's dalpha/dt = g / tau' (P[mark within tau'] - alpha) is this update's mean).
* increase events: the timer (every T s) and the byte counter (every B bytes sent) each count their
  expiries; with the counts after the event: max(T, BC) <= F fast recovery (R_T unchanged), else
  min(T, BC) <= F additive (R_T += R_AI), else hyper (R_T += (min(T, BC) - F) R_HAI); then
  R_C = (R_T + R_C) / 2.

Parameters are a :class:`~testbed.models.dcqcn_fluid.FluidParams`, so both references model exactly the
same experiment (``testbed.validate.rows.fluid_params_for`` builds it). Its feedback delay tau* (two
propagation delays, the data frame's and the CNP's serialisation) is used as the fluid model uses it with
``queue_delay=True``: a mark taken at enqueue reaches the sender its queueing delay plus tau* later. Only
that sum matters: the NP's spacing rule sees the same gaps at the receiver as at the sender.
``starts_s``, ``buffer_bytes``, ``min_rate_bps`` and ``initial_alpha`` are honoured; ``marking`` (open
loop) is not. The FIFO is exact (departures are computed, not sampled), so the event count is the packets
sent plus the timers: a 12 s emulated run of the validation experiment (2 flows) takes ~0.15 s of CPU.

**Finite flows** (``flow_bytes`` with ``messages``, or a mix ``message_sizes``): as in the fluid model, each
flow sends its messages one at a time (``write-lat``); after a message's last packet it pauses until that
packet has left the FIFO plus ``ack_delay_s``, its timers still running, and a CNP still cuts it. A message
is whole packets (its bytes rounded up). Why here too: a short flow's goodput is set by the depth of its
first cuts, and one CNP cuts R_C by alpha / 2 (half, while alpha is still near its initial 1), which the
mean field spreads out (docs/validation.md, "The 100 km mix, read from the timelines").
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from dataclasses import dataclass

import numpy as np

from testbed.models.dcqcn_fluid import FluidParams, Trajectory

_SEND, _CNP, _ALPHA, _TIMER, _RESUME = 0, 1, 2, 3, 4


@dataclass
class DiscreteTrajectory(Trajectory):
    """A :class:`Trajectory` of one seeded run, plus what only a discrete process has.

    Attributes:
        cnp_times: per flow, the times its CNPs reached the sender (s).
        departed: cumulative packets the bottleneck had forwarded at each sample (exact utilisation).
        delivered: per flow, cumulative packets forwarded at each sample (its goodput).
        marks: packets marked; ``seed``: the RNG seed.
    """

    cnp_times: tuple = ()
    departed: np.ndarray | None = None
    delivered: np.ndarray | None = None
    marks: int = 0
    seed: int = 0

    def utilisation(self, t0: float, t1: float) -> float:
        """Share of the capacity the bottleneck forwarded between two samples (counted, not inferred)."""
        idx = np.nonzero(self.window(t0, t1))[0]
        if idx.size < 2:
            return math.nan
        span = self.t[idx[-1]] - self.t[idx[0]]
        cap = self.params.capacity_bps / (self.params.packet_bytes * 8)
        return float((self.departed[idx[-1]] - self.departed[idx[0]]) / (span * cap))


def simulate(params: FluidParams, duration_s: float, seed: int = 0, sample_every_s: float | None = None,
             rate_hai_bps: float | None = None) -> DiscreteTrajectory:
    """Run the discrete process for ``duration_s``.

    Args:
        params: the bottleneck and its flows (the fluid model's parameters; see the module docstring).
        seed: the RNG seed of the RED marks (the only randomness; one draw per packet enqueued on the ramp,
            as the replica's delay line draws): equal seeds give equal runs.
        sample_every_s: spacing of the returned samples (default a quarter of the CNP interval, as the
            validation rows sample the fluid model).
        rate_hai_bps: the hyper-increase step (default 2.5 R_AI, the paper's 100 / 40 Mb/s; a congested
            flow never gets there, see :func:`testbed.models.dcqcn_fluid.hyper_free`).
    """
    p_ = params
    n = p_.flows
    bits = p_.packet_bytes * 8
    service = bits / p_.capacity_bps                       # one frame's serialisation at the bottleneck
    back = p_.feedback_delay_s - service                    # departure -> CNP at the sender (>= 0)
    line, floor = p_.line_rate_bps, p_.min_rate_bps or 0.0
    rai = p_.rate_ai_bps
    rhai = 2.5 * rai if rate_hai_bps is None else rate_hai_bps
    kmin, kmax = p_.kmin_bytes / p_.packet_bytes, p_.kmax_bytes / p_.packet_bytes
    limit = math.inf if p_.buffer_bytes is None else p_.buffer_bytes / p_.packet_bytes
    g, F, B = p_.g, p_.fast_recovery_rounds, p_.byte_counter_bytes
    tau, tau_a, T = p_.cnp_interval_s, p_.alpha_timer_s, p_.rate_increase_timer_s
    rng = random.Random(seed)

    rc, rt = [0.0] * n, [0.0] * n
    alpha = [p_.initial_alpha] * n
    cnp_seen = [False] * n                 # a CNP arrived in the current alpha window
    t_count, bc_count, sent_bytes = [0] * n, [0] * n, [0.0] * n
    timer_gen = [0] * n                    # a restarted increase timer invalidates the pending one
    last_send = [0.0] * n
    send_gen = [0] * n                     # a rate change reschedules the next send
    last_cnp = [-math.inf] * n             # the NP's last CNP per flow (on the sender's clock)
    cnps: list[list[float]] = [[] for _ in range(n)]
    active = [False] * n
    plan = _plan(p_)                       # per flow its messages in packets (None: sends for ever)
    left = [0] * n                         # packets of the current message still to send
    sending = [True] * n                   # False while a message waits for its acknowledgement, or done
    finished = [False] * n
    msg_start = [0.0] * n
    fcts: list[list[float]] = [[] for _ in range(n)]
    finish = [math.nan] * n
    fifo: deque = deque()                  # (departure time, flow) of the packets in the system
    done = [0] * n
    last_dep = 0.0
    departed = 0
    marks = 0
    dropped = 0

    every = sample_every_s or tau / 4
    ns = int(duration_s / every) + 1
    out_t = np.arange(ns) * every
    out_r, out_rt, out_a = np.zeros((ns, n)), np.zeros((ns, n)), np.zeros((ns, n))
    out_q, out_p, out_dep, out_del = np.zeros(ns), np.zeros(ns), np.zeros(ns), np.zeros((ns, n))
    k = 0

    ev: list = []
    seq = 0

    def push(t, kind, i, gen=0):
        nonlocal seq
        seq += 1
        heapq.heappush(ev, (t, seq, kind, i, gen))

    def mark_p(q):
        return 0.0 if q <= kmin else (p_.pmax * (q - kmin) / (kmax - kmin) if q <= kmax else 1.0)

    def reschedule(i, now):
        """The next send of flow i at its current rate, counted from its last send (never in the past)."""
        send_gen[i] += 1
        if sending[i]:
            push(max(now, last_send[i] + bits / rc[i]), _SEND, i, send_gen[i])

    def next_message(i, now):
        msg_start[i] = now
        left[i] = plan[i][len(fcts[i])]

    def increase(i, now, by_bytes):
        if by_bytes:
            bc_count[i] += 1
        else:
            t_count[i] += 1
        lo, hi = min(t_count[i], bc_count[i]), max(t_count[i], bc_count[i])
        if hi > F:
            rt[i] = min(line, rt[i] + (rai if lo <= F else (lo - F) * rhai))
        old = rc[i]
        rc[i] = min(line, (rt[i] + rc[i]) / 2)
        if rc[i] != old:
            reschedule(i, now)

    for i, s in enumerate(p_.starts_s):
        push(s, _SEND, i, -1)              # gen -1: the flow's start

    while ev:
        now, _, kind, i, gen = heapq.heappop(ev)
        if now > duration_s:
            break
        while k < ns and out_t[k] < now:   # samples before this event see the state before it
            tk = out_t[k]
            while fifo and fifo[0][0] <= tk:
                done[fifo.popleft()[1]] += 1
                departed += 1
            out_r[k] = [r if s else 0.0 for r, s in zip(rc, sending, strict=True)]   # 0 while paused or done
            out_rt[k], out_a[k], out_del[k] = rt, alpha, done
            out_q[k], out_p[k], out_dep[k] = len(fifo), mark_p(len(fifo)), departed
            k += 1
        if finished[i] and kind != _SEND:  # a finished flow's timers stop
            continue
        if kind == _SEND:
            if gen == -1:                  # start: line rate, both timers running
                active[i] = True
                rc[i] = rt[i] = line
                last_send[i] = now - bits / line
                push(now + tau_a, _ALPHA, i)
                push(now + T, _TIMER, i, timer_gen[i])
                if plan is not None:
                    next_message(i, now)
            elif gen != send_gen[i]:
                continue
            while fifo and fifo[0][0] <= now:
                done[fifo.popleft()[1]] += 1
                departed += 1
            q = len(fifo)
            if q >= limit:
                dropped += 1
            else:
                dep = max(now, last_dep) + service
                last_dep = dep
                fifo.append((dep, i))
                pm = mark_p(q)
                if pm >= 1.0 or (pm > 0.0 and rng.random() < pm):   # a draw only on the ramp
                    marks += 1
                    at = dep + back
                    if at - last_cnp[i] >= tau:   # the NP: at most one CNP per flow per interval
                        last_cnp[i] = at
                        push(at, _CNP, i)
            last_send[i] = now
            sent_bytes[i] += p_.packet_bytes
            if sent_bytes[i] >= B:
                sent_bytes[i] -= B
                increase(i, now, True)
            if plan is not None:
                left[i] -= 1
                if not left[i]:            # the last packet: acknowledged when it has left plus the ack delay
                    acked = (fifo[-1][0] if q < limit else now) + p_.ack_delay_s
                    fcts[i].append(acked - msg_start[i])
                    sending[i] = False
                    send_gen[i] += 1       # no send until the acknowledgement
                    if len(fcts[i]) < len(plan[i]):
                        push(acked, _RESUME, i)
                    else:
                        finished[i], finish[i] = True, acked
                        rc[i] = rt[i] = 0.0
                    continue
            send_gen[i] += 1
            push(now + bits / rc[i], _SEND, i, send_gen[i])
        elif kind == _RESUME:
            sending[i] = True
            next_message(i, now)
            last_send[i] = now - bits / rc[i]
            reschedule(i, now)
        elif kind == _CNP:
            cnps[i].append(now)
            rt[i] = rc[i]
            rc[i] = max(floor, rc[i] * (1 - alpha[i] / 2))
            cnp_seen[i] = True
            t_count[i] = bc_count[i] = 0
            sent_bytes[i] = 0.0
            timer_gen[i] += 1
            push(now + T, _TIMER, i, timer_gen[i])
            reschedule(i, now)
        elif kind == _ALPHA:
            alpha[i] = (1 - g) * alpha[i] + (g if cnp_seen[i] else 0.0)
            cnp_seen[i] = False
            push(now + tau_a, _ALPHA, i)
        elif kind == _TIMER and gen == timer_gen[i]:
            push(now + T, _TIMER, i, gen)
            increase(i, now, False)
    while k < ns:                          # the tail after the last event
        tk = out_t[k]
        while fifo and fifo[0][0] <= tk:
            done[fifo.popleft()[1]] += 1
            departed += 1
        out_r[k] = [r if s else 0.0 for r, s in zip(rc, sending, strict=True)]
        out_rt[k], out_a[k], out_del[k] = rt, alpha, done
        out_q[k], out_p[k], out_dep[k] = len(fifo), mark_p(len(fifo)), departed
        k += 1
    return DiscreteTrajectory(out_t, out_r, out_rt, out_a, out_q * p_.packet_bytes, out_p,
                              dropped * p_.packet_bytes, p_, finish_s=tuple(finish) if plan is not None else (),
                              message_fct_s=tuple(tuple(f) for f in fcts) if plan is not None else (),
                              cnp_times=tuple(tuple(c) for c in cnps),
                              departed=out_dep, delivered=out_del, marks=marks, seed=seed)


def _plan(params: FluidParams) -> list[list[int]] | None:
    """Per flow, its messages in whole packets, in the order it sends them (None: flows send for ever)."""
    if params.flow_bytes is None:
        return None
    if params.message_sizes is not None:
        sizes = params.message_sizes
    else:
        sizes = [[b / params.messages] * params.messages for b in params.flow_bytes]
    return [[max(1, math.ceil(b / params.packet_bytes - 1e-9)) for b in flow] for flow in sizes]


def mean_trajectory(runs: list[DiscreteTrajectory]) -> DiscreteTrajectory:
    """The seed-average of equal-length runs: the discrete process's mean, comparable with the fluid mean."""
    first = runs[0]
    avg = {name: np.mean([getattr(r, name) for r in runs], axis=0)
           for name in ("rates", "targets", "alpha", "queue", "p", "departed", "delivered")}
    return DiscreteTrajectory(first.t, avg["rates"], avg["targets"], avg["alpha"], avg["queue"], avg["p"],
                              float(np.mean([r.dropped_bytes for r in runs])), first.params,
                              departed=avg["departed"], delivered=avg["delivered"], marks=int(np.mean([r.marks for r in runs])), seed=-1)
