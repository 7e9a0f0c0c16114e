"""Pure parts of the failover bench and the fabric_failover scenario (no root)."""

from __future__ import annotations

import pytest

from testbed.bench import failover as bench
from testbed.errors import UsageError
from testbed.links.probe import outage
from testbed.routing import failover as scen
from testbed.routing.brain import RoutingBrain, route_dict
from tests.unit.test_routing_brain import fat_tree


def test_max_over_mean():
    assert bench.max_over_mean([10, 10, 10, 10]) == 1.0
    assert bench.max_over_mean([30, 10, 10, 10]) == pytest.approx(2.0)
    assert bench.max_over_mean([0, 0]) == float("inf")


def test_pod_pairs_and_flow_links_and_cut_candidate():
    G = fat_tree(4)
    a, b = bench.pod_pairs(G)
    assert a == ["h0", "h1", "h2", "h3"] and b == ["h12", "h13", "h14", "h15"]
    # counters: the stream h0 -> h15 went t0 -> a1 -> cr3 -> a7 -> t7
    hops = [("t0", "a1"), ("a1", "cr3"), ("cr3", "a7"), ("a7", "t7")]
    before = {}
    after = {}
    for u, v in hops + [("t0", "h0")]:
        p = str(G.edges[u, v]["ports"][u])
        before.setdefault(u, {})[p] = {"tx_bytes": 1000, "neighbour": v}
        after.setdefault(u, {})[p] = {"tx_bytes": 1000 + 50000, "neighbour": v}
    after["a0"] = {"3": {"tx_bytes": 10, "neighbour": "cr0"}}
    links = bench.flow_links(G, before, after, 20000)
    assert sorted(links) == sorted(hops)  # host links and quiet ports are left out
    brain = RoutingBrain(G)
    brain.compute_all()
    routes = [route_dict(r) for r in brain.routes.values()]
    prefix = f"{G.nodes['h15']['ip']}/32"
    assert bench.cut_candidate(G, links, routes, prefix) == ("a1", "cr3")  # highest switch with ECMP
    assert bench.cut_candidate(G, [("cr3", "a7")], routes, prefix) is None  # a core has one way down


def test_pod_pairs_needs_pods():
    G = fat_tree(4)
    for h in G:
        G.nodes[h].pop("pod", None)
    with pytest.raises(UsageError, match="pods"):
        bench.pod_pairs(G)


def test_summarize_keys():
    runs = [{"outage_ms": v} for v in (10, 20, 30, 40)]
    ecmp = {"select": {"pods": {"max_over_mean": 1.2}, "one_pair": {"max_over_mean": 4.0}}}
    sw = [{"outage_ms": 5, "rejoin_lost": 0}, {"outage_ms": 7, "rejoin_lost": 3}]
    fast = [{"outage_ms": 2, "controller_reaction_ms": 20.0, "cut_command_ms": 1.5},
            {"outage_ms": 4, "controller_reaction_ms": 30.0, "cut_command_ms": 2.5}]
    doc = bench.summarize(runs, fast, ecmp, sw)
    assert doc["controller_outage_ms_median"] == 25 and doc["controller_outage_ms_p95"] == pytest.approx(38.5)
    assert doc["fast_failover_outage_ms_median"] == 3
    assert doc["ecmp_max_over_mean"] == {"select": {"pods": 1.2, "one_pair": 4.0}}
    assert doc["switch_loss_outage_ms_median"] == 6 and doc["switch_loss_rejoin_lost_max"] == 3
    assert doc["repetitions"] == 2
    assert doc["fast_failover_port_status_ms_median"] == 25 and doc["fast_failover_cut_command_ms_median"] == 2
    line = bench.report_lines(bench.summarize([], fast, {}), 2)[0]
    assert "port status reached the controller a median 25.0 ms" in line and "command took 2.0 ms" in line


def test_cut_timeline_places_the_loss_against_the_cut_command():
    """Probes every 0.5 ms from t=10 s; the cut command ran 10.100-10.102 s; probes sent 10.0995-10.1245 s
    were lost (one in flight before the command began, the last 24.5 ms after), plus a stray loss
    earlier that is not the cut's; the restore came at 10.5 s."""
    send = [10.0 + i * 0.0005 for i in range(1000)]
    lost = set(range(199, 250)) | {20}
    got = [i for i in range(1000) if i not in lost]
    t = bench.cut_timeline(send, outage(send, got, 0.0005, window=(10.098, 10.5)), 10.100, 10.102)
    assert t["cut_command_ms"] == pytest.approx(2.0)
    assert t["first_lost_ms"] == pytest.approx(-0.5) and t["last_lost_ms"] == pytest.approx(24.5)
    none = outage(send, list(range(1000)), 0.0005, window=(10.098, 10.5))
    assert bench.cut_timeline(send, none, 10.1, 10.102)["first_lost_ms"] is None


def test_p4_figures_leave_out_trials_that_could_not_measure():
    run = lambda ms, problems=(): {"outage_ms": ms, "detect_ms": 1.0, "repaired_ms": ms, "table_ops": 7,  # noqa: E731
                                   "errors": [], "problems": list(problems)}
    doc = bench.summarize_p4([run(4.0), run(6.0), run(0.0, ["the stream sent nothing"])])
    assert (doc["p4_trials"], doc["p4_valid"]) == (3, 2)
    assert doc["p4_outage_ms_median"] == 5.0  # the paused trial's 0 ms is not an outage figure
    lines = bench.report_lines(bench.summarize([], [], {}, p4=doc["p4_runs"]), 3)
    assert any("2/3 cuts valid" in line for line in lines)


def test_uplink_balance_counts_only_switches_that_sent_upwards():
    G = fat_tree(4)
    src = [h for h in G if G.nodes[h].get("role") == "host" and G.nodes[h].get("pod") == G.nodes["a0"]["pod"]][:1]
    tor = next(iter(G.neighbors(src[0])))
    ups = [n for n in G.neighbors(tor) if G.nodes[n].get("tier", 0) > G.nodes[tor].get("tier", 0)]
    doc = lambda sent: {tor: {str(G.edges[tor, n]["ports"][tor]): {"tx_bytes": b, "neighbour": n}  # noqa: E731
                              for n, b in zip(ups, sent, strict=True)}}
    out = bench.uplink_balance(G, src, doc([0, 0]), doc([300, 100]))
    assert out["max_over_mean"] == pytest.approx(1.5)  # 300 / mean(300, 100)
    assert list(out["max_over_mean_per_tier"]) == [f"{G.nodes[tor]['role']}->{G.nodes[ups[0]]['role']}"]


def test_scenario_flow_analysis():
    ip_of = {"h0": "10.0.0.1", "h1": "10.0.0.2", "h2": "10.0.0.3"}
    send_docs = {h: {"dsts": [ip for o, ip in ip_of.items() if o != h], "interval": 0.1,
                     "send_times": [100 + 0.1 * i for i in range(10)]} for h in ip_of}
    recv_docs = {h: {"src": [], "seq": [], "rx_ns": []} for h in ip_of}
    for src in ip_of:
        for dst in ip_of:
            if src == dst:
                continue
            for i in range(10):
                if (src, dst) == ("h0", "h2") and 3 <= i < 6:
                    continue  # lost while the link was down
                doc = recv_docs[dst]
                doc["src"].append(ip_of[src])
                doc["seq"].append(i)
                doc["rx_ns"].append(int((100 + 0.1 * i + 0.001) * 1e9))
    flows = scen.flow_table(send_docs, recv_docs, ip_of)
    assert len(flows) == 6
    out = scen.flow_outages(flows, (100.25, 100.65))
    assert out[("h0", "h2")]["lost_in_window"] == 3 and out[("h0", "h2")]["outage_ms"] == pytest.approx(300)
    assert sum(o["lost"] for o in out.values()) == 3
    edges, series = scen.throughput_series(flows, 100.0, 101.0, 100, bin_s=0.5)
    assert edges == [0.0, 0.5]
    assert series[("h0", "h1")] == [pytest.approx(5 * 800 / 0.5 / 1e6)] * 2
    assert series[("h0", "h2")][0] < series[("h0", "h1")][0]


def test_scenario_path_changes_from_the_brain():
    G = fat_tree(4)
    hs = ["h0", "h4", "h15"]
    before = scen.brain_paths(G, hs)
    during = scen.brain_paths(G, hs, [("a0", "cr0")])
    assert len(before[("h0", "h15")]) == 4 and len(during[("h0", "h15")]) == 3
    changes = scen.path_changes(before, during, before)
    assert ("h0", "h15") in changes["changed_on_failure"]
    assert len(changes["same_as_before_after_restore"]) == 6
    assert scen.pick_link(G, None) == ("a0", "cr0")
    with pytest.raises(Exception, match="--link"):
        scen.pick_link(G, "h0,h9")


def test_split_outage_keeps_wall_clock_control_plane_out_of_the_dilation():
    # 70 ms emulated outage, of which 20 ms detection + 5 ms push ran on the wall clock
    t = scen.split_outage(70.0, 20.0, 5.0, scale=1000, control_latency_ms=2.0)
    assert t["control_plane_ms_wall"] == 25.0 and t["data_plane_ms_emulated"] == 45.0
    assert t["outage_ms_real_estimate"] == pytest.approx(25.0 + 2.0 + 0.045)
    # detection timed from the start of the cut command can exceed what the flows lost: capped
    t = scen.split_outage(10.0, 20.0, 5.0, scale=10)
    assert t["data_plane_ms_emulated"] == 0.0 and t["control_plane_ms_wall"] == 10.0
    assert t["control_plane_measured_ms_wall"] == 25.0 and t["outage_ms_real_estimate"] == 10.0
