"""DCQCN: reaction point and notification point against the paper's formulas, dilation, fairness."""

from __future__ import annotations

import pytest

from testbed.dilation import Dilation
from testbed.errors import SpecError
from testbed.rdma.dcqcn import DcqcnParams, NotificationPoint, ReactionPoint, TimeSeries
from testbed.rdma.dcqcn_sim import Bottleneck, simulate

G = 1 / 256
LINE = 100e9


def test_defaults_are_the_papers():
    p = DcqcnParams(line_rate=LINE)
    assert (p.g, p.alpha_timer, p.rate_increase_timer, p.byte_counter, p.fast_recovery_rounds,
            p.cnp_interval) == (G, 55e-6, 55e-6, 10e6, 5, 50e-6)
    assert p.rate_ai == pytest.approx(40e6) and p.rate_hai == pytest.approx(100e6)


def test_cnp_sequence_follows_the_formulas():
    p = DcqcnParams(line_rate=LINE)
    rp = ReactionPoint(p, now=0.0)
    rate, alpha = LINE, 1.0
    for k in range(5):
        now = k * 10e-6  # faster than both timers: no decay, no increase in between
        rp.on_cnp(now)
        rate, alpha = rate * (1 - alpha / 2), (1 - G) * alpha + G
        assert rp.rate == pytest.approx(rate) and rp.alpha == pytest.approx(alpha)
    assert rp.target == pytest.approx(rate / (1 - ((alpha - G) / (1 - G)) / 2))
    assert rp.cnps == 5


def test_alpha_decays_only_in_periods_without_cnp():
    p = DcqcnParams(line_rate=LINE)
    rp = ReactionPoint(p, now=0.0)
    rp.on_cnp(0.0)
    a0 = rp.alpha
    rp.advance(p.alpha_timer * 3 + 1e-9)  # three periods, none with a CNP
    assert rp.alpha == pytest.approx(a0 * (1 - G) ** 3)


def test_fast_recovery_then_additive_then_hyper_increase():
    p = DcqcnParams(line_rate=LINE, initial_alpha=1.0)
    rp = ReactionPoint(p, now=0.0)
    rp.on_cnp(0.0)
    rt, rc = LINE, LINE / 2
    assert (rp.target, rp.rate) == (rt, rc)
    # timer-only increases: F rounds of fast recovery, then additive (BC stays 0 < F)
    for k in range(1, 8):
        rp.advance(k * p.rate_increase_timer + 1e-12)
        if k >= p.fast_recovery_rounds:
            rt = min(LINE, rt + p.rate_ai)
        rc = (rt + rc) / 2
        assert rp.rate == pytest.approx(rc) and rp.target == pytest.approx(rt)
    # lower the target so the increase is visible, then use the byte counter to reach hyper increase
    rp2 = ReactionPoint(DcqcnParams(line_rate=LINE), now=0.0)
    rp2.on_cnp(0.0)
    rp2.on_cnp(1e-6)  # R_T is now the halved rate
    rt, rc = rp2.target, rp2.rate
    now = 1e-6
    for k in range(1, 6):   # 5 timer rounds
        now = 1e-6 + k * p.rate_increase_timer
        rp2.advance(now + 1e-12)
    for _ in range(5):      # 5 byte-counter rounds: T = BC = 5 -> hyper (i = 1)
        rp2.on_sent(int(p.byte_counter), now)
    # T = 1..4 fast recovery, T = 5 additive; then BC = 1..4 additive, BC = 5 hyper with i = 1
    assert rp2.timer_rounds == 5 and rp2.byte_rounds == 5 and rc < rp2.rate
    assert rp2.target == pytest.approx(rt + p.rate_ai * 5 + p.rate_hai * 1)


def test_rate_never_exceeds_line_or_goes_below_min():
    p = DcqcnParams(line_rate=LINE)
    rp = ReactionPoint(p, now=0.0)
    for k in range(200):
        rp.on_cnp(k * 1e-6)
    assert rp.rate == pytest.approx(p.min_rate)
    rp.advance(1.0)
    assert rp.rate <= LINE and rp.target <= LINE


def test_notification_point_limits_cnps_per_qp():
    np_ = NotificationPoint(DcqcnParams(line_rate=LINE))
    sent = [np_.on_ce(7, t * 1e-6) for t in range(0, 200, 10)]  # CE every 10 us for 200 us
    assert sum(sent) == 4  # t = 0, 50, 100, 150 us
    assert np_.on_ce(8, 15e-6)  # another QP has its own interval


def test_dilation_scales_times_and_rates():
    real = DcqcnParams(line_rate=400e9)
    emu = real.dilated(Dilation(1000))
    assert emu.line_rate == pytest.approx(400e6) and emu.rate_ai == pytest.approx(real.rate_ai / 1000)
    assert emu.alpha_timer == pytest.approx(55e-3) and emu.cnp_interval == pytest.approx(50e-3)
    assert emu.byte_counter == real.byte_counter


@pytest.mark.parametrize("field,value", [("line_rate", 0), ("g", 1.5), ("alpha_timer", -1),
                                         ("fast_recovery_rounds", 0)])
def test_bad_params_name_the_field(field, value):
    kwargs = {"line_rate": LINE, field: value}
    with pytest.raises(SpecError, match=field):
        DcqcnParams(**kwargs)


def test_time_series_exports():
    rp = ReactionPoint(DcqcnParams(line_rate=LINE))
    ts = TimeSeries(qpn=5)
    ts.sample(0.0, rp, cnps_tx=0, retransmissions=0)
    rp.on_cnp(1e-6)
    ts.sample(1e-6, rp, cnps_tx=1, retransmissions=2)
    doc = ts.to_json()
    assert doc["rows"][1][doc["columns"].index("cnps_rx")] == 1
    lines = ts.to_csv().strip().splitlines()
    assert lines[0].startswith("t,rate_bps") and len(lines) == 3


def test_two_senders_converge_to_fair_share():
    """Second sender joins after 2 ms; over the last half of 0.3 s each gets C/2 within 10%."""
    cap = 10e9
    run = simulate(DcqcnParams(line_rate=cap), Bottleneck(capacity=cap), [0.0, 0.002], 0.3, dt=2e-6, seed=3)
    half = len(run["t"]) // 2
    means = [sum(r[half:]) / len(r[half:]) for r in run["rates"]]
    for m in means:
        assert abs(m - cap / 2) / (cap / 2) < 0.10, means
    assert sum(means) > 0.9 * cap and all(c > 0 for c in run["cnps"])
