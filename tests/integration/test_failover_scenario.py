"""``testbed run fabric_failover --quick``: the scenario runs end to end, shaped (dilated) like every other
replica, from outside the repository folder, and its figures make sense."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from testbed.scenario import REPO_ROOT
from tests.integration.runhealth import check_health

pytestmark = [pytest.mark.root, pytest.mark.mininet, pytest.mark.ovs, pytest.mark.slow]


def test_fabric_failover_quick(tmp_path):
    # started from another folder with a relative --out: the controller and the probes must find it
    res = subprocess.run([sys.executable, str(REPO_ROOT / "scenarios" / "fabric_failover.py"), "--quick", "--json",
                          "--out", "out"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=600 + float(os.environ.get("TESTBED_LOCK_WAIT", 0)))  # it may queue for the lock
    assert res.returncode == 0, res.stderr[-2000:]
    summary = json.loads(res.stdout)
    out = tmp_path / "out"
    # nothing lost before the cut; the index metrics.json carries the run's health
    assert summary["lost_before_cut"] == 0
    ev = check_health(json.loads((out / "metrics.json").read_text()), res.stderr)
    assert {"ovs-vswitchd", "controller"} <= set(ev["cpu"]) and summary["emulator_ok"] is True
    assert summary["flows"] == 240 and summary["ping_all_loss_pct"] == 0.0
    # shaped like every other replica: the spec's 100G at scale 1000
    assert summary["scale"] == 1000 and summary["link_rate_emulated_bps"] == pytest.approx(100e6)
    assert json.loads((out / "plan.json").read_text())  # the plan it ran is recorded
    assert summary["resolution_ms_emulated"] == 50 and summary["resolution_ms_real"] == pytest.approx(0.05)
    # the cut link carried some flows, not all of them; every flow is back on its old paths afterwards
    assert 0 < summary["flows_affected"] < summary["flows"]
    assert 0 < summary["flows_path_set_changed_on_failure"] < summary["flows"]
    assert summary["flows_back_to_original_paths"] == summary["flows"]
    assert summary["controller_handler_errors"] == 0 and summary["route_messages_on_failure"] > 0
    # the outage is a reroute, not the whole time the link was down
    down_ms = (summary["restore_at_s"] - summary["cut_at_s"]) * 1e3
    assert summary["outage_ms_emulated_max"] < down_ms / 2
    # wall-clock control plane and dilated data plane are reported apart
    assert summary["control_plane_measured_ms_wall"] == pytest.approx(
        summary["detection_ms_wall"] + summary["controller_push_ms_wall"], abs=0.02)
    assert summary["control_plane_ms_wall"] <= summary["outage_ms_emulated_median"] + 0.01
    assert summary["control_plane_ms_wall"] <= summary["outage_ms_real_estimate"] <= summary["outage_ms_emulated_median"]
    flows = json.loads((out / "flows.json").read_text())
    assert len(flows) == 240 and all(f["received"] > 0 for f in flows)
    assert (out / "throughput.png").stat().st_size > 10_000
