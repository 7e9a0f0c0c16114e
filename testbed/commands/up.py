"""``sudo testbed up SPEC [--p4 PROGRAM | --controller] [--scale N] [--link-backend B]``: keep a replica of any spec up.

The replica of SPEC (a spec file or a shipped example, as ``testbed topo show`` takes) is built with the
link emulation its tiers ask for (delay, loss and RED by tc netem where ``testbed doctor`` finds it, the
userspace link node otherwise; ``--link-backend`` decides instead, as for ``testbed plan`` and ``testbed
run``; ``plan.json`` in ``--out`` says which, link by link), then a shell in Mininet's spirit reads commands
until ``exit``, EOF (Ctrl-D) or a signal; leaving it tears everything down (also on SIGHUP: closing the
terminal)::

    testbed> h0 ping -c2 h5          any command in a node; a host's name stands for its address
    testbed> pingall                 every host pings every other once
    testbed> iperf h0 h5 [SECONDS]   iperf3 between two hosts
    testbed> links | nodes | dump    what is up, interfaces and addresses
    testbed> fail s1 s2 / restore s1 s2   cut and restore a cable (both ends down)

From another terminal: ``testbed exec NODE -- CMD``, ``testbed ls``, ``testbed down``. With ``--wait`` there
is no shell: the replica stays up until ``testbed down`` or a signal. One replica at a time per machine
(``TESTBED_LOCK_WAIT=<s>`` queues behind a running one).

Switches: Open vSwitch in standalone mode for loop-free fabrics; a fabric with loops needs a routing
brain, so it gets the os-ken fabric controller (``--controller`` forces it). ``--p4 fabric`` (or switches
marked ``p4: fabric`` in the spec) runs BMv2 with ``p4/fabric.p4`` programmed by the same routing brain, and
kept on it: a link whose switch ports go down (``fail``, ``testbed fail link``) is routed around with
incremental table writes (docs/sdn.md "P4 fabrics"; events in ``<out>/p4-events.jsonl``).
"""

from __future__ import annotations

import argparse
import cmd
import datetime as _dt
import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

from testbed.console import console, require_root
from testbed.errors import SpecError, UsageError

#: P4 programs ``--p4`` can run on every switch (``aggregation`` needs its own scenario's entries).
UP_P4_PROGRAMS = ("fabric",)
#: The BMv2 failover driver's events (one JSON line each), in the replica's ``--out`` folder.
P4_EVENTS = "p4-events.jsonl"


def register(sub) -> None:
    from testbed.commands.plan import SERIALISE_HELP

    parser = sub.add_parser("up", help="build a replica of a spec and keep it up, with a shell",
                            description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("spec", metavar="SPEC", help="spec file or shipped example name (testbed topo list)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--p4", metavar="PROGRAM", help=f"every switch runs this P4 program on BMv2 "
                                                       f"({', '.join(UP_P4_PROGRAMS)})")
    mode.add_argument("--controller", action="store_true",
                      help="OVS under the os-ken fabric controller (the default when the fabric has loops)")
    parser.add_argument("--scale", type=float, metavar="N", help="time dilation (default: the spec's)")
    parser.add_argument("--link-backend", choices=("auto", "netem", "userspace"), default="auto",
                        help="links with delay, loss or RED: tc netem where the kernel has it (auto), or this one")
    parser.add_argument("--serialise", action="store_true",
                        help=SERIALISE_HELP)
    parser.add_argument("--out", metavar="DIR", help="logs and replica.json (default results/up/<timestamp>)")
    parser.add_argument("--wait", action="store_true", help="no shell: stay up until `testbed down` or a signal")
    parser.set_defaults(func=_up)


def load_graph(spec_arg: str, scale: float | None, p4: str | None):
    """The graph of SPEC with ``--scale`` and ``--p4`` applied (pure: no root needed)."""
    from dataclasses import replace

    from testbed.topo.spec import build_graph, load_spec, resolve_spec

    spec = load_spec(resolve_spec(spec_arg))
    if scale is not None:
        if not 0 < scale < float("inf"):
            raise SpecError("--scale", f"expected a positive number such as 1000, got {scale:g}")
        spec = replace(spec, scale=float(scale))
    if p4 is not None and p4 not in UP_P4_PROGRAMS:
        raise SpecError("--p4", f"{p4!r} cannot be programmed for a whole fabric; allowed: "
                                f"{', '.join(UP_P4_PROGRAMS)} (aggregation runs in `testbed run innetwork_allreduce`)")
    from testbed.plan.limits import refuse_huge

    refuse_huge(spec)
    G = build_graph(spec)
    if p4 is not None:
        for _, d in G.nodes(data=True):
            if d["role"] != "host":
                d["p4"] = p4
    return G


def needs_controller(G) -> bool:
    """OVS standalone bridges learn and flood: only a loop-free switch graph works without a controller."""
    import networkx as nx

    switches = G.subgraph(n for n, d in G.nodes(data=True) if d["role"] != "host")
    return not nx.is_forest(switches)


def _up(args) -> int:
    require_root("testbed up")
    G = load_graph(args.spec, args.scale, args.p4)
    from testbed.plan.limits import check_buildable

    check_buildable(G)
    out_dir = Path(args.out) if args.out else Path("results") / "up" / _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    from testbed.scenario import _check_creatable

    _check_creatable(out_dir, "--out")
    from testbed.emu import RunRegistry, session

    with RunRegistry(f"up-{G.graph.get('name', 'replica')}") as run:
        out_dir.mkdir(parents=True, exist_ok=True)
        with _replica(G, run, out_dir, args.controller, args.link_backend, args.serialise) as rep:
            doc = _session_doc(rep, G, args.spec, out_dir)
            session.write(doc)
            try:
                console.print(f"[bold]{doc['name']}[/bold] is up: {len(rep.layout.hosts)} hosts, "
                              f"{len(rep.layout.switches)} switches; logs in {out_dir}. "
                              "Other terminals: `testbed exec NODE -- CMD`, `testbed ls`, `testbed down`.")
                if args.wait:
                    console.print("waiting for `testbed down` or a signal")
                    while True:
                        signal.pause()
                else:
                    ReplicaShell(rep, doc).cmdloop()
            finally:
                session.remove(os.getpid())
                console.print("[dim]tearing the replica down[/dim]")
    return 0


class _replica:
    """The Replica of ``G`` with what its spec asks for: link emulation, P4 switches (programmed by the
    routing brain) or the fabric controller. Uses only the Replica's public API."""

    def __init__(self, G, run, out_dir: Path, controller: bool, link_backend: str = "auto", serialise: bool = False):
        self.G, self.run, self.out_dir, self.link_backend = G, run, out_dir, link_backend
        self.serialise = serialise
        self.p4 = any(d.get("p4") for _, d in G.nodes(data=True) if d["role"] != "host")
        self.controller = not self.p4 and (controller or needs_controller(G))
        self.rep = None
        self.ctl = None
        self.failover = None

    def __enter__(self):
        from testbed.doctor import plan_capabilities
        from testbed.emu import Replica
        from testbed.links.node import DelayLineNode
        from testbed.plan import Overrides, plan_replica

        G = self.G
        kwargs: dict = {}
        overrides: dict = {"link_backend": self.link_backend, "serialise": self.serialise}
        if self.p4:
            programs = {d["p4"] for _, d in G.nodes(data=True) if d.get("p4")}
            if programs - set(UP_P4_PROGRAMS):
                raise SpecError("switches", f"P4 program(s) {', '.join(sorted(programs))} cannot be programmed by "
                                            f"`testbed up`; allowed: {', '.join(UP_P4_PROGRAMS)}")
            overrides["p4_program"] = "fabric"  # every switch runs fabric.p4, programmed by the routing brain
        elif self.controller:
            overrides["static_arp"] = False
        # planned before anything starts: --link-backend netem on a kernel without it is one line, nothing left
        plan = plan_replica(G, plan_capabilities(), Overrides(**overrides))
        if self.controller:
            from controllers.launch import start_controller

            self.ctl = start_controller(self.run, G, self.out_dir)
            kwargs["controller"] = self.ctl.address
        if self.p4:
            from testbed.p4rt.mininet_switch import plan_switch_factory

            kwargs["switch_factory"] = plan_switch_factory(plan, log_dir=self.out_dir)
        self.rep = Replica(plan, out_dir=self.out_dir, name="up", run=self.run, link_node_class=DelayLineNode,
                           **kwargs).__enter__()
        try:
            if self.ctl is not None:
                self.ctl.wait_ready()
            if self.p4:
                self._program_p4()
        except BaseException:
            self.rep.__exit__(*sys.exc_info())
            raise
        return self.rep

    def _program_p4(self) -> None:
        """Every BMv2 switch programmed from one routing brain, then kept on it: a link whose switch ports
        go down (``testbed fail link``, the shell's ``fail``) is routed around (testbed/p4rt/live.py)."""
        from testbed.p4rt.live import p4_failover
        from testbed.routing.brain import RoutingBrain

        self.failover = p4_failover(self.rep, RoutingBrain(self.rep.G), events=self.out_dir / P4_EVENTS)
        self.failover.__enter__()

    def __exit__(self, *exc):
        if self.failover is not None:
            self.failover.__exit__(*exc)
        if self.rep is not None:
            self.rep.__exit__(*exc)
        return False


def _session_doc(rep, G, spec_arg: str, out_dir: Path) -> dict:
    from testbed.emu.registry import process_start

    names = rep.layout.names
    nodes = {}
    for n, d in G.nodes(data=True):
        mn = rep.node(n)
        shell = getattr(mn, "shell", None)
        nodes[names[n]] = {"pid": shell.pid if shell is not None else None,
                           "kind": "host" if d["role"] == "host" else d["role"],
                           "ip": rep.ip(n) if d["role"] == "host" else None}
    return {"pid": os.getpid(), "start": process_start(os.getpid()), "run_id": rep.run.run_id,
            "name": G.graph.get("name", "replica"), "spec": spec_arg, "out_dir": str(out_dir.resolve()),
            "started": _dt.datetime.now().isoformat(timespec="seconds"), "scale": rep.dilation.scale,
            "nodes": nodes, "links": [[names[lk.u], names[lk.v]] for lk in rep.layout.links],
            **_p4_doc(rep, out_dir)}


def _p4_doc(rep, out_dir: Path) -> dict:
    """What ``testbed fail link`` needs to cut a link of a BMv2 replica: each link's switch-side interfaces
    and where the failover driver writes its events (empty for an OVS replica)."""
    if not any(s.kind == "bmv2" for s in rep.plan.switches):
        return {}
    from testbed.p4rt.live import switch_ends

    names = rep.layout.names
    links = [{"names": [names[u], names[v]], "nodes": [u, v], "intfs": intfs}
             for (u, v), intfs in switch_ends(rep).items()]
    return {"p4": {"events": str((out_dir / P4_EVENTS).resolve()), "links": links}}


class ReplicaShell(cmd.Cmd):
    """The ``testbed>`` shell: Mininet's CLI verbs on a Replica. Data goes to stdout, hints to stderr."""

    intro = "type `help` for the commands, `exit` or Ctrl-D to tear the replica down"

    def __init__(self, rep, doc: dict, stdin=None, stdout=None):
        super().__init__(stdin=stdin, stdout=stdout)
        self.rep, self.doc = rep, doc
        self.by_name = {rep.layout.names[n]: n for n in rep.G.nodes}
        interactive = (stdin or sys.stdin).isatty()
        self.use_rawinput = interactive
        self.prompt = "testbed> " if interactive else ""
        if not interactive:
            self.intro = None

    # -- plumbing
    def _print(self, text: str) -> None:
        self.stdout.write(text.rstrip("\n") + "\n")
        self.stdout.flush()

    def _node(self, name: str):
        if name not in self.by_name:
            raise UsageError(f"no node {name!r}; `nodes` lists them")
        return self.rep.node(self.by_name[name])

    def _hosts(self) -> list[str]:
        return [h.name for h in self.rep.layout.hosts]

    def onecmd(self, line):
        try:
            return super().onecmd(line)
        except UsageError as exc:
            console.print(f"[red]{exc}[/red]")
        except subprocess.TimeoutExpired as exc:
            console.print(f"[red]timed out after {exc.timeout:g}s[/red]")
        return False

    def emptyline(self):
        return False

    def default(self, line):
        words = shlex.split(line)
        if words and words[0] in self.by_name:
            argv = [self.doc["nodes"][w]["ip"] if w in self.doc["nodes"] and self.doc["nodes"][w]["ip"] else w
                    for w in words[1:]]
            if not argv:
                raise UsageError(f"{words[0]}: give a command to run in it, e.g. `{words[0]} ip addr`")
            self._print(self._node(words[0]).cmd(" ".join(shlex.quote(a) for a in argv)))
            return False
        raise UsageError(f"unknown command {words[0] if words else line!r}: `help` lists them; "
                         "`NODE CMD` runs CMD in a node")

    # -- verbs
    def do_nodes(self, arg):
        """nodes: every node with its kind and address."""
        for name, n in sorted(self.doc["nodes"].items()):
            self._print(f"{name:12s} {n['kind']:8s} {n['ip'] or ''}")

    def do_links(self, arg):
        """links: every link with its interfaces and whether each end is up."""
        for lk in self.rep.layout.links:
            ends = []
            for node, port in ((lk.u, lk.port_u), (lk.v, lk.port_v)):
                intf = self.rep.layout.intf(node, port)
                state = self.rep.node(node).cmd(f"cat /sys/class/net/{intf}/operstate 2>/dev/null").strip() or "?"
                ends.append(f"{intf}({state})")
            via = f" via {lk.via}" if lk.via else ""
            self._print(f"{self.rep.layout.names[lk.u]}<->{self.rep.layout.names[lk.v]}{via}  {' '.join(ends)}")

    def do_dump(self, arg):
        """dump: every node, its shell pid, interfaces and addresses (JSON lines)."""
        for name, n in sorted(self.doc["nodes"].items()):
            node = self._node(name)
            self._print(json.dumps({"node": name, **n, "interfaces": [i for i in node.intfNames() if i != "lo"]}))

    def do_pingall(self, arg):
        """pingall [TIMEOUT_S]: every host pings every other once; prints the lost pairs and a total."""
        timeout = max(1, int(float(arg or 0) or 2 * max(1.0, self.rep.dilation.scale / 1000)))
        hosts = self._hosts()
        lost, total = [], 0
        for src in hosts:
            targets = [h for h in hosts if h != src]
            script = "; ".join(f"ping -c1 -W{timeout} {self.doc['nodes'][t]['ip']} >/dev/null 2>&1 "
                               f"&& echo ok {t} || echo lost {t}" for t in targets)
            for line in self._node(src).cmd(script).splitlines():
                verdict, _, dst = line.strip().partition(" ")
                if verdict in ("ok", "lost"):
                    total += 1
                    if verdict == "lost":
                        lost.append(f"{src}->{dst}")
        for pair in lost:
            self._print(f"lost {pair}")
        self._print(f"pingall: {total - len(lost)}/{total} reachable")

    def do_iperf(self, arg):
        """iperf SRC DST [SECONDS]: iperf3 TCP from SRC to DST; prints the goodput."""
        words = arg.split()
        if len(words) not in (2, 3):
            raise UsageError("usage: iperf SRC DST [SECONDS]")
        src, dst = self._node(words[0]), self._node(words[1])
        seconds = float(words[2]) if len(words) == 3 else 3.0
        from testbed.poll import poll

        server = dst.popen(["iperf3", "-s", "-1", "-p", "5201"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
        self.rep.run.record_process(server, argv=["iperf3", "-s"])
        try:
            poll(lambda: ":5201" in dst.cmd("ss -ltn"), timeout=10, what=f"iperf3 server on {words[1]}")
            out = src.cmd("iperf3", "-c", self.doc["nodes"][words[1]]["ip"], "-t", f"{seconds:g}", "-J")
            doc = json.loads(out[out.index("{"):]) if "{" in out else {"error": out.strip()}
            if "error" in doc:
                raise UsageError(f"iperf3 {words[0]}->{words[1]}: {doc['error']}")
            bps = doc["end"]["sum_received"]["bits_per_second"]
            real = self.rep.dilation.real_rate(bps)
            self._print(f"iperf {words[0]}->{words[1]}: {bps / 1e6:.2f} Mbit/s emulated "
                        f"({real / 1e9:.2f} Gbit/s real at scale {self.rep.dilation.scale:g})")
        finally:
            server.kill()
            server.wait(timeout=10)

    def _set_link(self, arg, up: bool):
        words = arg.split()
        if len(words) != 2:
            raise UsageError(f"usage: {'restore' if up else 'fail'} A B")
        a, b = (self.by_name.get(w) for w in words)
        if a is None or b is None:
            raise UsageError(f"no node {words[0] if a is None else words[1]!r}; `nodes` lists them")
        try:
            ends = [(a, self.rep.intf_name(a, b)), (b, self.rep.intf_name(b, a))]
        except KeyError:
            raise UsageError(f"no link {words[0]} - {words[1]}; `links` lists them") from None
        for node, intf in ends:
            self.rep.node(node).cmd(f"ip link set dev {intf} {'up' if up else 'down'}")
        self._print(f"{'restored' if up else 'failed'} {words[0]} - {words[1]}")

    def do_fail(self, arg):
        """fail A B: take both ends of the link A-B down (a cable cut)."""
        self._set_link(arg, up=False)

    def do_restore(self, arg):
        """restore A B: bring both ends of the link A-B back up."""
        self._set_link(arg, up=True)

    def do_exit(self, arg):
        """exit: tear the replica down and leave (also quit, Ctrl-D)."""
        return True

    do_quit = do_exit

    def do_EOF(self, arg):  # noqa: N802 - cmd.Cmd's name for end of input
        if self.use_rawinput:
            self._print("")
        return True
