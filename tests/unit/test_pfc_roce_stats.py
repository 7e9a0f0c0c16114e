"""The RoCE incast's pure figures: goodput over the senders' common window, fairness, the port ledger."""

from __future__ import annotations

import pytest

from testbed.pfc.counters import port_ledger
from testbed.rdma.flowstats import acked_at, common_window, goodputs, jain, rate_bins

COLS = ["t", "rate_bps", "target_bps", "alpha", "cnps_rx", "cnps_tx", "retransmissions", "acked_bytes"]


def _result(start, rate_Bps, seconds, every=0.1):
    """A sender that acknowledged ``rate_Bps`` bytes per second from ``start`` for ``seconds``."""
    rows = [[i * every, None, None, None, 0, 0, 0, rate_Bps * i * every] for i in range(int(seconds / every) + 1)]
    return {"started_at": start, "series": {"columns": COLS, "rows": rows}}


def test_staggered_senders_are_compared_over_the_time_all_of_them_sent():
    # two senders of 1 MB/s each, starting 0.5 s apart, 3 s each: their own goodputs add up to 2 MB/s,
    # which a 1.5 MB/s bottleneck could not carry if they overlapped all along; the common window is 2.5 s
    res = {"a": _result(100.0, 1e6, 3.0), "b": _result(100.5, 1e6, 3.0)}
    assert common_window(res, 3.0) == (100.5, 103.0)
    g = goodputs(res, 3.0)
    assert g["a"] == pytest.approx(8e6) and g["b"] == pytest.approx(8e6)


def test_a_flow_that_stalls_inside_the_window_shows_it():
    stalled = _result(0.0, 1e6, 3.0)
    for r in stalled["series"]["rows"]:
        if r[0] > 1.0:
            r[-1] = 1e6          # nothing acknowledged after 1 s
    g = goodputs({"ok": _result(0.0, 1e6, 3.0), "stalled": stalled}, 3.0)
    assert g["ok"] == pytest.approx(8e6) and g["stalled"] == pytest.approx(8e6 / 3)


def test_senders_that_never_overlap_have_no_common_goodput():
    assert goodputs({"a": _result(0.0, 1e6, 1.0), "b": _result(5.0, 1e6, 1.0)}, 1.0) == {}


def test_acked_at_interpolates_and_clamps():
    r = _result(10.0, 1000.0, 1.0)
    assert acked_at(r, 9.0) == 0.0 and acked_at(r, 10.25) == pytest.approx(250.0) and acked_at(r, 99) == 1000.0


def test_rate_bins_give_the_rate_per_bin():
    starts, rates = rate_bins(_result(2.0, 1e6, 2.0), origin=2.0, bin_s=0.5)
    assert starts == [0.0, 0.5, 1.0, 1.5] and rates == pytest.approx([8e6] * 4)


def test_jain_index():
    assert jain([5, 5, 5, 5]) == pytest.approx(1.0)
    assert jain([1, 0, 0, 0]) == pytest.approx(0.25)
    assert jain([0, 0]) is None


def _c(rx=0, fwd=0, tail=0, queued=0):
    return {"rx": rx, "forwarded": fwd, "drop_tail": tail, "drop_red": 0, "drop_loss": 0, "drop_pfc_headroom": 0,
            "drop_pfc_watchdog": 0, "queued": queued}


def test_port_ledger_counts_frames_in_at_nics_and_out_at_host_ports():
    # h0 -> l0 -> s0 -> l1 -> h1: 100 frames in at h0's NIC, 7 dropped at the spine, 3 still queued at l1
    hops = {"dl0": {"h0>l0": _c(rx=100, fwd=100), "l0>h0": _c(rx=20, fwd=20)},
            "dl1": {"l0>s0": _c(rx=100, fwd=100), "s0>l0": _c(rx=20, fwd=20)},
            "dl2": {"s0>l1": _c(rx=100, fwd=93, tail=7), "l1>s0": _c(rx=20, fwd=20)},
            "dl3": {"l1>h1": _c(rx=93, fwd=90, queued=3), "h1>l1": _c(rx=20, fwd=20)}}
    led = port_ledger(hops, ["h0", "h1"])
    assert (led["sent"], led["received"], led["dropped"], led["held"]) == (120, 110, 7, 3)
    assert led["unaccounted"] == 0 and led["drops"] == {"dl2 s0>l1 drop_tail": 7}
    # a frame flooded to two hosts is delivered twice: the ledger goes negative, it does not hide it
    hops["dl3"]["l1>h1"]["forwarded"] += 2
    assert port_ledger(hops, ["h0", "h1"])["unaccounted"] == -2
