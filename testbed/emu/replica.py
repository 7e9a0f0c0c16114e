"""Replica: a running Mininet network built from a fabric graph, always torn down.

Start-up is linear and logged (lock -> plan -> record -> create -> start -> configure -> ready)::

    with Replica(G, dilation=Dilation(10), out_dir=res.dir, name="demo") as rep:
        rep.host("h1").cmd("ping -c1", rep.ip("h2"))

    RunRegistry (lock, record) --> plan(G) --> Mininet: hosts, switches, [link nodes], links
        --> net.start() --> ethtool offloads off, static ARP --> link_shaper per edge --> switches ready
    exit (normal, exception, SIGINT, SIGTERM): net.stop() --> registry removes anything left --> unlock

Switches are Open vSwitch bridges (userspace datapath when the kernel one is absent) unless
``switch_factory(node, attrs)`` returns ``(cls, params)`` for a node (e.g. a BMv2 switch for p4 nodes).
Every node created gets ``node.run`` = the :class:`RunRegistry`, so a node class that starts processes
records them (``self.run.record_process(pid)``) and ``testbed clean`` can remove them after a crash.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import networkx as nx

from testbed.console import console, require_root
from testbed.dilation import Dilation
from testbed.emu import ops
from testbed.emu.plan import Plan, host_batch, interfaces, plan
from testbed.emu.registry import RunRegistry
from testbed.emu.signals import deferred_signals
from testbed.errors import CapabilityError, EmulationError, SpecError
from testbed.poll import poll

SWITCH_KINDS = ("ovs",)
DATAPATHS = ("user", "kernel")


def _mininet():
    try:
        from mininet import log, net, node
    except ImportError:
        raise CapabilityError("Mininet is not installed: run `sudo make setup`") from None
    return net, node, log


def htb_shaper(rep: "Replica", u, v, intf_u, intf_v, attrs: dict) -> None:
    """A ``link_shaper``: plain tc HTB at the dilated ``rate_bps`` on both ends (no delay, no loss)."""
    rate = attrs.get("rate_bps")
    if not rate:
        return
    emulated = rep.dilation.rate(rate)
    for intf in (intf_u, intf_v):
        node = intf.node
        for argv in ops.htb_argv(intf.name, emulated):
            out = node.cmd(*argv, "; echo rc=$?")
            if "rc=0" not in out:
                raise EmulationError(f"cannot shape {intf.name} ({u}--{v}) to {emulated:g} b/s: {out.strip()}")


class Replica:
    """Context manager running the Mininet network of graph ``G``.

    Args:
        G: fabric graph (see :mod:`testbed.topo.graph`).
        dilation: time dilation of this replica (used by shapers; default 1).
        switch: "ovs" (the default switch class; ``switch_factory`` overrides it per node).
        controller: None -> OVS ``standalone`` (learning bridge, loop-free fabrics only);
            ``(ip, port)`` -> OpenFlow 1.3 remote controller, ``secure`` fail mode.
        out_dir: where logs go (default: a temp dir is not made; logs go nowhere).
        name: run name (registry, lock message).
        link_shaper: ``f(rep, u, v, intf_u, intf_v, edge_attrs)`` called per edge after start;
            :func:`htb_shaper` is a baseline.  None: no shaping.
        switch_factory: ``f(node, attrs) -> None | (cls, params)``.
        link_node_factory: ``f(u, v, edge_attrs) -> None | (cls, params)``: insert a link node
            (``dl<i>``, port 1 towards u, port 2 towards v) on that edge.
        datapath: "user" | "kernel" | None (None: what ``testbed doctor`` found).
        static_arp: install permanent neighbour entries for every other host.
        wait_connected: seconds to wait for switches to reach the controller (0: do not wait).
        run: an existing (entered) RunRegistry to record into instead of a new one.
    """

    def __init__(self, G: nx.Graph, *, dilation: Dilation | None = None, switch: str = "ovs",
                 controller: tuple[str, int] | None = None, out_dir: Path | None = None, name: str = "replica",
                 link_shaper=None, switch_factory=None, link_node_factory=None, datapath: str | None = None,
                 static_arp: bool = True, wait_connected: float = 30.0, run: RunRegistry | None = None):
        if switch not in SWITCH_KINDS:
            raise SpecError("switch", f"unknown switch kind {switch!r}; allowed: {', '.join(SWITCH_KINDS)}")
        if datapath is not None and datapath not in DATAPATHS:
            raise SpecError("datapath", f"{datapath!r} is not one of: {', '.join(DATAPATHS)}")
        if controller is not None and (len(controller) != 2 or not isinstance(controller[1], int)):
            raise SpecError("controller", f"must be None or (ip, port), got {controller!r}")
        self.G = G
        self.dilation = dilation or Dilation(1.0)
        self.switch_kind = switch
        self.controller = controller
        self.out_dir = Path(out_dir) if out_dir else None
        self.name = name
        self.link_shaper = link_shaper
        self.switch_factory = switch_factory
        self.link_node_factory = link_node_factory
        self.datapath = datapath
        self.static_arp = static_arp
        self.wait_connected = wait_connected
        self.plan: Plan = plan(G, link_node_factory)
        self.net = None
        self.run: RunRegistry | None = run
        self._own_run = run is None
        self._nodes: dict = {}         # graph node -> Mininet node
        self._link_nodes: dict = {}    # (u, v) -> link node
        self.mapping: list[dict] = []  # real -> emulated, per link tier

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

    def ip(self, node) -> str:
        """Address of host ``node`` (without prefix length)."""
        return self.plan.host(node).ip

    def mac(self, node) -> str:
        return self.plan.host(node).mac

    def intf_name(self, node, neighbour) -> str:
        """Interface of ``node`` facing ``neighbour`` (towards the link node when there is one)."""
        for link in self.plan.links:
            if {link.u, link.v} == {node, neighbour}:
                return self.plan.intf(node, link.port_u if link.u == node else link.port_v)
        raise KeyError(f"no edge {node}--{neighbour}")

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
        with deferred_signals():
            try:
                if self.net is not None:
                    try:
                        self._stop()
                    except Exception as err:  # noqa: BLE001 - the registry removes what _stop() missed
                        console.print(f"[yellow]replica stop: {type(err).__name__}: {err}; "
                                      "removing recorded objects[/yellow]")
                    self.net = None
            finally:
                if self._own_run and self.run is not None:
                    self.run.__exit__(None, None, None)

    def _stop(self) -> None:
        """Tear the network down in one pass per kind, so time grows with the work, not with timeouts.

        ``net.stop()`` deletes links one ``ip link del`` at a time and, when it failed on a large replica,
        left every host shell to the registry's SIGTERM, which an interactive bash ignores (a timeout per
        shell: an hour for 1,024 hosts). Here: nodes with their own processes (BMv2, delay lines) stop
        themselves; OVS bridges go in batched ovsdb transactions; every shell gets SIGHUP at once (what
        Mininet's ``terminate`` sends) before any is waited for; the run registry then removes the
        interfaces left in one ``ip -batch`` and anything else recorded.
        """
        from testbed.emu.registry import BRIDGES_PER_CALL, del_br_argv

        net, mn_node = self.net, _mininet()[1]
        ovs = [sw for sw in net.switches if isinstance(sw, mn_node.OVSSwitch)]
        for sw in net.switches:
            if sw in ovs:
                continue
            try:
                sw.stop(deleteIntfs=False)
            except Exception as err:  # noqa: BLE001 - one node's failure must not stop the teardown
                console.print(f"[yellow]stopping {sw.name}: {type(err).__name__}: {err}[/yellow]")
        names = [sw.name for sw in ovs]
        for i in range(0, len(names), BRIDGES_PER_CALL):
            chunk = names[i:i + BRIDGES_PER_CALL]
            ops.run(del_br_argv(chunk), what=f"delete {len(chunk)} bridges", check=False, timeout=120 + len(chunk))
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
        # Switch-to-switch veths live in the root namespace (host ends went with their namespaces): delete
        # the ones this replica made in one batch, also when the run registry outlives this replica.
        left = [name for name in interfaces(self.plan) if ops.link_index(name) is not None]
        if left:
            ops.run(["ip", "-force", "-batch", "-"], what=f"delete {len(left)} links", check=False,
                    input="".join(f"link del dev {name}\n" for name in left), timeout=60 + len(left) / 20)

    # ----------------------------------------------------------------------------- build
    def _datapath(self) -> str:
        if self.datapath:
            return self.datapath
        from testbed.doctor import capabilities

        return "kernel" if capabilities()["backends"]["switch"] == "ovs-kernel" else "user"

    def _switch_class(self, sw, mn_node):
        custom = self.switch_factory(sw.node, sw.attrs) if self.switch_factory else None
        if custom is not None:
            cls, params = custom
            return cls, {"dpid": f"{sw.dpid:016x}", **params}, False
        params = {"dpid": f"{sw.dpid:016x}", "failMode": "standalone" if self.controller is None else "secure",
                  "datapath": self._datapath(), "protocols": "OpenFlow13", "batch": True}
        return mn_node.OVSSwitch, params, True

    def _print_mapping(self) -> None:
        """Print (and keep in ``self.mapping``) the real -> emulated mapping of this run's links."""
        from testbed.topo.metrics import dilation_table, mapping_table

        try:
            self.mapping = dilation_table(self.G, scale=self.dilation.scale)
        except KeyError:  # a hand-built graph without rates/delays/tiers: nothing to map
            self.mapping = []
            return
        console.print(mapping_table(self.mapping, self.dilation.scale))

    def _build(self, mn_net, mn_node) -> None:
        p, run = self.plan, self.run
        console.print(f"[dim]{self.name}: {len(p.hosts)} hosts, {len(p.switches)} switches, "
                      f"{len(p.links)} links[/dim]")
        self._print_mapping()
        net = mn_net.Mininet(topo=None, controller=None, build=False, autoSetMacs=False,
                             autoStaticArp=False, waitConnected=False, cleanup=False)
        self.net = net
        # Record what will be created (interfaces, bridges) before creating anything.
        switch_classes = {sw.node: self._switch_class(sw, mn_node) for sw in p.switches}
        bridges = [sw.name for sw in p.switches if switch_classes[sw.node][2]]
        run.record_bridges(bridges)
        taps = [b for b in bridges if switch_classes_datapath(switch_classes, p, b) == "user"]
        run.record_links(interfaces(p) + taps)
        if self.controller is not None:
            ip, port = self.controller
            self._adopt(net.addController(mn_node.RemoteController("c0", ip=ip, port=port)))
        for h in p.hosts:
            self._nodes[h.node] = node = net.addHost(h.name, ip=f"{h.ip}/{h.prefixlen}", mac=h.mac)
            self._adopt(node)
        for sw in p.switches:
            cls, params, _ = switch_classes[sw.node]
            self._nodes[sw.node] = node = net.addSwitch(sw.name, cls=cls, **params)
            self._adopt(node)
        next_dpid = max((sw.dpid for sw in p.switches), default=0) + 1
        for link in p.links:
            u, v = self._nodes[link.u], self._nodes[link.v]
            if link.via is None:
                net.addLink(u, v, port1=link.port_u, port2=link.port_v)
                continue
            cls, params = self.link_node_factory(link.u, link.v, link.attrs)
            dl = net.addSwitch(link.via, cls=cls, **{"dpid": f"{next_dpid:016x}", **params})
            next_dpid += 1
            self._adopt(dl)
            self._link_nodes[(link.u, link.v)] = dl
            net.addLink(u, dl, port1=link.port_u, port2=1)
            net.addLink(dl, v, port1=2, port2=link.port_v)
        net.build()
        net.start()
        self._note_ifindexes()
        self._configure_hosts()
        self._shape_links()
        self._wait_ready()
        if self.out_dir is not None:
            self._write_layout()
        console.print(f"[dim]{self.name}: replica up[/dim]")

    def _write_layout(self) -> None:
        """``replica.json``: which Mininet name, address and interface each graph node got."""
        p = self.plan
        doc = {"name": self.name, "scale": self.dilation.scale, "run_id": self.run.run_id, "mapping": self.mapping,
               "hosts": {str(h.node): {"name": h.name, "ip": h.ip, "prefixlen": h.prefixlen, "mac": h.mac}
                         for h in p.hosts},
               "switches": {str(sw.node): {"name": sw.name, "dpid": sw.dpid} for sw in p.switches},
               "links": [{"u": str(lk.u), "v": str(lk.v), "intf_u": p.intf(lk.u, lk.port_u),
                          "intf_v": p.intf(lk.v, lk.port_v), "via": lk.via} for lk in p.links]}
        self.out_dir.mkdir(parents=True, exist_ok=True)
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
        for obj in self.run.objects:
            if obj["kind"] == "bridge" and "uuid" not in obj:
                obj["uuid"] = ops.bridge_uuid(obj["name"])
        self.run.save()

    def _configure_hosts(self) -> None:
        for h in self.plan.hosts:
            node = self._nodes[h.node]
            for intf in node.intfNames():
                if intf == "lo":
                    continue
                self._host_run(node, ops.offload_off_argv(intf), f"disable offloads on {node.name}:{intf}")
            intf = node.defaultIntf()
            batch = host_batch(self.plan, h, intf.name, with_arp=self.static_arp) if intf else ""
            if batch:
                self._host_run(node, ["ip", "-batch", "-"], f"configure neighbours/routes on {node.name}",
                               stdin=batch)

    def _host_run(self, node, argv, what, stdin: str | None = None) -> None:
        proc = node.popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
        out, _ = proc.communicate(stdin, timeout=30)
        if proc.returncode != 0:
            raise EmulationError(f"cannot {what}: `{' '.join(argv)}` failed: {out.strip()[-300:]}")

    def _shape_links(self) -> None:
        if self.link_shaper is None:
            return
        for link in self.plan.links:
            iu = self._nodes[link.u].intf(self.plan.intf(link.u, link.port_u))
            iv = self._nodes[link.v].intf(self.plan.intf(link.v, link.port_v))
            self.link_shaper(self, link.u, link.v, iu, iv, link.attrs)

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


def switch_classes_datapath(switch_classes: dict, p: Plan, bridge: str) -> str | None:
    for sw in p.switches:
        if sw.name == bridge:
            return switch_classes[sw.node][1].get("datapath")
    return None
