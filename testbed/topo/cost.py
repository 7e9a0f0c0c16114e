"""Fabric cost: every price an input, priced per switch port by speed and per link by reach (pure).

One flat price table (``COST_TABLE``, overridable key by key from a spec's ``cost:`` block or from
``testbed topo cost --price KEY=USD``) and two users of it:

    COST_TABLE --> Prices --+--> graph_cost(G)     a built graph (``testbed topo show``): every used port
                            |                      and every link, at its own rate and length
                            +--> price_bom(bom)    a bill of materials by formula (testbed.topo.sizing),
                                                   for sizes far too large to build (``topo cost``)

Terms (all USD; the defaults and their sources are in docs/cost.md -- most are estimates of 2024-25
street prices, stated as such; none is a vendor quote):

* switch ports by speed (100/200/400/800G), for a **fixed** box (one ASIC, e.g. 51.2 Tb/s) and for a
  **chassis** line-card port (supervisors, fabric cards and the chassis amortised into the port);
* a link's **medium** is the cheapest allowed one whose reach covers its length: passive copper (DAC),
  active copper (ACC, redriver), active electrical (AEC, retimer) priced per cable; pluggable optics
  priced per end (two per link) plus fibre per metre: LPO (linear drive), SR (multimode), DR, FR, LR,
  ZR (coherent). ``media`` chooses which are allowed (the conventional set leaves out ACC/AEC/LPO, the
  seed study's "next step");
* links inside a server (NVLink, the GPU-NIC attachment of rail-only) and ports of in-server nodes
  (``nic``, ``nvswitch``) cost nothing here: they are part of the server, not of the fabric.

Normalised figures: ``per_host_port`` = total / hosts, ``per_gbps`` = total / (hosts x host Gbit/s).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import networkx as nx

from testbed.errors import SpecError
from testbed.topo.graph import HOST, hosts, switches

#: Port speed classes priced (Gbit/s).
SPEEDS = (100, 200, 400, 800)

#: Media: name -> (reach in metres, 'cable' (price per cable) or 'end' (per module, two per link)).
MEDIA = {
    "dac": (3.0, "cable"), "acc": (5.0, "cable"), "aec": (7.0, "cable"),
    "lpo": (500.0, "end"), "sr": (50.0, "end"), "dr": (500.0, "end"), "fr": (2_000.0, "end"),
    "lr": (10_000.0, "end"), "zr": (120_000.0, "end"),
}
#: Media allowed unless told otherwise: the conventional build (no ACC/AEC/LPO).
DEFAULT_MEDIA = ("dac", "sr", "dr", "fr", "lr", "zr")

_PORT = {"fixed": (250, 400, 700, 1200), "chassis": (600, 1000, 1700, 2900)}
_MEDIUM_PRICE = {
    "dac": (60, 90, 150, 250), "acc": (120, 180, 300, 450), "aec": (150, 250, 400, 600),
    "lpo": (None, None, 400, 650), "sr": (40, 150, 450, 800), "dr": (120, 300, 600, 1000),
    "fr": (150, 400, 800, 1300), "lr": (300, 800, 1500, 2500), "zr": (2500, 4000, 6000, 10000),
}

#: Every price and assumption, flat (``port_fixed_400g``, ``dr_800g``, ``fibre_per_m``, ...); a price of
#: None means "not sold at that speed". Documented (with sources and which are estimates) in docs/cost.md.
COST_TABLE: dict = {
    **{f"port_{form}_{s}g": float(p) for form, row in _PORT.items() for s, p in zip(SPEEDS, row, strict=True)},
    **{f"{m}_{s}g": (None if p is None else float(p)) for m, row in _MEDIUM_PRICE.items()
       for s, p in zip(SPEEDS, row, strict=True)},
    "fibre_per_m": 0.5,                # per metre of fibre (duplex patch/trunk share), estimate
    "fixed_capacity_gbps": 51_200.0,   # one fixed box = one 51.2 Tb/s ASIC (radix = capacity / speed)
    "chassis_capacity_gbps": 230_400.0,  # a modular chassis, e.g. 576 x 400G
    "host_links": 1.0,                 # 1: price host links (cable / both modules; not the NIC); 0: leave out
    "len_host_rack_m": 2.0,            # server to a ToR in its rack
    "len_host_row_m": 15.0,            # server to a rail leaf or a chassis elsewhere in the row
    "len_leaf_spine_m": 40.0,          # tier 1 -> 2
    "len_spine_core_m": 150.0,         # tier 2 -> 3 and above
    "len_chassis_chassis_m": 100.0,    # between chassis tiers (big switch beyond one chassis)
}

#: Roles whose ports, and links between which, are inside a server (free here).
IN_SERVER_ROLES = frozenset({"nic", "nvswitch"})


def speed_class(rate_gbps: float) -> int:
    """The priced speed class of a link: the smallest class >= its rate (100G below 100G)."""
    return next((s for s in SPEEDS if rate_gbps <= s * (1 + 1e-9)), SPEEDS[-1])


@dataclass(frozen=True)
class Prices:
    """A resolved price table and the media allowed. Build with :meth:`from_table`."""

    table: dict
    media: tuple[str, ...] = DEFAULT_MEDIA

    @classmethod
    def from_table(cls, overrides: dict | None = None, media=None, field: str = "cost") -> "Prices":
        """Defaults with ``overrides`` applied; every key and value checked.

        Raises:
            SpecError: unknown key, a negative or non-numeric price, or an unknown medium.
        """
        table = dict(COST_TABLE)
        for key, value in (overrides or {}).items():
            if key not in COST_TABLE:
                raise SpecError(f"{field}.{key}", "unknown price; allowed: see docs/cost.md "
                                                  "(e.g. port_fixed_400g, dr_800g, fibre_per_m)")
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or value < 0 or math.isinf(value)):
                raise SpecError(f"{field}.{key}", f"expected a number >= 0 (USD) or null, got {value!r}")
            table[key] = None if value is None else float(value)
        media = tuple(DEFAULT_MEDIA if media is None else media)
        for m in media:
            if m not in MEDIA:
                raise SpecError("media", f"unknown medium {m!r}; allowed: {', '.join(MEDIA)}")
        return cls(table, media)

    def port(self, speed: int, form: str = "fixed") -> float:
        return self.table[f"port_{form}_{speed}g"]

    def radix(self, speed: int, form: str = "fixed") -> int:
        return int(self.table[f"{form}_capacity_gbps"] // speed)

    def medium(self, length_m: float, speed: int) -> tuple[str, float]:
        """(medium, USD per link) of the cheapest allowed medium reaching ``length_m`` at ``speed``.

        Raises:
            SpecError: no allowed medium reaches that far at that speed.
        """
        best = None
        for m in self.media:
            reach, per = MEDIA[m]
            price = self.table.get(f"{m}_{speed}g")
            if price is None or reach < length_m:
                continue
            cost = price if per == "cable" else 2 * price + length_m * self.table["fibre_per_m"]
            if best is None or cost < best[1]:
                best = (m, cost)
        if best is None:
            raise SpecError("media", f"no allowed medium reaches {length_m:g} m at {speed}G; allowed: "
                                     f"{', '.join(self.media)}")
        return best


def link_breakdown(prices: Prices, links: int, length_m: float, speed: int) -> dict:
    """One tier of links: medium, counts and cost split into cables / modules / fibre."""
    medium, _ = prices.medium(length_m, speed)
    reach, per = MEDIA[medium]
    unit = prices.table[f"{medium}_{speed}g"]
    row = {"links": links, "medium": medium, "speed_g": speed, "length_m": length_m,
           "cables_usd": 0.0, "modules": 0, "modules_usd": 0.0, "fibre_usd": 0.0}
    if per == "cable":
        row["cables_usd"] = links * unit
    else:
        row["modules"] = 2 * links
        row["modules_usd"] = 2 * links * unit
        row["fibre_usd"] = links * length_m * prices.table["fibre_per_m"]
    row["cost_usd"] = row["cables_usd"] + row["modules_usd"] + row["fibre_usd"]
    return row


def _in_server(G: nx.Graph, node) -> bool:
    return G.nodes[node]["role"] in IN_SERVER_ROLES


def graph_cost(G: nx.Graph, table: dict | None = None, media=None) -> dict:
    """Cost of a built graph: every link by its rate and length, every used switch port by its speed.

    A link faster than 800G is priced as parallel 800G links. Big-switch graphs price their one switch
    as chassis ports; every other switch as fixed-box ports. Returns the ``cabling`` document of
    ``testbed topo show`` (per tier: links, copper_cables, optical_links, optical_modules,
    coherent_modules, fibre_km, cost) plus ports, totals and the resolved table.
    """
    prices = Prices.from_table(table, media)
    form = "chassis" if G.graph.get("kind") == "big-switch" else "fixed"
    tiers: dict = {}
    port_usd = 0.0
    ports = 0
    for u, v, d in G.edges(data=True):
        row = tiers.setdefault(d["tier"], {"links": 0, "copper_cables": 0, "optical_links": 0,
                                           "optical_modules": 0, "coherent_modules": 0, "fibre_km": 0.0,
                                           "media": {}, "cost": 0.0})
        row["links"] += 1
        inside = all(G.nodes[n]["role"] == HOST or _in_server(G, n) for n in (u, v))
        if inside:
            row["media"]["in-server"] = row["media"].get("in-server", 0) + 1
            continue
        gbps = d["rate_bps"] / 1e9
        lanes = max(1, math.ceil(gbps / SPEEDS[-1] - 1e-9))
        speed = speed_class(gbps / lanes)
        b = link_breakdown(prices, lanes, d["distance_m"], speed)
        row["media"][b["medium"]] = row["media"].get(b["medium"], 0) + lanes
        if MEDIA[b["medium"]][1] == "cable":
            row["copper_cables"] += lanes
        else:
            row["optical_links"] += lanes
            row["fibre_km"] += lanes * d["distance_m"] / 1e3
            row["coherent_modules" if b["medium"] == "zr" else "optical_modules"] += b["modules"]
        row["cost"] += b["cost_usd"]
        for n in (u, v):
            if G.nodes[n]["role"] != HOST and not _in_server(G, n):
                ports += lanes
                port_usd += lanes * prices.port(speed, form)
    for row in tiers.values():
        row["fibre_km"] = round(row["fibre_km"], 4)
        row["cost"] = round(row["cost"], 2)
    total = sum(r["cost"] for r in tiers.values()) + port_usd
    n_hosts = len(hosts(G))
    fabric = [s for s in switches(G) if not _in_server(G, s)]
    return {
        "cabling": tiers,
        "copper_cables": sum(r["copper_cables"] for r in tiers.values()),
        "optical_modules": sum(r["optical_modules"] + r["coherent_modules"] for r in tiers.values()),
        "ports_used": ports,
        "max_ports_per_switch": max((G.degree(s) for s in fabric), default=0),
        "switch_ports_usd": round(port_usd, 2),
        "cost_usd": round(total, 2),
        "cost_per_host_port_usd": round(total / n_hosts, 2) if n_hosts else None,
        "cost_table": prices.table,
    }
