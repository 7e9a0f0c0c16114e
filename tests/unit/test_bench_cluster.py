"""`testbed bench cluster` and the cluster UDP load check: the pure parts (pairs, counters, verdicts, flags)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from testbed.bench import cluster as B
from testbed.cluster import checks
from testbed.cluster.partition import DEFAULT_IMBALANCE, partition
from testbed.emu.cpustat import cpu_times_of
from testbed.errors import EmulationError, SpecError
from testbed.topo.spec import build_graph, load_spec, resolve_spec

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def k4():
    return build_graph(load_spec(resolve_spec("fat-tree-k4")))


def test_load_pairs_are_disjoint_cross_the_two_way_cut_and_alternate(k4):
    part = partition(k4, 2, DEFAULT_IMBALANCE)   # the partition two workers get
    pairs = checks.load_pairs(k4, DEFAULT_IMBALANCE, 8)
    ends = [h for p in pairs for h in p]
    assert len(ends) == len(set(ends)) == 16
    assert all(part.assign[s] != part.assign[d] for s, d in pairs)
    assert [part.assign[s] for s, _ in pairs] == [0, 1] * 4       # both directions: both workers send
    assert checks.load_pairs(k4, DEFAULT_IMBALANCE, 3) == pairs[:3]


@pytest.mark.parametrize("flows", [0, -1, 9])
def test_load_pairs_refuse_a_count_the_fabric_cannot_pair(k4, flows):
    with pytest.raises(SpecError, match=r"--udp-flows: expected 1\.\.8"):
        checks.load_pairs(k4, DEFAULT_IMBALANCE, flows)


def test_cpu_busy_from_two_proc_stat_readings():
    first = "cpu  100 0 50 800 50 0 0 0 0 0\n"
    second = "cpu  400 0 150 900 50 0 0 0 0 0\n"     # +300 user +100 system +100 idle of 500
    assert cpu_times_of(first) == [100, 0, 50, 800, 50, 0, 0, 0]
    assert checks.cpu_busy("noise\n" + first + second) == 0.8
    assert checks.cpu_busy(first) is None
    assert cpu_times_of("intr 1 2\n") is None


def _report(sent, lost, seconds=10.0):
    return {"start": {"test_start": {"blksize": 64}},
            "end": {"sum": {"packets": sent, "lost_packets": lost, "seconds": seconds}}}


def test_udp_rate_counts_delivered_as_sent_less_lost():
    r = checks.udp_rate(_report(20000, 5000, 10.0), 10.0)
    assert (r["offered_pps"], r["delivered_pps"]) == (2000.0, 1500.0)
    with pytest.raises(EmulationError, match="unable to connect"):
        checks.udp_rate({"start": {}, "end": {}, "error": "unable to connect to server"}, 10.0)
    with pytest.raises(EmulationError, match="no UDP summary"):
        checks.udp_rate({"end": {}}, 10.0)


def test_load_summary_sums_flows_and_fails_when_one_did_not_report():
    flows = [checks.udp_rate(_report(20000, 5000), 10), checks.udp_rate(_report(10000, 0), 10)]
    s = checks.load_summary(flows, 2000.0)
    assert (s["asked_pps"], s["offered_pps"], s["delivered_pps"], s["loss_pct"], s["passed"]) == \
        (4000.0, 3000.0, 2500.0, 16.67, True)
    s = checks.load_summary(flows + [{"why": "no report"}], 2000.0)
    assert (s["reported"], s["flows"], s["passed"], s["delivered_pps"]) == (2, 3, False, 2500.0)


def _doc(build, up, pps, busy):
    return {"timings": {"build_s": build, "up_s": up},
            "udp_load": {"delivered_pps": pps, "cpu_busy": {f"w{i}": b for i, b in enumerate(busy)}}}


def test_compare_ratios_and_goals():
    c = B.compare(_doc(100.0, 150.0, 2000.0, [1.0]), _doc(40.0, 90.0, 3600.0, [0.97, 0.8]))
    assert c["build"]["build_s"] == {"a_s": 100.0, "b_s": 40.0, "ratio": 0.4, "goal_met": True}
    assert c["build"]["up_s"]["ratio"] == 0.6
    p = c["pps"]
    assert (p["ratio"], p["a_busy"], p["b_busy"], p["health_equal"], p["goal_met"]) == (1.8, 1.0, 0.97, True, True)
    slow = B.compare(_doc(100.0, 100.0, 2000.0, [1.0]), _doc(160.0, 151.0, 3000.0, [1.0, 1.0]))
    assert not slow["build"]["build_s"]["goal_met"] and not slow["build"]["up_s"]["goal_met"]
    assert slow["pps"]["ratio"] == 1.5 and not slow["pps"]["goal_met"]


def test_a_ratio_met_at_unequal_health_is_not_the_goal_and_says_so():
    c = B.compare(_doc(1, 1, 1000.0, [0.6]), _doc(1, 1, 2000.0, [1.0, 0.9]))
    assert c["pps"]["ratio"] == 2.0 and not c["pps"]["health_equal"] and not c["pps"]["goal_met"]
    assert c["pps"]["health_note"].startswith("UNEQUAL health") and "A not saturated, B saturated" in \
        c["pps"]["health_note"]
    missing = B.compare({"timings": {}}, {"timings": {}})
    assert missing["pps"]["ratio"] is None and not missing["pps"]["goal_met"]
    assert missing["pps"]["health_note"] == "CPU busy not measured"
    assert missing["build"]["up_s"]["ratio"] is None


def test_table_has_both_configurations_and_the_verdicts():
    a, b = _doc(100.0, 150.0, 2000.0, [1.0]), _doc(40.0, 90.0, 3600.0, [0.97, 0.8])
    lines = B.table(a, b, B.compare(a, b))
    assert "A: 1 worker" in lines[0] and "B: 2 workers" in lines[0]
    delivered = next(ln for ln in lines if ln.startswith("UDP delivered"))
    assert "2000" in delivered and "3600" in delivered and "1.80" in delivered and ">= 1.7 met" in delivered
    assert "0.97, 0.80" in next(ln for ln in lines if ln.startswith("CPU busy"))


@pytest.mark.parametrize("flags, field", [
    (["--udp-flows", "9"], "--udp-flows"), (["--udp-kpps", "0"], "--udp-kpps"),
    (["--seconds", "1"], "--seconds"), (["--cpus", "3"], "--cpus"), (["--bogus"], "unrecognized arguments"),
    (["--udp-flows", "x"], "--udp-flows"),
])
def test_bad_flags_are_one_line_exit_2(flags, field, tmp_path):
    out = tmp_path / "out"
    res = subprocess.run([sys.executable, "-m", "testbed.cli", "bench", "cluster", *flags, "--out", str(out)], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res
    lines = [ln for ln in res.stderr.splitlines() if ln.strip() and "CPUs kept awake" not in ln]
    assert len(lines) == 1 and field in lines[0], res.stderr
    assert "Traceback" not in res.stderr and not out.exists()   # nothing booted, nothing left behind


def test_cluster_run_refuses_bad_udp_flags_before_building():
    for flags, field in ((["--udp-flows", "20"], "--udp-flows"), (["--udp-flows", "2", "--udp-kpps", "-1"],
                                                                    "--udp-kpps")):
        res = subprocess.run([sys.executable, "-m", "testbed.cli", "cluster", "run", "fat-tree-k4", "--workers",
                              "root@192.0.2.1", *flags], cwd=REPO, capture_output=True, text=True, timeout=120)
        assert res.returncode == 2 and field in res.stderr and "Traceback" not in res.stderr, res
