"""A BMv2 cut that lost nothing although probes went into the break is named as not a measurement."""

from __future__ import annotations

from testbed.bench.p4_failover import backlogged


def test_backlogged_counts_the_probes_sent_into_the_break_and_says_why():
    sends = [i * 0.0005 for i in range(100)]                      # 0 .. 49.5 ms, every 0.5 ms
    why = backlogged(sends, (0.010, 0.0168), 0.0005)             # cut at 10 ms, repaired at 16.8 ms
    assert "sent 13 probes into the 6.8 ms break" in why          # 10.0 .. 16.0 ms: the last interval excluded
    assert "not the repair" in why
