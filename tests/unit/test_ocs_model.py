"""The optical circuit switch model: circuits, the dark window, the loss budget, protection, tc argv."""

import pytest

from testbed.errors import SpecError
from testbed.ocs import model as m


def test_reconfiguration_darkens_exactly_the_changed_ports_for_the_window():
    o = m.CircuitSwitch(6, reconfig_s=0.02, circuits={1: 2, 5: 6})
    rec = o.set_circuits(1.0, {1: 3, 5: 6})
    assert rec.dark == {1, 2, 3} and rec.end == pytest.approx(1.02)
    assert o.peer(1.0, 1) is None and o.peer(1.019, 3) is None       # dark inside the window
    assert o.carries(1.01, 5, 6) and o.carries(1.01, 6, 5)           # an unchanged circuit keeps light
    assert o.carries(1.0201, 1, 3) and o.carries(1.0201, 3, 1)       # both directions after it
    assert o.peer(1.03, 2) is None                                   # the old peer stays unconnected


def test_no_change_no_window_and_busy_switch_refuses():
    o = m.CircuitSwitch(4, reconfig_s=0.05, circuits={1: 2})
    assert o.set_circuits(0.0, {1: 2}).end == 0.0 and o.carries(0.0, 1, 2)
    o.set_circuits(1.0, {1: 3})
    with pytest.raises(SpecError, match="in progress"):
        o.set_circuits(1.01, {1: 4})
    o.set_circuits(1.06, {1: 4})  # after the window it may change again


@pytest.mark.parametrize("mapping,word", [({1: 1}, "itself"), ({1: 2, 3: 2}, "two circuits"),
                                         ({1: 9}, "1..4"), ({0: 2}, "1..4")])
def test_bad_circuits_name_the_problem(mapping, word):
    with pytest.raises(SpecError, match=word):
        m.CircuitSwitch(4).set_circuits(0.0, mapping)


def test_schedule_applies_due_entries_in_order():
    o = m.CircuitSwitch(4, reconfig_s=0.01, circuits={1: 2})
    o.schedule = [(2.0, {1: 4}), (1.0, {1: 3})]
    assert [r.start for r in o.at(1.5)] == [1.0]
    assert o.carries(1.5, 1, 3)
    o.at(2.5)
    assert o.carries(2.5, 1, 4) and [r.circuits for r in o.history][-1] == {1: 4, 4: 1}


def test_circuit_link_delay_and_loss_budget():
    o = m.CircuitSwitch(2, insertion_loss_db=1.5, latency_s=10e-9)
    lp = o.circuit_link(30_000.0, rate_bps=400e9, budget_db=12.0)
    assert lp.delay_s == pytest.approx(30_000 * 5e-9 + 10e-9)        # 5 us/km fibre + the switch
    assert m.circuit_loss_db(30_000.0) == pytest.approx(30 * 0.25 + 1.5 + 2 * 0.5)
    assert lp.loss is None
    assert o.circuit_link(30_000.0, budget_db=9.0).loss.rate == 1.0  # 10 dB > 9 dB: the circuit is dark


def test_span_link_through_an_ocs_or_plain_fibre():
    from testbed.ocs.model import span_link

    lp = span_link(20_000, budget_db=8.0)             # 5 dB fibre + 1.5 insertion + 1 connectors = 7.5 dB
    assert lp.delay_s == pytest.approx(100e-6 + 10e-9) and lp.loss is None
    with pytest.raises(SpecError, match="budget.*7.5 dB"):
        span_link(20_000, budget_db=7.0, field_name="budget")
    plain = span_link(20_000, budget_db=0.0, through_ocs=False)
    assert plain.one_way_delay_s == pytest.approx(100e-6) and plain.loss is None


def test_protection_switches_only_from_a_dark_working_port():
    o = m.CircuitSwitch(3, reconfig_s=0.02, circuits={1: 2})
    g = m.ProtectionGroup(common=1, working=2, standby=3, detect_s=0.002)
    assert g.on_loss_of_light(o, 1.0, 3) is None                    # standby dark: nothing to do
    rec = g.on_loss_of_light(o, 1.0, 2)
    assert rec.circuits == {1: 3, 3: 1}
    assert m.protection_outage_s(0.002, 0.02) == pytest.approx(0.022)
    assert m.protection_outage_s(0.002, 0.02, extra_fibre_m=10_000) == pytest.approx(0.022 + 50e-6)
    assert m.packet_reroute_outage_s(0.05, 3, 0.06) == pytest.approx(0.21)


def test_tc_argv_for_the_replica_node():
    assert m.ingress_argv("x0-eth1") == [["tc", "qdisc", "replace", "dev", "x0-eth1", "ingress"]]
    assert m.light_argv("x0-eth1", "x0-eth3")[-6:] == ["action", "mirred", "egress", "redirect", "dev", "x0-eth3"]
    assert m.dark_argv("x0-eth2") == ["tc", "filter", "del", "dev", "x0-eth2", "parent", "ffff:", "protocol", "all",
                                      "prio", "1"]


def test_monitor_line_parser():
    from testbed.ocs.node import link_line_dark

    down = "7: x1-eth2@if8: <NO-CARRIER,BROADCAST,MULTICAST,UP,M-DOWN> mtu 1500 qdisc noqueue state LOWERLAYERDOWN"
    up = "7: x1-eth2@if8: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc noqueue state UP mode DEFAULT"
    admin = "7: x1-eth2@if8: <BROADCAST,MULTICAST> mtu 1500 qdisc noqueue state DOWN mode DEFAULT"
    assert link_line_dark(down, "x1-eth2") is True and link_line_dark(admin, "x1-eth2") is True
    assert link_line_dark(up, "x1-eth2") is False and link_line_dark(up, "x1-eth1") is None


def test_dci_protection_graph_and_bad_flags():
    from scenarios import dci_protection as d

    G = d.build_graph("ocs")
    oa, ob = G.graph["ocs"]
    assert G.edges[oa, ob]["tier"] == "working"
    assert {G.edges[oa, n]["ports"][oa]: G.edges[oa, n]["tier"] for n in G.neighbors(oa)} == \
        {1: "campus-dci", 2: "working", 3: "standby"}
    P = d.build_graph("packet")
    assert P.number_of_nodes() == 5 and P.edges[P.graph["working"]]["tier"] == "working"
    # the fibres carry their length: 5 us/km (+ 10 ns through an OCS), emulated by the plan at the scale
    from testbed.plan import Overrides, plan_replica

    assert G.edges[oa, ob]["delay_s"] == pytest.approx(30 * 5e-6 + 10e-9)
    standby = [e for e in G.edges(data=True) if e[2]["tier"] == "standby"]
    assert len(standby) == 2 and sum(e[2]["delay_s"] for e in standby) == pytest.approx(40 * 5e-6 + 2 * 10e-9)
    assert P.edges[P.graph["working"]]["delay_s"] == pytest.approx(30 * 5e-6)
    plan = plan_replica(G, overrides=Overrides(scale=50, links="spec"))
    working = plan.link(oa, ob)
    assert working.backend in ("netem", "userspace") and working.applied.delay_s == pytest.approx(7.5005e-3)
    from testbed.plan.render import link_delays

    rows = link_delays(plan, ("working", "standby"))
    assert [r["tier"] for r in rows.values()].count("standby") == 2 and len(rows) == 3
    assert rows[f"{oa}-{ob}"]["km"] == 30 and rows[f"{oa}-{ob}"]["emulated_delay_ms"] == pytest.approx(7.5005)
    with pytest.raises(SpecError, match="--budget-db.*working span.*10.0 dB"):
        d.build_graph("ocs", budget_db=9.0)
    assert d.build_graph("packet", budget_db=1.0)   # no OCS on the path: no optical budget to check
    with pytest.raises(SystemExit) as refused:  # the shared scenario parser refuses non-positive numbers
        d.main(["--scale", "0"])
    assert refused.value.code == 2
    with pytest.raises(SpecError, match="--duration"):
        d.main(["--duration", "2", "--scale", "500"])
    with pytest.raises(SpecError, match="--budget-db"):   # refused before any root check or folder
        d.main(["--budget-db", "5", "--out", "/nonexistent/never-made"])


def test_protection_timings_from_node_events():
    from testbed.ocs.model import protection_timings

    # scale 50: the node's 1.0 s dark window is 20 ms real; detection 0.1 s emulated is 2 ms real
    ocs_a = [{"kind": "los_seen", "time": 10.0}, {"kind": "los_declared", "time": 10.1},
             {"kind": "dark", "time": 10.103, "reason": "protection"},
             {"kind": "light", "time": 11.103, "reason": "protection"},
             {"kind": "dark", "time": 20.0, "reason": "schedule"}, {"kind": "light", "time": 21.0, "reason": "schedule"}]
    amp = [{"kind": "light", "time": 0.0, "reason": "api"}]            # never switched: not counted
    half = [{"kind": "los_seen", "time": 10.0}, {"kind": "los_declared", "time": 10.1}]  # no circuit moved
    t = protection_timings({"a": ocs_a, "amp": amp, "b": half}, scale=50)
    assert t["switched"] == 1
    assert t["reconfig_window_real_ms"] == [pytest.approx(20.0)]
    assert t["detection_real_ms"] == [pytest.approx(2.0)]
    assert t["emulator_declare_to_dark_ms"] == [pytest.approx(3.0)]   # wall time, not divided by the scale
    assert t["revert_window_real_ms"] == [pytest.approx(20.0)]
