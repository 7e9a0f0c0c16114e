"""Trustworthy trials for the long-haul experiment (pure): is a trial valid, what did physics allow, what
does the fluid model predict, and which RED thresholds does a link get.

The long-haul scenario calls these; ``testbed validate`` reads their output back::

    trial (dict, the scenario's trial.json + mode/case/distance)
        |--> trial_validity(trial)        {"valid": bool, "reasons": [...]}     checked before it is shown
        |--> feedback_bound_s(...)        the floor light in fibre puts under the feedback delay
    repetitions of one point --> stats.confidence_interval(...)
    predicted_gain(...)               --> the fluid model's fast-CNP gain at each distance

Field names of a trial (see docs/validation.md, "What the long-haul scenario must emit"):
``mode`` (``ecn`` | ``fast-cnp``), ``switch_cnps``, ``cnps_rx`` (CNPs the senders received), ``marks``,
``unaccounted_losses`` (frames lost without an attributed reason; or ``accounting.unaccounted``),
``saturation`` (list of emulator-health reasons; empty = healthy) or ``health.healthy``; optional
``feedback_check`` and ``data_check`` (``roce check --expect-ect`` of a data sample,
:func:`testbed.roce.sample.data_verdict`): a failed one makes the trial invalid.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import replace

from testbed.errors import SpecError
from testbed.models import dcqcn_discrete
from testbed.models.dcqcn_fluid import FluidParams, simulate
from testbed.rdma.dcqcn import DcqcnParams
from testbed.units import FIBRE_DELAY_S_PER_M

MODES = ("ecn", "fast-cnp")
#: A RoCEv2 CNP on the wire: Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + 16 reserved + ICRC 4 (+ FCS 4).
CNP_FRAME_BYTES = 14 + 20 + 8 + 12 + 16 + 4 + 4


# -- validity -----------------------------------------------------------------------------------------------
def _unaccounted(trial: dict) -> int | None:
    if trial.get("unaccounted_losses") is not None:
        return int(trial["unaccounted_losses"])
    acc = trial.get("accounting")
    if isinstance(acc, dict) and "unaccounted" in acc:
        return int(acc["unaccounted"])
    return None


def _health_reasons(trial: dict) -> list[str]:
    health = trial.get("health")
    if isinstance(health, dict) and "healthy" in health:
        if health["healthy"]:
            return []
        return [f"emulator unhealthy: {r}" for r in health.get("reasons", ["(no reason given)"])]
    if "saturation" in trial:
        sat = trial["saturation"]
        if isinstance(sat, dict):
            sat = [f"{k}: {v}" for k, v in sat.items()]
        return [f"emulator unhealthy: {r}" for r in (sat or [])]
    if "emulator_saturated" in trial:
        return ["emulator unhealthy: saturated"] if trial["emulator_saturated"] else []
    return ["no emulator health in the trial (field health or saturation)"]


def trial_validity(trial: dict, mode: str | None = None) -> dict:
    """Whether one trial may be shown as a result of its mode, and every reason it may not.

    Args:
        trial: the trial document (``mode`` inside it, or given as ``mode``).
        mode: ``ecn`` or ``fast-cnp`` when the trial does not carry it.

    Returns:
        ``{"valid": bool, "reasons": [str, ...]}`` (reasons empty when valid).

    Raises:
        SpecError: the mode is missing or unknown (a programming error in the caller, not a bad trial).
    """
    mode = trial.get("mode", mode)
    if mode not in MODES:
        raise SpecError("trial.mode", f"must be one of {', '.join(MODES)}, got {mode!r}")
    reasons = []
    cnps_rx = trial.get("cnps_rx", trial.get("cnps_at_senders"))
    if mode == "fast-cnp":
        if not trial.get("switch_cnps"):
            reasons.append("fast-cnp trial: the switch sent no CNP (this is a run without congestion control)")
        if not cnps_rx:
            reasons.append("fast-cnp trial: the senders received no CNP")
    elif "marks" in trial and not trial["marks"]:
        # like a fast-CNP trial without CNPs: no mark, no congestion signal, so no ECN result
        reasons.append("ecn trial: the switch marked no packet (no congestion: a run without congestion control)")
    elif trial.get("marks") and not cnps_rx:
        reasons.append("ecn trial: packets were marked but the senders received no CNP")
    lost = _unaccounted(trial)
    if lost is None:
        reasons.append("no loss accounting in the trial (field unaccounted_losses)")
    elif lost > 0:
        reasons.append(f"{lost} lost frames are not accounted for")
    reasons += _health_reasons(trial)
    check = trial.get("feedback_check")
    if check and not check["ok"]:
        reasons.append(f"{mode} feedback {check['excess_us']:.1f} us over physics, more than the "
                       f"{check['allowance_us']:.1f} us allowed: the emulator's transit, not the fibre, set it")
    data = trial.get("data_check")
    if data and not data["ok"]:
        reasons.append(f"data check ({data['capture']}, roce check --expect-ect): {'; '.join(data['reasons'])}")
    return {"valid": not reasons, "reasons": reasons}


# -- physics of feedback delay ------------------------------------------------------------------------------
def propagation_s(distance_m: float) -> float:
    """One-way light-in-fibre delay (5 us/km)."""
    return distance_m * FIBRE_DELAY_S_PER_M


def feedback_bound_s(path_m: float, serialisation_s: float = 0.0) -> float:
    """The least time feedback can take over ``path_m`` of fibre plus the frames' serialisation."""
    return propagation_s(path_m) + serialisation_s


def feedback_paths_m(case: str, distance_m: float, local_m: float = 0.0) -> dict:
    """Fibre each mode's feedback crosses in the long-haul topology (sender - ToR - DCI == DCI - ToR - receiver).

    From the congestion point's first signal leaving it (as the scenario measures) to a sender, with
    ``local_m`` one campus' cabling (host - ToR - DCI). ``sender-dci`` (congestion at the sender-side DCI):
    ECN goes DCI -> receiver (long haul + one campus) -> sender (one campus + long haul + one campus):
    2 x long haul + 3 x local; fast CNP goes DCI -> sender, one campus. ``receiver-tor`` (at the
    receiver-side ToR): ECN goes ToR -> receiver -> ToR -> DCI -> long haul -> sender, fast CNP ToR -> DCI
    -> long haul -> sender: both 1 x long haul + 2 x local (they differ by the receiver's two host cables,
    left out: metres).
    """
    if case == "sender-dci":
        return {"ecn": 2 * distance_m + 3 * local_m, "fast-cnp": local_m}
    if case == "receiver-tor":
        return {"ecn": distance_m + 2 * local_m, "fast-cnp": distance_m + 2 * local_m}
    raise SpecError("case", f"unknown case {case!r}; allowed: sender-dci, receiver-tor")


#: How much of the ECN loop's light-in-fibre time the emulator's own transit (BMv2 hops, host scheduling, the
#: delay line) may add to a trial's feedback delay before the emulator, not the fibre, decides the comparison
#: between the modes.
EXCESS_SHARE = 0.10
#: ... and never less than a tenth of DCQCN's CNP interval (50 us): the senders act on feedback at that
#: granularity, so a few us more do not change their loop; at 0 km the fibre allows a few metres (~1.5 us),
#: which no emulator's transit could meet.
EXCESS_FLOOR_S = 0.10 * DcqcnParams.cnp_interval


def feedback_serialisation_s(rate_bps: float | None, frame_bytes: int, mode: str) -> float:
    """Serialisation on the feedback path at the bottleneck rate: with ECN the marked frame on its way on
    (to the receiver) and the CNP; with fast CNP only the CNP (its start is the CNP leaving the switch)."""
    if not rate_bps:
        return 0.0
    return ((frame_bytes if mode == "ecn" else 0) + CNP_FRAME_BYTES) * 8 / rate_bps


def feedback_check(case: str, distance_m: float, mode: str, feedback_s: float | None, local_m: float,
                   rate_bps: float | None, frame_bytes: int) -> dict | None:
    """How far one trial's feedback delay (real seconds) lies above its physics bound, against what the
    emulator may add (:data:`EXCESS_SHARE` of the ECN loop's bound, at least :data:`EXCESS_FLOOR_S`).

    Returns ``{bound_us, excess_us, allowance_us, loop_us (ECN's bound), ok}``, or None when the trial measured no feedback.
    A trial over the allowance is not a result of its mode (:func:`trial_validity`): its feedback was set
    by the emulator. Below the bound is physics' row to judge (``testbed validate``), not this check.
    """
    if feedback_s is None:
        return None
    paths = feedback_paths_m(case, distance_m, local_m)
    bound = feedback_bound_s(paths[mode], feedback_serialisation_s(rate_bps, frame_bytes, mode))
    loop = feedback_bound_s(paths["ecn"], feedback_serialisation_s(rate_bps, frame_bytes, "ecn"))
    allowance = max(EXCESS_SHARE * loop, EXCESS_FLOOR_S)
    excess = feedback_s - bound
    return {"bound_us": round(bound * 1e6, 3), "excess_us": round(excess * 1e6, 3),
            "allowance_us": round(allowance * 1e6, 3), "loop_us": round(loop * 1e6, 3), "ok": excess <= allowance}


def serialisation_s(hops_bps, frame_bytes: int) -> float:
    """One frame serialised on each hop of rates ``hops_bps``."""
    return sum(frame_bytes * 8 / r for r in hops_bps)


# -- the fluid model's fast-CNP gain ------------------------------------------------------------------------
def predicted_gain(base: FluidParams, distances_km, case: str = "sender-dci", duration_s: float | None = None,
                   settle: float = 0.5) -> list[dict]:
    """Fast CNP's throughput gain over ECN predicted by the fluid model at each distance.

    Both modes run the same model; only the feedback delay differs: ``base.feedback_delay_s`` (the local part)
    plus 5 us/km of the fibre of :func:`feedback_paths_m`. The gain is the ratio
    of the bottleneck's utilisation after ``settle`` of the run, minus one.
    """
    out = []
    step = min(base.cnp_interval_s, base.alpha_timer_s, base.rate_increase_timer_s) / 10
    for km in distances_km:
        paths = feedback_paths_m(case, km * 1e3)
        util = {}
        for mode, path in paths.items():
            tau = base.feedback_delay_s + propagation_s(path)
            dur = duration_s or max(0.2, 400 * tau)
            tr = simulate(replace(base, feedback_delay_s=tau), dur, dt_s=step)
            util[mode] = tr.utilisation(settle * dur, dur)
        gain = util["fast-cnp"] / util["ecn"] - 1 if util["ecn"] > 0 else math.inf
        out.append({"distance_km": km, "utilisation": util, "gain": gain,
                    "feedback_s": {m: base.feedback_delay_s + propagation_s(p) for m, p in paths.items()}})
    return out


def wire_bytes(message_bytes: float, mtu: int, frame_bytes: int) -> float:
    """Bytes a message of ``message_bytes`` puts on the wire: its payload plus every frame's headers (a
    1024-byte MTU in 1082-byte frames: 1 MB is 977 frames, 1,056,666 bytes). The models count a packet as
    ``frame_bytes`` on the wire; fed the payload instead they would send 5.4 % fewer frames than the
    replica's senders do (``tx_packets``)."""
    if mtu < 1 or frame_bytes <= mtu:
        raise SpecError("frame_bytes", f"a frame must be larger than its MTU, got {frame_bytes} for MTU {mtu}")
    return message_bytes + math.ceil(message_bytes / mtu) * (frame_bytes - mtu)


def predicted_flow_gain(base: FluidParams, distance_km: float, case: str = "sender-dci", local_m: float = 0.0,
                        ack_delay_s: float = 0.0, payload_bytes: float | None = None) -> dict:
    """Fast CNP's goodput gain over ECN for the finite flows the experiment sends (the fluid model, extended).

    :func:`predicted_gain` is the paper's steady state: long flows, the utilisation once the limit cycle has
    settled. The long-haul trials send a few messages of a few MB, over in a few RTTs, so their goodput is a
    transient: ECN's first cut arrives late, the queue overshoots past Kmax and the deep cuts that follow set
    the completion time. This runs :func:`flow_goodput` once per mode and compares.

    Returns:
        ``{"gain", "goodput_bps": {mode: ...}, "fct_p50_s": {mode: ...}, "queue_peak_bytes": {mode: ...},
        "feedback_s": {mode: ...}}``.
    """
    out: dict = {"goodput_bps": {}, "fct_p50_s": {}, "queue_peak_bytes": {}, "feedback_s": {}}
    for mode in MODES:
        one = flow_goodput(base, distance_km, mode, case, local_m, ack_delay_s, payload_bytes)
        for k in out:
            out[k][mode] = one[k]
    out["gain"] = out["goodput_bps"]["fast-cnp"] / out["goodput_bps"]["ecn"] - 1
    return out


def flow_goodput(base: FluidParams, distance_km: float, mode: str, case: str = "sender-dci", local_m: float = 0.0,
                 ack_delay_s: float = 0.0, payload_bytes: float | None = None) -> dict:
    """One mode's goodput for the finite flows of ``base`` in the fluid model: ``base.flow_bytes`` and
    ``base.messages`` (or a flow-size mix, ``base.message_sizes``), each message paused for its
    acknowledgement (``ack_delay_s``, the path's round trip), the flows starting at ``base.starts_s``, the
    feedback delay ``base.feedback_delay_s`` + 5 us/km of :func:`feedback_paths_m` with ``local_m``. Goodput
    as the replica counts it: every byte sent (``payload_bytes``, when the messages are given as
    :func:`wire_bytes`; default their sum) over the time the last flow completed.

    Returns ``{"goodput_bps", "fct_p50_s", "queue_peak_bytes", "feedback_s"}``.
    """
    params = _mode_params(base, distance_km, mode, case, local_m, ack_delay_s, "predicted_flow_gain")
    step = min(base.cnp_interval_s, base.alpha_timer_s, base.rate_increase_timer_s) / 10
    ideal = _ideal_s(base, ack_delay_s)
    for factor in (4, 16, 64):          # long enough for every flow to finish (DCQCN can cut deep)
        tr = simulate(params, factor * ideal, dt_s=step)
        if not any(math.isnan(f) for f in tr.finish_s):
            break
    else:
        raise SpecError("fluid.flow_bytes", f"{mode}: the flows did not finish in {64 * ideal:.3g} s of model time")
    fcts = sorted(f for flow in tr.message_fct_s for f in flow)
    return {"goodput_bps": (payload_bytes or sum(base.flow_bytes)) * 8 / max(tr.finish_s),
            "fct_p50_s": statistics.median(fcts), "queue_peak_bytes": float(tr.queue.max()),
            "feedback_s": params.feedback_delay_s}


def _mode_params(base: FluidParams, distance_km: float, mode: str, case: str, local_m: float, ack_delay_s: float,
                 caller: str) -> FluidParams:
    """``base`` for one mode's finite flows (both models): its feedback delay, the local part plus 5 us/km of
    the fibre its feedback crosses (:func:`feedback_paths_m`), and the acknowledgements' delay."""
    if base.flow_bytes is None:
        raise SpecError("fluid.flow_bytes", f"{caller} needs finite flows (flow_bytes)")
    tau = base.feedback_delay_s + propagation_s(feedback_paths_m(case, distance_km * 1e3, local_m)[mode])
    return replace(base, feedback_delay_s=tau, ack_delay_s=ack_delay_s)


def _ideal_s(base: FluidParams, ack_delay_s: float) -> float:
    """The flows' completion at the bottleneck's full rate with every acknowledgement waited for."""
    count = max(map(len, base.message_sizes)) if base.message_sizes else base.messages
    return sum(base.flow_bytes) * 8 / base.capacity_bps + count * ack_delay_s + max(base.starts_s)


def discrete_flow_gain(base: FluidParams, distance_km: float, case: str = "sender-dci", local_m: float = 0.0,
                       ack_delay_s: float = 0.0, seeds: int = 20, payload_bytes: float | None = None) -> dict:
    """:func:`predicted_flow_gain`'s flows in the discrete simulation (:mod:`testbed.models.dcqcn_discrete`),
    one run per mode and seed (:func:`discrete_flow_goodputs`, each mode on its own seeds), paired by index.

    Why beside the fluid model: a short flow's goodput is set by how deep its first cuts go, and there the
    fluid mean can follow a path few realisations take (one CNP cuts R_C by alpha / 2, about half at the
    start; whether two senders' messages overlap at line rate decides whether a congestion episode happens
    at all). The replica is one realisation; this is the spread of the process it realises.

    Returns:
        ``{"ratios": [fast / ecn per seed], "goodput_bps": {mode: [per seed]}, "finish_s": {mode: [per seed,
        per flow]}, "median", "p5", "p95"}`` (quantiles of the ratios, nearest rank).
    """
    out: dict = {"goodput_bps": {}, "finish_s": {}}
    for mode in MODES:
        one = discrete_flow_goodputs(base, distance_km, mode, case, local_m, ack_delay_s, seeds, payload_bytes)
        out["goodput_bps"][mode], out["finish_s"][mode] = one["goodput_bps"], one["finish_s"]
    ratios = [f / e for f, e in zip(out["goodput_bps"]["fast-cnp"], out["goodput_bps"]["ecn"], strict=True)]
    return {**out, "ratios": ratios, "median": statistics.median(ratios), "p5": nearest_rank(ratios, 0.05),
            "p95": nearest_rank(ratios, 0.95)}


#: Each mode's first seed in the discrete simulation. A replica's ECN trial and its fast-CNP trial draw their
#: marks independently; two modes run on the same seed replay the same draws, and where the modes' loops are
#: alike (the receiver's ToR: the same fibre both ways) they would give the same run, a ratio of exactly 1
#: that no pair of independent trials shows.
MODE_FIRST_SEED = {"ecn": 0, "fast-cnp": 100_000}


def discrete_flow_goodputs(base: FluidParams, distance_km: float, mode: str, case: str = "sender-dci",
                           local_m: float = 0.0, ack_delay_s: float = 0.0, seeds: int = 20,
                           payload_bytes: float | None = None) -> dict:
    """One mode's goodput in the discrete simulation for ``seeds`` seeds from the mode's
    :data:`MODE_FIRST_SEED` (the flows and goodput as in :func:`flow_goodput`): ``{"goodput_bps": [per
    seed], "finish_s": [per seed, per flow]}``."""
    params = _mode_params(base, distance_km, mode, case, local_m, ack_delay_s, "discrete_flow_gain")
    if seeds < 1:
        raise SpecError("seeds", f"needs at least one seed, got {seeds!r}")
    ideal = _ideal_s(base, ack_delay_s)
    first = MODE_FIRST_SEED[mode]
    runs = [dcqcn_discrete.simulate(params, 64 * ideal, seed=first + s, sample_every_s=ideal / 100)
            for s in range(seeds)]
    if any(math.isnan(f) for tr in runs for f in tr.finish_s):
        raise SpecError("fluid.flow_bytes", f"{mode}: the flows did not finish in {64 * ideal:.3g} s of simulated time")
    total = payload_bytes or sum(base.flow_bytes)
    return {"goodput_bps": [total * 8 / max(tr.finish_s) for tr in runs], "finish_s": [tr.finish_s for tr in runs]}


def nearest_rank(values, q: float) -> float:
    """The ``q`` quantile of ``values`` by nearest rank (a value the runs took, not an interpolation)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]
