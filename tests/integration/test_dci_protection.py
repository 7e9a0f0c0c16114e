"""``testbed run dci_protection --quick``: the OCS's reconfiguration window, measured live.

The OCS replica node darkens the ports whose circuit changes for reconfig x scale, then joins the
standby circuit; after the repair a scheduled change reverts it. Measured here: the window between "dark" and "light" on each OCS (its own timestamps)
and the outage of a 1 ms UDP stream (lost x interval, independent of the OCS's clock), both in real
units. Lower bounds are physics (the stream cannot come back before the window closes); upper bounds
leave room for the emulator's own process starts on a busy 2-core machine (at scale 50, 100 ms of
emulator overhead is 2 ms real).
"""

from __future__ import annotations

import json

import pytest

from tests.integration.runhealth import check_health, until_healthy

pytestmark = [pytest.mark.root, pytest.mark.mininet, pytest.mark.ovs]

RECONFIG_MS, DETECT_MS, SCALE = 20.0, 2.0, 50.0


def test_dci_protection_quick_measures_the_reconfiguration_window(tmp_path, capsys, quiet_cpu):
    from scenarios import dci_protection

    def run(attempt):
        out = tmp_path / str(attempt)
        assert dci_protection.main(["--quick", "--json", "--out", str(out), "--reconfig-ms", str(RECONFIG_MS),
                                    "--detect-ms", str(DETECT_MS), "--scale", str(SCALE)]) == 0
        return json.loads((out / "metrics.json").read_text()), (capsys.readouterr(), out)

    metrics, (printed, out), seen = until_healthy(run, quiet_cpu)
    summary = json.loads(printed.out)
    ocs, packet = summary["modes"]["ocs"], summary["modes"]["packet"]
    # both site OCSs saw the cut and switched; the monitors ran clean
    assert ocs["ocs_switched"] == 2 and ocs["monitor_errors"] == []
    for window in ocs["reconfig_window_real_ms"]:
        assert RECONFIG_MS <= window <= RECONFIG_MS + 5.0
    for detect in ocs["detection_real_ms"]:
        assert DETECT_MS <= detect <= DETECT_MS + 5.0
    # the stream's outage is one gap: at least detection + reconfiguration, at most that plus overhead
    assert ocs["longest_gap"] >= ocs["lost_in_window"] > 0
    assert ocs["model_outage_real_ms"] <= ocs["outage_real_ms"] + ocs["interval_ms"] / SCALE
    assert ocs["outage_real_ms"] <= ocs["model_outage_real_ms"] + 10.0
    # the scheduled revert after the repair is a planned switch: its outage is the reconfiguration alone
    for window in ocs["revert_window_real_ms"]:
        assert RECONFIG_MS <= window <= RECONFIG_MS + 5.0
    assert len(ocs["revert_window_real_ms"]) == 2
    assert RECONFIG_MS - 1.0 <= ocs["revert_outage_real_ms"] <= RECONFIG_MS + 8.0
    # every lost packet falls in one of the two windows
    assert ocs["lost"] == ocs["lost_in_window"] + ocs["lost_after_repair"]
    # packet-level reroute ran through the controller, which rerouted without handler errors
    assert packet["controller_handler_errors"] == 0 and 0 < packet["controller_reroute_wall_ms"] < 5000
    assert packet["longest_gap"] == packet["lost_in_window"] > 0 and packet["received"] > 0
    assert packet["bfd_model_outage_real_ms"] > packet["port_down_model_outage_real_ms"]
    assert (out / "ocs-events.json").exists()
    # the fibres were emulated with their propagation delay, dilated (30 km: 150 us real, 7.5 ms at x50)
    for mode in (ocs, packet):
        working = [f for f in mode["fibres"].values() if f["tier"] == "working"]
        assert len(working) == 1 and working[0]["backend"] in ("netem", "userspace")
        assert working[0]["emulated_delay_ms"] == pytest.approx(working[0]["real_delay_ms"] * SCALE)
        assert working[0]["real_delay_ms"] == pytest.approx(0.150, abs=1e-4)
        assert sum(f["km"] for f in mode["fibres"].values() if f["tier"] == "standby") == pytest.approx(40)
    # nothing lost before the cut; the OCS mode's evidence names this process (its OCS nodes are threads)
    assert ocs["lost_before_cut"] == 0 and packet["lost_before_cut"] == 0
    ev = check_health(metrics, printed.err, links=True, seen=seen)
    assert set(ev["parts"]) == {"ocs", "packet"} and "scenario" in ev["parts"]["ocs"]["cpu"]
    assert "controller" in ev["parts"]["packet"]["cpu"] and ev["unaccounted"] == 0 and summary["emulator_ok"]
    # the fibres' delay lines are in the evidence: on time, nothing lost in their sockets but the cut's own
    assert ev["late_fraction"] is not None and ev["lost_inside_emulator"] == 0
    assert any(k.startswith("ocs: dl") for k in ev["lateness_us"]), ev["lateness_us"].keys()
