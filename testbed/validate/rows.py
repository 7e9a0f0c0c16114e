"""Alignment rows (pure): a replica measurement beside an independent reference, its error and verdict.

    measurements (replica.py, or a long-haul trial/summary JSON)
        --> row builders here: reference computed from published equations (fluid model, ideal link,
            RED curve, min(rate, window/RTT), light in fibre)
        --> Row(reference, metric, replica, expected, error, tolerance, passed, backends, plot data)

Errors: scalar rows use the relative error |replica - reference| / |reference| against ``tolerance``
(10%); trajectory rows the RMS difference over the first 10 RTTs after congestion starts, divided by the
bottleneck capacity (rates) or by Kmax (queue), against 15%.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

from testbed.links.fidelity import percentile
from testbed.models.dcqcn_fluid import FluidParams, simulate
from testbed.rdma.dcqcn import DcqcnParams
from testbed.validate.stats import relative_error

SCALAR_TOLERANCE = 0.10
#: the link backend of the wire (testbed.plan's names) and the endpoints
RDMA_BACKENDS = ("userspace", "soft-rdma")
TRAJECTORY_TOLERANCE = 0.15


@dataclass
class Row:
    """One line of the alignment table."""

    reference: str
    metric: str
    replica: float | None
    expected: float | None
    unit: str
    error: float | None
    tolerance: float
    passed: bool
    backends: tuple = ("userspace",)
    kind: str = "scalar"            # scalar | trajectory | bound
    note: str = ""
    plot: dict = field(default_factory=dict, repr=False)
    #: why the reference cannot judge this row here (:func:`mark_scope`); shown, not counted; "" = in scope
    scope: str = ""

    def to_json(self) -> dict:
        doc = asdict(self)
        doc.pop("plot")
        doc["backends"] = list(self.backends)
        return doc


def scalar_row(reference: str, metric: str, replica: float, expected: float, unit: str, *,
               tolerance: float = SCALAR_TOLERANCE, backends=("userspace",), note: str = "", plot=None) -> Row:
    err = relative_error(replica, expected)
    return Row(reference, metric, replica, expected, unit, err, tolerance, bool(err <= tolerance), tuple(backends),
               "scalar", note, plot or {})


#: a reference judges a row only where at least this share of the modelled process's own realisations pass it
SCOPE_SHARE = 0.9


def mark_scope(row: Row, passes: list[bool], process: str) -> Row:
    """Mark ``row`` out of its reference's scope when fewer than :data:`SCOPE_SHARE` of ``passes`` are true.

    ``passes``: the row's verdict for each realisation of the random process the reference approximates (the
    discrete DCQCN simulation of the same experiment, scored by this row as if it were the replica). A mean
    field that a correct implementation fails most of the time cannot tell a right replica from a wrong one
    (docs/validation.md, "Open rows"): such a row stays in the table with its figures, says so, and is not
    counted as a pass or a failure."""
    if passes and sum(passes) < SCOPE_SHARE * len(passes):
        row.scope = (f"out of this reference's scope here: {sum(passes)} of {len(passes)} runs of the {process} "
                     f"pass it (needs {SCOPE_SHARE:.0%})")
    return row


def skipped_row(reference: str, metric: str, why: str) -> Row:
    """A row the run could not produce (no input): shown, never counted as a pass."""
    return Row(reference, metric, None, None, "", None, SCALAR_TOLERANCE, False, (), "missing", why)


# -- DCQCN: replica senders vs the fluid model ------------------------------------------------------------
def fluid_params_for(run, frame_bytes: int) -> FluidParams:
    """The fluid model of a :class:`~testbed.validate.replica.DcqcnRun`, in the replica's (emulated) units.

    DCQCN's constants are the paper's (as :class:`DcqcnParams` documents them: it is the replica's
    configuration, not its code), dilated; the feedback delay is physics: two propagation delays and
    the serialisation of the marked frame and of the CNP, plus the queueing delay (``queue_delay``).
    """
    scale = run.scale
    d = DcqcnParams(line_rate=run.line_rate_bps)
    cap = run.bottleneck_bps / scale
    tau = 2 * run.one_way_s * scale + frame_bytes * 8 / cap + 82 * 8 / cap
    return FluidParams(capacity_bps=cap, line_rate_bps=run.line_rate_bps / scale, packet_bytes=frame_bytes,
                       kmin_bytes=run.kmin_pkts * frame_bytes, kmax_bytes=run.kmax_pkts * frame_bytes, pmax=run.pmax,
                       feedback_delay_s=tau, starts_s=tuple(s * scale for s in run.starts_s), queue_delay=True,
                       buffer_bytes=run.limit_pkts * frame_bytes, g=d.g, cnp_interval_s=d.cnp_interval * scale,
                       alpha_timer_s=d.alpha_timer * scale, rate_increase_timer_s=d.rate_increase_timer * scale,
                       byte_counter_bytes=d.byte_counter, fast_recovery_rounds=d.fast_recovery_rounds,
                       rate_ai_bps=d.rate_ai / scale, initial_alpha=d.initial_alpha,
                       min_rate_bps=d.min_rate / scale)


def replica_series(raw: dict) -> dict:
    """The replica's per-flow rate series and the bottleneck queue on one clock (emulated s from flow 1's start).

    Returns:
        ``{"flows": [{"t", "rate", "acked", "cnps"} numpy arrays], "queue_t", "queue_pkts", "starts"}``.
    """
    flows, starts = [], []
    for s in raw["senders"]:
        cols = s["series"]["columns"]
        rows = np.array([[float(v or 0.0) for v in r] for r in s["series"]["rows"]])
        mono0 = s["started_at"] - s["wall_minus_monotonic"]
        starts.append(mono0)
        flows.append({"t": rows[:, cols.index("t")] + mono0, "rate": rows[:, cols.index("rate_bps")],
                      "acked": rows[:, cols.index("acked_bytes")], "cnps": rows[:, cols.index("cnps_rx")]})
    t0 = starts[0]
    for f in flows:
        f["t"] = f["t"] - t0
    q = np.array(raw["queue_series"] or [[t0, 0, 0]], dtype=float)
    return {"flows": flows, "queue_t": q[:, 0] - t0, "queue_pkts": q[:, 1], "starts": [s - t0 for s in starts]}


def _step_at(t_src, v_src, t):
    """Value of a sampled step signal at times ``t`` (the last sample at or before each)."""
    idx = np.searchsorted(t_src, t, side="right") - 1
    return np.where(idx >= 0, v_src[np.clip(idx, 0, len(v_src) - 1)], 0.0)


def _queue_at(t_src, q_src, t, drain_pps: float):
    """Queue depth at times ``t`` from depths sampled at arrivals: between arrivals a FIFO only drains, at the
    link's rate, so the depth is the last sample minus what left since (never below zero)."""
    idx = np.searchsorted(t_src, t, side="right") - 1
    ok = idx >= 0
    j = np.clip(idx, 0, len(q_src) - 1)
    return np.where(ok, np.maximum(0.0, q_src[j] - (t - t_src[j]) * drain_pps), 0.0)


def _first_cut(t, rate, line_rate: float) -> float | None:
    """When a sender first went below 95% of its line rate (its first reaction to a CNP)."""
    below = np.nonzero((rate > 0) & (rate < 0.95 * line_rate))[0]
    return float(t[below[0]]) if below.size else None


def onset(raw: dict, run) -> dict:
    """When congestion first acted on the senders, real ms after flow 1 started: the first CNP any sender
    received and flow 1's first rate cut (the cut the trajectory rows align on; None: none happened).

    These are the random part of a run (the first RED mark on the ramp is a low-probability draw), so
    ``testbed validate`` records them beside each experiment's link seed.
    """
    rep = replica_series(raw)
    cnps = [float(f["t"][np.nonzero(f["cnps"] > 0)[0][0]]) for f in rep["flows"] if (f["cnps"] > 0).any()]
    cut = _first_cut(rep["flows"][0]["t"], rep["flows"][0]["rate"], run.line_rate_bps / run.scale)
    ms = 1e3 / run.scale
    return {"first_cnp_real_ms": round(min(cnps) * ms, 2) if cnps else None,
            "first_cut_real_ms": None if cut is None else round(cut * ms, 2)}


def _convergence(t, r1, r2, after: float, band: float = 0.2, hold: float = 0.0) -> float | None:
    """First time after ``after`` from which |r1 - r2| / (r1 + r2) stays within ``band``/2 for ``hold`` s."""
    gap = np.abs(r1 - r2) / np.maximum(r1 + r2, 1e-9)
    ok = (gap <= band / 2) & (t >= after)
    for i in np.nonzero(ok)[0]:
        end = t[i] + hold
        win = (t >= t[i]) & (t <= end)
        if ok[win].all() and t[-1] >= end:
            return float(t[i] - after)
    return None


def _smooth(t, v, width: float):
    """Moving average over ``width`` seconds (samples need not be uniform)."""
    c = np.concatenate([[0.0], np.cumsum(v)])
    lo = np.searchsorted(t, t - width, side="left")
    hi = np.arange(1, len(t) + 1)
    return (c[hi] - c[lo]) / np.maximum(hi - lo, 1)


FLUID_REFERENCE = "DCQCN fluid model (CoNEXT'16)"


def dcqcn_rows(raw: dict, run, frame_bytes: int, model=None, reference: str = FLUID_REFERENCE) -> list[Row]:
    """Fluid model vs replica: trajectories after congestion starts, fair share, convergence, throughput.

    ``model``: the reference trajectory (default: the fluid model of ``run``); any
    :class:`~testbed.models.dcqcn_fluid.Trajectory` on the same clock, named ``reference`` in the rows
    (:mod:`testbed.validate.discrete` passes the discrete simulation's seed mean).
    """
    fp = fluid_params_for(run, frame_bytes)
    rep = replica_series(raw)
    duration = run.duration_s * run.scale
    tr = model or simulate(fp, duration, sample_every_s=fp.cnp_interval_s / 4)
    cap = fp.capacity_bps
    n = len(rep["flows"])
    grid = tr.t
    rep_rates = np.stack([_step_at(f["t"], f["rate"], grid) for f in rep["flows"]], axis=1)
    drain = cap / (frame_bytes * 8)
    rep_queue = _queue_at(rep["queue_t"], rep["queue_pkts"], grid, drain)
    # the loop RTT with the queue in the middle of the RED ramp
    rtt = 2 * run.one_way_s * run.scale + (run.kmin_pkts + run.kmax_pkts) / 2 * frame_bytes * 8 / cap
    rows, plot = [], {"t": grid, "model_rates": tr.rates, "replica_rates": rep_rates, "model_queue": tr.queue / frame_bytes,
                      "replica_queue": rep_queue, "scale": run.scale, "kmin": run.kmin_pkts, "kmax": run.kmax_pkts,
                      "model_name": reference.split(" (")[0].removeprefix("DCQCN ")}
    c_rep = _first_cut(rep["flows"][0]["t"], rep["flows"][0]["rate"], fp.line_rate_bps)
    c_mod = _first_cut(tr.t, tr.rates[:, 0], fp.line_rate_bps)
    if c_rep is None or c_mod is None:
        return [skipped_row(reference, "trajectories", "no sender ever cut its rate (no congestion)")]
    # each side from its own first rate cut (the fluid model's expected marks cut earlier than the first
    # random mark does; see docs/validation.md), for 10 loop RTTs (propagation + queueing at Kmax)
    span = 10 * rtt
    k = max(2, int(span / (grid[1] - grid[0])))
    m_idx = np.searchsorted(grid, c_mod) + np.arange(k)
    m_idx = m_idx[m_idx < len(grid)]
    r_t = c_rep + (grid[m_idx] - c_mod)
    r_rates = np.stack([_step_at(f["t"], f["rate"], r_t) for f in rep["flows"]], axis=1)
    r_queue = _queue_at(rep["queue_t"], rep["queue_pkts"], r_t, drain)
    active = tr.rates[m_idx] > 0
    rate_rms = math.sqrt(float(np.mean(((r_rates - tr.rates[m_idx]) ** 2)[active]))) / cap
    queue_rms = math.sqrt(float(np.mean((r_queue - tr.queue[m_idx] / frame_bytes) ** 2))) / run.kmax_pkts
    plot |= {"window": (c_mod, c_mod + span), "onset_shift": c_rep - c_mod}
    note = (f"{span * 1e3 / run.scale:.2f} ms real (10 loop RTTs) from the first rate cut; replica's cut "
            f"{(c_rep - c_mod) * 1e3 / run.scale:+.2f} ms real after the model's")
    rows.append(Row(reference, f"rate trajectory, {n} flows (RMS / C)", rate_rms, 0.0, "",
                    rate_rms, TRAJECTORY_TOLERANCE, bool(rate_rms <= TRAJECTORY_TOLERANCE), RDMA_BACKENDS, "trajectory",
                    note, plot))
    rows.append(Row(reference, f"queue trajectory, {n} flows (RMS / Kmax)", queue_rms, 0.0, "",
                    queue_rms, TRAJECTORY_TOLERANCE, bool(queue_rms <= TRAJECTORY_TOLERANCE), RDMA_BACKENDS, "trajectory",
                    note, plot))
    # fair share: over the last third of the run, each flow's share of the DCQCN rate total
    last = grid >= grid[-1] * 2 / 3
    m_share = tr.rates[last].mean(axis=0) / tr.rates[last].sum(axis=1).mean()
    r_share = rep_rates[last].mean(axis=0) / rep_rates[last].sum(axis=1).mean()
    worst = int(np.argmax(np.abs(r_share - m_share)))
    rows.append(scalar_row(reference, f"rate share of flow {worst + 1} of {n} (last third)",
                           float(r_share[worst]), float(m_share[worst]), "", backends=RDMA_BACKENDS,
                           note="fair share is 1/N"))
    # aggregate goodput against the model's delivered rate (payload of the frames the bottleneck forwarded)
    t_lo, t_hi = grid[-1] / 3, grid[-1]
    good = 0.0
    for f in rep["flows"]:
        inside = (f["t"] >= t_lo) & (f["t"] <= t_hi)
        if inside.sum() >= 2:
            good += (f["acked"][inside][-1] - f["acked"][inside][0]) * 8 / (f["t"][inside][-1] - f["t"][inside][0])
    payload = 1024 / frame_bytes
    expected = tr.utilisation(t_lo, t_hi) * cap * payload
    rows.append(scalar_row(reference, f"aggregate goodput, {n} flows (last two thirds)",
                           good * run.scale / 1e6, expected * run.scale / 1e6, "Mb/s (real)", backends=RDMA_BACKENDS))
    if n >= 2:
        join = max(rep["starts"][1], fp.starts_s[1])
        width = 4 * fp.rate_increase_timer_s
        r1s, r2s = (_smooth(grid, rep_rates[:, i], width) for i in (0, 1))
        conv_rep = _convergence(grid, r1s, r2s, rep["starts"][1], hold=10 * rtt)
        conv_mod = _convergence(grid, tr.rates[:, 0], tr.rates[:, 1], fp.starts_s[1], hold=10 * rtt)
        if conv_rep is None or conv_mod is None:
            rows.append(Row(reference, f"convergence time, flows 1-2 of {n} (rates within 20%)",
                            None if conv_rep is None else conv_rep / run.scale * 1e3,
                            None if conv_mod is None else conv_mod / run.scale * 1e3, "ms (real)", None,
                            SCALAR_TOLERANCE, False, RDMA_BACKENDS, "scalar", f"did not converge (join at {join:.3f} s)"))
        else:
            rows.append(scalar_row(reference, f"convergence time, flows 1-2 of {n} (rates within 20%)",
                                   conv_rep / run.scale * 1e3, conv_mod / run.scale * 1e3, "ms (real)",
                                   backends=RDMA_BACKENDS,
                                   note="after the second flow joins; replica rates smoothed over 4 timer periods"))
    return rows


# -- link: delivered rate, delay, gaps (Mininet-HiFi) ------------------------------------------------------
def link_rows(delay_cases: list[dict], gap_cases: list[dict]) -> list[Row]:
    """One-way delay (median) vs delay + serialisation; delivered rate vs min(rate, offered); gap p90 deviation.

    The delivered-rate reference is min(configured rate, what the source offered) when the case knows the
    offered rate (``offered_mbps``, from :func:`gap_case_summary`), else the configured rate: the link cannot
    send what it was not given. The gap source offers 1.2x the rate, so normally that is the rate; a source
    that fell short is named in the note, where its gaps are the sender's too.
    """
    rows = []
    for c in delay_cases:
        rows.append(scalar_row("ideal link", f"one-way delay, {c['delay_ms']:g} ms at 100 Mb/s (median)",
                               c["median_ms"], c["ideal_ms"], "ms (emulated)",
                               note=f"p99 error {c['p99_error_pct']}%, {c['samples']} probes, "
                                    f"{c.get('emulator_late')} late"))
    for c in gap_cases:
        offered = c.get("offered_mbps")
        reference = c["rate_mbps"] if offered is None else min(c["rate_mbps"], offered)
        source = f"source {c['source']}" if c.get("source") else ""
        offer = "" if offered is None else f"offered {offered:.4g} Mb/s" + (
            " (below the rate: the queue ran dry)" if offered < c["rate_mbps"] else "")
        rows.append(scalar_row("ideal link", f"delivered rate at {c['rate_mbps']:g} Mb/s (backlogged)",
                               c["delivered_mbps"], reference, "Mb/s (emulated)",
                               note=", ".join(filter(None, (f"{c['samples']} gaps", source, offer)))))
        # Mininet-HiFi: share of inter-dequeue gaps deviating from 1514*8/rate; pass when p90 within 10%
        p90 = c["p90_error_pct"] / 100
        rows.append(Row("ideal link (Mininet-HiFi gap CCDF)", f"gap deviation p90 at {c['rate_mbps']:g} Mb/s",
                        p90, 0.0, "", p90, SCALAR_TOLERANCE, bool(p90 <= SCALAR_TOLERANCE), ("userspace",), "bound",
                        f"p50 {c['p50_error_pct']}%, p99 {c['p99_error_pct']}%",
                        {"errors": c.get("errors", []), "rate_mbps": c["rate_mbps"]}))
    return rows


def gap_case_summary(rate_bps: float, arrivals_ns, frame: int, *, offered_bps: float | None = None,
                     source: str | None = None) -> dict:
    """Delivered rate, gap errors and their percentiles of one backlogged capture (pure); ``offered_bps``
    and ``source``: what the gap source offered and which one it was (None when not recorded)."""
    from testbed.links import fidelity

    ts = list(arrivals_ns)[50:]
    ideal = fidelity.serialisation_s(frame, rate_bps)
    gaps = fidelity.backlogged_gaps(ts)
    errors = fidelity.relative_errors(gaps, ideal)
    span = (ts[-1] - ts[0]) / 1e9 if len(ts) > 1 else math.nan
    return {"rate_mbps": rate_bps / 1e6, "ideal_gap_us": ideal * 1e6,
            "delivered_mbps": (len(ts) - 1) * frame * 8 / span / 1e6 if span and span > 0 else math.nan,
            "offered_mbps": None if offered_bps is None else offered_bps / 1e6, "source": source,
            **fidelity.error_summary(errors), "errors": errors}


# -- RED ----------------------------------------------------------------------------------------------------
def red_rows(red_case: dict) -> list[Row]:
    """Marked share over the probes vs the configured curve at the probes' depths; worst bin's abs error."""
    bins = red_case["bins"]
    if not bins:
        return [skipped_row("RED curve (configured)", "marked share", "no depth bin had enough probes")]
    total = sum(b["samples"] for b in bins)
    observed = sum(b["observed"] * b["samples"] for b in bins) / total
    expected = sum(b["expected"] * b["samples"] for b in bins) / total
    ramp = [b for b in bins if 0 < b["expected"] < red_case["pmax"]]
    worst = max((b["abs_error"] for b in ramp), default=0.0)
    return [scalar_row("RED curve (configured)", "marked share on the ramp (probe-weighted)", observed, expected, "",
                       note=f"{len(bins)} depth bins, worst |observed - curve| {worst:.3f}", plot={"bins": bins,
                                                                                                   "red": red_case})]


# -- single flow goodput ------------------------------------------------------------------------------------
def goodput_reference(rate_bps: float, one_way_s: float, window_pkts: int, mtu: int = 1024,
                      frame_bytes: int = 1082) -> float:
    """min(payload share of the rate, window / RTT) with RTT = 2 x delay + one frame's serialisation."""
    rtt = 2 * one_way_s + frame_bytes * 8 / rate_bps
    return min(rate_bps * mtu / frame_bytes, window_pkts * mtu * 8 / rtt)


def goodput_rows(cases: list[dict]) -> list[Row]:
    rows = []
    for c in cases:
        ref = goodput_reference(c["rate_bps"], c["one_way_s"], c["window"])
        limit = "window" if ref < c["rate_bps"] * 1024 / 1082 else "rate"
        rows.append(scalar_row("min(rate, window/RTT)", f"goodput, {limit}-limited (window {c['window']}, "
                               f"RTT {2 * c['one_way_s'] * 1e3:g} ms)", c["goodput_mbps"], ref / 1e6, "Mb/s (emulated)",
                               backends=RDMA_BACKENDS,
                               note=f"retransmissions {c['retransmissions']}, timeouts {c['timeouts']}"))
    return rows


def p_value(values, q):
    return percentile(values, q)
