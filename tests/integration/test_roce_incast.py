"""``testbed run roce_incast --quick``: soft-RoCE endpoints with DCQCN in a PFC replica (issue 16's incast).

On one spine-leaf replica, a 4:1 RoCE incast three ways. PFC only: nothing lost, the receiver's port pauses,
the pause spreads to the spine, and PFC's per-port fairness shows (the two senders behind one leaf uplink
share one paused port, the receiver leaf's own senders have one each). DCQCN only: on a lossy priority the
marks reach the senders as CNPs, nothing is paused, and any queue drop is recovered by resending. PFC +
DCQCN: nothing lost, CNPs cut the rates, and PAUSE falls far below PFC only's: DCQCN keeps PFC quiet.
Then a slow receiver (its host drains the NIC at half the line rate): without the NIC's PAUSE its receive
buffer overflows and the sender resends; with it the NIC pauses the switch's port, the pause reaches the
sender's NIC, and nothing is lost.
"""

from __future__ import annotations

import json

import pytest

from tests.integration.runhealth import check_health, until_healthy

pytestmark = [pytest.mark.root, pytest.mark.mininet, pytest.mark.ovs, pytest.mark.slow]


def test_roce_incast_quick(tmp_path, capsys, quiet_cpu):
    from scenarios import roce_incast

    def run(attempt):
        out = tmp_path / f"run{attempt}"
        assert roce_incast.main(["--quick", "--out", str(out)]) == 0
        return json.loads((out / "metrics.json").read_text()), capsys.readouterr()

    metrics, printed, seen = until_healthy(run, quiet_cpu)
    check_health(metrics, printed.out + printed.err, links=True, seen=seen)
    rows = {r["trial"]: r for r in metrics["rows"]}
    pfc, cc, both = rows["4:1 PFC only"], rows["4:1 DCQCN only"], rows["4:1 PFC + DCQCN"]
    assert all(r["valid"] and r["unaccounted"] == 0 and r["lost_inside_emulator"] == 0 for r in rows.values())
    for r in rows.values():   # a slow receiver without PAUSE collapses (go-back-N): hundreds of frames, not thousands
        assert r["frames_sent"] > (300 if r["trial"].startswith("slow") else 1000), r
        if r["priority"] == 3:   # lossless: every sender moves (lossy, a tail loss may stall one for the trial)
            assert all(g > 0 for g in r["goodput_gbps"]), r
    # PFC only: lossless, paused at the receiver's port and one hop further (the spine's egress to l1)
    assert pfc["dropped"] == 0 and pfc["retransmissions"] == 0 and pfc["cnps_rx"] == 0
    assert pfc["pause_sent_receiver_port"] > 0 and {"s0>l1", "h5>l1", "h6>l1"} <= set(pfc["directions_paused"])
    assert pfc["goodput_total_gbps"] > 0.8 * 25, "under PFC the receiver's 25G port stays busy"
    l0, l1 = pfc["goodput_gbps"][:2], pfc["goodput_gbps"][2:]       # h0 h1 behind l0's uplink; h5 h6 on l1
    assert sum(l1) > 1.3 * sum(l0), f"PFC shares per port, not per flow: {pfc['goodput_gbps']}"
    # DCQCN only: lossy priority, never paused; marks became CNPs; a drop is recovered by resending
    assert cc["pause_sent"] == 0 and cc["directions_paused"] == [] and cc["cnps_rx"] > 0 and cc["ce_marked"] > 0
    assert cc["retransmissions"] > 0 if cc["dropped"] else cc["retransmissions"] == 0
    # PFC + DCQCN: lossless, rates cut by CNPs, and far fewer pauses than PFC alone
    assert both["dropped"] == 0 and both["retransmissions"] == 0 and both["cnps_rx"] > 0
    assert both["pause_sent"] < pfc["pause_sent"] / 2, (both["pause_sent"], pfc["pause_sent"])
    # the slow receiver: the host's buffer overflows without the NIC's PAUSE; with it, held back hop by hop
    lossy, held = rows["slow receiver, no NIC PFC"], rows["slow receiver, NIC PFC"]
    assert lossy["host_drops"] > 0 and lossy["retransmissions"] > 0 and lossy["nic_pause_sent"] == 0
    assert held["host_drops"] == 0 and held["retransmissions"] == 0 and held["nic_pause_sent"] > 0
    assert {"l1>h9", "h5>l1"} <= set(held["directions_paused"]), held["directions_paused"]
    assert 0.3 * 25 < held["goodput_total_gbps"] < 0.6 * 25, "held to what the host takes: half the line"
