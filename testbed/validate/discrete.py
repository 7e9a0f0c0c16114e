"""DCQCN rows against the discrete simulation (pure): the replica beside several seeded runs of the same loop.

The fluid model is a mean field; a replica run is one realisation of a random process (random marks, CNPs,
cuts). :mod:`testbed.models.dcqcn_discrete` is that process, with the same parameters
(:func:`testbed.validate.rows.fluid_params_for`), so these rows ask the question the fluid rows cannot:
does the replica behave like one run of DCQCN on this loop? ::

    SEEDS runs --> seed mean (trajectories, fair share, utilisation)  --> rows.dcqcn_rows(model=mean)
              \\-> each run scored like a replica against the mean of the others --> the process's own spread

Reference values: the trajectories and the fair share are the seed mean's; aggregate goodput and convergence
time the mean of the runs' own values (one realisation's convergence, not the smoother mean's). Tolerance:
a replica run passes when it is no further from the reference than the simulation's own runs are from the
mean of the others (the worst of SEEDS), and never tighter than the fluid rows' 10% / 15%.
"""

from __future__ import annotations

import numpy as np

from testbed.models.dcqcn_discrete import DiscreteTrajectory, mean_trajectory, simulate
from testbed.validate.rows import Row, dcqcn_rows, fluid_params_for
from testbed.validate.stats import relative_error

REFERENCE = "DCQCN discrete simulation"
#: runs per experiment (each ~0.3 s of CPU for the quick experiment, simulated and scored): with 20, a run of
#: the simulation itself falls outside the band of the others about 2 times in 21 per row
SEEDS = 20


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


def _key(metric: str) -> str:
    """The metric without the flow it names ("rate share of flow 2 of 2" -> "rate share")."""
    return metric.split(" of flow")[0].split(",")[0]


def discrete_rows(raw: dict, run, frame_bytes: int, seeds: int = SEEDS, runs=None) -> list[Row]:
    """The replica's DCQCN rows against the discrete simulation (``runs``: precomputed, for tests)."""
    fp = fluid_params_for(run, frame_bytes)
    runs = runs or [simulate(fp, run.duration_s * run.scale, seed=s) for s in range(seeds)]
    mean = mean_trajectory(runs)
    own: dict[str, list[Row]] = {}
    for k, tr in enumerate(runs):
        others = mean_trajectory(runs[:k] + runs[k + 1:])
        for r in dcqcn_rows(as_raw(tr), run, frame_bytes, model=others, reference=REFERENCE):
            own.setdefault(_key(r.metric), []).append(r)
    out = []
    for row in dcqcn_rows(raw, run, frame_bytes, model=mean, reference=REFERENCE):
        key = _key(row.metric)
        mine = own.get(key, [])
        if row.kind == "trajectory" or key == "rate share":
            spread = max((r.error for r in mine if r.error is not None), default=0.0)
        else:   # goodput, convergence: the runs' own values, each against the mean of the others
            values = [r.replica for r in mine if r.replica is not None]
            if len(values) < 2:
                row.note = f"{len(values)} of {len(runs)} runs gave a value; " + row.note
                row.passed = False
                out.append(row)
                continue
            row.expected = float(np.mean(values))
            spread = max(relative_error(v, float(np.mean(values[:j] + values[j + 1:])))
                         for j, v in enumerate(values))
            if row.replica is not None:
                row.error = relative_error(row.replica, row.expected)
        row.tolerance = max(row.tolerance, float(spread))
        row.passed = row.error is not None and bool(row.error <= row.tolerance)
        row.note = (f"{len(runs)} seeded runs; tolerance: their worst against the mean of the others "
                    f"({spread * 100:.1f}%), at least {'15' if row.kind == 'trajectory' else '10'}%"
                    + (f"; {row.note}" if row.note else ""))
        out.append(row)
    return out
