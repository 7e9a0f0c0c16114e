"""``testbed run fabric_failover --quick``: the scenario runs end to end and its figures make sense."""

from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.root, pytest.mark.mininet, pytest.mark.ovs, pytest.mark.slow]


def test_fabric_failover_quick(tmp_path, capsys):
    from scenarios import fabric_failover

    assert fabric_failover.main(["--quick", "--json", "--out", str(tmp_path)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["flows"] == 240 and summary["ping_all_loss_pct"] == 0.0
    # the cut link carried some flows, not all of them; every flow is back on its old paths afterwards
    assert 0 < summary["flows_with_outage"] < summary["flows"]
    assert 0 < summary["flows_path_set_changed_on_failure"] < summary["flows"]
    assert summary["flows_back_to_original_paths"] == summary["flows"]
    assert summary["controller_handler_errors"] == 0 and summary["route_messages_on_failure"] > 0
    # the outage is a reroute, not the whole time the link was down
    down_ms = (summary["restore_at_s"] - summary["cut_at_s"]) * 1e3
    assert summary["outage_ms_max"] < down_ms / 2
    flows = json.loads((tmp_path / "flows.json").read_text())
    assert len(flows) == 240 and all(f["received"] > 0 for f in flows)
    assert (tmp_path / "throughput.png").stat().st_size > 10_000
