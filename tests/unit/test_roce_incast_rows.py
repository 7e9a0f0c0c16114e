"""roce_incast's pure parts: which trials a run makes, a trial's row, and when a trial is not an incast."""

from __future__ import annotations

import pytest

from scenarios import roce_incast as R

COLS = ["t", "rate_bps", "target_bps", "alpha", "cnps_rx", "cnps_tx", "retransmissions", "acked_bytes"]


def _flow(start, Bps, seconds=4.0, retx=0, cnps=0):
    rows = [[i * 0.1, None, None, None, 0, 0, 0, Bps * i * 0.1] for i in range(int(seconds / 0.1) + 1)]
    return {"started_at": start, "series": {"columns": COLS, "rows": rows}, "retransmissions": retx,
            "timeouts": 0, "cnps_rx": cnps, "unfinished": 0}


def _c(**kw):
    base = {"rx": 0, "forwarded": 0, "pause_sent": 0, "pause_received": 0, "paused_real_s": 0.0, "ce_marked": 0,
            "max_bytes": 0}
    return {**base, **kw}


def test_quick_runs_the_three_modes_at_4_to_1_and_full_adds_8_to_1_and_the_victim():
    quick = R.trials(True)
    assert [t[0] for t in quick] == ["4:1 PFC only", "4:1 DCQCN only", "4:1 PFC + DCQCN",
                                     "slow receiver, no NIC PFC", "slow receiver, NIC PFC"]
    assert {(t[3], t[4], t[5]) for t in quick[:3]} == {(26, 3, False), (8, 1, True), (26, 3, True)}
    assert [t[6] for t in quick] == [None, None, None, "slow", "slow-pfc"]
    full = [t[0] for t in R.trials(False)]
    assert "8:1 PFC + DCQCN" in full and "victim alone" in full and "4:1 PFC only + victim" in full
    assert all(len(t[1]) == 8 for t in R.trials(False) if t[0].startswith("8:1"))


def test_the_slow_receivers_host_and_nic():
    assert R.slow_nic(None, 5e6) is None
    slow = R.slow_nic("slow", 5e6)
    assert slow["rx_limit_pps"] == pytest.approx(0.5 * 5e6 / (1082 * 8)) and "nic_pfc" not in slow
    pfc = R.slow_nic("slow-pfc", 5e6)["nic_pfc"]
    assert pfc["priority"] == 3 and pfc["xon_bytes"] < pfc["xoff_bytes"] < 2 * R.SLOW["buffer"]


def test_row_goodput_fairness_and_pauses():
    senders = ("h0", "h1")
    t = {"label": "x", "dcqcn": True, "priority": 3, "seconds": 4.0, "start_spread_s": 0.0,
         "flows": {"h0>h9": _flow(10.0, 1000.0, cnps=2), "h1>h9": _flow(10.0, 3000.0, retx=5)},
         "hops": {"dl0": {"l1>h9": _c(pause_sent=7, max_bytes=120e3, ce_marked=3), "h0>l0": _c(paused_real_s=2e-3,
                                                                                                 pause_received=1)}},
         "ledger": {"sent": 10, "dropped": 0, "unaccounted": 0, "lost_inside_emulator": 0}, "valid": True}
    hosts = ("h0", "h1", "h9")
    r = R.row(t, senders, scale=1000.0, hosts=hosts)
    assert r["goodput_gbps"] == pytest.approx([0.008, 0.024])            # 1 and 3 KB/s x 8 x 1000
    assert r["jain"] == pytest.approx(0.8) and r["max_deviation"] == pytest.approx(0.5)
    assert (r["pause_sent"], r["pause_sent_receiver_port"], r["ce_marked"]) == (7, 7, 3)
    assert r["directions_paused"] == ["h0>l0"] and r["receiver_port_max_kb"] == 120.0
    assert (r["retransmissions"], r["cnps_rx"]) == (5, 2)
    assert r["nic_paused_real_ms_mean"] == pytest.approx(2.0)           # h0's NIC only: l1 is a switch
    lossy = dict(t, priority=1)
    assert R.row(lossy, senders, 1000.0, hosts)["receiver_port_max_kb"] is None    # no lossless accounting there
    # a NIC is a host's direction by the plan, not by its name
    assert R.row(t, senders, 1000.0, ("x0",))["nic_paused_real_ms_mean"] == 0


def test_a_trial_whose_senders_barely_overlapped_is_distrusted():
    ok = {"seconds": 4.0, "start_spread_s": 0.2, "flows": {"a": _flow(0.0, 1.0), "b": _flow(0.2, 1.0)}}
    late = {"seconds": 4.0, "start_spread_s": 2.0, "flows": {"a": _flow(0.0, 1.0), "b": _flow(2.0, 1.0)}}
    assert R.distrust(ok) == [] and "together for 2.00 s of 4" in R.distrust(late)[0]
