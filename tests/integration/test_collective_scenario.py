"""``testbed run collective --quick``: every collective and the trace replay complete on the small replica
with every element exact, the summary carries the figures and the emulator's verdict, and the results
folder has the metrics and the plot."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from testbed.scenario import REPO_ROOT
from tests.integration.runhealth import check_health

pytestmark = [pytest.mark.root, pytest.mark.mininet, pytest.mark.ovs]


def test_quick_scenario(tmp_path):
    out = tmp_path / "res"
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "scenarios" / "collective.py"), "--quick", "--json",
                           "--out", str(out)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout)
    assert summary["wrong"] == 0
    keys = summary["busbw_over_link"]
    for coll in ("allreduce/ring", "allreduce/tree", "reduce_scatter", "all_gather", "broadcast", "all_to_all"):
        assert any(k.startswith(coll) for k in keys), coll
    assert all(0 < v <= 1.02 for v in keys.values())
    assert len(summary["trace_step_time_s"]) == 2 and all(t > 0 for t in summary["trace_step_time_s"])
    assert isinstance(summary["emulator_ok"], bool) and "load" in summary
    assert (out / "metrics.json").exists() and (out / "busbw.png").exists()
    assert json.loads((out / "status.json").read_text())["status"] == "ok"
    ev = check_health(json.loads((out / "metrics.json").read_text()), proc.stderr, healthy=False)
    assert set(ev["parts"]) == {"sweep", "trace"} and ev["unaccounted"] is not None
    assert summary["emulator_ok"] == (not ev["reasons"])
