"""The emulator_ok block every run writes (testbed.emu.runhealth), from fake evidence: healthy, late link
nodes, host steal, unaccounted and in-emulator losses, a busy machine without a lateness measure, and the
join of a run's parts."""

from __future__ import annotations

from testbed.emu import runhealth
from testbed.links import accounting

EDGES = ("<10us", "10-20us", "20-50us", "50-100us", "100-200us", "200-500us", "500-1000us", ">=1ms")


def _link(tx=10_000, late=0, hist=None, kernel_drops=0, cpu_s=2.0, uptime_s=10.0):
    hist = hist or {"<10us": tx}
    d = {"rx_packets": tx, "tx_packets": tx, "emulator_late": late, "tx_errors": 0, "max_lateness_s": 0.004,
         "lateness_histogram": {e: hist.get(e, 0) for e in EDGES}}
    return {"core": "c", "cpu_s": cpu_s, "uptime_s": uptime_s, "rx_kernel_drops": kernel_drops,
            "directions": {"a>b": d, "b>a": dict(d)}}


def _cpu(busy=40.0, steal=0.002, procs=None):
    return {"machine_mean": busy, "switch_max": 30.0, "host_steal": steal,
            "processes": procs if procs is not None else {"ovs-vswitchd": {"cpu_s": 1.5, "wall_s": 5.0}}}


def test_healthy_run_says_ok_with_its_evidence():
    block = runhealth.assess(cpu=_cpu(), link_stats={"dl0": _link()}, unaccounted=0)
    ev = block["emulator"]
    assert block["emulator_ok"] is True and ev["reasons"] == []
    assert ev["late_fraction"] == 0.0 and ev["lost_inside_emulator"] == 0 and ev["unaccounted"] == 0
    assert ev["lateness_us"]["dl0"]["a>b"]["p99"] == 10
    assert ev["machine"] == {"busy": 0.4, "host_steal": 0.002, "switch_max": 0.3}
    assert ev["cpu"]["dl0"]["cpu_fraction"] == 0.2 and ev["cpu"]["ovs-vswitchd"]["cpu_fraction"] == 0.3
    assert ev["own_cores"] == 0.5
    text = runhealth.line(block)
    assert text.startswith("emulator_ok: True [") and "late 0.00% (p99 <= 10 us)" in text
    assert "steal 0.2%" in text and "own CPU 0.50 cores" in text


def test_late_link_nodes_fail_the_run_and_show_their_percentiles():
    hist = {"<10us": 9_000, "200-500us": 600, ">=1ms": 400}
    block = runhealth.assess(cpu=_cpu(), link_stats={"dl0": _link(late=400, hist=hist)})
    ev = block["emulator"]
    assert block["emulator_ok"] is False
    assert ev["late_fraction"] == 0.04 and "4.00% of link-node frames late" in ev["reasons"][0]
    assert ev["lateness_us"]["dl0"]["a>b"] == {"p50": 10, "p99": 4000.0, "p99.9": 4000.0}
    assert runhealth.line(block).startswith("emulator_ok: False -- 4.00% of link-node frames late")


def test_host_steal_fails_the_run():
    block = runhealth.assess(cpu=_cpu(steal=0.08))
    assert block["emulator_ok"] is False
    assert block["emulator"]["reasons"] == ["the hypervisor took 8.0% of the CPU time (host steal > 5%)"]
    assert runhealth.assess(cpu=_cpu(steal=0.04))["emulator_ok"] is True


def test_unaccounted_and_in_emulator_losses_fail_the_run():
    block = runhealth.assess(link_stats={"dl0": _link(kernel_drops=3)}, unaccounted=2)
    reasons = block["emulator"]["reasons"]
    assert block["emulator_ok"] is False
    assert reasons[0] == "2 frames lost without a counted cause"
    assert reasons[1].startswith("3 frames lost inside the emulator")
    assert block["emulator"]["machine"] is None       # no CPU watched: said as such, not as zero


def test_a_cut_link_nodes_unsent_frames_are_the_cut_not_the_emulators():
    cut = _link()
    cut["directions"]["a>b"]["tx_errors"] = 5         # frames inside the line when its sides went down
    stats = {"dl4": cut, "dl5": _link()}
    assert runhealth.assess(link_stats=stats)["emulator"]["lost_inside_emulator"] == 5
    block = runhealth.assess(link_stats=stats, cut=["dl4"])
    assert block["emulator_ok"] is True and block["emulator"]["lost_inside_emulator"] == 0
    cut["rx_kernel_drops"] = 2                         # its socket's drops stay the emulator's
    assert runhealth.assess(link_stats=stats, cut=["dl4"])["emulator"]["lost_inside_emulator"] == 2


def test_busy_machine_counts_only_without_a_lateness_measure():
    no_links = runhealth.assess(cpu=_cpu(busy=97.0))
    assert no_links["emulator_ok"] is False and "machine CPU 97% busy, and no lateness" in no_links["emulator"]["reasons"][0]
    with_links = runhealth.assess(cpu=_cpu(busy=97.0), link_stats={"dl0": _link()})
    assert with_links["emulator_ok"] is True        # the link cores' lateness says they kept up


def test_scenario_reasons_come_first_and_are_not_repeated():
    block = runhealth.assess(unaccounted=2, reasons=["2 frames lost without a counted cause", "QP timeouts"])
    assert block["emulator"]["reasons"] == ["2 frames lost without a counted cause", "QP timeouts"]


def test_the_full_ledgers_health_is_taken_as_it_is():
    ledger = accounting.metrics_block({"f": 100}, {"f": 97}, {"dl0": _link(tx=97)})["emulator"]
    block = runhealth.assess(cpu=_cpu(), ledger=ledger)
    ev = block["emulator"]
    assert block["emulator_ok"] is False and ev["unaccounted"] == 3
    assert ev["reasons"] == ["3 frames lost without a counted cause"]
    assert ev["lateness_us"] == ledger["lateness_us"] and ev["machine"]["busy"] == 0.4


def test_combine_is_healthy_only_when_every_part_is():
    good = runhealth.assess(cpu=_cpu(), link_stats={"dl0": _link()}, unaccounted=0)
    bad = runhealth.assess(cpu=_cpu(busy=60.0, steal=0.09), unaccounted=1)
    both = runhealth.combine({"ocs": good, "packet": bad})
    ev = both["emulator"]
    assert both["emulator_ok"] is False
    assert ev["reasons"][0] == "packet: 1 frames lost without a counted cause"
    assert ev["unaccounted"] == 1 and ev["late_fraction"] == 0.0
    assert ev["machine"] == {"busy": 0.6, "host_steal": 0.09, "switch_max": 0.3}
    assert set(ev["parts"]) == {"ocs", "packet"} and "ocs: dl0" in ev["lateness_us"]
    assert runhealth.combine({"a": good, "b": good})["emulator_ok"] is True


def test_a_reason_the_scenario_gave_is_not_said_twice_in_other_words():
    block = runhealth.assess(cpu=_cpu(busy=97.0), reasons=["machine CPU 97%"])
    assert block["emulator"]["reasons"] == ["machine CPU 97%"]


def test_results_health_says_it_in_one_line_and_the_index_metrics_carries_it(tmp_path, capsys):
    import argparse
    import json

    from testbed.scenario import Results

    out = tmp_path / "run"
    with Results("fabric_failover", argparse.Namespace(out=str(out), quick=True, json=False)) as res:
        block = res.health(cpu=_cpu(steal=0.08), unaccounted=0)
        res.finish({"flows": 2})
    printed = capsys.readouterr().out
    assert printed.count("emulator_ok: False -- the hypervisor took 8.0%") == 1
    metrics = json.loads((out / "metrics.json").read_text())   # the scenario wrote none: the index has it
    assert metrics["emulator_ok"] is False and metrics["emulator"] == block["emulator"]
    assert metrics["summary"] == {"flows": 2}


def _timers(stalled=0.0004, policy="SCHED_FIFO 20", p99=66, stalls=0):
    """A timer probe's summary (testbed.emu.timerprobe.summarise's keys)."""
    return {"policy": policy, "period_us": 1000, "wakeups": 30_000, "wall_s": 30.0,
            "lateness_us": {"p50": 25, "p99": p99, "max": 900}, "stalls": stalls, "stall_ms": 10.0,
            "tolerance_us": 250.0, "late_s": stalled * 30, "stalled_fraction": stalled,
            "stalled_fraction_beyond": {"1ms": 0.0, "5ms": 0.0}, "cpu_s": 0.8, "cpu_fraction": 0.027}


def test_an_idle_machines_timers_keep_a_run_without_link_nodes_healthy_and_are_said():
    block = runhealth.assess(cpu={**_cpu(), "timers": _timers()})
    assert block["emulator_ok"] is True and block["emulator"]["timers"]["stalled_fraction"] == 0.0004
    assert "timers stalled 0.04% (p99 66 us, 0 over 10 ms, SCHED_FIFO 20)" in runhealth.line(block)


def test_stalled_timers_fail_a_run_without_a_link_node_naming_the_figure():
    block = runhealth.assess(cpu={**_cpu(), "timers": _timers(stalled=0.031, p99=12_000, stalls=40)})
    assert block["emulator_ok"] is False
    assert block["emulator"]["reasons"] == ["timers stalled 3.1% of the run (> 1%): tc/OVS/BMv2 timing is the machine's"]
    # a frame ledger without link nodes still says 0.0 late: that is no measure (the netem long haul's case)
    ledger = accounting.metrics_block({"f": 100}, {"f": 100}, {})["emulator"]
    assert ledger["late_fraction"] == 0.0
    stalled = runhealth.assess(cpu={**_cpu(), "timers": _timers(stalled=0.031)}, ledger=ledger)
    assert stalled["emulator_ok"] is False and "timers stalled 3.1%" in stalled["emulator"]["reasons"][0]
    assert runhealth.assess(cpu={**_cpu(), "timers": _timers(stalled=0.009)}, ledger=ledger)["emulator_ok"] is True


def test_a_link_node_run_is_judged_by_its_own_lateness_and_records_the_timers():
    cpu = {**_cpu(), "timers": _timers(stalled=0.2, stalls=500)}
    block = runhealth.assess(cpu=cpu, link_stats={"dl0": _link()})
    assert block["emulator_ok"] is True and block["emulator"]["timers"]["stalled_fraction"] == 0.2
    late = runhealth.assess(cpu=cpu, link_stats={"dl0": _link(late=400, hist={"<10us": 9_600, ">=1ms": 400})})
    assert [r for r in late["emulator"]["reasons"] if "timers" in r] == []   # its late frames are the reason


def test_a_normal_policy_probe_is_recorded_not_judged():
    # without SCHED_FIFO the probe waits behind busy tasks, which a kernel timer does not
    block = runhealth.assess(cpu={**_cpu(), "timers": _timers(stalled=0.024, policy="SCHED_OTHER")})
    assert block["emulator_ok"] is True and block["emulator"]["timers"]["policy"] == "SCHED_OTHER"
    assert runhealth.timer_stall_reason({"error": "the timer probe did not start"}) is None
    assert runhealth.timer_stall_reason(None) is None


def test_combine_keeps_the_worst_parts_timers_and_says_which():
    calm = runhealth.assess(cpu={**_cpu(), "timers": _timers(stalled=0.001)})
    stalled = runhealth.assess(cpu={**_cpu(), "timers": _timers(stalled=0.05)})
    both = runhealth.combine({"ecn": calm, "fast-cnp": stalled})
    assert both["emulator_ok"] is False and both["emulator"]["timers"]["part"] == "fast-cnp"
    assert both["emulator"]["timers"]["stalled_fraction"] == 0.05
    assert both["emulator"]["reasons"] == ["fast-cnp: timers stalled 5.0% of the run (> 1%): tc/OVS/BMv2 timing is "
                                           "the machine's"]
    assert runhealth.combine({"a": runhealth.assess(cpu=_cpu())})["emulator"]["timers"] is None
