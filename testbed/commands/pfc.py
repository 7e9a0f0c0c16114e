"""``testbed pfc``: lossless-Ethernet questions answered from the pure model (no root, nothing is run).

    testbed pfc headroom --rate 100G --distance 30km [--mtu 1500] [--response 2us] [--json]
        the headroom one lossless priority of that port needs, term by term (docs/pfc.md)
    testbed pfc headroom SPEC [--json]
        the headroom of every port of a fabric spec (cable and rate of each link)
    testbed pfc deadlock SPEC [--fail A-B ...] [--backups] [--json]
        cyclic buffer dependencies of the routing brain's routes, per lossless priority; exit 1 if any
"""

from __future__ import annotations

import argparse

from testbed.cli import add_verbs
from testbed.console import out, print_json
from testbed.errors import SpecError, UsageError
from testbed.units import format_size, parse_distance, parse_duration, parse_rate


def register(sub) -> None:
    parser = sub.add_parser("pfc", help="PFC: headroom per port, deadlock analysis of a routing",
                            description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    verbs = add_verbs(parser)
    hr = verbs.add_parser("headroom", help="headroom of a port (--rate/--distance) or of every port of SPEC")
    hr.add_argument("spec", nargs="?", help="a spec file or a shipped example's name")
    hr.add_argument("--rate", help="real line rate, e.g. 100G")
    hr.add_argument("--distance", default="0m", help="cable length, e.g. 30km (5 us/km one way)")
    hr.add_argument("--mtu", type=int, default=1500)
    hr.add_argument("--response", help="the peer's response time (default: IEEE 802.3 31B.3.7 for the rate)")
    hr.add_argument("--json", action="store_true")
    hr.set_defaults(func=run_headroom)
    dl = verbs.add_parser("deadlock", help="cyclic buffer dependencies of the routes of SPEC")
    dl.add_argument("spec")
    dl.add_argument("--fail", action="append", default=[], metavar="A-B", help="a failed link (repeatable)")
    dl.add_argument("--backups", action="store_true", help="also follow fast-failover backup ports")
    dl.add_argument("--json", action="store_true")
    dl.set_defaults(func=run_deadlock)


def _graph(name):
    from testbed.topo.spec import build_graph, load_spec, resolve_spec

    spec = load_spec(resolve_spec(name))
    return spec, build_graph(spec)


def headroom_document(args) -> dict:
    """Pure: the headroom the flags (or the spec) describe, as a JSON-able document."""
    from testbed.pfc.config import PfcConfig
    from testbed.pfc.headroom import headroom, port_headrooms
    from testbed.units import FIBRE_DELAY_S_PER_M

    if args.spec:
        if args.rate:
            raise UsageError("give a SPEC or --rate/--distance, not both")
        spec, G = _graph(args.spec)
        ports = port_headrooms(G, spec.pfc or PfcConfig(), spec.mtu)
        return {"spec": spec.name, "mtu": spec.mtu, "ports": {str(n): {str(p): d for p, d in sorted(v.items())}
                                                              for n, v in ports.items()}}
    if not args.rate:
        raise UsageError("give --rate (and --distance), or a SPEC")
    rate = parse_rate(args.rate, "--rate")
    if rate <= 0:
        raise SpecError("--rate", f"must be positive, got {args.rate!r}")
    if not 576 <= args.mtu <= 9216:
        raise SpecError("--mtu", f"expected 576..9216 bytes, got {args.mtu}")
    distance = parse_distance(args.distance, "--distance")
    response = parse_duration(args.response, "--response") if args.response else None
    h = headroom(rate, distance * FIBRE_DELAY_S_PER_M, args.mtu, response_time_s=response)
    return {"distance_m": distance, "mtu": args.mtu, **h.to_dict()}


def run_headroom(args) -> int:
    doc = headroom_document(args)
    if args.json:
        print_json(doc)
        return 0
    if "ports" in doc:
        from rich.table import Table

        t = Table(title=f"PFC headroom per port of {doc['spec']} (MTU {doc['mtu']})")
        for col in ("node", "port", "rate", "one-way delay", "headroom", "fits buffer"):
            t.add_column(col, justify="right" if col != "node" else "left")
        for node, ports in doc["ports"].items():
            for port_no, d in ports.items():
                t.add_row(node, port_no, f"{d['rate_bps'] / 1e9:g}G", f"{d['one_way_delay_s'] * 1e6:.3g} us",
                          format_size(d["bytes"]), {True: "yes", False: "[red]no[/red]"}.get(d.get("fits_buffer"), "-"))
        out.print(t)
        return 0
    out.print(f"{doc['rate_bps'] / 1e9:g}G over {doc['distance_m'] / 1e3:g} km, MTU {doc['mtu']}: "
                  f"headroom {doc['bytes']:,} B ({format_size(doc['bytes'])}) per lossless priority")
    for term, value in doc["terms"].items():
        out.print(f"  {term:<15} {value:>14,.0f} B")
    return 0


def _failures(G, items) -> list[tuple]:
    out = []
    for item in items:
        a, sep, b = item.partition("-")
        if not sep or not G.has_edge(a, b):
            raise SpecError("--fail", f"no link {item!r} in the fabric (give A-B with two adjacent nodes)")
        out.append((a, b))
    return out


def deadlock_document(args) -> dict:
    """Pure: the routes of SPEC (after --fail) and their cyclic buffer dependencies."""
    from testbed.routing.brain import RoutingBrain
    from testbed.routing.deadlock import find_deadlocks

    spec, G = _graph(args.spec)
    brain = RoutingBrain(G)
    brain.compute_all()
    failed = _failures(G, args.fail)
    for a, b in failed:
        brain.link_down(a, b, 0.0)
    priorities = spec.pfc.priorities if spec.pfc else (3,)
    found = find_deadlocks(G, list(brain.routes.values()), priorities, backups=args.backups)
    return {"spec": spec.name, "failed": [list(f) for f in failed], "priorities": list(priorities),
            "backups": args.backups, "deadlock_free": not found, "cycles": [d.as_dict() for d in found],
            "described": [d.describe() for d in found]}


def run_deadlock(args) -> int:
    doc = deadlock_document(args)
    if args.json:
        print_json(doc)
    elif doc["deadlock_free"]:
        out.print(f"{doc['spec']}: no cyclic buffer dependency for priorities {doc['priorities']}")
    else:
        out.print(f"[red]{doc['spec']}: {len(doc['cycles'])} cyclic buffer dependencies[/red]")
        for line in doc["described"]:
            out.print(f"  {line}")
    return 0 if doc["deadlock_free"] else 1
