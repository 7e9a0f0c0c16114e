"""A paced UDP probe: numbered, timestamped datagrams and a receiver that keeps kernel arrival times.

Used by the link benchmark and the integration tests where ping and iperf3 fall short: one-way delay
(sender stamps CLOCK_REALTIME in the payload; the receiver takes the kernel's SO_TIMESTAMPNS, same clock
in every namespace of one machine), inter-arrival gaps, loss by sequence number, and the ECN field of
every received packet (IP_RECVTOS) for CE counting::

    payload = seq (u64) | tx_ns (u64) | padding to --size

    python -m testbed.links.probe recv --port 5201 --ready F --out result.json [--count N] [--idle 1]
    python -m testbed.links.probe send --dst 10.77.0.2 --port 5201 --count N --pps R --size 1472 [--tos 2]

:func:`summarise` turns a receiver's result into loss, delay and gap figures (pure, unit-tested).
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import time
from pathlib import Path

from testbed.poll import sleep_until

HEADER = struct.Struct("!QQ")
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
IP_RECVTOS = getattr(socket, "IP_RECVTOS", 13)
#: IP + UDP header bytes; the Ethernet frame of a probe is size + 28 + 14 bytes.
UDP_IP_OVERHEAD = 28


def send(dst: str, port: int, count: int, pps: float, size: int, tos: int = 0) -> dict:
    """Send ``count`` datagrams of ``size`` payload bytes at ``pps`` (0: as fast as possible)."""
    size = max(size, HEADER.size)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    sock.connect((dst, port))
    pad = bytes(size - HEADER.size)
    pack = HEADER.pack
    clock = time.time_ns
    mono = time.perf_counter
    interval = 1.0 / pps if pps else 0.0
    start = mono()
    sent = errors = 0
    next_t = start
    while sent < count:
        if interval:
            sleep_until(next_t, mono)  # pacing a traffic source
            next_t += interval
        try:
            sock.send(pack(sent, clock()) + pad)
        except OSError:
            errors += 1  # ENOBUFS: local queue full; the datagram is not on the wire
        sent += 1
    return {"sent": sent, "send_errors": errors, "duration_s": mono() - start}


def receive(port: int, ready: str | None, count: int = 0, idle: float = 1.0, timeout: float = 60.0) -> dict:
    """Receive until ``count`` datagrams, ``idle`` seconds of silence after the first, or ``timeout``."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for opt, val in ((getattr(socket, "SO_RCVBUFFORCE", 33), 16 << 20), (SO_TIMESTAMPNS, 1)):
        sock.setsockopt(socket.SOL_SOCKET, opt, val)
    sock.setsockopt(socket.IPPROTO_IP, IP_RECVTOS, 1)
    sock.bind(("0.0.0.0", port))
    if ready:
        Path(ready).write_text("ready\n")
    seqs, tx, rx, ecn = [], [], [], []
    anc = socket.CMSG_SPACE(16) + socket.CMSG_SPACE(4)
    deadline = time.monotonic() + timeout
    sock.settimeout(min(timeout, 5.0))
    while not count or len(seqs) < count:
        try:
            data, ancdata, _flags, _addr = sock.recvmsg(65535, anc)
        except socket.timeout:
            if seqs or time.monotonic() >= deadline:
                break
            continue
        if len(data) < HEADER.size:
            continue
        seq, tx_ns = HEADER.unpack_from(data)
        rx_ns, tos = 0, -1
        for level, kind, value in ancdata:
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                sec, nsec = struct.unpack("qq", value[:16])
                rx_ns = sec * 1_000_000_000 + nsec
            elif level == socket.IPPROTO_IP and kind in (socket.IP_TOS, IP_RECVTOS):
                tos = value[0]
        seqs.append(seq)
        tx.append(tx_ns)
        rx.append(rx_ns or time.time_ns())
        ecn.append(tos & 3 if tos >= 0 else -1)
        if len(seqs) == 1:
            sock.settimeout(idle)
        if time.monotonic() >= deadline:
            break
    return {"received": len(seqs), "seq": seqs, "tx_ns": tx, "rx_ns": rx, "ecn": ecn}


def summarise(result: dict, sent: int | None = None) -> dict:
    """Loss, CE fraction, one-way delays and inter-arrival gaps of a receiver's result.

    Returns:
        {"received", "lost", "loss", "ce", "ce_fraction", "delays_s": [...], "gaps_s": [...]}; gaps are
        between consecutively *numbered* arrivals only, so a loss does not count as a long gap.
    """
    seqs, tx, rx, ecn = result["seq"], result["tx_ns"], result["rx_ns"], result["ecn"]
    n = len(seqs)
    total = sent if sent is not None else (max(seqs) + 1 if seqs else 0)
    lost = max(0, total - len(set(seqs)))
    ce = sum(1 for e in ecn if e == 3)
    delays = [(r - t) / 1e9 for r, t in zip(rx, tx, strict=True)]
    gaps = [(rx[i] - rx[i - 1]) / 1e9 for i in range(1, n) if seqs[i] == seqs[i - 1] + 1]
    return {"received": n, "lost": lost, "loss": lost / total if total else 0.0, "ce": ce,
            "ce_fraction": ce / n if n else 0.0, "delays_s": delays, "gaps_s": gaps}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.links.probe", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    s = sub.add_parser("send")
    s.add_argument("--dst", required=True)
    s.add_argument("--port", type=int, default=5201)
    s.add_argument("--count", type=int, required=True)
    s.add_argument("--pps", type=float, default=0.0, help="packets per second (0: as fast as possible)")
    s.add_argument("--size", type=int, default=1472, help="UDP payload bytes (1472: 1514 B frames)")
    s.add_argument("--tos", type=lambda v: int(v, 0), default=0, help="IP TOS byte (2: ECT(0))")
    r = sub.add_parser("recv")
    r.add_argument("--port", type=int, default=5201)
    r.add_argument("--ready", help="file written once the socket is bound")
    r.add_argument("--out", required=True, help="result JSON file")
    r.add_argument("--count", type=int, default=0)
    r.add_argument("--idle", type=float, default=1.0, help="stop after this much silence")
    r.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args(argv)
    if args.mode == "send":
        doc = send(args.dst, args.port, args.count, args.pps, args.size, args.tos)
        print(json.dumps(doc))
    else:
        doc = receive(args.port, args.ready, args.count, args.idle, args.timeout)
        tmp = Path(args.out + ".tmp")
        tmp.write_text(json.dumps(doc))
        tmp.replace(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
