"""``testbed validate --quick --json``: the alignment table on this machine (root, about a minute on 2 cores).

Runs the replica rows (DCQCN senders vs the fluid model and the discrete simulation, link delay/rate/gap CCDF,
RED curve, single-flow goodput) and checks their verdicts. The long-haul rows need a long_haul_cnp results folder and must be
listed as missing, never as passed.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.root]

#: Rows measured and shown but not gated (docs/validation.md, "Open rows"). Discrete simulation: a replica run
#: is one realisation, judged against the band holding 95% of 20 seeded runs, so a true realisation fails
#: each row about 1 time in 20 and a gate on four such rows would fail one run in five by chance. Measured
#: (2026-12-04, five healthy runs, six experiments): the replica's goodput 362-414 Mb/s against the
#: simulation's 350-429 (median 376, so one run was 10.1% off against 10%), queue RMS 0.105-0.145 of Kmax
#: against a 0.174 band, convergence 18-32 ms against 18-29 ms for 36 of 40 runs. They are measured, finite
#: and plotted; the fair-share rows are asserted. The fluid model's rows are gated where they are in its
#: scope (rows.mark_scope: at least 90% of the discrete process's own runs pass them); at ~1.4 packets per
#: flow per CNP interval the mean field does not hold for these, which the discrete runs fail too:
_DCQCN_OPEN = ("rate trajectory", "queue trajectory", "aggregate goodput", "convergence time")
FLUID_OUT_OF_SCOPE = ("rate trajectory", "aggregate goodput", "convergence time")
KNOWN_OPEN = {"DCQCN discrete simulation": _DCQCN_OPEN}


def _validate(out: Path):
    env = {**os.environ, "TESTBED_LOCK_WAIT": os.environ.get("TESTBED_LOCK_WAIT", "1800")}
    proc = subprocess.run([sys.executable, "-m", "testbed.cli", "validate", "--quick", "--json", "--out",
                           str(out)], capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode in (0, 1) and proc.stdout.strip(), proc.stderr[-3000:]
    return proc, json.loads(proc.stdout)


def test_validate_quick_rows(tmp_path):
    # KNOWN GAP (docs/validation.md): on this 2-core VM the delay line is sometimes late by ~1 ms on 1-4% of
    # frames even when idle, which the health rule counts as unhealthy. One retry; if the emulator is still
    # unhealthy, the run must say so and must not pass — its rows are then not judged.
    out = tmp_path / "first"
    proc, doc = _validate(out)
    if not doc["health"]["healthy"]:
        out = tmp_path / "retry"
        proc, doc = _validate(out)
    if not doc["health"]["healthy"]:
        late = [r for r in doc["health"]["runs"] if r.get("late") or r.get("rx_kernel_drops")]
        assert late and all(r.get("rx_kernel_drops") or r["late_share"] > 0.01 for r in late), doc["health"]
        assert not doc["all_passed"] and proc.returncode == 1
        return
    rows = doc["rows"]
    refs = {r["reference"] for r in rows}
    assert {"DCQCN fluid model (CoNEXT'16)", "DCQCN discrete simulation", "ideal link", "ideal link (Mininet-HiFi gap CCDF)",
            "RED curve (configured)", "min(rate, window/RTT)"} <= refs
    detail = [(r["metric"], r["replica"], r["expected"], r["error"]) for r in rows]
    for r in rows:
        if r["kind"] == "missing":
            assert r["reference"].startswith("physics") and not r["passed"]
            continue
        assert r["replica"] is not None and math.isfinite(r["replica"]), detail
        assert r["backends"], r
        assert r["plot"] and Path(r["plot"]).is_file(), r
        if r["reference"].startswith("DCQCN fluid") and r["metric"].startswith(FLUID_OUT_OF_SCOPE):
            assert r["scope"].startswith("out of this reference's scope"), r
        if not r["metric"].startswith(KNOWN_OPEN.get(r["reference"], ())) and not r["scope"]:
            assert r["passed"], (r, detail)
    scoped = [r for r in rows if r["scope"]]
    assert doc["out_of_scope"] == len(scoped) and all(r["reference"].startswith("DCQCN fluid") for r in scoped)
    assert doc["measured"] == sum(r["kind"] not in ("missing", "info") and not r["scope"] for r in rows)
    assert doc["missing"] == 3
    assert (proc.returncode == 0) == doc["all_passed"]
    assert (out / "validate.json").is_file() and (out / "raw.json").is_file()
    # the run's seed is recorded, and each experiment's link seed derives from it, beside its first CNP and cut
    from testbed.seeds import derive

    (exp,) = doc["experiments"]
    assert exp["link_seed"] == derive(doc["seed"], "dcqcn0"), exp
    assert 0 < exp["first_cnp_real_ms"] <= exp["first_cut_real_ms"], exp
    seeds = [r["link_seed"] for r in doc["health"]["runs"] if r["run"].startswith(("dcqcn", "goodput", "gaps"))]
    assert len(set(seeds)) == len(seeds) == 5, doc["health"]["runs"]
