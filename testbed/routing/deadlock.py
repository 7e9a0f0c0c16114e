"""PFC deadlock analysis: the buffer-dependency graph of a routing, per priority, and its cycles.

With PFC a full ingress buffer pauses the upstream port, so a frame held in one buffer waits for room in
the next. Name a buffer by the channel that fills it, ``(u, v)`` = "the ingress queue of switch ``v`` for
frames from ``u``". A frame that arrives at ``v`` from ``u`` and is forwarded to ``w`` makes ``(u, v)`` depend
on ``(v, w)``::

      u ---> v ---> w          (u, v) --waits for--> (v, w)

A cycle in this graph, per lossless priority, is a possible deadlock: every buffer of the cycle can be full
and paused by the next one, and nothing moves (Hu et al., "Deadlocks in Datacenter Networks: Why Do They
Form, and How to Avoid Them", HotNets'16; Tagger, CoNEXT'17). A ring or torus under shortest-path routing
closes such a cycle; an up-down Clos routing cannot (every dependency goes up then down, never up again);
a Clos whose failover reroute goes up-down-up can.

Routes come from the routing brain (:class:`testbed.routing.brain.Route`, or its ``route_dict`` form): per
switch and destination prefix, the next-hop ports. Channels into hosts are sinks (a NIC consumes), so only
switch-to-switch channels can be in a cycle. Every lossless priority gets its own graph (its own buffers);
the brain routes all priorities alike unless the caller passes routes per priority.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

from testbed.topo.graph import HOST, neighbour_on_port


def _fields(route) -> tuple:
    """(switch, prefix, ports, backup ports) of a Route or a route_dict."""
    if isinstance(route, dict):
        return (route["switch"], route["prefix"], tuple(route["ports"]),
                tuple(int(b) for b in (route.get("backups") or {}).values()))
    return route.switch, route.prefix, tuple(route.ports), tuple(b for _, b in route.backups)


def next_hops(G: nx.Graph, routes, backups: bool = False) -> dict:
    """``{prefix: {switch: [neighbour, ...]}}`` from routes.

    Args:
        backups: also count the fast-failover backup ports (what the data plane uses between a failure
            and the recomputation).
    """
    out: dict = {}
    for r in routes:
        switch, prefix, ports, backup_ports = _fields(r)
        ports = ports + (backup_ports if backups else ())
        hops = out.setdefault(prefix, {}).setdefault(switch, [])
        for p in ports:
            n = neighbour_on_port(G, switch, p)
            if n not in hops:
                hops.append(n)
    return out


def dependency_graph(G: nx.Graph, routes, backups: bool = False) -> nx.DiGraph:
    """The buffer-dependency graph of one priority: nodes ``(u, v)`` channels, edges "waits for".

    Each edge records the prefixes that create it (``prefixes`` attribute), to explain a cycle.
    """
    switches = {n for n in G.nodes if G.nodes[n].get("role") != HOST}
    return dependencies(next_hops(G, routes, backups), switches)


def dependencies(table: dict, switches) -> nx.DiGraph:
    """The dependency graph of a next-hop table ``{destination: {switch: [next node, ...]}}``.

    The form any forwarding model reduces to (the brain's routes via :func:`next_hops`, or a simulator's
    static routes); ``switches`` are the nodes with buffers that PFC can fill.
    """
    D = nx.DiGraph()
    for prefix, hops_of in table.items():
        for v, outs in hops_of.items():
            ups = [u for u, hops in hops_of.items() if v in hops and u in switches]
            for u in ups:
                for w in outs:
                    if w not in switches:
                        continue
                    if D.has_edge((u, v), (v, w)):
                        D.edges[(u, v), (v, w)]["prefixes"].add(prefix)
                    else:
                        D.add_edge((u, v), (v, w), prefixes={prefix})
    return D


@dataclass(frozen=True)
class Deadlock:
    """One cyclic buffer dependency: a witness cycle and the size of its strongly connected component.

    Attributes:
        priority: the lossless priority.
        cycle: channels ``(u, v)`` of one cycle, in order (the last waits for the first).
        component: number of channels in its strongly connected component.
        prefixes: destination prefixes whose routes make the cycle.
    """

    priority: int
    cycle: tuple
    component: int
    prefixes: tuple

    def as_dict(self) -> dict:
        return {"priority": self.priority, "cycle": [list(c) for c in self.cycle], "component": self.component,
                "prefixes": list(self.prefixes)}

    def describe(self) -> str:
        hops = [c[0] for c in self.cycle] + [self.cycle[0][0]]
        return f"priority {self.priority}: {' -> '.join(map(str, hops))} ({self.component} channels cyclic)"


def find_deadlocks(G: nx.Graph, routes, priorities=(3,), backups: bool = False) -> list[Deadlock]:
    """Cyclic buffer dependencies of ``routes`` for each lossless priority (one witness per component).

    Args:
        routes: Route objects or route dicts, used for every priority; or ``{priority: routes}``.
        priorities: the lossless priorities (each has its own buffers).
        backups: include fast-failover backup ports as possible next hops.

    Returns:
        one :class:`Deadlock` per cyclic strongly connected component per priority; empty = deadlock-free.
    """
    per_priority = routes if isinstance(routes, dict) else {p: routes for p in priorities}
    return cycles({p: dependency_graph(G, per_priority.get(p, ()), backups) for p in priorities})


def cycles(graphs: dict) -> list[Deadlock]:
    """One :class:`Deadlock` per cyclic strongly connected component of each ``{priority: graph}``."""
    found = []
    for p, D in graphs.items():
        for comp in nx.strongly_connected_components(D):
            if len(comp) == 1 and not any(D.has_edge(c, c) for c in comp):
                continue
            edges = nx.find_cycle(D.subgraph(comp))
            cycle = tuple(a for a, _ in edges)
            prefixes = set()
            for a, b in edges:
                prefixes |= D.edges[a, b]["prefixes"]
            found.append(Deadlock(p, cycle, len(comp), tuple(sorted(prefixes))))
    found.sort(key=lambda d: (d.priority, -d.component, d.cycle))
    return found
