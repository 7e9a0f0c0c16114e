"""The DCQCN fluid model (CoNEXT'16) against properties and algebra it must satisfy."""

import math

import numpy as np
import pytest

from testbed.errors import SpecError
from testbed.models.dcqcn_fluid import (
    FluidParams,
    alpha_fixed_point,
    fixed_point,
    hyper_free,
    mark_probability,
    simulate,
)

G40 = dict(capacity_bps=40e9, line_rate_bps=40e9, packet_bytes=1000)


def test_red_curve():
    assert float(mark_probability(4e3, 5e3, 200e3, 0.01)) == 0.0
    assert float(mark_probability(102.5e3, 5e3, 200e3, 0.01)) == pytest.approx(0.005)
    assert float(mark_probability(201e3, 5e3, 200e3, 0.01)) == 1.0


@pytest.mark.parametrize("starts", [(0.0, 0.0), (0.0, 0.005, 0.01, 0.015)])
def test_flows_converge_to_fair_share(starts):
    p = FluidParams(**G40, starts_s=starts, feedback_delay_s=10e-6)
    tr = simulate(p, 0.16, dt_s=10e-6)
    share = p.capacity_bps / len(starts)
    for rate in tr.mean_rates(0.13, 0.16):
        assert rate == pytest.approx(share, rel=0.03)


def test_steady_queue_sits_on_the_red_ramp_at_the_closed_form_fixed_point():
    p = FluidParams(**G40, starts_s=(0.0, 0.0), feedback_delay_s=10e-6)
    tr = simulate(p, 0.2)
    w = tr.window(0.15, 0.2)
    q = tr.queue[w].mean()
    assert p.kmin_bytes < q < p.kmax_bytes
    fp = fixed_point(p)
    assert q == pytest.approx(fp["queue_bytes"], rel=0.02)
    assert tr.alpha[w].mean() == pytest.approx(fp["alpha"], rel=0.02)
    assert (tr.targets[w] - tr.rates[w]).mean() == pytest.approx(fp["target_gap_bps"], rel=0.05)


def test_alpha_and_rate_under_constant_marking_match_the_algebra():
    p = FluidParams(**G40, starts_s=(0.0,), marking=0.002, feedback_delay_s=0.0)
    tr = simulate(p, 0.4)
    w = tr.window(0.35, 0.4)
    rate = tr.rates[w, 0].mean()
    assert tr.alpha[w, 0].mean() == pytest.approx(alpha_fixed_point(0.002, rate, p), rel=0.01)
    # the open-loop rate is the one whose fixed-point marking is the imposed 0.002
    assert fixed_point(p, rate_bps=rate)["p"] == pytest.approx(0.002, rel=0.03)


def test_longer_feedback_delay_oscillates_more_and_loses_utilisation():
    stds, utils, peaks = [], [], []
    for delay in (10e-6, 100e-6, 400e-6):
        tr = simulate(FluidParams(**G40, starts_s=(0.0, 0.0), feedback_delay_s=delay), 0.2)
        w = tr.window(0.1, 0.2)
        stds.append(tr.queue[w].std())
        peaks.append(tr.queue[w].max())
        utils.append(tr.utilisation(0.1, 0.2))
    assert stds[0] < 0.01 * stds[1] and stds[1] < stds[2]
    assert peaks[0] < peaks[1] < peaks[2]
    assert utils[0] > 0.999 and utils[2] < utils[1] < 1.0


def test_queue_delay_in_the_loop_lengthens_feedback():
    # 4:1 overload of a 10G port: the marked packets wait q/C (tens of us) before their feedback leaves
    base = FluidParams(capacity_bps=10e9, line_rate_bps=40e9, packet_bytes=1000, starts_s=(0.0,),
                       feedback_delay_s=20e-6)
    plain = simulate(base, 0.002, sample_every_s=1e-6)
    from dataclasses import replace
    queued = simulate(replace(base, queue_delay=True), 0.002, sample_every_s=1e-6)

    def first_cut(tr):
        return tr.t[tr.rates[:, 0] < 0.95 * 40e9][0]

    assert first_cut(queued) > first_cut(plain) + 5e-6
    assert queued.queue.max() > 1.2 * plain.queue.max()


def test_first_cut_halves_the_rate_with_alpha_one():
    # before any mark returns (tau* later) the flows stay at line rate, then alpha = 1 cuts fast
    p = FluidParams(capacity_bps=20e9, line_rate_bps=40e9, packet_bytes=1000, starts_s=(0.0,),
                    feedback_delay_s=200e-6)
    tr = simulate(p, 0.002, sample_every_s=1e-6)
    assert tr.rates[tr.window(0, 190e-6), 0].min() == pytest.approx(40e9)
    assert tr.rates[tr.window(400e-6, 2e-3), 0].min() < 25e9


def test_tail_drop_limit_counts_drops():
    p = FluidParams(capacity_bps=10e9, line_rate_bps=40e9, packet_bytes=1000, starts_s=(0.0,),
                    feedback_delay_s=500e-6, buffer_bytes=50e3)
    tr = simulate(p, 0.01)
    assert tr.queue.max() <= 50e3 + 1e-6 and tr.dropped_bytes > 0


def test_hyper_scope():
    assert hyper_free(10e6, 5, [1e6, 30e6])
    assert not hyper_free(10e6, 5, [1e6, 60e6])
    assert not hyper_free(10e6, 5, [])


def test_bad_parameters_name_the_field():
    with pytest.raises(SpecError, match="fluid.kmin_bytes"):
        FluidParams(**G40, kmin_bytes=5e3, kmax_bytes=1e3)
    with pytest.raises(SpecError, match="fluid.starts_s"):
        FluidParams(**G40, starts_s=())
    assert math.isfinite(fixed_point(FluidParams(**G40))["p"])


# -- finite flows (the extension for short-flow experiments) ---------------------------------------------
def test_an_uncongested_finite_flow_completes_at_line_rate_plus_its_acknowledgements():
    """Capacity twice the line rate: no queue, no mark; each of 2 messages of 0.5 MB takes 0.5 MB / line rate,
    then waits one acknowledgement delay (100 us): 0.4 + 0.1 ms each, 1.0 ms in all."""
    p = FluidParams(capacity_bps=20e9, line_rate_bps=10e9, packet_bytes=1000, starts_s=(0.0,), flow_bytes=(1e6,),
                    messages=2, ack_delay_s=100e-6)
    tr = simulate(p, 0.003, dt_s=1e-6)
    assert tr.finish_s[0] == pytest.approx(1.0e-3, abs=3e-6)
    assert [f for f in tr.message_fct_s[0]] == pytest.approx([0.5e-3, 0.5e-3], abs=3e-6)
    assert tr.queue.max() == 0.0


def test_a_paused_flow_sends_nothing_while_it_waits_for_its_acknowledgement():
    """At a 10G bottleneck one 10G flow builds no queue, yet its rate limiter (the state) keeps its rate in the
    pause: the samples in the pause show the rate while the bottleneck is idle (utilisation < 1)."""
    p = FluidParams(capacity_bps=10e9, line_rate_bps=10e9, packet_bytes=1000, starts_s=(0.0,), flow_bytes=(2e6,),
                    messages=2, ack_delay_s=1e-3)
    tr = simulate(p, 0.005, dt_s=1e-6)
    first = 1e6 * 8 / 10e9                         # the first message is sent by 0.8 ms, the second from 1.8 ms
    assert tr.utilisation(first + 0.1e-3, first + 0.9e-3) == pytest.approx(0.0, abs=1e-9)
    assert tr.utilisation(0.1e-3, first - 0.1e-3) == pytest.approx(1.0)
    assert tr.finish_s[0] == pytest.approx(2 * (first + 1e-3), abs=3e-6)


def test_finite_flows_through_a_bottleneck_share_it_and_cannot_beat_its_capacity():
    p = FluidParams(capacity_bps=10e9, line_rate_bps=10e9, packet_bytes=1082, kmin_bytes=40e3, kmax_bytes=160e3,
                    pmax=0.2, feedback_delay_s=50e-6, starts_s=(0.0, 0.0), flow_bytes=(2e6, 2e6), queue_delay=True,
                    rate_ai_bps=4e6, min_rate_bps=10e6)
    tr = simulate(p, 0.05)
    assert all(f == f for f in tr.finish_s)                           # both finished (not nan)
    assert min(tr.finish_s) >= 4e6 * 8 / 10e9 * 0.99                   # the bottleneck's capacity bounds both
    assert max(tr.finish_s) / min(tr.finish_s) < 1.05                  # symmetric flows finish together
    assert tr.queue.max() > 160e3                                      # 2:1 at line rate overshoots Kmax first


def test_finite_flow_parameters_name_the_field():
    with pytest.raises(SpecError, match="fluid.flow_bytes"):
        FluidParams(**G40, starts_s=(0.0, 0.0), flow_bytes=(1e6,))
    with pytest.raises(SpecError, match="fluid.messages"):
        FluidParams(**G40, flow_bytes=(1e6, 1e6), messages=0)
    with pytest.raises(SpecError, match="fluid.ack_delay_s"):
        FluidParams(**G40, flow_bytes=(1e6, 1e6), ack_delay_s=-1.0)


def test_a_flow_size_mix_sends_each_message_at_its_own_size_in_order():
    """Uncongested (capacity twice the line rate): message k of a mix takes size_k / line rate plus the
    acknowledgement delay, in the order given; flow_bytes becomes the mix's sum."""
    p = FluidParams(capacity_bps=20e9, line_rate_bps=10e9, packet_bytes=1000, starts_s=(0.0, 0.0),
                    message_sizes=((0.25e6, 1e6), (1e6, 0.25e6)), ack_delay_s=100e-6)
    assert p.flow_bytes == (1.25e6, 1.25e6)
    tr = simulate(p, 0.004, dt_s=1e-6)
    small, large = 0.25e6 * 8 / 10e9 + 100e-6, 1e6 * 8 / 10e9 + 100e-6
    assert list(tr.message_fct_s[0]) == pytest.approx([small, large], abs=3e-6)
    assert list(tr.message_fct_s[1]) == pytest.approx([large, small], abs=3e-6)
    assert tr.finish_s == pytest.approx((small + large, small + large), abs=5e-6)


def test_a_mix_of_equal_messages_is_the_same_run_as_messages_of_a_flow():
    """Two ways to say "2 flows x 3 messages of 0.5 MB" through a congested bottleneck: the same trajectory."""
    base = dict(capacity_bps=10e9, line_rate_bps=10e9, packet_bytes=1082, kmin_bytes=40e3, kmax_bytes=160e3,
                pmax=0.2, feedback_delay_s=50e-6, starts_s=(0.0, 0.0), queue_delay=True, rate_ai_bps=4e6,
                min_rate_bps=10e6, ack_delay_s=60e-6)
    a = simulate(FluidParams(**base, flow_bytes=(1.5e6, 1.5e6), messages=3), 0.05)
    b = simulate(FluidParams(**base, message_sizes=((0.5e6,) * 3,) * 2), 0.05)
    assert a.queue.max() > 40e3 and not np.isnan(a.finish_s).any()    # congested, and both flows finished
    assert b.finish_s == pytest.approx(a.finish_s)
    assert [list(f) for f in b.message_fct_s] == [pytest.approx(list(f)) for f in a.message_fct_s]
    assert np.allclose(a.queue, b.queue)


def test_a_mix_is_checked_against_its_flows():
    with pytest.raises(SpecError, match="fluid.message_sizes"):
        FluidParams(**G40, message_sizes=((1e6,),))                     # one flow's mix for two flows
    with pytest.raises(SpecError, match="fluid.message_sizes"):
        FluidParams(**G40, message_sizes=((1e6,), (0.0, 1e6)))
    with pytest.raises(SpecError, match="fluid.flow_bytes"):
        FluidParams(**G40, message_sizes=((1e6,), (1e6,)), flow_bytes=(1e6, 2e6))
