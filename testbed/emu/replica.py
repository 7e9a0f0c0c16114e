"""Replica: a running Mininet network that executes a :class:`testbed.plan.ReplicaPlan`, always torn down.

The plan (pure, :func:`testbed.plan.plan_replica`) decided everything: names, ports, dpids, addresses,
Thrift ports, each link's backend and tc commands, each switch's datapath and egress queues. This module
only carries it out (lock -> record -> create -> start -> configure -> ready)::

    plan = plan_replica(G, doctor.plan_capabilities(), Overrides(...))
    with Replica(plan, out_dir=res.dir, name="demo", link_node_class=DelayLineNode) as rep:
        rep.host("h1").cmd("ping -c1", rep.ip("h2"))

    RunRegistry (lock, record) --> Mininet: hosts, switches, [delay-line nodes], links --> net.start()
        --> offloads off, static ARP --> each link's tc argv --> BMv2 queue depth/rate --> ready
        --> plan.json + replica.json in out_dir
    exit (normal, exception, SIGINT, SIGTERM): net.stop() --> ovs-vswitchd.log lines of the run into
        out_dir (OVS replicas) --> registry removes anything left --> unlock

Switches are Open vSwitch bridges on the plan's datapath, or, for the plan's BMv2 switches,
``switch_factory(entry) -> (cls, params)`` (:func:`testbed.p4rt.mininet_switch.bmv2_switch_factory`).
Userspace links get ``link_node_class`` (:class:`testbed.links.node.DelayLineNode`) with the plan's
parameters. Both are passed in because emu is below links and p4rt (they import emu, not the reverse).
Every node created gets ``node.run`` = the :class:`RunRegistry`, so a node class that starts processes
records them (``self.run.record_process(pid)``) and ``testbed clean`` can remove them after a crash.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from pathlib import Path

from testbed.console import console, require_root
from testbed.emu import ops
from testbed.emu.laps import Laps
from testbed.emu.ovslog import LogTail
from testbed.emu.registry import RunRegistry, expedited_rcu
from testbed.emu.signals import deferred_signals
from testbed.errors import CapabilityError, EmulationError, SpecError
from testbed.poll import poll


def _mininet():
    try:
        from mininet import log, net, node
    except ImportError:
        raise CapabilityError("Mininet is not installed: run `sudo make setup`") from None
    return net, node, log


def _remote_controller(mn_node):
    """Mininet's RemoteController without its start-up probe. The probe runs ``echo A | telnet IP PORT`` in a
    shell and decodes the answer as UTF-8: when the controller's OpenFlow HELLO (binary, a random xid) came
    back first, the build died in UnicodeDecodeError (seen once in a clean-clone CI, 2026-12-03), and each
    probe was a stray OpenFlow session at the controller. The replica does not need it: the run starts the
    controller and waits for its readiness and for every switch to connect (``wait_connected``)."""

    class RemoteController(mn_node.RemoteController):
        def checkListening(self):  # noqa: N802 - Mininet's name
            return None

    return RemoteController


class Replica:
    """Context manager running the replica of a :class:`testbed.plan.ReplicaPlan`.

    Args:
        plan: what to build (:func:`testbed.plan.plan_replica`).
        controller: None -> OVS ``standalone`` (learning bridge, loop-free fabrics only);
            ``(ip, port)`` -> OpenFlow 1.3 remote controller, ``secure`` fail mode.
        out_dir: where logs, ``plan.json`` and ``replica.json`` go (None: nowhere).
        name: run name (registry, lock message; default the plan's name).
        switch_factory: ``f(switch_entry) -> (cls, params)`` for the plan's BMv2 and external switches.
        link_node_class: the node class of userspace links (``DelayLineNode``).
        wait_connected: seconds to wait for switches to reach the controller (0: do not wait).
        run: an existing (entered) RunRegistry to record into instead of a new one.
    """

    def __init__(self, plan, *, controller: tuple[str, int] | None = None, out_dir: Path | None = None,
                 name: str | None = None, switch_factory=None, link_node_class=None, wait_connected: float = 30.0,
                 run: RunRegistry | None = None):
        if not hasattr(plan, "layout") or not hasattr(plan, "links"):
            raise SpecError("plan", f"Replica needs a testbed.plan.ReplicaPlan (plan_replica(G, ...)), "
                                    f"got {type(plan).__name__}")
        if controller is not None and (len(controller) != 2 or not isinstance(controller[1], int)):
            raise SpecError("controller", f"must be None or (ip, port), got {controller!r}")
        if any(s.kind in ("bmv2", "external") for s in plan.switches) and switch_factory is None:
            raise SpecError("switch_factory", "the plan has BMv2 or external switches: pass a switch_factory "
                                              "(plan_switch_factory(plan), ocs_switch_factory(...))")
        if any(e.backend == "userspace" for e in plan.links) and link_node_class is None:
            raise SpecError("link_node_class", "the plan has userspace links: pass testbed.links.node.DelayLineNode")
        self.plan = plan
        self.layout = plan.layout
        self.G = plan.graph
        self.dilation = plan.dilation
        self.controller = controller
        self.out_dir = Path(out_dir) if out_dir else None
        self._ovs_log: LogTail | None = None
        self.name = name or plan.name
        self.switch_factory = switch_factory
        self.link_node_class = link_node_class
        self.wait_connected = wait_connected
        self.net = None
        self.run: RunRegistry | None = run
        self._own_run = run is None
        self._nodes: dict = {}         # graph node -> Mininet node
        self._link_nodes: dict = {}    # (u, v) -> link node
        #: Seconds of each teardown step ("switch processes", "bridges", "shells", "links", then the run
        #: registry's "registry <step>"), filled by ``__exit__``: where a large teardown spends its time.
        self.teardown_s: dict = {}

    # ----------------------------------------------------------------------------- access
    def host(self, node):
        """Mininet host of graph node ``node``."""
        return self._nodes[node]

    def switch(self, node):
        """Mininet switch of graph node ``node``."""
        return self._nodes[node]

    def node(self, node):
        return self._nodes[node]

    def link_node(self, u, v):
        """The link node inserted on edge u--v (KeyError when none)."""
        return self._link_nodes[(u, v)] if (u, v) in self._link_nodes else self._link_nodes[(v, u)]

    def link_nodes(self) -> dict:
        """Every userspace link node by ``"u-v"``, the edge it sits on (what a trial's health watch reads)."""
        return {f"{u}-{v}": dl for (u, v), dl in self._link_nodes.items()}

    def ip(self, node) -> str:
        """Address of host ``node`` (without prefix length)."""
        return self.layout.host(node).ip

    def mac(self, node) -> str:
        return self.layout.host(node).mac

    def intf_name(self, node, neighbour) -> str:
        """Interface of ``node`` facing ``neighbour`` (towards the link node when there is one)."""
        e = self.plan.link(node, neighbour)
        return e.intf_u if e.u == node else e.intf_v

    def cut_interfaces(self, u, v) -> tuple[list[str], str | None]:
        """The interfaces to take down for a cable cut of edge u-v, and their namespace (None: the root one).
        With a link node, both of its sides: each end then loses carrier, as both ends of a cut fibre lose
        light, and frames already inside the line are dropped (counted as its tx errors). Without one, v's
        end: u loses carrier, v is down."""
        e = self.plan.link(u, v)
        if e.via:
            dl = self._link_nodes[(e.u, e.v)]
            return [f"{e.via}-eth1", f"{e.via}-eth2"], (ops.netns_of(dl.pid) if dl.inNamespace else None)
        return [self.intf_name(v, u)], ops.netns_of(self._nodes[v].pid)

    def run_tc(self, node, cmds) -> None:
        """Run ``tc`` argvs (a plan's, e.g. :func:`testbed.plan.gray.gray_tc`) in ``node``'s namespace, in order.

        Raises:
            EmulationError: a command failed (named, with tc's message).
        """
        for argv in cmds:
            proc = self._nodes[node].popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            out, _ = proc.communicate(timeout=30)
            if proc.returncode:
                raise EmulationError(f"`{' '.join(argv)}` failed on {node}: {out.strip()[-300:]}")

    def popen(self, node, argv, **kwargs):
        """Start ``argv`` on a node (in its namespace) and record the process in the run registry."""
        proc = self._nodes[node].popen(list(argv), **kwargs)
        self.run.record_process(proc, argv=argv)
        return proc

    # ----------------------------------------------------------------------------- lifecycle
    def __enter__(self) -> "Replica":
        require_root("an emulation run")
        mn_net, mn_node, mn_log = _mininet()
        mn_log.setLogLevel("error")
        if self._own_run:
            self.run = RunRegistry(self.name).__enter__()
        try:
            self._build(mn_net, mn_node)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        with deferred_signals(), expedited_rcu():
            try:
                if self.net is not None:
                    try:
                        self._stop()
                    except Exception as err:  # noqa: BLE001 - the registry removes what _stop() missed
                        console.print(f"[yellow]replica stop: {type(err).__name__}: {err}; "
                                      "removing recorded objects[/yellow]")
                    self.net = None
                if self._ovs_log is not None and self.out_dir is not None:
                    self._ovs_log.save(self.out_dir / "ovs-vswitchd.log")
                    self._ovs_log = None
            finally:
                if self._own_run and self.run is not None:
                    self.run.__exit__(None, None, None)
                    self.teardown_s.update({f"registry {k}": v for k, v in self.run.timings.items()})

    def _stop(self) -> None:
        """Tear the network down in one pass per kind, so time grows with the work, not with timeouts.

        ``net.stop()`` deletes links one ``ip link del`` at a time and, when it failed on a large replica,
        left every host shell to the registry's SIGTERM, which an interactive bash ignores (a timeout per
        shell: an hour for 1,024 hosts). Here: nodes with their own processes (BMv2, delay lines) stop
        themselves; OVS bridges go in batched ovsdb transactions; every shell gets SIGHUP at once (what
        Mininet's ``terminate`` sends) before any is waited for; the run registry then removes the
        interfaces left in one ``ip -batch`` and anything else recorded.
        """
        net, mn_node = self.net, _mininet()[1]
        lap = Laps(self.teardown_s)
        ovs = [sw for sw in net.switches if isinstance(sw, mn_node.OVSSwitch)]
        for sw in net.switches:
            if sw in ovs:
                continue
            try:
                sw.stop(deleteIntfs=False)
            except Exception as err:  # noqa: BLE001 - one node's failure must not stop the teardown
                console.print(f"[yellow]stopping {sw.name}: {type(err).__name__}: {err}[/yellow]")
        lap("switch processes")
        ops.delete_bridges([sw.name for sw in ovs])
        lap("bridges")
        nodes = [*net.hosts, *net.switches]
        for node in nodes:
            shell = getattr(node, "shell", None)
            if shell is not None and shell.poll() is None:
                try:
                    os.killpg(shell.pid, signal.SIGHUP)
                except ProcessLookupError:
                    pass
        for node in nodes:
            if getattr(node, "shell", None) is not None:
                node.waitExited = False  # the registry waits for all of them at once
                node.cleanup()           # close the ptys
        lap("shells")
        # Switch-to-switch veths live in the root namespace (host ends went with their namespaces): delete
        # the ones this replica made in one batch, also when the run registry outlives this replica.
        ops.delete_links(name for name in self.layout.interfaces() if ops.link_index(name) is not None)
        lap("links")

    # ----------------------------------------------------------------------------- build
    def _switch_class(self, sw, mn_node):
        if sw.kind in ("bmv2", "external"):
            made = self.switch_factory(sw)
            if made is None:
                raise EmulationError(f"switch {sw.node}: the switch_factory has no node class for a {sw.kind} "
                                     f"switch ({sw.reason})")
            cls, params = made
            return cls, {"dpid": f"{sw.dpid:016x}", **params}, False
        params = {"dpid": f"{sw.dpid:016x}", "failMode": "standalone" if self.controller is None else "secure",
                  "datapath": sw.datapath, "protocols": "OpenFlow13", "batch": True}
        return mn_node.OVSSwitch, params, True

    def _build(self, mn_net, mn_node) -> None:
        lay, run = self.layout, self.run
        console.print(f"[dim]{self.plan.summary_line()}[/dim]")
        for note in self.plan.notes:
            if note in self.plan.warnings:
                console.print(f"[yellow]warning: {note}[/yellow]")
            else:
                console.print(f"[dim]plan: {note}[/dim]")
        if self.out_dir is not None:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            (self.out_dir / "plan.json").write_text(json.dumps(self.plan.to_json(), indent=1, default=str) + "\n")
            if any(sw.kind == "ovs" for sw in self.plan.switches):
                self._ovs_log = LogTail()   # ovs-vswitchd.log lines of this run, saved at teardown
        net = mn_net.Mininet(topo=None, controller=None, build=False, autoSetMacs=False,
                             autoStaticArp=False, waitConnected=False, cleanup=False)
        self.net = net
        # Record what will be created (interfaces, bridges, taps) before creating anything.
        switch_classes = {sw.node: self._switch_class(sw, mn_node) for sw in self.plan.switches}
        bridges = [sw.name for sw in self.plan.switches if switch_classes[sw.node][2]]
        run.record_bridges(bridges)
        taps = [sw.name for sw in self.plan.switches if switch_classes[sw.node][2] and sw.datapath == "user"]
        run.record_links(lay.interfaces() + taps)
        if self.controller is not None:
            ip, port = self.controller
            self._adopt(net.addController(_remote_controller(mn_node)("c0", ip=ip, port=port)))
        for h in lay.hosts:
            self._nodes[h.node] = node = net.addHost(h.name, ip=f"{h.ip}/{h.prefixlen}", mac=h.mac)
            self._adopt(node)
        for sw in self.plan.switches:
            cls, params, _ = switch_classes[sw.node]
            self._nodes[sw.node] = node = net.addSwitch(sw.name, cls=cls, **params)
            self._adopt(node)
        for e in self.plan.links:
            u, v = self._nodes[e.u], self._nodes[e.v]
            if e.via is None:
                net.addLink(u, v, port1=e.port_u, port2=e.port_v)
                continue
            params = {"link": e.applied, "seed": e.seed}
            pfc = self.plan.pfc.link(e.u, e.v) if self.plan.pfc is not None and self.plan.pfc.applied else None
            if pfc is not None:
                params["pfc"] = pfc.port(self.plan.pfc.config, self.dilation.scale)
            if self.out_dir is not None:
                params["out_dir"] = str(self.out_dir)
            dl = net.addSwitch(e.via, cls=self.link_node_class, dpid=f"{e.via_dpid:016x}", **params)
            self._adopt(dl)
            self._link_nodes[(e.u, e.v)] = dl
            net.addLink(u, dl, port1=e.port_u, port2=1)
            net.addLink(dl, v, port1=2, port2=e.port_v)
        net.build()
        net.start()
        self._note_ifindexes()
        self._configure_hosts()
        self._shape_links()
        self._wait_ready()
        self._program_queues()
        if self.out_dir is not None:
            self._write_layout()
        console.print(f"[dim]{self.name}: replica up[/dim]")

    def _write_layout(self) -> None:
        """``replica.json``: which Mininet name, address and interface each graph node got."""
        lay = self.layout
        doc = {"name": self.name, "scale": self.dilation.scale, "run_id": self.run.run_id,
               "hosts": {str(h.node): {"name": h.name, "ip": h.ip, "prefixlen": h.prefixlen, "mac": h.mac}
                         for h in lay.hosts},
               "switches": {str(sw.node): {"name": sw.name, "dpid": sw.dpid} for sw in lay.switches},
               "links": [{"u": str(lk.u), "v": str(lk.v), "intf_u": lay.intf(lk.u, lk.port_u),
                          "intf_v": lay.intf(lk.v, lk.port_v), "via": lk.via} for lk in lay.links]}
        (self.out_dir / "replica.json").write_text(json.dumps(doc, indent=1) + "\n")

    def _adopt(self, node) -> None:
        """Record a node's shell and give it the registry (for the processes it starts)."""
        node.run = self.run
        if getattr(node, "shell", None) is not None:
            self.run.record_process(node.shell.pid, argv=[f"mininet:{node.name}"])

    def _note_ifindexes(self) -> None:
        for obj in self.run.objects:
            if obj["kind"] == "link" and obj.get("netns") is None and "ifindex" not in obj:
                index = ops.link_index(obj["name"])
                if index is not None:
                    obj["ifindex"] = index
        uuids = ops.bridge_uuids() if any(o["kind"] == "bridge" for o in self.run.objects) else {}
        for obj in self.run.objects:
            if obj["kind"] == "bridge" and "uuid" not in obj:
                obj["uuid"] = uuids.get(obj["name"])
        self.run.save()

    def _configure_hosts(self) -> None:
        static_arp = self.plan.overrides.static_arp
        for h in self.layout.hosts:
            node = self._nodes[h.node]
            for intf in node.intfNames():
                if intf == "lo":
                    continue
                self._host_run(node, ops.offload_off_argv(intf), f"disable offloads on {node.name}:{intf}")
            intf = node.defaultIntf()
            if intf:
                neighbours, routes = self.layout.host_config(h, with_arp=static_arp)
                if neighbours or routes:
                    ops.configure_host(ops.netns_of(node.pid), intf.name, neighbours, routes)

    def _host_run(self, node, argv, what, stdin: str | None = None) -> None:
        proc = node.popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
        out, _ = proc.communicate(stdin, timeout=30)
        if proc.returncode != 0:
            raise EmulationError(f"cannot {what}: `{' '.join(argv)}` failed: {out.strip()[-300:]}")

    def _shape_links(self) -> None:
        """Run each link end's tc commands (from the plan) in that end's namespace: one ``tc -batch`` per
        namespace, the switches' (all in the root namespace) together. One tc process per command was
        most of a build: fat-tree k=8 ran 2432 of them, 43 s of a 78 s build."""
        batches: dict = {}   # namespace key -> (a node in it, [(link, argv)])
        for e in self.plan.links:
            for node, argvs in e.tc:
                n = self._nodes[node]
                key = n.name if getattr(n, "inNamespace", True) else None
                batches.setdefault(key, (n, []))[1].extend((e, list(a)) for a in argvs)
        if self.plan.pfc is not None and self.plan.pfc.applied:
            for r in self.plan.pfc.relays:   # PAUSE from a port's link node to its feeders (testbed/plan/pfc.py)
                n = self._nodes[r.node]
                key = n.name if getattr(n, "inNamespace", True) else None
                batches.setdefault(key, (n, []))[1].extend((r, a) for a in r.argv())
        for n, cmds in batches.values():
            if all(argv[:1] == ["tc"] for _, argv in cmds):
                self._tc_batch(n, cmds)
            else:
                for e, argv in cmds:
                    self._host_run(n, argv, f"emulate link {e.u}--{e.v} ({e.backend}) on {n.name}")

    def _tc_batch(self, node, cmds) -> None:
        """``tc -batch -`` in ``node``'s namespace; a failure names the command and its link."""
        script = "".join(" ".join(argv[1:]) + "\n" for _, argv in cmds)
        proc = node.popen(["tc", "-batch", "-"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
        out, _ = proc.communicate(script, timeout=60 + len(cmds) * 0.05)
        if proc.returncode == 0:
            return
        m = re.search(r"Command failed -:(\d+)", out)
        e, argv = cmds[int(m.group(1)) - 1] if m and 0 < int(m.group(1)) <= len(cmds) else cmds[0]
        detail = out[:m.start()].strip()[-300:] if m else out.strip()[-300:]
        what = (f"relay PAUSE from {e.switch}'s port to {e.peer}" if hasattr(e, "targets")
                else f"emulate link {e.u}--{e.v} ({e.backend})")
        raise EmulationError(f"cannot {what} on {node.name}: `{' '.join(argv)}` failed: {detail}")

    def _program_queues(self, plan=None) -> None:
        """BMv2 egress queues: depth and drain rate per port, from the plan."""
        for sw in (plan or self.plan).switches:
            if sw.kind != "bmv2":
                continue
            with self._nodes[sw.node].client() as c:
                for p in sw.ports:
                    c.set_queue_depth(p.depth_pkts, port=p.port)
                    if p.emulated_rate_pps:
                        c.set_queue_rate(p.emulated_rate_pps, port=p.port)

    def apply_queues(self, plan) -> None:
        """Re-program the BMv2 egress queues from another plan of the same fabric (a scenario's next case)."""
        if [(s.node, s.kind) for s in plan.switches] != [(s.node, s.kind) for s in self.plan.switches]:
            raise EmulationError("apply_queues: the plan is of a different fabric")
        self._program_queues(plan)

    def _wait_ready(self) -> None:
        """Switches are ready when OVS has given every port an OpenFlow number (and, with a controller,
        when they are connected to it)."""
        ovs = [n for n in self.net.switches if isinstance(n, _mininet()[1].OVSSwitch)]
        if not ovs:
            return
        names = {i for sw in ovs for i in sw.intfNames() if i != "lo"}

        def ports_ready() -> bool:
            res = subprocess.run(["ovs-vsctl", "--timeout=5", "-f", "csv", "--no-headings", "--columns=name,ofport",
                                  "list", "Interface"], capture_output=True, text=True)
            have = {}
            for line in res.stdout.splitlines():
                name, _, ofport = line.partition(",")
                have[name.strip('"')] = ofport
            return all(n in have and have[n] not in ("-1", "[]", "") for n in names)

        poll(ports_ready, timeout=30, interval=0.05, what=f"OVS ports of {len(ovs)} switches")
        if self.controller is not None and self.wait_connected:
            poll(lambda: all(sw.connected() for sw in ovs), timeout=self.wait_connected, interval=0.1,
                 what=f"switches to connect to the controller at {self.controller[0]}:{self.controller[1]}")

