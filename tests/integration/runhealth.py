"""What every scenario test checks of its run's emulator health (testbed.emu.runhealth): the block is in
metrics.json with its evidence, its line is on the console, and -- where the quick mode is sized to run
healthy on an idle 2-core machine -- it says healthy (the failure names the reasons). Every run's block
carries the machine's timer stalls, measured by a SCHED_FIFO probe."""

from __future__ import annotations

EVIDENCE = {"reasons", "late_fraction", "lateness_us", "unaccounted", "lost_inside_emulator", "machine", "cpu",
            "own_cores"}


def check_health(metrics: dict, printed: str, healthy: bool = True, links: bool = False) -> dict:
    """Assert the run's health block; ``links``: the run has link nodes (lateness percentiles measured).
    Returns the evidence."""
    assert isinstance(metrics.get("emulator_ok"), bool), f"no emulator_ok in metrics.json: {sorted(metrics)}"
    ev = metrics["emulator"]
    assert EVIDENCE <= set(ev), sorted(EVIDENCE - set(ev))
    assert metrics["emulator_ok"] == (not ev["reasons"]), ev["reasons"]
    assert ev["machine"] is not None and 0.0 <= ev["machine"]["busy"] <= 1.0 and ev["machine"]["host_steal"] >= 0
    timers = ev.get("timers") or {}   # the timer probe beside the run's CpuWatch (testbed.emu.timerprobe)
    assert timers.get("stalled_fraction") is not None and timers["wakeups"] > 0, f"no timer-probe figures: {timers}"
    assert timers["policy"].startswith("SCHED_FIFO"), timers["policy"]   # scenario tests run as root
    if links:
        assert ev["late_fraction"] is not None and ev["lateness_us"], "link nodes ran but no lateness measured"
        assert all(p.get("p99") is not None for dirs in ev["lateness_us"].values() for p in dirs.values()
                   if p.get("p50") is not None)
    assert f"emulator_ok: {metrics['emulator_ok']}" in printed, "no health line on the console"
    if healthy:
        assert metrics["emulator_ok"], f"quick mode not healthy: {ev['reasons']}"
    return ev
