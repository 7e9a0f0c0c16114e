"""The backlog source of the gap checks (testbed/bench/gap_source.py), shared by ``testbed bench link`` and
``testbed validate``: the argv it builds, what it reads back, and that both commands ask it for each row's
rate (no root: the wire, the capture and the processes are fakes)."""

from __future__ import annotations

import contextlib
import json
import subprocess
from pathlib import Path

import pytest

from testbed.bench import gap_source as G
from testbed.bench import link as bench
from testbed.errors import EmulationError
from testbed.validate import replica
from testbed.validate import rows as R

FRAME = 1514


def _flag(argv, name):
    return argv[list(argv).index(name) + 1]


def test_gen_offers_1_2x_the_rate_of_full_frames_in_groups_of_32():
    s = G.gap_source(Path("/bin/linkcore"), 200e6, 2.0, if_a="vA", ip_b="10.77.0.2")
    assert s.name == "linkcore-gen" and s.port == 9 and s.argv[:2] == ("/bin/linkcore", "gen")
    assert _flag(s.argv, "--a") == "vA"
    assert float(_flag(s.argv, "--pps")) * FRAME * 8 == pytest.approx(1.2 * 200e6)
    assert (_flag(s.argv, "--size"), _flag(s.argv, "--burst"), float(_flag(s.argv, "--seconds"))) == ("1514", "32", 2.0)
    slow = G.gap_source(Path("/bin/linkcore"), 10e6, 2.0, if_a="vA", ip_b="10.77.0.2")
    assert float(_flag(slow.argv, "--pps")) == pytest.approx(float(_flag(s.argv, "--pps")) / 20)


def test_without_the_compiled_core_iperf3_fills_the_same_frames_on_a_port_of_its_own():
    s = G.gap_source(None, 50e6, 1.0, if_a="vA", ip_b="10.77.0.2")
    assert s.name == "iperf3" and s.argv[:3] == ("iperf3", "-c", "10.77.0.2") and "-u" in s.argv and "-J" in s.argv
    assert int(_flag(s.argv, "-b")) == 60_000_000 and int(_flag(s.argv, "-l")) + 42 == FRAME
    assert s.port == int(_flag(s.argv, "-p")) != bench.IPERF_PORT   # not the bench's shared server


@pytest.mark.parametrize("rate, seconds", [(0.0, 1.0), (10e6, 0.0), (-1.0, 1.0)])
def test_a_source_that_would_offer_nothing_is_refused(rate, seconds):
    with pytest.raises(ValueError, match="positive"):
        G.gap_source(Path("/bin/linkcore"), rate, seconds, if_a="vA", ip_b="10.77.0.2")


def test_what_the_source_sent_is_read_from_its_own_report():
    gen = G.gap_source(Path("/x"), 10e6, 1.0, if_a="a", ip_b="b")
    ip3 = G.gap_source(None, 10e6, 1.0, if_a="a", ip_b="b")
    assert G.sent_by(gen, '{"sent": 990, "errors": 0, "seconds": 0.999}') == (990, 0.999)
    assert G.sent_by(ip3, json.dumps({"end": {"sum": {"packets": 1000, "seconds": 1.0}}})) == (1000, 1.0)
    b = G.Backlog("linkcore-gen", 1000, 0.5, [], Path("x"))
    assert b.offered_bps(FRAME) == pytest.approx(1000 * FRAME * 8 / 0.5)
    assert G.Backlog("iperf3", 0, 0.0, [], Path("x")).offered_bps() == 0.0


def test_the_frame_ledger_counts_every_drop_of_the_line():
    led = G.frame_ledger(120, {"rx_packets": 120, "tx_packets": 100, "drop_tail": 15, "drop_red": 3,
                               "drop_loss": 2}, 99)
    assert led == {"offered": 120, "line_rx": 120, "line_dropped": 20, "line_tx": 100, "captured": 99}


class _Wire:
    """Records what the commands do to the link and which processes they start in which host."""

    if_a, ip_b, prefix = "vA", "10.77.0.2", "v"

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.restarts, self.captures, self.spawned = [], [], []
        self.run = self

    def spawn(self, argv, **_kw):
        self.spawned.append(argv)
        raise AssertionError(f"no process expected, got {argv}")

    def exec_argv(self, side, argv):
        return ["ns", side, *argv]

    @contextlib.contextmanager
    def capture(self, side, port, name):
        self.captures.append((side, port, name))
        yield self.workdir / f"{name}.pcap"

    def restart(self, params, **kw):
        self.restarts.append((params, kw))

    def stop(self):
        return {"directions": {"a>b": {"rx_packets": 1200, "tx_packets": 1000, "drop_tail": 200}}}


@pytest.fixture
def gen(monkeypatch):
    """The compiled core "built"; its runs recorded; every capture holds 1000 evenly spaced full frames
    (and one short frame the rows must not count)."""
    ran = []

    def run(argv, **kw):
        if "ss" in argv:   # wait_tcp_quiet: no connection left open on the wire
            return subprocess.CompletedProcess(argv, 0, "", "")
        ran.append(argv)
        assert kw.get("check") and kw.get("timeout")
        seconds = float(_flag(argv, "--seconds"))   # gen keeps its pace
        sent = round(float(_flag(argv, "--pps")) * seconds)
        return subprocess.CompletedProcess(argv, 0, json.dumps({"sent": sent, "errors": 0, "seconds": seconds}), "")

    def read_pcap(path):
        rate = float(path.name.split("gaps")[1].split("M")[0]) * 1e6
        ns = FRAME * 8 / rate * 1e9
        return [(int(i * ns), b"", FRAME) for i in range(1000)] + [(int(1000 * ns), b"", 60)]

    monkeypatch.setattr(G, "gen_binary", lambda: Path("/cache/linkcore"))
    monkeypatch.setattr(G.subprocess, "run", run)
    monkeypatch.setattr("testbed.links.pcap.read_pcap", read_pcap)
    return ran


def test_validate_asks_the_shared_source_for_each_rows_rate_and_runs_no_iperf3(gen, monkeypatch, tmp_path):
    monkeypatch.setattr(bench, "_delay_case", lambda wire, d, plan, core: {"delay_ms": d * 1e3})
    monkeypatch.setattr(bench, "_red_case", lambda wire, plan, core, seed: {"link_seed": seed})
    wire = _Wire(tmp_path)
    rates = (10e6, 50e6, 200e6)
    out = replica.run_link(wire, False, rates, "c", gap_seeds=(11, 12, 13), red_seed=14)
    assert not wire.spawned and all("iperf3" not in a for a in gen)
    seconds = bench.cases(False)["gap_seconds"]
    for argv, rate, (params, kw), cap, seed in zip(gen, rates, wire.restarts, wire.captures, (11, 12, 13), strict=True):
        assert argv[:4] == ["ns", "a", "/cache/linkcore", "gen"]
        assert float(_flag(argv, "--pps")) * FRAME * 8 == pytest.approx(1.2 * rate)
        assert float(_flag(argv, "--seconds")) == seconds
        assert params.rate_bps == rate and kw["seed"] == seed and cap[:2] == ("b", 9)
    g = out["gap_captures"][2]
    assert g["source"] == "linkcore-gen" and len(g["arrivals_ns"]) == 1000
    assert g["offered_bps"] == pytest.approx(1.2 * 200e6, rel=1e-4) and g["frames"]["line_dropped"] == 200
    # the rows read the capture: delivered at the rate, ideal gaps, the offered rate in the note
    s = R.gap_case_summary(g["rate_bps"], g["arrivals_ns"], out["frame"], offered_bps=g["offered_bps"],
                           source=g["source"])
    delivered, gaps = R.link_rows([], [s])
    assert delivered.expected == pytest.approx(200) and delivered.passed and "linkcore-gen" in delivered.note
    assert gaps.passed and gaps.replica < 0.001


def test_bench_and_validate_run_the_same_source_for_a_rate(gen, monkeypatch, tmp_path):
    case = bench._gap_case(_Wire(tmp_path), 100e6, {"gap_seconds": 1.0}, "c")
    monkeypatch.setattr(bench, "cases", lambda quick: {"delays_s": (), "gap_seconds": 1.0})
    monkeypatch.setattr(bench, "_red_case", lambda wire, plan, core, seed: {})
    out = replica.run_link(_Wire(tmp_path), True, (100e6,), "c", gap_seeds=(1,), red_seed=2)
    assert len(gen) == 2 and gen[0] == gen[1]
    assert case["source"] == out["gap_captures"][0]["source"] == "linkcore-gen"
    assert case["frames"] == out["gap_captures"][0]["frames"]


def test_the_gap_case_waits_for_an_earlier_connection_to_close(monkeypatch, tmp_path):
    """An earlier case's TCP teardown must finish before the line is restarted and counts: the last FIN/ACK
    would be a frame offered by nobody. Open twice, then closed: the case waits; never closed: it says so."""
    answers = iter(["ESTAB 0 0 10.0.0.1:5301 10.0.0.2:40000\n", "LAST-ACK 0 1 10.0.0.2:5301 10.0.0.1:40000\n"])

    def ss(argv, **kw):
        assert "ss" in argv and "last-ack" in argv and "time-wait" not in argv
        return subprocess.CompletedProcess(argv, 0, next(answers, ""), "")

    monkeypatch.setattr(G.subprocess, "run", ss)
    G.wait_tcp_quiet(_Wire(tmp_path), timeout=5)
    assert next(answers, None) is None                      # asked until nothing was open
    monkeypatch.setattr(G.subprocess, "run", lambda argv, **kw: subprocess.CompletedProcess(argv, 0, "ESTAB x", ""))
    with pytest.raises(EmulationError, match="still open.*ESTAB"):
        G.wait_tcp_quiet(_Wire(tmp_path), timeout=0.2)


def test_the_iperf3_fallback_starts_its_own_one_client_server_in_b(monkeypatch, tmp_path):
    monkeypatch.setattr(G, "gen_binary", lambda: None)
    monkeypatch.setattr(G, "listening", lambda wire, port: True)
    monkeypatch.setattr(G.subprocess, "run", lambda argv, **kw: subprocess.CompletedProcess(
        argv, 0, json.dumps({"end": {"sum": {"packets": 500, "seconds": 1.0}}}), ""))
    monkeypatch.setattr("testbed.links.pcap.read_pcap", lambda path: [])

    class Server:
        def poll(self):
            return 0

    class Wire(_Wire):
        def spawn(self, argv, **_kw):
            self.spawned.append(argv)
            return Server()

    wire = Wire(tmp_path)
    b = G.offer_backlog(wire, 20e6, 1.0, "gaps20M")
    assert wire.spawned == [["ns", "b", "iperf3", "-s", "-1", "-p", str(G.GAP_IPERF_PORT)]]
    assert wire.captures == [("b", G.GAP_IPERF_PORT, "gaps20M")] and (b.source, b.offered) == ("iperf3", 500)


def test_delivered_rate_reference_is_min_of_rate_and_offered():
    ser_ns = FRAME * 8 / 200e6 * 1e9
    slow = [int(i * ser_ns * 200 / 150) for i in range(2000)]     # the link delivered 150 of 200 Mb/s
    short = R.link_rows([], [R.gap_case_summary(200e6, slow, FRAME, offered_bps=150e6, source="linkcore-gen")])[0]
    assert short.expected == pytest.approx(150) and short.passed and "below the rate" in short.note
    given = R.link_rows([], [R.gap_case_summary(200e6, slow, FRAME, offered_bps=240e6)])[0]
    assert given.expected == pytest.approx(200) and not given.passed and "below" not in given.note
    unknown = R.link_rows([], [R.gap_case_summary(200e6, slow, FRAME)])[0]   # not recorded: the rate
    assert unknown.expected == pytest.approx(200) and not unknown.passed
