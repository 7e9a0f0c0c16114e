"""The userspace delay line: a process that *is* a link, for kernels without netem/red.

It sits between the two halves of a link and forwards frames both ways::

    u --veth-- [intf_a]  delay line  [intf_b] --veth-- v
                  |   a>b: Direction (queue, RED/ECN, loss) -> FIFO of (release, frame) -> send on b
                  |   b>a: the same, the other way
               AF_PACKET sockets, select() with a timeout = time to the next release

Each direction runs :class:`testbed.links.queue.Direction` (the pure model) at the frame's kernel arrival
time (SO_TIMESTAMPNS) and holds the surviving frame until its release time (monotonic clock). To send on
time it runs SCHED_FIFO, wakes early from long sleeps and busy-waits the last ``--spin`` seconds. The process never distorts silently: a frame
sent later than ``--late-tolerance`` after its release time counts as ``emulator_late``; frames the kernel
dropped because we did not read fast enough are ``rx_kernel_drops`` (PACKET_STATISTICS).

Run as ``python -m testbed.links.delayline --a IF --b IF --params JSON --stats FILE`` (root). The stats
file (JSON) is rewritten atomically every ``--stats-interval`` seconds and says ``"ready": true`` once
both sockets are bound; SIGUSR1 adds the queue-depth series, SIGUSR2 reads the control file and changes a
direction's loss (:mod:`testbed.links.control`, as the compiled core does), SIGTERM/SIGINT write the final
file (with series) and exit 0. :func:`build_argv` renders that command line for the glue code.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import random
import select
import signal
import socket
import struct
import sys
import time
from bisect import bisect
from collections import deque
from pathlib import Path

from testbed.links.model import LinkParams
from testbed.links.queue import Direction

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_ADD_MEMBERSHIP = 1
PACKET_MR_PROMISC = 1
PACKET_STATISTICS = 6
PACKET_IGNORE_OUTGOING = 23
PR_SET_TIMERSLACK = 29

#: Default lateness (seconds) beyond which a frame counts as emulator_late.
DEFAULT_LATE_TOLERANCE_S = 250e-6
#: Frames read from one socket before looking at due releases again (small: reading 16 frames takes
#: longer than a 100 Mbit/s gap; the bench showed p99 gap error 100% -> 25% going from 16 to 2).
RX_BATCH = 2
#: Longest select() wait, so signals and periodic stats are handled promptly.
IDLE_WAIT_S = 0.05
#: Waking a sleeping (virtual) CPU after a long sleep can take ~1 ms; so a long wait ends this much early
#: and the rest is covered in hops of at most WAKE_HOP_S, which wake within tens of microseconds.
WAKE_EARLY_S = 1e-3
WAKE_HOP_S = 100e-6
#: SCHED_FIFO priority (when root): the line must preempt the CPU-heavy switches it feeds.
DEFAULT_RT_PRIORITY = 10
MAX_FRAME = 65536
#: The periodic stats write waits until the next release is at least this far away.
STATS_QUIET_S = 3e-3
#: Bucket edges of the send-lateness histogram (seconds after the release time).
LATE_BOUNDS_S = (10e-6, 20e-6, 50e-6, 100e-6, 200e-6, 500e-6, 1e-3)
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
ANC_SPACE = socket.CMSG_SPACE(16)
#: Default busy-wait before a release (seconds): select() wakes ~10-40 us late, a large error
#: on the 60-120 us gaps of a 100-200 Mbit/s link (bench: p50 gap error at 100 Mbit/s 10% -> <1%).
#: Costs CPU only while releases are that close together (a backlogged fast link).
DEFAULT_SPIN_S = 50e-6


def build_argv(intf_a: str, intf_b: str, params: LinkParams, stats_path: str | os.PathLike, *,
               python: str | None = None, seed: int | None = None,
               late_tolerance_s: float = DEFAULT_LATE_TOLERANCE_S, stats_interval_s: float = 1.0,
               spin_s: float = DEFAULT_SPIN_S, rt_priority: int = DEFAULT_RT_PRIORITY, pfc=None) -> list[str]:
    """The command line that runs a delay line on ``intf_a``/``intf_b`` with the *emulated* ``params``.

    ``rt_priority`` is written out even at its default: the command line is where the glue reads the
    priority the line gives itself (:func:`testbed.links.core.rt_priority_of`).
    ``pfc``: a :class:`testbed.pfc.link.PfcPort` runs both directions with PFC: the same line started by
    ``python -m testbed.pfc.line`` (which adds ``--pfc JSON``; this module imports nothing of testbed.pfc).
    """
    module = "testbed.links.delayline" if pfc is None else "testbed.pfc.line"
    argv = [python or sys.executable, "-m", module, "--a", intf_a, "--b", intf_b,
            "--params", json.dumps(params.to_dict(), sort_keys=True), "--stats", str(stats_path),
            "--late-tolerance", repr(float(late_tolerance_s)), "--stats-interval", repr(float(stats_interval_s)),
            "--spin", repr(float(spin_s)), "--rt-priority", str(int(rt_priority))]
    if seed is not None:
        argv += ["--seed", str(int(seed))]
    if pfc is not None:
        argv += ["--pfc", pfc.to_json()]
    return argv


def _histogram(counts: list[int]) -> dict:
    """Send-lateness histogram as {"<10us": n, "10-20us": n, ..., ">=1000us": n}."""
    edges = [round(b * 1e6) for b in LATE_BOUNDS_S]
    labels = [f"<{edges[0]}us"] + [f"{a}-{b}us" for a, b in zip(edges, edges[1:])] + [f">={edges[-1]}us"]  # noqa: B905
    return dict(zip(labels, counts, strict=True))


def read_stats(path: str | os.PathLike) -> dict | None:
    """The latest stats document, or None while the delay line has not written one yet."""
    try:
        return json.loads(Path(path).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


class _Path:
    """One direction's plumbing: where frames come from, the model, the FIFO, where they go."""

    __slots__ = ("name", "rx", "tx", "model", "pending", "tx_packets", "tx_errors", "late", "max_late",
                 "late_sum", "late_hist")

    def __init__(self, name, rx, tx, model):
        self.name, self.rx, self.tx, self.model = name, rx, tx, model
        self.pending: deque = deque()
        self.tx_packets = self.tx_errors = self.late = 0
        self.max_late = self.late_sum = 0.0
        self.late_hist = [0] * (len(LATE_BOUNDS_S) + 1)


def _open(ifname: str) -> socket.socket:
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    try:
        sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
    except OSError as exc:
        raise SystemExit(f"delayline: kernel lacks PACKET_IGNORE_OUTGOING ({exc}); needs Linux >= 4.20") from exc
    for opt, size in ((getattr(socket, "SO_RCVBUFFORCE", 33), 8 << 20), (getattr(socket, "SO_SNDBUFFORCE", 32), 8 << 20)):
        try:
            sock.setsockopt(socket.SOL_SOCKET, opt, size)
        except OSError:
            pass  # not root: keep the default buffer size
    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)  # arrival time = when the kernel got it
    sock.bind((ifname, 0))
    ifindex = socket.if_nametoindex(ifname)
    sock.setsockopt(SOL_PACKET, PACKET_ADD_MEMBERSHIP, struct.pack("iHH8s", ifindex, PACKET_MR_PROMISC, 0, b""))
    sock.setblocking(False)
    return sock


def _kernel_drops(sock: socket.socket) -> tuple[int, int]:
    """(packets, drops) since the last call (PACKET_STATISTICS resets on read)."""
    try:
        packets, drops = struct.unpack("II", sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
    except OSError:
        return 0, 0
    return packets, drops


class DelayLine:
    """The forwarding loop; see the module docstring."""

    def __init__(self, intf_a: str, intf_b: str, params: LinkParams, stats_path: str, seed: int | None = None,
                 late_tolerance_s: float = DEFAULT_LATE_TOLERANCE_S, stats_interval_s: float = 1.0,
                 rt_priority: int = DEFAULT_RT_PRIORITY, spin_s: float = DEFAULT_SPIN_S, pfc=None):
        self.rt_priority = rt_priority
        self.spin = spin_s
        self.realtime = False
        self.intfs = (intf_a, intf_b)
        self.params = params
        self.stats_path = Path(stats_path)
        self.late_tolerance = late_tolerance_s
        self.stats_interval = stats_interval_s
        rng = random.Random(seed)
        self.sock_a, self.sock_b = _open(intf_a), _open(intf_b)
        self.paths = (
            _Path("a>b", self.sock_a, self.sock_b, Direction(params, random.Random(rng.random()))),
            _Path("b>a", self.sock_b, self.sock_a, Direction(params, random.Random(rng.random()))),
        )
        if pfc is not None:
            pfc.attach(self, rng)   # testbed.pfc.link.PfcPort: both directions' models become PFC models
        self.kernel_drops = {intf_a: 0, intf_b: 0}
        self.started = time.monotonic()
        self.stop = False
        self.dump_series = False
        self.control_pending = False
        self.control_seq, self.control_error = 0, ""

    def _set_timer_slack(self) -> None:
        """1 us timer slack (default 50 us) so select() wakes close to the release time."""
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_TIMERSLACK, 1000, 0, 0, 0)
        except (OSError, AttributeError):
            pass

    def _set_realtime(self) -> None:
        """SCHED_FIFO at ``rt_priority`` so that releases are not delayed by busy neighbours."""
        if self.rt_priority <= 0:
            return
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(self.rt_priority))
            self.realtime = True
        except (OSError, AttributeError):
            self.realtime = False  # not root: said in the stats

    def run(self) -> None:
        self._set_timer_slack()
        self._set_realtime()
        self.write_stats(ready=True)
        by_sock = {self.sock_a.fileno(): self.paths[0], self.sock_b.fileno(): self.paths[1]}
        rlist = [self.sock_a, self.sock_b]
        paths = self.paths
        mono = time.monotonic
        tolerance = self.late_tolerance
        spin = self.spin
        unpack_ts = struct.Struct("qq").unpack_from
        next_stats = mono() + self.stats_interval
        gc.collect()
        gc.freeze()
        gc.disable()  # frames and (release, frame) tuples hold no cycles; a collection pause is lateness
        while not self.stop:
            now = mono()
            wait = IDLE_WAIT_S
            for p in paths:
                service = getattr(p.model, "service", None)  # PFC: frames start on the model's timer
                if service is not None:
                    nxt = service(now)
                    if nxt is not None and nxt - now < wait:
                        wait = max(0.0, nxt - now)
                pend = p.pending
                while pend:
                    release, frame = pend[0]
                    if release > now:
                        if release - now < wait:
                            wait = release - now
                        break
                    pend.popleft()
                    try:
                        p.tx.send(frame)
                        p.tx_packets += 1
                    except OSError:
                        p.tx_errors += 1
                    late = now - release
                    p.late_hist[bisect(LATE_BOUNDS_S, late)] += 1
                    if late > tolerance:
                        p.late += 1
                        p.late_sum += late
                        if late > p.max_late:
                            p.max_late = late
                    now = mono()
            # the periodic stats file write (milliseconds on a busy disk) waits for a quiet moment,
            # unless it has waited several intervals already
            if now >= next_stats and (wait > STATS_QUIET_S or now >= next_stats + 4 * self.stats_interval):
                self.write_stats()
                next_stats = now + self.stats_interval
            if self.dump_series:
                self.dump_series = False
                self.write_stats(with_series=True)
            if self.control_pending:
                self.control_pending = False
                self.apply_control()
                self.write_stats()
            if wait <= spin:
                wait = 0.0  # release imminent: spin, only polling the sockets (a wake-up would be late)
            else:  # wake at the start of the spin window: early from long waits, in hops near the release
                wait = wait - WAKE_EARLY_S if wait > WAKE_EARLY_S + WAKE_HOP_S else min(wait - spin, WAKE_HOP_S)
            try:
                ready, _, _ = select.select(rlist, (), (), wait)
            except InterruptedError:
                continue
            if not ready:
                continue
            now = mono()
            offset = time.time() - now  # CLOCK_REALTIME (kernel stamps) -> monotonic
            for sock in ready:
                p = by_sock[sock.fileno()]
                admit = p.model.admit
                append = p.pending.append
                recvmsg = sock.recvmsg
                for _ in range(RX_BATCH):
                    try:
                        frame, anc, _flags, _addr = recvmsg(MAX_FRAME, ANC_SPACE)
                    except BlockingIOError:
                        break
                    except OSError:
                        break  # interface went down; the owner will stop us
                    arrival = now
                    if anc:
                        sec, nsec = unpack_ts(anc[0][2])
                        arrival = sec + nsec * 1e-9 - offset
                        if arrival > now:
                            arrival = now
                    release, out = admit(arrival, frame)
                    if release is not None:
                        append((release, out))
        gc.enable()
        self.write_stats(with_series=True)

    def apply_control(self) -> None:
        """Read the control file (:func:`testbed.links.control.parse_control`); apply all of it or none."""
        from testbed.links.control import control_path, parse_control, seq_of
        from testbed.links.model import LossModel

        self.control_error = ""
        try:
            text = control_path(self.stats_path).read_text()
        except OSError:
            self.control_error = "cannot read the control file"
            return
        self.control_seq = seq_of(text)
        try:
            _, rates = parse_control(text)
        except ValueError as exc:
            self.control_error = str(exc)
            return
        by_name = {p.name: p for p in self.paths}
        if any(not isinstance(by_name[d].model, Direction) for d in rates):
            self.control_error = "runtime loss needs the link model without PFC on the Python line"
            return
        for d, rate in rates.items():
            by_name[d].model.set_loss(LossModel(kind="random", rate=rate) if rate > 0 else None)

    def snapshot(self, with_series: bool = False, ready: bool = True) -> dict:
        for intf, sock in zip(self.intfs, (self.sock_a, self.sock_b), strict=True):
            self.kernel_drops[intf] += _kernel_drops(sock)[1]
        directions = {}
        for p in self.paths:
            doc = p.model.snapshot(with_series)
            doc.update(tx_packets=p.tx_packets, tx_errors=p.tx_errors, emulator_late=p.late,
                       max_lateness_s=p.max_late, mean_late_lateness_s=(p.late_sum / p.late if p.late else 0.0),
                       in_flight=len(p.pending) + getattr(p.model, "waiting", 0),
                       lateness_histogram=_histogram(p.late_hist))
            directions[p.name] = doc
        cpu = os.times()
        return {"ready": ready, "pid": os.getpid(), "core": "python", "interfaces": {"a": self.intfs[0], "b": self.intfs[1]},
                "params": self.params.to_dict(), "late_tolerance_s": self.late_tolerance,
                "realtime": self.realtime, "control_seq": self.control_seq, "control_error": self.control_error,
                "uptime_s": round(time.monotonic() - self.started, 3),
                "cpu_s": round(cpu.user + cpu.system, 6),
                "emulator_late": sum(p.late for p in self.paths),
                "rx_kernel_drops": sum(self.kernel_drops.values()),
                "directions": directions}

    def write_stats(self, with_series: bool = False, ready: bool = True) -> None:
        tmp = self.stats_path.with_name(self.stats_path.name + ".tmp")
        tmp.write_text(json.dumps(self.snapshot(with_series, ready)))
        os.replace(tmp, self.stats_path)


def main(argv: list[str] | None = None, pfc=None) -> int:
    """The delay line's command line; ``pfc`` (from ``python -m testbed.pfc.line``) runs PFC in both directions."""
    parser = argparse.ArgumentParser(prog="python -m testbed.links.delayline", description=__doc__.split("\n\n")[0])
    parser.add_argument("--a", required=True, help="first interface")
    parser.add_argument("--b", required=True, help="second interface")
    parser.add_argument("--params", required=True, help="emulated LinkParams as JSON (LinkParams.to_dict)")
    parser.add_argument("--stats", required=True, help="stats JSON file")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--late-tolerance", type=float, default=DEFAULT_LATE_TOLERANCE_S)
    parser.add_argument("--stats-interval", type=float, default=1.0)
    parser.add_argument("--spin", type=float, default=DEFAULT_SPIN_S,
                        help="busy-wait this many seconds before a release instead of sleeping")
    parser.add_argument("--rt-priority", type=int, default=DEFAULT_RT_PRIORITY,
                        help="SCHED_FIFO priority (0: normal scheduling)")
    args = parser.parse_args(argv)
    params = LinkParams.from_dict(json.loads(args.params))
    line = DelayLine(args.a, args.b, params, args.stats, seed=args.seed, late_tolerance_s=args.late_tolerance,
                     stats_interval_s=args.stats_interval, rt_priority=args.rt_priority, spin_s=args.spin, pfc=pfc)

    def _stop(signum, frame):
        line.stop = True

    def _dump(signum, frame):
        line.dump_series = True

    def _control(signum, frame):
        line.control_pending = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGUSR1, _dump)
    signal.signal(signal.SIGUSR2, _control)
    line.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
