"""``testbed collective run --fabric agg-leaf --algorithm innetwork``: the allreduce of 4 workers through the
BMv2 aggregation switch (testbed/agg), reported as nccl-tests rows:

* every element of every worker's result equals numpy's int32 sum (#wrong == 0, exact);
* time is each iteration's latest end less its latest start, busbw = size / time x 2 (n-1)/n;
* each worker link carried ~1x the size each way (headers: 1.05x), less than the 2 (n-1)/n = 1.5x a ring must.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from testbed.collective import experiment as X

pytestmark = [pytest.mark.root, pytest.mark.mininet, pytest.mark.bmv2]

SIZE = 65536


def test_innetwork_allreduce_rows_exact_and_busbw_formula(tmp_path):
    args = SimpleNamespace(fabric="agg-leaf", collective="allreduce", algorithm="innetwork", ranks=4, sizes=str(SIZE),
                           placement="packed", jobs=1, pods=False, chunks=4, iters=2, warmup=0, skew=1.0, root=0,
                           link_rate=None, trace=None)
    opts = X.Options.from_args(args)
    result = X.run(opts, tmp_path)
    row, = result["jobs"][0]["rows"]
    assert row["wrong"] == 0 and row["exact"] and row["algorithm"] == "innetwork"
    t = sum(row["times_s"]) / 2
    assert row["time_s"] == pytest.approx(t) and row["busbw_bps"] == pytest.approx(SIZE * 8 / t * 2 * 3 / 4)
    assert 1.0 <= row["bytes_per_link_over_size"] < 1.5
    assert row["real_busbw_gbps"] == pytest.approx(row["busbw_bps"] * result["scale"] / 1e9)
    assert set(result["health"]) >= {"ok", "reasons", "cpu", "load"}
