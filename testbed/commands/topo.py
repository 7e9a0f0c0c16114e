"""``testbed topo show|draw|list``: fabric metrics and drawings from a spec, without emulation.

SPEC is a path to a YAML file or the name of a shipped example (``fat-tree-k4`` = scenarios/specs/
fat-tree-k4.yaml). Invalid specs print one line naming the field and exit 2.
"""

from __future__ import annotations

from rich.table import Table

from testbed.cli import add_verbs
from testbed.console import console, print_json
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


def _show(args) -> int:
    from testbed.topo.metrics import summary

    G = build_graph(load_spec(resolve_spec(args.spec)))
    doc = summary(G)
    if args.json:
        print_json(doc)
    else:
        _print_summary(doc)
    return 0


def _draw(args) -> int:
    from testbed.topo.draw import draw

    G = build_graph(load_spec(resolve_spec(args.spec)))
    out = draw(G, args.out)
    console.print(f"wrote {out} ({G.number_of_nodes()} nodes, {G.number_of_edges()} links)")
    return 0


def _list(args) -> int:
    specs = {name: str(path) for name, path in shipped_specs().items()}
    if args.json:
        print_json(specs)
    else:
        for name, path in specs.items():
            console.print(f"{name:28s} {path}")
    return 0


def _print_summary(doc: dict) -> None:
    console.print(f"[bold]{doc['name']}[/] ({doc['kind']}): {doc['switches']} switches, {doc['hosts']} hosts, "
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
    console.print(t)
    cab = Table(title="links by tier", title_justify="left")
    for col in ("tier", "links", "copper", "optical", "modules", "coherent", "fibre km", "cost $"):
        cab.add_column(col, justify="right" if col != "tier" else "left")
    for tier, r in doc["cabling"].items():
        cab.add_row(tier, str(r["links"]), str(r["copper_cables"]), str(r["optical_links"]),
                    str(r["optical_modules"]), str(r["coherent_modules"]), f"{r['fibre_km']:g}", f"{r['cost']:,.0f}")
    console.print(cab)
    from testbed.topo.metrics import mapping_table

    console.print(mapping_table(doc["mapping"], doc["scale"]))
