"""One link direction with PFC, pure and clock-driven: the reference of the compiled core's PFC path.

:class:`testbed.links.queue.Direction` decides a frame's departure when it arrives (``busy_until``); a
paused priority makes that impossible, so with PFC a direction keeps the frames that have not *started*
in one FIFO per priority and decides each start when the wire is free::

    arrive(now) --> PfcIngress.arrive (lossless: drop pfc_headroom above xoff + headroom; PAUSE upstream)
                --> lossy: tail drop at limit, RED/ECN; lossless: RED marks ECT, never drops
                --> FIFO[priority]
    advance(now): while the wire is free at s <= now and a head may start:
                s = max(busy_until, head arrival, resume_at(p) if p is paused);  earliest s, then arrival order
                --> PfcIngress.depart(s)  (XON upstream at s)   --> wire loss --> release = s + len/rate + delay
    rx PFC frame from downstream at now: it acts at now + delay (the cable back to the sender), in time order
                with the events above (at equal times after them): PfcEgress.receive(now + delay, pause)

PFC frames the ingress side emits are queued in :attr:`upstream` as ``(t, PauseFrame)`` (they leave by the
interface the data came in on); frames that start are queued in :attr:`released` as ``(release, frame)``.
A received PFC frame travels the link's one-way delay before the sender acts on it, as data does the other
way: frames that start meanwhile are sent (the two-way cable term of the headroom). Both directions of a
link node share one delay, so this direction's delay is also the reverse one's; jitter does not apply.
A frame already on the wire is finished (the gate is asked when a frame starts). Occupancy for tail drop
and RED = frames waiting + the frame being serialised, all priorities; lossless priorities are bounded by
their own ``xoff + headroom`` instead of the tail limit. Order of random draws: RED at arrival, loss then
jitter at the start, as ``linkcore`` does (``testbed/links/core/pfc.c``); ``run_trace`` is the equivalence
reference for ``linkcore pfctrace``.
"""

from __future__ import annotations

import json
import random
from collections import deque
from dataclasses import dataclass, replace

from testbed.dilation import Dilation
from testbed.links import ecn
from testbed.links.model import BYTES, LinkParams
from testbed.links.queue import LossDraw, release_time
from testbed.pfc.config import PRIORITIES, PfcConfig
from testbed.pfc.state import DROP, PfcEgress, PfcIngress
from testbed.pfc.watchdog import PfcWatchdog
from testbed.pfc.wire import decode, encode, priority_of

#: Counters of one priority (and, summed, of the direction).
PRIO_COUNTERS = ("rx_packets", "rx_bytes", "forwarded_packets", "forwarded_bytes", "drop_tail", "drop_red",
                 "drop_loss", "drop_pfc_headroom", "drop_pfc_watchdog", "ce_marked", "ecn_marks_already_ce")

#: Fates of an arriving frame.
QUEUED, CE, ALREADY_CE, TAIL, RED, HEADROOM = "queued", "ce", "already_ce", "tail", "red", "pfc_headroom"


class PfcDirection:
    """Per-priority queues + pause-aware serialiser + wire of one direction.

    Args:
        params: the *emulated* link parameters (rate, delay, jitter, limit, RED, loss).
        pfc: the fabric's PFC block.
        real_rate_bps: the link's real line rate (pause quanta are 512 of its bit times).
        headroom_bytes: this port's headroom (resolved from ``auto`` by the caller).
        dilation: the replica's time dilation (pause times are dilated).
        rng: random source (seeded in tests).
    """

    def __init__(self, params: LinkParams, pfc: PfcConfig, real_rate_bps: float, headroom_bytes: float,
                 dilation: Dilation | None = None, rng: random.Random | None = None,
                 sample_interval: float = 1e-3, max_samples: int = 200_000):
        if not params.rate_bps:
            raise ValueError("a PFC link needs a rate (its queue is where pauses happen)")
        self.params = params
        self.pfc = pfc
        self.rng = rng or random.Random()
        self.rate_Bps = params.rate_bps / 8.0
        self.delay = params.one_way_delay_s
        self.jitter = params.jitter_s
        self.limit, unit = params.queue_limit
        self.limit_in_bytes = unit == BYTES
        self.red = params.red
        self.red_in_bytes = self.red is not None and self.red.unit == BYTES
        self.loss = params.loss if params.loss is not None and params.loss.active else None
        self._lost = LossDraw(self.loss, self.rng)
        self.ingress = PfcIngress(pfc, real_rate_bps, headroom_bytes, dilation)
        self.egress = PfcEgress(pfc, real_rate_bps, dilation)
        self.busy_until = 0.0
        self.last_release = 0.0
        self.fifos = [deque() for _ in range(PRIORITIES)]   # (seq, arrival, priority, frame)
        self._seq = 0
        self.waiting_packets = 0
        self.waiting_bytes = 0
        self._wire: deque = deque()                          # (end, length) of started frames
        self.wire_bytes = 0
        self.prio = [dict.fromkeys(PRIO_COUNTERS, 0) for _ in range(PRIORITIES)]
        self.max_queue_packets = 0
        self.max_queue_bytes = 0
        self.samples: list = []
        self.samples_skipped = 0
        self._sample_interval = sample_interval
        self._max_samples = max_samples
        self._next_sample = 0.0
        self.released: list = []   # (release, frame) of started frames, for the caller to send downstream
        self.upstream: list = []   # (t, PauseFrame) for the caller to send upstream
        self.dropped: list = []    # (t, reason, length) of frames dropped after admission (watchdog, loss)
        self.pfc_rx_frames = self.pfc_tx_frames = 0
        self._rx: deque = deque()   # (acts at, PauseFrame) of received PFC frames still on the cable
        self.prio_bytes = [0] * PRIORITIES   # waiting bytes per priority (the watchdog's "queued")
        self.watchdog = PfcWatchdog(pfc.watchdog, self.egress) if pfc.watchdog is not None else None
        self._wd_polled = 0.0

    def _up(self, t: float, frames) -> None:
        for f in frames:
            self.upstream.append((t, f))
            self.pfc_tx_frames += 1

    # -- queue state ---------------------------------------------------------------------------------
    def _drain_wire(self, now: float) -> None:
        w = self._wire
        while w and w[0][0] <= now:
            self.wire_bytes -= w.popleft()[1]

    def depth(self, now: float) -> tuple[int, int]:
        """(packets, bytes) waiting or being serialised at ``now`` (call :meth:`advance` first)."""
        self._drain_wire(now)
        return self.waiting_packets + len(self._wire), self.waiting_bytes + self.wire_bytes

    def paused_mask(self, now: float) -> int:
        """Bit p set while priority p is held by the peer's PAUSE at ``now``."""
        return sum(1 << p for p in self.pfc.priorities if self.egress.paused(now, p))

    # -- events --------------------------------------------------------------------------------------
    def admit(self, now: float, frame: bytes) -> str:
        """A frame arrives at ``now`` (after :meth:`advance` to ``now``, which this calls). Returns its fate."""
        self.advance(now)
        p = priority_of(frame, self.pfc)
        c = self.prio[p]
        length = len(frame)
        c["rx_packets"] += 1
        c["rx_bytes"] += length
        qlen, qbytes = self.depth(now)
        lossless = self.pfc.lossless(p)
        fate = QUEUED
        if lossless:
            reason, frames = self.ingress.arrive(now, p, length)
            self._up(now, frames)
            if reason is not None:
                c["drop_pfc_headroom"] += 1
                return HEADROOM
        elif (qbytes + length > self.limit) if self.limit_in_bytes else (qlen + 1 > self.limit):
            c["drop_tail"] += 1
            return TAIL
        if self.red is not None:
            prob = self.red.probability(qbytes if self.red_in_bytes else qlen)
            if prob > 0 and (prob >= 1.0 or self.rng.random() < prob):
                code = ecn.ecn_codepoint(frame) if self.red.ecn else ecn.NOT_ECT
                if code in (ecn.ECT0, ecn.ECT1):
                    frame = ecn.set_ce(frame)
                    c["ce_marked"] += 1
                    fate = CE
                elif code == ecn.CE:
                    c["ecn_marks_already_ce"] += 1
                    fate = ALREADY_CE
                elif not lossless:
                    c["drop_red"] += 1
                    return RED
        self.fifos[p].append((self._seq, now, p, frame))
        self._seq += 1
        self.waiting_packets += 1
        self.waiting_bytes += length
        self.prio_bytes[p] += length
        if qlen + 1 > self.max_queue_packets:
            self.max_queue_packets = qlen + 1
        if qbytes + length > self.max_queue_bytes:
            self.max_queue_bytes = qbytes + length
        if now >= self._next_sample:
            self._sample(now, qlen + 1, qbytes + length)
        self.advance(now)
        if self.watchdog is not None:   # a queue filled: detection may be due (the watchdog's contract)
            self._wd_poll(now)
        return fate

    def _wd_poll(self, t: float) -> None:
        if t > self._wd_polled:
            self._wd_polled = t
        self.watchdog.poll(t, {p: self.prio_bytes[p] for p in self.pfc.priorities})

    def _wd_due(self) -> float | None:
        return None if self.watchdog is None else self.watchdog.next_deadline(self._wd_polled)

    def receive(self, now: float, raw: bytes) -> bool:
        """A frame from downstream: a PFC frame is consumed (True) and pauses/resumes; anything else False."""
        pause = decode(raw)
        if pause is None:
            return False
        self.pfc_rx_frames += 1
        self._rx.append((now + self.delay, pause))   # acts when it reaches the sender (see the module doc)
        self.advance(now)
        return True

    def _act(self, t: float) -> None:
        """The oldest received PFC frame reaches the sender at ``t``: pause or resume."""
        self.egress.receive(t, self._rx.popleft()[1])
        qlen, qbytes = self.depth(t)   # a pause state change is a sample (the series shows every one)
        self._record(t, qlen, qbytes)

    def _next_start(self) -> tuple[float, int] | None:
        best = None
        for p in range(PRIORITIES):
            q = self.fifos[p]
            if not q:
                continue
            seq, arrival, _, _ = q[0]
            s = self.busy_until if self.busy_until > arrival else arrival
            if self.egress.override[p] is None:
                if self.egress.paused(s, p):
                    s = self.egress.resume_at(p)
            elif s < self.watchdog.storm_since[p]:   # held until the watchdog declared the storm
                s = self.watchdog.storm_since[p]
            if best is None or s < best[0] or (s == best[0] and seq < best[2]):
                best = (s, p, seq)
        return None if best is None else (best[0], best[1])

    def next_event(self) -> float | None:
        """When :meth:`advance` next has work (a start, a PAUSE refresh, a watchdog poll, a received PFC
        frame acting), or None."""
        nxt = self._next_start()
        rx = self._rx[0][0] if self._rx else None
        times = [t for t in (nxt[0] if nxt else None, self.ingress.next_deadline(), self._wd_due(), rx)
                 if t is not None]
        return min(times) if times else None

    def advance(self, now: float) -> None:
        """Start every frame whose start time is ``<= now``; refresh PAUSE, poll the watchdog and act on
        received PFC frames on time, in time order (at equal times: the start, the refresh, the watchdog,
        the PFC frame)."""
        while True:
            nxt = self._next_start()
            due = self.ingress.next_deadline()
            wd = self._wd_due()
            rx = self._rx[0][0] if self._rx else None
            if (rx is not None and rx <= now and (nxt is None or rx < nxt[0]) and (due is None or rx < due)
                    and (wd is None or rx < wd)):
                self._act(rx)
                continue
            if wd is not None and wd <= now and (nxt is None or wd < nxt[0]) and (due is None or wd < due):
                self._wd_poll(wd)
                continue
            if due is not None and due <= now and (nxt is None or due < nxt[0]):
                self._up(due, self.ingress.tick(due))
                continue
            if nxt is None or nxt[0] > now:
                return
            s, p = nxt
            _, _, _, frame = self.fifos[p].popleft()
            length = len(frame)
            self.waiting_packets -= 1
            self.waiting_bytes -= length
            self.prio_bytes[p] -= length
            self._up(s, self.ingress.depart(s, p, length))
            c = self.prio[p]
            if self.egress.gate(s, p) == DROP:
                c["drop_pfc_watchdog"] += 1
                self.dropped.append((s, "pfc_watchdog", length))
                continue
            end = s + length / self.rate_Bps
            self.busy_until = end
            self._wire.append((end, length))
            self.wire_bytes += length
            if self.loss is not None and self._lost():
                c["drop_loss"] += 1
                self.dropped.append((s, "loss", length))
                continue
            release = self.last_release = release_time(end, self.delay, self.jitter, self.rng, self.last_release)
            c["forwarded_packets"] += 1
            c["forwarded_bytes"] += length
            self.released.append((release, frame))

    def _sample(self, now: float, packets: int, nbytes: int) -> None:
        self._next_sample = now + self._sample_interval
        self._record(now, packets, nbytes)

    def _record(self, now: float, packets: int, nbytes: int) -> None:
        if len(self.samples) < self._max_samples:
            self.samples.append((round(now, 6), packets, nbytes, self.paused_mask(now)))
        else:
            self.samples_skipped += 1

    # -- reports -------------------------------------------------------------------------------------
    def counters(self) -> dict:
        """Direction totals under the keys of :data:`testbed.links.queue.COUNTERS` (+ the PFC drops)."""
        return {k: sum(c[k] for c in self.prio) for k in PRIO_COUNTERS}

    def snapshot(self, now: float, with_series: bool = False) -> dict:
        """Counters, per-priority counters and the PFC state of both halves (JSON-able)."""
        doc = self.counters()
        doc.update(max_queue_packets=self.max_queue_packets, max_queue_bytes=self.max_queue_bytes,
                   samples_skipped=self.samples_skipped)
        doc["drop_pfc"] = doc["drop_pfc_headroom"] + doc["drop_pfc_watchdog"]
        doc["priorities"] = {str(p): dict(c, queued_packets=len(self.fifos[p]))
                             for p, c in enumerate(self.prio) if c["rx_packets"]}
        ing, eg = self.ingress, self.egress
        egress = eg.snapshot(now)
        for p, row in egress.items():
            row["ignored"] = eg.ignored[int(p)]
        doc["pfc"] = {"pfc_rx_frames": self.pfc_rx_frames, "pfc_tx_frames": self.pfc_tx_frames,
                      "rate_real_bps": ing.rate_bps, "scale": ing.dilation.scale, "xoff_bytes": self.pfc.xoff_bytes,
                      "xon_bytes": self.pfc.xon_bytes, "headroom_bytes": ing.headroom_bytes, "red": self.red is not None,
                      "quanta": self.pfc.quanta, "pause_s": ing.pause_s, "paused_now": self.paused_mask(now),
                      "ingress": ing.snapshot(), "egress": egress,
                      "watchdog": self.watchdog.snapshot() if self.watchdog is not None else None}
        if with_series:
            doc["pfc_series"] = [list(s) for s in self.samples]
        return doc


def _fmt(x: float) -> str:
    return f"{x:.17g}"


def trace_lines(direction: PfcDirection, lines, src: str = "02:00:00:00:00:01") -> list[str]:
    """Replay ``T arrive HEX`` / ``T rx HEX`` / ``T advance`` lines; one output line each, then a summary.

    Output: ``FATE`` (or ``pfc``/``data``/``-``) followed by ``tx RELEASE LEN``, ``drop REASON T LEN`` and
    ``up T HEX`` items in the order they happened; the summary lines are ``prio P k=v ...`` and
    ``pfc P k=v ...``. ``linkcore pfctrace`` prints the same text for the same input.
    """
    out = []
    now = 0.0
    for line in lines:
        parts = line.split()
        if not parts or parts[0].startswith("#"):
            continue
        now, event = float(parts[0]), parts[1]
        if event == "arrive":
            head = direction.admit(now, bytes.fromhex(parts[2]))
        elif event == "rx":
            head = "pfc" if direction.receive(now, bytes.fromhex(parts[2])) else "data"
        elif event == "advance":
            direction.advance(now)
            head = "-"
        else:
            raise ValueError(f"unknown event {event!r}; allowed: arrive, rx, advance")
        items = [head]
        items += [f"tx {_fmt(t)} {len(f)}" for t, f in direction.released]
        items += [f"drop {r} {_fmt(t)} {n}" for t, r, n in direction.dropped]
        items += [f"up {_fmt(t)} {encode(f, src).hex()}" for t, f in direction.upstream]
        direction.released.clear()
        direction.dropped.clear()
        direction.upstream.clear()
        out.append(" ".join(items))
    for p, c in enumerate(direction.prio):
        out.append(f"prio {p} " + " ".join(f"{k}={c[k]}" for k in PRIO_COUNTERS))
    ing, eg = direction.ingress, direction.egress
    for p in direction.pfc.priorities:
        ic, ec = ing.counters[p], eg.counters[p]
        out.append(f"pfc {p} pause_sent={ic['pause_sent']} xon_sent={ic['xon_sent']} "
                   f"pause_received={ec['pause_received']} xon_received={ec['xon_received']} "
                   f"max_bytes={ing.max_bytes[p]} paused_s={_fmt(eg.paused_time(now, p))}")
    wd = direction.watchdog
    if wd is not None:
        for p in direction.pfc.priorities:
            c = wd.counters[p]
            out.append(f"watchdog {p} storms={c['storms']} restorations={c['restorations']} "
                       f"storm_s={_fmt(c['storm_s'])} in_storm={int(wd.in_storm[p])}")
    out.append(f"queue max_packets={direction.max_queue_packets} max_bytes={direction.max_queue_bytes} "
               f"samples={len(direction.samples)}")
    return out


def linkcore_args(pfc: PfcConfig, real_rate_bps: float, headroom_bytes: float, scale: float = 1.0,
                  src: str | None = None, lossless: bool = True) -> list[str]:
    """``--pfc SPEC`` of ``linkcore`` for this port (floats by repr: the C core reads the same doubles).

    ``lossless=False`` runs the same per-priority data path with no lossless priority (PFC off: tail drop
    for every priority, per-priority counters kept, no PAUSE sent or honoured).
    """
    mask = sum(1 << p for p in pfc.priorities) if lossless else 0
    spec = (f"prios={mask},xoff={float(pfc.xoff_bytes)!r},xon={float(pfc.xon_bytes)!r},"
            f"headroom={float(headroom_bytes)!r},quanta={int(pfc.quanta)},rate={float(real_rate_bps)!r},"
            f"scale={float(scale)!r},dscp={''.join(str(p) for p in pfc.dscp_map)}")
    if pfc.watchdog is not None:
        wd = pfc.watchdog
        spec += f",wd_detect={float(wd.detect_s)!r},wd_restore={float(wd.restore_s)!r},wd_action={wd.action}"
    if src is not None:
        spec += f",src={src}"
    return ["--pfc", spec]


def run_core_trace(params: LinkParams, pfc: PfcConfig, real_rate_bps: float, headroom_bytes: float, scale: float,
                   seed: int, lines, src: str = "02:00:00:00:00:01") -> list[str]:
    """The compiled core's ``pfctrace`` of ``lines`` (the other side of :func:`trace_lines`); no root.

    Raises:
        testbed.links.core.CoreBuildError: the core did not compile.
    """
    import subprocess

    from testbed.links import core

    argv = [str(core.build()), "pfctrace", *core.core_model_args(params),
            *linkcore_args(pfc, real_rate_bps, headroom_bytes, scale, src), "--seed", str(int(seed))]
    res = subprocess.run(argv, input="".join(f"{line}\n" for line in lines), capture_output=True, text=True,
                         check=True)
    return res.stdout.splitlines()


def run_port_trace(params: LinkParams, port: "PfcPort", index: int, seed: int, lines,
                   src: str = "02:00:00:00:00:01") -> list[str]:
    """The compiled core's ``pfctrace`` of one direction of a link node started with ``port``'s ``--pfc``
    (``index`` 1: the b->a direction, with its own thresholds); compare with
    ``trace_lines(port.direction(params, rng, index), lines)``. No root."""
    import subprocess

    from testbed.links import core

    argv = [str(core.build()), "pfctrace", *core.core_model_args(params), *port.linkcore_args(),
            "--seed", str(int(seed)), *(["--trace-ba"] if index else [])]
    argv[argv.index("--pfc") + 1] += f",src={src}"
    res = subprocess.run(argv, input="".join(f"{line}\n" for line in lines), capture_output=True, text=True,
                         check=True)
    return res.stdout.splitlines()


#: ``--pfc``'s names of a link node's directions, by index (``red_off=ab`` / ``red_off=ba``).
DIRECTION_NAMES = ("ab", "ba")


@dataclass(frozen=True)
class PfcPort:
    """The PFC settings of one link node (both directions): what ``--pfc`` carries to either core.

    Attributes:
        config: the fabric's PFC block.
        real_rate_bps: the link's real line rate.
        headroom_bytes: this port's headroom (``auto`` resolved).
        scale: the replica's time dilation.
        ba: the b->a direction's own ``(xoff, xon, headroom)`` bytes, or None (the same as a->b). A replica's
            host link needs it: its host->switch side is the NIC (host memory: a threshold never reached),
            its switch->host side the switch's egress; a switch-switch link's two egresses have different
            feeders, so different headrooms (:mod:`testbed.plan.pfc`).
        red_off: the directions (0: a->b, 1: b->a) that run no RED even when the link's params have it: no
            CE marks, no early drops. A NIC has no AQM (its queue is host memory; only switch egresses mark),
            so a replica's host link turns it off on its NIC side (:meth:`testbed.plan.pfc.PfcLink.port`).
    """

    config: PfcConfig
    real_rate_bps: float
    headroom_bytes: float
    scale: float = 1.0
    ba: tuple | None = None
    red_off: tuple[int, ...] = ()

    def __post_init__(self):
        red_off = tuple(sorted(set(self.red_off)))
        if any(i not in (0, 1) for i in red_off):
            raise ValueError(f"PfcPort.red_off: direction indices are 0 (a->b) and 1 (b->a), got {self.red_off!r}")
        object.__setattr__(self, "red_off", red_off)
        if self.ba is not None:
            xoff, xon, headroom = (float(x) for x in self.ba)
            PfcConfig(priorities=self.config.priorities, xoff_bytes=xoff, xon_bytes=xon)   # xon < xoff
            if not headroom > 0:
                raise ValueError(f"PfcPort.ba: headroom must be positive, got {headroom!r}")
            object.__setattr__(self, "ba", (xoff, xon, headroom))

    def linkcore_args(self) -> list[str]:
        argv = linkcore_args(self.config, self.real_rate_bps, self.headroom_bytes, self.scale)
        if self.ba is not None:
            xoff, xon, headroom = self.ba
            argv[-1] += f",xoff_ba={xoff!r},xon_ba={xon!r},headroom_ba={headroom!r}"
        for i in self.red_off:
            argv[-1] += f",red_off={DIRECTION_NAMES[i]}"
        return argv

    def to_json(self) -> str:
        return json.dumps({"config": self.config.to_dict(), "real_rate_bps": self.real_rate_bps,
                           "headroom_bytes": self.headroom_bytes, "scale": self.scale,
                           "ba": list(self.ba) if self.ba is not None else None, "red_off": list(self.red_off)},
                          sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "PfcPort":
        doc = json.loads(text)
        ba = doc.get("ba")
        return cls(PfcConfig.from_dict(doc["config"]), float(doc["real_rate_bps"]), float(doc["headroom_bytes"]),
                   float(doc["scale"]), tuple(ba) if ba is not None else None, tuple(doc.get("red_off", ())))

    def side(self, index: int) -> tuple[PfcConfig, float]:
        """(config, headroom) of direction ``index`` (0: a->b, 1: b->a): the C core's pfcdir_thresholds."""
        if index == 0 or self.ba is None:
            return self.config, self.headroom_bytes
        xoff, xon, headroom = self.ba
        return replace(self.config, xoff_bytes=xoff, xon_bytes=xon), headroom

    def direction(self, params: LinkParams, rng: random.Random, index: int = 0) -> PfcDirection:
        """Direction ``index`` of the link node: its thresholds, and no RED when it is in :attr:`red_off`."""
        config, headroom = self.side(index)
        if index in self.red_off:
            params = replace(params, red=None)
        return PfcDirection(params, config, self.real_rate_bps, headroom, Dilation(self.scale), rng)

    def attach(self, line, rng: random.Random) -> None:
        """Make both directions of a :class:`testbed.links.delayline.DelayLine` PFC directions (root)."""
        import time
        from pathlib import Path

        models = []
        for i, (p, intf) in enumerate(zip(line.paths, line.intfs, strict=True)):
            src = bytes.fromhex(Path(f"/sys/class/net/{intf}/address").read_text().strip().replace(":", ""))
            models.append(LineModel(self.direction(line.params, random.Random(rng.random()), i), p.pending,
                                    p.rx.send, src, time.monotonic))
            p.model = models[-1]
        models[0].peer, models[1].peer = models[1], models[0]


class LineModel:
    """A :class:`PfcDirection` behind the Python delay line's per-direction model interface.

    ``admit(now, frame)`` returns ``(None, frame)``: started frames go straight into the line's ``pending``
    FIFO (several may start per event, and some start on a timer: :meth:`service`). A PFC frame read on this
    direction's input is for the *other* direction (its egress leaves by that interface), so it goes to
    ``peer``; PFC frames this direction emits leave by its input interface (``send_upstream``).
    """

    def __init__(self, direction: PfcDirection, pending: deque, send_upstream, src: bytes, clock):
        self.direction = direction
        self.pending = pending
        self.send_upstream = send_upstream
        self.src = src
        self.clock = clock
        self.peer: LineModel | None = None
        self.tx_errors = 0

    @property
    def waiting(self) -> int:
        return self.direction.waiting_packets

    def flush(self) -> None:
        d = self.direction
        if d.released:
            self.pending.extend(d.released)
            d.released.clear()
        for _t, frame in d.upstream:
            try:
                self.send_upstream(encode(frame, self.src))
            except OSError:
                self.tx_errors += 1
        d.upstream.clear()
        d.dropped.clear()

    def admit(self, now: float, frame: bytes):
        peer = self.peer
        if peer is not None and peer.direction.receive(now, frame):
            peer.flush()
            return None, frame
        self.direction.admit(now, frame)
        self.flush()
        return None, frame

    def service(self, now: float) -> float | None:
        """Start what is due at ``now``; returns when the model next has work."""
        self.direction.advance(now)
        self.flush()
        return self.direction.next_event()

    def snapshot(self, with_series: bool = False) -> dict:
        doc = self.direction.snapshot(self.clock(), with_series)
        doc["pfc"]["pfc_tx_errors"] = self.tx_errors
        return doc
