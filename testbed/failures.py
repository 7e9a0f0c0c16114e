"""Failure schedules during a run (pure): parse, validate against the fabric, execute on a clock.

A schedule is a comma-separated list of events, each ``AT:ACTION:TARGET[:ARGS]``; ``AT`` is a duration
(``2s``, ``500ms``) on the replica's wall clock, counted from a start the caller names: a collective's
start barrier (every rank passed it), a scenario's "traffic started" (emulated time: a real-world instant
is ``AT / scale``)::

    2s:down:t0-a0            link t0 - a0 down (both switch ports, as ``testbed fail link t0 a0``)
    4s:up:t0-a0              ... and back up (``testbed restore link``)
    1s:flap:t0-a0:300ms:3    3 cycles of 300 ms down, 300 ms up
    3s:crash:a1              every link of switch a1 down (``testbed fail switch a1``)
    5s:recover:a1            ... back up
    2s:gray:t0-a0:10%        the link loses 10% of its frames, carrier up (``testbed fail gray``); 0% undoes

Links are ``A-B`` (node names as in ``testbed plan``; names with ``-`` in them are resolved against the
fabric). Every error names the event and its field (``--failures[2].target``) and exits 2.

:func:`parse` -> :class:`Event` list (flaps expanded, sorted by time) -> :class:`Executor` runs them after
the start through a *control* (``link(a, b, down)``, ``switch(s, down)``, ``gray(a, b, loss)``); the
root glue (:mod:`testbed.emu.failctl`: the controller API, ``ip link``, the link node's loss control, as
``testbed fail``) gives it a real one and a thread, the tests a fake. :func:`windows` turns what ran into
the intervals in which a lost packet is the experiment, so QP timeouts inside them are reported but do not
mark the run unhealthy; :func:`retry_budget` sizes the QPs' retries to outlast an outage; :func:`cuts`
pairs every failure that ran with its repair, for a report per cut.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass

from testbed.errors import SpecError
from testbed.units import parse_duration

FLAG = "--failures"
ACTIONS = ("down", "up", "flap", "crash", "recover", "gray")
#: most primitive events one schedule may expand to (a flap of 10^6 cycles is a typo, not an experiment)
MAX_EVENTS = 1000


@dataclass(frozen=True)
class Event:
    """One primitive change: ``kind`` link_down | link_up | switch_down | switch_up | gray."""

    at: float
    kind: str
    target: tuple          # (a, b) for links, (s,) for switches
    loss: float = 0.0
    source: str = ""       # the text it came from (flaps: one text, several events)
    index: int = -1        # its place in the schedule (``--failures[index]``)

    def describe(self) -> str:
        what = "-".join(self.target)
        return f"{self.at:g}s {self.kind} {what}" + (f" {self.loss:.1%}" if self.kind == "gray" else "")


def _field(i: int, name: str) -> str:
    return f"{FLAG}[{i}].{name}"


def _link(text: str, i: int, nodes: dict) -> tuple:
    """``A-B`` -> (A, B), split where both halves are switches/hosts of the fabric and linked."""
    splits = [(text[:k], text[k + 1:]) for k, c in enumerate(text) if c == "-"]
    for a, b in splits:
        if a in nodes and b in nodes:
            if b not in nodes[a]:
                raise SpecError(_field(i, "target"), f"{a} and {b} are not linked in this fabric "
                                                     f"({a}'s links: {', '.join(sorted(map(str, nodes[a])))})")
            return a, b
    if not splits:
        raise SpecError(_field(i, "target"), f"a link is A-B, got {text!r}")
    raise SpecError(_field(i, "target"), f"no link {text!r} in this fabric (nodes such as "
                                         f"{', '.join(sorted(map(str, nodes))[:6])})")


def _loss(text: str, i: int) -> float:
    from testbed.links.model import _probability

    return _probability(text, _field(i, "loss"))


def parse(text: str, graph, gray_links: set | None = None) -> list[Event]:
    """The events of ``text`` on fabric ``graph`` (networkx, nodes with ``role``), sorted by time.

    Args:
        gray_links: links (frozensets of two node names) carried by a userspace link node, whose loss can
            change at runtime; a gray event on another link is refused, saying why.

    Raises:
        SpecError: field-named, one line (exit 2).
    """
    nodes = {n: set(graph.neighbors(n)) for n in graph.nodes}
    switches = {n for n, d in graph.nodes(data=True) if d.get("role") != "host"}
    events: list[Event] = []
    items = [x.strip() for x in str(text).split(",")]
    if not any(items):
        raise SpecError(FLAG, "empty schedule; give events such as 2s:down:A-B,4s:up:A-B")
    for i, item in enumerate(items):
        parts = item.split(":")
        if len(parts) < 3:
            raise SpecError(f"{FLAG}[{i}]", f"an event is AT:ACTION:TARGET[:ARGS] (e.g. 2s:down:A-B), got {item!r}")
        at = parse_duration(parts[0], _field(i, "at"))
        action, target, args = parts[1].strip().lower(), parts[2].strip(), [p.strip() for p in parts[3:]]
        if action not in ACTIONS:
            raise SpecError(_field(i, "action"), f"unknown action {parts[1]!r}; allowed: {', '.join(ACTIONS)}")
        want_args = {"flap": 2, "gray": 1}.get(action, 0)
        if len(args) != want_args:
            usage = {"flap": "AT:flap:A-B:PERIOD:COUNT", "gray": "AT:gray:A-B:LOSS"}.get(action, f"AT:{action}:TARGET")
            raise SpecError(_field(i, "args"), f"{action} takes {want_args} argument(s): {usage}, got {item!r}")
        if action in ("crash", "recover"):
            if target not in switches:
                raise SpecError(_field(i, "target"), f"no switch {target!r} in this fabric "
                                                     f"(switches: {', '.join(sorted(map(str, switches)))})")
            events.append(Event(at, "switch_down" if action == "crash" else "switch_up", (target,), source=item,
                                index=i))
            continue
        link = _link(target, i, nodes)
        if action == "gray":
            if gray_links is None or frozenset(link) not in gray_links:
                raise SpecError(_field(i, "action"), f"gray loss on {link[0]}-{link[1]} needs a userspace link node "
                                "or tc HTB on both of its ends (its loss changes at runtime); this replica has "
                                "neither there (netem, one shaped end, or not emulated), so use "
                                "down/up/flap/crash there")
            events.append(Event(at, "gray", link, _loss(args[0], i), source=item, index=i))
        elif action == "flap":
            period = parse_duration(args[0], _field(i, "period"))
            if period <= 0:
                raise SpecError(_field(i, "period"), f"must be > 0, got {args[0]!r}")
            try:
                count = int(args[1])
            except ValueError:
                count = 0
            if not 1 <= count <= MAX_EVENTS // 2:
                raise SpecError(_field(i, "count"), f"must be an integer 1..{MAX_EVENTS // 2}, got {args[1]!r}")
            for c in range(count):
                events.append(Event(at + 2 * c * period, "link_down", link, source=item, index=i))
                events.append(Event(at + (2 * c + 1) * period, "link_up", link, source=item, index=i))
        else:
            events.append(Event(at, "link_down" if action == "down" else "link_up", link, source=item, index=i))
        if len(events) > MAX_EVENTS:
            raise SpecError(FLAG, f"more than {MAX_EVENTS} events")
    events.sort(key=lambda e: e.at)   # stable: same-time events keep their written order
    _check_states(events)
    return events


def gray_links(plan) -> set:
    """The links of a replica plan whose loss can change at runtime (``parse``'s ``gray_links``): those
    carried by a userspace link node, and those tc HTB shapes on both ends (``testbed.plan.gray``)."""
    return {frozenset((e.u, e.v)) for e in plan.links
            if e.via or (e.backend == "htb" and {n for n, _ in e.tc} == {e.u, e.v})}


def check_within(events: list[Event], horizon_s: float, what: str) -> None:
    """Refuse an event at or after ``horizon_s`` (it would never run inside ``what``), naming its field."""
    for e in events:
        if e.at >= horizon_s:
            raise SpecError(_field(e.index, "at"), f"{e.source!r} runs at {e.at:g}s, after {what} ends "
                                                   f"({horizon_s:g}s); schedule it earlier or run longer")


def _key(e: Event):
    return ("link", frozenset(e.target)) if e.kind.startswith("link") or e.kind == "gray" else ("switch", e.target[0])


def _check_states(events: list[Event]) -> None:
    """An ``up`` for a link that is not down (or a ``recover`` of a running switch) is a typo: refuse it."""
    state: dict = {}
    for e in events:
        if e.kind in ("link_down", "switch_down", "link_up", "switch_up"):
            down = e.kind.endswith("down")
            k = _key(e)
            if state.get(k, False) == down:
                what = "-".join(e.target)
                raise SpecError(_field(e.index, "action"), f"event {e.source!r} at {e.at:g}s: {what} is already "
                                                           f"{'down' if down else 'up'} then")
            state[k] = down


def undo(events: list[Event]) -> list[Event]:
    """Events that bring back what ``events`` leaves failed at the end (links, switches, gray loss)."""
    state: dict = {}
    for e in events:
        state[_key(e) + ((e.kind == "gray"),)] = e
    out = []
    for e in state.values():
        if e.kind in ("link_down", "switch_down"):
            out.append(Event(e.at, e.kind.replace("down", "up"), e.target, source="end of run"))
        elif e.kind == "gray" and e.loss > 0:
            out.append(Event(e.at, "gray", e.target, 0.0, source="end of run"))
    return out


def apply(control, e: Event):
    """Run one event through ``control`` (the same paths as ``testbed fail``); returns its answer."""
    if e.kind in ("link_down", "link_up"):
        return control.link(*e.target, down=e.kind == "link_down")
    if e.kind in ("switch_down", "switch_up"):
        return control.switch(e.target[0], down=e.kind == "switch_down")
    return control.gray(*e.target, loss=e.loss)


class Executor:
    """Runs events at ``t0 + at`` on ``clock``; ``wait(seconds)`` blocks (True: stop asked).

    The root glue runs :meth:`run` in a thread with ``time.time`` and a ``threading.Event``'s wait (a
    deadline, not a fixed sleep: :meth:`stop` ends it at once); the tests give a fake clock.
    """

    def __init__(self, events: list[Event], control, clock=time.time, wait=None):
        self.events, self.control, self.clock = list(events), control, clock
        self._stop = threading.Event()
        self.wait = wait or self._stop.wait
        self.log: list[dict] = []
        self.done: list[Event] = []
        self.error: str | None = None

    def stop(self) -> None:
        self._stop.set()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def run(self, t0: float) -> list[dict]:
        """Execute every event at its time after ``t0``; log planned and actual times (s after t0)."""
        for e in self.events:
            delay = t0 + e.at - self.clock()
            if delay > 0 and self.wait(delay):
                break
            if self._stop.is_set():
                break
            started = self.clock()
            try:
                answer = apply(self.control, e)
            except Exception as exc:  # noqa: BLE001 - reported by the runner, which then restores the fabric
                self.error = f"{e.describe()}: {type(exc).__name__}: {exc}"
                break
            self.done.append(e)
            self.log.append({"event": e.describe(), "kind": e.kind, "target": list(e.target), "loss": e.loss,
                             "planned_s": e.at, "at_s": round(started - t0, 6),
                             "took_s": round(self.clock() - started, 6), "answer": answer})
        return self.log


def windows(log: list[dict], end_s: float, grace_s: float) -> list[tuple[float, float]]:
    """Intervals (s after t0) in which losses are the experiment: from a link/switch going down (or a gray
    loss starting) to its coming back (or ``end_s``), and ``grace_s`` after every event (a loss is seen one
    QP timeout later, and routes converge after an ``up`` too); merged and sorted."""
    spans, opened = [], {}
    for x in log:
        key = (x["kind"].split("_")[0] if x["kind"] != "gray" else "gray", tuple(sorted(x["target"])))
        t = x["at_s"]
        spans.append((t, t + x["took_s"] + grace_s))
        starts = x["kind"].endswith("down") or (x["kind"] == "gray" and x["loss"] > 0)
        if starts:
            opened.setdefault(key, t)
        elif key in opened:
            spans.append((opened.pop(key), t + x["took_s"] + grace_s))
    spans += [(t, max(end_s, t) + grace_s) for t in opened.values()]
    merged: list[list[float]] = []
    for a, b in sorted(spans):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return [(a, b) for a, b in merged]


def split_timeouts(times_s: list[float], spans: list[tuple[float, float]]) -> tuple[int, int]:
    """(inside, outside) the failure windows, for QP timeouts at ``times_s`` (s after t0)."""
    inside = sum(1 for t in times_s if any(a <= t <= b for a, b in spans))
    return inside, len(times_s) - inside


def longest_outage(events: list[Event], horizon_s: float) -> float:
    """The longest time a link or switch stays down (until ``horizon_s`` when never brought back)."""
    opened, longest = {}, 0.0
    for e in events:
        if e.kind.endswith("down"):
            opened.setdefault(_key(e), e.at)
        elif e.kind.endswith("up") and _key(e) in opened:
            longest = max(longest, e.at - opened.pop(_key(e)))
    for t in opened.values():
        longest = max(longest, horizon_s - t)
    return longest


def retry_budget(events: list[Event], qp_timeout_s: float, horizon_s: float, floor: int = 7) -> int:
    """QP retries that outlast the longest outage (a QP retries every ``qp_timeout_s``, no back-off) plus
    two for the reroute and the first loss; at least ``floor`` (the IB default, 7)."""
    return max(floor, math.ceil(longest_outage(events, horizon_s) / qp_timeout_s) + 2)


def timeout_verdict(failed: dict, timeout_times: list[float], end: float, qp_timeout_s: float) -> dict:
    """QP timeouts (wall-clock times) split by the failure windows of ``failed`` (a driver's record with
    ``t0`` and ``log``); the grace is two QP timeouts (the loss is seen one timeout late, and the first
    retransmission may meet routes still converging)."""
    t0 = failed.get("t0")
    if t0 is None:
        return {"windows_s": [], "timeouts_inside": 0, "timeouts_outside": len(timeout_times)}
    spans = windows(failed["log"], end - t0, 2 * qp_timeout_s)
    inside, outside = split_timeouts([t - t0 for t in timeout_times], spans)
    return {"windows_s": [[round(a, 4), round(b, 4)] for a, b in spans], "timeouts_inside": inside,
            "timeouts_outside": outside}


def cuts(log: list[dict], end_s: float) -> list[dict]:
    """Every failure that ran (a link or switch down, a gray loss starting), with its repair from the same
    ``log`` (an :class:`Executor`'s, times in s after t0): ``down_s``, ``up_s`` (``end_s`` when nothing
    brought it back during the run: ``repaired`` False), the events' texts and ``log_index`` (the down's
    place in ``log``, for :func:`down_after`), in the order they ran."""
    out, opened = [], {}
    for n, x in enumerate(log):
        kind = "gray" if x["kind"] == "gray" else x["kind"].split("_")[0]
        key = (kind, tuple(sorted(x["target"])))
        starts = x["kind"].endswith("down") or (x["kind"] == "gray" and x["loss"] > 0)
        if starts and key not in opened:
            opened[key] = len(out)
            out.append({"event": x["event"], "kind": kind, "target": list(x["target"]), "loss": x["loss"],
                        "down_s": x["at_s"], "up_s": end_s, "up_event": None, "repaired": False, "log_index": n})
        elif not starts and key in opened:
            cut = out[opened.pop(key)]
            cut.update(up_s=x["at_s"], up_event=x["event"], repaired=True)
    return out


def links_of(graph, kind: str, target) -> list[tuple]:
    """The links a failure takes down: the link itself, or every link of a crashed switch (gray: none)."""
    if kind == "link":
        return [tuple(target)]
    if kind == "switch":
        return [(target[0], n) for n in graph.neighbors(target[0])]
    return []


def down_after(log: list[dict], i: int, graph) -> list[tuple]:
    """The links down right after ``log[i]`` ran (every link and switch failure still open then)."""
    down: dict = {}
    for x in log[:i + 1]:
        if x["kind"] == "gray":
            continue
        kind = x["kind"].split("_")[0]
        key = (kind, tuple(sorted(x["target"])))
        if x["kind"].endswith("down"):
            down[key] = links_of(graph, kind, x["target"])
        else:
            down.pop(key, None)
    return list(dict.fromkeys(link for links in down.values() for link in links))
