"""A running BMv2 fabric under the routing brain, with failover: the glue between a Replica, the driver
(:mod:`testbed.p4rt.failover`) and the port watcher (:mod:`testbed.p4rt.linkwatch`).

    with p4_failover(rep, RoutingBrain(rep.G), events=out/"p4-events.jsonl") as fo:   # program every switch, start watching
        ...  ip link set <intf> down  ->  fo.fabric.events[-1]   (also one JSON line per event)

Used by ``testbed up --p4 fabric`` (so ``testbed fail link A B`` on it fails over), by ``testbed bench
failover --cases p4`` and by its integration test.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

from testbed.topo.graph import HOST


def switch_ends(rep) -> dict:
    """``{(u, v): [switch-side interface names]}`` of every link of the replica (pure given the plan)."""
    G = rep.G
    out = {}
    for u, v in G.edges:
        out[(u, v)] = [rep.intf_name(n, m) for n, m in ((u, v), (v, u)) if G.nodes[n].get("role") != HOST]
    return out


@contextmanager
def p4_failover(rep, brain, events: Path | None = None, resync_s: float | None = None):
    """Program ``rep``'s BMv2 switches from the routing brain ``brain`` (a ``RoutingBrain(rep.G)``) and keep
    them on it while links come and go.

    Yields an object with ``fabric`` (:class:`~testbed.p4rt.failover.P4Fabric`) and ``watcher``
    (:class:`~testbed.p4rt.linkwatch.LinkWatcher`). The watcher stops before the caller tears the replica
    down (its ports going away are not failures).
    """
    from testbed.p4rt.failover import P4Fabric
    from testbed.p4rt.linkwatch import RESYNC_S, LinkWatcher
    from testbed.topo.graph import switches

    G = rep.G
    sws = list(switches(G))
    clients = {s: rep.switch(s).client() for s in sws}
    sink = None
    if events is not None:
        events = Path(events)
        events.parent.mkdir(parents=True, exist_ok=True)
        sink = events.open("a", buffering=1)

    def record(ev):
        if sink is not None:
            sink.write(json.dumps(ev.as_dict()) + "\n")

    live = SimpleNamespace(fabric=None, watcher=None)
    try:
        live.fabric = P4Fabric(G, clients, brain, on_event=record)
        live.fabric.program()
        live.watcher = LinkWatcher(live.fabric, switch_ends(rep),
                                   alive={s: rep.switch(s).connected for s in sws},
                                   pids={s: rep.switch(s).process.proc.pid for s in sws},
                                   resync_s=RESYNC_S if resync_s is None else resync_s).start()
        try:
            yield live
        finally:
            live.watcher.stop()
    finally:
        for c in clients.values():
            c.close()
        if sink is not None:
            sink.close()


def read_events(path: Path) -> list[dict]:
    """The events a running replica's driver wrote (one JSON document per line; a torn last line skipped)."""
    out = []
    try:
        lines = Path(path).read_text().splitlines()
    except FileNotFoundError:
        return out
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def find_event(docs: list[dict], kind: str, target, after: float) -> dict | None:
    """The first event of ``kind`` on ``target`` (a link's two ends in any order, or a switch) seen at or
    after ``after`` (pure)."""
    want = set(target)
    for d in docs:
        if d["kind"] == kind and set(d["target"]) == want and d["detected"] >= after:
            return d
    return None
