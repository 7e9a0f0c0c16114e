"""Split a fabric over N worker machines (pure): small cut capacity, balanced packet load.

    graph G --contract hosts into their switch--> switch graph (node weight = estimated load,
        |                                                     edge weight = link capacity)
        +--recursive bisection (greedy graph growing + Fiduccia-Mattheyses refinement)--> parts 0..N-1
        +--> Partition: node -> worker, cut links (each one a VXLAN tunnel, VNI from the one allocator)

Why this shape:

* A host never sits on another machine than its switch: its NIC link is the one link a tunnel would
  make slower than the real thing, and every packet it sends would cross the underlay.
* The *cut capacity* (sum of the real rates of the cut links) is what the underlay must carry in the
  worst case, so it is the quantity minimised, not the number of cut links.
* Machines are limited by packets forwarded, not by switches owned (``testbed bench p4``: ~20 kpps per
  machine for BMv2). A switch's *estimated load* is the number of host pairs whose shortest paths cross
  it (ECMP splits counted fractionally: networkx's ``betweenness_centrality_subset`` over hosts), i.e.
  its share of uniform all-to-all traffic; every switch also counts one unit (its process, its ports),
  so a part is never empty of work when loads are skewed. Parts are balanced on that load within
  ``imbalance`` of the fair share.

Recursive bisection handles any N (a part of N workers splits into N//2 and N - N//2 with the load in
that ratio). Everything is deterministic: ties are broken by the graph's node order, so every worker
computing the partition from the same spec gets the same answer.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

from testbed.errors import SpecError
from testbed.plan.alloc import Allocator
from testbed.topo.graph import HOST

#: Default tolerated load imbalance: each part within this fraction of its fair share.
DEFAULT_IMBALANCE = 0.10
#: Fiduccia-Mattheyses passes per bisection (each pass moves every node at most once).
FM_PASSES = 8


@dataclass(frozen=True)
class CutLink:
    """A link whose ends are on two workers: a VXLAN tunnel between them.

    Attributes:
        u, v: the graph edge (graph order); ``worker_u``/``worker_v`` hold them.
        capacity_bps: the link's real rate (what the cut's capacity sums).
        vni: the tunnel's VXLAN network identifier (unique in the fabric).
    """

    u: object
    v: object
    worker_u: int
    worker_v: int
    capacity_bps: float
    vni: int

    def worker_of(self, node) -> int:
        return self.worker_u if node == self.u else self.worker_v

    def other(self, node):
        return self.v if node == self.u else self.u


@dataclass(frozen=True)
class Partition:
    """Where every node of a fabric runs.

    Attributes:
        n: number of workers.
        assign: graph node -> worker index (0..n-1).
        cut: the cut links, in the graph's edge order.
        loads: estimated load per worker (same unit as :func:`node_loads`).
        imbalance: the tolerance the partition was made with.
    """

    n: int
    assign: dict
    cut: tuple
    loads: tuple
    imbalance: float

    @property
    def cut_capacity_bps(self) -> float:
        return sum(c.capacity_bps for c in self.cut)

    def nodes(self, worker: int) -> list:
        return [n for n, w in self.assign.items() if w == worker]

    def load_spread(self) -> float:
        """Largest part's load over the fair share (1.0 = perfectly balanced)."""
        fair = sum(self.loads) / self.n
        return max(self.loads) / fair if fair else 1.0

    def to_json(self) -> dict:
        return {"workers": self.n, "imbalance": self.imbalance,
                "cut_capacity_bps": self.cut_capacity_bps, "load_spread": round(self.load_spread(), 4),
                "parts": [{"worker": w, "load": round(self.loads[w], 3),
                           "nodes": [str(x) for x in self.nodes(w)]} for w in range(self.n)],
                "cut": [{"u": str(c.u), "v": str(c.v), "worker_u": c.worker_u, "worker_v": c.worker_v,
                         "capacity_bps": c.capacity_bps, "vni": c.vni} for c in self.cut]}


def partition_from_json(doc: dict, G: nx.Graph) -> Partition:
    """The partition a coordinator sent (:meth:`Partition.to_json`), on this machine's graph of the spec.

    Raises:
        SpecError: it names nodes the graph does not have, or misses some.
    """
    by_name = {str(n): n for n in G.nodes}
    assign = {}
    for w, part in enumerate(doc["parts"]):
        for name in part["nodes"]:
            if name not in by_name:
                raise SpecError("job.partition", f"node {name!r} is not in this worker's graph of the spec")
            assign[by_name[name]] = w
    if len(assign) != G.number_of_nodes():
        raise SpecError("job.partition", f"assigns {len(assign)} of the graph's {G.number_of_nodes()} nodes")
    cut = tuple(CutLink(by_name[c["u"]], by_name[c["v"]], int(c["worker_u"]), int(c["worker_v"]),
                        float(c["capacity_bps"]), int(c["vni"])) for c in doc["cut"])
    for c in cut:
        if assign[c.u] != c.worker_u or assign[c.v] != c.worker_v:
            raise SpecError("job.partition", f"cut link {c.u}--{c.v} disagrees with the assignment")
    return Partition(int(doc["workers"]), {n: assign[n] for n in G.nodes}, cut,
                     tuple(float(p["load"]) for p in doc["parts"]), float(doc["imbalance"]))


def node_loads(G: nx.Graph) -> dict:
    """Estimated packet load of every switch (see the module docstring); hosts get 0."""
    hosts = [n for n, d in G.nodes(data=True) if d.get("role") == HOST]
    between = nx.betweenness_centrality_subset(G, hosts, hosts, normalized=False) if hosts else {}
    return {n: 0.0 if d.get("role") == HOST else 1.0 + between.get(n, 0.0) for n, d in G.nodes(data=True)}


def _capacity(G: nx.Graph, u, v) -> float:
    d = G.edges[u, v]
    rate = d.get("rate_bps")
    if rate is None and d.get("link") is not None:
        rate = getattr(d["link"], "rate_bps", None)
    return float(rate or 1.0)


def _contract(G: nx.Graph, loads: dict) -> tuple[nx.Graph, dict]:
    """The switch graph: each host folded into its one neighbour. Returns (H, host -> switch)."""
    owner = {}
    for n, d in G.nodes(data=True):
        if d.get("role") != HOST:
            continue
        nbrs = list(G.neighbors(n))
        if len(nbrs) != 1 or G.nodes[nbrs[0]].get("role") == HOST:
            raise SpecError(f"nodes.{n}", "a host must have exactly one link, to a switch, to be partitioned")
        owner[n] = nbrs[0]
    H = nx.Graph()
    for n, d in G.nodes(data=True):
        if d.get("role") != HOST:
            H.add_node(n, load=loads[n])
    for n, sw in owner.items():
        H.nodes[sw]["load"] += loads[n]
    for u, v in G.edges():
        if u in owner or v in owner:
            continue
        H.add_edge(u, v, capacity=H.edges[u, v]["capacity"] + _capacity(G, u, v) if H.has_edge(u, v)
                   else _capacity(G, u, v))
    return H, owner


def partition(G: nx.Graph, n: int, imbalance: float = DEFAULT_IMBALANCE, vni_base: int | None = None,
              field: str = "cluster.workers") -> Partition:
    """Partition ``G`` over ``n`` workers.

    Args:
        G: the fabric graph (``testbed.topo.spec.build_graph``).
        n: number of workers (1 .. number of switches).
        imbalance: tolerated load imbalance per part (fraction of its fair share).
        vni_base: first VXLAN network identifier (default: the allocator's).
        field: the field named in errors.

    Raises:
        SpecError: ``n`` out of range, a host with other than one link to a switch.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise SpecError(field, f"the number of workers must be an integer >= 1, got {n!r}")
    if not 0 < imbalance < 1:
        raise SpecError("cluster.imbalance", f"must be between 0 and 1 (e.g. 0.1), got {imbalance!r}")
    loads = node_loads(G)
    H, owner = _contract(G, loads)
    if n > H.number_of_nodes():
        raise SpecError(field, f"{n} workers for {H.number_of_nodes()} switches: each worker needs at least one "
                               "switch; use fewer workers")
    order = {node: i for i, node in enumerate(G.nodes)}
    parts = _split(H, list(H.nodes), n, imbalance, order)
    assign = {}
    for w, part in enumerate(parts):
        for node in part:
            assign[node] = w
    for host, sw in owner.items():
        assign[host] = assign[sw]
    assign = {node: assign[node] for node in G.nodes}
    alloc = Allocator(vni_base=vni_base) if vni_base is not None else Allocator()
    cut = tuple(CutLink(u, v, assign[u], assign[v], _capacity(G, u, v), alloc.vni())
                for u, v in G.edges() if assign[u] != assign[v])
    part_loads = tuple(sum(loads[x] for x, w in assign.items() if w == i) for i in range(n))
    return Partition(n, assign, cut, part_loads, imbalance)


# -- recursive bisection -----------------------------------------------------------------------------------
def _split(H: nx.Graph, nodes: list, n: int, imbalance: float, order: dict) -> list[list]:
    if n == 1:
        return [nodes]
    a = n // 2
    left, right = _bisect(H, nodes, a / n, imbalance, order)
    return _split(H, left, a, imbalance, order) + _split(H, right, n - a, imbalance, order)


def _bisect(H: nx.Graph, nodes: list, ratio: float, imbalance: float, order: dict) -> tuple[list, list]:
    """Split ``nodes`` into (A, B) with A holding ``ratio`` of their load, minimising the cut capacity."""
    nodes = sorted(nodes, key=order.__getitem__)
    inside = set(nodes)
    load = {x: H.nodes[x]["load"] for x in nodes}
    total = sum(load.values())
    target = ratio * total
    # Feasible window for A's load: the tolerance of the smaller side's fair share. When no split fits
    # (a few very heavy nodes), the best balanced one wins (see _refine's key).
    slack = imbalance * min(ratio, 1 - ratio) * total
    side = _grow(H, nodes, inside, load, target, order)
    side = _refine(H, nodes, inside, load, side, target, slack, order)
    a = [x for x in nodes if side[x] == 0]
    b = [x for x in nodes if side[x] == 1]
    return a, b


def _grow(H, nodes, inside, load, target, order) -> dict:
    """Greedy graph growing: from a peripheral node, add the frontier node most tied to A until A holds
    ``target`` load (never all nodes)."""
    start = _peripheral(H, nodes, inside, order)
    side = {x: 1 for x in nodes}
    side[start] = 0
    got = load[start]
    while got < target and sum(1 for x in nodes if side[x] == 1) > 1:
        frontier = {y for x in nodes if side[x] == 0 for y in H.neighbors(x) if y in inside and side[y] == 1}
        pool = frontier or {x for x in nodes if side[x] == 1}
        best = max(pool, key=lambda y: (_tie(H, y, side, inside, 0) - _tie(H, y, side, inside, 1), -order[y]))
        side[best] = 0
        got += load[best]
    return side


def _peripheral(H, nodes, inside, order):
    """A node far from the first one (the end of a BFS), so the grown region has room to be compact."""
    sub = H.subgraph(nodes)
    first = nodes[0]
    dist = nx.single_source_shortest_path_length(sub, first)
    far = max(dist.values())
    return min((x for x, d in dist.items() if d == far), key=order.__getitem__)


def _tie(H, x, side, inside, s) -> float:
    """Capacity from ``x`` to nodes of side ``s`` (within ``inside``)."""
    return sum(d["capacity"] for y, d in H.adj[x].items() if y in inside and side[y] == s)


def _cut(H, nodes, inside, side) -> float:
    return sum(d["capacity"] for x in nodes if side[x] == 0 for y, d in H.adj[x].items()
               if y in inside and side[y] == 1)


def _refine(H, nodes, inside, load, side, target, slack, order) -> dict:
    """Fiduccia-Mattheyses: move the best unlocked node (largest cut decrease that keeps A's load within
    ``target`` +- ``slack``, or that brings it closer), keep the best feasible state seen, repeat."""
    def deviation(got):
        return abs(got - target)

    def key(state_cut, got):
        dev = deviation(got)
        return (0, state_cut, dev) if dev <= slack else (1, dev, state_cut)

    side = dict(side)
    got = sum(load[x] for x in nodes if side[x] == 0)
    best_side, best_key = dict(side), key(_cut(H, nodes, inside, side), got)
    for _ in range(FM_PASSES):
        improved = False
        locked = set()
        cur_cut = _cut(H, nodes, inside, side)
        for _ in range(len(nodes)):
            count_a = sum(1 for x in nodes if side[x] == 0)
            choices = []
            for x in nodes:
                if x in locked:
                    continue
                if (side[x] == 0 and count_a == 1) or (side[x] == 1 and count_a == len(nodes) - 1):
                    continue   # never empty a side
                new_got = got - load[x] if side[x] == 0 else got + load[x]
                if deviation(new_got) > slack and deviation(new_got) >= deviation(got):
                    continue
                gain = _tie(H, x, side, inside, 1 - side[x]) - _tie(H, x, side, inside, side[x])
                choices.append((gain, -deviation(new_got), -order[x], x, new_got))
            if not choices:
                break
            gain, _, _, x, new_got = max(choices)
            side[x] = 1 - side[x]
            locked.add(x)
            got = new_got
            cur_cut -= gain
            k = key(cur_cut, got)
            if k < best_key:
                best_key, best_side, improved = k, dict(side), True
        side = dict(best_side)
        got = sum(load[x] for x in nodes if side[x] == 0)
        if not improved:
            break
    return best_side
