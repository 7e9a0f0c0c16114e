"""A discrete-event *model check* of PFC over a small network: the pure pieces chained over modelled wires.

Not an emulation: frames are numbers and wires are delays. It shows that the state machine
(:mod:`testbed.pfc.state`), the headroom formula (:mod:`testbed.pfc.headroom`) and the watchdog
(:mod:`testbed.pfc.watchdog`) behave together as lossless Ethernet should — an incast loses nothing with
PFC and the same memory overflows without it; a cyclic buffer dependency freezes throughput and the
watchdog breaks it. The emulated data path must show the same in real frames.

    host/switch port (node -> peer)                      peer (a switch)
    FIFO per priority --gate(now, p)--> wire (R, d) --> PfcIngress[(peer, node)] --> route --> next FIFO
        ^                                                     |
        +--- PfcEgress.receive <-- PAUSE/XON (84 B + d + response) ---+

* Time is emulated seconds: rates are divided and delays multiplied by the dilation, pause quanta are
  real bit times dilated, so the outcome does not depend on the scale.
* A switch accounts each frame at the ingress port it came in on, from arrival until it has left the
  switch (the bytes a real switch's ingress priority group holds); lossy priorities (and every priority
  with PFC off) tail-drop at ``buffer_bytes`` per egress queue instead.
* Hosts are greedy sources (their NIC queue is never empty while a flow has frames left) and sinks.
* PFC frames jump the data queue (sent when decided), and take effect ``response`` after they arrive;
  the frame already on the wire is finished (the gate is asked before a frame starts).
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field

from testbed.dilation import Dilation
from testbed.pfc.config import FRAME_OVERHEAD, PRIORITIES, PfcConfig
from testbed.pfc.headroom import PAUSE_WIRE_BYTES, QUANTUM_BITS, headroom, response_quanta
from testbed.pfc.state import DROP, HOLD, PfcEgress, PfcIngress
from testbed.pfc.watchdog import PfcWatchdog
from testbed.units import FIBRE_DELAY_S_PER_M


@dataclass(frozen=True)
class Flow:
    """``frames`` maximum frames from host ``src`` to host ``dst`` on ``priority`` (None: until the end)."""

    src: str
    dst: str
    priority: int = 3
    frames: int | None = None


@dataclass
class Stats:
    """What a run did; bytes are wire bytes of data frames."""

    sent: int = 0
    delivered: int = 0
    drops: dict = field(default_factory=lambda: {"tail": 0, "pfc_headroom": 0, "pfc_watchdog": 0})
    pause_sent: int = 0
    xon_sent: int = 0
    max_headroom_used: float = 0.0       #: largest ingress occupancy above xoff, bytes
    max_queue_bytes: float = 0.0         #: largest egress queue, bytes
    last_delivery: float = 0.0           #: emulated seconds
    delivered_by_flow: dict = field(default_factory=dict)
    dropped_by_flow: dict = field(default_factory=dict)
    series: list = field(default_factory=list)   #: (window end, bytes delivered in the window)
    watchdog_events: list = field(default_factory=list)
    paused_s: float = 0.0                #: summed over ports and priorities, emulated seconds
    end: float = 0.0
    headroom_bytes: float | None = None  #: per ingress port, when one figure applies to all

    @property
    def lost(self) -> int:
        return sum(self.drops.values())

    def delivered_between(self, t0: float, t1: float) -> int:
        return sum(b for t, b in self.series if t0 < t <= t1)


class Network:
    """Nodes, links and static routes; :meth:`run` plays flows through it.

    Args:
        links: ``[(a, b, rate_bps, one_way_delay_s), ...]`` in real units; full duplex.
        hosts: names of the hosts (every other node is a switch).
        routes: ``{(switch, dst_host): next_node}``.
        pfc: PFC of every port, or None (tail drop at ``buffer_bytes`` per egress queue).
        headroom_bytes: per ingress port; None = the formula for each link.
        buffer_bytes: egress queue limit of a lossy priority (every priority without PFC).
        mtu: data frames are ``mtu + 38`` bytes on the wire.
        dilation: the replica's dilation.
        window_s: width of the delivered-bytes series windows (emulated seconds; default 10 us real).
    """

    def __init__(self, links, hosts, routes: dict, pfc: PfcConfig | None = None,
                 headroom_bytes: float | None = None, buffer_bytes: float = 1e6, mtu: int = 1500,
                 dilation: Dilation | None = None, window_s: float | None = None):
        self.d = dilation or Dilation(1.0)
        self.hosts = set(hosts)
        self.routes = dict(routes)
        self.pfc = pfc
        self.config = pfc or PfcConfig()
        self.frame = mtu + FRAME_OVERHEAD
        self.buffer = buffer_bytes
        self.window = window_s if window_s is not None else self.d.time(10e-6)
        self.ports: dict = {}        # (node, peer) -> port state
        for a, b, rate, delay in links:
            for u, v in ((a, b), (b, a)):
                hr = headroom_bytes if headroom_bytes is not None else headroom(rate, delay, mtu).total
                self.ports[(u, v)] = _Port(self, u, v, rate, delay, hr)
        self.stats = Stats()
        self._events: list = []
        self._seq = 0
        self.now = 0.0

    # -- the event queue --------------------------------------------------------------------------------
    def _push(self, t, kind, *args):
        self._seq += 1
        heapq.heappush(self._events, (t, self._seq, kind, args))

    def run(self, flows, until: float, watchdog=None, poll_s: float | None = None) -> Stats:
        """Play ``flows`` until every frame is delivered or dropped, or emulated time ``until``.

        Args:
            watchdog: :class:`~testbed.pfc.config.WatchdogParams` for every port, or None.
            poll_s: watchdog polling interval, emulated seconds (default detect / 10).
        """
        for f in flows:
            port = self._host_port(f.src)
            port.backlog[f.priority].append(_Source(f))
            self.stats.delivered_by_flow[(f.src, f.dst)] = 0
            self.stats.dropped_by_flow[(f.src, f.dst)] = 0
        if watchdog is not None and self.pfc is not None:
            for p in self.ports.values():
                if p.node not in self.hosts:          # switches run the watchdog, NICs do not
                    p.watchdog = PfcWatchdog(watchdog, p.egress, self.d)
            interval = poll_s if poll_s is not None else self.d.time(watchdog.detect_s) / 10
            self._push(interval, "poll", interval)
        for p in self.ports.values():
            self._push(0.0, "try", p)
        self._push(self.window, "window", self.window)
        self._window_bytes = 0
        while self._events:
            t, _, kind, args = heapq.heappop(self._events)
            if t > until:
                break
            self.now = t
            getattr(self, f"_on_{kind}")(*args)
            if kind == "window" and not self._busy():
                break
        self.stats.end = min(self.now, until)
        self.stats.paused_s = sum(p.egress.paused_time(self.stats.end, q) for p in self.ports.values()
                                  for q in self.config.priorities)
        return self.stats

    def _busy(self) -> bool:
        """Work is left: a frame queued, on a wire, or waiting at a source."""
        return any(e[2] in ("arrive", "done") for e in self._events) or any(
            p.queued_frames() or p.has_backlog() for p in self.ports.values())

    def _host_port(self, host):
        ports = [p for (u, _), p in self.ports.items() if u == host]
        if host not in self.hosts or len(ports) != 1:
            raise ValueError(f"{host!r} is not a host with one link")
        return ports[0]

    # -- handlers -----------------------------------------------------------------------------------------
    def _on_window(self, interval):
        self.stats.series.append((self.now, self._window_bytes))
        self._window_bytes = 0
        self._push(self.now + interval, "window", interval)

    def _on_poll(self, interval):
        for p in self.ports.values():
            if p.watchdog is not None:
                queued = {q: p.bytes[q] for q in self.config.priorities}
                events = p.watchdog.poll(self.now, queued)
                if events:
                    self.stats.watchdog_events += [(p.node, p.peer, e.kind, e.now) for e in events]
                    self._push(self.now, "try", p)
        self._push(self.now + interval, "poll", interval)

    def _on_try(self, port):
        port.try_send()

    def _on_done(self, port, frame):
        port.busy = False
        here = self.ports.get((port.node, frame.came_from)) if frame.came_from else None
        if here is not None:
            here.release(frame)        # left the switch: its ingress accounting goes
        port.try_send()

    def _on_arrive(self, port, frame):
        """``frame`` finished arriving over ``port`` (node -> peer) at ``port.peer``."""
        node = port.peer
        if node in self.hosts:
            self.stats.delivered += self.frame
            self._window_bytes += self.frame
            self.stats.last_delivery = self.now
            self.stats.delivered_by_flow[(frame.src, frame.dst)] += self.frame
            return
        back = self.ports[(node, port.node)]        # the port the PFC frames go out of
        if self.pfc is not None:
            reason, frames = back.ingress.arrive(self.now, frame.priority, self.frame)
            back.send_pfc(frames)
            if reason is not None:
                self._drop(frame, reason)
                return
            used = back.ingress.bytes[frame.priority] - self.config.xoff_bytes
            self.stats.max_headroom_used = max(self.stats.max_headroom_used, used)
        out = self.ports[(node, self.routes[(node, frame.dst)])]
        lossy = self.pfc is None or not self.config.lossless(frame.priority)
        if lossy and out.bytes[frame.priority] + self.frame > self.buffer:
            self._drop(frame, "tail")
            return
        frame.came_from = port.node
        out.enqueue(frame)

    def _drop(self, frame, reason):
        self.stats.drops[reason] += 1
        self.stats.dropped_by_flow[(frame.src, frame.dst)] += 1

    def _on_pfc(self, port, pause):
        """A PFC frame sent by ``port.peer`` takes effect at ``port`` (node -> peer)."""
        port.egress.receive(self.now, pause)
        port.try_send()

    def _on_tick(self, port):
        port.send_pfc(port.ingress.tick(self.now))


class _Source:
    """A flow's frames not yet sent (None: unlimited)."""

    __slots__ = ("src", "dst", "frames")

    def __init__(self, flow: Flow):
        self.src, self.dst, self.frames = flow.src, flow.dst, flow.frames


class _Frame:
    __slots__ = ("src", "dst", "priority", "came_from")

    def __init__(self, src, dst, priority):
        self.src, self.dst, self.priority, self.came_from = src, dst, priority, None


class _Port:
    """One direction of a link as seen from ``node``: its egress FIFOs and PfcEgress, and ``node``'s
    ingress accounting for frames arriving from ``peer`` (PfcIngress; its PAUSE goes out of this port)."""

    def __init__(self, net: Network, node, peer, rate_bps, delay_s, headroom_bytes):
        self.net, self.node, self.peer = net, node, peer
        d = net.d
        self.Bps = d.rate(rate_bps) / 8
        self.delay = d.time(delay_s)
        self.response = d.time(response_quanta(rate_bps) * QUANTUM_BITS / rate_bps)
        self.egress = PfcEgress(net.config, rate_bps, d)
        self.ingress = PfcIngress(net.config, rate_bps, headroom_bytes, d)
        self.headroom = headroom_bytes
        self.fifo = [deque() for _ in range(PRIORITIES)]
        self.bytes = [0] * PRIORITIES
        self.backlog = [[] for _ in range(PRIORITIES)]   # host flows waiting to send
        self.busy = False
        self.wake_at = None
        self.watchdog = None

    def queued_frames(self) -> int:
        return sum(len(q) for q in self.fifo)

    def has_backlog(self) -> bool:
        return any(f.frames is None or f.frames > 0 for flows in self.backlog for f in flows)

    def total_bytes(self) -> int:
        return sum(self.bytes)

    def enqueue(self, frame):
        self.fifo[frame.priority].append(frame)
        self.bytes[frame.priority] += self.net.frame
        self.net.stats.max_queue_bytes = max(self.net.stats.max_queue_bytes, self.total_bytes())
        self.try_send()

    def release(self, frame):
        """A frame that came in over this port's link has left the switch: free its ingress bytes."""
        if self.net.pfc is not None:
            self.send_pfc(self.ingress.depart(self.net.now, frame.priority, self.net.frame))

    def send_pfc(self, frames):
        net = self.net
        for f in frames:
            net.stats.pause_sent += sum(1 for _, q in f.times if q)
            net.stats.xon_sent += sum(1 for _, q in f.times if not q)
            peer_port = net.ports[(self.peer, self.node)]
            net._push(net.now + PAUSE_WIRE_BYTES / self.Bps + self.delay + peer_port.response, "pfc", peer_port, f)
        if any(q for f in frames for _, q in f.times):
            net._push(max(self.ingress.next_deadline(), net.now), "tick", self)

    def _next(self, p):
        """The next frame of priority ``p`` (from the FIFO, else a fresh one from a host flow), or None."""
        if self.fifo[p]:
            return self.fifo[p][0]
        for f in self.backlog[p]:
            if f.frames is None or f.frames > 0:
                return f
        return None

    def try_send(self):
        """Start the next frame if the wire is free: highest priority first, skipping held ones."""
        net = self.net
        if self.busy:
            return
        resume = []
        for p in range(PRIORITIES - 1, -1, -1):
            while (item := self._next(p)) is not None:
                verdict = self.egress.gate(net.now, p) if net.pfc is not None else "send"
                if verdict == HOLD:
                    resume.append(self.egress.resume_at(p))
                    break
                frame = self._take(p, item)
                if verdict == DROP:
                    net._drop(frame, "pfc_watchdog")
                    if frame.came_from is not None:
                        net.ports[(self.node, frame.came_from)].release(frame)
                    continue
                self._transmit(frame)
                return
        if resume:
            t = min(resume)
            if self.wake_at is None or self.wake_at <= net.now or t < self.wake_at:
                self.wake_at = t
                net._push(t, "try", self)

    def _take(self, p, item):
        if isinstance(item, _Frame):
            self.fifo[p].popleft()
            self.bytes[p] -= self.net.frame
            return item
        if item.frames is not None:
            item.frames -= 1
        return _Frame(item.src, item.dst, p)

    def _transmit(self, frame):
        net = self.net
        self.busy = True
        if frame.came_from is None:
            net.stats.sent += net.frame
        ser = net.frame / self.Bps
        net._push(net.now + ser, "done", self, frame)
        net._push(net.now + ser + self.delay, "arrive", self, frame)


# -- configurations ---------------------------------------------------------------------------------------
def incast(senders: int = 4, rate_bps: float = 100e9, distance_m: float = 1000.0, mtu: int = 1500,
           frames_per_sender: int = 2000, pfc: PfcConfig | None = None, headroom_bytes: float | None = None,
           buffer_bytes: float | None = None, dilation: Dilation | None = None) -> Stats:
    """An N:1 incast: hosts h1..hN on switch s send ``frames_per_sender`` maximum frames each to h0.

    Args:
        distance_m: fibre length of every link (5 us/km one way).
        pfc: PFC on priority 3 (every frame is on it), or None: tail drop.
        headroom_bytes: per ingress port; None = :func:`~testbed.pfc.headroom.headroom` of the link.
        buffer_bytes: the egress buffer without PFC; None = N * (xoff + headroom), the memory PFC
            reserves for the senders, so the comparison with and without PFC is at equal memory.
    """
    config = pfc or PfcConfig()
    delay = distance_m * FIBRE_DELAY_S_PER_M
    hr = headroom_bytes if headroom_bytes is not None else headroom(rate_bps, delay, mtu).total
    buffer = buffer_bytes if buffer_bytes is not None else senders * (config.xoff_bytes + hr)
    hosts = ["h0"] + [f"h{i}" for i in range(1, senders + 1)]
    links = [(h, "s", rate_bps, delay) for h in hosts]
    net = Network(links, hosts, {("s", h): h for h in hosts}, pfc=pfc, headroom_bytes=hr, buffer_bytes=buffer,
                  mtu=mtu, dilation=dilation)
    stats = net.run([Flow(h, "h0", 3, frames_per_sender) for h in hosts[1:]], until=float("inf"))
    stats.headroom_bytes = hr
    return stats


def ring_network(switches: int = 4, rate_bps: float = 100e9, distance_m: float = 1000.0, hops: int = 2,
                 **kwargs):
    """A ring s0..s(N-1), host hi on si, every host sending to the host ``hops`` switches clockwise.

    With ``hops`` = 2 each ring link carries two flows (one on its first hop, one on its second), and every
    channel (s_i -> s_i+1) waits for (s_i+1 -> s_i+2): a cyclic buffer dependency. With ``hops`` = 1 no
    switch forwards to another switch and there is none. Returns (network, flows, routes).
    """
    delay = distance_m * FIBRE_DELAY_S_PER_M
    sw = [f"s{i}" for i in range(switches)]
    hosts = [f"h{i}" for i in range(switches)]
    links = [(h, s, rate_bps, delay) for h, s in zip(hosts, sw, strict=True)]
    links += [(sw[i], sw[(i + 1) % switches], rate_bps, delay) for i in range(switches)]
    routes = {}
    for i, s in enumerate(sw):
        for j, h in enumerate(hosts):
            routes[(s, h)] = h if i == j else sw[(i + 1) % switches]
    flows = [Flow(hosts[i], hosts[(i + hops) % switches]) for i in range(switches)]
    return Network(links, hosts, routes, **kwargs), flows, routes


def victim_network(victim_priority: int = 3, rate_bps: float = 100e9, distance_m: float = 1000.0, **kwargs):
    """Head-of-line blocking: a 4:1 incast into h0 and a victim flow that only shares the upstream link.

        h1 h2 h3 hv -- s1 ====== s2 -- h0 (incast sink), h4 (local incast sender), h6 (victim's sink)

    h1..h4 send to h0 on priority 3; hv sends to the idle h6 on ``victim_priority``. s2's ingress from s1
    fills with frames for h0 and pauses s1 -> s2 for priority 3: a victim on priority 3 waits behind them
    although its own path is free; on another priority it keeps flowing. Returns (network, flows).
    """
    delay = distance_m * FIBRE_DELAY_S_PER_M
    left, right = ("h1", "h2", "h3", "hv"), ("h0", "h4", "h6")
    links = [(h, "s1", rate_bps, delay) for h in left] + [("s1", "s2", rate_bps, delay)]
    links += [(h, "s2", rate_bps, delay) for h in right]
    routes = {}
    for h in left + right:
        routes[("s1", h)] = h if h in left else "s2"
        routes[("s2", h)] = h if h in right else "s1"
    flows = [Flow(h, "h0", 3) for h in ("h1", "h2", "h3", "h4")] + [Flow("hv", "h6", victim_priority)]
    return Network(links, left + right, routes, **kwargs), flows

