"""Control plane, ring schedule and the scenario's pure parts (no root)."""

from __future__ import annotations

import socket
import threading

import numpy as np
import pytest

from testbed.agg.program import AggJob, AggPlan
from testbed.agg.ring import allreduce, schedule, segments
from testbed.agg.runner import fabric
from testbed.errors import SpecError


def test_leaf_plan_programs_jobs_groups_and_host_ports():
    G, agg, workers, ps = fabric(4, "leaf")
    plan = AggPlan(G, agg, "10.255.0.1", [AggJob(1, tuple(workers), window=8),
                                           AggJob(2, tuple(workers[:2]), window=8, switch_slots=6, ps=ps)])
    prog = plan.switch_program(agg)
    jobs = {e.match[0]: e.params for e in prog.entries if e.table.endswith("job_table")}
    # base, size, limit, members, nworkers, mgrp, ps_ip
    assert jobs["1"][:6] == ("0", "8", "8", "15", "4", "1")
    assert jobs["2"][:6] == ("8", "6", "8", "3", "2", "2") and jobs["2"][6] == G.nodes[ps]["ip"]
    ports = {w: G.edges[agg, w]["ports"][agg] for w in workers}
    assert prog.mc_groups == {1: sorted(ports.values()), 2: sorted(ports[w] for w in workers[:2])}
    routes = [e for e in prog.entries if e.table.endswith("ipv4_route")]
    assert len(routes) == 5 and all(e.match[0].endswith("/32") for e in routes)
    assert any(e.table.endswith("agg_address") and e.match == ("10.255.0.1",) for e in prog.entries)
    assert all(e.render().startswith("table_add ") and "=>" in e.render() for e in prog.entries)


def test_leaf_spine_plan_aggregates_at_the_spine_and_fans_out_at_leaves():
    G, agg, workers, ps = fabric(4, "leaf-spine")
    assert G.nodes[agg]["role"] == "spine"
    plan = AggPlan(G, agg, "10.255.0.1", [AggJob(1, tuple(workers), window=8)])
    spine = plan.switch_program(agg)
    assert len(spine.mc_groups[1]) == 2                                # one port per leaf
    leaf = next(n for n in G if G.nodes[n]["role"] == "leaf")
    lp = plan.switch_program(leaf)
    assert [e.action for e in lp.entries if e.table.endswith("result_fanout")] == ["fan_out"]
    up = [e for e in lp.entries if e.table.endswith("ipv4_route") and e.match == ("10.255.0.1/32",)]
    assert up and int(up[0].params[0]) == G.edges[leaf, agg]["ports"][leaf]
    assert len(lp.mc_groups[1]) == 2                                   # its two workers
    assert set(plan.switches()) == {n for n in G if G.nodes[n]["role"] != "host"}
    host_rate = G.edges[workers[0], leaf]["rate_bps"]
    assert G.edges[leaf, agg]["rate_bps"] == 3 * host_rate                # non-blocking: 2 workers + 1 spare


def test_plan_rejects_bad_jobs():
    G, agg, workers, ps = fabric(4, "leaf")
    with pytest.raises(SpecError, match="ps"):
        AggJob(1, tuple(workers), window=8, switch_slots=4)
    with pytest.raises(SpecError, match="not a host"):
        AggPlan(G, agg, "10.255.0.1", [AggJob(1, ("nope",), window=8)])
    with pytest.raises(SpecError, match="exceed"):
        AggPlan(G, agg, "10.255.0.1", [AggJob(1, tuple(workers), window=900), AggJob(2, tuple(workers), window=900)])
    with pytest.raises(SpecError, match="even"):
        fabric(5, "leaf-spine")


def test_ring_schedule_covers_every_segment_once_per_phase():
    n = 5
    for rank in range(n):
        steps = schedule(n, rank)
        assert len(steps) == 2 * (n - 1)
        assert len({s for s, _, _ in steps[: n - 1]}) == n - 1
    assert segments(10, 3) == [(0, 3), (3, 6), (6, 10)]


def test_ring_allreduce_over_socket_pairs_is_exact():
    n = 4
    xs = [np.random.default_rng(r).integers(-1000, 1000, size=103, dtype=np.int32) for r in range(n)]
    pairs = [socket.socketpair() for _ in range(n)]        # pairs[r]: rank r -> rank r+1
    out = [None] * n

    def rank(r):
        out[r] = allreduce(xs[r], r, n, succ=pairs[r][0], pred=pairs[(r - 1) % n][1])

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    want = np.sum(xs, axis=0, dtype=np.int32)
    assert all(np.array_equal(o, want) for o in out)


def _scenario():
    import importlib

    return importlib.import_module("scenarios.innetwork_allreduce")     # conftest puts the repo on sys.path


def test_scenario_spec_and_matrix():
    import yaml

    mod = _scenario()
    doc = yaml.safe_load(mod.SPEC.read_text())
    quick = mod.load_spec(doc, quick=True)
    trials = mod.trials(quick)
    assert ("leaf", 8, quick.sizes_mb[0], "ring", 0, 1) in trials
    assert all(t[0] == "leaf" for t in trials)
    assert mod.link_rate(quick, 8) == quick.switch_budget_bps / 8
    with pytest.raises(SpecError, match="bogus"):
        mod.load_spec({**doc, "bogus": 1}, quick=False)
    with pytest.raises(SpecError, match="sizes_mb"):
        mod.load_spec({**doc, "sizes_mb": [128]}, quick=False)


def test_scenario_summary_ratios():
    mod = _scenario()
    rows = [{"topology": "leaf", "workers": 8, "size_mb": 1, "loss_pct": 0, "jobs": 1, "mode": "ring",
             "time_s": 6.0, "bytes_per_worker_link": 1900},
            {"topology": "leaf", "workers": 8, "size_mb": 1, "loss_pct": 0, "jobs": 1, "mode": "switch",
             "time_s": 3.0, "bytes_per_worker_link": 1000},
            {"topology": "leaf", "workers": 8, "size_mb": 1, "loss_pct": 0, "jobs": 2, "mode": "switch",
             "time_s": 6.0, "bytes_per_worker_link": 1000}]
    s = mod.summarise(rows)
    assert s["speedup_vs_ring"] == {"leaf/8w/1MB/loss0/jobs1": 2.0, "leaf/8w/1MB/loss0/jobs2": 2.0}
    assert s["bytes_ratio_vs_ring"]["leaf/8w/1MB/loss0/jobs1"] == round(1000 / 1900, 3)
