"""DCQCN rows against the discrete simulation (pure): the replica beside several seeded runs of the same loop.

The fluid model is a mean field; a replica run is one realisation of a random process (random marks, CNPs,
cuts). :mod:`testbed.models.dcqcn_discrete` is that process, with the same parameters
(:func:`testbed.validate.rows.fluid_params_for`), so these rows ask the question the fluid rows cannot:
does the replica behave like one run of DCQCN on this loop? ::

    SEEDS runs --> seed mean (fair share, utilisation; trajectories: runs aligned at their first rate cut)
              |        --> rows.dcqcn_rows(model=mean)
              '-> each run scored like a replica against the mean of the others --> the process's own spread

Reference values: the trajectories (aligned) and the fair share are the seed mean's; aggregate goodput
and convergence time the median of the runs' own values (one realisation's convergence, not the smoother
mean's). Tolerance: a replica run passes when it is no further from the reference than 95% of the
simulation's own runs are (trajectories and share: each run against the mean of the others; goodput and
convergence: each run against the median), and never tighter than the fluid rows' 10% / 15%.
"""

from __future__ import annotations

import numpy as np

from testbed.models import dcqcn_fluid
from testbed.models.dcqcn_discrete import DiscreteTrajectory, mean_trajectory, simulate
from testbed.validate.rows import Row, _first_cut, dcqcn_rows, fluid_params_for, mark_scope
from testbed.validate.stats import relative_error

REFERENCE = "DCQCN discrete simulation"
#: runs per experiment (each ~0.4 s of CPU for the quick experiment, simulated and scored)
SEEDS = 20
#: the band: a run of the simulation itself falls outside it about 1 time in 20 per row. Not the runs' worst:
#: convergence time is heavy-tailed (1 run in 20 converges 3-5x later), and the worst run alone made a 200% band
BAND_PERCENTILE = 95


def as_raw(tr: DiscreteTrajectory, payload_bytes: int = 1024) -> dict:
    """One discrete run in the replica's raw form (``rows.replica_series`` reads it): per-flow rate and
    acknowledged payload series from each flow's start, and the queue depth in packets."""
    senders = []
    for i, start in enumerate(tr.params.starts_s):
        m = tr.t >= start
        rows = [[float(t - start), float(r), float(d * payload_bytes), 0.0]
                for t, r, d in zip(tr.t[m], tr.rates[m, i], tr.delivered[m, i], strict=True)]
        senders.append({"series": {"columns": ["t", "rate_bps", "acked_bytes", "cnps_rx"], "rows": rows},
                        "started_at": float(start), "wall_minus_monotonic": 0.0})
    queue = [[float(t), float(q / tr.params.packet_bytes), 0.0] for t, q in zip(tr.t, tr.queue, strict=True)]
    return {"senders": senders, "queue_series": queue}


def _rows(raw: dict, run, frame_bytes: int, runs: list) -> list[Row]:
    """dcqcn_rows against the runs: trajectories against their aligned mean, the rest against their mean."""
    traj = dcqcn_rows(raw, run, frame_bytes, model=aligned_mean(runs), reference=REFERENCE)
    rest = dcqcn_rows(raw, run, frame_bytes, model=mean_trajectory(runs), reference=REFERENCE)
    return [t if t.kind == "trajectory" else r for t, r in zip(traj, rest, strict=True)]


def _key(metric: str) -> str:
    """The metric without the flow it names ("rate share of flow 2 of 2" -> "rate share")."""
    return metric.split(" of flow")[0].split(",")[0]


def _shifted(a: np.ndarray, k: int) -> np.ndarray:
    """``a`` delayed by ``k`` samples (advanced if negative), its edge values held."""
    if k == 0:
        return a
    out = np.empty_like(a)
    if k > 0:
        out[k:], out[:k] = a[:-k], a[0]
    else:
        out[:k], out[k:] = a[-k:], a[-1]
    return out


def aligned_mean(runs: list[DiscreteTrajectory]) -> DiscreteTrajectory:
    """The seed mean with every run shifted so that its first rate cut falls at the median one.

    The first mark is random (p is small just above Kmin), so unshifted runs cut at different times and their
    mean is a smeared cut no run makes; the trajectory rows compare shapes from the first cut on (each side
    from its own, as against the fluid model), so the reference shape is the mean of aligned runs.
    """
    line = runs[0].params.line_rate_bps
    cuts = [_first_cut(r.t, r.rates[:, 0], line) for r in runs]
    if any(c is None for c in cuts):
        return mean_trajectory(runs)
    dt = runs[0].t[1] - runs[0].t[0]
    target = float(np.median(cuts))
    shifted = []
    for r, c in zip(runs, cuts, strict=True):
        k = int(round((target - c) / dt))
        shifted.append(DiscreteTrajectory(r.t, _shifted(r.rates, k), _shifted(r.targets, k), _shifted(r.alpha, k),
                                          _shifted(r.queue, k), _shifted(r.p, k), r.dropped_bytes, r.params,
                                          departed=_shifted(r.departed, k), delivered=_shifted(r.delivered, k),
                                          marks=r.marks, seed=r.seed))
    return mean_trajectory(shifted)


def discrete_runs(run, frame_bytes: int, seeds: int = SEEDS) -> list[DiscreteTrajectory]:
    """``seeds`` runs of the discrete simulation of the experiment ``run`` (shared by :func:`discrete_rows`
    and :func:`fluid_scope`)."""
    fp = fluid_params_for(run, frame_bytes)
    return [simulate(fp, run.duration_s * run.scale, seed=s) for s in range(seeds)]


def fluid_scope(fluid: list[Row], run, frame_bytes: int, runs: list[DiscreteTrajectory]) -> list[Row]:
    """Mark the fluid rows of ``run`` that the discrete process itself fails (:func:`rows.mark_scope`).

    Each discrete run is scored by the fluid rows exactly as the replica is; a row that fewer than 90 % of
    them pass is outside the mean field's regime for this experiment (here: ~1.4 packets per flow per CNP
    interval, where one CNP halves a rate and the averaging behind the fluid model does not hold), so it
    cannot tell a right replica from a wrong one. Returns ``fluid``, marked in place."""
    fp = fluid_params_for(run, frame_bytes)
    model = dcqcn_fluid.simulate(fp, run.duration_s * run.scale, sample_every_s=fp.cnp_interval_s / 4)
    verdicts: dict[str, list[bool]] = {}
    for tr in runs:
        for r in dcqcn_rows(as_raw(tr), run, frame_bytes, model=model):
            verdicts.setdefault(r.metric, []).append(bool(r.passed))
    for row in fluid:
        mark_scope(row, verdicts.get(row.metric, []), "discrete simulation of this experiment")
    return fluid


def discrete_rows(raw: dict, run, frame_bytes: int, seeds: int = SEEDS, runs=None) -> list[Row]:
    """The replica's DCQCN rows against the discrete simulation (``runs``: :func:`discrete_runs`, computed
    here when not given)."""
    runs = runs or discrete_runs(run, frame_bytes, seeds)
    own: dict[str, list[Row]] = {}
    for k, tr in enumerate(runs):
        others = runs[:k] + runs[k + 1:]
        for r in _rows(as_raw(tr), run, frame_bytes, others):
            own.setdefault(_key(r.metric), []).append(r)
    out = []
    for row in _rows(raw, run, frame_bytes, runs):
        key = _key(row.metric)
        mine = own.get(key, [])
        if row.kind == "trajectory" or key == "rate share":
            errors = [r.error for r in mine if r.error is not None]
            spread = float(np.percentile(errors, BAND_PERCENTILE)) if errors else 0.0
        else:   # goodput, convergence: the runs' own values around their median
            values = [r.replica for r in mine if r.replica is not None]
            if len(values) < 2:
                row.note = f"{len(values)} of {len(runs)} runs gave a value; " + row.note
                row.passed = False
                out.append(row)
                continue
            row.expected = float(np.median(values))
            spread = float(np.percentile([relative_error(v, row.expected) for v in values], BAND_PERCENTILE))
            if row.replica is not None:
                row.error = relative_error(row.replica, row.expected)
        row.tolerance = max(row.tolerance, float(spread))
        row.passed = row.error is not None and bool(row.error <= row.tolerance)
        row.note = (f"{len(runs)} seeded runs; tolerance: {BAND_PERCENTILE}th percentile of their own "
                    f"deviation ({spread * 100:.1f}%), at least {'15' if row.kind == 'trajectory' else '10'}%"
                    + (f"; {row.note}" if row.note else ""))
        out.append(row)
    return out
