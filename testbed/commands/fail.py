"""``testbed fail link A B`` / ``testbed restore link A B`` / ``testbed fail switch S``: on a running replica.

The running replica is found through the run registry (``/run/scaleout-testbed/runs``): its recorded
``python -m controllers.fabric --api-port Q`` process names the controller's status API (or pass
``--api-port``). Two ways to fail a link:

    --method portmod  (default) the controller sets both switch ports administratively down (OpenFlow
                      port-mod); OVS brings the interfaces down, the peers lose carrier.
    --method ifdown   ``ip link set <intf> down`` on the switch ends, as a cable cut would look; needs root.

Either way the switches report port-status and the controller reroutes; ``testbed controller status``
shows the failover events with timestamps.
"""

from __future__ import annotations

from testbed.cli import add_verbs
from testbed.console import out, print_json, require_root
from testbed.errors import EmulationError, UsageError

METHODS = ("portmod", "ifdown")


def register(sub) -> None:
    for verb, helptext in (("fail", "fail a link or switch of the running replica"),
                           ("restore", "bring a failed link or switch of the running replica back")):
        parser = sub.add_parser(verb, help=helptext, description=__doc__)
        what = add_verbs(parser, "what", "WHAT")
        link = what.add_parser("link", help=f"{verb} the link between two nodes")
        link.add_argument("a")
        link.add_argument("b")
        switch = what.add_parser("switch", help=f"{verb} every link of a switch")
        switch.add_argument("s")
        for p in (link, switch):
            p.add_argument("--method", choices=METHODS, default="portmod")
            p.add_argument("--api-port", type=int, help="controller API port (default: from the run registry)")
            p.add_argument("--json", action="store_true")
            p.set_defaults(func=_run, down=(verb == "fail"))


def link_interfaces(topology: dict, a: str, b: str) -> list[str]:
    """Switch-side interface names of link a-b from the controller's ``/topology`` (pure).

    Raises:
        UsageError: no such link, or the controller has not learnt the port names yet.
    """
    for link in topology["links"]:
        if {link["a"], link["b"]} == {a, b}:
            names = []
            for node, port_no in link["ports"].items():
                name = topology["port_names"].get(f"{node}:{port_no}")
                if name:
                    names.append(name)
            if not names:
                raise UsageError(f"the controller knows no interface names for link {a} - {b} yet")
            return names
    raise UsageError(f"no link {a} - {b} in the running fabric")


def ifdown_argv(names: list[str], down: bool) -> list[list[str]]:
    from testbed.emu.ops import link_state_argv

    return [link_state_argv(n, not down) for n in names]


def _run(args) -> int:
    from controllers.launch import ApiError, find_controller

    client = find_controller(args.api_port)
    verb = "fail" if args.down else "restore"
    try:
        if args.method == "portmod":
            if args.what == "link":
                answer = client.post(f"/{verb}/link", a=args.a, b=args.b)
            else:
                answer = client.post(f"/{verb}/switch", s=args.s)
            result = {"action": f"{verb} {args.what}", "method": "portmod", **answer}
        else:
            require_root(f"testbed {verb} --method ifdown")
            topo = client.get("/topology")
            if args.what == "link":
                names = link_interfaces(topo, args.a, args.b)
            else:
                names = [n for link in topo["links"] if args.s in (link["a"], link["b"])
                         for n in link_interfaces(topo, link["a"], link["b"])]
            from testbed.emu.ops import set_link_state

            set_link_state(names, up=not args.down)
            result = {"action": f"{verb} {args.what}", "method": "ifdown", "interfaces": names, "ok": True}
    except ApiError as exc:
        raise EmulationError(str(exc)) from None
    if args.json:
        print_json(result)
    else:
        target = f"{args.a} - {args.b}" if args.what == "link" else args.s
        out.print(f"{verb} {args.what} {target}: done ({args.method})")
    return 0
