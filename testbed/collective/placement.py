"""Which hosts a job's ranks run on, and in which rank order (pure, on the fabric graph).

    packed      the first free hosts in graph order: ranks fill a ToR, then the next (fewest switch hops
                between ring neighbours; a k=4 fat-tree's 4 ranks share one pod)
    spread      round-robin over ToRs: rank i on the i-th ToR's next free host (every ring hop crosses the
                fabric; the worst case for the network, the best for failure domains)
    rail-aware  rail-optimized fabrics (hosts carry ``server`` and ``gpu``): whole servers, ranks ordered
                GPU-major (s0g0, s1g0, ..., s0g1, s1g1, ...) so ring neighbours share a rail switch and
                only the wrap between rails crosses a spine; other fabrics: as packed

``within`` limits a job to some hosts (a pod, for jobs on disjoint pods), ``exclude`` skips the hosts of
jobs already placed. Roles and attributes come from the graph, never from names.
"""

from __future__ import annotations

from testbed.errors import SpecError
from testbed.topo.graph import hosts

POLICIES = ("packed", "spread", "rail-aware")


def tor_of(G, host):
    return next(iter(G.neighbors(host)))


def place(G, n: int, policy: str = "packed", exclude=(), within=None) -> list:
    """``n`` hosts in rank order.

    Raises:
        SpecError: unknown policy, or fewer than ``n`` free hosts.
    """
    if policy not in POLICIES:
        raise SpecError("placement", f"unknown policy {policy!r}; allowed: {', '.join(POLICIES)}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 2:
        raise SpecError("ranks", f"must be an integer >= 2, got {n!r}")
    taken = set(exclude)
    pool = [h for h in hosts(G) if h not in taken and (within is None or h in within)]
    if len(pool) < n:
        raise SpecError("ranks", f"{n} ranks do not fit: {len(pool)} free hosts"
                                 + (" in the chosen pod" if within is not None else "") + " on this fabric")
    if policy == "packed" or (policy == "rail-aware" and not all("gpu" in G.nodes[h] for h in pool)):
        return pool[:n]
    if policy == "spread":
        by_tor: dict = {}
        for h in pool:
            by_tor.setdefault(tor_of(G, h), []).append(h)
        out, depth = [], 0
        while len(out) < n:
            for tor_hosts in by_tor.values():
                if depth < len(tor_hosts) and len(out) < n:
                    out.append(tor_hosts[depth])
            depth += 1
        return out
    servers: dict = {}
    for h in pool:
        servers.setdefault(G.nodes[h]["server"], []).append(h)
    chosen, total = [], 0
    for s in sorted(servers):
        if total >= n:
            break
        chosen.append(sorted(servers[s], key=lambda h: G.nodes[h]["gpu"]))
        total += len(servers[s])
    gpus = sorted({G.nodes[h]["gpu"] for srv in chosen for h in srv})
    ordered = [h for g in gpus for srv in chosen for h in srv if G.nodes[h]["gpu"] == g]
    return ordered[:n]


def pods(G) -> dict:
    """{pod: [hosts]} for fabrics whose hosts carry ``pod`` (fat-trees)."""
    out: dict = {}
    for h in hosts(G):
        if "pod" in G.nodes[h]:
            out.setdefault(G.nodes[h]["pod"], []).append(h)
    return out


def ring_hops(G, order: list) -> list[int]:
    """Switch hops of each ring edge rank i -> i + 1 (shortest path length minus the two host links)."""
    import networkx as nx

    return [nx.shortest_path_length(G, order[i], order[(i + 1) % len(order)]) - 1 for i in range(len(order))]
