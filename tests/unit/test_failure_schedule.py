"""Failure schedules outside the collective: the pure pairing of cuts and repairs (testbed.failures), the
driver and control of testbed.emu.failctl against fakes, fabric_failover's schedule and per-cut report
(testbed.routing.failover), and its bad schedules refused before anything is built."""

from __future__ import annotations

import importlib.util
import threading
import time

import pytest

from testbed import failures as F
from testbed.errors import SpecError
from testbed.routing import failover as RF
from testbed.scenario import REPO_ROOT


@pytest.fixture(scope="module")
def fat_tree():
    from testbed.topo.spec import build_graph, load_spec

    return build_graph(load_spec(REPO_ROOT / "scenarios" / "specs" / "fat-tree-k4.yaml"))


@pytest.fixture(scope="module")
def scenario():
    spec = importlib.util.spec_from_file_location("fabric_failover", REPO_ROOT / "scenarios" / "fabric_failover.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def entry(event: F.Event, at_s: float) -> dict:
    """A log entry as the Executor writes it, at ``at_s`` after t0."""
    return {"event": event.describe(), "kind": event.kind, "target": list(event.target), "loss": event.loss,
            "planned_s": event.at, "at_s": at_s, "took_s": 0.001, "answer": None}


def test_cuts_pair_each_failure_with_its_own_repair(fat_tree):
    ev = F.parse("1s:flap:a0-cr0:500ms:2,2.5s:crash:cr2,3s:down:t0-a0,4s:recover:cr2", fat_tree)
    log = [entry(e, e.at + 0.01) for e in ev]
    cuts = F.cuts(log, end_s=9.0)
    assert [(c["event"], c["down_s"], c["up_s"], c["repaired"]) for c in cuts] == [
        ("1s link_down a0-cr0", 1.01, 1.51, True), ("2s link_down a0-cr0", 2.01, 2.51, True),
        ("2.5s switch_down cr2", 2.51, 4.01, True), ("3s link_down t0-a0", 3.01, 9.0, False)]
    assert cuts[2]["up_event"] == "4s switch_up cr2" and cuts[3]["up_event"] is None
    assert [log[c["log_index"]]["event"] for c in cuts] == [c["event"] for c in cuts]


def test_down_after_counts_what_is_still_failed(fat_tree):
    ev = F.parse("1s:down:a0-cr0,2s:crash:cr2,3s:up:a0-cr0", fat_tree)
    log = [entry(e, e.at) for e in ev]
    assert F.down_after(log, 0, fat_tree) == [("a0", "cr0")]
    during_crash = F.down_after(log, 1, fat_tree)
    assert during_crash[0] == ("a0", "cr0") and sorted(during_crash[1:]) == [("cr2", a) for a in ("a1", "a3", "a5", "a7")]
    assert ("a0", "cr0") not in F.down_after(log, 2, fat_tree) and len(F.down_after(log, 2, fat_tree)) == 4
    assert F.links_of(fat_tree, "gray", ("a0", "cr0")) == []


def test_events_after_the_horizon_are_refused_by_field(fat_tree):
    ev = F.parse("1s:down:a0-cr0,8.5s:up:a0-cr0,2s:flap:a1-cr2:4s:1", fat_tree)
    F.check_within(ev, 9.0, "the traffic")
    with pytest.raises(SpecError) as exc:
        F.check_within(ev, 6.0, "the traffic")
    assert exc.value.field == "--failures[2].at" and "'2s:flap:a1-cr2:4s:1' runs at 6s" in exc.value.message


def test_gray_links_of_a_plan_are_those_with_a_link_node_or_htb_on_both_ends():
    class Link:
        def __init__(self, u, v, via, backend="userspace", tc=()):
            self.u, self.v, self.via, self.backend, self.tc = u, v, via, backend, tc

    class Plan:
        links = [Link("s0", "l0", "dl0"), Link("s0", "l1", None, "netem", (("s0", ()), ("l1", ()))),
                 Link("s1", "l0", None, "htb", (("s1", ()), ("l0", ()))), Link("s1", "l1", None, "htb", (("l1", ()),)),
                 Link("s1", "l2", None, "none")]

    assert F.gray_links(Plan()) == {frozenset(("s0", "l0")), frozenset(("s1", "l0"))}


def test_gray_links_of_the_fabric_failover_plan_are_every_link(fat_tree):
    """fabric_failover's rates-only plan shapes every link with HTB on both ends (OVS switches, hosts)."""
    from testbed.plan import Overrides
    from testbed.plan.gray import gray_links_of

    assert gray_links_of(fat_tree, Overrides(links="rates", static_arp=False)) == {
        frozenset(e) for e in fat_tree.edges}


def test_gray_tc_puts_a_random_drop_filter_on_each_ends_egress(fat_tree):
    from testbed.links import tc
    from testbed.plan import Overrides, plan_replica
    from testbed.plan.capabilities import ASSUMED
    from testbed.plan.gray import gray_tc

    plan = plan_replica(fat_tree, ASSUMED, Overrides(links="rates", static_arp=False))
    got = gray_tc(plan, "a0", "cr0", 0.25, lambda x, y: f"{x}-to-{y}")
    assert [node for node, _ in got] == ["a0", "cr0"] or [node for node, _ in got] == ["cr0", "a0"]
    for node, cmds in got:
        other = "cr0" if node == "a0" else "a0"
        assert all(argv[argv.index("dev") + 1] == f"{node}-to-{other}" for argv in cmds)
        bpf = cmds[-1][cmds[-1].index("bytecode") + 1].split(",")
        assert bpf[0] == "4" and bpf[2] == f"37 1 0 {2 ** 30}"     # 0.25 of 2^32: ld rand; jgt T
        assert cmds[-1][-2:] == ["classid", tc.GRAY_CLASS] and cmds[1][-2:] == ["limit", "0"]
    assert all(argv[:3] == ["tc", "filter", "del"] for _, cmds in gray_tc(plan, "a0", "cr0", 0, lambda x, y: x)
               for argv in cmds)


def test_gray_tc_refuses_a_link_not_shaped_on_both_ends(fat_tree):
    from testbed.errors import EmulationError
    from testbed.plan import Overrides, plan_replica
    from testbed.plan.capabilities import ASSUMED
    from testbed.plan.gray import gray_tc

    plan = plan_replica(fat_tree, ASSUMED, Overrides(links="off", static_arp=False))
    with pytest.raises(EmulationError, match="needs tc HTB on both ends"):
        gray_tc(plan, "a0", "cr0", 0.1, lambda x, y: x)


def test_gray_loss_out_of_range_is_refused_by_field():
    from testbed.links import tc

    with pytest.raises(SpecError) as exc:
        tc.gray_cmds("x", 1e6, 1.5)
    assert exc.value.field == "loss"
    last = tc.gray_cmds("x", 1e6, 1.0)[-1]
    assert last[last.index("bytecode") + 1].split(",")[2] == f"37 1 0 {2 ** 32 - 1}"   # every frame: never rand > T


class FakeControl:
    """Records what the driver asks; ``fail_on``: an event kind that raises."""

    def __init__(self, fail_on: str | None = None):
        self.calls, self.fail_on, self.first = [], fail_on, threading.Event()

    def _do(self, what, *args):
        self.calls.append((what, *args))
        self.first.set()
        if self.fail_on == what:
            raise RuntimeError("refused")
        return {"ok": True}

    def link(self, a, b, down):
        return self._do("link_down" if down else "link_up", a, b)

    def switch(self, s, down):
        return self._do("switch_down" if down else "switch_up", s)

    def gray(self, a, b, loss):
        return self._do("gray", a, b, loss)


def test_driver_starts_at_the_callers_t0_and_restores(fat_tree):
    from testbed.emu.failctl import FailureDriver

    started: dict = {}
    ctl = FakeControl()
    drv = FailureDriver(ctl, F.parse("0.05s:crash:cr2,60s:recover:cr2", fat_tree), lambda: started.get("t"),
                        timeout=10, what="traffic")
    assert not ctl.first.wait(0.15) and ctl.calls == []        # no start yet: nothing runs
    started["t"] = time.time()
    assert ctl.first.wait(5)
    rec = drv.finish()
    assert ctl.calls == [("switch_down", "cr2"), ("switch_up", "cr2")]
    assert rec["t0"] == started["t"] and rec["log"][0]["at_s"] >= 0.05
    assert rec["skipped"] == ["60s switch_up cr2"] and rec["restored"] == ["0.05s switch_up cr2"]
    assert rec["error"] is None


def test_driver_reports_a_failed_event_and_still_restores(fat_tree):
    from testbed.emu.failctl import FailureDriver

    ctl = FakeControl(fail_on="switch_down")
    t0 = time.time()
    drv = FailureDriver(ctl, F.parse("0s:down:a0-cr0,0.01s:crash:cr2", fat_tree), lambda: t0, timeout=10)
    drv.thread.join(5)
    rec = drv.finish()
    assert "switch_down cr2: RuntimeError: refused" in rec["error"]
    assert rec["restored"] == ["0s link_up a0-cr0"] and ctl.calls[-1] == ("link_up", "a0", "cr0")
    assert rec["skipped"] == ["0.01s switch_down cr2"]


def test_driver_that_never_starts_does_nothing(fat_tree):
    from testbed.emu.failctl import FailureDriver

    ctl = FakeControl()
    drv = FailureDriver(ctl, F.parse("0s:down:a0-cr0", fat_tree), lambda: None, timeout=600)
    rec = drv.finish()
    assert not drv.thread.is_alive() and rec["t0"] is None and rec["log"] == [] and ctl.calls == []


def test_control_paths_as_testbed_fail(fat_tree, monkeypatch):
    """portmod: the controller's API; ifdown: ip link on the replica's cut interfaces, a crashed switch's
    own ends; gray: the link node's loss control, both ways."""
    from testbed.emu import failctl, ops

    class Ctl:
        def __init__(self):
            self.posts = []

        def post(self, path, **q):
            self.posts.append((path, q))
            return {"ok": True}

    class Rep:
        def cut_interfaces(self, u, v):
            return [f"{v}-to-{u}"], f"/proc/ns-{v}"

    cut = []
    monkeypatch.setattr(ops, "set_link_state", lambda names, up, netns=None: cut.append((names, up, netns)))
    ctl = Ctl()
    failctl.FabricControl(Rep(), fat_tree, ctl).switch("cr2", down=True)
    assert ctl.posts == [("/fail/switch", {"s": "cr2"})] and cut == []
    answer = failctl.FabricControl(Rep(), fat_tree, ctl, method="ifdown").switch("cr2", down=True)
    assert sorted(cut) == [([f"cr2-to-{a}"], False, "/proc/ns-cr2") for a in ("a1", "a3", "a5", "a7")]
    assert len(answer) == 4 and ctl.posts == [("/fail/switch", {"s": "cr2"})]
    cut.clear()
    failctl.FabricControl(Rep(), fat_tree, None).link("a0", "cr0", down=False)    # no controller: ip link
    assert cut == [(["cr0-to-a0"], True, "/proc/ns-cr0")]

    asked = []

    class Node:
        name = "dl3"

        def set_loss(self, a_to_b, b_to_a):
            asked.append((a_to_b, b_to_a))
            return {"directions": {"a>b": {"loss_rate_now": a_to_b}, "b>a": {"loss_rate_now": b_to_a}}}

    class LinkRep(Rep):
        def link_node(self, a, b):
            if {a, b} != {"cr0", "a0"}:
                raise KeyError((a, b))
            return Node()

    got = failctl.FabricControl(LinkRep(), fat_tree, ctl).gray("a0", "cr0", 0.1)
    assert asked == [(0.1, 0.1)] and got == {"method": "link node", "node": "dl3",
                                             "loss_now": {"a>b": 0.1, "b>a": 0.1}}
    with pytest.raises(Exception, match="no userspace link node"):
        failctl.FabricControl(LinkRep(), fat_tree, ctl).gray("a1", "cr2", 0.1)
    ran = []

    class TcRep(LinkRep):
        plan = object()

        def intf_name(self, x, y):
            return f"{x}-{y}"

        def run_tc(self, node, cmds):
            ran.append((node, cmds))

    def gray_tc(plan, a, b, loss, intf_name):
        assert plan is TcRep.plan
        return [(a, [["tc", intf_name(a, b), str(loss)]]), (b, [["tc", intf_name(b, a), str(loss)]])]

    got = failctl.FabricControl(TcRep(), fat_tree, ctl, gray_tc=gray_tc).gray("a1", "cr2", 0.1)
    assert got == {"method": "tc", "loss_now": 0.1}
    assert ran == [("a1", [["tc", "a1-cr2", "0.1"]]), ("cr2", [["tc", "cr2-a1", "0.1"]])]
    with pytest.raises(ValueError):
        failctl.FabricControl(Rep(), fat_tree, ctl, method="unplug")


def test_default_schedule_is_the_old_cut(scenario, fat_tree):
    class Args:
        failures, link, duration = None, None, 9.0

    text, ev = scenario.events_of(fat_tree, Args())
    assert text == "3s:down:a0-cr0,6s:up:a0-cr0"
    assert [(e.at, e.kind, e.target) for e in ev] == [(3.0, "link_down", ("a0", "cr0")), (6.0, "link_up", ("a0", "cr0"))]
    Args.link = "a1,cr2"
    assert scenario.events_of(fat_tree, Args())[0] == "3s:down:a1-cr2,6s:up:a1-cr2"


@pytest.mark.parametrize("argv, field", [
    (["--failures", "1s:down:a0-cr3"], "--failures[0].target"),          # a0 reaches cr0, cr1 only
    (["--failures", "1s:down:a0-cr0,12s:up:a0-cr0"], "--failures[1].at"),  # after the 9 s of traffic
    (["--failures", "1s:gray:a0-cr0:150%"], "--failures[0].loss"),
    (["--failures", "1s:crash:cr2,2s:crash:cr2"], "--failures[1].action"),
    (["--failures", "1s:down:a0-cr0", "--link", "a0,cr0"], "--link"),
])
def test_fabric_failover_refuses_bad_schedules_before_building(scenario, argv, field, tmp_path, capsys):
    out = tmp_path / "out"
    with pytest.raises(SpecError) as exc:
        scenario.main(["--quick", "--out", str(out)] + argv)
    assert exc.value.field == field and exc.value.exit_code == 2
    assert not out.exists()


def test_cut_report_per_cut(fat_tree):
    """Two flows, 10 ms interval from t=100: h0->h4 loses 3 packets in the first cut (one of a round that
    began 10 ms before it: its datagram to h4 may leave after the cut), h4->h0 2 after its repair; the
    controller's events give detection and push; the path sets come from the brain."""
    sends = [100 + 0.01 * i for i in range(300)]
    flows = {("h0", "h4"): {"send_times": sends, "interval": 0.01,
                            "arrivals": [(i, t + 0.001) for i, t in enumerate(sends) if i not in (99, 100, 101)]},
             ("h4", "h0"): {"send_times": sends, "interval": 0.01,
                            "arrivals": [(i, t + 0.001) for i, t in enumerate(sends) if i not in (160, 161)]}}
    cut = {"event": "1s link_down a0-cr0", "kind": "link", "target": ["a0", "cr0"], "loss": 0.0, "down_s": 1.0,
           "up_s": 1.5, "up_event": "1.5s link_up a0-cr0", "repaired": True, "log_index": 0}
    failovers = [{"kind": "link_down", "link": ["a0", "cr0"], "time": 101.02, "pushed": 101.03, "compute_ms": 2.0,
                  "messages": 12, "destinations_recomputed": 4},
                 {"kind": "link_up", "link": ["cr0", "a0"], "time": 101.52, "pushed": 101.53, "compute_ms": 1.0,
                  "messages": 8, "destinations_recomputed": 4}]
    down = RF.reaction(failovers, [("a0", "cr0")], "link_down", 100.99)
    up = RF.reaction(failovers, [("a0", "cr0")], "link_up", 101.49)
    assert RF.reaction(failovers, [("a0", "cr0")], "link_down", 101.1) is None
    hs = ["h0", "h4"]
    before = RF.brain_paths(fat_tree, hs)
    during = RF.brain_paths(fat_tree, hs, [("a0", "cr0")])
    doc, per_flow = RF.cut_report(flows, cut, 100.0, 2.5, (before, during, before), down, up, scale=1000)
    assert doc["flows_affected"] == 1 and doc["outage_ms_emulated_max"] == pytest.approx(30.0)
    assert doc["detection_ms_wall"] == pytest.approx(20.0) and doc["controller_push_ms_wall"] == pytest.approx(10.0)
    assert doc["restore_reaction_ms_wall"] == pytest.approx(20.0) and doc["route_messages_on_failure"] == 12
    assert doc["packets_lost_after_restore"] == 2 and per_flow[("h4", "h0")]["lost_after_restore"] == 2
    assert per_flow[("h0", "h4")] == {"lost_in_window": 3, "outage_ms": pytest.approx(30.0), "lost_after_restore": 0}
    assert doc["flows_path_set_changed_on_failure"] == 2 == doc["flows_path_set_changed_on_restore"]
    # the same losses after a cut the next one follows at once are not the repair's
    doc, _ = RF.cut_report(flows, cut, 100.0, 1.55, (before, during, before), down, None, scale=1000)
    assert doc["packets_lost_after_restore"] == 0 and doc["restore_reaction_ms_wall"] is None


@pytest.mark.parametrize("name", __import__("testbed.scenario", fromlist=["available"]).available())
def test_every_scenario_takes_a_schedule_or_refuses_it_by_name(name, tmp_path):
    """No scenario ignores --failures: it parses it (a bad target is named by its field) or refuses the flag
    with its reason, before anything is built."""
    spec = importlib.util.spec_from_file_location(f"scenario_{name}", REPO_ROOT / "scenarios" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "out"
    with pytest.raises(SpecError) as exc:
        mod.main(["--quick", "--out", str(out), "--failures", "1s:down:nowhere-never"])
    assert exc.value.field in ("--failures", "--failures[0].target"), str(exc.value)
    if exc.value.field == "--failures":
        assert "takes no failure schedule: " in exc.value.message and len(exc.value.message) > 60
    assert not out.exists()
