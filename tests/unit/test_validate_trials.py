"""Trial validity, confidence intervals, marking profiles, feedback physics and the fluid gain prediction."""

import math
from dataclasses import replace

import pytest

from testbed.errors import SpecError
from testbed.models.dcqcn_fluid import FluidParams
from testbed.plan.marking import marking_profile
from testbed.validate.stats import confidence_interval, normalised_rms, relative_error, t_cdf, t_quantile
from testbed.validate.trials import (
    discrete_flow_gain,
    feedback_bound_s,
    feedback_check,
    feedback_paths_m,
    predicted_flow_gain,
    predicted_gain,
    trial_validity,
    wire_bytes,
)

GOOD = {"mode": "fast-cnp", "switch_cnps": 12, "cnps_rx": 11, "marks": 0, "unaccounted_losses": 0,
        "saturation": []}


def test_a_fast_cnp_trial_that_fired_is_valid():
    assert trial_validity(GOOD) == {"valid": True, "reasons": []}


def test_the_demo_trial_without_switch_cnps_is_invalid():
    # the demo's trial.json: switch_cnps 0, cnps_rx 0, cnp_skipped.qp_unknown 8
    v = trial_validity({**GOOD, "switch_cnps": 0, "cnps_rx": 0, "cnp_skipped": {"qp_unknown": 8}})
    assert not v["valid"]
    assert any("switch sent no CNP" in r for r in v["reasons"])
    assert any("senders received no CNP" in r for r in v["reasons"])


def test_switch_cnps_that_never_arrived_are_invalid():
    v = trial_validity({**GOOD, "cnps_rx": 0})
    assert not v["valid"] and v["reasons"] == ["fast-cnp trial: the senders received no CNP"]


def test_losses_and_health():
    assert trial_validity({**GOOD, "unaccounted_losses": 3})["reasons"] == ["3 lost frames are not accounted for"]
    assert not trial_validity({k: v for k, v in GOOD.items() if k != "unaccounted_losses"})["valid"]
    assert trial_validity({**GOOD, "unaccounted_losses": None, "accounting": {"unaccounted": 2}})["valid"] is False
    acc = {k: v for k, v in GOOD.items() if k != "unaccounted_losses"} | {"accounting": {"unaccounted": 0}}
    assert trial_validity(acc)["valid"]
    sat = trial_validity({**GOOD, "saturation": ["delay line late 4%"]})
    assert sat["reasons"] == ["emulator unhealthy: delay line late 4%"]
    assert not trial_validity({**GOOD, "saturation": None, "health": {"healthy": False, "reasons": ["cpu"]}})["valid"]
    no_health = {k: v for k, v in GOOD.items() if k != "saturation"}
    assert not trial_validity(no_health)["valid"]


def test_ecn_trial_marked_without_cnps_is_invalid_and_mode_is_required():
    ecn = {**GOOD, "mode": "ecn", "switch_cnps": 0, "marks": 40}
    assert trial_validity(ecn)["valid"]
    assert not trial_validity({**ecn, "marks": 40, "cnps_rx": 0})["valid"]
    # nothing marked: no congestion signal, so not an ECN result (as a fast-CNP trial without CNPs)
    unmarked = trial_validity({**ecn, "marks": 0})
    assert not unmarked["valid"] and "marked no packet" in unmarked["reasons"][0]
    with pytest.raises(SpecError, match="trial.mode"):
        trial_validity({k: v for k, v in GOOD.items() if k != "mode"})
    assert trial_validity({k: v for k, v in GOOD.items() if k != "mode"}, mode="fast-cnp")["valid"]


@pytest.mark.parametrize(("df", "t"), [(1, 12.706), (4, 2.776), (9, 2.262), (29, 2.045)])
def test_student_t_quantiles_match_the_table(df, t):
    assert t_quantile(0.975, df) == pytest.approx(t, abs=1e-3)
    assert t_cdf(t_quantile(0.9, df), df) == pytest.approx(0.9, abs=1e-9)


def test_confidence_interval():
    ci = confidence_interval([9.1, 10.4, 9.8, 10.0, 9.6])
    sd = math.sqrt(sum((x - 9.78) ** 2 for x in [9.1, 10.4, 9.8, 10.0, 9.6]) / 4)
    assert ci.mean == pytest.approx(9.78)
    assert ci.half_width == pytest.approx(2.776 * sd / math.sqrt(5), rel=1e-3)
    assert ci.low < 9.78 < ci.high and ci.n == 5
    assert confidence_interval([3.0]).half_width is None
    with pytest.raises(ValueError):
        confidence_interval([])


def test_error_helpers():
    assert relative_error(1.1, 1.0) == pytest.approx(0.1)
    assert relative_error(0.0, 0.0) == 0.0 and relative_error(1.0, 0.0) == math.inf
    assert normalised_rms([1.0, 3.0], [2.0, 2.0], 2.0) == pytest.approx(0.5)


def test_marking_profiles_from_link_parameters():
    # Juniper: 100G, 50 km: RTT 500 us + local -> BDP 6.25 MB
    bdp = marking_profile("bdp", 100e9, 500e-6)
    assert bdp.kmin_bytes == pytest.approx(0.75 * 6.25e6)
    assert bdp.kmax_bytes == pytest.approx(1.5 * 6.25e6)
    assert bdp.buffer_bytes == pytest.approx(2.5 * 6.25e6)
    ali = marking_profile("per-25g", 100e9, 0.0)
    assert (ali.kmin_bytes, ali.kmax_bytes, ali.pmax) == (400e3, 1.6e6, 0.2)
    assert ali.to_json()["kmin_pkts"] == round(400e3 / 1082)
    with pytest.raises(SpecError, match="marking.profile"):
        marking_profile("juniper", 1e9, 1e-3)
    with pytest.raises(SpecError, match="marking.rtt"):
        marking_profile("bdp", 1e9, 0.0)


def test_feedback_physics():
    p = feedback_paths_m("sender-dci", 30e3)
    assert feedback_bound_s(p["ecn"]) == pytest.approx(300e-6)
    assert feedback_bound_s(p["fast-cnp"]) == 0.0
    r = feedback_paths_m("receiver-tor", 30e3)
    assert r["ecn"] == r["fast-cnp"] == 30e3
    assert feedback_bound_s(1000.0, 2e-6) == pytest.approx(7e-6)
    # with one campus' cabling (host 3 m + ToR-DCI 100 m) counted hop by hop along each path
    assert feedback_paths_m("sender-dci", 30e3, 103) == {"ecn": 60e3 + 3 * 103, "fast-cnp": 103}
    assert feedback_paths_m("receiver-tor", 30e3, 103) == {"ecn": 30e3 + 206, "fast-cnp": 30e3 + 206}
    with pytest.raises(SpecError, match="case"):
        feedback_paths_m("middle", 1.0)


def test_feedback_check_allows_a_tenth_of_the_ecn_loop_and_at_least_5_us():
    """By hand: 30 km, sender-dci, no local cabling, 10 Gbit/s: ECN's loop is 60 km of fibre (300 us) plus a
    1082-byte frame and a 78-byte CNP serialised (0.928 us); a tenth of it is 30.09 us of emulator transit."""
    ser = (1082 + 78) * 8 / 10e9
    ok = feedback_check("sender-dci", 30e3, "ecn", 320e-6, 0.0, 10e9, 1082)
    assert ok["ok"] and ok["bound_us"] == pytest.approx(300 + ser * 1e6, abs=1e-3)
    assert ok["allowance_us"] == pytest.approx(30.0 + ser * 1e5, abs=1e-3)
    assert ok["excess_us"] == pytest.approx(20 - ser * 1e6, abs=1e-3)
    assert not feedback_check("sender-dci", 30e3, "ecn", 335e-6, 0.0, 10e9, 1082)["ok"]
    # fast CNP's own bound is a CNP's serialisation, but its allowance is still the ECN loop's tenth
    fast = feedback_check("sender-dci", 30e3, "fast-cnp", 25e-6, 0.0, 10e9, 1082)
    assert fast["ok"] and fast["bound_us"] == pytest.approx(78 * 8 / 10e9 * 1e6, abs=1e-3)
    # 0 km: the loop is 3 x 103 m (1.5 us), so the floor decides: 4 us over is allowed, 6 us is not
    assert feedback_check("sender-dci", 0.0, "ecn", 1.545e-6 + ser + 4e-6, 103, 10e9, 1082)["ok"]
    near = feedback_check("sender-dci", 0.0, "ecn", 1.545e-6 + ser + 6e-6, 103, 10e9, 1082)
    assert not near["ok"] and near["allowance_us"] == pytest.approx(5.0)
    assert feedback_check("receiver-tor", 30e3, "ecn", None, 0.0, 10e9, 1082) is None


def test_a_trial_whose_feedback_the_emulator_set_is_invalid():
    check = feedback_check("receiver-tor", 30e3, "fast-cnp", 290e-6, 103, 10e9, 1082)   # 129 us over 151 us
    v = trial_validity({**GOOD, "feedback_check": check})
    assert not v["valid"] and "over physics" in v["reasons"][0] and "emulator's transit" in v["reasons"][0]
    assert trial_validity({**GOOD, "feedback_check": feedback_check("receiver-tor", 30e3, "fast-cnp", 155e-6, 103,
                                                                    10e9, 1082)})["valid"]


def test_fluid_model_predicts_a_gain_growing_with_distance():
    base = FluidParams(capacity_bps=10e9, line_rate_bps=10e9, packet_bytes=1082, kmin_bytes=40e3,
                       kmax_bytes=160e3, pmax=0.2, feedback_delay_s=5e-6, rate_ai_bps=4e6)
    rows = predicted_gain(base, [0, 50], duration_s=0.12)
    assert rows[0]["gain"] == pytest.approx(0.0, abs=1e-3)
    assert rows[1]["gain"] > 0.05
    assert rows[1]["feedback_s"]["ecn"] == pytest.approx(5e-6 + 500e-6)


def test_short_flows_gain_more_from_fast_cnp_than_the_steady_state_and_only_at_the_sender_dci():
    """2 flows of 2 x 1 MB at 30 km (the scenario's quick sizes): ECN's first cut comes 0.3 ms late, the
    queue overshoots past Kmax and the deep cuts set the completion time, so fast CNP's transient gain is
    far above the steady-state one; at the receiver-side ToR both feedbacks cross the long haul, no gain."""
    base = FluidParams(capacity_bps=10e9, line_rate_bps=10e9, packet_bytes=1082, kmin_bytes=40e3,
                       kmax_bytes=160e3, pmax=0.2, feedback_delay_s=5e-6, rate_ai_bps=4e6, min_rate_bps=10e6,
                       queue_delay=True, starts_s=(0.0, 0.0), flow_bytes=(2e6, 2e6), messages=2)
    rtt = 2 * 30e3 * 5e-9
    dci = predicted_flow_gain(base, 30, "sender-dci", ack_delay_s=rtt)
    steady = predicted_gain(replace(base, flow_bytes=None, queue_delay=False, min_rate_bps=None), [30],
                            duration_s=0.12)[0]["gain"]
    assert dci["gain"] > 0.5 > steady
    assert dci["queue_peak_bytes"]["ecn"] > 160e3 > dci["queue_peak_bytes"]["fast-cnp"]
    assert dci["goodput_bps"]["fast-cnp"] <= 10e9
    tor = predicted_flow_gain(replace(base, capacity_bps=5e9, kmin_bytes=20e3, kmax_bytes=80e3, starts_s=(0.0,),
                                      flow_bytes=(2e6,)), 30, "receiver-tor", ack_delay_s=rtt)
    assert abs(tor["gain"]) < 0.02
    with pytest.raises(SpecError, match="flow_bytes"):
        predicted_flow_gain(replace(base, flow_bytes=None), 30)


def test_the_discrete_simulation_of_the_same_flows_gives_one_paired_ratio_per_seed():
    """2 flows of 2 x 1 MB at 30 km: each seed runs both modes; the ratios are fast / ECN goodput of the same
    seed, their quantiles ordered, and fast CNP gains in every seed (ECN's first cut comes 0.3 ms late)."""
    base = FluidParams(capacity_bps=10e9, line_rate_bps=10e9, packet_bytes=1082, kmin_bytes=40e3,
                       kmax_bytes=160e3, pmax=0.2, feedback_delay_s=5e-6, rate_ai_bps=4e6, min_rate_bps=10e6,
                       queue_delay=True, starts_s=(0.0, 0.0), flow_bytes=(2e6, 2e6), messages=2)
    rtt = 2 * 30e3 * 5e-9
    sim = discrete_flow_gain(base, 30, "sender-dci", ack_delay_s=rtt, seeds=4)
    good = sim["goodput_bps"]
    assert sim["ratios"] == [f / e for f, e in zip(good["fast-cnp"], good["ecn"], strict=True)]
    assert len(sim["ratios"]) == 4 and sim["p5"] <= sim["median"] <= sim["p95"]
    assert min(sim["ratios"]) > 1 and max(good["fast-cnp"]) <= 10e9
    assert all(len(f) == 2 for f in sim["finish_s"]["ecn"])
    assert discrete_flow_gain(base, 30, "sender-dci", ack_delay_s=rtt, seeds=2)["ratios"] == sim["ratios"][:2]
    with pytest.raises(SpecError, match="flow_bytes"):
        discrete_flow_gain(replace(base, flow_bytes=None), 30)
    with pytest.raises(SpecError, match="seeds"):
        discrete_flow_gain(base, 30, seeds=0)


def test_a_message_on_the_wire_carries_every_frames_headers():
    """1024-byte MTU in 1082-byte frames (the long-haul trials): 1 MB is 977 frames (the senders' tx_packets
    per message), 64 KB 63 (the last one half full); a frame no larger than its MTU is refused."""
    assert wire_bytes(1e6, 1024, 1082) == 1e6 + 977 * 58
    assert wire_bytes(64e3, 1024, 1082) == 64e3 + 63 * 58
    assert wire_bytes(1024, 1024, 1082) == 1082
    with pytest.raises(SpecError, match="frame_bytes"):
        wire_bytes(1e6, 1024, 1024)


def test_the_two_modes_draw_their_marks_independently_in_the_discrete_simulation():
    """At the receiver's ToR both modes' feedback crosses the same fibre: on shared seeds they would replay
    the same run (every ratio exactly 1), which two independent replica trials never show. One flow of
    2 x 1 MB at 0 km into a 5G port: its goodput depends on where the random marks fall."""
    base = FluidParams(capacity_bps=5e9, line_rate_bps=10e9, packet_bytes=1082, kmin_bytes=20e3, kmax_bytes=80e3,
                       pmax=0.2, feedback_delay_s=5e-6, rate_ai_bps=4e6, min_rate_bps=10e6, queue_delay=True,
                       starts_s=(0.0,), flow_bytes=(2e6,), messages=2)
    sim = discrete_flow_gain(base, 0, "receiver-tor", ack_delay_s=1e-6, seeds=4)
    assert len(set(sim["goodput_bps"]["ecn"])) > 1 and sim["goodput_bps"]["ecn"] != sim["goodput_bps"]["fast-cnp"]
    assert max(abs(r - 1) for r in sim["ratios"]) > 0.1
