"""The DCQCN/RED marking curve and the queue model's marking, drops and serialisation."""

import random

import pytest

from testbed.links import ecn
from testbed.links.model import LinkParams, LossModel, RedParams, mark_probability
from testbed.links.queue import Direction


@pytest.mark.parametrize("depth,expected", [(0, 0.0), (99.9, 0.0), (100, 0.0), (250, 0.1), (400, 0.2),
                                            (400.1, 1.0), (10_000, 1.0)])
def test_marking_curve_at_kmin_midway_kmax(depth, expected):
    assert mark_probability(depth, kmin=100, kmax=400, pmax=0.2) == pytest.approx(expected)


def test_step_curve_when_kmin_equals_kmax():
    red = RedParams(kmin=10, kmax=10, pmax=0.5, unit="packets")
    assert red.probability(9) == 0 and red.probability(10) == 0.5 and red.probability(11) == 1


def _frame(tos: int, length: int = 1514) -> bytes:
    ip = bytearray(20)
    ip[0], ip[1] = 0x45, tos
    ip[2:4] = (length - 14).to_bytes(2, "big")
    ip[8], ip[9] = 64, 17
    ip[12:16], ip[16:20] = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
    ip[10:12] = ecn.ipv4_checksum(ip).to_bytes(2, "big")
    return bytes(12) + b"\x08\x00" + bytes(ip) + bytes(length - 34)


def test_serialisation_spaces_departures_at_line_rate():
    d = Direction(LinkParams(rate_bps=12_112_000, delay_s=0.01))  # 1514 B -> exactly 1 ms
    releases = [d.admit(0.0, _frame(0))[0] for _ in range(5)]
    assert releases == pytest.approx([0.011, 0.012, 0.013, 0.014, 0.015])
    assert d.depth(0.0) == (5, 5 * 1514)
    assert d.depth(0.0035) == (2, 2 * 1514)


def test_tail_drop_at_packet_and_byte_limits():
    d = Direction(LinkParams(rate_bps=1e6, limit=3))
    kept = [d.admit(0.0, _frame(0))[0] is not None for _ in range(5)]
    assert kept == [True, True, True, False, False] and d.counters["drop_tail"] == 2
    b = Direction(LinkParams(rate_bps=1e6, limit=4000, limit_unit="bytes"))
    assert [b.admit(0.0, _frame(0))[0] is not None for _ in range(3)] == [True, True, False]


def test_red_marks_ect_and_drops_non_ect_above_kmax():
    red = RedParams(kmin=2, kmax=4, pmax=0.1, unit="packets")
    d = Direction(LinkParams(rate_bps=1e6, red=red, limit=100), random.Random(1))
    outs = [d.admit(0.0, _frame(ecn.ECT0)) for _ in range(10)]
    marked = [f for r, f in outs if r is not None and ecn.ecn_codepoint(f) == ecn.CE]
    assert len(marked) >= 5 and d.counters["drop_red"] == 0  # depth > 4 marks every packet
    assert all(ecn.ipv4_checksum(f[14:34]) == 0 for f in marked)  # checksum still valid
    n = Direction(LinkParams(rate_bps=1e6, red=red, limit=100), random.Random(1))
    results = [n.admit(0.0, _frame(0))[0] for _ in range(10)]
    assert results[:2] != [None, None] and n.counters["drop_red"] >= 5 and n.counters["ce_marked"] == 0


def test_red_without_ecn_drops_ect_too():
    red = RedParams(kmin=0, kmax=1, pmax=1.0, unit="packets", ecn=False)
    d = Direction(LinkParams(rate_bps=1e6, red=red), random.Random(1))
    for _ in range(5):
        d.admit(0.0, _frame(ecn.ECT0))
    assert d.counters["ce_marked"] == 0 and d.counters["drop_red"] >= 3


def test_midway_marking_fraction_matches_curve():
    red = RedParams(kmin=10, kmax=30, pmax=0.4, unit="packets")
    d = Direction(LinkParams(rate_bps=1e6, red=red, limit=1000), random.Random(7))
    for _ in range(20):  # fill to depth 20 (midway: p = 0.2), then hold it there
        d.admit(0.0, _frame(ecn.ECT0))
    assert d.depth(0.0)[0] == 20
    marks = 0
    trials = 4000
    for _ in range(trials):
        before = d.counters["ce_marked"]
        d.admit(0.0, _frame(ecn.ECT0))
        marks += d.counters["ce_marked"] - before
        d._queue.pop()  # keep the depth fixed at 20 so every arrival sees p = 0.2
        d.queue_bytes -= 1514
    assert marks / trials == pytest.approx(0.2, abs=0.03)


def test_random_loss_fraction_and_no_reordering_with_jitter():
    d = Direction(LinkParams(delay_s=0.01, jitter_s=0.005, loss=LossModel(rate=0.1)), random.Random(3))
    releases = [d.admit(i * 1e-4, _frame(0))[0] for i in range(20_000)]
    kept = [r for r in releases if r is not None]
    assert 1 - len(kept) / 20_000 == pytest.approx(0.1, abs=0.01)
    assert kept == sorted(kept)
    assert all(r >= 0.005 for r in kept)


def test_gilbert_elliott_losses_come_in_bursts():
    ge = LossModel(kind="gilbert-elliott", p=0.01, r=0.25)
    d = Direction(LinkParams(loss=ge), random.Random(5))
    lost = [d.admit(0.0, _frame(0))[0] is None for _ in range(50_000)]
    assert sum(lost) / len(lost) == pytest.approx(ge.mean, rel=0.15)
    runs = sum(1 for i in range(1, len(lost)) if lost[i] and not lost[i - 1])
    assert sum(lost) / runs == pytest.approx(1 / ge.r, rel=0.2)  # mean burst length 4


def test_queue_series_is_sampled():
    d = Direction(LinkParams(rate_bps=1e6), sample_interval=0.001)
    for i in range(100):
        d.admit(i * 1e-4, _frame(0))
    snap = d.snapshot(with_series=True)
    assert 5 <= len(snap["queue_series"]) <= 11 and snap["max_queue_packets"] > 1
