"""``testbed run collective --quick``: every collective and the trace replay complete on the small replica
with every element exact, the summary carries the figures and the emulator's verdict, and the results
folder has the metrics and the plot. Part 4 (acceptance after SONiC's RoCEv2 plan, fat-tree-k4, 8 ranks):
the ring allreduce is exact across a cut of a link it loaded, the cut fell inside the job; 7:1 incast
per-QP fairness deviation < 30%; the 8-rank all-to-all passes (exact). The sweep's DCQCN data (rank 0's
first 1500 RoCEv2 frames at its host link) passes ``roce check --expect-ect``: all ECT, 0 violations. Part 5
(in-network allreduce through the BMv2 aggregation switch, agg-leaf, 4 ranks): both quick sizes exact, algbw > 0,
the larger size takes longer, the ring's figure at the same size beside it, and busbw.png has its second
panel (ring and in-network as fractions of their links)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from testbed.roce.sample import DATA_SAMPLE_FRAMES
from testbed.scenario import REPO_ROOT
from tests.integration.runhealth import check_health

pytestmark = [pytest.mark.root, pytest.mark.mininet, pytest.mark.ovs, pytest.mark.bmv2]


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
    png = (out / "busbw.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and int.from_bytes(png[16:20], "big") > 1200, "no part-5 panel"
    # the scenario's own DCQCN data is ECN-capable and passes roce check on a bounded sample of rank 0
    dc = summary["data_check"]
    assert dc["capture"] == "data-h0.pcap" and (out / "small" / "sweep" / "data-h0.pcap").exists(), dc
    assert dc["packets"] == DATA_SAMPLE_FRAMES and dc["cut"], dc      # the sweep sends more: -c stopped it
    assert dc["data_packets"] > 0 and dc["ect"] and dc["not_ect"] == 0, dc
    assert dc["violations"] == 0 and dc["ok"] and dc["reasons"] == [], dc
    said = " ".join(proc.stderr.split())                                 # the console may wrap the line
    assert f"sweep: data sample data-h0.pcap: {DATA_SAMPLE_FRAMES} frames" in said and "expect-ect ok" in said
    assert json.loads((out / "status.json").read_text())["status"] == "ok"
    acc = summary["acceptance"]
    cut = acc["link_failure"]
    assert cut["pass"] and cut["wrong"] == 0, cut
    assert cut["link_bytes_without"] > 0, "the cut link carried none of the ring in the run without failure"
    # the paths repeat between runs (source ports from QP numbers), so the link carried the ring until the cut
    assert cut["link_bytes_with_failure"] > 0 and len(cut["jct_without_runs_s"]) == 2
    assert 0 < cut["cut_at_s"] < cut["jct_with_s"], "the cut did not fall inside the job"
    assert cut["jct_without_s"] > 0 and cut["impact"] == pytest.approx(cut["jct_with_s"] / cut["jct_without_s"],
                                                                       abs=2e-3)
    assert len(cut["restored"]) == 1 and cut["restored"][0].endswith(f"link_up {cut['link'][0]}-{cut['link'][1]}")
    incast = acc["incast"]
    assert len(incast["rates_bps"]) == 7 and incast["wrong"] == 0
    assert incast["deviation"] < 0.30 and incast["pass"], incast
    assert acc["alltoall"]["pass"] and acc["alltoall"]["wrong"] == 0 and acc["alltoall"]["ranks"] == 8
    inn = summary["innetwork"]
    assert inn["fabric"] == "agg-leaf" and inn["ranks"] == 4 and inn["wrong"] == 0 and inn["exact"], inn
    assert list(inn["sizes"]) == ["65536", "262144"], inn["sizes"]
    small, big = inn["sizes"]["65536"], inn["sizes"]["262144"]
    for x in (small, big):
        assert x["wrong"] == 0 and x["exact"] and x["algbw_bps"] > 0 and len(x["times_s"]) == 2, x
        assert all(t > 0 for t in x["times_s"]) and x["ring_algbw_over_link"] > 0, x
        assert 1.0 <= x["bytes_per_link_over_size"] < 1.5, x        # ~1x the size per link, less than a ring's 1.5x
    assert big["time_s"] > small["time_s"], (small["times_s"], big["times_s"])
    assert "# in-network (agg-leaf, 4 ranks) vs ring (small)" in said and "# allreduce (innetwork)" in said
    ev = check_health(json.loads((out / "metrics.json").read_text()), proc.stderr, healthy=False)
    assert set(ev["parts"]) == {"sweep", "trace", "ring-baseline-1", "ring-baseline-2", "ring-failure", "incast",
                                "alltoall", "innetwork"} and ev["unaccounted"] is not None
    assert summary["emulator_ok"] == (not ev["reasons"])
