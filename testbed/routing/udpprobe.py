"""Constant-rate UDP with sequence numbers, to measure how long a failover loses packets.

Runs inside host namespaces (``rep.popen(host, argv)``)::

    python -m testbed.routing.udpprobe recv --port 5001 --out /tmp/r.json --duration 3
    python -m testbed.routing.udpprobe send --dst 10.0.3.2 --port 5001 --sport 40001 \\
        --interval 0.001 --duration 2 --out /tmp/s.json      (--dst a,b,c: one packet to each per interval)

    payload: seq (u64) | send time (f64, wall clock) | padding

The sender keeps a schedule (packet i leaves at start + i * interval; when the CPU is late it catches up),
so loss counts are exact even on a busy machine and ``lost * interval`` is the outage. The sender records
when each packet actually left; :func:`outage` attributes lost packets to time windows (cut, restore).
Everything but the two socket loops is pure and unit-tested.
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import time
from dataclasses import dataclass

from testbed.poll import sleep_until

HEADER = struct.Struct("!Qd")


def pack(seq: int, now: float, size: int) -> bytes:
    body = HEADER.pack(seq, now)
    return body + b"\0" * max(0, size - len(body))


def unpack(data: bytes) -> tuple[int, float] | None:
    if len(data) < HEADER.size:
        return None
    return HEADER.unpack_from(data)


@dataclass(frozen=True)
class Outage:
    sent: int
    received: int
    lost: int
    lost_in_window: int
    longest_gap: int  # longest run of consecutive lost sequence numbers
    interval: float

    @property
    def outage_ms(self) -> float:
        """Lost packets in the window times the sending interval (milliseconds)."""
        return self.lost_in_window * self.interval * 1e3

    def as_dict(self) -> dict:
        return {"sent": self.sent, "received": self.received, "lost": self.lost,
                "lost_in_window": self.lost_in_window, "longest_gap": self.longest_gap,
                "interval_s": self.interval, "outage_ms": self.outage_ms}


def outage(send_times: list[float], received: set | list, interval: float,
           window: tuple[float, float] | None = None) -> Outage:
    """Loss of one stream.

    Args:
        send_times: actual send time of packet ``i`` (from the sender's record).
        received: sequence numbers that arrived (duplicates ignored).
        interval: nominal sending interval, seconds.
        window: ``(t0, t1)``: count only lost packets sent in ``[t0, t1)`` (None: all).
    """
    got = set(received)
    lost_seqs = [i for i in range(len(send_times)) if i not in got]
    in_window = [i for i in lost_seqs if window is None or window[0] <= send_times[i] < window[1]]
    longest = run = 0
    prev = None
    for i in lost_seqs:
        run = run + 1 if prev is not None and i == prev + 1 else 1
        longest = max(longest, run)
        prev = i
    return Outage(sent=len(send_times), received=len(got & set(range(len(send_times)))), lost=len(lost_seqs),
                  lost_in_window=len(in_window), longest_gap=longest, interval=interval)


def send(dsts: list[str], port: int, sport: int, interval: float, duration: float, size: int) -> list[float]:
    """Send one packet to each of ``dsts`` every ``interval`` (spread evenly within the round) for
    ``duration``; packet ``seq`` of every destination belongs to round ``seq``.

    Returns:
        the actual start time of each round (wall clock), i.e. the send time of sequence number i.
    """
    count = int(round(duration / interval))
    times = []
    step = interval / len(dsts)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("0.0.0.0", sport))
        start = time.perf_counter()
        wall0 = time.time() - start
        for seq in range(count):
            for j, dst in enumerate(dsts):
                sleep_until(start + seq * interval + j * step, time.perf_counter)  # pacing a sender
                now = time.perf_counter() + wall0
                if j == 0:
                    times.append(now)
                try:
                    s.sendto(pack(seq, now, size), (dst, port))
                except OSError:
                    pass  # no route yet / ENOBUFS: the packet is lost, which is what we measure
    return times


def receive(port: int, duration: float, idle: float = 1.0, arrivals: list | None = None) -> list[int]:
    """Collect sequence numbers for ``duration`` seconds (or until ``idle`` seconds without packets).

    Args:
        arrivals: if given, receives ``[source ip, seq, arrival time]`` per packet (several senders).
    """
    seqs = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        s.bind(("0.0.0.0", port))
        s.settimeout(0.05)
        end = time.monotonic() + duration
        last = time.monotonic()
        while time.monotonic() < end:
            try:
                data, addr = s.recvfrom(65535)
            except socket.timeout:
                if seqs and time.monotonic() - last > idle:
                    break
                continue
            hdr = unpack(data)
            if hdr is not None:
                seqs.append(hdr[0])
                last = time.monotonic()
                if arrivals is not None:
                    arrivals.append([addr[0], hdr[0], time.time()])
    return seqs


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.routing.udpprobe", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("send")
    s.add_argument("--dst", required=True, help="destination address, or several, comma-separated")
    s.add_argument("--port", type=int, default=5001)
    s.add_argument("--sport", type=int, default=40000)
    s.add_argument("--interval", type=float, default=0.001)
    s.add_argument("--duration", type=float, default=2.0)
    s.add_argument("--size", type=int, default=200)
    s.add_argument("--out", required=True)
    r = sub.add_parser("recv")
    r.add_argument("--port", type=int, default=5001)
    r.add_argument("--duration", type=float, default=5.0)
    r.add_argument("--idle", type=float, default=1.0)
    r.add_argument("--out", required=True)
    r.add_argument("--arrivals", action="store_true", help="also record source, seq and time of each packet")
    args = parser.parse_args(argv)
    if args.cmd == "send":
        dsts = [d for d in args.dst.split(",") if d]
        times = send(dsts, args.port, args.sport, args.interval, args.duration, args.size)
        doc = {"interval": args.interval, "sport": args.sport, "dsts": dsts, "send_times": times}
    else:
        arrivals = [] if args.arrivals else None
        doc = {"seqs": receive(args.port, args.duration, args.idle, arrivals)}
        if arrivals is not None:
            doc["arrivals"] = arrivals
    with open(args.out, "w") as fh:
        json.dump(doc, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
