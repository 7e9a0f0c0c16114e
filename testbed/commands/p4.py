"""``testbed p4 compile|entries|counters``: P4 programs for the BMv2 switches.

    testbed p4 compile [p4/fabric.p4]                 compile (cached by content), print the JSON path
    testbed p4 entries SPEC --switch S [--mode both]  fabric.p4 entries for one switch (dry run: CLI text)
    testbed p4 counters --thrift-port 9090            fabric.p4 counters of a running switch
"""

from __future__ import annotations

from pathlib import Path

from rich.table import Table

from testbed.cli import add_verbs, port
from testbed.console import out, print_json
from testbed.errors import UsageError
from testbed.units import parse_duration, parse_size


def register(sub) -> None:
    parser = sub.add_parser("p4", help="P4 programs for BMv2 switches: compile, table entries, counters",
                            description=__doc__)
    verbs = add_verbs(parser)
    c = verbs.add_parser("compile", help="compile a P4 program (cached by content)")
    c.add_argument("program", nargs="?", default=None, help="P4 source (default p4/fabric.p4)")
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=_compile)

    e = verbs.add_parser("entries", help="fabric.p4 table entries of one switch of a spec (simple_switch_CLI text)")
    e.add_argument("spec", help="spec file or shipped example name")
    e.add_argument("--switch", required=True, help="switch node name")
    e.add_argument("--mode", default="off", choices=("off", "ecn", "fast-cnp", "both"))
    e.add_argument("--kmin", default="100KB", help="RED Kmin (bytes, default 100KB)")
    e.add_argument("--kmax", default="400KB", help="RED Kmax (bytes, default 400KB)")
    e.add_argument("--pmax", type=float, default=0.2, help="RED Pmax (default 0.2)")
    e.add_argument("--cnp-interval", default="50us", help="switch CNP interval per flow, emulated (default 50us)")
    e.add_argument("--json", action="store_true")
    e.set_defaults(func=_entries)

    k = verbs.add_parser("counters", help="read fabric.p4 counters of a running switch")
    k.add_argument("--thrift-port", type=port, required=True)
    k.add_argument("--ports", default="1-8", help="port range for marks/cnps (default 1-8)")
    k.add_argument("--json", action="store_true")
    k.set_defaults(func=_counters)


def _compile(args) -> int:
    from testbed.p4rt.compile import compile_p4
    from testbed.scenario import REPO_ROOT

    if args.program is not None and not Path(args.program).is_file():
        raise UsageError(f"PROGRAM {args.program}: no such P4 source file; give a .p4 file (default p4/fabric.p4)")
    path = compile_p4(args.program or REPO_ROOT / "p4" / "fabric.p4")
    if args.json:
        print_json({"json": str(path)})
    else:
        out.print(str(path))
    return 0


def _entries(args) -> int:
    from testbed.p4rt import entries as E
    from testbed.routing.brain import RoutingBrain
    from testbed.topo.spec import build_graph, load_spec, resolve_spec

    G = build_graph(load_spec(resolve_spec(args.spec)))
    if args.switch not in G or G.nodes[args.switch].get("role") == "host":
        raise UsageError(f"{args.switch!r} is not a switch of {G.graph.get('name')}")
    brain = RoutingBrain(G)
    brain.compute_all(0.0)
    ecn = E.EcnConfig.from_bytes(parse_size(args.kmin, "--kmin"), parse_size(args.kmax, "--kmax"),
                                 mtu=G.graph.get("mtu", 1500), pmax=args.pmax, mode=args.mode,
                                 cnp_interval_s=parse_duration(args.cnp_interval, "--cnp-interval"))
    prog = E.fabric_program(G, args.switch, brain.tables().get(args.switch, {}).values(), ecn=ecn)
    if args.json:
        print_json({"switch": args.switch, "commands": prog.render().splitlines()})
    else:
        print(prog.render(), end="")
    return 0


def _port_range(text: str) -> list[int]:
    lo, _, hi = text.partition("-")
    try:
        ports = list(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        raise UsageError(f"--ports: expected a range such as 1-8, got {text!r}") from None
    if not ports or ports[0] < 0 or ports[-1] > 511:
        raise UsageError(f"--ports: must lie within 0-511, got {text!r}")
    return ports


def _counters(args) -> int:
    from testbed.p4rt.client import SwitchClient
    from testbed.p4rt.entries import CNP_SKIP_REASONS, DROP_REASONS

    ports = _port_range(args.ports)
    with SwitchClient(f"thrift:{args.thrift_port}", args.thrift_port) as c:
        doc = {"marks": {p: c.counter_read("marks", p).packets for p in ports},
               "cnps": {p: c.counter_read("cnps", p).packets for p in ports},
               "drops": {r: c.counter_read("drops", i).packets for r, i in DROP_REASONS.items()},
               "cnp_skipped": {r: c.counter_read("cnp_skipped", i).packets for r, i in CNP_SKIP_REASONS.items()}}
    if args.json:
        print_json(doc)
        return 0
    t = Table("port", "ECN marks", "fast CNPs")
    for p in ports:
        t.add_row(str(p), str(doc["marks"][p]), str(doc["cnps"][p]))
    out.print(t)
    out.print("drops: " + ", ".join(f"{k} {v}" for k, v in doc["drops"].items()))
    out.print("CNPs not sent: " + ", ".join(f"{k} {v}" for k, v in doc["cnp_skipped"].items()))
    return 0
