"""``testbed link``: what a link would become, and what a running delay line has done.

    testbed link plan --rate 400G --distance 30km --loss 0.1% --red 100KB,400KB,20% --scale 1000 [--json]
        real and emulated parameters, the backend (htb | kernel | userspace) and the exact commands
        (tc argv lists, or the delay line's command line): nothing is run, no root needed.
    testbed link stats FILE [--json]
        counters of a delay line (its stats JSON: drops by cause, CE marks, lateness, kernel drops).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from testbed.cli import add_verbs
from testbed.console import console, out, print_json
from testbed.errors import SpecError, UsageError


def register(sub) -> None:
    parser = sub.add_parser("link", help="link emulation: plan a link, read delay-line counters",
                            description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    verbs = add_verbs(parser)
    plan = verbs.add_parser("plan", help="show the emulated link and its commands (dry run)")
    for flag, example in (("rate", "400G"), ("delay", "50ms"), ("distance", "30km"), ("jitter", "1ms"),
                          ("loss", "1%%"), ("queue", "1000 (packets), 64p or 10MB")):
        plan.add_argument(f"--{flag}", metavar="V", help=f"e.g. {example}")
    plan.add_argument("--red", metavar="KMIN,KMAX,PMAX", help="e.g. 100KB,400KB,20%% or 20p,60p,0.1")
    plan.add_argument("--no-ecn", action="store_true", help="RED drops instead of marking ECT packets")
    plan.add_argument("--scale", type=float, default=1.0, help="time-dilation factor (default 1)")
    plan.add_argument("--backend", choices=("auto", "netem", "kernel", "userspace"), default=None,
                      help="override the backend choice (kernel = netem; default auto)")
    plan.add_argument("--netem", action="store_true", help="plan as if the kernel had netem and red")
    plan.add_argument("--json", action="store_true")
    plan.set_defaults(func=run_plan)
    stats = verbs.add_parser("stats", help="counters of a delay line (its stats JSON file)")
    stats.add_argument("file")
    stats.add_argument("--json", action="store_true")
    stats.set_defaults(func=run_stats)


def spec_from_args(args) -> dict:
    """The ``link:`` block the flags describe (so validation is the spec's own)."""
    block = {k: getattr(args, k) for k in ("rate", "delay", "distance", "jitter", "loss", "queue")
             if getattr(args, k) is not None}
    if block.get("queue", "").isdigit():
        block["queue"] = int(block["queue"])
    if args.red:
        parts = [p.strip() for p in args.red.split(",")]
        if len(parts) != 3:
            raise SpecError("--red", f"expected KMIN,KMAX,PMAX such as 100KB,400KB,20%, got {args.red!r}")
        kmin, kmax, pmax = (int(p) if p.isdigit() else p for p in parts)
        block["red"] = {"kmin": kmin, "kmax": kmax, "pmax": pmax, "ecn": not args.no_ecn}
    return block


def plan_document(block: dict, scale: float, backend: str | None, netem: bool) -> dict:
    """Pure: the plan of one link (between two switches) as a JSON-able document (testbed.plan decides)."""
    import networkx as nx

    from testbed.links.delayline import build_argv
    from testbed.links.model import LinkParams
    from testbed.plan import Capabilities, Overrides, plan_replica

    real = LinkParams.from_spec(block, "link")
    G = nx.Graph()
    G.add_node("a", role="switch", tier=1)
    G.add_node("b", role="switch", tier=1)
    G.add_edge("a", "b", ports={"a": 1, "b": 1}, link=real)
    caps = Capabilities(netem=netem, red=netem, source="assumed")
    entry = plan_replica(G, caps, Overrides(scale=scale, link_backend=backend or "auto")).links[0]
    doc = {"real": real.describe(), "scale": scale, "emulated": entry.emulated.describe(),
           "backend": entry.backend, "reason": entry.reason, "notes": list(entry.notes),
           "emulated_params": entry.applied.to_dict()}
    if entry.backend in ("htb", "netem"):
        doc["commands"] = [list(argv) for argv in entry.tc[0][1]]
    elif entry.backend == "userspace":
        doc["commands"] = [build_argv("IFACE_U", "IFACE_V", entry.applied, "STATS.json", python="python3")]
    else:
        doc["commands"] = []
    return doc


def run_plan(args) -> int:
    doc = plan_document(spec_from_args(args), args.scale, args.backend, args.netem)
    if args.json:
        print_json(doc)
        return 0
    out.print(f"real:      {doc['real']}")
    out.print(f"emulated:  {doc['emulated']}  (scale {doc['scale']:g})")
    out.print(f"backend:   {doc['backend']} ({doc['reason']})")
    for note in doc["notes"]:
        console.print(f"[yellow]{note}[/yellow]")
    for argv in doc["commands"]:
        out.print("  " + " ".join(argv), markup=False, soft_wrap=True)
    return 0


def run_stats(args) -> int:
    path = Path(args.file)
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise UsageError(f"{path}: no such stats file") from None
    except (IsADirectoryError, UnicodeDecodeError):
        raise UsageError(f"{path}: not a delay-line stats file (give the stats JSON a delay line wrote)") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}: not a delay-line stats file ({exc})") from None
    if not isinstance(doc, dict) or "directions" not in doc:
        raise UsageError(f"{path}: not a delay-line stats file (no 'directions')")
    if args.json:
        print_json({k: v for k, v in doc.items()})
        return 0
    from rich.table import Table

    t = Table(title=f"delay line {doc['interfaces']['a']} <-> {doc['interfaces']['b']} "
                    f"(up {doc['uptime_s']:g} s, realtime {doc.get('realtime')})")
    keys = ("rx_packets", "tx_packets", "drop_tail", "drop_red", "drop_loss", "ce_marked", "max_queue_packets",
            "emulator_late", "max_lateness_s", "tx_errors")
    t.add_column("counter")
    for name in doc["directions"]:
        t.add_column(name, justify="right")
    for k in keys:
        t.add_row(k, *(f"{d.get(k, 0):.6g}" if isinstance(d.get(k), float) else str(d.get(k, 0))
                       for d in doc["directions"].values()))
    out.print(t)
    out.print(f"kernel receive drops (line too slow): {doc['rx_kernel_drops']}; "
                  f"late beyond {doc['late_tolerance_s'] * 1e6:g} us: {doc['emulator_late']}")
    return 0
