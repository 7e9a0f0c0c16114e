"""The DCQCN fluid model of Zhu, Ghobadi, Misra and Padhye ("ECN or Delay", CoNEXT'16, section 3), pure numpy.

An independent reference for the replica's DCQCN senders: it is written from the paper's equations, not
from :mod:`testbed.rdma.dcqcn`, and it shares no code with it. N flows meet at one RED/ECN bottleneck::

    flow i: R_C(i) --+                               p(q) = 0 (q <= Kmin)
    flow j: R_C(j) --+--> queue q --> C              p(q) = pmax (q - Kmin) / (Kmax - Kmin)  (Kmin < q <= Kmax)
                     |                               p(q) = 1 (q > Kmax)
                     '<------ p(t - tau*), R_C(t - tau*): the marks the sender learns of, tau* later

With rates in packets per second, tau the CNP interval, tau' the alpha timer, T the rate-increase timer,
B the byte counter in packets, F the fast-recovery rounds, and the delayed values p = p(t - tau*),
r = R_C(t - tau*) (paper eqs. 1-5)::

    dq/dt    = sum_i R_C(i) - C                                              (q >= 0)
    a        = 1 - (1 - p)^(tau r)          probability a CNP interval sees a mark: rate of cuts a / tau
    dalpha/dt = g / tau' * ((1 - (1 - p)^(tau' r)) - alpha)
    dR_T/dt  = -(R_T - R_C) a / tau
               + R_AI r (1 - p)^(F B) p / ((1 - p)^-B - 1)                   byte-counter additive increase
               + R_AI r (1 - p)^(F T r) p / ((1 - p)^-(T r) - 1)             timer additive increase
    dR_C/dt  = -R_C alpha a / (2 tau)
               + (R_T - R_C) / 2 * r p / ((1 - p)^-B - 1)                    byte-counter recovery
               + (R_T - R_C) / 2 * r p / ((1 - p)^-(T r) - 1)                timer recovery

``p / ((1 - p)^-x - 1)`` is the rate (per packet sent) of increase events of a counter that expires every
x unmarked packets; it tends to 1/x as p -> 0. Hyper-increase is not in the paper's model: the replica
reaches it only after F byte counters (5 x 10 MB) without a CNP, which a congested flow does not do, so the
comparison rows check that scope instead of extending the model (see :func:`hyper_free`).

Integration is the method of steps with a fixed explicit step ``dt`` (the delayed terms are read from the
stored history, so the DDE becomes an ODE per step). The feedback delay is ``tau*`` plus, with
``queue_delay=True``, the queueing delay q/C seen by the marked packets (the paper keeps it constant; the
replica's long queues at a slow bottleneck make the difference visible).

Besides the integrator, :func:`fixed_point` solves the model's equilibrium in closed form (one scalar
equation, bisection), which the tests use to check the integrator against the algebra.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from testbed.errors import SpecError


@dataclass(frozen=True)
class FluidParams:
    """One bottleneck and its DCQCN flows; rates in bit/s, times in s, sizes in bytes.

    Attributes:
        capacity_bps: bottleneck drain rate C.
        line_rate_bps: the senders' line rate (initial R_C = R_T, and the cap of both).
        packet_bytes: the size of one packet on the bottleneck (converts bytes <-> packets).
        kmin_bytes, kmax_bytes, pmax: the RED marking curve.
        feedback_delay_s: tau*, the delay from a mark at the queue to the sender's reaction.
        starts_s: start time of each flow (its number of entries is N).
        queue_delay: add q/C to tau* (see the module docstring).
        buffer_bytes: tail-drop limit of the queue (None: unlimited); drops are integrated.
        min_rate_bps: a floor under R_C, as NICs keep one (the paper's model has none).
        marking: open loop: a constant marking probability instead of p(q).
        flow_bytes: what each flow sends before it stops (None: every flow sends for ever, the paper's
            case). Not in the paper: finite flows let the model predict a transient (a short flow's
            completion time), not only the steady state (see :attr:`Trajectory.finish_s`).
        messages: with ``flow_bytes``, the flow sends it as this many equal messages, one at a time (as
            ``write-lat`` does): after a message's last byte it pauses until that byte has left the
            queue plus ``ack_delay_s`` (the acknowledgement's round trip), its DCQCN timers still running.
        ack_delay_s: see ``messages``.
        message_sizes: a flow-size mix: per flow, the sizes (bytes) of its messages in the order it sends
            them, one at a time as with ``messages``; ``flow_bytes`` must then be their sums (or None, filled
            in) and ``messages`` is ignored.
    """

    capacity_bps: float
    line_rate_bps: float
    packet_bytes: float = 1000.0
    kmin_bytes: float = 5e3
    kmax_bytes: float = 200e3
    pmax: float = 0.01
    feedback_delay_s: float = 85e-6
    starts_s: tuple = (0.0, 0.0)
    queue_delay: bool = False
    buffer_bytes: float | None = None
    g: float = 1 / 256
    cnp_interval_s: float = 50e-6
    alpha_timer_s: float = 55e-6
    rate_increase_timer_s: float = 55e-6
    byte_counter_bytes: float = 10e6
    fast_recovery_rounds: int = 5
    rate_ai_bps: float = 40e6
    initial_alpha: float = 1.0
    min_rate_bps: float | None = None               # the NIC's rate floor (not in the paper; 0 without)
    marking: float | None = field(default=None)   # open loop: constant marking probability instead of p(q)
    flow_bytes: tuple | None = None
    messages: int = 1
    ack_delay_s: float = 0.0
    message_sizes: tuple | None = None

    def __post_init__(self):
        if self.message_sizes is not None:
            sizes = tuple(tuple(float(b) for b in flow) for flow in self.message_sizes)
            if len(sizes) != len(self.starts_s) or any(not f or min(f) <= 0 for f in sizes):
                raise SpecError("fluid.message_sizes", "needs, per flow (as many as starts_s), one or more "
                                                       "positive message sizes")
            totals = tuple(sum(f) for f in sizes)
            if self.flow_bytes is not None and any(not math.isclose(a, b) for a, b in
                                                   zip(self.flow_bytes, totals, strict=False)):
                raise SpecError("fluid.flow_bytes", "must be the sums of message_sizes (or left out)")
            object.__setattr__(self, "message_sizes", sizes)
            object.__setattr__(self, "flow_bytes", totals)
        for name in ("capacity_bps", "line_rate_bps", "packet_bytes", "cnp_interval_s", "alpha_timer_s",
                     "rate_increase_timer_s", "byte_counter_bytes", "rate_ai_bps"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and value > 0 and math.isfinite(value)):
                raise SpecError(f"fluid.{name}", f"must be a positive number, got {value!r}")
        if not 0 <= self.kmin_bytes < self.kmax_bytes:
            raise SpecError("fluid.kmin_bytes", f"need 0 <= kmin < kmax, got {self.kmin_bytes}, {self.kmax_bytes}")
        if not 0 < self.pmax <= 1:
            raise SpecError("fluid.pmax", f"must be in (0, 1], got {self.pmax!r}")
        if self.feedback_delay_s < 0:
            raise SpecError("fluid.feedback_delay_s", f"must not be negative, got {self.feedback_delay_s!r}")
        if not self.starts_s or min(self.starts_s) < 0:
            raise SpecError("fluid.starts_s", "needs one non-negative start time per flow")
        if self.marking is not None and not 0 <= self.marking < 1:
            raise SpecError("fluid.marking", f"must be in [0, 1), got {self.marking!r}")
        if self.flow_bytes is not None and (len(self.flow_bytes) != len(self.starts_s)
                                            or min(self.flow_bytes) <= 0):
            raise SpecError("fluid.flow_bytes", "needs one positive size per flow (as many as starts_s)")
        if not (isinstance(self.messages, int) and self.messages >= 1):
            raise SpecError("fluid.messages", f"must be a whole number >= 1, got {self.messages!r}")
        if self.ack_delay_s < 0:
            raise SpecError("fluid.ack_delay_s", f"must not be negative, got {self.ack_delay_s!r}")

    @property
    def flows(self) -> int:
        return len(self.starts_s)


def mark_probability(q_bytes, kmin: float, kmax: float, pmax: float):
    """Paper eq. 1: RED on the queue (numpy-friendly)."""
    q = np.asarray(q_bytes, dtype=float)
    ramp = pmax * (q - kmin) / (kmax - kmin)
    return np.where(q <= kmin, 0.0, np.where(q <= kmax, ramp, 1.0))


def _pow1m(p: float, x):
    """(1 - p)^x for p in [0, 1], x >= 0 (0^0 = 1)."""
    if p >= 1.0:
        return np.where(np.asarray(x) > 0, 0.0, 1.0)
    return np.exp(np.asarray(x) * math.log1p(-p))


def _event_rate(p: float, x):
    """p / ((1 - p)^-x - 1): increase events per packet sent of a counter expiring every x unmarked packets."""
    x = np.maximum(np.asarray(x, dtype=float), 1e-12)
    if p <= 0.0:
        return 1.0 / x
    if p >= 1.0:
        return np.zeros_like(x)
    with np.errstate(over="ignore"):  # overflow to inf is the limit: no events
        return p / np.expm1(-x * math.log1p(-p))


@dataclass
class Trajectory:
    """Samples of one run: times (s), per-flow rates (bit/s), queue (bytes), alpha, marking probability."""

    t: np.ndarray
    rates: np.ndarray        # shape (samples, flows): what each flow sends (0 before it starts, paused or done)
    targets: np.ndarray
    alpha: np.ndarray
    queue: np.ndarray
    p: np.ndarray
    dropped_bytes: float
    params: FluidParams
    finish_s: tuple = ()     # with flow_bytes: when each flow's last message completed (nan: not yet)
    message_fct_s: tuple = ()  # with flow_bytes: per flow, each completed message's completion time

    def window(self, t0: float, t1: float) -> np.ndarray:
        return (self.t >= t0) & (self.t < t1)

    def mean_rates(self, t0: float, t1: float) -> np.ndarray:
        return self.rates[self.window(t0, t1)].mean(axis=0)

    def utilisation(self, t0: float, t1: float) -> float:
        """Share of the capacity the bottleneck forwarded (1 while a queue stands)."""
        w = self.window(t0, t1)
        served = np.where(self.queue[w] > 0, self.params.capacity_bps,
                          np.minimum(self.rates[w].sum(axis=1), self.params.capacity_bps))
        return float(served.mean() / self.params.capacity_bps)


def simulate(params: FluidParams, duration_s: float, dt_s: float | None = None,
             sample_every_s: float | None = None) -> Trajectory:
    """Integrate the model for ``duration_s``.

    Args:
        params: the bottleneck and its flows.
        duration_s: simulated time.
        dt_s: the fixed step (default: a tenth of the shortest DCQCN interval; delayed values are interpolated
            in the history, so tau* need not be a multiple of it).
        sample_every_s: spacing of the returned samples (default: every step up to 20,000 samples).
    """
    p_ = params
    dt = dt_s or min(p_.cnp_interval_s, p_.alpha_timer_s, p_.rate_increase_timer_s) / 10
    steps = int(round(duration_s / dt))
    n = p_.flows
    pkt_bits = p_.packet_bytes * 8
    cap = p_.capacity_bps / pkt_bits                       # packets/s
    line = p_.line_rate_bps / pkt_bits
    rai = p_.rate_ai_bps / pkt_bits
    B = p_.byte_counter_bytes / p_.packet_bytes
    T, tau, tau_a, F, g = p_.rate_increase_timer_s, p_.cnp_interval_s, p_.alpha_timer_s, p_.fast_recovery_rounds, p_.g
    kmin, kmax = p_.kmin_bytes / p_.packet_bytes, p_.kmax_bytes / p_.packet_bytes
    limit = math.inf if p_.buffer_bytes is None else p_.buffer_bytes / p_.packet_bytes
    starts = np.asarray(p_.starts_s, dtype=float)

    every = max(1, int(round((sample_every_s or dt * max(1, steps // 20000)) / dt)))
    ns = steps // every + 1
    out_t, out_r, out_rt = np.zeros(ns), np.zeros((ns, n)), np.zeros((ns, n))
    out_a, out_q, out_p = np.zeros((ns, n)), np.zeros(ns), np.zeros(ns)

    hist_p = [0.0] * (steps + 1)
    hist_r = [[0.0] * n for _ in range(steps + 1)]
    rc, rt = [0.0] * n, [0.0] * n
    alpha = [p_.initial_alpha] * n
    active = [False] * n
    if p_.flow_bytes is None:
        plan = [[math.inf] for _ in range(n)]   # one message without end
    elif p_.message_sizes is not None:
        plan = [[b / p_.packet_bytes for b in flow] for flow in p_.message_sizes]
    else:
        plan = [[b / p_.packet_bytes / p_.messages] * p_.messages for b in p_.flow_bytes]
    left = [flow[0] for flow in plan]    # packets of the current message still to send
    msgs_left = [len(flow) for flow in plan]
    resume = [0.0] * n                   # a paused flow sends again at this time (its message acknowledged)
    msg_start = [0.0] * n
    fcts: list[list[float]] = [[] for _ in range(n)]
    finish = [math.nan] * n
    q = 0.0
    dropped = 0.0
    hist_exit = [0.0] * (steps + 1)
    ptr = -1
    floor = (p_.min_rate_bps or 0.0) / pkt_bits
    ln, exp, expm1 = math.log1p, math.exp, math.expm1
    k = 0
    for step in range(steps + 1):
        now = step * dt
        for i in range(n):
            if not active[i] and msgs_left[i] and starts[i] <= now + 1e-12:   # 0 left: done
                rc[i] = rt[i] = line
                alpha[i] = p_.initial_alpha
                active[i], msg_start[i] = True, now
        sending = [active[i] and now >= resume[i] for i in range(n)]
        for i in range(n):
            if active[i] and sending[i] and left[i] <= 0.0:   # the previous message is acknowledged: the next
                left[i], msg_start[i] = plan[i][len(plan[i]) - msgs_left[i]], now
        if p_.marking is not None:
            p_now = p_.marking
        else:
            p_now = 0.0 if q <= kmin else (p_.pmax * (q - kmin) / (kmax - kmin) if q <= kmax else 1.0)
        hist_p[step] = p_now
        hist_r[step] = [rc[i] if sending[i] else 0.0 for i in range(n)]   # what the queue and its marks see
        hist_exit[step] = now + p_.feedback_delay_s + (q / cap if p_.queue_delay else 0.0)
        if step % every == 0 and k < ns:
            out_t[k], out_r[k], out_rt[k], out_a[k], out_q[k], out_p[k] = now, hist_r[step], rt, alpha, q, p_now
            k += 1
        if step == steps:
            break
        # the feedback acting now left the queue's tail at step s with exit(s) = s dt + tau* [+ q(s)/C] <= now
        while ptr + 1 <= step and hist_exit[ptr + 1] <= now:
            ptr += 1
        if ptr < 0:
            pd, rd = 0.0, [0.0] * n
        else:
            nxt = min(ptr + 1, step)
            span = hist_exit[nxt] - hist_exit[ptr]
            w = (now - hist_exit[ptr]) / span if span > 0 and nxt != ptr else 0.0
            w = min(1.0, max(0.0, w))
            pd = (1 - w) * hist_p[ptr] + w * hist_p[nxt]
            h0, h1 = hist_r[ptr], hist_r[nxt]
            rd = [(1 - w) * h0[i] + w * h1[i] for i in range(n)]
        # log(1 - p): -inf at p = 1 makes (1 - p)^x = 0 and the event rates 0, as the limits say
        lq = ln(-pd) if pd < 1.0 else -math.inf
        arriving = 0.0
        for i in range(n):
            if not active[i]:
                continue
            r = rd[i]
            if r <= 0.0:   # nothing sent tau* ago (a pause, the start): no marks, no bytes; the timer runs
                a = a_alpha = ev_b = 0.0
                ev_t, keep_b, keep_t = 1.0 / T, 1.0, 1.0
            elif pd > 0.0:
                a = -expm1(tau * r * lq)
                a_alpha = -expm1(tau_a * r * lq)
                xb, xt = -B * lq, -T * r * lq   # (1 - p)^-x - 1 overflows to inf: no events
                ev_b = r * pd / expm1(xb) if xb < 700 else 0.0
                ev_t = r * pd / expm1(xt) if xt < 700 else 0.0
                keep_b, keep_t = exp(F * B * lq), exp(F * T * r * lq)
            else:  # no marks: no cuts; every counter expiry is an increase
                a = a_alpha = 0.0
                ev_b, ev_t = r / B, 1.0 / T
                keep_b = keep_t = 1.0
            d_alpha = g / tau_a * (a_alpha - alpha[i])
            d_rt = -(rt[i] - rc[i]) * a / tau + rai * (keep_b * ev_b + keep_t * ev_t)
            d_rc = -rc[i] * alpha[i] * a / (2 * tau) + (rt[i] - rc[i]) / 2 * (ev_b + ev_t)
            alpha[i] = min(1.0, max(0.0, alpha[i] + d_alpha * dt))
            rt[i] = min(line, max(0.0, rt[i] + d_rt * dt))
            rc[i] = min(line, max(floor, rc[i] + d_rc * dt))
            if not sending[i]:
                continue
            arriving += rc[i]
            left[i] -= rc[i] * dt
            if left[i] <= 0.0:   # the message's last byte joins the queue now: acknowledged q/C + ack delay later
                resume[i] = now + dt + q / cap + p_.ack_delay_s
                fcts[i].append(resume[i] - msg_start[i])
                msgs_left[i] -= 1
                if msgs_left[i] == 0:
                    active[i], finish[i] = False, resume[i]
                    rc[i] = rt[i] = 0.0
        q = q + (arriving - cap) * dt
        if q < 0.0:
            q = 0.0
        elif q > limit:
            dropped += q - limit
            q = limit
    bits = pkt_bits
    return Trajectory(out_t[:k], out_r[:k] * bits, out_rt[:k] * bits, out_a[:k], out_q[:k] * p_.packet_bytes,
                      out_p[:k], dropped * p_.packet_bytes, params, tuple(finish), tuple(tuple(f) for f in fcts))


# -- the equilibrium in closed form -----------------------------------------------------------------------
def _equilibrium_residual(p: float, r: float, params: FluidParams) -> float:
    """Zero at the model's fixed point: rate r (packets/s) per flow under marking probability p.

    At dR_C/dt = 0:  R_T - R_C = alpha a / (tau (e_B + e_T)),  with alpha = 1 - (1 - p)^(tau' r)
    (dalpha/dt = 0), e_x = p / ((1 - p)^-x - 1). Substituted in dR_T/dt = 0:
        alpha a^2 / (tau^2 (e_B + e_T)) = R_AI ((1 - p)^(F B) e_B + (1 - p)^(F T r) e_T)
    (both sides per unit r: the decrease and increase balance).
    """
    pkt = params.packet_bytes * 8
    rai = params.rate_ai_bps / pkt
    B = params.byte_counter_bytes / params.packet_bytes
    T, tau, tau_a, F = (params.rate_increase_timer_s, params.cnp_interval_s, params.alpha_timer_s,
                        params.fast_recovery_rounds)
    a = 1 - float(_pow1m(p, tau * r))
    alpha = 1 - float(_pow1m(p, tau_a * r))
    e_b, e_t = float(_event_rate(p, B)), float(_event_rate(p, T * r))
    lhs = alpha * a * a / (tau * tau * (e_b + e_t)) / r
    rhs = rai * (float(_pow1m(p, F * B)) * e_b + float(_pow1m(p, F * T * r)) * e_t)
    return lhs - rhs


def fixed_point(params: FluidParams, rate_bps: float | None = None) -> dict:
    """The equilibrium marking probability, alpha, R_T - R_C and queue of N flows sharing C equally.

    Args:
        rate_bps: the per-flow rate (default C / N, the closed loop's fair share).

    Returns:
        ``{"p", "alpha", "queue_bytes", "rate_bps", "target_gap_bps"}``; ``queue_bytes`` is where p(q) = p on
        the RED ramp (None if p exceeds pmax: the fixed point is above Kmax).
    """
    r = (rate_bps or params.capacity_bps / params.flows) / (params.packet_bytes * 8)
    lo, hi = 1e-9, 0.999
    f_lo = _equilibrium_residual(lo, r, params)
    if f_lo > 0:
        raise ValueError("no fixed point: the increase never balances the decrease")
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        if _equilibrium_residual(mid, r, params) > 0:
            hi = mid
        else:
            lo = mid
    p = math.sqrt(lo * hi)
    tau, tau_a = params.cnp_interval_s, params.alpha_timer_s
    a = 1 - float(_pow1m(p, tau * r))
    alpha = 1 - float(_pow1m(p, tau_a * r))
    e = float(_event_rate(p, params.byte_counter_bytes / params.packet_bytes)) + float(
        _event_rate(p, params.rate_increase_timer_s * r))
    q = None
    if p <= params.pmax:
        q = params.kmin_bytes + p / params.pmax * (params.kmax_bytes - params.kmin_bytes)
    return {"p": p, "alpha": alpha, "queue_bytes": q, "rate_bps": r * params.packet_bytes * 8,
            "target_gap_bps": alpha * a / (tau * e) * params.packet_bytes * 8}


def alpha_fixed_point(p: float, rate_bps: float, params: FluidParams) -> float:
    """alpha where dalpha/dt = 0 under constant marking p and rate: 1 - (1 - p)^(tau' R_C)."""
    return 1 - float(_pow1m(p, params.alpha_timer_s * rate_bps / (params.packet_bytes * 8)))


def hyper_free(byte_counter_bytes: float, rounds: int, bytes_between_cnps) -> bool:
    """True when no flow sent F byte counters' worth without a CNP (the replica never entered hyper-increase,
    the stage the fluid model lacks)."""
    gaps = list(bytes_between_cnps)
    return bool(gaps) and max(gaps) < rounds * byte_counter_bytes
