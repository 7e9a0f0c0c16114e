"""`testbed run demo --quick`: the README's demo works end to end (spine-leaf, controller, ping, iperf3)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.runhealth import check_health, until_healthy

pytestmark = [pytest.mark.root, pytest.mark.mininet, pytest.mark.ovs]

REPO = Path(__file__).resolve().parents[2]


def test_demo_quick(tmp_path, quiet_cpu):
    env = dict(os.environ, TESTBED_LOCK_WAIT=os.environ.get("TESTBED_LOCK_WAIT", "900"))

    def run(attempt):
        out = tmp_path / str(attempt)
        res = subprocess.run([sys.executable, "-m", "testbed.cli", "run", "demo", "--quick", "--json",
                              "--out", str(out)], cwd=REPO, capture_output=True, text=True, timeout=1200,
                             env=env)
        assert res.returncode == 0, res.stderr[-3000:]
        return json.loads((out / "metrics.json").read_text()), (res, out)

    metrics, (res, out), seen = until_healthy(run, quiet_cpu)
    summary = json.loads(res.stdout)
    assert summary["pairs"] == 12 and summary["pairs_reachable"] == 12
    # TCP over the shaped path gets a fair share of the dilated line rate, and never more than it.
    assert 0.2 < summary["iperf_fraction_of_line_rate"] < 1.1
    for name in ("config.json", "metrics.json", "summary.json", "controller.log"):
        assert (out / name).exists(), name
    assert metrics["iperf"]["src"] == "h0"
    # OVS and the controller are the emulator's processes here; their CPU is in the evidence
    ev = check_health(metrics, res.stderr, seen=seen)
    assert "ovs-vswitchd" in ev["cpu"] and "controller" in ev["cpu"] and summary["emulator_ok"] is True
