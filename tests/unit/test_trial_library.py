"""Library pieces a trial uses (moved out of scenarios/long_haul_cnp.py): write-lat flow figures and
fabric.p4's drop accounting, against a fake switch client."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from testbed.p4rt import entries as E
from testbed.p4rt import fabric_stats as F
from testbed.rdma.endpoint import summarise_write_lat


def test_write_lat_summary_doubles_half_round_trips():
    results = [{"seconds": 2.0, "bytes": 1000, "iterations": 10, "t_typical_usec": 100, "t_99_usec": 300,
                "cnps_rx": 3, "retransmissions": 1, "server": {"stats": {"naks_tx": 2}}},
               {"seconds": 4.0, "bytes": 1000, "iterations": 10, "t_typical_usec": 200, "t_99_usec": 250,
                "cnps_rx": 1, "retransmissions": 0}]
    s = summarise_write_lat(results)
    assert s["goodput_bps"] == pytest.approx(20000 * 8 / 4.0)
    assert s["fct_p50_s"] == pytest.approx(300e-6) and s["fct_p99_s"] == pytest.approx(600e-6)
    assert (s["cnps_rx"], s["retransmissions"], s["receiver_naks"]) == (4, 1, 2)


class FakeClient:
    def __init__(self, counters):
        self.counters = counters

    def counter_read(self, name, index):
        return SimpleNamespace(packets=self.counters.get((name, index), 0))


def test_drops_count_tail_red_and_every_reason():
    plan = SimpleNamespace(switch=lambda sw: SimpleNamespace(ports=[SimpleNamespace(port=1), SimpleNamespace(port=2)]))
    q = E.DROP_REASONS
    a = FakeClient({("to_port", 1): 100, ("from_queue", 1): 90, ("to_port", 2): 5, ("from_queue", 2): 5,
                    ("drops", q["queue"]): 4, ("drops", q["not_ip"]): 7})
    b = FakeClient({("to_port", 1): 50, ("from_queue", 1): 50, ("drops", q["ttl"]): 1})
    d = F.drops({"a": a, "b": b}, plan)
    assert d["tail"] == 10 and d["red"] == 4
    assert d["counted"] == 10 + 4 + 1  # not-IP drops are not losses of the flows
    assert d["busiest_pkts"] == 95
    assert d["by_switch"]["a"]["not_ip"] == 7
