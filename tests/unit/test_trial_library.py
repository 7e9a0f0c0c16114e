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


def test_write_lat_summary_of_a_size_mix_gives_each_size_class_its_completion_times():
    def result(lat, seconds=1.0):
        return {"seconds": seconds, "bytes": 4000, "iterations": len(lat), "t_typical_usec": 1, "t_99_usec": 1,
                "cnps_rx": 0, "retransmissions": 0, "message_lat_usec": lat,
                "bytes_total": sum(size for size, _ in lat)}

    s = summarise_write_lat([result([[100, 10], [4000, 200], [100, 30]]),
                             result([[4000, 100], [100, 20], [4000, 400]], seconds=2.0)])
    assert [c["bytes"] for c in s["fct_by_size"]] == [100, 4000]
    small, large = s["fct_by_size"]
    assert small["messages"] == 3 and small["fct_p50_s"] == pytest.approx(40e-6)     # twice the half round trip
    assert large["fct_p50_s"] == pytest.approx(400e-6) and large["fct_p99_s"] == pytest.approx(800e-6)
    assert s["goodput_bps"] == pytest.approx((4200 + 8100) * 8 / 2.0)               # the mix's bytes
    assert summarise_write_lat([result([])])["fct_by_size"] == []


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


def test_drops_book_pfc_frames_as_made_and_consumed_by_the_switch():
    """The hop ledger balances frames: PAUSE/XON a switch sent are frames it made (beside its fast CNPs),
    MAC Control frames it received are frames it consumed; a PFC headroom drop is a loss of the flow."""
    plan = SimpleNamespace(switch=lambda sw: SimpleNamespace(ports=[SimpleNamespace(port=1), SimpleNamespace(port=2)]))
    q = E.DROP_REASONS
    a = FakeClient({("to_port", 2): 20, ("from_queue", 2): 20, ("cnps", 2): 3, ("drops", q["pfc_headroom"]): 2,
                    ("pfc_pause_sent", 1): 4, ("pfc_xon_sent", 1): 3, ("pfc_rx", 1): 5, ("pfc_rx", 2): 1})
    d = F.drops({"a": a}, plan)
    assert d["generated_by_switch"] == {"a": 3 + 4 + 3} and d["cnps_by_switch"] == {"a": 3}
    assert d["consumed_by_switch"] == {"a": 2 + 6}
    assert d["pfc_by_switch"] == {"a": {"pfc_rx": 6, "pfc_pause_sent": 4, "pfc_xon_sent": 3}}
    assert d["counted"] == 2 and d["tail"] == 0
    assert d["pipeline_by_switch"]["a"] == {"ingress": 20 + 2 + 6, "egress": 20 + 10}


class FakePortClient(FakeClient):
    def __init__(self, counters, registers):
        super().__init__(counters)
        self.registers = registers

    def register_read(self, name, index):
        return self.registers.get((name, index), 0)


def test_port_stats_read_the_pfc_counters_of_that_port():
    c = FakePortClient({("pfc_pause_sent", 3): 2, ("pfc_xon_sent", 3): 1, ("pfc_rx", 3): 7, ("pfc_rx", 4): 9},
                       {("qdepth_pkts", 3): 4, ("qdepth_sum", 3): 10, ("qdepth_peak", 3): 5})
    s = F.port_stats(c, 3)
    assert (s["pfc_pause_sent"], s["pfc_xon_sent"], s["pfc_rx"]) == (2, 1, 7)
    assert s["queue_mean"] == 2.5 and s["cnp_skipped"]["pfc_xon"] == 0
    assert {"pfc_bytes", "pfc_paused_at"} <= set(F.REGISTERS) and set(E.PFC_COUNTERS) <= set(F.COUNTERS)
