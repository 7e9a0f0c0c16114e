"""The one UDP probe: its arithmetic, its wire format, and loopback round trips of both ways it is used
(the link bench's count/pps stream, the failover experiments' multi-destination timed stream); no root."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import pytest

from testbed.links import probe
from testbed.poll import poll
from tests.unit.loopback import free_udp


def test_outage_counts_lost_packets_in_the_window():
    times = [i * 0.001 for i in range(100)]
    received = [i for i in range(100) if not 40 <= i < 52] + [3, 3]  # a gap of 12, a duplicate
    o = probe.outage(times, received, 0.001, window=(0.030, 0.060))
    assert (o.sent, o.received, o.lost, o.lost_in_window, o.longest_gap) == (100, 88, 12, 12, 12)
    assert o.outage_ms == pytest.approx(12.0)
    assert probe.outage(times, received, 0.001, window=(0.060, 1.0)).lost_in_window == 0
    scattered = probe.outage(times, [i for i in range(100) if i % 10], 0.001)
    assert scattered.lost == 10 and scattered.longest_gap == 1
    assert probe.outage(times, [], 0.001).lost == 100


def test_a_sender_paused_through_the_break_makes_the_trial_unmeasured():
    """The CI case: a 2 kpps sender paused over a 2.8 ms break (7.7 ms in CI) lost nothing, which is not an outage."""
    steady = [i * 0.0005 for i in range(100)]
    assert probe.unmeasured(steady, (0.0201, 0.0229), 0.0005) is None
    paused = [t for t in steady if not 0.0174 < t < 0.0251]
    why = probe.unmeasured(paused, (0.0201, 0.0229), 0.0005)
    assert "sent nothing" in why and "paused 8.5 ms" in why
    # a round in the break's last interval may meet the repaired table: not enough to measure it
    last_only = [t for t in steady if not 0.0174 < t < 0.0225] + [0.0226]
    assert probe.unmeasured(sorted(last_only), (0.0201, 0.0229), 0.0005) is not None


def test_pack_unpack_and_padding():
    data = probe.pack(7, 1_234_567_890_123, 200)
    assert len(data) == 200 and probe.unpack(data) == (7, 1_234_567_890_123)
    assert data[:8] == (7).to_bytes(8, "big")  # seq first, network order
    assert probe.unpack(b"short") is None
    assert len(probe.pack(1, 2, 4)) == probe.HEADER.size  # never shorter than the header


def _udp_bound(port: int) -> bool:
    """Something listens on UDP ``port`` (read from /proc, so the check cannot steal the port)."""
    with open("/proc/net/udp") as fh:
        return any(line.split()[1].endswith(f":{port:04X}") for line in fh.readlines()[1:])


def test_timed_multi_destination_stream_round_trip():
    port, sport = free_udp(), free_udp()
    got: dict = {}
    rx = threading.Thread(target=lambda: got.update(probe.receive(port, timeout=3.0, idle=0.3)))
    rx.start()
    poll(lambda: _udp_bound(port), 5, interval=0.005, what="the receiver to bind")
    doc = probe.send(["127.0.0.1", "127.0.0.2"], port, 50, pps=500, size=64, sport=sport, record_times=True)
    rx.join(5)
    times = doc["send_times"]
    assert len(times) == 50 and times == sorted(times) and doc["interval"] == pytest.approx(0.002)
    assert times[-1] - times[0] >= 49 * 0.002 * 0.9  # paced, not a burst
    assert doc["sent"] == 100 and doc["sport"] == sport
    # every round reached both destinations (loopback: nothing should be lost), sources recorded
    assert sorted(got["seq"]) == sorted(list(range(50)) * 2)
    assert probe.outage(times, got["seq"], 0.002).lost == 0
    assert set(got["src"]) == {"127.0.0.1"} and got["received"] == 100
    assert all(r >= t for r, t in zip(got["rx_ns"], got["tx_ns"], strict=True))


def test_cli_count_stream_and_summary(tmp_path):
    port = free_udp()
    out, ready = tmp_path / "r.json", tmp_path / "ready"
    recv = subprocess.Popen([sys.executable, "-m", "testbed.links.probe", "recv", "--port", str(port),
                             "--ready", str(ready), "--out", str(out), "--count", "20", "--timeout", "10"])
    try:
        poll(ready.exists, 10, interval=0.01, what="the receiver to bind")
        sent = subprocess.run([sys.executable, "-m", "testbed.links.probe", "send", "--dst", "127.0.0.1", "--port",
                               str(port), "--count", "20", "--pps", "2000", "--size", "100", "--tos", "2"],
                              capture_output=True, text=True, timeout=20, check=True)
        recv.wait(10)
    finally:
        if recv.poll() is None:
            recv.kill()
    doc = json.loads(sent.stdout)
    assert doc["sent"] == 20 and "send_times" not in doc  # times only with --out
    s = probe.summarise(json.loads(out.read_text()), sent=20)
    assert s["lost"] == 0 and len(s["gaps_s"]) == 19 and s["ce"] == 0
    assert set(json.loads(out.read_text())["ecn"]) == {2}  # ECT(0) as sent (IP_RECVTOS)


def test_a_failed_or_hung_probe_is_one_error_naming_it():
    from testbed.errors import EmulationError
    from testbed.links.probe import wait_finished

    bad = subprocess.Popen([sys.executable, "-c", "import sys; sys.stderr.write('no route'); sys.exit(3)"],
                           stderr=subprocess.PIPE)
    with pytest.raises(EmulationError, match=r"sender on h1 failed \(3\): no route"):
        wait_finished(bad, "sender on h1", 10)
    hung = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], stderr=subprocess.PIPE)
    with pytest.raises(EmulationError, match=r"receiver did not finish within 0.2 s"):
        wait_finished(hung, "receiver", 0.2)
    assert hung.wait(5) != 0  # killed, not left running
    ok = subprocess.Popen([sys.executable, "-c", "pass"], stderr=subprocess.PIPE)
    wait_finished(ok, "sender", 10)
