"""The routing brain: one pure ECMP core that every southbound driver consumes.

From the fabric graph it computes, for every switch and every destination host, the set of equal-cost
next-hop ports (a shortest-path DAG rooted at the destination), plus a precomputed loop-free backup per
primary port for fast-failover groups. When links or switches fail or return it recomputes only the
destinations the change can affect and returns the difference as add/modify/delete :class:`Route` lists.

    graph --> RoutingBrain --(RouteDiff: add/modify/delete Route)--> controllers/ (OpenFlow groups)
                  ^                                               \\-> testbed/p4rt/ (BMv2 tables)
                  |  link_down/link_up/switch_down/switch_up(now)
                  +-- port-status events, ``testbed fail ...``

Hosts are never transit: paths to destination ``d`` only use switches and ``d`` itself. Routes are per host
(``ip/32``); the southbound side rewrites the destination MAC on the last hop so that hosts with a gateway
in their address plan work too. Nothing here starts processes or needs root; time is an argument (``now``),
FAUCET style, so tests drive it with fake clocks.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import networkx as nx

from testbed.errors import SpecError
from testbed.topo.graph import HOST, hosts, port, switches


@dataclass(frozen=True)
class Route:
    """Forwarding state of one switch for one destination prefix.

    Attributes:
        switch: switch node name.
        prefix: destination prefix, ``"10.0.1.2/32"``.
        dest: destination host node.
        group: group id, the same on every switch for one destination (one allocator: host order).
        ports: sorted equal-cost next-hop ports (the ECMP group members).
        backups: ``((primary, backup), ...)`` a loop-free alternative per primary port, where one exists.
        last_hop: the (single) port faces ``dest`` itself; drivers rewrite the Ethernet destination.
    """

    switch: str
    prefix: str
    dest: str
    group: int
    ports: tuple[int, ...]
    backups: tuple[tuple[int, int], ...] = ()
    last_hop: bool = False

    @property
    def key(self) -> tuple[str, str]:
        return (self.switch, self.prefix)

    def backup_for(self, primary: int) -> int | None:
        return dict(self.backups).get(primary)


@dataclass(frozen=True)
class RouteDiff:
    """What changed; a driver applies ``delete`` then ``add`` then ``modify`` (order within is free)."""

    add: tuple[Route, ...] = ()
    modify: tuple[Route, ...] = ()
    delete: tuple[Route, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.add or self.modify or self.delete)

    def __len__(self) -> int:
        return len(self.add) + len(self.modify) + len(self.delete)

    def switches(self) -> set[str]:
        return {r.switch for r in (*self.add, *self.modify, *self.delete)}

    def as_dict(self) -> dict:
        return {k: [route_dict(r) for r in getattr(self, k)] for k in ("add", "modify", "delete")}


@dataclass
class Event:
    """A topology event the brain processed (for the status API and scenarios)."""

    now: float
    kind: str  # link_down | link_up | switch_down | switch_up
    target: tuple
    destinations: int  # destinations recomputed
    changes: int  # routes added + modified + deleted

    def as_dict(self) -> dict:
        return {"time": self.now, "kind": self.kind, "target": list(self.target),
                "destinations_recomputed": self.destinations, "route_changes": self.changes}


def route_dict(r: Route) -> dict:
    return {"switch": r.switch, "prefix": r.prefix, "dest": r.dest, "group": r.group, "ports": list(r.ports),
            "backups": {str(p): b for p, b in r.backups}, "last_hop": r.last_hop}


def host_prefix(G: nx.Graph, host) -> str:
    """``ip/32`` of a host; raises SpecError naming the node when the address plan lacks it."""
    ip = G.nodes[host].get("ip")
    if not ip:
        raise SpecError(f"nodes.{host}.ip", "host has no address (run topo.addressing first)")
    return f"{ip}/32"


def _edge_key(a, b) -> frozenset:
    return frozenset((a, b))


@dataclass(frozen=True)
class Target:
    """One destination prefix and where its routes live.

    Attributes:
        prefix: ``ip/32`` of a host, or a first-tier switch's aggregate (``10.0.3.0/30``).
        root: node the shortest-path DAG is rooted at (the host, or the first-tier switch).
        dest: :attr:`Route.dest` (the host, or the first-tier switch of an aggregate).
        group: group id (one allocator: hosts 1..N in graph order, then aggregates).
        only: switches that get this route (None: every switch that can reach ``root``).
    """

    prefix: str
    root: object
    dest: object
    group: int
    only: frozenset | None = None


def aggregates(G: nx.Graph) -> dict:
    """First-tier switch -> (prefix, its hosts) where the address plan allows one prefix per switch.

    A switch qualifies when it has at least two single-homed hosts and the smallest IPv4 network holding
    all their addresses holds no other host (``testbed.topo.addressing`` gives each ToR its own block,
    e.g. ``10.0.3.1``, ``10.0.3.2`` -> ``10.0.3.0/30``).
    """
    import ipaddress

    hs = hosts(G)
    under: dict = {}
    for h in hs:
        nbrs = list(G.neighbors(h))
        if len(nbrs) == 1 and G.nodes[h].get("ip"):
            under.setdefault(nbrs[0], []).append(h)
    addr = {h: int(ipaddress.IPv4Address(G.nodes[h]["ip"])) for h in hs if G.nodes[h].get("ip")}
    out = {}
    for sw, members in under.items():
        if len(members) < 2:
            continue
        lo, hi = min(addr[h] for h in members), max(addr[h] for h in members)
        plen = 32 - (lo ^ hi).bit_length()
        net = ipaddress.IPv4Network((lo >> (32 - plen) << (32 - plen), plen))
        if any(int(net.network_address) <= a <= int(net.broadcast_address) for h, a in addr.items()
               if h not in members):
            continue
        out[sw] = (str(net), members)
    return out


@dataclass
class RoutingBrain:
    """Holds the fabric, what is down, and the current routes; every change returns a :class:`RouteDiff`.

    Args:
        G: the fabric graph (see testbed/topo/graph.py): hosts with ``ip``, edges with ``ports``.
        aggregate: route to each first-tier switch's block of hosts with one prefix where the address plan
            allows (:func:`aggregates`); host ``/32`` routes then live only on that switch. Routes of an
            aggregate have the switch as ``dest`` (drivers that need a host MAC per route leave this off).
    """

    G: nx.Graph
    down_links: set = field(default_factory=set)
    down_switches: set = field(default_factory=set)
    routes: dict = field(default_factory=dict)  # (switch, prefix) -> Route
    events: list = field(default_factory=list)
    aggregate: bool = False

    def __post_init__(self):
        self._hosts = hosts(self.G)
        self._switches = set(switches(self.G))
        if not self._hosts:
            raise SpecError("nodes", "the fabric has no hosts (role 'host')")
        for a, b, d in self.G.edges(data=True):
            ports = d.get("ports") or {}
            if a not in ports or b not in ports:
                raise SpecError(f"edges.{a}-{b}.ports", "every edge needs a port number for both ends")
        self._group = {h: i + 1 for i, h in enumerate(self._hosts)}
        self._prefix = {h: host_prefix(self.G, h) for h in self._hosts}
        blocks = aggregates(self.G) if self.aggregate else {}
        under = {h: sw for sw, (_, members) in blocks.items() for h in members}
        self.targets: list[Target] = [Target(self._prefix[h], h, h, self._group[h],
                                             frozenset({under[h]}) if h in under else None)
                                      for h in self._hosts]
        self.targets += [Target(prefix, sw, sw, len(self._hosts) + i + 1)
                         for i, (sw, (prefix, _)) in enumerate(blocks.items())]
        self._dist: dict = {}  # prefix -> {node: hops}
        self._live: nx.Graph | None = None

    # ---------------------------------------------------------------- queries
    def group_id(self, dest) -> int:
        return self._group[dest]

    def prefix(self, dest) -> str:
        return self._prefix[dest]

    def live_graph(self) -> nx.Graph:
        """The fabric minus what is down (cached until the next event)."""
        if self._live is None:
            live = nx.Graph()
            live.add_nodes_from(n for n in self.G.nodes if n not in self.down_switches)
            live.add_edges_from((a, b) for a, b in self.G.edges
                                if a in live and b in live and _edge_key(a, b) not in self.down_links)
            self._live = live
        return self._live

    def is_link_up(self, a, b) -> bool:
        return _edge_key(a, b) not in self.down_links

    def tables(self) -> dict:
        """``{switch: {prefix: Route}}``, the form a pipeline model or a driver walks."""
        out: dict = {s: {} for s in self._switches}
        for (sw, prefix), r in self.routes.items():
            out[sw][prefix] = r
        return out

    def equal_cost_paths(self, src, dst) -> list[list]:
        """All equal-cost shortest paths src -> dst over live links, hosts not transit."""
        live = self.live_graph()
        allowed = (self._switches - self.down_switches) | {src, dst}
        sub = live.subgraph(n for n in live if n in allowed)
        try:
            return sorted(nx.all_shortest_paths(sub, src, dst))
        except (nx.NetworkXNoPath, nx.NodeNotFound):
            return []

    # ---------------------------------------------------------------- computation
    def _distances(self, root) -> dict:
        """BFS hop counts to ``root`` over live switches (hosts other than root are not transit)."""
        live = self.live_graph()
        dist = {root: 0}
        if root not in live:
            return dist
        queue = deque([root])
        while queue:
            n = queue.popleft()
            for m in live[n]:
                if m in dist or self.G.nodes[m].get("role") == HOST:
                    continue
                dist[m] = dist[n] + 1
                queue.append(m)
        return dist

    def _routes_for(self, t: Target) -> dict:
        """Routes of every switch towards target ``t`` (and caches the distances)."""
        live = self.live_graph()
        dist = self._distances(t.root)
        self._dist[t.prefix] = dist
        nexthops = {}
        for s, d in dist.items():
            if s == t.root:
                continue
            nexthops[s] = sorted(m for m in live[s] if dist.get(m) == d - 1)
        out = {}
        for s, nhs in nexthops.items():
            if t.only is not None and s not in t.only:
                continue
            ports = tuple(sorted(port(self.G, s, m) for m in nhs))
            out[(s, t.prefix)] = Route(
                switch=s, prefix=t.prefix, dest=t.dest, group=t.group, ports=ports,
                backups=self._backups(s, t.root, ports, dist, nexthops),
                last_hop=nhs == [t.dest] and self.G.nodes[t.dest].get("role") == HOST)
        return out

    def _backups(self, s, dest, ports, dist, nexthops) -> tuple:
        """A loop-free alternative port per primary port.

        ECMP members back each other up (round robin). A single next hop gets the neighbour ``n`` with the
        lowest distance such that forwarding from ``n`` never returns to ``s``: on the shortest-path DAG
        that holds when ``dist[n] <= dist[s]`` or ``s`` is not one of ``n``'s next hops (RFC 5286 LFA
        condition, specialised to hop counts). In a fat-tree downlinks have none; that is the point of
        recomputation.
        """
        if len(ports) > 1:
            return tuple((p, ports[(i + 1) % len(ports)]) for i, p in enumerate(ports))
        if not ports:
            return ()
        live = self.live_graph()
        primary = ports[0]
        candidates = []
        for n in live[s]:
            if n not in dist or n == dest or port(self.G, s, n) == primary:
                continue
            if self.G.nodes[n].get("role") == HOST:
                continue
            if dist[n] <= dist[s] or s not in nexthops.get(n, ()):
                candidates.append((dist[n], port(self.G, s, n)))
        if not candidates:
            return ()
        return ((primary, min(candidates)[1]),)

    def compute_all(self, now: float = 0.0) -> RouteDiff:
        """Recompute every destination; the first call returns everything as ``add``."""
        return self._recompute(self.targets, now, "full", ())

    def _recompute(self, targets, now: float, kind: str, target: tuple) -> RouteDiff:
        self._live = None
        targets = list(dict.fromkeys(targets))
        new: dict = {}
        for t in targets:
            new.update(self._routes_for(t))
        prefixes = {t.prefix for t in targets}
        old = {k: r for k, r in self.routes.items() if k[1] in prefixes}
        add = tuple(new[k] for k in sorted(new.keys() - old.keys()))
        delete = tuple(old[k] for k in sorted(old.keys() - new.keys()))
        modify = tuple(new[k] for k in sorted(new.keys() & old.keys()) if new[k] != old[k])
        for r in delete:
            del self.routes[r.key]
        self.routes.update(new)
        diff = RouteDiff(add=add, modify=modify, delete=delete)
        if kind != "full":
            self.events.append(Event(now, kind, target, len(targets), len(diff)))
        return diff

    # ---------------------------------------------------------------- events
    def _check_link(self, a, b):
        if not self.G.has_edge(a, b):
            raise SpecError("link", f"no link {a} - {b} in the fabric")

    def _check_switch(self, s):
        if s not in self._switches:
            raise SpecError("switch", f"{s!r} is not a switch of the fabric")

    def link_down(self, a, b, now: float) -> RouteDiff:
        """Link ``a``-``b`` failed: recompute destinations whose DAG or backups used it."""
        self._check_link(a, b)
        key = _edge_key(a, b)
        if key in self.down_links:
            return RouteDiff()
        affected = [t for t in self.targets if self._uses_link(t, a, b)]
        self.down_links.add(key)
        return self._recompute(affected, now, "link_down", (a, b))

    def link_up(self, a, b, now: float) -> RouteDiff:
        """Link ``a``-``b`` returned: recompute destinations for which it can be a next hop or backup."""
        self._check_link(a, b)
        key = _edge_key(a, b)
        if key not in self.down_links:
            return RouteDiff()
        self.down_links.discard(key)
        affected = []
        for t in self.targets:
            dist = self._dist.get(t.prefix, {})
            if not (self._eligible(t.root, a) and self._eligible(t.root, b)):
                continue
            if a in dist or b in dist:
                affected.append(t)
        return self._recompute(affected, now, "link_up", (a, b))

    def switch_down(self, s, now: float) -> RouteDiff:
        """Switch ``s`` failed: its routes go, and every destination it could carry is recomputed."""
        self._check_switch(s)
        if s in self.down_switches:
            return RouteDiff()
        affected = [t for t in self.targets if s in self._dist.get(t.prefix, {})]
        self.down_switches.add(s)
        return self._recompute(affected, now, "switch_down", (s,))

    def switch_up(self, s, now: float) -> RouteDiff:
        self._check_switch(s)
        if s not in self.down_switches:
            return RouteDiff()
        self.down_switches.discard(s)
        return self._recompute(self.targets, now, "switch_up", (s,))

    def _eligible(self, root, n) -> bool:
        return n == root or self.G.nodes[n].get("role") != HOST

    def _uses_link(self, t: Target, a, b) -> bool:
        dist = self._dist.get(t.prefix, {})
        if a not in dist or b not in dist:
            return False
        if abs(dist[a] - dist[b]) == 1:
            return True
        pa = port(self.G, a, b)
        pb = port(self.G, b, a)
        ra = self.routes.get((a, t.prefix)) if a in self._switches else None
        rb = self.routes.get((b, t.prefix)) if b in self._switches else None
        return bool((ra and pa in dict(ra.backups).values()) or (rb and pb in dict(rb.backups).values()))
