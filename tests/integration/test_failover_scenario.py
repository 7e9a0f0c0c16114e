"""``testbed run fabric_failover --quick --failures ...``: the scenario runs end to end, shaped (dilated) like
every other replica, from outside the repository folder, under a two-cut failure schedule (a link down and
up, then a core switch crash and recovery), and its figures make sense for each cut."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from testbed.routing.precut import CAUSES
from testbed.scenario import REPO_ROOT
from tests.integration.runhealth import check_health, until_healthy

pytestmark = [pytest.mark.root, pytest.mark.mininet, pytest.mark.ovs, pytest.mark.slow]


SCHEDULE = "2s:down:a0-cr0,3.5s:up:a0-cr0,5s:crash:cr2,7s:recover:cr2"


def test_fabric_failover_quick(tmp_path, quiet_cpu):
    def run(attempt):
        # started from another folder with a relative --out: the controller and the probes must find it
        cwd = tmp_path / str(attempt)
        cwd.mkdir()
        res = subprocess.run([sys.executable, str(REPO_ROOT / "scenarios" / "fabric_failover.py"), "--quick",
                              "--json", "--out", "out", "--failures", SCHEDULE], cwd=cwd, capture_output=True,
                             text=True, timeout=600 + float(os.environ.get("TESTBED_LOCK_WAIT", 0)))  # may queue
        assert res.returncode == 0, res.stderr[-2000:]
        return json.loads((cwd / "out" / "metrics.json").read_text()), (res, cwd / "out")

    metrics, (res, out), seen = until_healthy(run, quiet_cpu)
    summary = json.loads(res.stdout)
    # nothing lost before the cut (a loss the emulator caused, or one without a counted cause, makes the run
    # unhealthy and until_healthy runs it again; the cut's own datagrams still in flight are the cut's); the
    # counters were read before the cut, so a loss would have had its cause named
    assert summary["lost_before_cut"] == 0
    pre = summary["pre_cut"]
    # the counters count only when their read ended before the cut; a read that ended late says so, and
    # then nothing may have been lost before the cut (a loss would be unattributed: an unhealthy run)
    if pre["counters_before_cut"]:
        assert set(pre["counters"]) == set(CAUSES), pre
    else:
        assert pre["counters"] is None and pre["lost"] == 0 and pre["counters_read_s"][1] > pre["cut_s"], pre
    assert pre["transit_ms_wall"]["n"] > 0 and pre["cut_s"] - pre["window_end_s"] == pytest.approx(0.05, abs=1e-3)
    # the index metrics.json carries the run's health
    ev = check_health(metrics, res.stderr, seen=seen)
    assert {"ovs-vswitchd", "controller"} <= set(ev["cpu"]) and summary["emulator_ok"] is True
    assert summary["flows"] == 240 and summary["ping_all_loss_pct"] == 0.0
    # shaped like every other replica: the spec's 100G at scale 1000
    assert summary["scale"] == 1000 and summary["link_rate_emulated_bps"] == pytest.approx(100e6)
    assert json.loads((out / "plan.json").read_text())  # the plan it ran is recorded
    assert summary["resolution_ms_emulated"] == 50 and summary["resolution_ms_real"] == pytest.approx(0.05)
    # the schedule ran on time, all of it, and left nothing to restore; every interface it touched is up
    # again (the scenario checks them: both ends of a0-cr0 and of cr2's four links)
    fl = summary["failures"]
    assert [x["event"] for x in fl["log"]] == ["2s link_down a0-cr0", "3.5s link_up a0-cr0", "5s switch_down cr2",
                                               "7s switch_up cr2"]
    assert all(abs(x["at_s"] - x["planned_s"]) < 0.5 for x in fl["log"]), fl["log"]
    assert fl["error"] is None and fl["skipped"] == [] and fl["restored"] == []
    assert summary["interfaces_checked_up"] == 10
    # each cut hit some flows, not all of them; every flow is back on its old paths afterwards
    link, crash = summary["cuts"]
    assert (link["kind"], link["target"], crash["kind"], crash["target"]) == ("link", ["a0", "cr0"], "switch", ["cr2"])
    for cut, down_s in ((link, 1.5), (crash, 2.0)):
        assert 0 < cut["flows_affected"] < summary["flows"], cut
        assert 0 < cut["flows_path_set_changed_on_failure"] < summary["flows"], cut
        assert cut["route_messages_on_failure"] > 0 and cut["restore_reaction_ms_wall"] is not None, cut
        # the outage is a reroute, not the whole time the link (switch) was down
        assert 0 < cut["outage_ms_emulated_max"] < down_s * 1e3 / 2, cut
        # wall-clock control plane and dilated data plane are reported apart
        assert cut["control_plane_measured_ms_wall"] == pytest.approx(
            cut["detection_ms_wall"] + cut["controller_push_ms_wall"], abs=0.02)
        assert cut["control_plane_ms_wall"] <= cut["outage_ms_real_estimate"] <= cut["outage_ms_emulated_median"]
    # a core carries more than one agg-core link: its crash hits more flows than one of its links
    assert crash["links_reported"] == 4 and crash["flows_affected"] > link["flows_affected"]
    assert summary["flows_affected"] == link["flows_affected"] and summary["cut_at_s"] == link["at_s"]
    assert summary["flows_back_to_original_paths"] == summary["flows"]
    assert summary["controller_handler_errors"] == 0
    flows = json.loads((out / "flows.json").read_text())
    assert len(flows) == 240 and all(f["received"] > 0 and len(f["cuts"]) == 2 for f in flows)
    assert sum(f["cuts"][1]["lost_in_window"] > 0 for f in flows) == crash["flows_affected"]
    assert len(json.loads((out / "failures.json").read_text())["log"]) == 4
    assert (out / "throughput.png").stat().st_size > 10_000
