"""Fabric specs: one short YAML file -> a validated, frozen :class:`Spec` -> the fabric graph.

    YAML --load_spec()--> Spec (frozen; every error a SpecError naming the dotted field)
                              |
                              +--build_graph()--> nx.Graph (contract: testbed/topo/graph.py)
                                                  G.graph: spec, scale, dilation, mtu, buffer_bytes

Example (the format is documented in docs/specs.md)::

    name: fat-tree-k4
    kind: fat-tree
    params: {k: 4}
    links:                       # per tier; 'default' fills what a tier leaves out
      default: {rate: 400G}
      host: {rate: 100G, distance: 2m}
      agg-core: {distance: 500m, queue: 64p, red: {kmin: 100KB, kmax: 400KB, pmax: 20%}}
    mtu: 1500
    buffer: 32MB                 # per egress port, kept in packets under dilation
    scale: auto                  # or a number; auto = pick_scale(busiest link)
    switches: {default: ovs, tor: {p4: fabric}}
    cost: {dr_400g: 700}         # overrides of testbed.topo.cost.COST_TABLE (docs/cost.md)
    pfc: {priorities: [3], xoff: 100KB, headroom: auto}   # lossless Ethernet (testbed.pfc.config)

A tier block is a :class:`~testbed.links.model.LinkParams` ``link:`` block (rate, delay or distance,
jitter, loss, queue, red), so everything the link-emulation layer can do is available per tier.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

import networkx as nx
import yaml

from testbed.dilation import Dilation, pick_scale
from testbed.errors import SpecError, UsageError
from testbed.links.model import LinkParams
from testbed.pfc.config import PfcConfig
from testbed.topo import generators as gen
from testbed.topo.builder import DEFAULT_RATE_BPS, Builder, LinkTable, tier_default
from testbed.topo.graph import HOST
from testbed.topo.metrics import COST_TABLE
from testbed.units import parse_distance, parse_size

KINDS = tuple(gen.TIERS)

#: Switch roles of each kind (keys of the spec's ``switches:`` block besides default and tierN).
ROLES = {
    "fat-tree": ("tor", "agg", "core"), "spine-leaf": ("leaf", "spine"), "rail-optimized": ("rail", "spine"),
    "rail-only": ("rail", "nvswitch", "nic"), "dragonfly": ("router",), "torus": ("switch",),
    "slim-fly": ("router",),
    "big-switch": ("switch",), "full-mesh": ("switch",), "cross-campus": ("dci",),
}

#: P4 programs a switch may run (p4/<name>.p4, compiled by testbed.p4rt).
P4_PROGRAMS = ("fabric", "aggregation")

#: Top-level keys of a spec file.
TOP_KEYS = ("name", "kind", "description", "params", "links", "mtu", "buffer", "scale", "switches", "cost", "pfc",
            "cluster")

_REQUIRED = object()


# -- small typed parsers: (value, field) -> value, raising SpecError(field, ...) ---------------------------
def _int(minimum: int, even: bool = False):
    def parse(value, field):
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(field, f"expected an integer >= {minimum}, got {value!r}")
        if value < minimum:
            raise SpecError(field, f"must be >= {minimum}, got {value}")
        if even and value % 2:
            raise SpecError(field, f"must be even, got {value}")
        return value
    return parse


def _dims(min_len: int, max_len: int, min_each: int):
    def parse(value, field):
        if not isinstance(value, (list, tuple)) or not min_len <= len(value) <= max_len:
            raise SpecError(field, f"expected a list of {min_len} to {max_len} integers >= {min_each}, "
                                   f"got {value!r}")
        return tuple(_int(min_each)(v, f"{field}[{i}]") for i, v in enumerate(value))
    return parse


def _ratio(value, field):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or math.isinf(value):
        raise SpecError(field, f"expected a positive number such as 3 (for 3:1), got {value!r}")
    return float(value)


def _prime_power(value, field):
    from testbed.topo.galois import prime_power

    _int(3)(value, field)
    if prime_power(value) is None:
        raise SpecError(field, f"must be a prime power such as 3, 4, 5, 7, 8, 9, 11, 13, got {value}")
    return value


def _distance(value, field):
    metres = parse_distance(value, field)
    if metres <= 0:
        raise SpecError(field, f"must be positive, got {value!r}")
    return metres


#: Parameters of each kind: name -> (parser, default or _REQUIRED). cross-campus is handled apart.
PARAMS = {
    "fat-tree": {"k": (_int(2, even=True), _REQUIRED)},
    "spine-leaf": {"leaves": (_int(1), _REQUIRED), "spines": (_int(1), _REQUIRED),
                   "hosts_per_leaf": (_int(1), _REQUIRED), "oversubscription": (_ratio, None)},
    "rail-optimized": {"servers": (_int(1), _REQUIRED), "gpus_per_server": (_int(1), _REQUIRED),
                       "spines": (_int(1), 1)},
    "rail-only": {"servers": (_int(1), _REQUIRED), "gpus_per_server": (_int(1), _REQUIRED)},
    "dragonfly": {"a": (_int(1), _REQUIRED), "p": (_int(1), _REQUIRED), "h": (_int(1), _REQUIRED)},
    "torus": {"dims": (_dims(1, 3, 3), _REQUIRED), "hosts_per_switch": (_int(1), 1)},
    "big-switch": {"hosts": (_int(1), _REQUIRED)},
    "slim-fly": {"q": (_prime_power, _REQUIRED), "hosts_per_router": (_int(1), None)},
    "full-mesh": {"dims": (_dims(1, 4, 2), _REQUIRED), "hosts_per_switch": (_int(1), 1)},
    "cross-campus": {"campuses": (None, _REQUIRED), "dci_per_campus": (_int(1), 1),
                     "distance": (_distance, _REQUIRED)},
}


@dataclass(frozen=True)
class Backend:
    """Switch backend of a node: ``ovs`` (Open vSwitch, userspace datapath) or ``p4`` running ``program``."""

    kind: str = "ovs"
    program: str | None = None


@dataclass(frozen=True)
class Campus:
    """One campus of a cross-campus spec: a kind and its validated params."""

    kind: str
    params: Mapping[str, Any]


@dataclass(frozen=True)
class Spec:
    """A validated fabric spec (frozen; mappings are read-only views)."""

    name: str
    kind: str
    params: Mapping[str, Any]
    links: Mapping[str, LinkParams]      #: every tier of the kind, defaults resolved
    mtu: int = 1500
    buffer_bytes: float | None = None
    scale: float | None = None           #: None: pick_scale(busiest link)
    switches: Mapping[str, Backend] = dataclasses.field(default_factory=lambda: MappingProxyType({}))
    cost: Mapping[str, float] = dataclasses.field(default_factory=lambda: MappingProxyType(dict(COST_TABLE)))
    description: str = ""
    pfc: PfcConfig | None = None         #: lossless Ethernet; None = off
    cluster: Any = None                  #: testbed.topo.workers.ClusterConfig: workers of a partitioned run

    @property
    def tiers(self) -> tuple[str, ...]:
        return tuple(self.links)

    @property
    def busiest_link_bps(self) -> float:
        return max(lp.rate_bps for lp in self.links.values())

    @property
    def dilation(self) -> Dilation:
        return Dilation(self.scale if self.scale is not None else pick_scale(self.busiest_link_bps))

    def backend(self, role: str, tier: int) -> Backend:
        """Backend of a switch: its role's entry, else ``tier<N>``, else ``default``, else OVS."""
        for key in (role, f"tier{tier}", "default"):
            if key in self.switches:
                return self.switches[key]
        return Backend()


# -- parsing ---------------------------------------------------------------------------------------------
def _mapping(value, field: str, allowed) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise SpecError(field, f"expected a mapping with keys from {', '.join(allowed)}, "
                               f"got {type(value).__name__}")
    for key in value:
        if key not in allowed:
            raise SpecError(f"{field}.{key}" if field else str(key),
                            f"unknown key; allowed: {', '.join(allowed)}")
    return value


def _kind(value, field: str, allowed=KINDS) -> str:
    if value not in allowed:
        raise SpecError(field, f"unknown kind {value!r}; allowed: {', '.join(allowed)}")
    return value


def _params(kind: str, raw, field: str) -> Mapping[str, Any]:
    schema = PARAMS[kind]
    raw = _mapping(raw, field, tuple(schema))
    out = {}
    for key, (parse, default) in schema.items():
        if key not in raw:
            if default is _REQUIRED:
                raise SpecError(f"{field}.{key}", f"is required for kind {kind}")
            out[key] = default
        elif key == "campuses":
            out[key] = _campuses(raw[key], f"{field}.campuses")
        else:
            out[key] = parse(raw[key], f"{field}.{key}")
    return MappingProxyType(out)


def _campuses(raw, field: str) -> tuple[Campus, ...]:
    if not isinstance(raw, list) or len(raw) < 2:
        raise SpecError(field, f"expected a list of at least 2 campuses ({{kind, params}}), got {raw!r}")
    campuses = []
    for i, entry in enumerate(raw):
        f = f"{field}[{i}]"
        entry = _mapping(entry, f, ("kind", "params"))
        if "kind" not in entry:
            raise SpecError(f"{f}.kind", "is required")
        kind = _kind(entry["kind"], f"{f}.kind", tuple(k for k in KINDS if k != "cross-campus"))
        campuses.append(Campus(kind, _params(kind, entry.get("params"), f"{f}.params")))
    return tuple(campuses)


def _kinds_in(kind: str, params) -> list[str]:
    if kind == "cross-campus":
        return [c.kind for c in params["campuses"]] + [kind]
    return [kind]


def _links(raw, kinds: list[str], params, field: str = "links") -> Mapping[str, LinkParams]:
    tiers = []
    for k in kinds:
        tiers += [t for t in gen.TIERS[k] if t not in tiers]
    raw = _mapping(raw, field, ("default", *tiers))
    for key, block in raw.items():  # validate each block where it is written, for precise field names
        LinkParams.from_spec(block, f"{field}.{key}")
    default = raw.get("default") or {}
    out = {}
    length = {"delay", "distance"}
    for tier in tiers:
        own = raw.get(tier) or {}
        # the tier's own block wins; a tier giving delay (or distance) drops the default's length
        merged = {k: v for k, v in default.items() if not (k in length and length & set(own))}
        merged.update(own)
        if tier == "dci" and "distance" in params:
            if length & set(own):
                raise SpecError(f"{field}.dci.{'delay' if 'delay' in own else 'distance'}",
                                "the long-haul length is params.distance; do not set it here too")
            merged.pop("delay", None)
            merged["distance"] = params["distance"]
        lp = LinkParams.from_spec(merged, f"{field}.{tier}")
        base = tier_default(tier)
        if lp.rate_bps is None:
            lp = replace(lp, rate_bps=DEFAULT_RATE_BPS)
        if lp.delay_s is None and not lp.distance_m and "distance" not in merged:
            lp = replace(lp, distance_m=base.distance_m)
        out[tier] = lp
    return out


def _switches(raw, kinds: list[str], field: str = "switches") -> Mapping[str, Backend]:
    roles = []
    for k in kinds:
        roles += [r for r in ROLES[k] if r not in roles]
    allowed = ("default", *roles, *(f"tier{i}" for i in range(1, 6)))
    raw = _mapping(raw, field, allowed)
    out = {}
    for key, value in raw.items():
        f = f"{field}.{key}"
        if value == "ovs" or value == {"switch": "ovs"}:
            out[key] = Backend("ovs")
        elif isinstance(value, dict) and set(value) == {"p4"}:
            if value["p4"] not in P4_PROGRAMS:
                raise SpecError(f"{f}.p4", f"unknown program {value['p4']!r}; allowed: {', '.join(P4_PROGRAMS)}")
            out[key] = Backend("p4", value["p4"])
        else:
            raise SpecError(f, f"expected 'ovs' or {{p4: PROGRAM}} (programs: {', '.join(P4_PROGRAMS)}), "
                               f"got {value!r}")
    return MappingProxyType(out)


def parse_spec(doc, source: str = "spec") -> Spec:
    """Validate a spec document (already loaded from YAML) into a :class:`Spec`.

    Raises:
        SpecError: naming the dotted field and what is allowed.
    """
    if not isinstance(doc, dict):
        raise SpecError(source, f"expected a mapping with keys {', '.join(TOP_KEYS)}, got {type(doc).__name__}")
    _mapping(doc, "", TOP_KEYS)
    for key in ("name", "kind"):
        if key not in doc:
            raise SpecError(key, "is required")
    name = doc["name"]
    if not isinstance(name, str) or not name.strip():
        raise SpecError("name", f"expected a non-empty string, got {name!r}")
    description = doc.get("description", "")
    if not isinstance(description, str):
        raise SpecError("description", f"expected a string, got {description!r}")
    kind = _kind(doc["kind"], "kind")
    params = _params(kind, doc.get("params"), "params")
    kinds = _kinds_in(kind, params)
    links = _links(doc.get("links"), kinds, params)
    _apply_oversubscription(links, kind, params, doc.get("links") or {})

    mtu = doc.get("mtu", 1500)
    if isinstance(mtu, bool) or not isinstance(mtu, int) or not 576 <= mtu <= 9216:
        raise SpecError("mtu", f"expected an integer between 576 and 9216 bytes, got {mtu!r}")
    buffer_bytes = None
    if doc.get("buffer") is not None:
        buffer_bytes = parse_size(doc["buffer"], "buffer")
        if buffer_bytes < mtu:
            raise SpecError("buffer", f"must hold at least one packet ({mtu} B), got {doc['buffer']!r}")
    scale = doc.get("scale", "auto")
    if scale == "auto":
        scale = None
    elif isinstance(scale, bool) or not isinstance(scale, (int, float)) or not 0 < scale < math.inf:
        raise SpecError("scale", f"expected 'auto' or a positive number such as 1000, got {scale!r}")
    else:
        scale = float(scale)
    cost = dict(COST_TABLE)
    for key, value in _mapping(doc.get("cost"), "cost", tuple(COST_TABLE)).items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise SpecError(f"cost.{key}", f"expected a number >= 0, got {value!r}")
        cost[key] = float(value)
    pfc = (PfcConfig.from_spec(doc["pfc"], "pfc", mtu=mtu, buffer_bytes=buffer_bytes)
           if doc.get("pfc") is not None else None)
    cluster = None
    if doc.get("cluster") is not None:
        from testbed.topo.workers import parse_cluster

        cluster = parse_cluster(doc["cluster"], "cluster")
    return Spec(name=name.strip(), kind=kind, params=params, links=MappingProxyType(links), mtu=mtu,
                buffer_bytes=buffer_bytes, scale=scale, switches=_switches(doc.get("switches"), kinds),
                cost=MappingProxyType(cost), description=description, pfc=pfc, cluster=cluster)


def _apply_oversubscription(links: dict, kind: str, params, raw_links: dict) -> None:
    """spine-leaf ``oversubscription``: derive the leaf-spine rate from it, or check a given rate agrees.

    ratio = hosts_per_leaf * host_rate / (spines * leaf_spine_rate).
    """
    groups = ([(c.params, f"params.campuses[{i}].params.oversubscription")
               for i, c in enumerate(params["campuses"]) if c.kind == "spine-leaf"]
              if kind == "cross-campus" else [(params, "params.oversubscription")] if kind == "spine-leaf"
              else [])
    explicit = "rate" in (raw_links.get("leaf-spine") or {})
    derived = None
    for p, field in groups:
        ratio = p["oversubscription"]
        if ratio is None:
            continue
        need = p["hosts_per_leaf"] * links["host"].rate_bps / (p["spines"] * ratio)
        have = links["leaf-spine"].rate_bps
        if explicit and not math.isclose(need, have, rel_tol=1e-6):
            actual = p["hosts_per_leaf"] * links["host"].rate_bps / (p["spines"] * have)
            raise SpecError(field, f"{ratio:g}:1 disagrees with the link rates given ({actual:g}:1); "
                                   "give the ratio or the leaf-spine rate, not both")
        if derived is not None and not math.isclose(need, derived, rel_tol=1e-6):
            raise SpecError(field, "campuses derive different leaf-spine rates; set links.leaf-spine.rate")
        derived = need
    if derived is not None:
        links["leaf-spine"] = replace(links["leaf-spine"], rate_bps=derived)


#: Where the shipped example specs live.
SPEC_DIR = Path(__file__).resolve().parent.parent.parent / "scenarios" / "specs"


def shipped_specs() -> dict:
    """``{name: path}`` of the example fabric specs under scenarios/specs/.

    Only files with a top-level ``kind:`` are fabric specs; other YAML there (a scenario's run matrix,
    such as allreduce.yaml) is skipped.
    """
    found = {}
    for path in sorted(SPEC_DIR.glob("*.yaml")):
        if re.search(r"^kind:", path.read_text(), re.MULTILINE):
            found[path.stem] = path
    return found


def resolve_spec(name_or_path) -> Path:
    """A spec path as given, or the shipped example of that name (``fat-tree-k4``).

    Raises:
        UsageError: neither a file nor a shipped example (lists the examples).
    """
    path = Path(name_or_path)
    if path.is_file():
        return path
    shipped = shipped_specs()
    if str(name_or_path) in shipped:
        return shipped[str(name_or_path)]
    raise UsageError(f"no spec file {str(name_or_path)!r} and no shipped example of that name; "
                     f"examples: {', '.join(shipped) or 'none'}")


def load_spec(path) -> Spec:
    """Read and validate a spec file.

    Raises:
        SpecError: the file is missing, is not YAML, or is invalid (field named).
    """
    path = Path(path)
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_SPEC_BYTES + 1)
    except OSError as exc:
        raise SpecError(str(path), f"cannot read spec: {exc.strerror}") from None
    if len(raw) > MAX_SPEC_BYTES:
        raise SpecError(str(path), f"is larger than {MAX_SPEC_BYTES // 1024} KiB; a spec is a short YAML file "
                                   "(see docs/specs.md)")
    if b"\0" in raw:
        raise SpecError(str(path), "is a binary file, not a YAML spec (see docs/specs.md)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(str(path), f"is not UTF-8 text (byte {exc.start}); save the spec as UTF-8") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        first = " ".join(str(exc).split())
        raise SpecError(str(path), f"not valid YAML: {first}") from None
    except RecursionError:
        raise SpecError(str(path), "nested too deeply to be a spec (see docs/specs.md)") from None
    if _depth(doc) > MAX_SPEC_DEPTH:
        raise SpecError(str(path), f"nested deeper than {MAX_SPEC_DEPTH} levels; a spec is a few levels deep "
                                   "(see docs/specs.md)")
    return parse_spec(doc, str(path))


#: Limits of a spec file (the largest shipped one is about 1 KiB and 4 levels deep).
MAX_SPEC_BYTES = 1 << 20
MAX_SPEC_DEPTH = 16


def _depth(doc, limit: int = MAX_SPEC_DEPTH + 1) -> int:
    """Nesting depth of a loaded YAML document, counted up to ``limit`` (iteratively: no recursion)."""
    deepest, stack, seen = 0, [(doc, 1)], set()
    while stack:
        node, depth = stack.pop()
        if not isinstance(node, (dict, list)) or id(node) in seen:  # anchors can make a node its own child
            continue
        deepest = max(deepest, depth)
        if depth >= limit:
            return depth
        seen.add(id(node))
        children = node.values() if isinstance(node, dict) else node
        stack.extend((c, depth + 1) for c in children)
    return deepest


# -- graph -----------------------------------------------------------------------------------------------
def _generator(kind: str, params):
    """``fn(builder)`` that adds one fabric of ``kind`` with ``params`` to a builder."""
    p = dict(params)
    p.pop("oversubscription", None)
    table = {
        "fat-tree": lambda b: gen.fat_tree(p["k"], b),
        "spine-leaf": lambda b: gen.spine_leaf(p["leaves"], p["spines"], p["hosts_per_leaf"], b),
        "rail-optimized": lambda b: gen.rail_optimized(p["servers"], p["gpus_per_server"], p["spines"], b),
        "rail-only": lambda b: gen.rail_only(p["servers"], p["gpus_per_server"], b),
        "dragonfly": lambda b: gen.dragonfly(p["a"], p["p"], p["h"], b),
        "torus": lambda b: gen.torus(p["dims"], p["hosts_per_switch"], b),
        "big-switch": lambda b: gen.big_switch(p["hosts"], b),
        "slim-fly": lambda b: gen.slim_fly(p["q"], p["hosts_per_router"], b),
        "full-mesh": lambda b: gen.full_mesh(p["dims"], p["hosts_per_switch"], b),
        "cross-campus": lambda b: gen.cross_campus([_generator(c.kind, c.params) for c in p["campuses"]],
                                                   p["dci_per_campus"], b),
    }
    return table[kind]


def build_graph(spec: Spec) -> nx.Graph:
    """The fabric graph of ``spec``: structure from the generator, rates/delays per tier, backends,
    addresses, and ``G.graph`` = {name, kind, mtu, spec, scale, dilation, buffer_bytes}.

    Raises:
        SpecError: the graph would be beyond :data:`~testbed.topo.counts.GRAPH_LIMIT` (sized in closed
            form first, so a fat-tree k=1024 is refused at once instead of exhausting memory).
    """
    from testbed.topo.counts import check_graph_size

    check_graph_size(spec)
    b = Builder(LinkTable(dict(spec.links)), name=spec.name, kind=spec.kind, mtu=spec.mtu)
    G = _generator(spec.kind, spec.params)(b)
    for _, data in G.nodes(data=True):
        if data["role"] != HOST:
            backend = spec.backend(data["role"], data["tier"])
            data["p4"] = backend.program if backend.kind == "p4" else None
    dilation = spec.dilation
    G.graph.update(spec=spec, scale=dilation.scale, dilation=dilation, buffer_bytes=spec.buffer_bytes)
    return G

