"""A long-haul trial over time: the queue from cumulative registers, real-world time, the plot."""

import pytest

from testbed.p4rt.fabric_stats import queue_series
from testbed.validate import longhaul_report as report
from testbed.validate import longhaul_setup as S


def test_queue_series_is_the_latest_packets_depth_and_a_gap_without_packets():
    # (time, depth the latest packet met, packets so far): none entered between the 2nd and 3rd reading
    samples = [(100.0, 3, 1), (100.025, 20, 4), (100.05, 20, 4), (100.075, 7, 8)]
    assert queue_series(samples) == [(100.025, 20), (100.05, None), (100.075, 7)]
    assert queue_series(samples[:1]) == []


def _sender(started_at, rows):
    return {"started_at": started_at, "series": {"columns": ["t", "rate_bps", "target_bps"], "rows": rows}}


def test_timeline_in_real_world_units_from_the_first_start():
    scale = 1000.0
    results = [_sender(50.0, [[0.0, 10e6, 10e6], [0.5, 5e6, 10e6]]), _sender(50.2, [[0.0, 10e6, 10e6]])]
    tl = S.timeline(("h0", "h1"), results, [(50.1, 3.0), (50.3, None)], {"h0": [50.4, 51.0], "h1": []}, scale)
    # 0.5 s emulated after the first start = 0.5 ms real; 10 Mbit/s emulated = 10 Gbit/s real
    assert tl["rate"]["h0"] == {"t_ms": [0.0, 0.5], "rate_gbps": [10.0, 5.0]}
    assert tl["rate"]["h1"]["t_ms"] == [pytest.approx(0.2)]
    assert tl["queue"] == {"t_ms": [pytest.approx(0.1), pytest.approx(0.3)], "pkts": [3.0, None]}
    assert tl["cnps"] == {"h0": [pytest.approx(0.4), pytest.approx(1.0)], "h1": []}


def test_the_queue_is_drawn_when_it_had_the_depth_not_when_the_packet_left():
    """fabric.p4 records a packet's enqueue depth at its departure: a packet that met 100 frames at a port
    draining 500 packets/s left 0.2 s (emulated) after it entered, and that is when the queue held them."""
    results = [_sender(10.0, [[0.0, 10e6, 10e6]])]
    tl = S.timeline(("h0",), results, [(10.5, 100.0), (10.6, None), (10.7, 0.0)], {"h0": []}, 1000.0, drain_pps=500)
    assert tl["queue"]["t_ms"] == [pytest.approx(0.3), pytest.approx(0.6), pytest.approx(0.7)]
    plain = S.timeline(("h0",), results, [(10.5, 100.0)], {"h0": []}, 1000.0)
    assert plain["queue"]["t_ms"] == [pytest.approx(0.5)]


def test_timeline_of_a_sender_without_series_is_empty_not_an_error():
    tl = S.timeline(("h0",), [{"started_at": 1.0}], [], {"h0": []}, 1000.0)
    assert tl["rate"]["h0"] == {"t_ms": [], "rate_gbps": []}


def test_plot_timeline_draws_both_modes(tmp_path):
    results = [_sender(1.0, [[i * 0.02, 10e6 / (1 + i), 10e6] for i in range(20)])]
    tl = S.timeline(("h0",), results, [(1.0 + i * 0.02, float(i)) for i in range(20)], {"h0": [1.1, 1.2]}, 1000.0)
    path = tmp_path / "timeline.png"
    report.plot_timeline({("sender-dci", "ecn"): tl, ("sender-dci", "fast-cnp"): tl}, path, "30 km")
    assert path.stat().st_size > 10_000
    report.plot_timeline({}, tmp_path / "none.png", "nothing")   # nothing ran: no figure, no error
    assert not (tmp_path / "none.png").exists()


def _long_haul_graph():
    from scenarios.long_haul_cnp import SPEC
    from testbed.topo.spec import build_graph, load_spec

    return build_graph(load_spec(SPEC))


def test_captures_at_the_senders_and_on_the_congestion_points_wire():
    G = _long_haul_graph()
    r = S.roles(G)
    dci = {(n, nbr, way, name) for n, nbr, way, _f, name, _c in S.captures(G, "sender-dci", r)}
    # CNPs as they reach each sender; the DCI's CE marks going on over the long haul, its CNPs going back
    assert {(s, next(iter(G.neighbors(s))), "in", f"cnp-{s}") for s in r.senders} <= dci
    assert (r.dci[0], r.dci[1], "out", "signal-ce") in dci
    assert (r.dci[0], next(iter(G.neighbors(r.senders[0]))), "out", "signal-cnp") in dci   # towards the ToR x0
    tor = {(n, nbr, name) for n, nbr, _w, _f, name, _c in S.captures(G, "receiver-tor", r)}
    assert (r.receiver_tor, r.receivers[0], "signal-ce") in tor and (r.receiver_tor, r.dci[1], "signal-cnp") in tor
    assert S.crossing("sender-dci", r) == r.senders and S.crossing("receiver-tor", r) == r.senders[:1]
    # one bounded capture: the first sender's RoCEv2 frames both ways at its host link, whole, for roce check
    for case in S.CASES:
        bounded = [c for c in S.captures(G, case, r) if c[5] is not None]
        assert bounded == [(r.senders[0], next(iter(G.neighbors(r.senders[0]))), None, S.ROCE_FILTER,
                            f"data-{r.senders[0]}", S.DATA_SAMPLE_FRAMES)]


def test_feedback_on_the_wire_from_the_modes_own_first_signal():
    ce, switch_cnps, at_senders = [10.0, 10.5], [12.0], [9.0, 10.3, 12.001]
    # ECN: from the first CE-marked frame out of the congestion point to the first CNP after it
    assert S.feedback_on_wire("ecn", ce, [], at_senders) == pytest.approx(0.3)
    # fast CNP: from the switch's first CNP out (a CNP captured before it is not its answer)
    assert S.feedback_on_wire("fast-cnp", [], switch_cnps, at_senders) == pytest.approx(0.001)
    assert S.feedback_on_wire("ecn", [], switch_cnps, at_senders) is None       # never marked
    assert S.feedback_on_wire("fast-cnp", [], [13.0], at_senders) is None       # no CNP reached a sender after


def test_ecn_feedback_split_where_it_was_captured():
    # the DCI marks at 1.0; h3 gets a CE frame at 1.2 (h2 only at 1.25), answers at 1.23; h1 hears at 1.45
    receivers = {"h2": ([1.25], [1.3]), "h3": ([0.5, 1.2], [0.4, 1.23])}
    parts = S.feedback_parts([1.0, 1.1], receivers, [0.9, 1.45])
    assert parts["receiver"] == "h3"
    assert parts["to_receiver_s"] == pytest.approx(0.2) and parts["receiver_turnaround_s"] == pytest.approx(0.03)
    assert parts["to_sender_s"] == pytest.approx(0.22)
    assert S.feedback_parts([], receivers, [1.45]) is None            # nothing marked (fast CNP)
    assert S.feedback_parts([1.0], {"h3": ([1.2], [])}, [1.45]) is None   # the receiver never answered


def test_capture_times_read_every_capture_of_a_trial(tmp_path):
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.utils import wrpcap

    from testbed.roce.layers import BTH, cnp
    from testbed.validate.longhaul_captures import capture_times, feedback

    def frame(t, ce=False, is_cnp=False, dst="10.0.0.1"):
        f = Ether() / IP(src="10.1.0.1", dst=dst, tos=3 if ce else 2) / UDP(sport=49152, dport=4791) / (
            cnp(7) if is_cnp else BTH(opcode=0x0A, dqpn=7, psn=1))
        f.time = t
        return f

    r = S.roles(_long_haul_graph())
    s0, s1 = r.senders
    wrpcap(str(tmp_path / f"cnp-{s0}.pcap"), [frame(2.0, is_cnp=True)])
    wrpcap(str(tmp_path / f"cnp-{s1}.pcap"), [frame(2.5, is_cnp=True)])
    wrpcap(str(tmp_path / "signal-ce.pcap"), [frame(1.0, ce=True)])
    wrpcap(str(tmp_path / "signal-cnp.pcap"), [frame(1.9, is_cnp=True)])
    for h in r.receivers:
        wrpcap(str(tmp_path / f"receiver-{h}.pcap"), [frame(1.4), frame(1.5, ce=True), frame(1.6, is_cnp=True)])
    times = capture_times(tmp_path, "sender-dci", r)
    assert times["signal"] == {"ce": [1.0], "cnp": [1.9]} and times["crossing"] == [2.0, 2.5]
    assert all(v == ([1.5], [1.6]) for v in times["receivers"].values())   # the unmarked frame is not CE
    delay, parts = feedback(times, "ecn")
    assert delay == pytest.approx(1.0) and parts["to_receiver_s"] == pytest.approx(0.5)
    assert parts["receiver_turnaround_s"] == pytest.approx(0.1) and parts["to_sender_s"] == pytest.approx(0.4)
    delay, parts = feedback(times, "fast-cnp")
    assert delay == pytest.approx(0.1) and parts is None


def test_at_the_receivers_tor_the_first_signal_is_the_crossing_senders_own_cnp(tmp_path):
    """Every receiver port of the ToR is a congestion point: its first CNP out may be for the other sender.
    The feedback pairs the crossing sender's own first CNP out with its arrival (a sweep trial at 30 km read
    245.7 us real for a 151-us loop when it paired the other sender's)."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.utils import wrpcap

    from testbed.roce.layers import cnp
    from testbed.validate.longhaul_captures import capture_times, feedback

    def to(dst, t):
        f = Ether() / IP(src="10.1.0.1", dst=dst) / UDP(sport=49152, dport=4791) / cnp(7)
        f.time = t
        return f

    r = S.roles(_long_haul_graph())
    s0, s1 = r.senders
    wrpcap(str(tmp_path / f"cnp-{s0}.pcap"), [to("10.0.0.1", 2.40), to("10.0.0.1", 2.50)])
    wrpcap(str(tmp_path / f"cnp-{s1}.pcap"), [to("10.0.0.2", 2.20)])
    wrpcap(str(tmp_path / "signal-ce.pcap"), [])
    wrpcap(str(tmp_path / "signal-cnp.pcap"), [to("10.0.0.2", 1.90), to("10.0.0.1", 2.10), to("10.0.0.1", 2.20)])
    for h in r.receivers:
        wrpcap(str(tmp_path / f"receiver-{h}.pcap"), [])
    times = capture_times(tmp_path, "receiver-tor", r)
    assert times["signal"]["cnp"] == [2.10, 2.20] and times["crossing"] == [2.40, 2.50]
    assert feedback(times, "fast-cnp")[0] == pytest.approx(0.30)          # not 0.50 from the other's 1.90


def test_validate_reads_a_stored_trials_feedback_again_from_its_captures(tmp_path):
    """A results folder taken before the pairing fix: its row says 0.2457 ms real for the receiver-tor trial;
    its captures say 0.15 ms (0.30 s emulated at scale 2000). ``load`` takes the captures' reading, keeps the
    old value beside it and says so; a row whose trial folder is gone keeps its value."""
    import json

    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.utils import wrpcap

    from testbed.roce.layers import cnp
    from testbed.validate.longhaul import load

    def to(dst, t):
        f = Ether() / IP(src="10.1.0.1", dst=dst) / UDP(sport=49152, dport=4791) / cnp(7)
        f.time = t
        return f

    r = S.roles(_long_haul_graph())
    trial = tmp_path / "30km" / "receiver-tor-fast-cnp-0"
    trial.mkdir(parents=True)
    wrpcap(str(trial / f"cnp-{r.senders[0]}.pcap"), [to("10.0.0.1", 2.40)])
    wrpcap(str(trial / f"cnp-{r.senders[1]}.pcap"), [to("10.0.0.2", 2.20)])
    wrpcap(str(trial / "signal-cnp.pcap"), [to("10.0.0.2", 1.90), to("10.0.0.1", 2.10)])
    for name in ["signal-ce"] + [f"receiver-{h}" for h in r.receivers]:
        wrpcap(str(trial / f"{name}.pcap"), [])
    row = {"case": "receiver-tor", "distance_km": 30.0, "mode": "fast-cnp", "repetition": 0,
           "feedback_delay_ms": 0.2457, "throughput_mbps": 1600.0, "valid": False}
    gone = {**row, "repetition": 1}
    (tmp_path / "config.json").write_text(json.dumps({"config": {"scale": 2000.0, "incast": 2,
                                                                 "spec": "/elsewhere/long-haul.yaml"}}))
    (tmp_path / "rows.json").write_text(json.dumps([row, gone]))
    doc = load(tmp_path)
    fresh, kept = doc["rows"]
    assert fresh["feedback_delay_ms"] == pytest.approx(0.15) and fresh["feedback_delay_ms_stored"] == 0.2457
    assert kept["feedback_delay_ms"] == 0.2457 and "feedback_delay_ms_stored" not in kept
    assert doc["reread"] == ["receiver-tor 30 km fast-cnp #0: 0.2457 -> 0.15 ms"]
