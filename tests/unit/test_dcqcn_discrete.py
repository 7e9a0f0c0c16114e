"""The discrete DCQCN simulation (the second reference) against behaviour the papers and the algebra fix."""

import numpy as np
import pytest

from testbed.models.dcqcn_discrete import mean_trajectory, simulate
from testbed.models.dcqcn_fluid import FluidParams, fixed_point

#: a bottleneck whose fluid fixed point sits on the RED ramp and is stable (the fluid queue's std there is
#: 0.3 KB): 100 Mb/s, 1000-byte packets, DCQCN intervals of 1 ms (so ~6 packets per flow per CNP interval)
RAMP = dict(capacity_bps=100e6, line_rate_bps=200e6, packet_bytes=1000, kmin_bytes=5e3, kmax_bytes=200e3,
            pmax=0.5, feedback_delay_s=50e-6, queue_delay=True, cnp_interval_s=1e-3, alpha_timer_s=1.1e-3,
            rate_increase_timer_s=1.1e-3, rate_ai_bps=200e3, min_rate_bps=100e3)
#: the validation experiment (rows.fluid_params_for of the quick DCQCN run): flow 2 joins at 1 s
VALIDATION = dict(capacity_bps=25e6, line_rate_bps=50e6, packet_bytes=1082, kmin_bytes=5 * 1082,
                  kmax_bytes=300 * 1082, pmax=0.2, feedback_delay_s=4.37e-3, starts_s=(0.0, 1.0), queue_delay=True,
                  buffer_bytes=1000 * 1082, cnp_interval_s=1e-3, alpha_timer_s=1.1e-3, rate_increase_timer_s=1.1e-3,
                  rate_ai_bps=20e3, min_rate_bps=50e3)


def test_a_single_flow_below_the_bottleneck_never_marks_and_sends_at_line_rate():
    p = FluidParams(capacity_bps=100e6, line_rate_bps=40e6, packet_bytes=1000, starts_s=(0.0,))
    tr = simulate(p, 0.5, seed=3)
    assert tr.marks == 0 and tr.cnp_times == ((),) and tr.dropped_bytes == 0
    assert np.all(tr.rates[:, 0] == 40e6)
    assert tr.queue.max() <= 1000          # one packet in service at most: the queue never builds
    assert tr.utilisation(0.1, 0.5) == pytest.approx(0.4, rel=0.01)
    assert tr.delivered[-1, 0] * 1000 * 8 / 0.5 == pytest.approx(40e6, rel=0.01)


def test_the_first_cnp_halves_the_rate_and_sets_the_target():
    tr = simulate(FluidParams(**VALIDATION), 0.5, seed=1)
    first = tr.cnp_times[0][0]
    before, after = tr.window(0.0, first), np.searchsorted(tr.t, first, side="right")
    assert np.all(tr.rates[before, 0] == 50e6)
    alpha = tr.alpha[after, 0]   # alpha decayed from 1 while no CNP came; the cut is R_C (1 - alpha / 2)
    assert tr.rates[after, 0] == pytest.approx(50e6 * (1 - alpha / 2), rel=0.01)
    assert tr.targets[after, 0] == 50e6


def test_two_flows_converge_to_the_fair_share():
    p = FluidParams(**RAMP, starts_s=(0.0, 0.5))
    tr = simulate(p, 4.0, seed=2)
    rates = tr.mean_rates(2.0, 4.0)
    for r in rates:
        assert r == pytest.approx(50e6, rel=0.08)
    assert tr.utilisation(2.0, 4.0) > 0.95


def test_equilibrium_queue_sits_on_the_ramp_near_the_fluid_fixed_point():
    """The discrete mean sits 7-17% above the mean-field fixed point here (6 s runs, 6 seeds: random cuts of a
    multiplicative decrease are not their mean), so the stated tolerance is 25%."""
    p = FluidParams(**RAMP, starts_s=(0.0, 0.0))
    runs = [simulate(p, 3.0, seed=s) for s in range(3)]
    mean = mean_trajectory(runs)
    q = mean.queue[mean.window(1.0, 3.0)].mean()
    fp = fixed_point(p)
    assert p.kmin_bytes < q < p.kmax_bytes
    assert q == pytest.approx(fp["queue_bytes"], rel=0.25)
    assert mean.alpha[mean.window(1.0, 3.0)].mean() == pytest.approx(fp["alpha"], rel=0.25)


def test_the_np_sends_at_most_one_cnp_per_interval_per_flow():
    p = FluidParams(**VALIDATION)
    tr = simulate(p, 4.0, seed=5)
    assert tr.queue.max() > p.kmax_bytes            # p = 1 episodes: every packet marked
    assert tr.marks > sum(len(c) for c in tr.cnp_times)   # so the NP suppressed marks
    for cnps in tr.cnp_times:
        assert len(cnps) > 100
        assert np.diff(cnps).min() >= p.cnp_interval_s - 1e-12


def test_runs_are_deterministic_per_seed():
    p = FluidParams(**VALIDATION)
    a, b, c = simulate(p, 2.0, seed=7), simulate(p, 2.0, seed=7), simulate(p, 2.0, seed=8)
    assert np.array_equal(a.rates, b.rates) and np.array_equal(a.queue, b.queue) and a.cnp_times == b.cnp_times
    assert not np.array_equal(a.queue, c.queue)


def test_the_seed_mean_is_the_average_of_the_runs():
    p = FluidParams(**VALIDATION)
    runs = [simulate(p, 1.5, seed=s) for s in (1, 2)]
    m = mean_trajectory(runs)
    assert np.allclose(m.queue, (runs[0].queue + runs[1].queue) / 2)
    assert m.utilisation(0.5, 1.5) == pytest.approx(np.mean([r.utilisation(0.5, 1.5) for r in runs]))


# -- finite flows (the long-haul gain rows' messages) -------------------------------------------------------
def test_an_uncongested_finite_flow_sends_its_messages_one_at_a_time_at_line_rate():
    """40 Mb/s into 100 Mb/s: a packet every 200 us, 80 us of service; each message ends when its last packet
    has left plus the acknowledgement's 1 ms, and the flow sends nothing meanwhile."""
    p = FluidParams(capacity_bps=100e6, line_rate_bps=40e6, packet_bytes=1000, starts_s=(0.0,),
                    message_sizes=((10e3, 30e3),), ack_delay_s=1e-3)
    tr = simulate(p, 0.05, seed=1, sample_every_s=50e-6)
    first, second = (m * 200e-6 - 200e-6 + 80e-6 + 1e-3 for m in (10, 30))
    assert tr.message_fct_s[0] == pytest.approx((first, second), abs=1e-9)
    assert tr.finish_s[0] == pytest.approx(first + second, abs=1e-9)
    assert tr.marks == 0 and tr.delivered[-1, 0] == 40
    pause = tr.window(first - 1e-3 + 1e-4, first - 1e-4)    # the first message's last packet has left
    assert np.all(tr.rates[pause, 0] == 0) and np.ptp(tr.delivered[pause, 0]) == 0
    assert np.all(tr.rates[tr.t > first + second, 0] == 0)  # done


def test_finite_flows_through_a_bottleneck_deliver_exactly_their_messages():
    """Two senders at line rate into one 10G port (the long-haul DCI, fast CNP): they are cut, and every
    packet of every message arrives once; the messages complete in order, within the capacity."""
    mix = ((64e3, 1e6, 4e6), (1e6, 4e6, 64e3))
    p = FluidParams(capacity_bps=10e9, line_rate_bps=10e9, packet_bytes=1082, kmin_bytes=40e3, kmax_bytes=160e3,
                    pmax=0.2, feedback_delay_s=5.5e-6, queue_delay=True, rate_ai_bps=4e6, min_rate_bps=10e6,
                    message_sizes=mix, ack_delay_s=1e-3)
    tr = simulate(p, 0.2, seed=7, sample_every_s=50e-6)
    packets = [sum(-(-int(b) // 1082) for b in flow) for flow in mix]
    assert list(tr.delivered[-1]) == packets
    assert all(len(f) == 3 for f in tr.message_fct_s) and all(c for c in tr.cnp_times)
    assert max(tr.finish_s) < 0.2
    assert sum(sum(flow) for flow in mix) * 8 / max(tr.finish_s) < 10e9
    for i, flow in enumerate(tr.message_fct_s):
        assert tr.finish_s[i] == pytest.approx(sum(flow), rel=1e-9)   # one after another, from t = 0


def test_flows_without_an_end_report_no_completions():
    tr = simulate(FluidParams(**RAMP, starts_s=(0.0,)), 0.1, seed=1)
    assert tr.finish_s == () and tr.message_fct_s == ()
