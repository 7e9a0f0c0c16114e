"""Failure schedules during a collective job (testbed.failures) and the acceptance figures
(testbed.collective.acceptance): parsing, field-named errors, the executor's timing on a fake clock
against a fake controller, failure windows, the QP retry budget, incast fairness."""

from __future__ import annotations

import threading

import networkx as nx
import numpy as np
import pytest

from testbed import failures as F
from testbed.collective import acceptance as A
from testbed.errors import SpecError


@pytest.fixture(scope="module")
def fat_tree():
    from testbed.collective.experiment import fabric_graph

    return fabric_graph("fat-tree-k4")


def test_parse_expands_and_sorts(fat_tree):
    ev = F.parse("4s:up:t0-a0, 2s:down:t0-a0, 1s:flap:a1-t1:300ms:2, 3s:crash:a2, 5s:recover:a2", fat_tree)
    got = [(round(e.at, 3), e.kind, e.target) for e in ev]
    assert got == [(1.0, "link_down", ("a1", "t1")), (1.3, "link_up", ("a1", "t1")),
                   (1.6, "link_down", ("a1", "t1")), (1.9, "link_up", ("a1", "t1")),
                   (2.0, "link_down", ("t0", "a0")), (3.0, "switch_down", ("a2",)),
                   (4.0, "link_up", ("t0", "a0")), (5.0, "switch_up", ("a2",))]


def test_node_names_with_dashes_resolve():
    G = nx.Graph()
    G.add_node("leaf-1", role="switch")
    G.add_node("spine-0", role="switch")
    G.add_edge("leaf-1", "spine-0")
    assert F.parse("1s:down:leaf-1-spine-0", G)[0].target == ("leaf-1", "spine-0")


@pytest.mark.parametrize("text, field, words", [
    ("", "--failures", "empty"),
    ("2s:down", "--failures[0]", "AT:ACTION:TARGET"),
    ("soon:down:t0-a0", "--failures[0].at", "duration"),
    ("-1s:down:t0-a0", "--failures[0].at", "duration"),
    ("1s:down:t0-a0,2s:melt:t0-a0", "--failures[1].action", "allowed"),
    ("1s:down:t0-t1", "--failures[0].target", "not linked"),
    ("1s:down:t0-zz", "--failures[0].target", "no link"),
    ("1s:down:t0", "--failures[0].target", "A-B"),
    ("1s:crash:h0", "--failures[0].target", "no switch"),
    ("1s:flap:t0-a0:0s:2", "--failures[0].period", "> 0"),
    ("1s:flap:t0-a0:1s:many", "--failures[0].count", "integer"),
    ("1s:flap:t0-a0:1s", "--failures[0].args", "PERIOD:COUNT"),
    ("1s:down:t0-a0:5", "--failures[0].args", "0 argument"),
    ("1s:gray:t0-a0:10%", "--failures[0].action", "link node"),
    ("2s:up:t0-a0", "--failures[0].action", "already up"),
    ("1s:down:t0-a0,2s:down:a0-t0", "--failures[1].action", "already down"),
])
def test_errors_name_the_field(fat_tree, text, field, words):
    with pytest.raises(SpecError) as exc:
        F.parse(text, fat_tree)
    assert exc.value.field == field, str(exc.value)
    assert words in exc.value.message and "\n" not in str(exc.value)


def test_gray_needs_and_uses_a_link_node(fat_tree):
    ev = F.parse("1s:gray:t0-a0:10%,2s:gray:t0-a0:0", fat_tree, gray_links={frozenset(("t0", "a0"))})
    assert [(e.kind, e.loss) for e in ev] == [("gray", 0.1), ("gray", 0.0)]
    with pytest.raises(SpecError) as exc:
        F.parse("1s:gray:t0-a0:150%", fat_tree, gray_links={frozenset(("t0", "a0"))})
    assert exc.value.field == "--failures[0].loss"


class FakeClock:
    """Time moves only when the executor waits, or when the fake controller takes time to answer."""

    def __init__(self, start=1000.0):
        self.t = start
        self.waits = []

    def __call__(self):
        return self.t

    def wait(self, seconds):
        self.waits.append(round(seconds, 9))
        self.t += seconds
        return False


class FakeController:
    def __init__(self, clock, latency=0.01, fail_on=None):
        self.clock, self.latency, self.fail_on = clock, latency, fail_on
        self.calls = []

    def _do(self, *call):
        if call[1:3] == self.fail_on:
            raise RuntimeError("controller API: 404")
        self.calls.append((round(self.clock() - 1000.0, 6), *call))
        self.clock.t += self.latency
        return {"ok": True}

    def link(self, a, b, down):
        return self._do("link", a, b, down)

    def switch(self, s, down):
        return self._do("switch", s, down)

    def gray(self, a, b, loss):
        return self._do("gray", a, b, loss)


def test_executor_runs_each_event_at_its_time(fat_tree):
    clock = FakeClock()
    ctl = FakeController(clock)
    ev = F.parse("0.5s:down:t0-a0,0.5s:crash:a2,1s:flap:t1-a1:100ms:1,2s:up:t0-a0", fat_tree)
    log = F.Executor(ev, ctl, clock=clock, wait=clock.wait).run(t0=1000.0)
    assert [c[0] for c in ctl.calls] == [0.5, 0.51, 1.0, 1.1, 2.0]   # the second event waits for the first
    assert ctl.calls[1][1:] == ("switch", "a2", True) and ctl.calls[4][1:] == ("link", "t0", "a0", False)
    assert [x["planned_s"] for x in log] == [0.5, 0.5, 1.0, 1.1, 2.0]
    assert [x["at_s"] for x in log] == [0.5, 0.51, 1.0, 1.1, 2.0] and all(x["took_s"] == 0.01 for x in log)
    assert clock.waits == [0.5, 0.48, 0.09, 0.89]     # no wait for the crash: due when the cut ended


def test_executor_starts_late_events_at_once_and_stops(fat_tree):
    clock = FakeClock(start=1003.0)         # the barrier passed 3 s ago: every event is overdue
    ctl = FakeController(clock, latency=0.0)
    ev = F.parse("1s:down:t0-a0,2s:up:t0-a0", fat_tree)
    F.Executor(ev, ctl, clock=clock, wait=clock.wait).run(t0=1000.0)
    assert clock.waits == [] and len(ctl.calls) == 2
    ex = F.Executor(ev, FakeController(clock), clock=clock, wait=lambda s: True)   # stop asked while waiting
    assert ex.run(t0=clock()) == [] and ex.done == []


def test_executor_error_stops_and_undo_restores(fat_tree):
    clock = FakeClock()
    ctl = FakeController(clock, fail_on=("t1", "a1"))
    ev = F.parse("1s:down:t0-a0,2s:crash:a2,3s:down:t1-a1,4s:up:t0-a0", fat_tree)
    ex = F.Executor(ev, ctl, clock=clock, wait=clock.wait)
    ex.run(t0=1000.0)
    assert ex.error.startswith("3s link_down t1-a1: RuntimeError") and len(ex.log) == 2
    back = F.undo(ex.done)
    assert sorted((e.kind, e.target) for e in back) == [("link_up", ("t0", "a0")), ("switch_up", ("a2",))]
    done_all = F.parse("1s:down:t0-a0,2s:up:t0-a0", fat_tree)
    assert F.undo(done_all) == []


def test_windows_and_timeouts():
    log = [{"kind": "link_down", "target": ["t0", "a0"], "loss": 0, "at_s": 1.0, "took_s": 0.01},
           {"kind": "link_up", "target": ["a0", "t0"], "loss": 0, "at_s": 3.0, "took_s": 0.01},
           {"kind": "switch_down", "target": ["a2"], "loss": 0, "at_s": 6.0, "took_s": 0.02}]
    spans = F.windows(log, end_s=8.0, grace_s=0.5)
    assert spans == [(1.0, 3.51), (6.0, 8.5)]
    assert F.split_timeouts([0.5, 1.2, 3.5, 3.6, 7.0, 9.0], spans) == (3, 3)
    rec = {"t0": 100.0, "log": log}
    v = F.timeout_verdict(rec, [100.5, 101.2, 109.0], end=108.0, qp_timeout_s=0.25)
    assert v["timeouts_inside"] == 1 and v["timeouts_outside"] == 2 and v["windows_s"][0] == [1.0, 3.51]
    assert F.timeout_verdict({"t0": None, "log": []}, [1.0], 2.0, 1.0)["timeouts_outside"] == 1


def test_retry_budget_outlasts_the_longest_outage(fat_tree):
    short = F.parse("1s:down:t0-a0,1.2s:up:t0-a0", fat_tree)
    assert F.retry_budget(short, qp_timeout_s=1.0, horizon_s=60) == 7           # the IB default suffices
    long = F.parse("1s:crash:a2,11s:recover:a2", fat_tree)
    assert F.retry_budget(long, qp_timeout_s=1.0, horizon_s=60) == 12
    never = F.parse("1s:down:t0-a0", fat_tree)
    assert F.retry_budget(never, qp_timeout_s=0.5, horizon_s=21) == 42
    # a QP that retries that often survives the outage: retries x timeout covers it
    assert F.retry_budget(long, 1.0, 60) * 1.0 > F.longest_outage(long, 60)


def test_failure_driver_waits_for_the_barrier_and_restores(tmp_path, fat_tree):
    """The root glue's thread against a fake controller: t0 is the last barrier file's mtime, events run
    after it, and what is left down is restored at the end."""
    from testbed.collective.runner import CollectiveFabric

    class Ctl:
        def __init__(self):
            self.calls, self.done = [], threading.Event()

        def post(self, path, **q):
            self.calls.append((path, q))
            if len(self.calls) == 1:
                self.done.set()
            return {"ok": True}

    class Fab:
        ctl, G, rep = Ctl(), fat_tree, None

    fab = Fab()
    ev = F.parse("0.02s:down:t0-a0,60s:up:t0-a0", fat_tree)
    drv = CollectiveFabric.failure_driver(fab, ev, tmp_path, 2, timeout=10)
    (tmp_path / "barrier-start-0").touch()
    assert not fab.ctl.done.wait(0.1) and fab.ctl.calls == []     # one rank missing: nothing yet
    (tmp_path / "barrier-start-1").touch()
    assert fab.ctl.done.wait(5)
    rec = drv.finish()
    assert fab.ctl.calls == [("/fail/link", {"a": "t0", "b": "a0"}), ("/restore/link", {"a": "t0", "b": "a0"})]
    assert rec["t0"] == pytest.approx((tmp_path / "barrier-start-1").stat().st_mtime)
    assert rec["log"][0]["at_s"] >= 0.02 and rec["skipped"] == ["60s link_up t0-a0"]
    assert rec["restored"] == ["0.02s link_up t0-a0"] and rec["error"] is None


def test_incast_schedule_is_exact_and_one_way():
    from testbed.collective import schedule as S
    from testbed.collective import verify as V
    from testbed.collective.engine import simulate

    sched = S.all_to_all(5, 256, S.incast_counts(5, 256, sink=2), chunks=2)
    out, stats = simulate(sched, [V.initial_buffers(sched, r) for r in range(5)])
    assert [V.wrong(sched, r, out[r]) for r in range(5)] == [0] * 5
    assert stats["sent_elements"] == [256, 256, 0, 256, 256]
    assert out[2]["out"].shape == (1024,)
    assert np.array_equal(out[2]["out"][:256], V.make_input(1, 1, 0, 256))
    with pytest.raises(SpecError):
        S.incast_counts(4, 16, sink=4)


def test_incast_fairness():
    row = {"size_bytes": 1000, "wrong": 0, "rank_end_s": [[4.0, 4.0, 4.0, 4.0], [4.1, 2.0, 4.0, 4.0]]}
    fair = A.fairness(row, sink=0)
    assert fair["rates_bps"] == [4000.0, 2000.0, 2000.0] and fair["pass"] is False
    assert fair["deviation"] == pytest.approx(0.5)
    even = A.fairness({**row, "rank_end_s": [[4.0, 3.0, 3.2, 3.1]]})
    assert even["pass"] and even["deviation"] < 0.05
    assert not A.fairness({**row, "rank_end_s": [[4.0, 3.0, 3.2, 3.1]], "wrong": 3})["pass"]


def test_busiest_fabric_link(fat_tree):
    # not in bytes order: link_usage sorts by utilisation, which a slow NIC's link can top
    links = [{"link": "h0->t0", "bytes": 900}, {"link": "a0->t0", "bytes": 400}, {"link": "t0->a1", "bytes": 500}]
    assert A.busiest_fabric_link(links, fat_tree) == ("t0", "a1")
    assert A.link_bytes(links + [{"link": "a1->t0", "bytes": 7}], "a1", "t0") == 507


def test_report_and_summary_carry_the_failures(capsys):
    """print_report and summary() of a run with a failure schedule (pure: a result document as the runner
    returns it)."""
    from testbed.collective import experiment as X

    fl = {"t0": 5.0, "log": [{"event": "1s link_down t0-a0", "kind": "link_down", "target": ["t0", "a0"], "loss": 0,
                              "planned_s": 1.0, "at_s": 1.002, "took_s": 0.004, "answer": {"ok": True}}],
          "windows_s": [[1.002, 4.5]], "timeouts_inside": 3, "timeouts_outside": 0, "skipped": ["3s link_up t0-a0"],
          "restored": ["1s link_up t0-a0"], "error": None}
    result = {"jobs": [{"name": "job1", "hosts": ["h0", "h1"], "jct_s": 2.0, "real_jct_ms": 0.2,
                        "qp_stats": {"retransmissions": 4, "timeouts": 3}, "rows": []}],
              "links": [], "failures": fl, "fabric": "fat-tree-k4", "scale": 1e4, "link_rate_bps": 1e7,
              "health": {"ok": True, "reasons": [], "cpu": {}, "load": [1.0], "losses": None}}
    X.print_report(result)
    text = capsys.readouterr().out
    assert "# failure 1s link_down t0-a0: done at 1.002 s (planned 1), took 4.0 ms" in text
    assert "QP timeouts inside 3 (the experiment), outside 0" in text and "3s link_up t0-a0" in text
    doc = X.summary(result)["failures"]
    assert doc["timeouts_inside"] == 3 and doc["restored"] == ["1s link_up t0-a0"] and "t0" not in doc


def test_failure_driver_ends_when_the_ranks_never_reach_the_barrier(tmp_path, fat_tree):
    from testbed.collective.runner import CollectiveFabric

    class Fab:
        ctl, G, rep = None, fat_tree, None

    drv = CollectiveFabric.failure_driver(Fab(), F.parse("1s:down:t0-a0", fat_tree), tmp_path, 2, timeout=600)
    rec = drv.finish()
    assert not drv.thread.is_alive() and rec["t0"] is None and rec["log"] == [] and rec["restored"] == []
    assert F.timeout_verdict(rec, [], 0.0, 1.0)["timeouts_outside"] == 0
