"""``testbed fail link A B`` / ``testbed restore link A B`` / ``testbed fail switch S`` / ``testbed fail gray
A B --loss 10%``: on a running replica.

The running replica is found through the run registry (``/run/scaleout-testbed/runs``): its recorded
``python -m controllers.fabric --api-port Q`` process names the controller's status API (or pass
``--api-port``). Two ways to fail a link:

    --method portmod  (default) the controller sets both switch ports administratively down (OpenFlow
                      port-mod); OVS brings the interfaces down, the peers lose carrier.
    --method ifdown   ``ip link set <intf> down`` on the switch ends, as a cable cut would look; needs root.

Either way the switches report port-status and the controller reroutes; ``testbed controller status``
shows the failover events with timestamps.

A BMv2 replica (``testbed up SPEC --p4 fabric``) has no controller: ``fail link A B`` / ``restore link A B``
(and ``fail switch S``: all its links) take the switch ends of the link down or up (``ip link``, needs
root); the replica's failover driver sees the ports over netlink and updates the tables incrementally
from the routing brain (:mod:`testbed.p4rt.live`). The command waits for the driver's event and prints
when the port was seen and the tables were repaired, from the start of the cut.

A gray failure (``fail gray A B --loss 10% [--one-way]``; undo: ``restore gray A B``) keeps the carrier up
and makes the link lose that fraction of the frames crossing it (both ways, or only from A to B). It
needs the link to be carried by a userspace link node (the plan gives one to a link with delay or loss,
or to every shaped link with ``link_backend: userspace``): its loss changes at runtime, counters kept
(:mod:`testbed.links.control`). A controller with gray detection (``--gray-interval``) sees the loss in
the two switch ports' counters and routes around the link.
"""

from __future__ import annotations

from pathlib import Path

from testbed.cli import add_verbs, port
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
            p.add_argument("--api-port", type=port, help="controller API port (default: from the run registry)")
            p.add_argument("--json", action="store_true")
            p.set_defaults(func=_run, down=(verb == "fail"))
        gray = what.add_parser("gray", help=f"{verb} a gray failure (loss, carrier up) on a link-node link")
        gray.add_argument("a")
        gray.add_argument("b")
        if verb == "fail":
            gray.add_argument("--loss", required=True, help="fraction of frames lost, e.g. 10%% or 0.1")
            gray.add_argument("--one-way", action="store_true", help="only frames from A to B are lost")
        gray.add_argument("--json", action="store_true")
        gray.set_defaults(func=_run_gray, down=(verb == "fail"))


# ------------------------------------------------------------------------------------------ gray (pure parts)
LINE_MODULES = ("testbed.links.delayline", "testbed.pfc.line")


def link_nodes_in_runs(docs: list[dict]) -> list[dict]:
    """Running link nodes recorded in run registry documents (pure: parses the recorded argv).

    Returns ``[{"run_id", "pid", "start", "node", "stats", "core"}]``; ``node`` is the link node's name
    (its port names are ``<node>-eth1``/``-eth2``).
    """
    from testbed.emu.registry import live_processes

    found = []
    for doc, obj, argv in live_processes(docs):
        compiled = "forward" in argv and any(Path(a).name.startswith("linkcore") for a in argv)
        if not compiled and not set(LINE_MODULES) & set(argv):
            continue
        opts = dict(zip(argv, argv[1:], strict=False))
        if "--a" not in opts or "--stats" not in opts:
            continue
        found.append({"run_id": doc.get("run_id"), "pid": obj.get("pid"), "start": obj.get("start"),
                      "node": opts["--a"].rsplit("-eth", 1)[0], "stats": opts["--stats"],
                      "core": "c" if compiled else "python"})
    return found


def plan_folders(docs: list[dict], nodes: list[dict]) -> list[Path]:
    """Folders that may hold a running replica's ``plan.json``: the link nodes' and the controllers' (pure)."""
    from testbed.emu.registry import live_processes

    folders = [Path(n["stats"]).parent for n in nodes]
    for _doc, _obj, argv in live_processes(docs):
        if "controllers.fabric" in argv and "--graph" in argv:
            folders.append(Path(argv[argv.index("--graph") + 1]).parent)
    return list(dict.fromkeys(folders))


def gray_target(nodes: list[dict], plans: dict, a: str, b: str) -> dict:
    """The running link node carrying link ``a - b`` (pure), with the link's ``u`` and ``v``.

    Args:
        nodes: :func:`link_nodes_in_runs`.
        plans: ``{folder: plan.json document}`` of the running replicas.

    Raises:
        UsageError: no such link, or it is not carried by a userspace link node (says how to get one).
    """
    by_place = {(str(Path(n["stats"]).parent), n["node"]): n for n in nodes}
    carried = []
    for folder, plan in plans.items():
        for link in plan.get("links", []):
            if link.get("via") and (str(folder), link["via"]) in by_place:
                carried.append(f"{link['u']} - {link['v']} ({link['via']})")
            if {link.get("u"), link.get("v")} != {a, b}:
                continue
            node = by_place.get((str(folder), link.get("via")))
            if node is not None:
                return {**node, "u": link["u"], "v": link["v"]}
            raise UsageError(
                f"link {a} - {b} is carried by the {link.get('backend')} backend ({link.get('reason') or 'no reason'}), "
                "not by a userspace link node, so its loss cannot change at runtime; give the link delay or loss "
                "in the spec (or plan with --link-backend userspace) so the replica puts a link node on it")
    known = ", ".join(carried) or "none"
    raise UsageError(f"no link {a} - {b} in a running replica (links carried by link nodes: {known})")


def gray_rates(target: dict, a: str, loss: float, one_way: bool) -> dict:
    """Per-direction loss for the link node (``a>b`` is its ``u`` -> ``v``): both, or only from ``a`` (pure)."""
    forward = "a>b" if target["u"] == a else "b>a"
    if one_way:
        return {forward: loss}
    return {"a>b": loss, "b>a": loss}


def _run_gray(args) -> int:
    import json

    from testbed.emu.registry import load_runs, same_process
    from testbed.links.model import _probability

    loss = _probability(args.loss, "--loss") if args.down else 0.0
    docs = load_runs()
    nodes = link_nodes_in_runs(docs)
    plans = {}
    for folder in plan_folders(docs, nodes):
        try:
            plans[folder] = json.loads((folder / "plan.json").read_text())
        except (OSError, ValueError):
            continue
    target = gray_target(nodes, plans, args.a, args.b)
    if not same_process(int(target["pid"]), target["start"]):
        raise EmulationError(f"link node {target['node']} (pid {target['pid']}) is no longer running")
    require_root("testbed fail gray")
    from testbed.links.wire import set_link_loss

    rates = gray_rates(target, args.a, loss, getattr(args, "one_way", False))
    doc = set_link_loss(int(target["pid"]), target["stats"], rates,
                        what=f"{target['node']} ({target['u']} - {target['v']})")
    now = {d: doc["directions"][d].get("loss_rate_now") for d in ("a>b", "b>a")}
    result = {"action": f"{'fail' if args.down else 'restore'} gray", "link": [target["u"], target["v"]],
              "node": target["node"], "loss_now": {f"{target['u']}->{target['v']}": now["a>b"],
                                                   f"{target['v']}->{target['u']}": now["b>a"]},
              "drop_loss": {d: doc["directions"][d].get("drop_loss") for d in ("a>b", "b>a")}}
    if args.json:
        print_json(result)
    else:
        lossy = ", ".join(f"{k} {v:.3%}" for k, v in result["loss_now"].items())
        out.print(f"{result['action']} {args.a} - {args.b} ({target['node']}): loss now {lossy}")
    return 0


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


def p4_link_intfs(p4: dict, what: str, a: str, b: str | None = None) -> list[dict]:
    """The links of a BMv2 replica's record (``up.json``'s ``p4``) that ``fail link a b`` or ``fail switch
    a`` cuts (pure).

    Raises:
        UsageError: no such link or switch.
    """
    links = p4.get("links", [])
    if what == "link":
        found = [lk for lk in links if set(lk["names"]) == {a, b}]
        if not found:
            raise UsageError(f"no link {a} - {b} in the running replica (`testbed exec` a node and `ip link`, "
                             "or the shell's `links`, list them)")
        return found
    found = [lk for lk in links if a in lk["names"]]
    if not found:
        raise UsageError(f"no switch {a!r} in the running replica")
    return found


def _run_p4(args, doc: dict) -> int:
    """A BMv2 replica (``testbed up --p4 fabric``): cut the links' switch ports as a cable cut would; its
    failover driver sees the ports go down (netlink) and updates the tables. Waits for the driver's event."""
    import time

    from testbed.emu.ops import set_link_state
    from testbed.p4rt.live import find_event, read_events
    from testbed.poll import poll

    require_root(f"testbed {'fail' if args.down else 'restore'} {args.what}")
    links = p4_link_intfs(doc["p4"], args.what, args.s if args.what == "switch" else args.a,
                          getattr(args, "b", None))
    verb = "fail" if args.down else "restore"
    kind = "link_down" if args.down else "link_up"
    t0 = time.time()
    set_link_state([i for lk in links for i in lk["intfs"]], up=not args.down)
    path = Path(doc["p4"]["events"])

    def seen():
        docs = read_events(path)
        found = [find_event(docs, kind, lk["nodes"], t0) for lk in links]
        return found if all(found) else None
    try:
        got = poll(seen, timeout=10, interval=0.02, what=f"the BMv2 failover driver to see the {args.what} {verb}ed")
    except TimeoutError as exc:
        raise EmulationError(f"{exc} (events in {path})") from None
    result = {"action": f"{verb} {args.what}", "method": "ifdown", "p4": True,
              "interfaces": [i for lk in links for i in lk["intfs"]],
              "events": [{**e, "detect_ms": (e["detected"] - t0) * 1e3,
                          "repaired_ms": (e["programmed"] - t0) * 1e3} for e in got]}
    if args.json:
        print_json(result)
    else:
        for e in result["events"]:
            out.print(f"{verb} link {' - '.join(map(str, e['target']))}: seen {e['detect_ms']:.1f} ms after the "
                      f"cut, {e['route_changes']} route changes -> {e['table_ops']} table ops, tables updated "
                      f"{e['repaired_ms']:.1f} ms after the cut (BMv2)")
    return 0


def _run(args) -> int:
    from controllers.launch import ApiError, find_controller
    from testbed.emu import session

    doc = session.read() if not args.api_port else None
    if doc is not None and doc.get("p4"):
        return _run_p4(args, doc)
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
