"""Gray failure detection from port counters: a link that loses part of what crosses it, carrier up.

Port-status and BFD see a link that is dead; a link that drops 10 % of its packets (a dirty connector, a
failing optic, a bad lane) stays up for both and quietly hurts every flow ECMP puts on it. Both ends of
a link count what they sent and received, so what one end sent and the other never received is what the
link lost::

    loss(a -> b) = 1 - delta rx_packets(b's port) / delta tx_packets(a's port)     over the last window

A link is declared gray (and routed around) when either direction's loss is above ``loss_threshold`` in
``windows`` consecutive evaluations that each saw at least ``min_packets`` sent (an idle link cannot be
judged, and a few packets in flight while the two ends are sampled must not look like loss). It stays
out for a hold-down time; then it is given back, on probation. A relapse within ``probation_s`` doubles
the hold-down (up to ``max_hold_s``): route-flap damping, because once traffic has left a gray link the
counters can no longer show whether it healed, and the only test is to use it again.

Pure: time and counters are arguments (the controller passes its poll results and the wall clock).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class GrayPolicy:
    """When a link counts as gray (see the module docstring); times in controller (wall-clock) seconds."""

    loss_threshold: float = 0.05
    min_packets: int = 50
    window_s: float = 0.3
    windows: int = 2
    hold_s: float = 2.0
    max_hold_s: float = 60.0
    probation_s: float = 5.0

    @classmethod
    def for_interval(cls, interval_s: float) -> "GrayPolicy":
        """The controller's policy when it polls counters every ``interval_s``: a window of 3 polls."""
        return cls(window_s=3 * interval_s)

    def detection_bound_s(self, interval_s: float) -> float:
        """Latest a loss well above the threshold, starting now, is declared when counters are polled every
        ``interval_s``: the sliding window (up to ``window_s`` + one interval long) is all lossy at the latest
        one poll after that, so its estimate is the loss itself; ``windows - 1`` more polls must agree; the
        last poll's replies may take one more interval (the poller waits that long for them)."""
        return self.window_s + (self.windows + 2) * interval_s

    def __post_init__(self):
        if not 0 < self.loss_threshold < 1:
            raise ValueError(f"gray.loss_threshold must be in (0, 1), got {self.loss_threshold}")
        if self.min_packets < 1 or self.windows < 1:
            raise ValueError("gray.min_packets and gray.windows must be at least 1")
        if self.window_s <= 0 or self.hold_s <= 0 or self.max_hold_s < self.hold_s:
            raise ValueError("gray: window_s and hold_s must be > 0 and max_hold_s >= hold_s")


@dataclass
class _Dir:
    samples: list = field(default_factory=list)   # (time, tx at the sender, rx at the receiver)
    over: int = 0                                  # consecutive evaluations above the threshold


@dataclass
class _Held:
    until: float
    hold_s: float


class GrayWatch:
    """Per-link loss from counter samples, with the hysteresis of :class:`GrayPolicy`.

    ``observe(link, (a, b), tx_a, rx_b, now)`` records one sample of direction ``a -> b``;
    ``decide(now)`` returns ``[("down" | "up", link, detail)]`` for links whose state changes now.
    ``link`` is any hashable naming the undirected link (the controller uses ``frozenset({a, b})``).
    """

    def __init__(self, policy: GrayPolicy | None = None):
        self.policy = policy or GrayPolicy()
        self.dirs: dict = {}          # (link, (a, b)) -> _Dir
        self.held: dict = {}          # link -> _Held (currently routed around)
        self.released: dict = {}      # link -> (release time, the hold it served)

    def observe(self, link, direction: tuple, tx: int, rx: int, now: float) -> None:
        if link in self.held:
            return                        # routed around: what trickles over it says nothing yet
        d = self.dirs.setdefault((link, direction), _Dir())
        if d.samples and (tx < d.samples[-1][1] or rx < d.samples[-1][2]):
            d.samples.clear()             # a counter went back (switch restarted): start over
        d.samples.append((now, tx, rx))
        while len(d.samples) > 2 and d.samples[1][0] <= now - self.policy.window_s:
            d.samples.pop(0)

    def loss(self, link, direction: tuple) -> tuple[float, int] | None:
        """``(loss fraction, packets sent)`` over the last window of one direction (None: no window yet)."""
        d = self.dirs.get((link, direction))
        if d is None or len(d.samples) < 2 or d.samples[-1][0] - d.samples[0][0] < self.policy.window_s * 0.5:
            return None
        (_, tx0, rx0), (_, tx1, rx1) = d.samples[0], d.samples[-1]
        sent = tx1 - tx0
        if sent <= 0:
            return 0.0, 0
        return max(0.0, 1.0 - (rx1 - rx0) / sent), sent

    def decide(self, now: float) -> list[tuple[str, object, dict]]:
        p, out = self.policy, []
        for link, held in list(self.held.items()):
            if now >= held.until:
                del self.held[link]
                self.released[link] = (now, held.hold_s)
                self._forget(link)        # judge it afresh, on what crosses it from now on
                out.append(("up", link, {"held_s": held.hold_s}))
        worst: dict = {}
        for (link, direction), d in self.dirs.items():
            if link in self.held:
                continue
            lw = self.loss(link, direction)
            if lw is None:
                continue
            loss, sent = lw
            d.over = d.over + 1 if sent >= p.min_packets and loss > p.loss_threshold else 0
            if d.over >= p.windows and link not in self.held:
                if loss > worst.get(link, (-1.0,))[0]:
                    worst[link] = (loss, sent, direction)
        for link, (loss, sent, direction) in worst.items():
            hold = p.hold_s
            rel = self.released.get(link)
            if rel is not None and now - rel[0] < p.probation_s:
                hold = min(p.max_hold_s, 2 * rel[1])   # relapsed on probation: hold it out longer
            self.held[link] = _Held(until=now + hold, hold_s=hold)
            self._forget(link)
            out.append(("down", link, {"loss": round(loss, 4), "sent": sent, "direction": list(direction),
                                       "hold_s": hold}))
        return out

    def _forget(self, link) -> None:
        for (lk, _), d in self.dirs.items():
            if lk == link:
                d.over, d.samples = 0, []

    def is_held(self, link) -> bool:
        return link in self.held
