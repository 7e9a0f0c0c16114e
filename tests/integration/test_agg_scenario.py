"""The innetwork_allreduce scenario's --quick run (leaf, 4 and 8 workers, 0.5 MB, loss 0/1 %, 1-2 jobs):
every row correct, the documented JSON shape, and in-network aggregation moving ~1x the tensor per worker
link where the ring moves ~2(n-1)/n (ratios, not times, are asserted)."""

from __future__ import annotations

import importlib
import json

import pytest

from tests.integration.runhealth import check_health

pytestmark = [pytest.mark.root, pytest.mark.mininet, pytest.mark.bmv2, pytest.mark.slow]

ROW_KEYS = {"workers", "size_mb", "loss_pct", "jobs", "mode", "time_s", "exact", "bytes_per_worker_link"}


def test_quick_run(tmp_path, capsys):
    scenario = importlib.import_module("scenarios.innetwork_allreduce")
    assert scenario.main(["--quick", "--out", str(tmp_path)]) == 0
    # one health part per replica (leaf, 4 and 8 workers), BMv2's CPU in each; a switch row whose worker
    # links BMv2 could not fill (the SAT column) is a reason: at load 6-9 the 8-worker rows were (x0 at 100 %
    # of a core), so health is asserted consistent here, not healthy
    ev = check_health(json.loads((tmp_path / "metrics.json").read_text()), capsys.readouterr().out, healthy=False)
    assert set(ev["parts"]) == {"leaf-4", "leaf-8"}
    assert all(any((c["cpu_fraction"] or 0) > 0 for c in p["cpu"].values()) for p in ev["parts"].values())
    saturated = sum(r["bmv2_saturated"] for r in json.loads((tmp_path / "summary.json").read_text())["rows"])
    assert sum("BMv2 the limit" in r for r in ev["reasons"]) == saturated
    doc = json.loads((tmp_path / "summary.json").read_text())
    rows = doc["rows"]
    assert all(ROW_KEYS <= set(r) and r["correct"] and r["exact"] for r in rows)
    assert {r["mode"] for r in rows} == {"switch", "ring"} and {r["workers"] for r in rows} == {4, 8}
    for r in rows:
        n = r["workers"]
        if r["mode"] == "switch":
            assert 1.0 <= r["bytes_per_link_over_tensor"] < 1.25
        else:
            assert 2 * (n - 1) / n <= r["bytes_per_link_over_tensor"] < 2 * (n - 1) / n * 1.3
    key = "leaf/8w/0.5MB/loss0/jobs1"
    assert doc["bytes_ratio_vs_ring"][key] < 0.7 and key in doc["speedup_vs_ring"]
    assert (tmp_path / "speedup.png").is_file()
