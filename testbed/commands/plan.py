"""``testbed plan SPEC [--scale N] [--json]``: what a replica of SPEC would build, without root.

Per link: real and emulated parameters, the backend (none / htb / netem / userspace) and why, anything a
backend cannot do (with its floor); per switch: kind, datapath, Thrift port, egress queues. ``--json``
prints the same document a run writes as ``plan.json``. Capabilities come from ``testbed doctor``
(without root the root-only probes count as absent, so the plan is the portable one).
"""

from __future__ import annotations

from testbed.console import console, out, print_json
from testbed.errors import SpecError

#: ``--serialise`` of ``testbed plan`` and ``testbed up`` (Overrides.serialise)
SERIALISE_HELP = ("every link with a rate through a link node that serialises each frame at the rate (store and "
                  "forward: BMv2 and tc HTB only pace, so a frame reaches the next hop one serialisation early); "
                  "costs a link node per link; a netem link serialises with netem's own rate instead")

def register(sub) -> None:
    parser = sub.add_parser("plan", help="the replica plan of a spec: links, backends, queues (no root)",
                            description=__doc__)
    parser.add_argument("spec", metavar="SPEC", help="spec file or shipped example name")
    parser.add_argument("--scale", type=float, help="time-dilation factor (default: the spec's)")
    parser.add_argument("--link-backend", default="auto", help="auto | netem | userspace (default auto)")
    parser.add_argument("--assume", action="store_true",
                        help="do not ask testbed doctor: plan for a machine without netem/RED/OVS kernel datapath")
    parser.add_argument("--serialise", action="store_true",
                        help=SERIALISE_HELP)
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    parser.set_defaults(func=_plan)


def _plan(args) -> int:
    from testbed.plan import ASSUMED, Overrides, plan_replica
    from testbed.topo.spec import build_graph, load_spec, resolve_spec

    if args.scale is not None and not 0 < args.scale < float("inf"):
        raise SpecError("--scale", f"must be a positive finite number, got {args.scale:g}")
    spec = load_spec(resolve_spec(args.spec))
    _beyond_limits(spec, args)
    G = build_graph(spec)
    if args.assume:
        caps = ASSUMED
    else:
        from testbed.doctor import plan_capabilities

        caps = plan_capabilities()
    plan = plan_replica(G, caps, Overrides(scale=args.scale, link_backend=args.link_backend,
                                           serialise=args.serialise))
    for warning in plan.warnings:   # stderr: the data (and its notes) stay on stdout
        console.print(f"[yellow]warning: {warning}[/yellow]")
    if args.json:
        print_json(plan.to_json())
    else:
        from testbed.plan.render import print_plan

        print_plan(plan, out)
    return 0


def _beyond_limits(spec, args) -> None:
    """A spec this machine cannot build: its closed-form figures (what a replica would have shown), then the
    refusal naming the limit (exit 2). Checked before its graph is built (a fat-tree k=1024 would not fit)."""
    from testbed.commands.topo import analytic_doc, print_analytic
    from testbed.plan.limits import MAX_INTERFACES, refuse_huge
    from testbed.topo.counts import closed_form

    counts = closed_form(spec.kind, spec.params)
    try:
        refuse_huge(spec)
    except SpecError as exc:
        if counts is not None:
            doc = analytic_doc(spec, counts, f"beyond one machine (at most {MAX_INTERFACES:,} interfaces): "
                                             "no plan, figures in closed form")
            doc["buildable"] = False
            print_json(doc) if args.json else print_analytic(doc, note=False)
        raise exc from None
