"""Alignment rows: the reference side and the verdicts, from synthetic measurements (no root)."""

import functools
import json
from dataclasses import replace

import numpy as np
import pytest

from testbed.errors import SpecError
from testbed.models.dcqcn_fluid import FluidParams, simulate
from testbed.validate import rows as R
from testbed.validate.longhaul import REF_GAIN, REF_GAIN_DISCRETE, gain_points, load, load_all, long_haul_rows
from testbed.validate.replica import FRAME_BYTES, DcqcnRun
from testbed.validate.trials import flow_goodput, predicted_flow_gain


def test_goodput_reference_is_min_of_rate_and_window_over_rtt():
    # 100 ms RTT, 32 packets of 1024 B -> 2.62 Mb/s, well below 50 Mb/s
    assert R.goodput_reference(50e6, 0.05, 32) == pytest.approx(32 * 1024 * 8 / (0.1 + 1082 * 8 / 50e6))
    assert R.goodput_reference(20e6, 0.002, 128) == pytest.approx(20e6 * 1024 / 1082)
    rows = R.goodput_rows([{"rate_bps": 20e6, "one_way_s": 0.002, "window": 128, "goodput_mbps": 17.5,
                            "retransmissions": 0, "timeouts": 0}])
    assert "rate-limited" in rows[0].metric and rows[0].passed is True
    low = R.goodput_rows([{"rate_bps": 20e6, "one_way_s": 0.002, "window": 128, "goodput_mbps": 15.0,
                           "retransmissions": 0, "timeouts": 0}])
    assert low[0].passed is False and low[0].error == pytest.approx(1 - 15 / 18.927, rel=1e-3)


def test_gap_summary_of_an_ideal_and_a_jittery_link():
    ser_ns = 1514 * 8 / 10e6 * 1e9
    ideal = [int(i * ser_ns) for i in range(500)]
    s = R.gap_case_summary(10e6, ideal, 1514)
    assert s["delivered_mbps"] == pytest.approx(10.0, rel=1e-3) and s["p90_error_pct"] < 0.1
    rng = np.random.default_rng(1)
    jitter = np.cumsum(ser_ns * (1 + rng.uniform(-0.3, 0.3, 500))).astype(int)
    rows = R.link_rows([], [R.gap_case_summary(10e6, jitter, 1514)])
    gap_row = [r for r in rows if "gap deviation" in r.metric][0]
    assert gap_row.passed is False and gap_row.replica > 0.2


def test_red_row_weights_bins_by_probes():
    bins = [{"depth_from": 10, "depth_to": 14, "samples": 100, "expected": 0.05, "observed": 0.06, "abs_error": 0.01},
            {"depth_from": 15, "depth_to": 19, "samples": 300, "expected": 0.15, "observed": 0.14, "abs_error": 0.01}]
    row = R.red_rows({"bins": bins, "pmax": 0.5, "kmin": 10, "kmax": 50})[0]
    assert row.expected == pytest.approx((5 + 45) / 400) and row.replica == pytest.approx((6 + 42) / 400)
    assert row.passed
    assert R.red_rows({"bins": [], "pmax": 0.5})[0].kind == "missing"


def _fake_replica(run: DcqcnRun, tr, lag_s: float = 0.0, gain: float = 1.0) -> dict:
    """A replica whose senders follow the model's trajectory (shifted by ``lag_s``, rates x ``gain``)."""
    senders = []
    for i, start in enumerate(tr.params.starts_s):
        mask = tr.t >= start
        t = tr.t[mask] - start
        acked = np.cumsum(tr.rates[mask, i] * gain) * (tr.t[1] - tr.t[0]) / 8 * 1024 / FRAME_BYTES
        rows = [[float(a), float(r * gain), 0.0, 0.0, 0, 0, 0, float(b)]
                for a, r, b in zip(t, tr.rates[mask, i], acked, strict=True)]
        senders.append({"series": {"columns": ["t", "rate_bps", "target_bps", "alpha", "cnps_rx", "cnps_tx",
                                               "retransmissions", "acked_bytes"], "rows": rows},
                        "started_at": 1000.0 + start + lag_s, "wall_minus_monotonic": 0.0})
    queue = [[1000.0 + t + lag_s, q / FRAME_BYTES, q] for t, q in zip(tr.t, tr.queue, strict=True)]
    return {"senders": senders, "queue_series": queue}


def test_dcqcn_rows_pass_for_a_replica_that_follows_the_model_and_fail_for_one_that_does_not():
    run = DcqcnRun(kmax_pkts=300, pmax=0.2, limit_pkts=1000, starts_s=(0.0, 0.05), duration_s=0.2)
    fp = R.fluid_params_for(run, FRAME_BYTES)
    tr = simulate(fp, run.duration_s * run.scale, sample_every_s=fp.cnp_interval_s / 4)
    good = R.dcqcn_rows(_fake_replica(run, tr), run, FRAME_BYTES, model=tr)
    assert all(r.passed for r in good), [(r.metric, r.replica, r.expected) for r in good]
    slow = R.dcqcn_rows(_fake_replica(run, tr, gain=0.6), run, FRAME_BYTES, model=tr)
    by = {r.metric.split(",")[0].split(" (")[0]: r for r in slow}
    assert not by["rate trajectory"].passed and not by["aggregate goodput"].passed


def test_fluid_params_follow_the_run():
    run = DcqcnRun()
    fp = R.fluid_params_for(run, FRAME_BYTES)
    assert fp.capacity_bps == run.bottleneck_bps / run.scale
    assert fp.cnp_interval_s == pytest.approx(50e-6 * run.scale)
    assert fp.feedback_delay_s > 2 * run.one_way_s * run.scale
    assert fp.starts_s == (0.0, run.starts_s[1] * run.scale)


def _trial(case, km, mode, rep, thr, fb_ms, **kw):
    return {"case": case, "distance_km": km, "mode": mode, "repetition": rep, "throughput_mbps": thr,
            "feedback_delay_ms": fb_ms, "switch_cnps": 5 if mode == "fast-cnp" else 0, "cnps_at_senders": 7,
            "marks": 9, "unaccounted_losses": 0, "saturation": [],
            "bottleneck": {"real_rate_bps": 10e9, "kmin_bytes": 40e3, "kmax_bytes": 160e3, "pmax": 0.2, "flows": 2},
            **kw}


MODEL_S = None   # simulated seconds of each fluid run: the default, as `testbed validate` uses (shorter runs have not settled)


@functools.cache
def _model_gain_30km() -> float:
    """The fluid model's gain at 30 km for the trials' two flows of 2 x 1 MB through the bottleneck, set up here
    from the trial fields by hand (not by longhaul.py): what the row must compare the replica with."""
    base = FluidParams(capacity_bps=10e9, line_rate_bps=10e9, packet_bytes=1082, kmin_bytes=40e3, kmax_bytes=160e3,
                       pmax=0.2, feedback_delay_s=5e-6, rate_ai_bps=4e6, min_rate_bps=10e6, queue_delay=True,
                       flow_bytes=(2e6, 2e6), messages=2)
    return predicted_flow_gain(base, 30, "sender-dci", 0.0, ack_delay_s=2 * 30e3 * 5e-9)["gain"]


def _doc(ecn_fb_ms=0.32, fast_fb_ms=0.02, extra=()):
    config = {"line_rate_bps": 10e9, "frame_bytes": 1082, "scale": 1000, "message_bytes": 1e6,
              "messages_per_sender": 2}
    base = _model_gain_30km()
    rows = []
    for rep in range(5):
        rows.append(_trial("sender-dci", 30, "ecn", rep, 1000.0 + rep, ecn_fb_ms + 0.001 * rep))
        rows.append(_trial("sender-dci", 30, "fast-cnp", rep, (1000.0 + rep) * (1 + base), fast_fb_ms))
    return {"config": config, "rows": rows + list(extra)}


def test_long_haul_rows_from_trials_that_agree_with_physics_and_the_model():
    rows = long_haul_rows(_doc(), MODEL_S)
    by = {r.metric: r for r in rows if r.reference != REF_GAIN_DISCRETE}
    bound = by["sender-dci 30 km: ECN feedback >= bound"]
    assert bound.passed and bound.expected == pytest.approx(0.3 + (1082 + 78) * 8 / 10e9 * 1e3)
    saved = by["sender-dci 30 km: feedback saved by fast CNP"]
    assert saved.passed and saved.expected == pytest.approx(0.3)
    gain = by["sender-dci 30 km: goodput ratio fast/ECN"]
    assert gain.passed and gain.plot["low"] <= gain.plot["mean"] <= gain.plot["high"]
    assert "started together (offsets not recorded)" in gain.note
    discrete = [r for r in rows if r.reference == REF_GAIN_DISCRETE][0]
    assert discrete.metric == gain.metric and discrete.tolerance >= 0.10 and "10 seeds per trial" in discrete.note
    assert discrete.passed       # the replica gains as the fluid model's mean; the process's median is near it
    point = gain_points(rows)["sender-dci"][0]
    assert point["distance_km"] == 30 and point["discrete_low"] <= point["discrete"] <= point["discrete_high"]


def _with_offsets(doc, offsets):
    """``doc``'s trials with each repetition's senders starting ``offsets[mode][rep]`` us apart (sender 2 late)."""
    rows = [{**r, "start_offsets_us": [0.0, offsets[r["mode"]][r["repetition"]]]} for r in doc["rows"]]
    return {**doc, "rows": rows}


def test_the_gain_rows_run_the_models_with_each_trials_start_offsets_paired_by_repetition():
    """Each trial's senders started some us apart (the row's ``start_offsets_us``): the fluid reference is the
    mean over repetitions of the model's fast/ECN ratio for the two trials' own offsets, set up here by hand;
    a replica far from the discrete process's band fails that row, one inside it passes."""
    offsets = {"ecn": [0.0, 30.0, 0.0, 30.0, 0.0], "fast-cnp": [30.0, 0.0, 30.0, 0.0, 0.0]}
    doc = _with_offsets(_doc(), offsets)
    rows = long_haul_rows(doc, MODEL_S, discrete_seeds=3)
    gain = {r.metric: r for r in rows if r.reference == REF_GAIN}["sender-dci 30 km: goodput ratio fast/ECN"]
    base = FluidParams(capacity_bps=10e9, line_rate_bps=10e9, packet_bytes=1082, kmin_bytes=40e3, kmax_bytes=160e3,
                       pmax=0.2, feedback_delay_s=5e-6, rate_ai_bps=4e6, min_rate_bps=10e6, queue_delay=True,
                       flow_bytes=(2e6, 2e6), messages=2)

    def model(mode, late_us):
        return flow_goodput(replace(base, starts_s=(0.0, late_us / 1e6)), 30, mode, "sender-dci",
                            ack_delay_s=2 * 30e3 * 5e-9)["goodput_bps"]

    by_hand = sum(model("fast-cnp", f) / model("ecn", e) for e, f in zip(offsets["ecn"], offsets["fast-cnp"],
                                                                          strict=True)) / 5
    assert gain.expected == pytest.approx(by_hand, rel=1e-9)
    assert "with each trial's start offsets (0-30 us)" in gain.note and "started together" in gain.note
    discrete = [r for r in rows if r.reference == REF_GAIN_DISCRETE][0]
    assert "3 seeds per trial, 4 distinct trial set-ups" in discrete.note   # each mode with 0 and with 30 us
    lifted = _with_offsets(_doc(), offsets)
    for r in lifted["rows"]:
        if r["mode"] == "fast-cnp":
            r["throughput_mbps"] *= 2 * discrete.expected
    far = [r for r in long_haul_rows(lifted, MODEL_S, discrete_seeds=3) if r.reference == REF_GAIN_DISCRETE][0]
    assert far.expected == pytest.approx(discrete.expected) and not far.passed


def test_the_gain_row_models_the_frames_the_senders_sent_when_the_run_names_its_mtu():
    """With ``ib_mtu`` the model sends each 1 MB message as its 977 frames of 1082 bytes (5.7 % more than the
    payload) and counts goodput on the payload, as the replica does; without it, the payload alone."""
    doc = _doc()
    doc["config"] = {**doc["config"], "ib_mtu": 1024}
    gain = {r.metric: r for r in long_haul_rows(doc, MODEL_S, discrete_seeds=0)}[
        "sender-dci 30 km: goodput ratio fast/ECN"]
    base = FluidParams(capacity_bps=10e9, line_rate_bps=10e9, packet_bytes=1082, kmin_bytes=40e3, kmax_bytes=160e3,
                       pmax=0.2, feedback_delay_s=5e-6, rate_ai_bps=4e6, min_rate_bps=10e6, queue_delay=True,
                       flow_bytes=(2 * 1_056_666, 2 * 1_056_666), messages=2)
    by_hand = predicted_flow_gain(base, 30, "sender-dci", 0.0, ack_delay_s=2 * 30e3 * 5e-9, payload_bytes=4e6)
    assert gain.expected == pytest.approx(1 + by_hand["gain"], rel=1e-9)
    assert gain.expected != pytest.approx(1 + _model_gain_30km(), rel=1e-4)
    assert "in 1024-byte frames" in gain.note and "discrete simulation" not in gain.note


def test_long_haul_rows_catch_impossible_feedback_and_leave_invalid_trials_out():
    too_fast = long_haul_rows(_doc(ecn_fb_ms=0.2), MODEL_S, discrete_seeds=0)
    by = {r.metric: r for r in too_fast}
    assert not by["sender-dci 30 km: ECN feedback >= bound"].passed       # faster than light in fibre
    assert not by["sender-dci 30 km: feedback saved by fast CNP"].passed
    bogus = _trial("sender-dci", 30, "fast-cnp", 9, 5000.0, 0.01, switch_cnps=0, cnps_at_senders=0)
    rows = long_haul_rows(_doc(extra=[bogus]), MODEL_S, discrete_seeds=0)
    info = [r for r in rows if r.kind == "info"][0]
    assert info.replica == 1.0 and "switch sent no CNP" in info.note
    assert {r.metric: r for r in rows}["sender-dci 30 km: goodput ratio fast/ECN"].passed   # the bogus 5x is out


def test_long_haul_input_errors_name_the_field(tmp_path):
    with pytest.raises(SpecError, match=r"rows\[0\].feedback_delay_ms"):
        long_haul_rows({"config": {}, "rows": [{"case": "sender-dci", "distance_km": 30, "mode": "ecn",
                                               "throughput_mbps": 1.0}]})
    with pytest.raises(SpecError, match="--long-haul"):
        load(tmp_path / "nope")
    (tmp_path / "config.json").write_text(json.dumps({"config": {"line_rate_bps": 1e10}}))
    (tmp_path / "rows.json").write_text(json.dumps(_doc()["rows"]))
    assert load(tmp_path)["config"]["line_rate_bps"] == 1e10


def test_feedback_excess_over_physics_flags_an_emulator_whose_own_transit_rivals_the_fibre():
    """30 km: ECN's loop is 0.3 ms of fibre; 20 us of emulator transit is inside a tenth of it, 50 us is not.
    0 km: the loop is a few metres, so the same 20 us of transit decides the feedback: the row fails."""
    by = {r.metric: r for r in long_haul_rows(_doc(ecn_fb_ms=0.32), MODEL_S, discrete_seeds=0)}
    ok = by["sender-dci 30 km: ecn feedback excess over physics"]
    assert ok.passed and ok.kind == "bound" and 0.01 < ok.replica < 0.03
    slow = {r.metric: r for r in long_haul_rows(_doc(ecn_fb_ms=0.35), MODEL_S, discrete_seeds=0)}
    assert not slow["sender-dci 30 km: ecn feedback excess over physics"].passed
    near = [_trial("sender-dci", 0, m, rep, 1000.0, 0.02) for rep in range(3) for m in ("ecn", "fast-cnp")]
    rows = {r.metric: r for r in long_haul_rows({"config": _doc()["config"], "rows": near}, MODEL_S, discrete_seeds=0)}
    assert not rows["sender-dci 0 km: ecn feedback excess over physics"].passed
    assert not rows["sender-dci 0 km: fast-cnp feedback excess over physics"].passed


def test_a_trial_over_the_excess_allowance_is_left_out_but_its_excess_row_shows_it():
    """One ECN trial whose feedback took 0.40 ms at 30 km (~99 us of emulator transit, a third of the loop) and
    whose goodput would halve the ECN mean: it is no ECN result, so the gain row does not see it; the excess
    row still reports it and fails."""
    slow = _trial("sender-dci", 30, "ecn", 7, 500.0, 0.40)
    rows = long_haul_rows(_doc(extra=[slow]), MODEL_S, discrete_seeds=0)
    by = {r.metric: r for r in rows}
    info = [r for r in rows if r.kind == "info"][0]
    assert info.replica == 1.0 and "over physics" in info.note
    excess = by["sender-dci 30 km: ecn feedback excess over physics"]
    assert not excess.passed and excess.replica == pytest.approx(0.099, abs=1e-3) and "1 over the allowance" in excess.note
    assert by["sender-dci 30 km: ECN feedback >= bound"].passed and "5 valid trials" in by[
        "sender-dci 30 km: ECN feedback >= bound"].note
    assert by["sender-dci 30 km: goodput ratio fast/ECN"].passed


def _folder(path, config, rows):
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"config": config}))
    (path / "rows.json").write_text(json.dumps(rows))
    return path


def test_several_results_folders_merge_into_one_experiment_or_are_refused_by_name(tmp_path):
    """One run per distance is how a sweep holds the machine; validate reads them together. Folders of other
    flows, or two runs of the same point (their repetitions would be paired across runs), are refused."""
    doc = _doc()
    near = [_trial("sender-dci", 10, m, rep, 1000.0, 0.12) for rep in range(2) for m in ("ecn", "fast-cnp")]
    a = _folder(tmp_path / "30km", {**doc["config"], "red": {"rule": "per-25g", "rtt_s": 3e-4}}, doc["rows"])
    b = _folder(tmp_path / "10km", {**doc["config"], "red": {"rule": "per-25g", "rtt_s": 1e-4}}, near)
    merged = load_all([a, b])
    assert len(merged["rows"]) == len(doc["rows"]) + 4 and merged["config"]["scale"] == 1000
    other = _folder(tmp_path / "other", {**doc["config"], "scale": 2000}, near)
    with pytest.raises(SpecError, match=r"--long-haul.*config.scale is 2000 .* has 1000"):
        load_all([a, other])
    again = _folder(tmp_path / "again", {**doc["config"], "red": {"rule": "per-25g"}}, doc["rows"][:2])
    with pytest.raises(SpecError, match="both hold sender-dci 30 km ecn repetition 0"):
        load_all([a, again])
    # a run whose links serialised each frame is another emulator: not merged with one that did not (a
    # config without the key is from before serialisation existed: it did not)
    serialised = _folder(tmp_path / "serialised", {**doc["config"], "red": {"rule": "per-25g"}, "serialise": True},
                         near)
    with pytest.raises(SpecError, match=r"config.serialise is True .* has False"):
        load_all([a, serialised])


def test_the_summary_judges_each_trial_as_the_rows_do_not_as_stored():
    """A trial stored INVALID for a feedback reading since fixed is valid on its numbers; one 99 us over the
    fibre at 30 km is not, whatever it was stored as."""
    from testbed.validate.longhaul import judged

    doc = _doc()
    fixed = {**doc["rows"][0], "valid": False}
    slow = _trial("sender-dci", 30, "ecn", 7, 500.0, 0.40, valid=True)
    out = judged({"config": doc["config"], "rows": [fixed, slow]})
    assert out[0]["valid"] and not out[1]["valid"]
    assert "over physics" in out[1]["validity"]["reasons"][0]
