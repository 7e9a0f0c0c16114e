"""``testbed bench failover``'s gray-failure case: case selection, the summary and its report (pure parts)."""

from __future__ import annotations

import pytest

from testbed.bench import failover as bench
from testbed.bench.gray_failover import check_record, gray_graph
from testbed.errors import UsageError


def _run(detect, last, pushed=None, problems=()):
    return {"detect_ms": detect, "last_loss_ms": last, "pushed_ms": pushed if pushed is not None else detect + 2,
            "problems": list(problems), "gray_interval_s": 0.1, "interval_s": 0.001, "window_s": 0.3, "bound_ms": 700.0}


def test_cases_are_checked_and_kept_in_bench_order():
    assert bench.parse_cases("gray, controller") == ("controller", "gray")
    with pytest.raises(UsageError, match="--cases: unknown case grey"):
        bench.parse_cases("grey")
    with pytest.raises(UsageError):
        bench.parse_cases(" , ")


def test_gray_summary_uses_valid_trials_and_the_later_of_push_and_last_loss():
    runs = [_run(300, 290), _run(400, 410), _run(900, 1500, problems=["lost nothing"])]
    doc = bench.summarize_gray(runs)
    assert doc["gray_valid"] == 2 and doc["gray_trials"] == 3
    assert doc["gray_detect_ms_median"] == 350
    assert doc["gray_reroute_ms_median"] == pytest.approx((302 + 410) / 2)
    assert doc["gray_goal_met"] is False          # an invalid trial: the goal is not claimed
    assert bench.summarize_gray(runs[:2])["gray_goal_met"] is True
    assert bench.summarize_gray([_run(1200, 1100)])["gray_goal_met"] is False


def test_report_prints_the_gray_figure_against_the_goal_and_only_cases_that_ran():
    doc = bench.summarize([], [], {}, [], [_run(300, 290)])
    lines = bench.report_lines(doc, 1)
    assert len(lines) == 1 and "gray failure (10% loss" in lines[0] and "goal <= 1000 ms: met" in lines[0]
    assert "detected median 300.0 ms" in lines[0]


def test_a_trial_is_invalid_when_nothing_was_lost_or_a_loss_is_not_the_links():
    ok = {"lost_before_detect": 30, "lost_total": 31, "node_drop_loss": 31}
    assert check_record(ok) == []
    assert check_record({**ok, "lost_before_detect": 0})
    assert "dropped 30" in check_record({**ok, "node_drop_loss": 30})[0]


def test_gray_fabric_puts_link_nodes_only_on_the_source_leafs_uplinks():
    from testbed.plan import Overrides, plan_replica
    from testbed.plan.capabilities import Capabilities

    G, src, dst = gray_graph()
    plan = plan_replica(G, Capabilities(), Overrides(static_arp=False))
    userspace = {frozenset((e.u, e.v)) for e in plan.links if e.backend == "userspace"}
    leaf = next(iter(G.neighbors(src)))
    assert userspace == {frozenset((leaf, s)) for s in G.neighbors(leaf) if G.nodes[s]["role"] == "spine"}
    assert next(iter(G.neighbors(dst))) != leaf
