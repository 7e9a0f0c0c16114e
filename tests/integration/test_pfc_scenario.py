"""``testbed run pfc_incast --quick``: the scenario runs end to end and its figures make sense.

The same claims as test_pfc_incast.py, read from the scenario's own summary: a row from an unhealthy
emulator must say so (``valid: false`` and why), which the assertions below accept only with a reason.
"""

from __future__ import annotations

import json

import pytest

from tests.integration.runhealth import check_health

pytestmark = [pytest.mark.root, pytest.mark.slow]


def _run(out, capsys) -> dict:
    from scenarios import pfc_incast

    # without --json the result table is data, on stdout (`> file` keeps it); progress stays on stderr
    assert pfc_incast.main(["--quick", "--out", str(out), "--seconds", "1", "--storm", "2"]) == 0
    printed = capsys.readouterr()
    assert "PFC incast at" in printed.out and "RoCE dropped" in printed.out, printed.out
    assert "PFC incast at" not in printed.err and "results in" in printed.err and "results in" not in printed.out
    summary = json.loads((out / "summary.json").read_text())
    rows = {(r["pfc"], r["storm_s"] is not None, r["watchdog"]): r for r in summary["rows"]}
    assert len(rows) == 4
    for r in rows.values():
        # a valid trial accounts for every frame; one that does not must say so (and is then not valid)
        assert r["valid"] or r["invalid_because"], r
        assert r["unaccounted"] == 0 or (not r["valid"] and "all_accounted" in r["invalid_because"]), r
    return rows, printed.out


#: Runs of the scenario the lossless claim may take: it holds only for a trial whose emulator reacted
#: within the headroom, and one CI run had the PFC-on trial's link cores 14 % late (a PAUSE acted on
#: 90 ms late against 18 ms of headroom: 345 RoCE frames dropped, the trial INVALID and saying why).
#: A second unhealthy run in a row fails. The PFC-off trial (tail drop, no lossless priority) is often
#: late here and may be INVALID, saying why; its loss claim holds all the same. Once (CI, 2026-12-04 01:15,
#: load 3.7) its link cores were late with 138 frames unaccounted, and it said so (all_accounted,
#: late_fraction_ok): a trial may leave frames unaccounted only when it names that reason.
ATTEMPTS = 2


def test_pfc_incast_quick(tmp_path, capsys):
    for attempt in range(1, ATTEMPTS + 1):
        out = tmp_path / f"run{attempt}"
        rows, printed = _run(out, capsys)
        if rows[(True, False, None)]["valid"]:
            break
        print(f"attempt {attempt}: PFC-on trial invalid ({rows[(True, False, None)]['invalid_because']})")
    on, off = rows[(True, False, None)], rows[(False, False, None)]
    assert on["valid"], f"the PFC-on trial was invalid {ATTEMPTS} times in a row: {on['invalid_because']}"
    stuck, broken = rows[(True, True, None)], rows[(True, True, "drop")]
    assert on["roce_dropped"] == 0 and on["lossy_dropped"] > 0 and on["pause_sent"] > 0
    assert off["roce_dropped"] > 0 and off["pause_sent"] == 0
    # a stuck receiver: without the watchdog the bottleneck is held for the whole storm and nothing is lost;
    # with it, one storm is declared and its frames are dropped as pfc_watchdog
    assert stuck["storms"] == 0 and stuck["roce_dropped"] == 0 and stuck["bottleneck_paused_s"] >= 0.9 * 2.0
    assert broken["storms"] >= 1 and broken["watchdog_drops"] > 0
    assert (out / "pfc_incast.png").stat().st_size > 10_000
    metrics = json.loads((out / "metrics.json").read_text())
    assert len(metrics["trials"]) == 4 and (out / "pfc-4-True.pcap").stat().st_size > 24
    # the run's health: every trial's link-core lateness, ledger and CPU; the valid PFC-on trial is healthy
    ev = check_health(metrics, printed, healthy=False, links=True)
    assert ev["parts"]["4:1, PFC on"]["reasons"] == []
    assert ev["unaccounted"] == sum(r["unaccounted"] for r in rows.values())   # the health block's ledger = the rows'
    assert metrics["emulator_ok"] == all(not p["reasons"] for p in ev["parts"].values())
