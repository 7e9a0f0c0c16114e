"""The long-haul scenario end to end (quick: 30 km, bottleneck at the sender-side DCI, both modes).

The headline test: it never skips. Its quick mode is sized to run healthy on an idle 2-core machine, and it
asserts so: every frame lost is attributed (none were, in the runs recorded in docs/validation.md), both
trials are valid, fast CNP fired (the switch's CNPs were accepted by the soft-RDMA senders, ICRC and QP
right, without any CE mark), and its feedback reached the senders in less than half of end-to-end ECN's,
which must cross the long haul twice (and is itself at or above the physics bound that
``testbed validate --long-haul`` checks). Each trial's data sample (the first sender's first 1500 RoCEv2
frames, both ways at its host link) passes ``testbed roce check --expect-ect``: all data ECN-capable, 0
violations, no bad ICRC (a trial whose sample fails is INVALID, naming the violation).

On a machine other runs overload, a trial says so (INVALID, with the reason); the test then runs the quick
mode once more and fails if it is still not healthy, naming the reasons: rerun it alone.
"""

from __future__ import annotations

import json

import pytest

from tests.integration.runhealth import check_health

pytestmark = [pytest.mark.root, pytest.mark.mininet, pytest.mark.bmv2, pytest.mark.slow, pytest.mark.timing_first]


def _run(out, capsys):
    from scenarios.long_haul_cnp import main

    rc = main(["--quick", "--distances", "30", "--cases", "sender-dci", "--iters", "2", "--out", str(out)])
    assert rc == 0
    # the trial table and the verdict are data: on stdout, so `testbed run long_haul_cnp > f` keeps them;
    # progress (each trial's health line, where the results went) stays on stderr
    printed = capsys.readouterr()
    assert "long-haul congestion feedback" in printed.out and "emulator_ok:" in printed.out, printed.out
    assert "long-haul congestion feedback" not in printed.err and "results in" in printed.err
    assert "results in" not in printed.out
    summary = json.loads((out / "summary.json").read_text())
    full = {r["mode"]: r for r in json.loads((out / "rows.json").read_text())}
    return summary, full, printed.out


ATTEMPTS = 5


def _problems(full) -> list[str]:
    return [f"{mode}: {'; '.join(r['validity']['reasons'])}" for mode, r in full.items() if not r["valid"]]


def test_fast_cnp_feedback_beats_ecn_across_30km(tmp_path, capsys, quiet_cpu):
    # An invalid run (the emulator late or losing frames: said in its verdict) is discarded, never asserted
    # on; up to ATTEMPTS runs, then the verdict stands. CI at load ~1 saw 1.4-4 % late link-node frames in
    # runs that passed alone, so one retry was not enough to tell an overloaded machine from a broken result;
    # and the host's CPU steal comes in bursts (0.4-9 % over a minute, docs/pfc.md), so five runs, each
    # started once a quiet second shows no steal.
    seen = []
    for attempt in range(1, ATTEMPTS + 1):
        if attempt > 1:
            quiet_cpu()  # the previous run's teardown is still being cleaned up by the kernel
        out = tmp_path / str(attempt)
        summary, full, printed = _run(out, capsys)
        seen.append(_problems(full))
        if not seen[-1]:
            break
    assert not seen[-1], f"quick mode not healthy in {ATTEMPTS} runs: {seen}"
    assert {r["mode"] for r in summary["rows"]} == {"ecn", "fast-cnp"}
    ecn, fast = full["ecn"], full["fast-cnp"]
    # every frame attributed; none lost inside the emulator; every document carries the verdict
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["emulator_ok"] is True and summary["emulator_ok"] is True and summary["invalid_trials"] == 0
    ev = check_health(metrics, printed, links=True)   # the shared shape, one part per trial
    assert len(ev["parts"]) == 2 and ev["unaccounted"] == 0
    for r in (ecn, fast):
        acc = r["accounting"]
        assert acc["sent"] > 1000 and acc["unaccounted"] == 0 and r["unaccounted_losses"] == 0
        assert not acc.get("places"), f"frames lost inside the emulator: {acc['places']}"
        assert r["health"]["healthy"] and r["emulator_ok"] and not r["saturation"]
        assert r["throughput_mbps"] > 0 and 0 < r["fct_p50_ms"] <= r["fct_p99_ms"]
        assert set(r["bottleneck"]) >= {"real_rate_bps", "kmin_bytes", "kmax_bytes", "pmax"}
        assert r["bottleneck"]["flows"] == 2                     # both senders cross the sender-side DCI
        # the scenario's own DCQCN data is ECN-capable and passes roce check on a bounded sample
        dc = r["data_check"]
        assert dc is not None and dc["capture"] == "data-h0.pcap", dc
        assert dc["packets"] > 0 and dc["data_packets"] > 0 and dc["ect"] and dc["not_ect"] == 0, dc
        assert dc["violations"] == 0 and dc["ok"] and dc["reasons"] == [], dc
        assert dc["cnps"] > 0 and dc["ce_marked"] == 0     # CNPs reach the sender; data leaves it unmarked
    # the conservation ledger ran: every element and wire of the replica balanced (nothing missing)
    trial = json.loads((out / "30km" / "sender-dci-fast-cnp" / "trial.json").read_text())
    hops = trial["hops"]
    assert {"x0", "x1", "d0", "d1"} <= set(hops["elements"]) and hops["missing"] == {}
    assert trial["ring_drops"] is not None, "the BMv2 receive shim did not report its capture rings"
    assert trial["ring_frames_min"] >= 8000, "a BMv2 port's ring holds few frames: offloads left on?"
    # ECN: the switch marks, the receivers answer; fast CNP: no marks, the switch's CNPs are accepted
    assert ecn["marks"] > 0 and ecn["switch_cnps"] == 0 and ecn["cnps_at_senders"] > 0
    assert fast["marks"] == 0 and fast["switch_cnps"] > 0 and fast["cnps_at_senders"] > 0
    assert fast["feedback_delay_ms"] is not None and ecn["feedback_delay_ms"] is not None
    assert fast["feedback_delay_ms"] < ecn["feedback_delay_ms"] / 2
    from testbed.validate.longhaul import load, long_haul_rows

    rows = {r.metric: r for r in long_haul_rows(load(out), model_duration_s=0.05)}
    assert "invalid trials left out" not in rows
    assert rows["sender-dci 30 km: ECN feedback >= bound"].passed
    # the timeline: each sender's DCQCN rate over time, the congestion point's queue, CNP arrivals
    assert (out / "30km" / "timeline.png").stat().st_size > 10_000
    for t in (trial, json.loads((out / "30km" / "sender-dci-ecn" / "trial.json").read_text())):
        tl = t["timeline"]
        assert t["queue_sampler_error"] is None
        assert all(len(x["t_ms"]) >= 10 for x in tl["rate"].values())
        cut = [min(x for x in s["rate_gbps"] if x is not None) for s in tl["rate"].values()]
        assert max(cut) < 10.0 * 0.9, f"DCQCN never cut a sender's rate below 90 % of 10G: {cut}"
        queued = [q for q in tl["queue"]["pkts"] if q is not None]
        assert len(queued) >= 10 and max(queued) > 0
        # every CNP a sender counted was captured at its interface (a late one may reach an ended sender)
        assert sum(len(c) for c in tl["cnps"].values()) >= sum(r["cnps_rx"] for r in t["senders"]) > 0
