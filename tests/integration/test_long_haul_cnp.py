"""The long-haul scenario end to end (reduced: 30 km, bottleneck at the sender-side DCI, both modes).

Checks protocol behaviour that could fail: with fast CNP the switch's CNPs reach the soft-RDMA senders
(accepted: ICRC and QP right) without any CE mark, and the feedback reaches the sender sooner than
end-to-end ECN's, which must cross the long haul twice.
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
    if ecn["emulator_saturated"] or fast["emulator_saturated"]:
        pytest.skip(f"emulator saturated: {ecn['saturation'] + fast['saturation']}")
    assert fast["feedback_delay_ms"] is not None and ecn["feedback_delay_ms"] is not None
    assert fast["feedback_delay_ms"] < ecn["feedback_delay_ms"] / 2
