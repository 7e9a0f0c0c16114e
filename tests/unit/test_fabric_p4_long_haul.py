"""Pure parts of scenarios/long_haul_cnp.py: roles from attributes, distances, the per-case replica plan
(BMv2 queue rates and RED thresholds), the senders' configuration as data, result rows."""

from __future__ import annotations

import pytest

import scenarios.long_haul_cnp as scen
from testbed.errors import SpecError
from testbed.validate import longhaul_setup as lh


@pytest.fixture(scope="module")
def G():
    from testbed.topo.spec import build_graph, load_spec

    return build_graph(load_spec(scen.SPEC))


def test_roles_come_from_attributes(G):
    r = lh.roles(G)
    assert [G.nodes[h]["campus"] for h in r.senders] == [0, 0]
    assert [G.nodes[h]["campus"] for h in r.receivers] == [1, 1]
    assert [G.nodes[d]["role"] for d in r.dci] == ["dci", "dci"]
    assert all(r.receiver_tor in G.neighbors(h) for h in r.receivers)


def test_with_distance_sets_the_long_haul_delay_only(G):
    H = lh.with_distance(G, 100)
    (u, v), = [(u, v) for u, v, d in H.edges(data=True) if d["tier"] == "dci"]
    assert H.edges[u, v]["delay_s"] == pytest.approx(500e-6)
    assert H.edges[u, v]["link"].one_way_delay_s == pytest.approx(500e-6)
    assert G.edges[u, v]["distance_m"] == 30e3  # the original is untouched
    zero = lh.with_distance(G, 0)
    assert zero.edges[u, v]["link"].one_way_delay_s == 0


def _ports(plan):
    return {(s.node, p.port): p for s in plan.switches for p in s.ports}


def test_case_plan_puts_the_bottleneck_where_the_case_says(G):
    r = lh.roles(G)
    scale = G.graph["scale"]
    for case in lh.CASES:
        plan = lh.case_plan(G, case, "ecn")
        sw, nbr = lh.bottleneck(case, r)
        port = G.edges[sw, nbr]["ports"][sw]
        neck = plan.switch(sw).port(port)
        offered = sum(G.edges[s, next(iter(G.neighbors(s)))]["rate_bps"] for s in r.senders)
        assert neck.real_rate_bps < offered  # oversubscribed
        # nothing on the senders' way to it is slower than the bottleneck
        up = plan.switch(next(iter(G.neighbors(r.senders[0]))))
        assert min(p.real_rate_bps for p in up.ports) >= neck.real_rate_bps
        for p in _ports(plan).values():
            assert 0 < p.ecn.kmin_pkts < p.ecn.kmax_pkts < p.depth_pkts
            assert p.emulated_rate_pps == round(p.real_rate_bps / scale / (8 * lh.FRAME_BYTES))
            assert p.ecn.emulated_cnp_interval_s == pytest.approx(lh.CNP_INTERVAL_S * scale)
    sd, rt = lh.case_plan(G, "sender-dci", "ecn"), lh.case_plan(G, "receiver-tor", "fast-cnp")
    d0 = sd.switch(r.dci[0]).port(G.edges[r.dci[0], r.dci[1]]["ports"][r.dci[0]])
    assert rt.switch(r.dci[0]).port(d0.port).real_rate_bps == 4 * d0.real_rate_bps
    assert {p.ecn.mode for p in _ports(rt).values()} == {"fast-cnp"}
    with pytest.raises(SpecError):
        lh.case_plan(G, "nowhere", "ecn")


def test_red_thresholds_scale_with_rate(G):
    plan = lh.case_plan(G, "receiver-tor", "ecn")
    by_rate = sorted({(p.real_rate_bps, p.ecn.kmin_pkts, p.ecn.kmax_pkts) for p in _ports(plan).values()})
    assert [k for _, k, _ in by_rate] == sorted(k for _, k, _ in by_rate)
    rate, kmin, kmax = by_rate[-1]
    assert kmin == round(100e3 * rate / 25e9 / lh.FRAME_BYTES) and kmax == round(400e3 * rate / 25e9 / lh.FRAME_BYTES)


def test_bdp_relative_red_follows_the_path_round_trip_and_deepens_the_queue(G):
    # Juniper's long-haul profile: Kmin 0.75, Kmax 1.5, buffer 2.5 bandwidth-delay products
    r = lh.roles(G)
    for km in (30, 100):
        H = lh.with_distance(G, km)
        plan = lh.case_plan(H, "sender-dci", "ecn", red="bdp")
        d0 = plan.switch(r.dci[0]).port(H.edges[r.dci[0], r.dci[1]]["ports"][r.dci[0]])
        rate = d0.real_rate_bps
        bdp_frames = rate * 2 * (km * 1e3 * 5e-9 + 0) / 8 / lh.FRAME_BYTES   # the long haul alone, both ways
        assert d0.ecn.kmin_pkts >= round(0.75 * bdp_frames) and d0.ecn.kmax_pkts >= round(1.5 * bdp_frames)
        assert d0.ecn.kmax_pkts <= round(1.5 * bdp_frames * 1.1)            # campus fibre adds < 10 %
        assert d0.depth_pkts >= 2.5 * bdp_frames
        rule = lh.red_rule(H, "bdp")
        assert rule["rule"] == "bdp" and rule["rtt_s"] == pytest.approx(lh.path_rtt_s(H, r.senders[0], r.receivers[0]))
        assert "bdp" in lh.describe_red(rule) and str(rule["kmin_pkts"]) in lh.describe_red(rule)
    far, near = (lh.case_plan(lh.with_distance(G, km), "sender-dci", "ecn", red="bdp") for km in (100, 30))
    assert far.switch(r.dci[0]).port(d0.port).ecn.kmin_pkts > 3 * near.switch(r.dci[0]).port(d0.port).ecn.kmin_pkts
    per25 = lh.case_plan(lh.with_distance(G, 100), "sender-dci", "ecn")
    assert per25.switch(r.dci[0]).port(d0.port).ecn.kmin_pkts == round(100e3 * rate / 25e9 / lh.FRAME_BYTES)
    with pytest.raises(SpecError, match="--red"):
        lh.overrides(red="juniper")


def test_sender_config_is_data_with_the_dilated_dcqcn(G):
    from testbed.rdma.endpoint import qp_config

    plan = lh.case_plan(G, "sender-dci", "ecn")
    r = lh.roles(G)
    args = type("A", (), {"size": 1 << 20, "iters": 2})()
    doc = lh.sender_config(plan, r.senders[0], r.receivers[0], args, 64)
    cfg = qp_config(doc)
    scale = G.graph["scale"]
    host_rate = G.edges[r.senders[0], next(iter(G.neighbors(r.senders[0])))]["rate_bps"]
    assert cfg.dcqcn.line_rate == pytest.approx(host_rate / scale)
    assert cfg.dcqcn.alpha_timer == pytest.approx(55e-6 * scale)
    assert cfg.timeout == pytest.approx(0.05 * scale) and cfg.window == 64
    assert doc["host"] == plan.endpoint(r.receivers[0]).ip
    # a NIC's pacer: at most a couple of frames beyond the line rate (1.7 ms a frame at this scale)
    assert cfg.line_burst_frames is not None and 1 <= cfg.line_burst_frames <= 4
    # the sender's own deadline is the trial's (a 128 MB message runs ~9 min emulated; it had 300 s fixed)
    slow = type("A", (), {"size": 1 << 20, "iters": 2, "trial_timeout": 1500.0})()
    assert lh.sender_config(plan, r.senders[0], r.receivers[0], slow, 64)["run_timeout_s"] == 1500.0


def test_default_window_is_two_bdps_of_the_path_at_line_rate_and_never_below_128(G):
    r = lh.roles(G)
    s, d = r.senders[0], r.receivers[0]
    rate = G.edges[s, next(iter(G.neighbors(s)))]["rate_bps"]
    windows = {}
    for km in (0, 30, 100):
        H = lh.with_distance(G, km)
        rtt = lh.path_rtt_s(H, s, d)
        assert rtt >= 2 * km * 5e-6                      # at least the long haul, both ways (5 us/km)
        assert rtt <= 2 * km * 5e-6 + 2 * 5e-6 * 10      # plus at most 10 km of campus fibre each way
        windows[km] = lh.default_window(H, r)
        assert windows[km] >= 2 * rate * rtt / 8 / lh.FRAME_BYTES and windows[km] >= lh.MIN_WINDOW_PKTS
    assert windows[0] == lh.MIN_WINDOW_PKTS                # a campus path: the endpoint's own window
    assert 600 < windows[30] < 800                         # 30 km at 10G: BDP ~350 frames
    assert windows[100] > 3 * windows[30]


def _checked(mode, switch_cnps, cnps_rx, marks, lost=0, sat=()):
    from testbed.validate import trial_ledger as TL

    results = [{"local": {"ip": "10.0.0.1"}, "remote": {"ip": "10.0.1.1"}, "tx_packets": 100, "rx_packets": 50,
                "server": {"stats": {"rx_packets": 100 - lost, "tx_packets": 50 - switch_cnps}}}]
    block = TL.metrics_block(results, switch_cnps, {}, {"d0": {"queue": 0}})
    return TL.verdict({"mode": mode, "switch_cnps": switch_cnps, "cnps_rx": cnps_rx, "marks": marks}, block,
                      list(sat))


def _trial(**kw):
    t = {"goodput_bps": 5e6, "fct_p50_s": 1.0, "fct_p99_s": 2.0, "queue_peak": 40, "queue_mean": 10.0,
         "feedback_delay_s": 0.3, "drops": 0, "marks": 5, "switch_cnps": 0, "cnps_rx": 4, "retransmissions": 0,
         "saturation": [], "bottleneck": {"real_rate_bps": 5e9, "kmin_bytes": 2e4, "kmax_bytes": 8e4, "pmax": 0.2},
         "cpu": {"machine_mean": 50.0, "switch_max": 40.0, "host_steal": 0.0, "processes": {}}}
    t.update(kw)
    return {**t, **_checked("ecn" if t["switch_cnps"] == 0 else "fast-cnp", t["switch_cnps"], t["cnps_rx"],
                            t["marks"], t.pop("lost", 0), t["saturation"])}


def test_row_undoes_the_dilation():
    x = lh.row("sender-dci", 30, "ecn", 1000.0, _trial())
    assert x["throughput_mbps"] == 5000.0 and x["fct_p50_ms"] == 1.0 and x["feedback_delay_ms"] == 0.3
    assert x["emulated"]["fct_p50_ms"] == 1000.0 and not x["emulator_saturated"]
    assert x["valid"] and x["repetition"] == 0


def test_row_gives_each_senders_start_after_the_first_in_real_microseconds():
    senders = [{"started_at": 100.050}, {"started_at": 100.010}, {"started_at": 100.030}]
    x = lh.row("sender-dci", 30, "ecn", 2000.0, _trial(senders=senders))
    assert x["start_offsets_us"] == [20.0, 0.0, 10.0]       # 40 ms of wall clock at scale 2000: 20 us real
    assert lh.row("sender-dci", 30, "ecn", 2000.0, _trial())["start_offsets_us"] is None   # no senders: unknown
    assert lh.start_offsets_us([{"started_at": 1.0}, {}], 2000.0) is None


def test_row_carries_what_validate_long_haul_reads():
    from testbed.validate.longhaul import ROW_FIELDS, long_haul_rows

    ecn = lh.row("sender-dci", 30, "ecn", 1000.0, _trial(feedback_delay_s=0.31))
    fast = lh.row("sender-dci", 30, "fast-cnp", 1000.0, _trial(switch_cnps=6, cnps_rx=6, marks=0,
                                                               feedback_delay_s=0.01))
    assert all(f in r for r in (ecn, fast) for f in ROW_FIELDS)
    assert fast["valid"] and fast["bottleneck"]["real_rate_bps"] == 5e9
    from testbed.topo.spec import build_graph, load_spec

    config = {"scale": 1000.0, "frame_bytes": lh.FRAME_BYTES, **lh.validate_fields(build_graph(load_spec(scen.SPEC)))}
    rows = long_haul_rows({"config": config, "rows": [ecn, fast]}, model_duration_s=0.05)
    metrics = [r.metric for r in rows]
    assert any("ECN feedback >= bound" in m for m in metrics)
    assert any("feedback saved by fast CNP" in m for m in metrics)
    assert any("goodput ratio fast/ECN" in m for m in metrics)


def test_a_fast_cnp_row_without_cnps_is_invalid_and_says_so():
    from testbed.validate import trial_ledger as TL

    x = lh.row("sender-dci", 30, "fast-cnp", 1000.0, {**_trial(switch_cnps=1, cnps_rx=0, marks=0)})
    assert not x["valid"] and "senders received no CNP" in TL.label(x["validity"])
    lossy = lh.row("sender-dci", 30, "ecn", 1000.0, _trial(lost=3))
    assert not lossy["valid"] and lossy["unaccounted_losses"] == 3 and not lossy["emulator_ok"]


def test_the_runs_health_joins_every_trials_ledger_cpu_and_saturation():
    from testbed.emu.runhealth import combine
    from testbed.validate.longhaul_report import health_parts

    good = lh.row("sender-dci", 30, "ecn", 1000.0, _trial())
    lossy = lh.row("sender-dci", 30, "fast-cnp", 1000.0, _trial(switch_cnps=6, cnps_rx=6, lost=3), repetition=1)
    busy = lh.row("sender-dci", 30, "ecn", 1000.0, _trial(saturation=["machine CPU 97%"]), repetition=2)
    parts = health_parts([good, lossy, busy])
    assert list(parts) == ["sender-dci 30 km ecn #0", "sender-dci 30 km fast-cnp #1", "sender-dci 30 km ecn #2"]
    assert parts["sender-dci 30 km ecn #0"]["emulator_ok"] is True
    assert parts["sender-dci 30 km fast-cnp #1"]["emulator"]["unaccounted"] == 3
    # a saturated trial's ledger may balance: the run's emulator_ok counts the saturation too
    assert busy["emulator_ok"] and parts["sender-dci 30 km ecn #2"]["emulator"]["reasons"] == ["machine CPU 97%"]
    run = combine(parts)
    assert run["emulator_ok"] is False and len(run["emulator"]["reasons"]) == 2
    assert run["emulator"]["machine"]["busy"] == 0.5


@pytest.mark.parametrize("flags, field", [(["--size", "0"], "--size"), (["--iters", "0"], "--iters"),
                                          (["--iters", "-2"], "--iters")])
def test_bad_sizes_and_counts_are_refused_before_any_results_folder(tmp_path, capsys, flags, field):
    from testbed.cli import run_guarded

    out = tmp_path / "run"
    try:
        rc = run_guarded(lambda: scen.main(["--quick", "--out", str(out), *flags]))
    except SystemExit as exc:  # argparse refuses the flag itself
        rc = exc.code
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and field in err[0]
    assert not out.exists()


def test_the_qp_map_is_preloaded_for_every_pair_unless_learning(G):
    from types import SimpleNamespace

    plan = lh.case_plan(G, "sender-dci", "fast-cnp")
    r = lh.roles(G)
    entries = lh.qp_map_entries(plan, r)
    assert [e.table for e in entries] == ["qp_map", "qp_map"]
    for i, (e, s, d) in enumerate(zip(entries, r.senders, r.receivers, strict=True)):
        sender_qp, receiver_qp = lh.pair_qpns(i)
        assert e.match == (plan.endpoint(s).ip, plan.endpoint(d).ip, str(receiver_qp)) and e.params == (str(sender_qp),)
    args = SimpleNamespace(size=1 << 20, iters=2)
    assert lh.sender_config(plan, r.senders[0], r.receivers[0], args, 128, lh.pair_qpns(0))["qpns"] == [0x100, 0x200]
    assert "qpns" not in lh.sender_config(plan, r.senders[0], r.receivers[0], args, 128)


def test_learning_the_qp_map_is_a_flag(capsys):
    with pytest.raises(SystemExit):
        scen.main(["--help"])
    assert "--learn-qp" in capsys.readouterr().out


@pytest.mark.parametrize("n", [4, 8])
def test_incast_n_senders_into_the_sender_dci_port_and_nothing_narrower_before_it(n):
    G = lh.graph(scen.SPEC, None, n)
    r = lh.roles(G)
    assert len(r.senders) == len(r.receivers) == n
    plan = lh.case_plan(G, "sender-dci", "ecn")
    sw, nbr = lh.bottleneck("sender-dci", r)
    neck = plan.switch(sw).port(G.edges[sw, nbr]["ports"][sw])
    line = G.edges[r.senders[0], next(iter(G.neighbors(r.senders[0])))]["rate_bps"]
    assert neck.real_rate_bps == line                                       # n senders at line rate: n:1
    tor = plan.switch(next(iter(G.neighbors(r.senders[0]))))
    uplink = tor.port(G.edges[tor.node, sw]["ports"][tor.node])
    assert uplink.real_rate_bps >= n * line                                 # the ToR's uplink is not the neck
    assert len(lh.crossing("sender-dci", r)) == n
    assert len(lh.qp_map_entries(plan, r)) == n


def test_incast_options_are_checked_and_keep_to_the_case_they_apply_to():
    from types import SimpleNamespace

    def args(**kw):
        base = dict(size="1MB", iters=None, repetitions=None, window=None, quick=True, distances=None,
                    modes="ecn,fast-cnp", cases=None, incast=2)
        return SimpleNamespace(**{**base, **kw})

    assert lh.checked_args(args())[2] == list(lh.CASES)
    assert lh.checked_args(args(incast=8))[2] == ["sender-dci"]           # the default narrows to where it applies
    for bad, field in ((dict(incast=9), "--incast"), (dict(incast=1), "--incast"),
                       (dict(incast=4, cases="receiver-tor"), "--incast")):
        with pytest.raises(SpecError, match=field):
            lh.checked_args(args(**bad))


def test_a_flow_size_mix_is_parsed_sent_rotated_per_sender_and_checked():
    from types import SimpleNamespace

    def args(**kw):
        base = dict(size="64KB,1MB,256KB", iters=None, repetitions=None, window=None, quick=True, distances=None,
                    modes="ecn,fast-cnp", cases=None, incast=2)
        return SimpleNamespace(**{**base, **kw})

    a = args()
    lh.checked_args(a)
    assert a.sizes == [64_000, 1_000_000, 256_000] and a.size == 1_000_000
    assert a.iters == 3                                   # quick's 2 rounded up: every size as often
    full = args(quick=False)
    lh.checked_args(full)
    assert full.iters == 9
    for bad, field in ((dict(iters=4), "--iters"), (dict(size="64KB,64KB"), "--size"), (dict(size="0,1MB"), "--size"),
                       (dict(size="1MB,lots"), "--size")):
        with pytest.raises(SpecError, match=field):
            lh.checked_args(args(**bad))
    one = args(size="1MB")
    lh.checked_args(one)
    assert one.sizes == [1_000_000] and one.iters == 2

    G = lh.graph(scen.SPEC, None, 3)
    plan, r = lh.case_plan(G, "sender-dci", "ecn"), lh.roles(G)
    docs = [lh.sender_config(plan, s, d, a, 128, None, i) for i, (s, d) in enumerate(zip(r.senders, r.receivers, strict=True))]
    firsts = [d["sizes"][0] for d in docs]
    assert sorted(firsts) == sorted(a.sizes)              # at any moment the senders' messages differ
    assert all(sorted(d["sizes"]) == sorted(a.sizes) and d["size"] == a.size for d in docs)
    assert lh.message_sizes(a.sizes, 6, 1) == docs[1]["sizes"] * 2
    assert "sizes" not in lh.sender_config(plan, r.senders[0], r.receivers[0], one, 128)
