"""The benchmark's arithmetic: pcap reading, delays/gaps against the ideal, RED depth bins; `testbed link`."""

import json
import struct

import pytest

from testbed.cli import main
from testbed.links import fidelity
from testbed.links.model import RedParams
from testbed.links.pcap import probe_arrivals, read_pcap, write_pcap


def _probe_frame(seq: int, tos: int = 0, port: int = 5201, pad: int = 16) -> bytes:
    payload = struct.pack("!QQ", seq, 0) + bytes(pad)
    udp = struct.pack("!HHHH", 40000, port, 8 + len(payload), 0) + payload
    ip = bytes([0x45, tos]) + (20 + len(udp)).to_bytes(2, "big") + bytes(4) + bytes([64, 17]) + bytes(10)
    return bytes(6) + bytes(6) + b"\x08\x00" + ip + udp


@pytest.mark.parametrize("nano", [True, False])
def test_pcap_round_trip_and_probe_arrivals(tmp_path, nano):
    recs = [(1_000_000_123_000, _probe_frame(0)), (1_000_000_456_000, _probe_frame(1, tos=3)),
            (1_000_000_789_000, _probe_frame(1)), (1_000_001_000_000, _probe_frame(2, port=9))]
    write_pcap(tmp_path / "c.pcap", recs, nanosecond=nano)
    back = read_pcap(tmp_path / "c.pcap")
    assert [r[0] for r in back] == [r[0] for r in recs] and back[1][1] == recs[1][1]
    arrivals = probe_arrivals(back, 5201)
    assert sorted(arrivals) == [0, 1]  # other port ignored
    assert arrivals[1] == (1_000_000_456_000, len(recs[1][1]), 3)  # first capture wins, ECN = CE


def test_not_a_pcap(tmp_path):
    (tmp_path / "x").write_bytes(b"hello world, this is not a capture")
    with pytest.raises(ValueError, match="not a pcap"):
        read_pcap(tmp_path / "x")


def test_delay_and_gap_errors_against_ideal():
    sent = {i: (i * 1_000_000, 1514, 0) for i in range(100)}
    got = {i: (i * 1_000_000 + 1_100_000 + (50_000 if i == 7 else 0), 1514, 0) for i in range(100)}
    delays = fidelity.one_way_delays(sent, got)
    errs = fidelity.relative_errors(delays, 0.0011)
    summary = fidelity.error_summary(errs)
    assert summary["p50_error_pct"] == pytest.approx(0.0, abs=1e-6)
    assert summary["max_error_pct"] == pytest.approx(50 / 1100 * 100, rel=1e-3) and summary["samples"] == 100
    gaps = fidelity.backlogged_gaps([0, 5, 10, 1000, 2000, 3000], skip=2)
    assert gaps == pytest.approx([990e-9, 1000e-9, 1000e-9])
    assert fidelity.percentile([1, 2, 3, 4], 50) == 2.5


def test_ideal_link_queues_a_bunched_sender_and_only_departures_off_it_are_errors():
    rate, delay = 100e6, 1e-3
    ser = 1514 * 8 / rate                                           # 121.12 us a frame
    # evenly spaced probes: each one's ideal is the idle link's delay
    even = {i: (i * 1_000_000, 1514, 0) for i in range(5)}
    assert all(v == pytest.approx(delay + ser) for v in fidelity.ideal_link_delays(even, rate, delay).values())
    # a sender held back, then 4 probes 25 us apart (captured out of sequence order too): each waits
    # behind the ones before it, ser - 25 us more than the one before
    bunched = {10: (0, 1514, 0), 12: (50_000, 1514, 0), 11: (25_000, 1514, 0), 13: (75_000, 1514, 0)}
    ideal = fidelity.ideal_link_delays(bunched, rate, delay)
    for k, seq in enumerate((10, 11, 12, 13)):
        assert ideal[seq] == pytest.approx(delay + ser + k * (ser - 25e-6))
    # a link that delivers the ideal departures has no error; one 50 us late departure is that probe's error
    got = {s: (bunched[s][0] + round(ideal[s] * 1e9) + (50_000 if s == 12 else 0), 1514, 0) for s in bunched}
    errs = dict(zip(sorted(got), fidelity.delay_errors(bunched, got, ideal), strict=True))
    assert [errs[s] for s in (10, 11, 13)] == pytest.approx([0.0] * 3, abs=1e-6)
    assert errs[12] == pytest.approx(50e-6 / ideal[12], rel=1e-3)
    # against the idle link's delay the same on-time departures read as up to 26 % off
    assert max(fidelity.relative_errors(fidelity.one_way_delays(bunched, got), delay + ser)) > 0.25


def test_queue_depth_from_queueing_delay():
    ser = 0.0012
    assert fidelity.queue_depth(0.0022, 0.0022, ser) == 0
    assert fidelity.queue_depth(0.0022 + 0.5 * ser, 0.0022, ser) == 1   # head in service, half done
    assert fidelity.queue_depth(0.0022 + 9.7 * ser, 0.0022, ser) == 10


def test_red_bins_compare_observed_with_curve():
    red = RedParams(kmin=10, kmax=20, pmax=0.5, unit="packets")
    depths = [5] * 40 + [15] * 40 + [25] * 40
    marks = [False] * 40 + [True] * 10 + [False] * 30 + [True] * 40
    bins = fidelity.red_bins(depths, marks, red, width=10)
    assert [(b["depth_from"], b["expected"], b["observed"]) for b in bins] == [(0, 0.0, 0.0), (10, 0.25, 0.25),
                                                                                (20, 1.0, 1.0)]
    assert fidelity.red_bins([1], [True], red) == []  # too few samples


def test_link_plan_command_json(capsys):
    assert main(["link", "plan", "--rate", "400G", "--distance", "30km", "--red", "20p,60p,0.2", "--scale",
                 "1000", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["backend"] == "userspace" and doc["emulated_params"]["delay_s"] == pytest.approx(0.15)
    assert doc["commands"][0][1:3] == ["-m", "testbed.links.delayline"]
    assert main(["link", "plan", "--rate", "100G", "--scale", "100", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["commands"][0][:3] == ["tc", "qdisc", "replace"]


def test_link_plan_bad_value_exits_2(capsys):
    assert main(["link", "plan", "--delay=-5ms"]) == 2
    assert "link.delay" in capsys.readouterr().err
    assert main(["link", "plan", "--red", "1,2"]) == 2


def test_link_stats_rejects_other_json(tmp_path, capsys):
    (tmp_path / "s.json").write_text("{}")
    assert main(["link", "stats", str(tmp_path / "s.json")]) == 2
