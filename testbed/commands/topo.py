"""``testbed topo show|draw|list``: fabric metrics and drawings from a spec, without emulation.

SPEC is a path to a YAML file or the name of a shipped example (``fat-tree-k4`` = scenarios/specs/
fat-tree-k4.yaml). Invalid specs print one line naming the field and exit 2.
"""

from __future__ import annotations

from rich.table import Table

from testbed.cli import add_verbs
from testbed.console import console, out, print_json
from testbed.errors import UsageError
from testbed.topo.spec import build_graph, load_spec, resolve_spec, shipped_specs


def register(sub) -> None:
    parser = sub.add_parser("topo", help="fabric specs: metrics, drawings, examples", description=__doc__)
    verbs = add_verbs(parser)

    show = verbs.add_parser("show", help="counts, hops, ECMP, bisection, optics, cost, dilation mapping")
    show.add_argument("spec", metavar="SPEC", help="spec file or shipped example name")
    show.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    show.set_defaults(func=_show)

    draw = verbs.add_parser("draw", help="draw the fabric by tiers (PNG/SVG/PDF)")
    draw.add_argument("spec", metavar="SPEC", help="spec file or shipped example name")
    draw.add_argument("--out", required=True, metavar="FILE", help="output image, e.g. fabric.png")
    draw.set_defaults(func=_draw)

    from testbed.commands import topo_cost

    topo_cost.add_parser(verbs)

    listing = verbs.add_parser("list", help="list the shipped example specs")
    listing.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    listing.set_defaults(func=_list)


#: What ``topo show`` leaves out for a fabric beyond the graph-walk limit.
NOT_COMPUTED = ("diameter", "avg_hops", "ecmp", "bisection", "oversubscription", "cabling", "cost", "mapping")


def too_big_to_walk(spec) -> dict | None:
    """The closed-form counts of ``spec`` when its graph is beyond :data:`~testbed.topo.counts.WALK_LIMIT`."""
    from testbed.topo.counts import WALK_LIMIT, closed_form

    counts = closed_form(spec.kind, spec.params)
    return counts if counts is not None and counts["nodes"] > WALK_LIMIT else None


def _show(args) -> int:
    from testbed.topo.counts import WALK_LIMIT
    from testbed.topo.metrics import summary

    spec = load_spec(resolve_spec(args.spec))
    counts = too_big_to_walk(spec)
    if counts is not None:
        doc = analytic_doc(spec, counts, f"more than {WALK_LIMIT} nodes: figures in closed form, no graph "
                                         "built; `testbed topo cost` prices fabrics of this size")
        if args.json:
            print_json(doc)
        else:
            print_analytic(doc)
        return 0
    G = build_graph(spec)
    doc = summary(G)
    if args.json:
        print_json(doc)
    else:
        _print_summary(doc)
    return 0


def analytic_doc(spec, counts: dict, note: str) -> dict:
    """What ``topo show`` (and ``plan``, for a replica beyond the machine) reports without a graph."""
    from testbed.topo import analytic

    figures = analytic.metrics(spec) or {}
    skipped = [k for k in NOT_COMPUTED if not (k in figures or (k == "bisection" and "bisection_gbps" in figures))]
    return {"name": spec.name, "kind": spec.kind, "params": dict(spec.params), **counts, **figures,
            "analytic": True, "not_computed": skipped, "note": note}


def print_analytic(doc: dict, note: bool = True) -> None:
    out.print(f"[bold]{doc['name']}[/] ({doc['kind']}): {doc['switches']:,} switches, "
              f"{doc['hosts']:,} hosts, {doc['links']:,} links (closed form)")
    if "diameter" in doc:
        t = Table(show_header=False, box=None)
        t.add_row("diameter / avg hops", f"{doc['diameter']} / {doc['avg_hops']} (switch diameter "
                                         f"{doc['switch_diameter']})")
        t.add_row("ECMP paths min/mean/max", f"{doc['ecmp']['min']:,} / {doc['ecmp']['mean']:,} / "
                                             f"{doc['ecmp']['max']:,}")
        t.add_row("bisection", f"{doc['bisection_gbps']:,.6g} Gbit/s of {doc['full_bisection_gbps']:,.6g} "
                               f"({doc['bisection_ratio']:.3g} of full)")
        out.print(t)
    if note:
        console.print(f"{doc['note']}; not computed: {', '.join(doc['not_computed']) or 'nothing'}")


def _draw(args) -> int:
    from testbed.topo.counts import WALK_LIMIT
    from testbed.topo.draw import draw

    target = check_image_path(args.out, "--out")
    spec = load_spec(resolve_spec(args.spec))
    counts = too_big_to_walk(spec)
    if counts is not None:
        raise UsageError(f"SPEC {args.spec}: {counts['nodes']:,} nodes; a drawing holds at most {WALK_LIMIT:,} "
                         "(draw a smaller instance of the same kind)")
    G = build_graph(spec)
    try:
        written = draw(G, target)
    except OSError as exc:
        raise UsageError(f"--out {args.out}: cannot write the drawing ({exc.strerror or exc}); "
                         "pick a writable path") from None
    console.print(f"wrote {written} ({G.number_of_nodes()} nodes, {G.number_of_edges()} links)")
    return 0


def check_image_path(value: str, flag: str):
    """The path of a drawing: a known image suffix, in a folder that exists and can be written."""
    import os
    from pathlib import Path

    from testbed.topo.draw import FORMATS

    path = Path(value)
    suffix = path.suffix.lower().lstrip(".")
    if suffix not in FORMATS:
        raise UsageError(f"{flag} {value}: unknown image format {path.suffix or '(none)'!r}; "
                         f"end the name with one of: {', '.join('.' + f for f in FORMATS)}")
    folder = path.absolute().parent
    while not folder.exists():  # draw() creates missing folders: the first existing one must be writable
        folder = folder.parent
    if not folder.is_dir():
        raise UsageError(f"{flag} {value}: {str(folder)!r} is a file, not a folder; pick another path")
    if not os.access(folder, os.W_OK | os.X_OK, effective_ids=True) or (path.exists() and not os.access(path, os.W_OK, effective_ids=True)):
        raise UsageError(f"{flag} {value}: cannot write there (permission denied); pick a writable path")
    if path.is_dir():
        raise UsageError(f"{flag} {value}: is a folder; give a file name such as {value.rstrip('/')}/fabric.png")
    return path


def _list(args) -> int:
    specs = {name: str(path) for name, path in shipped_specs().items()}
    if args.json:
        print_json(specs)
    else:
        for name, path in specs.items():
            out.print(f"{name:28s} {path}", soft_wrap=True)
    return 0


def _print_summary(doc: dict) -> None:
    out.print(f"[bold]{doc['name']}[/] ({doc['kind']}): {doc['switches']} switches, {doc['hosts']} hosts, "
                  f"{doc['links']} links; scale {doc['scale']:g}, MTU {doc['mtu']}")
    t = Table(show_header=False, box=None)
    roles = ", ".join(f"{r} {n}" for r, n in doc["nodes_by_role"].items())
    over = doc["oversubscription"]
    rows = [
        ("nodes by role", roles),
        ("diameter / avg hops", f"{doc['diameter']} / {doc['avg_hops']} (switch diameter "
                                f"{doc['switch_diameter']})"),
        ("ECMP paths min/mean/max", f"{doc['ecmp']['min']} / {doc['ecmp']['mean']} / {doc['ecmp']['max']}"),
        ("bisection", f"{doc['bisection_gbps']:g} Gbit/s of {doc['full_bisection_gbps']:g} "
                      f"({doc['bisection_ratio']:.3g} of full)"),
        ("oversubscription", "none (flat)" if over is None else
         f"{over:g}:1 ({', '.join(f'{r} {v:g}' for r, v in doc['oversubscription_by_role'].items())})"),
        ("switch ports used", f"{doc['ports_used']} (max {doc['max_ports_per_switch']} per switch)"),
        ("copper cables / optical modules", f"{doc['copper_cables']} / {doc['optical_modules']}"),
        ("cost", f"${doc['cost_usd']:,.0f} (${doc['cost_per_host_port_usd']:,.0f} per host port)"),
    ]
    for key in ("pods", "groups", "servers", "campuses"):
        if key in doc:
            rows.insert(1, (key, str(doc[key])))
    if "rail_only" in doc:
        ro = doc["rail_only"]
        rows.append(("rail-only gives up", f"Ethernet between rails: {'yes' if ro['ethernet_cross_rail'] else 'none'}; "
                     f"cross-rail {ro['hops']['cross_rail']['links']} links "
                     f"({ro['hops']['cross_rail']['nvlink_links']} NVLink) vs same-rail "
                     f"{ro['hops']['same_rail']['links']}") if "cross_rail" in ro["hops"] else
                    ("rail-only", "one rail"))
    for key, value in rows:
        t.add_row(key, value)
    out.print(t)
    cab = Table(title="links by tier", title_justify="left")
    for col in ("tier", "links", "copper", "optical", "modules", "coherent", "fibre km", "cost $"):
        cab.add_column(col, justify="right" if col != "tier" else "left")
    for tier, r in doc["cabling"].items():
        cab.add_row(tier, str(r["links"]), str(r["copper_cables"]), str(r["optical_links"]),
                    str(r["optical_modules"]), str(r["coherent_modules"]), f"{r['fibre_km']:g}", f"{r['cost']:,.0f}")
    out.print(cab)
    from testbed.topo.metrics import mapping_table

    out.print(mapping_table(doc["mapping"], doc["scale"]))
