"""Pure parts of scenarios/long_haul_cnp.py: roles from attributes, distances, the per-case port plan
(BMv2 queue rates and RED thresholds from the link model), saturation verdicts, result rows."""

from __future__ import annotations

import pytest

lh = pytest.importorskip("scenarios.long_haul_cnp")

from testbed.errors import SpecError  # noqa: E402


@pytest.fixture(scope="module")
def G():
    from testbed.topo.spec import build_graph, load_spec

    return build_graph(load_spec(lh.SPEC))


def test_roles_come_from_attributes(G):
    r = lh.roles(G)
    assert [G.nodes[h]["campus"] for h in r.senders] == [0, 0]
    assert [G.nodes[h]["campus"] for h in r.receivers] == [1, 1]
    assert [G.nodes[d]["role"] for d in r.dci] == ["dci", "dci"]
    assert all(r.receiver_tor in G.neighbors(h) for h in r.receivers)


def test_with_distance_sets_the_long_haul_delay_only(G):
    H = lh.with_distance(G, 100)
    (u, v), = [(u, v) for u, v, d in H.edges(data=True) if d["tier"] == "dci"]
    assert H.edges[u, v]["delay_s"] == pytest.approx(500e-6)
    assert H.edges[u, v]["link"].one_way_delay_s == pytest.approx(500e-6)
    assert G.edges[u, v]["distance_m"] == 30e3  # the original is untouched
    zero = lh.with_distance(G, 0)
    assert zero.edges[u, v]["link"].one_way_delay_s == 0


def test_port_plan_puts_the_bottleneck_where_the_case_says(G):
    r = lh.roles(G)
    dil = G.graph["dilation"]
    for case in lh.CASES:
        plan = lh.port_plan(G, case, dil)
        sw, nbr = lh.bottleneck(case, r)
        port = G.edges[sw, nbr]["ports"][sw]
        offered = sum(G.edges[s, next(iter(G.neighbors(s)))]["rate_bps"] for s in r.senders)
        assert plan[sw][port].real_rate_bps < offered  # oversubscribed
        # nothing on the senders' way to it is slower than what the senders offer
        up = plan[next(iter(G.neighbors(r.senders[0])))]
        assert min(p.real_rate_bps for p in up.values()) >= plan[sw][port].real_rate_bps
        for ports in plan.values():
            for p in ports.values():
                assert 0 < p.kmin_pkts < p.kmax_pkts < p.depth_pkts
                assert p.rate_pps == round(dil.rate(p.real_rate_bps) / (8 * lh.FRAME_BYTES))
    sd = lh.port_plan(G, "sender-dci", dil)
    rt = lh.port_plan(G, "receiver-tor", dil)
    d0_port = G.edges[r.dci[0], r.dci[1]]["ports"][r.dci[0]]
    assert rt[r.dci[0]][d0_port].real_rate_bps == 4 * sd[r.dci[0]][d0_port].real_rate_bps
    with pytest.raises(SpecError):
        lh.port_plan(G, "nowhere", dil)


def test_red_thresholds_scale_with_rate(G):
    plan = lh.port_plan(G, "receiver-tor", G.graph["dilation"])
    by_rate = sorted({(p.real_rate_bps, p.kmin_pkts, p.kmax_pkts) for ports in plan.values() for p in ports.values()})
    assert [k for _, k, _ in by_rate] == sorted(k for _, k, _ in by_rate)
    rate, kmin, kmax = by_rate[-1]
    assert kmin == round(100e3 * rate / 25e9 / lh.FRAME_BYTES) and kmax == round(400e3 * rate / 25e9 / lh.FRAME_BYTES)


def test_saturation_verdicts():
    assert lh.saturation({"machine_mean": 50, "switch_max": 30}, None, 1000, 15000) == []
    assert lh.saturation({"machine_mean": 99, "switch_max": 30}, None, 1000, 15000)
    assert lh.saturation({"machine_mean": 50, "switch_max": 97}, None, 1000, 15000)
    assert lh.saturation({"machine_mean": 50, "switch_max": 30}, None, 14000, 15000)
    assert lh.saturation({}, None, 0, 15000, udp_overflows=3)
    dl = {"params": {"delay_s": 0.15}, "emulator_late": 50, "rx_kernel_drops": 0,
          "directions": {"a>b": {"tx_packets": 1000, "mean_late_lateness_s": 0.001}}}
    assert lh.saturation({}, dl, 0, 15000) == []  # late by 1 ms against 150 ms: harmless
    dl["directions"]["a>b"]["mean_late_lateness_s"] = 0.01
    assert lh.saturation({}, dl, 0, 15000)
    dl["directions"]["a>b"]["mean_late_lateness_s"] = 0.0
    dl["rx_kernel_drops"] = 2
    assert lh.saturation({}, dl, 0, 15000)


def test_udp_rcvbuf_errors_parses_proc_net_snmp():
    text = ("Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors\n"
            "Udp: 10 0 3 9 2 0\n")
    assert lh.udp_rcvbuf_errors(text) == 2
    assert lh.udp_rcvbuf_errors("") == 0


def test_row_undoes_the_dilation():
    t = {"goodput_bps": 5e6, "fct_p50_s": 1.0, "fct_p99_s": 2.0, "queue_peak": 40, "queue_mean": 10.0,
         "feedback_delay_s": 0.3, "drops": 0, "marks": 5, "switch_cnps": 0, "cnps_rx": 4, "retransmissions": 0,
         "saturation": []}
    x = lh.row("sender-dci", 30, "ecn", 1000.0, t)
    assert x["throughput_mbps"] == 5000.0 and x["fct_p50_ms"] == 1.0 and x["feedback_delay_ms"] == 0.3
    assert x["emulated"]["fct_p50_ms"] == 1000.0 and not x["emulator_saturated"]
    assert lh.percentile([3, 1, 2], 50) == 2 and lh.percentile([], 99) is None


def test_packet_socket_drops_sums_only_our_switches():
    text = ('p_raw 0 0 *:s1-eth1 * users:(("simple_switch_f",pid=11,fd=10)) skmem:(r0,rb212992,t0,tb212992,f0,w0,o0,bl0,d7)\n'
            'p_raw 0 0 *:s1-eth2 * users:(("simple_switch_f",pid=11,fd=12)) skmem:(r0,rb212992,t0,tb212992,f0,w0,o0,bl0,d2)\n'
            'p_raw 0 0 *:agS1 * users:(("simple_switch_f",pid=99,fd=10)) skmem:(r0,rb212992,t0,tb212992,f0,w0,o0,bl0,d50)\n')
    assert lh.packet_socket_drops(text, [11]) == 9
    assert lh.packet_socket_drops(text, [11, 99]) == 59
    assert lh.packet_socket_drops("", [11]) == 0
    assert lh.saturation({}, None, 0, 15000, switch_socket_drops=1)


def test_losses_no_switch_counted_are_the_emulators():
    assert lh.saturation({}, None, 0, 15000, unexplained_gaps=0) == []
    assert "outside the switch pipelines" in lh.saturation({}, None, 0, 15000, unexplained_gaps=3)[0]
