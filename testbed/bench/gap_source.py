"""The frame source of the backlogged-link gap checks: one way, shared by ``testbed bench link`` (its gap
cases) and ``testbed validate`` (its delivered-rate and gap-CCDF rows).

    ns A                                   delay line (rate R, queue limit)              ns B
    linkcore gen --burst 32  --1.2 x R-->  [queue stays backlogged] --R-->  tcpdump udp port 9 (ns stamps)

Mininet-HiFi measures the inter-dequeue times of a busy queue, so the source must keep the link's queue
backlogged for the whole capture: it offers :data:`GAP_OVERLOAD` times the rate, and whatever the link does
not send it drops at its tail. A gap the source leaves (the queue runs dry) is the sender's, not the link's.

iperf3 UDP was the source before (in both commands): at 200 Mbit/s it delivered 89-93 % of the rate
(its ~20 kpps of 1472 B datagrams are a CPU's worth beside the link core, so the queue ran dry for up to
12.8 ms, 287 times in 2 s, with the core 0 frames late): the gaps measured the sender. The compiled core's
``gen`` mode (AF_PACKET ``sendmmsg``) sends groups of :data:`GAP_BURST` frames, each when its last frame is
due, and sleeps between groups instead of busy-waiting. Its frames go to a MAC that host B drops on
arrival; the capture at B sees them first.

When the compiled core did not build, iperf3 UDP remains the fallback (with a one-client server of its
own on :data:`GAP_IPERF_PORT`, so no caller needs one); the result names its source.

* :func:`gap_source` (pure): the argv and capture port of the source for a rate and duration.
* :func:`offer_backlog` (root glue): run it in ns A while capturing at B; the full frames' arrival times
  and what the source says it sent.
* :func:`frame_ledger` (pure): every frame on the way, so a gap made outside the line shows.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

from testbed.links.fidelity import FULL_FRAME
from testbed.poll import poll

#: The source offers this many times the link rate, so that the queue stays backlogged ...
GAP_OVERLOAD = 1.2
#: ... in groups of this many frames: ``gen`` sleeps between groups instead of busy-waiting every 50 us.
GAP_BURST = 32
#: UDP destination port of the compiled core's ``gen`` frames (what the capture filters on).
GEN_PORT = 9
#: Port of the iperf3 fallback's own one-client server (not ``bench link``'s shared server on 5302).
GAP_IPERF_PORT = 5303
#: Names of the two sources, as the results record them.
GEN, IPERF3 = "linkcore-gen", "iperf3"
#: Ethernet + IPv4 + UDP headers: an iperf3 datagram of ``frame - 42`` bytes fills a ``frame``-byte frame.
HEADERS = 42


@dataclass(frozen=True)
class GapSource:
    """How to offer a backlog: ``argv`` runs in ns A; its frames carry UDP destination ``port``."""

    name: str
    argv: tuple[str, ...]
    port: int


@dataclass(frozen=True)
class Backlog:
    """One backlogged capture: ``arrivals_ns`` of the full frames at B, and what the source sent."""

    source: str
    offered: int
    seconds: float
    arrivals_ns: list
    pcap: Path

    def offered_bps(self, frame: int = FULL_FRAME) -> float:
        """The rate the source offered on the wire (its own count over its own clock)."""
        return self.offered * frame * 8 / self.seconds if self.seconds > 0 else 0.0


def gap_source(binary: Path | None, rate_bps: float, seconds: float, *, if_a: str, ip_b: str,
               frame: int = FULL_FRAME) -> GapSource:
    """The source that offers ``GAP_OVERLOAD x rate_bps`` of ``frame``-byte frames for ``seconds`` (pure).

    Args:
        binary: the compiled core (``gen``), or None when it did not build (iperf3 UDP then).
        if_a: host A's interface (``gen`` writes frames to it); ip_b: host B's address (iperf3's target).

    Raises:
        ValueError: a rate or duration that is not positive (a source that would offer nothing).
    """
    if not rate_bps > 0 or not seconds > 0:
        raise ValueError(f"gap source needs a positive rate and duration, got {rate_bps!r} b/s, {seconds!r} s")
    if binary is not None:
        pps = GAP_OVERLOAD * rate_bps / (frame * 8)
        return GapSource(GEN, (str(binary), "gen", "--a", if_a, "--pps", repr(pps), "--seconds", str(seconds),
                               "--size", str(frame), "--burst", str(GAP_BURST)), GEN_PORT)
    return GapSource(IPERF3, ("iperf3", "-c", ip_b, "-p", str(GAP_IPERF_PORT), "-u",
                              "-b", str(int(rate_bps * GAP_OVERLOAD)), "-l", str(frame - HEADERS),
                              "-t", str(seconds), "-J"), GAP_IPERF_PORT)


def sent_by(source: GapSource, stdout: str) -> tuple[int, float]:
    """(frames sent, seconds) from the source's own JSON report (pure): ``gen`` prints ``sent`` and
    ``seconds``; iperf3 ``-J`` its client summary."""
    doc = json.loads(stdout)
    if source.name == GEN:
        return int(doc["sent"]), float(doc["seconds"])
    end = doc["end"]["sum"]
    return int(end["packets"]), float(end["seconds"])


def frame_ledger(offered: int, direction: dict, captured: int) -> dict:
    """Every frame on the way (pure): offered by the source, received by the line, dropped and sent by it,
    captured at B. ``direction`` is the line's ``a>b`` counters. A frame missing between two of them is a
    gap the line did not make."""
    return {"offered": offered, "line_rx": direction.get("rx_packets"),
            "line_dropped": sum(direction.get(k, 0) for k in ("drop_tail", "drop_red", "drop_loss")),
            "line_tx": direction.get("tx_packets"), "captured": captured}


def gen_binary() -> Path | None:
    """The compiled core (its ``gen`` mode is the frame source), or None when it did not build."""
    from testbed.links.core import CoreBuildError, build

    try:
        return build()
    except CoreBuildError:
        return None


def listening(wire, port: int) -> bool:
    """A TCP listener on ``port`` in host B (iperf3's control connection)."""
    out = subprocess.run(wire.exec_argv("b", ["ss", "-Hltn", f"sport = :{port}"]), capture_output=True, text=True)
    return bool(out.stdout.strip())


#: TCP states in which a socket may still put a frame on the link (a FIN, its retransmission, an ACK).
_OPEN_TCP = ("established", "syn-sent", "syn-recv", "fin-wait-1", "fin-wait-2", "close-wait", "last-ack", "closing")


def wait_tcp_quiet(wire, timeout: float = 10.0) -> None:
    """Wait until neither host has a TCP connection that can still send (root glue).

    The frame ledger counts every frame the line receives as the source's, so a connection of an earlier
    case (iperf3's, torn down as its server exits) must finish closing through the link that carried it,
    before the next case restarts the line and counts: else its last FIN/ACK is one frame "offered" by
    nobody (measured: 19,816 received for 19,815 sent, right after the iperf3 case).

    Raises:
        testbed.errors.EmulationError: still open after ``timeout`` (the sockets named).
    """
    from testbed.errors import EmulationError

    argv = ["ss", "-Htan"] + [w for st in _OPEN_TCP for w in ("state", st)]

    def open_sockets() -> str:
        return "".join(subprocess.run(wire.exec_argv(side, argv), capture_output=True, text=True, timeout=10,
                                      check=False).stdout for side in ("a", "b")).strip()

    try:
        poll(lambda: not open_sockets(), timeout=timeout, interval=0.05, what="TCP connections on the wire to close")
    except TimeoutError as exc:
        raise EmulationError(f"TCP connections still open on the wire after {timeout:g} s: {open_sockets()}") from exc


def offer_backlog(wire, rate_bps: float, seconds: float, label: str, frame: int = FULL_FRAME) -> Backlog:
    """Offer the backlog of :func:`gap_source` through the running link while capturing at B (root glue).

    The caller starts the link before and stops it after (its counters are the caller's). Returns the
    arrival times of the ``frame``-byte frames captured at B and the source's own count.

    Raises:
        subprocess.CalledProcessError: the source failed (its stderr in the exception).
    """
    from testbed.links.pcap import read_pcap

    source = gap_source(gen_binary(), rate_bps, seconds, if_a=wire.if_a, ip_b=wire.ip_b, frame=frame)
    server = None
    if source.name == IPERF3:
        server = wire.run.spawn(wire.exec_argv("b", ["iperf3", "-s", "-1", "-p", str(source.port)]),
                                log=wire.workdir / f"{wire.prefix}-{label}.iperf3.log")
        poll(lambda: listening(wire, source.port), timeout=10, what=f"iperf3 server on port {source.port} to listen")
    try:
        with wire.capture("b", source.port, label) as pcap:
            res = subprocess.run(wire.exec_argv("a", list(source.argv)), capture_output=True, text=True,
                                 timeout=seconds + 60, check=True)
    finally:
        if server is not None and server.poll() is None:
            server.terminate()
            server.wait(timeout=10)
    offered, took = sent_by(source, res.stdout)
    arrivals = [ts for ts, _f, length in read_pcap(pcap) if length == frame]
    return Backlog(source.name, offered, took, arrivals, pcap)
