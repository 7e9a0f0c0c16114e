"""A ring allreduce of 4 soft-RDMA ranks on a small replica (2 leaves x 2 hosts, one spine, OVS):

* every element of every rank's result equals the numpy sum of the four inputs (#wrong == 0);
* the reported time and busbw equal what the rank reports' raw timestamps give, recomputed here with
  nccl-tests' formula (size / time x 2 (n-1)/n), and 0 < busbw <= the emulated host-link rate;
* each host link carried at least the 2 (n-1)/n x size the ring must move (switch port counters);
* the run reports emulator health and a loss ledger (sent, lost, counted, unattributed) that names every
  lost frame, none twice (unattributed 0, beyond 0).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from testbed.collective.experiment import fabric_graph
from testbed.collective.placement import place
from testbed.collective.runner import CollectiveFabric, JobRun

pytestmark = [pytest.mark.root, pytest.mark.mininet, pytest.mark.ovs]

RATE = 10e6
SIZE = 262144
FRAME_BYTES = 1082     # a RoCEv2 frame of 1,024 B payload on the wire (Ethernet, IP, UDP, BTH, ICRC)


def test_ring_allreduce_exact_and_busbw_formula(tmp_path):
    G = fabric_graph("small")
    hosts = place(G, 4, "packed")
    runs = ({"collective": "allreduce", "algorithm": "ring", "bytes": SIZE, "chunks": 4},)
    with CollectiveFabric(G, RATE, tmp_path) as fab:
        fab.warm(hosts)
        result = fab.run([JobRun("ar", tuple(hosts), runs=runs, iters=2, warmup=0)], "t", timeout=120)
    job = result["jobs"][0]
    row = job["rows"][0]
    assert row["wrong"] == 0
    reports = [json.loads((tmp_path / "t" / "ar" / f"rank-{r}.json").read_text()) for r in range(4)]
    times = []
    for it in range(2):
        marks = [rep["runs"][0]["iterations"][it] for rep in reports]
        assert all(m["wrong"] == 0 for m in marks)
        times.append(max(m["end"] for m in marks) - max(m["start"] for m in marks))
    t = sum(times) / 2
    assert row["time_s"] == pytest.approx(t, rel=1e-9)
    assert row["busbw_bps"] == pytest.approx(SIZE * 8 / t * 2 * 3 / 4, rel=1e-9)
    assert 0 < row["busbw_bps"] <= RATE * 1.02        # HTB lets a burst through; never much beyond the rate
    carried = {x["link"]: x["bytes"] for x in result["links"]}
    for h in hosts:
        tor = next(iter(G.neighbors(h)))
        assert carried[f"{h}->{tor}"] >= 2 * 2 * 3 / 4 * SIZE, f"{h} sent less than the ring must"
    health = result["health"]
    assert set(health) >= {"ok", "reasons", "cpu", "losses"}
    assert health["losses"]["sent"] > 0 and health["losses"]["lost"] >= 0
    # every lost frame is named (a queue, an interface, a socket, ovs-vswitchd's send socket), none twice
    assert health["losses"]["unattributed"] == 0 and health["losses"]["beyond"] == 0, health["losses"]


def test_failure_schedule_stalls_the_ring_and_it_recovers_exact(tmp_path):
    """A cut of the spine link l1 - s0 on the small fabric (a tree: no other path) from 0.1 s to 0.6 s after
    the start barrier: the ring cannot finish before the link is back, finishes exact after, and the QP
    timeouts it takes lie inside the failure window, so they do not make the run unhealthy."""
    from testbed import failures as F

    G = fabric_graph("small")
    hosts = place(G, 4, "packed")
    runs = ({"collective": "allreduce", "algorithm": "ring", "bytes": SIZE, "chunks": 4},)
    events = F.parse("0.1s:down:s0-l1,600ms:up:s0-l1", G)
    with CollectiveFabric(G, RATE, tmp_path) as fab:
        fab.warm(hosts)
        result = fab.run([JobRun("ar", tuple(hosts), runs=runs, iters=1, warmup=0)], "cut", timeout=120,
                         failures=events)
        cfg = json.loads((tmp_path / "cut" / "ar" / "config-0.json").read_text())
    job, fl = result["jobs"][0], result["failures"]
    assert job["rows"][0]["wrong"] == 0
    assert [x["kind"] for x in fl["log"]] == ["link_down", "link_up"] and fl["error"] is None
    assert fl["log"][0]["at_s"] >= 0.1 and fl["log"][1]["at_s"] >= 0.6 and fl["restored"] == []
    assert fl["log"][0]["answer"]["method"] == "ifdown"       # no controller on a tree: ip link, as testbed fail
    assert job["end"] - fl["t0"] >= fl["log"][1]["at_s"], "the ring finished while its link was down"
    assert fl["timeouts_inside"] >= 1 and fl["timeouts_inside"] + fl["timeouts_outside"] == job["qp_stats"]["timeouts"]
    assert cfg["qp"]["retry_limit"] == F.retry_budget(events, cfg["qp"]["timeout_s"], 120)
    if fl["timeouts_outside"] == 0:
        assert not any("QP timeouts" in r for r in result["health"]["reasons"])


def test_gray_loss_on_an_htb_link_drops_frames_counted_by_its_qdisc_and_the_ring_stays_exact(tmp_path):
    """Gray loss (carrier up) on the spine link s0 - l1 of the small fabric, tc HTB on both ends: 20% of
    its frames dropped both ways from 0.05 s to 0.5 s after the start barrier (a random-drop filter on each
    end, testbed.plan.gray). The ring retransmits and finishes exact; most lost frames are counted by the
    gray class's queue (the rest: ovs-vswitchd's send batch after a drop); the filters are gone after."""
    import subprocess as sp

    from testbed import failures as F
    from testbed.plan import Overrides
    from testbed.plan.gray import gray_links_of

    G = fabric_graph("small")
    hosts = place(G, 4, "packed")
    runs = ({"collective": "allreduce", "algorithm": "ring", "bytes": SIZE, "chunks": 4},)
    with CollectiveFabric(G, RATE, tmp_path) as fab:
        events = F.parse("50ms:gray:s0-l1:20%,500ms:gray:s0-l1:0%", G,
                         gray_links=gray_links_of(G, Overrides(scale=fab.scale, links="rates")))
        fab.warm(hosts)
        result = fab.run([JobRun("ar", tuple(hosts), runs=runs, iters=1, warmup=0)], "gray", timeout=120,
                         failures=events)
        left = [sp.run(["tc", "filter", "show", "dev", fab.rep.intf_name(x, y), "parent", "5:"], capture_output=True,
                       text=True).stdout for x, y in (("s0", "l1"), ("l1", "s0"))]
    job, fl, led = result["jobs"][0], result["failures"], result["health"]["losses"]
    assert job["rows"][0]["wrong"] == 0
    assert [(x["kind"], x["loss"]) for x in fl["log"]] == [("gray", 0.2), ("gray", 0.0)] and fl["error"] is None
    assert fl["log"][0]["answer"]["method"] == "tc"
    assert job["qp_stats"]["retransmissions"] > 0, "20% loss on the ring's spine link for 0.45 s lost nothing"
    # the gray class's queue counted its drops; ovs-vswitchd drops the rest of a send batch after one
    # (ENOBUFS), uncounted: the ledger is noted, not judged, under a schedule (docs/failures.md). The queue
    # counts every frame it drops, the hosts' own (IPv6, ARP) as well as the ring's: a CI run counted 34
    # where the ring lost 32, so a few beyond the ring's loss are those, not an error
    assert 0 < led["counted_drops"] <= led["lost"] + 5, led
    assert led["counted_drops"] >= 0.5 * led["lost"], led
    assert "gray drop" in led["note"]
    assert not any("bpf" in x for x in left), left


def test_a_slow_nic_gates_the_ring_and_the_report_names_it(tmp_path):
    """Rank 1 with a 25G NIC among 100G ones (``--nic-rate 1=25G``): its host link runs at a quarter of the
    others' emulated rate, so a ring allreduce, which moves the same bytes through every rank, cannot have
    a busbw above that rate; the report must name rank 1 as the gate from the measured link utilisation
    (its link far busier than any other host link), and the result stays exact."""
    from testbed.collective import experiment as X

    opts = X.Options(fabric="small", ranks=4, sizes=(SIZE,), iters=1, warmup=0, link_rate_bps=RATE,
                     nic_rates=((1, 25e9),), timeout_s=120)
    result = X.run(opts, tmp_path)
    job = result["jobs"][0]
    row, nics = job["rows"][0], job["nics"]
    assert row["wrong"] == 0
    slow = RATE / 4
    assert nics["ranks"][1]["emulated_bps"] == pytest.approx(slow) and nics["heterogeneous"]
    assert 0 < row["busbw_bps"] <= slow * 1.05, "the ring beat its slowest link"
    assert nics["gate"] == 1 and nics["gate_is_slowest"], nics
    assert nics["gate_utilisation"] >= 2 * nics["others_max_utilisation"], nics
    doc = X.summary(result)["jobs"][0]["nics"]
    assert doc["gate"] == 1 and doc["busbw_over_slowest_nic"] == pytest.approx(row["busbw_bps"] / slow, rel=1e-3)
    print(X.nic_line(nics), f"busbw {row['busbw_bps'] / 1e6:.3f} Mb/s", result["health"]["ok"])


def test_two_jobs_alone_then_together_name_the_links_they_shared(tmp_path):
    """``testbed collective run --jobs 2 --alone`` on fat-tree-k4, both jobs spread over the same four ToRs:
    each job runs alone, then both; the summary has each job's JCTs and slowdown, jobs.png is drawn, and the
    link attribution holds up: on a fat-tree every path between two hosts has the same number of fabric
    hops whatever ECMP picks, so the fabric bytes of the run together equal the two alone runs' (within 5%
    and the frames retransmitted) although the links they took may differ; a link named ``above`` carried
    both rings (twice a hop)."""
    out = tmp_path / "res"
    proc = subprocess.run([sys.executable, "-m", "testbed.cli", "collective", "run", "--fabric", "fat-tree-k4",
                           "--ranks", "4", "--jobs", "2", "--placement", "spread", "--alone", "--sizes", "256KiB",
                           "--iters", "1", "--warmup", "0", "--json", "--out", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout)
    alone = summary["alone"]
    assert set(alone["slowdown"]) == {"job1", "job2"}
    for job in summary["jobs"]:
        assert job["wrong"] == 0
        assert alone["slowdown"][job["name"]] == pytest.approx(job["jct_s"] / alone["jct_alone_s"][job["name"]],
                                                               abs=1e-3)
    metrics = json.loads((out / "metrics.json").read_text())
    rows = metrics["alone"]["rows"]
    alone_total = sum(sum(r["alone_bytes"].values()) for r in rows)
    together_total = sum(r["together_bytes"] for r in rows)
    assert alone_total > 4 * 2 * 262144            # two rings, each hop across the fabric
    # a retransmitted frame (collisions overflow queues) crosses up to 4 fabric links once more
    resent = sum(j["qp_stats"]["retransmissions"] for j in metrics["jobs"]) + sum(alone["retransmissions"].values())
    slack = 0.05 * alone_total + resent * FRAME_BYTES * 4
    assert abs(together_total - alone_total) <= slack, (together_total, alone_total, resent)
    # a ring hop moves the same bytes on every link it takes: a link carrying both rings carried twice
    hop = max(b for r in rows for b in r["alone_bytes"].values())
    assert all(r["together_bytes"] > 1.5 * hop for r in rows if r["link"] in alone["above_links"])
    assert (out / "jobs.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
