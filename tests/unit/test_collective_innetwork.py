"""In-network allreduce as an algorithm of ``testbed collective`` (testbed/collective/innetwork.py), no root:
where it is refused (a fabric without an aggregation switch, options that mean nothing there), the options
it gets, and the nccl-tests rows made from testbed.agg's run results."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from testbed.agg.runner import RunResult, count_wrong
from testbed.collective import experiment as X
from testbed.collective import innetwork as IN


@pytest.fixture
def no_emulation(monkeypatch):
    from testbed.agg import runner
    from testbed.emu import registry

    def trap(self):
        raise AssertionError("bad input reached emulation")
    monkeypatch.setattr(registry.RunRegistry, "__enter__", trap)
    monkeypatch.setattr(runner.AggTestbed, "__enter__", trap)


@pytest.mark.parametrize("argv,word,says", [
    (["--algorithm", "innetwork"], "--fabric", "agg-leaf"),                        # small: Open vSwitch
    (["--algorithm", "innetwork", "--fabric", "fat-tree-k4"], "--fabric", "aggregation switch"),
    (["--algorithm", "innetwork", "--collective", "broadcast"], "--algorithm", "allreduce"),
    (["--fabric", "agg-leaf", "--algorithm", "tree"], "--algorithm", "small, fat-tree-k4, rail-small"),
    (["--fabric", "agg-leaf", "--collective", "all_to_all"], "--collective", "innetwork only"),
    (["--fabric", "agg-leaf", "--jobs", "2"], "--jobs", "one job"),
    (["--fabric", "agg-leaf", "--pods"], "--pods", "no pods"),
    (["--fabric", "agg-leaf", "--placement", "spread"], "--placement", "rank order"),
    (["--fabric", "agg-leaf", "--nic-rate", "1=25G"], "--nic-rate", "--link-rate"),
    (["--fabric", "agg-leaf", "--failures", "1s:down:x0-h0"], "--failures", "failover"),
    (["--fabric", "agg-leaf", "--ovs-send-buffer", "4MiB"], "--ovs-send-buffer", "Open vSwitch"),
    (["--fabric", "agg-leaf-spine", "--ranks", "3"], "--ranks", "even"),
    (["--fabric", "agg-leaf", "--ranks", "33"], "--ranks", "2..32"),
    (["--fabric", "agg-leaf", "--sizes", "6"], "--sizes", "int32"),
    (["--fabric", "agg-leaf", "--link-rate", "5G"], "--link-rate", "between"),
])
def test_refusals_are_one_line_exit_2(no_emulation, run_cli, argv, word, says):
    code, _, err = run_cli(["collective", "run", *argv])
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and word in err and says in err and "Traceback" not in err


def test_the_schedule_command_has_no_innetwork_schedule(run_cli):
    code, _, err = run_cli(["collective", "schedule", "--algorithm", "innetwork"])
    assert code == 2 and "--algorithm" in err and "collective run --fabric agg-leaf" in err


def _args(**kw):
    base = dict(fabric="agg-leaf", collective="allreduce", algorithm=None, ranks=4, sizes="64KiB,1MiB",
                placement="packed", jobs=1, pods=False, chunks=4, iters=2, warmup=1, skew=1.0, root=0,
                link_rate=None, trace=None)
    return SimpleNamespace(**{**base, **kw})


def test_options_on_an_aggregation_fabric():
    """The aggregation fabrics default to innetwork, and their link rate to the agg spec's switch budget
    shared by the ranks (all workers together offer BMv2 the same load); an explicit rate is kept."""
    four, eight = X.Options.from_args(_args()), X.Options.from_args(_args(ranks=8))
    assert four.algorithm == eight.algorithm == "innetwork" and four.sizes == (65536, 1 << 20)
    assert four.link_rate_bps == IN._spec().switch_budget_bps / 4 == 2 * eight.link_rate_bps
    assert X.Options.from_args(_args(link_rate="3M", algorithm="innetwork")).link_rate_bps == 3e6
    ring = X.Options.from_args(_args(fabric="small"))         # the OVS fabrics keep theirs
    assert ring.algorithm is None and ring.link_rate_bps == 10e6


def test_count_wrong_counts_every_element_of_every_rank():
    want = np.arange(10, dtype=np.int32)
    bad = want.copy()
    bad[[2, 7]] += 1
    assert count_wrong([want, want.copy()], want) == 0
    assert count_wrong([want, bad, bad], want) == 4
    assert count_wrong([want[:9]], want) == 10          # a short result: every element it should have had


def _rr(time_s, spread=0.0, up=1.05e6, down=1.04e6, wrong=0, retx=0):
    return RunResult(mode="switch", job=1, workers=4, dtype="int32", elements=1 << 18, loss=0.0, time_s=time_s,
                     correct=wrong == 0, exact=wrong == 0, max_abs_error=float(wrong),
                     bytes_per_worker_link={"up": up, "down": down}, retransmits=retx, start_spread_s=spread,
                     wrong=wrong)


def test_rows_are_nccl_tests_rows_from_the_agg_results():
    """time = latest end - latest start (the run's time less the start spread), warm-up left out of the
    time but not of #wrong; busbw = algbw x 2(n-1)/n; real-world = emulated x scale; what crossed the
    worker links and how busy they were."""
    size, scale, rate = 1 << 20, 25000.0, 4e6
    runs = {size: [_rr(9.0, wrong=3), _rr(2.2, spread=0.2), _rr(2.6, spread=0.1, retx=2)]}
    res = IN.result("agg-leaf", ["h0", "h1", "h2", "h3"], "x0", runs, 1, scale, rate, {}, [1.0, 1.0, 1.0])
    row, = res["jobs"][0]["rows"]
    assert row["times_s"] == pytest.approx([2.0, 2.5]) and row["time_s"] == pytest.approx(2.25)
    assert row["algbw_bps"] == pytest.approx(size * 8 / 2.25)
    assert row["busbw_bps"] == pytest.approx(row["algbw_bps"] * 2 * 3 / 4)
    assert row["real_time_us"] == pytest.approx(2.25 / scale * 1e6)
    assert row["real_busbw_gbps"] == pytest.approx(row["busbw_bps"] * scale / 1e9)
    assert row["wrong"] == 3 and row["exact"] is False and row["algorithm"] == "innetwork"
    assert row["retransmits"] == 2 and row["bytes_per_link_over_size"] == pytest.approx(1.05e6 / size, abs=1e-3)
    util = (1.05e6 * 8 / 2.2 / rate + 1.05e6 * 8 / 2.6 / rate) / 2
    assert row["link_utilisation"] == pytest.approx(util, abs=1e-3) and not row["bmv2_saturated"]
    job = res["jobs"][0]
    assert job["jct_s"] == pytest.approx(13.8) and job["real_jct_ms"] == pytest.approx(13.8 / scale * 1e3)
    assert res["links"][0]["link"] == "worker->switch (mean)" and res["health"]["ok"]


def test_a_switch_that_could_not_fill_the_links_makes_the_run_unhealthy():
    runs = {4096: [_rr(1.0, up=1e5, down=1e5)], 8192: [_rr(1.0, up=1e6, down=1e6)]}
    res = IN.result("agg-leaf", ["h0", "h1", "h2", "h3"], "x0", runs, 0, 25000.0, 4e6, {}, [0.5, 0.5, 0.5])
    small, big = res["jobs"][0]["rows"]
    assert small["bmv2_saturated"] and not big["bmv2_saturated"]
    assert not res["health"]["ok"] and any("4096 B" in r and "BMv2" in r for r in res["health"]["reasons"])


def test_the_report_and_summary_take_an_innetwork_result(capsys):
    runs = {65536: [_rr(0.2), _rr(0.15)], 1 << 20: [_rr(2.3), _rr(2.2, spread=0.01)]}
    res = IN.result("agg-leaf", ["h0", "h1", "h2", "h3"], "x0", runs, 1, 25000.0, 4e6, {"switch_max": 40.0},
                    [1.5, 1.5, 1.5])
    X.print_report(res)
    text = capsys.readouterr().out
    assert "# allreduce (innetwork), 4 ranks" in text and "through x0" in text and "BMv2 max 40%" in text
    assert "ovs-vswitchd" not in text and "QP" not in text
    doc = X.summary(res)
    assert doc["jobs"][0]["wrong"] == 0 and doc["jobs"][0]["largest_size_bytes"] == 1 << 20
    assert doc["jobs"][0]["busbw_over_link"] == pytest.approx(res["jobs"][0]["rows"][-1]["busbw_bps"] / 4e6, abs=1e-4)


def test_the_collective_scenario_puts_the_innetwork_part_beside_the_ring():
    """``testbed run collective``'s part 5 (scenarios/collective.py): per size the switch's rows, #wrong and
    exact, its algbw over its own link rate beside the ring's (part 1, its own rate) at the same size; a size
    the sweep did not run has no ring figure; one inexact size makes the part inexact."""
    from scenarios.collective import health_parts, innetwork_line, innetwork_summary

    runs = {65536: [_rr(0.2), _rr(0.15)], 262144: [_rr(0.6), _rr(0.55, wrong=2)], 1 << 20: [_rr(2.3), _rr(2.2)]}
    res = IN.result("agg-leaf", ["h0", "h1", "h2", "h3"], "x0", runs, 1, 25000.0, 4e6, {}, [1.0, 1.0, 1.0])
    ring = [{"collective": "allreduce", "algorithm": "ring", "size_bytes": s, "algbw_bps": bw}
            for s, bw in ((65536, 7.5e6), (262144, 8e6))]
    sweep = {"link_rate_bps": 10e6, "jobs": [{"rows": ring + [{"collective": "allreduce", "algorithm": "tree",
                                                              "size_bytes": 65536, "algbw_bps": 1.0}]}]}
    inn = innetwork_summary(res, sweep)
    assert list(inn["sizes"]) == ["65536", "262144", "1048576"] and inn["link_rate_bps"] == 4e6
    small, mid, big = inn["sizes"].values()
    assert small["algbw_over_link"] == pytest.approx(65536 * 8 / 0.15 / 4e6, abs=1e-3)
    assert small["ring_algbw_over_link"] == 0.75 and mid["ring_algbw_over_link"] == 0.8   # the ring's, not tree's
    assert big["ring_algbw_over_link"] is None and small["exact"] and not mid["exact"] and mid["wrong"] == 2
    assert inn["wrong"] == 2 and not inn["exact"] and inn["aggregator"] == "x0"
    line = innetwork_line(inn)
    assert "65536 B 0.87 vs 0.75" in line and "1048576 B 0.95 vs -" in line and "#wrong 2" in line
    assert innetwork_summary(res, None)["sizes"]["65536"]["ring_algbw_over_link"] is None   # --no sweep
    assert health_parts({"innetwork": res})["innetwork"] is res
