"""The UDP probe's arithmetic and a loopback round trip (no root)."""

from __future__ import annotations

import threading

import pytest

from testbed.poll import poll
from testbed.routing import udpprobe


def test_outage_counts_lost_packets_in_the_window():
    times = [i * 0.001 for i in range(100)]
    received = [i for i in range(100) if not 40 <= i < 52] + [3, 3]  # a gap of 12, a duplicate
    o = udpprobe.outage(times, received, 0.001, window=(0.030, 0.060))
    assert (o.sent, o.received, o.lost, o.lost_in_window, o.longest_gap) == (100, 88, 12, 12, 12)
    assert o.outage_ms == pytest.approx(12.0)
    assert udpprobe.outage(times, received, 0.001, window=(0.060, 1.0)).lost_in_window == 0
    scattered = udpprobe.outage(times, [i for i in range(100) if i % 10], 0.001)
    assert scattered.lost == 10 and scattered.longest_gap == 1
    assert udpprobe.outage(times, [], 0.001).lost == 100


def test_pack_unpack_and_padding():
    data = udpprobe.pack(7, 12.5, 200)
    assert len(data) == 200 and udpprobe.unpack(data) == (7, 12.5)
    assert udpprobe.unpack(b"short") is None


def _udp_bound(port: int) -> bool:
    """Something listens on UDP ``port`` (read from /proc, so the check cannot steal the port)."""
    with open("/proc/net/udp") as fh:
        return any(line.split()[1].endswith(f":{port:04X}") for line in fh.readlines()[1:])


def test_loopback_send_and_receive():
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        sport = s.getsockname()[1]
    got, arrivals = [], []
    rx = threading.Thread(target=lambda: got.extend(udpprobe.receive(port, 3.0, idle=0.3, arrivals=arrivals)))
    rx.start()
    poll(lambda: _udp_bound(port), 5, interval=0.005, what="the receiver to bind")
    times = udpprobe.send(["127.0.0.1"], port, sport, 0.002, 0.1, 64)
    rx.join(5)
    assert len(times) == 50 and times == sorted(times)
    o = udpprobe.outage(times, got, 0.002)
    assert o.received >= 48  # loopback: nothing should be lost
    assert all(a[0] == "127.0.0.1" for a in arrivals) and len(arrivals) == len(got)
