"""The one UDP probe: paced, numbered, timestamped datagrams and a receiver that keeps kernel arrival times.

Used wherever ping and iperf3 fall short -- the link benchmark and tests (one-way delay, inter-arrival
gaps, loss by sequence number, the ECN field of every packet for CE counting) and the failover
experiments (a constant-rate stream whose lost sequence numbers, times the interval, are the outage)::

    payload = seq (u64) | tx_ns (u64, CLOCK_REALTIME) | padding to --size

    python -m testbed.links.probe recv --port 5201 --out r.json [--ready F] [--count N] [--idle 1]
                                       [--timeout 60]
    python -m testbed.links.probe send --dst 10.77.0.2[,10.77.0.3...] --port 5201
                                       (--count N | --duration S) (--pps R | --interval S)
                                       [--size 1472] [--tos 2] [--sport P] [--out s.json]

The sender keeps a schedule (round i leaves at start + i x interval, one datagram per destination spread
evenly within the round; when the CPU is late it catches up), so loss counts are exact on a busy machine.
With ``--out`` it records when each round actually left (``send_times``), which :func:`outage` uses to
attribute lost packets to time windows (cut, restore). The receiver takes the kernel's SO_TIMESTAMPNS
(same clock in every namespace of one machine), the TOS byte (IP_RECVTOS) and the source address of
every datagram. :func:`summarise` and :func:`outage` are pure and unit-tested.
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from testbed.errors import EmulationError
from testbed.poll import sleep_until

HEADER = struct.Struct("!QQ")
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
IP_RECVTOS = getattr(socket, "IP_RECVTOS", 13)
#: IP + UDP header bytes; the Ethernet frame of a probe is size + 28 + 14 bytes.
UDP_IP_OVERHEAD = 28


def pack(seq: int, tx_ns: int, size: int) -> bytes:
    body = HEADER.pack(seq, tx_ns)
    return body + bytes(max(0, size - len(body)))


def unpack(data: bytes) -> tuple[int, int] | None:
    """``(seq, tx_ns)`` of a probe datagram, None for anything shorter than the header."""
    if len(data) < HEADER.size:
        return None
    return HEADER.unpack_from(data)


def send(dsts, port: int, count: int, pps: float = 0.0, size: int = 1472, tos: int = 0, sport: int = 0,
         record_times: bool = False) -> dict:
    """Send ``count`` rounds of one datagram of ``size`` payload bytes to each of ``dsts`` at ``pps``
    rounds per second (0: as fast as possible); sequence number ``i`` is round ``i`` for every destination.

    Returns:
        ``{"sent", "send_errors", "duration_s", "interval", "dsts", "sport"}`` plus ``send_times`` (wall
        clock of each round, seconds) when ``record_times``.
    """
    dsts = [dsts] if isinstance(dsts, str) else list(dsts)
    size = max(size, HEADER.size)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    if sport:
        sock.bind(("0.0.0.0", sport))
    one = len(dsts) == 1
    if one:
        sock.connect((dsts[0], port))
    pad = bytes(size - HEADER.size)
    hdr = HEADER.pack
    clock = time.time_ns
    mono = time.perf_counter
    interval = 1.0 / pps if pps else 0.0
    step = interval / len(dsts)
    times: list[float] = []
    start = mono()
    sent = errors = 0
    try:
        for seq in range(count):
            for j, dst in enumerate(dsts):
                if interval:
                    sleep_until(start + seq * interval + j * step, mono)  # pacing a traffic source
                now = clock()
                if record_times and j == 0:
                    times.append(now / 1e9)
                try:
                    if one:
                        sock.send(hdr(seq, now) + pad)
                    else:
                        sock.sendto(hdr(seq, now) + pad, (dst, port))
                except OSError:
                    errors += 1  # ENOBUFS / no route yet: the datagram is not on the wire
                sent += 1
    finally:
        sock.close()
    doc = {"sent": sent, "send_errors": errors, "duration_s": mono() - start, "interval": interval,
           "dsts": dsts, "sport": sport}
    if record_times:
        doc["send_times"] = times
    return doc


def receive(port: int, ready: str | None = None, count: int = 0, idle: float = 1.0, timeout: float = 60.0) -> dict:
    """Receive until ``count`` datagrams, ``idle`` seconds of silence after the first, or ``timeout``.

    Returns:
        ``{"received", "seq", "tx_ns", "rx_ns", "ecn", "src"}``, one entry per datagram in arrival order.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for opt, val in ((getattr(socket, "SO_RCVBUFFORCE", 33), 16 << 20), (SO_TIMESTAMPNS, 1)):
        try:
            sock.setsockopt(socket.SOL_SOCKET, opt, val)
        except PermissionError:  # SO_RCVBUFFORCE needs CAP_NET_ADMIN; the plain buffer then
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, val)
    sock.setsockopt(socket.IPPROTO_IP, IP_RECVTOS, 1)
    sock.bind(("0.0.0.0", port))
    if ready:
        Path(ready).write_text("ready\n")
    seqs, tx, rx, ecn, src = [], [], [], [], []
    anc = socket.CMSG_SPACE(16) + socket.CMSG_SPACE(4)
    deadline = time.monotonic() + timeout
    sock.settimeout(min(timeout, 0.5))
    try:
        while not count or len(seqs) < count:
            try:
                data, ancdata, _flags, addr = sock.recvmsg(65535, anc)
            except socket.timeout:
                if seqs or time.monotonic() >= deadline:
                    break
                continue
            hdr = unpack(data)
            if hdr is None:
                continue
            rx_ns, tos = 0, -1
            for level, kind, value in ancdata:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                    sec, nsec = struct.unpack("qq", value[:16])
                    rx_ns = sec * 1_000_000_000 + nsec
                elif level == socket.IPPROTO_IP and kind in (socket.IP_TOS, IP_RECVTOS):
                    tos = value[0]
            seqs.append(hdr[0])
            tx.append(hdr[1])
            rx.append(rx_ns or time.time_ns())
            ecn.append(tos & 3 if tos >= 0 else -1)
            src.append(addr[0])
            if len(seqs) == 1:
                sock.settimeout(idle)
            if time.monotonic() >= deadline:
                break
    finally:
        sock.close()
    return {"received": len(seqs), "seq": seqs, "tx_ns": tx, "rx_ns": rx, "ecn": ecn, "src": src}


# ------------------------------------------------------------------------------------------ analysis
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


@dataclass(frozen=True)
class Outage:
    """Loss of one constant-rate stream, optionally counted in a time window only."""

    sent: int
    received: int
    lost: int
    lost_in_window: int
    longest_gap: int  # longest run of consecutive lost sequence numbers
    interval: float
    window_run: tuple = ()  # (first, last) sequence number of the longest such run inside the window

    @property
    def outage_ms(self) -> float:
        """Lost packets in the window times the sending interval (milliseconds)."""
        return self.lost_in_window * self.interval * 1e3

    def as_dict(self) -> dict:
        return {"sent": self.sent, "received": self.received, "lost": self.lost,
                "lost_in_window": self.lost_in_window, "longest_gap": self.longest_gap,
                "interval_s": self.interval, "outage_ms": self.outage_ms}


def wait_finished(proc, what: str, timeout: float) -> None:
    """Wait for a probe process (sender or receiver, started with ``stderr=PIPE``); kill it after
    ``timeout`` s. Raises EmulationError naming ``what`` when it hung or failed, with its last words."""
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise EmulationError(f"{what} did not finish within {timeout:g} s") from None
    if proc.returncode != 0:
        err = proc.stderr.read().decode(errors="replace")[-300:] if proc.stderr else ""
        raise EmulationError(f"{what} failed ({proc.returncode}): {err}")


def wait_bound(receivers: dict, timeout: float = 30.0) -> None:
    """Wait until every receiver has bound its socket: ``{ready_file: (proc, what)}``, each started with
    ``recv --ready ready_file``. Probes sent before are lost at the destination, so a sender starts only
    after this. A receiver that exits first raises with its last words (:func:`wait_finished`)."""
    from testbed.poll import poll

    poll(lambda: all(f.exists() or p.poll() is not None for f, (p, _) in receivers.items()), timeout=timeout,
         interval=0.01, what=f"{', '.join(w for _, w in receivers.values())} to bind")
    for f, (p, what) in receivers.items():
        if not f.exists():
            wait_finished(p, what, 1)


def outage(send_times: list[float], received, interval: float, window: tuple[float, float] | None = None) -> Outage:
    """Loss of one stream.

    Args:
        send_times: actual send time of round ``i`` (the sender's ``send_times``).
        received: sequence numbers that arrived (duplicates ignored).
        interval: nominal sending interval, seconds.
        window: ``(t0, t1)``: count only lost packets sent in ``[t0, t1)`` (None: all).
    """
    got = set(received)
    lost_seqs = [i for i in range(len(send_times)) if i not in got]
    in_window = [i for i in lost_seqs if window is None or window[0] <= send_times[i] < window[1]]
    return Outage(sent=len(send_times), received=len(got & set(range(len(send_times)))), lost=len(lost_seqs),
                  lost_in_window=len(in_window), longest_gap=_run_length(_longest_run(lost_seqs)), interval=interval,
                  window_run=_longest_run(in_window))


def _longest_run(seqs: list[int]) -> tuple:
    """(first, last) of the longest run of consecutive numbers in sorted ``seqs`` (the first on a tie); ()."""
    best: tuple = ()
    start = None
    for k, i in enumerate(seqs):
        if k == 0 or i != seqs[k - 1] + 1:
            start = i
        if not best or i - start > best[1] - best[0]:
            best = (start, i)
    return best


def _run_length(run: tuple) -> int:
    return run[1] - run[0] + 1 if run else 0


def sent_into(send_times: list[float], broken: tuple[float, float], interval: float) -> int:
    """How many rounds were sent into ``broken`` = ``(t0, t1)`` early enough to meet the broken data plane:
    in ``[t0, t1 - interval)`` (a round sent in the last interval may meet the repaired table) (pure)."""
    t0, t1 = broken
    return sum(1 for t in send_times if t0 <= t < t1 - interval)


def unmeasured(send_times: list[float], broken: tuple[float, float], interval: float) -> str | None:
    """Why a trial cannot measure an outage, or None when it can (pure).

    A stream measures a data-plane break only if it sent into it: on a loaded machine the sender can be
    descheduled for longer than a short break (the BMv2 driver repairs in a few ms), and then nothing is
    lost because nothing was sent, which reads as a 0 ms outage. ``broken`` is ``(t0, t1)``, wall clock:
    from when the port was known down to when the repair was written. A round sent in its last interval may
    still meet the repaired table, so it must have sent at least once in ``[t0, t1 - interval)``.
    """
    t0, t1 = broken
    if sent_into(send_times, broken, interval):
        return None
    before = max((t for t in send_times if t < t0), default=None)
    after = min((t for t in send_times if t >= t0), default=None)
    gap = "" if before is None or after is None else f" (the sender paused {(after - before) * 1e3:.1f} ms)"
    return (f"the stream sent nothing while the data plane was broken ({(t1 - t0) * 1e3:.1f} ms){gap}: "
            "a 0 ms outage here would be the machine's scheduling, not the repair")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.links.probe", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    s = sub.add_parser("send")
    s.add_argument("--dst", required=True, help="destination address, or several, comma-separated")
    s.add_argument("--port", type=int, default=5201)
    n = s.add_mutually_exclusive_group(required=True)
    n.add_argument("--count", type=int, help="rounds to send")
    n.add_argument("--duration", type=float, help="seconds to send (count = duration x rate)")
    r = s.add_mutually_exclusive_group()
    r.add_argument("--pps", type=float, default=0.0, help="rounds per second (0: as fast as possible)")
    r.add_argument("--interval", type=float, help="seconds between rounds (1 / pps)")
    s.add_argument("--size", type=int, default=1472, help="UDP payload bytes (1472: 1514 B frames)")
    s.add_argument("--tos", type=lambda v: int(v, 0), default=0, help="IP TOS byte (2: ECT(0))")
    s.add_argument("--sport", type=int, default=0, help="source port (0: any)")
    s.add_argument("--out", help="also write the record, with each round's send time, to this file")
    rv = sub.add_parser("recv")
    rv.add_argument("--port", type=int, default=5201)
    rv.add_argument("--ready", help="file written once the socket is bound")
    rv.add_argument("--out", required=True, help="result JSON file")
    rv.add_argument("--count", type=int, default=0)
    rv.add_argument("--idle", type=float, default=1.0, help="stop after this much silence")
    rv.add_argument("--timeout", type=float, default=60.0, help="stop after this many seconds in any case")
    args = parser.parse_args(argv)
    if args.mode == "send":
        pps = 1.0 / args.interval if args.interval else args.pps
        if args.duration is not None and not pps:
            parser.error("--duration needs a rate (--pps or --interval)")
        count = args.count if args.count is not None else int(round(args.duration * pps))
        doc = send([d for d in args.dst.split(",") if d], args.port, count, pps, args.size, args.tos, args.sport,
                   record_times=bool(args.out))
        if args.out:
            Path(args.out).write_text(json.dumps(doc))
        print(json.dumps({k: v for k, v in doc.items() if k != "send_times"}))
    else:
        doc = receive(args.port, args.ready, args.count, args.idle, args.timeout)
        tmp = Path(args.out + ".tmp")
        tmp.write_text(json.dumps(doc))
        tmp.replace(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
