"""``testbed run pfc_deadlock --quick``: PFC deadlocks a ring whose routing closes a buffer cycle, and the PFC
watchdog breaks it (issue 16's deadlock acceptance, on a replica: OVS switches under the fabric controller,
every link a link node with PFC)."""

from __future__ import annotations

import json

import pytest

from tests.integration.runhealth import check_health

pytestmark = [pytest.mark.root, pytest.mark.mininet, pytest.mark.ovs, pytest.mark.slow]

#: Runs the claims may take: a trial whose emulator lost frames (OVS's sockets) says INVALID and why.
ATTEMPTS = 2


def test_pfc_deadlock_quick(tmp_path, capsys):
    from scenarios import pfc_deadlock

    for attempt in range(1, ATTEMPTS + 1):
        out = tmp_path / f"run{attempt}"
        assert pfc_deadlock.main(["--quick", "--out", str(out)]) == 0
        printed = capsys.readouterr()
        rows = {r["trial"]: r for r in json.loads((out / "summary.json").read_text())["rows"]}
        if all(r["valid"] for r in rows.values()):
            break
    metrics = json.loads((out / "metrics.json").read_text())
    frozen, watched = rows["no watchdog"], rows["watchdog drop"]
    assert frozen["valid"] and watched["valid"], metrics["emulator"]["reasons"]
    assert "PFC on a ring of 5" in printed.out
    # without the watchdog: every ring channel is paused by the next and holds frames; nothing is delivered
    # in the second half of the sending time; the frames still inside are accounted as held, none lost
    assert frozen["deadlocked"] and frozen["frozen"] and frozen["ring_paused_at_end"] == 5
    assert frozen["delivered_second_half"] == 0 and frozen["received"] > 0      # it moved, then locked
    assert frozen["held"] > 0 and frozen["dropped"] == 0 and frozen["unaccounted"] == 0 and frozen["storms"] == 0
    assert frozen["sent"] == frozen["received"] + frozen["held"]
    # with it: storms declared, their queues' frames dropped (counted as pfc_watchdog), traffic keeps moving
    assert watched["storms"] > 0 and watched["watchdog_drops"] > 0 and watched["dropped"] == watched["watchdog_drops"]
    assert not watched["deadlocked"] and watched["delivered_second_half"] > 0
    assert watched["received"] > frozen["received"] and watched["unaccounted"] == 0
    check_health(metrics, printed.out + printed.err, healthy=False, links=True)
