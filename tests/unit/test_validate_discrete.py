"""The DCQCN rows against the discrete simulation: band from the runs' own spread, verdicts that can fail."""

import functools
from dataclasses import replace

import numpy as np
import pytest

from testbed.models.dcqcn_discrete import simulate
from testbed.validate import rows as R
from testbed.validate.discrete import REFERENCE, as_raw, discrete_rows, fluid_scope
from testbed.validate.replica import FRAME_BYTES, DcqcnRun

RUN = DcqcnRun(kmax_pkts=300, pmax=0.2, limit_pkts=1000, starts_s=(0.0, 0.05), duration_s=0.3)


@functools.cache
def _runs(seeds: int = 6):
    fp = R.fluid_params_for(RUN, FRAME_BYTES)
    return tuple(simulate(fp, RUN.duration_s * RUN.scale, seed=s) for s in range(seeds))


def _by(rows):
    return {r.metric.split(" of flow")[0].split(",")[0]: r for r in rows}


def test_as_raw_reads_back_as_the_run():
    tr = _runs()[0]
    rep = R.replica_series(as_raw(tr))
    assert rep["starts"] == pytest.approx([0.0, RUN.starts_s[1] * RUN.scale])
    late = tr.t >= 2.0
    assert np.allclose(R._step_at(rep["flows"][1]["t"], rep["flows"][1]["rate"], tr.t[late]), tr.rates[late, 1])
    assert rep["flows"][0]["acked"][-1] == tr.delivered[-1, 0] * 1024
    assert np.allclose(rep["queue_pkts"], tr.queue / FRAME_BYTES)


def test_a_run_of_the_process_itself_passes_the_band_rows_a_slower_replica_fails():
    runs = _runs()
    fp = R.fluid_params_for(RUN, FRAME_BYTES)
    member = as_raw(simulate(fp, RUN.duration_s * RUN.scale, seed=100))
    good = _by(discrete_rows(member, RUN, FRAME_BYTES, runs=list(runs)))
    assert all(r.reference == REFERENCE for r in good.values())
    assert good["rate share"].passed and good["aggregate goodput"].passed
    for r in good.values():   # the band is never tighter than the fluid rows' tolerances
        assert r.tolerance >= (R.TRAJECTORY_TOLERANCE if r.kind == "trajectory" else R.SCALAR_TOLERANCE)
    slow_run = replace(runs[0], rates=runs[0].rates * 0.6, delivered=runs[0].delivered * 0.6)
    slow = _by(discrete_rows(as_raw(slow_run), RUN, FRAME_BYTES, runs=list(runs)))
    assert not slow["aggregate goodput"].passed
    own_rows = _by(discrete_rows(as_raw(runs[0]), RUN, FRAME_BYTES, runs=list(runs)))
    assert slow["aggregate goodput"].replica == pytest.approx(0.6 * own_rows["aggregate goodput"].replica, rel=0.01)
    # the rate trajectory's band is wide (the runs' own RMS against the others' mean reaches 0.3-0.5 C), so
    # 0.6 x a run need not fall outside it; it still lies further out than the run itself
    assert slow["rate trajectory"].error > own_rows["rate trajectory"].error


def test_goodput_reference_is_the_median_of_the_runs_and_the_band_their_spread():
    runs = list(_runs())
    rows = _by(discrete_rows(as_raw(runs[0]), RUN, FRAME_BYTES, runs=runs))
    per_run = [_by(R.dcqcn_rows(as_raw(tr), RUN, FRAME_BYTES, model=tr))["aggregate goodput"].replica
               for tr in runs]
    median = np.median(per_run)
    assert rows["aggregate goodput"].expected == pytest.approx(median)
    band = np.percentile([abs(v - median) / median for v in per_run], 95)
    assert rows["aggregate goodput"].tolerance == pytest.approx(max(R.SCALAR_TOLERANCE, band))
    # a replica exactly at the median passes; one a band and a half away does not
    assert rows["aggregate goodput"].passed == (rows["aggregate goodput"].error <= rows["aggregate goodput"].tolerance)


def test_a_fluid_row_the_process_itself_fails_is_out_of_scope_one_it_passes_is_judged():
    """At ~1.4 packets per flow per CNP interval the discrete process gets less goodput than the mean field
    (docs/validation.md, "Open rows"), so the fluid goodput row cannot judge a replica here; the fair share
    is the same in both, so that row stays in scope. The scope is shown, never counted as a pass."""
    runs = list(_runs())
    member = as_raw(simulate(R.fluid_params_for(RUN, FRAME_BYTES), RUN.duration_s * RUN.scale, seed=100))
    fluid = _by(fluid_scope(R.dcqcn_rows(member, RUN, FRAME_BYTES), RUN, FRAME_BYTES, runs))
    assert fluid["rate share"].scope == ""
    assert fluid["aggregate goodput"].scope.startswith("out of this reference's scope here")
    assert f"of {len(runs)} runs of the discrete simulation" in fluid["aggregate goodput"].scope


def test_mark_scope_needs_nine_in_ten_realisations_to_pass():
    row = R.scalar_row("ref", "m", 1.0, 1.0, "")
    assert R.mark_scope(row, [True] * 9 + [False], "p").scope == ""
    assert "8 of 10 runs of the p pass it" in R.mark_scope(row, [True] * 8 + [False] * 2, "p").scope
    assert R.mark_scope(R.scalar_row("ref", "m", 1.0, 1.0, ""), [], "p").scope == ""   # nothing to judge by
