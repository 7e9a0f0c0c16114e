"""Bills of materials by formula, for fabric sizes far too large to build as graphs (pure).

``testbed topo cost`` asks what a fabric of 1k ... 128k hosts costs per host port. Nobody builds a
128k-node networkx graph for that: each architecture here returns the counts of switches per tier and
of links per tier (with their typical length) in closed form, and :func:`price` prices them with
:class:`testbed.topo.cost.Prices`.

Full-bisection folded Clos of n tiers from radix-R switches, H hosts (the k-ary fat-tree when
H = 2(R/2)^n; fewer hosts leave the same tiers partly filled)::

    tiers 1 .. n-1:  ceil(H / (R/2)) switches each      tier n: ceil(H / R) switches
    links:           H host links, then H links between every pair of adjacent tiers
    n = 1 only when H <= R (one switch); the fewest tiers that fit: H <= 2 (R/2)^n

Architectures (``KINDS``):

* ``fat-tree``     3-tier (or more) Clos of fixed boxes, ToR in the rack (the k-ary fat-tree)
* ``spine-leaf``   2-tier Clos of fixed boxes, ToR in the rack; infeasible beyond R^2/2 hosts at 1:1
* ``rail-optimized`` fewest-tier Clos of fixed boxes; leaf g serves GPU g of many servers, so host
  links run across the row (``len_host_row_m``) instead of inside the rack
* ``rail-only``    one fewest-tier Clos per rail over H/g hosts (g GPUs per server), no spine between
  rails (Wang et al., HOTI'24); cross-rail traffic uses NVLink, which is not priced
* ``big-switch``   fewest-tier Clos of chassis: inside a chassis the leaf/spine stages are a backplane
  (no cables, no optics); beyond one chassis, chassis leaves under chassis spines
* ``multi-plane``  P planes of 2-tier Clos over H/P hosts each (DeepSeek's MPFT)
* ``slim-fly``     the smallest MMS slim fly (prime power q, p = ceil(k'/2) hosts per router) holding H
  hosts whose routers fit the radix (p + k' <= R); every router link inter-rack (``len_leaf_spine_m``)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from testbed.errors import SpecError
from testbed.topo.cost import Prices, link_breakdown

KINDS = ("fat-tree", "spine-leaf", "rail-optimized", "rail-only", "big-switch", "multi-plane", "slim-fly")


@dataclass(frozen=True)
class LinkTier:
    name: str
    links: int
    length_m: float
    host: bool = False     #: a host link (left out when the table's ``host_links`` is 0)


@dataclass(frozen=True)
class Bom:
    """Counts of one fabric: ``switches`` = {(role, form): (count, radix)}, link tiers, hosts."""

    kind: str
    hosts: int
    speed: int
    tiers: int
    switches: dict
    links: tuple[LinkTier, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)


class Infeasible(Exception):
    """This architecture cannot reach that size with these switches (the message says why)."""


def clos_tiers(hosts: int, radix: int) -> int:
    """Fewest tiers of a full-bisection Clos of radix-``radix`` switches holding ``hosts``."""
    if hosts <= radix:
        return 1
    n = 2
    while hosts > 2 * (radix // 2) ** n:
        n += 1
    return n


def clos_counts(hosts: int, radix: int, tiers: int) -> tuple[list[int], int]:
    """(switches per tier, links between adjacent tiers) of the module docstring's Clos."""
    if tiers == 1:
        if hosts > radix:
            raise Infeasible(f"{hosts} hosts exceed one {radix}-port switch")
        return [1], 0
    if hosts > 2 * (radix // 2) ** tiers:
        raise Infeasible(f"{hosts} hosts exceed a {tiers}-tier Clos of {radix}-port switches "
                         f"(at most {2 * (radix // 2) ** tiers} at 1:1)")
    lower = math.ceil(hosts / (radix // 2))
    return [lower] * (tiers - 1) + [math.ceil(hosts / radix)], hosts


def _level_length(prices: Prices, level: int) -> float:
    """Length of the links from tier ``level`` to ``level + 1``."""
    return prices.table["len_leaf_spine_m"] if level == 1 else prices.table["len_spine_core_m"]


def _clos_bom(kind, hosts, speed, prices, tiers, host_len, form="fixed", copies=1, roles=None,
              between_len=None, notes=()) -> Bom:
    radix = prices.radix(speed, form)
    per, level_links = clos_counts(hosts, radix, tiers)
    roles = roles or ("leaf", "spine", "core", "tier4", "tier5", "tier6")
    if tiers > len(roles):
        raise Infeasible(f"{hosts:,} hosts need a {tiers}-tier Clos of {radix}-port switches; "
                         f"this model prices at most {len(roles)} tiers")
    switches = {(roles[i], form): (copies * n, radix) for i, n in enumerate(per)}
    links = [LinkTier("host", copies * hosts, host_len, host=True)]
    for level in range(1, tiers):
        length = between_len if between_len is not None else _level_length(prices, level)
        links.append(LinkTier(f"{roles[level - 1]}-{roles[level]}", copies * level_links, length))
    return Bom(kind, copies * hosts, speed, tiers, switches, tuple(links), tuple(notes))


def _slim_fly_bom(hosts: int, speed: int, prices: Prices) -> Bom:
    from testbed.topo.galois import prime_power
    from testbed.topo.generators import slim_fly_degree

    radix = prices.radix(speed)
    q = 3
    while True:
        if prime_power(q):
            k_net = slim_fly_degree(q)
            p = -(-k_net // 2)
            if p + k_net > radix:
                raise Infeasible(f"{hosts} hosts need a slim fly beyond {radix}-port routers "
                                 f"(largest fits q < {q})")
            if 2 * q * q * p >= hosts:
                break
        q += 1
    routers = 2 * q * q
    return Bom("slim-fly", hosts, speed, 2, {("router", "fixed"): (routers, radix)},
               (LinkTier("host", hosts, prices.table["len_host_rack_m"], host=True),
                LinkTier("router-router", q * q * k_net, prices.table["len_leaf_spine_m"])),
               (f"MMS q = {q}: {routers} routers, k' = {k_net}, {p} hosts per router",))


def bom(kind: str, hosts: int, speed: int, prices: Prices, gpus_per_server: int = 8, planes: int = 8) -> Bom:
    """The bill of materials of ``kind`` for ``hosts`` host ports at ``speed`` Gbit/s.

    Raises:
        SpecError: unknown kind, or counts that are not positive.
        Infeasible: the architecture cannot reach that size (e.g. 2-tier beyond R^2/2).
    """
    if kind not in KINDS:
        raise SpecError("kinds", f"unknown kind {kind!r}; allowed: {', '.join(KINDS)}")
    if hosts < 1:
        raise SpecError("hosts", f"must be >= 1, got {hosts}")
    t = prices.table
    radix = prices.radix(speed)
    if kind == "fat-tree":
        return _clos_bom(kind, hosts, speed, prices, max(3, clos_tiers(hosts, radix)), t["len_host_rack_m"],
                         roles=("tor", "agg", "core", "tier4", "tier5"))
    if kind == "spine-leaf":
        return _clos_bom(kind, hosts, speed, prices, 2, t["len_host_rack_m"])
    if kind == "rail-optimized":
        return _clos_bom(kind, hosts, speed, prices, max(2, clos_tiers(hosts, radix)), t["len_host_row_m"],
                         roles=("rail", "spine", "core", "tier4", "tier5"))
    if kind == "rail-only":
        per_rail = math.ceil(hosts / gpus_per_server)
        return _clos_bom(kind, per_rail, speed, prices, clos_tiers(per_rail, radix), t["len_host_row_m"],
                         copies=gpus_per_server, roles=("rail", "rail-spine", "rail-core", "tier4"),
                         notes=(f"{gpus_per_server} rails of {per_rail} hosts; cross-rail via NVLink "
                                "(not priced)",))
    if kind == "big-switch":
        crad = prices.radix(speed, "chassis")
        return _clos_bom(kind, hosts, speed, prices, clos_tiers(hosts, crad), t["len_host_row_m"], "chassis",
                         roles=("chassis-leaf", "chassis-spine", "chassis-core"),
                         between_len=t["len_chassis_chassis_m"],
                         notes=(f"{crad}-port chassis; stages inside a chassis are its backplane",))
    if kind == "slim-fly":
        return _slim_fly_bom(hosts, speed, prices)
    per_plane = math.ceil(hosts / planes)
    return _clos_bom(kind, per_plane, speed, prices, 2, t["len_host_rack_m"], copies=planes,
                     notes=(f"{planes} planes of {per_plane} hosts",))


def price(b: Bom, prices: Prices) -> dict:
    """Cost of a bill of materials: ports (installed: every port of every box), media, fibre."""
    ports = sum(n * radix for n, radix in b.switches.values())
    port_usd = sum(n * radix * prices.port(b.speed, form) for (_, form), (n, radix) in b.switches.items())
    tiers = []
    for lt in b.links:
        if lt.host and not prices.table["host_links"]:
            continue
        tiers.append({"tier": lt.name, **link_breakdown(prices, lt.links, lt.length_m, b.speed)})
    links_usd = sum(r["cost_usd"] for r in tiers)
    total = port_usd + links_usd
    return {
        "kind": b.kind, "hosts": b.hosts, "speed_g": b.speed, "tiers": b.tiers,
        "switches": sum(n for n, _ in b.switches.values()),
        "switches_by_role": {role: n for (role, _), (n, _) in b.switches.items()},
        "switch_ports": ports, "links": sum(lt.links for lt in b.links), "link_tiers": tiers,
        "optical_modules": sum(r["modules"] for r in tiers),
        "switch_ports_usd": round(port_usd, 2), "links_usd": round(links_usd, 2),
        "modules_usd": round(sum(r["modules_usd"] for r in tiers), 2),
        "cables_usd": round(sum(r["cables_usd"] for r in tiers), 2),
        "fibre_usd": round(sum(r["fibre_usd"] for r in tiers), 2),
        "cost_usd": round(total, 2),
        "per_host_port_usd": round(total / b.hosts, 2),
        "per_gbps_usd": round(total / (b.hosts * b.speed), 4),
        "notes": list(b.notes),
    }


def study(kinds, sizes, speed: int, prices: Prices, gpus_per_server: int = 8, planes: int = 8) -> list[dict]:
    """One priced row per (kind, size); an infeasible combination is a row with ``infeasible`` = why."""
    rows = []
    for kind in kinds:
        for hosts in sizes:
            try:
                rows.append(price(bom(kind, hosts, speed, prices, gpus_per_server, planes), prices))
            except Infeasible as exc:
                rows.append({"kind": kind, "hosts": hosts, "speed_g": speed, "infeasible": str(exc)})
    return rows
