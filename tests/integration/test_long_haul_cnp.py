"""The long-haul scenario end to end (reduced: 30 km, bottleneck at the sender-side DCI, both modes).

Checks protocol behaviour that could fail: with fast CNP the switch's CNPs reach the soft-RDMA senders
(accepted: ICRC and QP right) without any CE mark, and the feedback reaches the sender sooner than
end-to-end ECN's, which must cross the long haul twice. Every trial carries its validity verdict (rows.json,
summary.json, metrics.json with ``emulator_ok`` and the frame ledger), a valid fast-CNP trial has switch CNPs
and CNPs at the senders, and ``testbed validate --long-haul`` computes its rows from the folder.
"""

from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.root, pytest.mark.mininet, pytest.mark.bmv2, pytest.mark.slow]


def test_fast_cnp_feedback_beats_ecn_across_30km(tmp_path, capsys):
    from scenarios.long_haul_cnp import main

    rc = main(["--quick", "--distances", "30", "--cases", "sender-dci", "--iters", "2", "--json",
               "--out", str(tmp_path)])
    assert rc == 0
    summary = json.loads(capsys.readouterr().out)
    rows = {r["mode"]: r for r in summary["rows"]}
    assert set(rows) == {"ecn", "fast-cnp"}
    full = {r["mode"]: r for r in json.loads((tmp_path / "rows.json").read_text())}
    ecn, fast = full["ecn"], full["fast-cnp"]
    for r in (ecn, fast):
        assert r["throughput_mbps"] > 0 and r["fct_p50_ms"] > 0 and r["fct_p99_ms"] >= r["fct_p50_ms"]
    # ECN: the switch marks, the receivers answer; fast CNP: no marks, the switch's CNPs are accepted
    assert ecn["marks"] > 0 and ecn["switch_cnps"] == 0
    assert fast["marks"] == 0 and fast["switch_cnps"] > 0 and fast["cnps_at_senders"] > 0
    # every trial is checked before it is shown: the verdict is in every document, with reasons when invalid
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert isinstance(metrics["emulator_ok"], bool) and len(metrics["trials"]) == 2
    for r in list(full.values()) + summary["rows"] + metrics["trials"]:
        assert isinstance(r["valid"], bool) and r["valid"] == (not r["validity"]["reasons"])
    for r in full.values():
        assert r["accounting"]["sent"] > 0 and r["unaccounted_losses"] is not None
        assert set(r["bottleneck"]) >= {"real_rate_bps", "kmin_bytes", "kmax_bytes", "pmax"}
    if fast["valid"]:
        assert fast["switch_cnps"] > 0 and fast["cnps_rx"] > 0
    from testbed.validate.longhaul import load, long_haul_rows

    rows_out = long_haul_rows(load(tmp_path), model_duration_s=0.05)
    computed = [r.metric for r in rows_out]
    assert ("invalid trials left out" in computed) == (not (ecn["valid"] and fast["valid"]))
    if ecn["valid"]:
        assert "sender-dci 30 km: ECN feedback >= bound" in computed
    if ecn["emulator_saturated"] or fast["emulator_saturated"]:
        pytest.skip(f"emulator saturated: {ecn['saturation'] + fast['saturation']}")
    assert fast["feedback_delay_ms"] is not None and ecn["feedback_delay_ms"] is not None
    assert fast["feedback_delay_ms"] < ecn["feedback_delay_ms"] / 2
