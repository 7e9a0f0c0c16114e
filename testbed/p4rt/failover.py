"""The BMv2 southbound driver of the routing brain: programs a fabric.p4 fabric once, then follows every
link or switch event with incremental table updates.

    LinkWatcher (testbed/p4rt/linkwatch.py: netlink carrier events, BMv2 process exits)
        |  link_down(a, b) / link_up(a, b) / switch_down(s), with the time the event was seen
        v
    P4Fabric --brain.link_down(...)--> RouteDiff --incremental.diff_ops--> TableOp per switch
        |                                                                      |
        |  record: {switch: {entry_key: (TableEntry, handle)}}                 v
        +-------------------------------------------------------------> SwitchClient (Thrift)
                                                                        add / modify / delete

There is one routing algorithm, :class:`testbed.routing.brain.RoutingBrain`: this module only translates
its differences (the OpenFlow driver is ``controllers/ofrules.py``). The switches an event concerns most
(the ends of the failed link, or a dead switch's neighbours) are updated first. Each event leaves a
record (:class:`P4Event`) with the wall-clock times of detection, the brain's answer and the last table
write, so an outage can be split into detection, compute and programming.

Writes are pipelined (:meth:`testbed.p4rt.client.SwitchClient.send_writes`): every switch's batch is sent
before any answer is read, so a repair costs about one Thrift round trip rather than one per entry (on
this loaded 2-core machine a round trip is a scheduling delay: ~2 ms each, measured, when sent one by
one). The clients only need ``apply``, ``send_writes``, ``recv_writes`` and ``mirroring_add``; the unit
tests pass a fake. Nothing here needs root.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Mapping

from testbed.p4rt import entries as E
from testbed.p4rt.incremental import TableOp, diff_ops, entry_key
from testbed.topo.graph import switches


@dataclass
class P4Event:
    """One event the driver handled (times: wall clock, seconds)."""

    kind: str  # link_down | link_up | switch_down
    target: tuple
    detected: float  # when the watcher saw it (or the caller said it happened)
    computed: float  # the brain's diff ready
    programmed: float  # last table write done
    route_changes: int
    ops: dict = field(default_factory=dict)  # {switch: {"add": n, "modify": n, "delete": n, "done_ms": t}}
    errors: list = field(default_factory=list)

    @property
    def table_ops(self) -> int:
        return sum(v["add"] + v["modify"] + v["delete"] for v in self.ops.values())

    def as_dict(self) -> dict:
        doc = asdict(self)
        doc["target"] = list(self.target)
        doc["table_ops"] = self.table_ops
        doc["compute_ms"] = (self.computed - self.detected) * 1e3
        doc["program_ms"] = (self.programmed - self.computed) * 1e3
        return doc


class P4Fabric:
    """A fabric of fabric.p4 switches kept on the routing brain's routes.

    Args:
        G: the fabric graph (the plan's: hosts with ``ip``/``mac``, switches with ``dpid``, edges ``ports``).
        clients: ``{switch: SwitchClient}`` (one connection each, used from one thread at a time).
        brain: the routing brain of ``G`` (``testbed.routing.brain.RoutingBrain(G)``), passed in by the
            caller: this driver never computes a route itself (and testbed.p4rt stays below testbed.routing
            in the import graph).
        on_event: called with every :class:`P4Event` (e.g. to append it to a file).
        clock: wall clock (tests pass a fake).
    """

    def __init__(self, G, clients: Mapping, brain, on_event: Callable | None = None, clock: Callable = time.time):
        self.G = G
        self.clients = dict(clients)
        self.brain = brain
        self.installed: dict = {sw: {} for sw in switches(G)}  # {switch: {key: (TableEntry, handle)}}
        self.events: list[P4Event] = []
        self.on_event = on_event
        self.clock = clock
        self.lock = threading.Lock()

    # ---------------------------------------------------------------- programming
    def tables(self) -> dict:
        """``{switch: {entry_key: TableEntry}}``: what the driver has written to each switch."""
        return {sw: {k: e for k, (e, _) in t.items()} for sw, t in self.installed.items()}

    def program(self) -> None:
        """Compute every route and give each switch its whole program (once, at start)."""
        with self.lock:
            self.brain.compute_all(self.clock())
            for sw in sorted(self.clients):
                self._program_switch(sw)

    def _program_switch(self, sw) -> None:
        prog = E.fabric_program(self.G, sw, self.brain.tables().get(sw, {}).values())
        client = self.clients[sw]
        handles = client.apply(prog.entries)
        self.installed[sw] = {entry_key(e): (e, h) for e, h in zip(prog.entries, handles, strict=True)}
        for session_id, port in prog.mirrors:
            client.mirroring_add(session_id, port)

    def _writes(self, sw, ops: list[TableOp]) -> list[tuple]:
        """The client's write tuples for ``ops`` (handles of modified and deleted entries from the record)."""
        have = self.installed[sw]
        out = []
        for op in ops:
            e = op.entry
            if op.kind == "add":
                out.append(("add", e.table, e.action, e.match, e.params, e.priority))
            elif op.kind == "modify":
                out.append(("modify", e.table, e.action, have[op.key][1], e.params))
            else:
                out.append(("delete", e.table, have[op.key][1]))
        return out

    def _record(self, sw, ops: list[TableOp], results: list, ev: P4Event) -> None:
        """Update the record of ``sw`` with the writes that succeeded; count them; note the failures."""
        have = self.installed[sw]
        counts = {"add": 0, "modify": 0, "delete": 0}
        for i, op in enumerate(ops):
            res = results[i] if i < len(results) else None
            if i >= len(results) or isinstance(res, Exception):
                ev.errors.append(f"{sw}: {op.render()}: {res if i < len(results) else 'not sent'}")
                continue
            if op.kind == "add":
                have[op.key] = (op.entry, res)
            elif op.kind == "modify":
                have[op.key] = (op.entry, have[op.key][1])
            else:
                del have[op.key]
            counts[op.kind] += 1
        counts["done_ms"] = (self.clock() - ev.detected) * 1e3
        ev.ops[sw] = counts

    def _apply(self, kind: str, target: tuple, detected: float, diff, first=()) -> P4Event:
        """Send every switch its operations (pipelined: all switches' batches go out before any answer is
        read, so the switches apply them in parallel), then collect the answers, ``first`` switches first."""
        computed = self.clock()
        ops = diff_ops(self.G, diff, self.tables(), skip=self.brain.down_switches)
        order = [s for s in first if s in ops] + [s for s in sorted(ops) if s not in first]
        ev = P4Event(kind, tuple(target), detected, computed, computed, len(diff))
        sent = {}
        for sw in order:
            try:
                sent[sw] = self.clients[sw].send_writes(self._writes(sw, ops[sw]))
            except Exception as exc:  # noqa: BLE001 - one switch failing must not stop the others' repair
                ev.errors.append(f"{sw}: {exc}")
        for sw in order:
            if sw in sent:
                self._record(sw, ops[sw], self.clients[sw].recv_writes(sent[sw]), ev)
        ev.programmed = self.clock()
        self.events.append(ev)
        if self.on_event is not None:
            self.on_event(ev)
        return ev

    # ---------------------------------------------------------------- events
    def link_down(self, a, b, detected: float | None = None) -> P4Event:
        with self.lock:
            t = self.clock() if detected is None else detected
            return self._apply("link_down", (a, b), t, self.brain.link_down(a, b, t), first=(a, b))

    def link_up(self, a, b, detected: float | None = None) -> P4Event:
        with self.lock:
            t = self.clock() if detected is None else detected
            return self._apply("link_up", (a, b), t, self.brain.link_up(a, b, t), first=(a, b))

    def switch_down(self, s, detected: float | None = None) -> P4Event:
        """A switch died (its BMv2 process is gone): the others route around it; it is never written to."""
        with self.lock:
            t = self.clock() if detected is None else detected
            diff = self.brain.switch_down(s, t)
            self.installed[s] = {}
            return self._apply("switch_down", (s,), t, diff, first=tuple(sorted(self.G.neighbors(s))))
