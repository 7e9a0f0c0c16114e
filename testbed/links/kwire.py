"""The kernel link backend between two namespaces, in the userspace wire's place (root glue).

::

    netns {p}A                       netns {p}M                          netns {p}B
    [{p}a0 10.77.0.1] --veth-- [{p}da] bridge [{p}db] --veth-- [{p}b0 10.77.0.2]
                               tc on da's egress (B->A)   tc on db's egress (A->B): netem -> tbf -> red

Same names, addresses, static neighbours, probe and captures as :class:`testbed.links.wire.Wire` (it is
one), with the userspace delay line replaced by a bridge whose two egresses carry
:func:`testbed.links.tc.link_cmds` — the commands the replica uses where ``doctor`` finds netem. The link
sits in the middle, as the delay line does, so a capture on A's own interface sees a frame *before* the
emulated link (a capture on the interface that carries netem would see it after the delay: AF_PACKET taps
egress after the qdisc). Used by ``testbed bench link --kernel`` (both backends side by side) and the
in-VM kernel tests (tests/vm/guest).

:meth:`KernelWire.stop` returns the qdisc counters as a link-node-like stats document: per direction
``tx_packets`` and the modelled drops (``drop_loss``: netem's own, ``drop_tail``: tbf's queue,
``drop_red``: RED's early and forced drops) and ``ce_marked``, so every lost frame is attributed.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from testbed.emu import ops
from testbed.emu.registry import RunRegistry
from testbed.links import tc
from testbed.links.model import LinkParams
from testbed.links.wire import Wire, name_prefix

BRIDGE = "br0"


class KernelWire(Wire):
    """Host A -- bridge with tc on both egresses -- host B. Create with :func:`open_kernel_wire`."""

    def __init__(self, run: RunRegistry, prefix: str, workdir: Path):
        super().__init__(run, prefix, workdir)
        self.ns_m = f"{prefix}M"
        self.params: LinkParams | None = None
        #: (middle device, direction) of each egress: A -> B leaves through db, B -> A through da.
        self.egress = ((self.dl_b, "a>b"), (self.dl_a, "b>a"))

    def build(self) -> None:
        run = self.run
        for ns in (self.ns_a, self.ns_m, self.ns_b):
            run.add_netns(ns)
        run.add_veth(self.if_a, self.dl_a, ns_a=self.ns_a, ns_b=self.ns_m)
        run.add_veth(self.dl_b, self.if_b, ns_a=self.ns_m, ns_b=self.ns_b)
        m = self.ns_m
        ops.run(ops.netns_exec_argv(["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"], m),
                what=f"disable IPv6 in {m}", check=False)
        for argv in (["ip", "link", "add", BRIDGE, "type", "bridge", "stp_state", "0", "forward_delay", "0"],
                     ["ip", "link", "set", self.dl_a, "master", BRIDGE], ["ip", "link", "set", self.dl_b, "master", BRIDGE],
                     ["ip", "link", "set", BRIDGE, "up"]):
            ops.run(ops.in_netns(argv, m), what=f"bridge the kernel link in {m}")
        self.configure_hosts()

    def start(self, params: LinkParams, **_ignored) -> dict:
        """Put the *emulated* ``params`` on both egresses (fresh qdiscs: zeroed counters).

        The userspace wire's start options (seed, core, cpu) do not apply: netem draws its own losses.
        """
        for dev, _d in self.egress:
            subprocess.run(tc.clear_cmd(dev, self.ns_m), capture_output=True)
            for argv in tc.link_cmds(dev, params, netns=self.ns_m):
                ops.run(argv, what=f"tc on {dev}")
        self.params = params
        self.core = "netem"
        return {"ready": True, "core": "netem"}

    def stop(self) -> dict:
        """The qdiscs' counters (see the module docstring), then remove the qdiscs."""
        if self.params is None:
            return {}
        doc = self.stats()
        for dev, _d in self.egress:
            subprocess.run(tc.clear_cmd(dev, self.ns_m), capture_output=True)
        self.params = None
        return doc

    def restart(self, params: LinkParams, **kwargs) -> dict:
        self.stop()
        return self.start(params, **kwargs)

    def stats(self) -> dict | None:
        lossy = bool(self.params and self.params.loss and self.params.loss.active)
        return {"core": "netem", "directions": {d: ledger(self.qdiscs(dev), lossy) for dev, d in self.egress}}

    def qdiscs(self, dev: str) -> dict[str, dict]:
        """``{kind: tc -s -j stats}`` of the egress qdiscs of middle device ``dev`` (netem, tbf, red, htb)."""
        out = subprocess.run(ops.netns_exec_argv(["tc", "-s", "-j", "qdisc", "show", "dev", dev], self.ns_m),
                             capture_output=True, text=True, check=True).stdout
        return {q["kind"]: q for q in json.loads(out or "[]")}


def ledger(qdiscs: dict[str, dict], random_loss: bool = True) -> dict:
    """One direction's frames from its qdiscs' counters (pure).

    A parent counts every drop of its children again (a child's refused enqueue is the parent's drop), so
    with the chain netem -> tbf -> red: RED's own = ``early + pdrop``, tbf's tail = tbf drops - RED's,
    netem's own = netem drops - tbf drops. netem's own drops are its random losses *and* its ``limit``'s
    tail drops (netem's queue length counts the frames below it too, so with a backlog its limit, the
    link's queue, is reached before RED's byte limit): the counters cannot tell them apart, so they are
    ``drop_loss`` when the link has random loss (``random_loss``) and ``drop_tail`` when it has none.
    Without netem (rate only) the root is HTB.
    """
    netem, tbf, red = (qdiscs.get(k, {}) for k in ("netem", "tbf", "red"))
    root = netem or tbf or qdiscs.get("htb", {})
    red_drops = red.get("early", 0) + red.get("pdrop", 0) if red else 0
    tail = (tbf.get("drops", 0) - red_drops) if tbf else 0
    own = (netem.get("drops", 0) - tbf.get("drops", 0)) if netem else 0
    loss = own if random_loss else 0
    tail += 0 if random_loss else own
    if not netem and not tbf:
        tail = root.get("drops", 0)
    return {"tx_packets": root.get("packets", 0), "drop_loss": loss, "drop_tail": tail, "drop_red": red_drops,
            "ce_marked": red.get("marked", 0) if red else 0, "overlimits": tbf.get("overlimits", 0) if tbf else 0,
            "backlog": root.get("qlen", 0)}


def egress_ledger(popen, dev: str, random_loss: bool = False) -> dict:
    """:func:`ledger` of interface ``dev``'s egress, read with ``popen`` (a node's, so in its namespace)."""
    proc = popen(["tc", "-s", "-j", "qdisc", "show", "dev", dev], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                 text=True)
    out, _ = proc.communicate(timeout=30)
    return ledger({q["kind"]: q for q in json.loads(out or "[]")}, random_loss)


def replica_egress_drops(rep, egresses) -> int:
    """Frames the tc qdiscs of a replica's ``egresses`` (``(node, neighbour)`` pairs: ``node``'s interface
    towards ``neighbour``) dropped so far: tail, random loss and RED, summed (0 where no qdisc counts)."""
    total = 0
    for node, peer in egresses:
        d = egress_ledger(lambda argv, n=node, **kw: rep.popen(n, argv, **kw), rep.intf_name(node, peer))
        total += d["drop_tail"] + d["drop_loss"] + d["drop_red"]
    return total


def open_kernel_wire(run: RunRegistry, workdir: Path, params: LinkParams | None = None, tag: str = "") -> KernelWire:
    """Build host A -- kernel link -- host B inside ``run``; put ``params`` on it when given."""
    wire = KernelWire(run, name_prefix(tag), workdir)
    wire.workdir.mkdir(parents=True, exist_ok=True)
    wire.build()
    if params is not None:
        wire.start(params)
    return wire
