"""The spec's ``pfc:`` block in the replica plan (pure): the config, every switch port's headroom, and how
the replica's link nodes and switches carry PFC.

    Spec.pfc (PfcConfig) --+
    plan links (real rate,  +--> plan_pfc() --> PfcPlan --> plan.json "pfc", `testbed plan` table
      delay, ports), routes +        |            links: per link node, each direction's thresholds (--pfc)
                                     |            relays: per switch port, where its PAUSE goes (tc)
                                     +--> applied, or the reason it is not (note + console warning)

**How a replica runs PFC.** A switch port's egress queue is the link node behind it (direction u->v of the
node on u--v is u's egress to v: serialisation at the rate, the queue, the cable). With ``--pfc`` that
direction accounts its lossless bytes and, at ``xoff``, sends PAUSE out of its u side, into switch u. The
switch relays it (a tc filter on that port's ingress: :func:`relay_argv`) to its *feeders*: the ports
whose traffic the routing brain sends out of that port (healthy fabric, every destination host). Each
feeder's link node receives it on its u side and holds that priority of its x->u direction after the
cable's delay; that queue then fills and pauses its own feeders: the pause spreads hop by hop as in a
lossless fabric. A host's side of its link node is the NIC (host memory: :data:`NIC_XOFF_BYTES`, a
threshold never reached) and honours PAUSE; the switch side is the switch's egress to the host. The NIC
side runs no RED even when the host tier has ``red:`` (a NIC has no AQM; while it is paused its queue is
host memory, and marking it would be CE no hardware sets): only switch egresses mark (``"marks"``).

The approximation, written where it is used: a real switch accounts bytes per *ingress* port and pauses
the ingress ports that cross their xoff; here the egress queue's bytes are accounted and every feeder is
paused. The routing decides who feeds a port, so a port that cannot feed it (a leaf's other uplinks, for an
uplink) is never paused; a feeder that currently sends nothing there is (head-of-line blocking one step
wider than on hardware, only while the pause lasts). The queue is the switch's shared buffer for that
egress, so its headroom is the sum of its feeders' port headrooms (each from its own cable), as in the
incast fixture (``testbed/pfc/fanin.py``), plus an emulator allowance per feeder for what the userspace
switch holds back during its stalls (:data:`SWITCH_LAG_S`, reported apart); ``xoff``/``xon`` are the spec's. Feeders are computed once from
the healthy fabric: after a failover reroute a new feeder is not paused until the replica is rebuilt.

**A BMv2 switch** (fabric.p4) has its own egress queue, drained at the link rate before the link node: that
queue is the congestion point, so the switch program runs PFC itself, as a real switch does: per *ingress*
port and priority it accounts the lossless bytes that entered there and have not left its queue, sends
PAUSE out of that port at ``xoff`` and XON at ``xon``, and drops above ``xoff`` + headroom (fabric.p4's
``pfc_config``, one :class:`P4PfcPort` per port here). Its link nodes still do what they do beside OVS: a
paused direction keeps what BMv2 keeps sending into it (BMv2 cannot stop its queue: the direction's
allowance holds all BMv2 may hold for it), and past its xoff sends PAUSE into the switch, which fabric.p4
relays to the feeders (``pfc_relay``, a multicast group per port, instead of OVS's tc relay) and notes
as that egress held: while it is, the accounting's XON to a feeder waits for the link node's own XON,
relayed. So on BMv2 the pause reaches the ingress ports that filled the switch's queue, and every feeder
of a paused egress; on OVS every feeder.

PFC is applied when every link is a link node (``pfc:`` chooses the userspace backend for every link; the
kernel's netem/tc cannot pause). Otherwise the plan carries the block with ``applied: false`` and the
reason, as a note and a console warning (docs/pfc.md, "In a replica").
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

from testbed.dilation import Dilation
from testbed.errors import SpecError
from testbed.pfc.config import NIC_HEADROOM_BYTES, NIC_XOFF_BYTES, NIC_XON_BYTES, PfcConfig
from testbed.pfc.headroom import port_headrooms
from testbed.pfc.link import PfcPort
from testbed.pfc.relay import relay_argv
from testbed.pfc.state import REFRESH, quanta_seconds
from testbed.topo.graph import HOST

#: The plan note (and console warning) of a spec with ``pfc:`` that a replica cannot apply; ``{why}``.
PFC_NOTE = ("pfc: planned, NOT applied ({why}): lossless priorities are lossy in this replica. "
            "Headroom per switch port: plan.json 'pfc'")

#: The plan note of an applied ``pfc:`` block on a fabric with BMv2 switches (prefix of PFC_APPLIED_NOTE's).
PFC_P4_NOTE = "pfc: applied in fabric.p4 on {n} BMv2 ports (per-ingress accounting, PAUSE to the port's peer) and "

#: The plan note of an applied ``pfc:`` block.
PFC_APPLIED_NOTE = ("pfc: applied in the link nodes (egress accounting, PAUSE relayed by each switch to the "
                    "ports that feed the paused one; docs/pfc.md 'In a replica')")

#: What the emulated switch may hold back before the link node behind it sees the frames (wall-clock =
#: emulated time): OVS's userspace datapath forwards in its main loop, which stalls for tens of ms on this
#: kind of machine (pfc_fabric measured a 23 ms burst of ~75 KB reaching a paused port's queue after its
#: PAUSE, sent by the feeders before it; docs/failures.md: 15-20 ms late under load). Frames held there are
#: in flight from PFC's point of view, so each feeder's headroom gets this much of its emulated rate on top
#: of the physics (reported apart: ``emulator_allowance_bytes``). A real switch has no such stall. Behind a
#: BMv2 switch the allowance also holds what BMv2's unstoppable queue keeps sending into a paused link
#: node: each feeder's fabric.p4 limit (``pfc_fabric --switches bmv2`` dropped 463 frames at l0->s0 without it).
SWITCH_LAG_S = 50e-3

#: fabric.p4 repeats a PAUSE at least this often (emulated time) while a port stays above xoff: a sender it
#: paused may be resumed early by the XON of a link node it also feeds (one PFC state per upstream port, two
#: agents speaking for a BMv2 switch), and must be paused again well within the emulator allowance
#: (SWITCH_LAG_S of its rate), which BMv2's own lag also draws on. At 25 ms a CI run's quick BMv2 incast
#: lost 60 lossless frames at l0's host ports; a PAUSE per 5 ms per busy port is cheap.
P4_REFRESH_S = SWITCH_LAG_S / 10

#: Switch kinds with egress buffers (an ``external`` switch, e.g. the optical circuit switch, has none).
BUFFERED_KINDS = ("ovs", "bmv2")


@dataclass(frozen=True)
class PfcPortEntry:
    """One switch port's lossless-priority buffer need (real bytes; dilation keeps bytes)."""

    node: object
    switch: str
    port: int
    peer: object
    headroom_bytes: float
    fits_buffer: bool | None          # xoff + headroom <= the spec's buffer; None without ``buffer:``
    detail: dict                      # port_headrooms' entry: terms (auto) or fixed value and auto_bytes


@dataclass(frozen=True)
class PfcSide:
    """One direction of one link node: its ingress thresholds (real bytes) and who it stands for."""

    role: str                         # "switch" (an egress port's queue) or "nic" (a host's NIC)
    xoff_bytes: float
    xon_bytes: float
    headroom_bytes: float             # what the link node uses: physics + emulator allowance
    feeders: tuple = ()               # the switch's neighbours whose traffic leaves by this port
    allowance_bytes: float = 0.0      # of headroom_bytes: the feeders' emulated rate x SWITCH_LAG_S

    @property
    def aqm(self) -> bool:
        """Whether this side runs RED/ECN when its link has ``red:``: a switch egress does, a NIC does not."""
        return self.role != "nic"

    def to_json(self, red: bool = False) -> dict:
        """``red``: the link node's params have RED (``marks`` says whether this side applies it)."""
        return {"role": self.role, "marks": red and self.aqm, "xoff_bytes": self.xoff_bytes,
                "xon_bytes": self.xon_bytes, "headroom_bytes": self.headroom_bytes,
                "physics_headroom_bytes": self.headroom_bytes - self.allowance_bytes,
                "emulator_allowance_bytes": self.allowance_bytes, "feeders": [str(f) for f in self.feeders]}


@dataclass(frozen=True)
class PfcLink:
    """The ``--pfc`` of one link node: ``ab`` is its u->v direction (the node's a side faces u)."""

    u: object
    v: object
    via: str
    real_rate_bps: float
    ab: PfcSide
    ba: PfcSide
    red: bool = False                 # the link node's params have RED (the spec's red: on its tier)

    def port(self, config: PfcConfig, scale: float) -> PfcPort:
        """What the link node is started with (both directions' thresholds; no RED on a NIC side)."""
        cfg = _thresholds(config, self.ab)
        return PfcPort(cfg, self.real_rate_bps, self.ab.headroom_bytes, scale,
                       (self.ba.xoff_bytes, self.ba.xon_bytes, self.ba.headroom_bytes),
                       red_off=tuple(i for i, side in enumerate((self.ab, self.ba)) if not side.aqm))

    def to_json(self) -> dict:
        return {"u": str(self.u), "v": str(self.v), "via": self.via, "real_rate_bps": self.real_rate_bps,
                "red": self.red, "ab": self.ab.to_json(self.red), "ba": self.ba.to_json(self.red)}


@dataclass(frozen=True)
class P4PfcPort:
    """One BMv2 switch port's ingress accounting of the lossless priorities (fabric.p4 table ``pfc_config``):
    real bytes; ``refresh_us`` and the pause time in emulated (wall-clock) time, BMv2's clock."""

    node: object
    switch: str
    port: int
    peer: object
    xoff_bytes: float
    xon_bytes: float
    headroom_bytes: float             # physics (the cable to ``peer``) + emulator allowance
    allowance_bytes: float            # of headroom_bytes: the port's emulated rate x SWITCH_LAG_S
    quanta: int
    refresh_us: int

    @property
    def limit_bytes(self) -> float:
        """Above this a lossless frame arriving by this port is dropped (``pfc_headroom``)."""
        return self.xoff_bytes + self.headroom_bytes

    def to_json(self) -> dict:
        return {"switch": self.switch, "port": self.port, "peer": str(self.peer), "xoff_bytes": self.xoff_bytes,
                "xon_bytes": self.xon_bytes, "headroom_bytes": self.headroom_bytes,
                "physics_headroom_bytes": self.headroom_bytes - self.allowance_bytes,
                "emulator_allowance_bytes": self.allowance_bytes, "limit_bytes": self.limit_bytes,
                "quanta": self.quanta, "refresh_us": self.refresh_us}


@dataclass(frozen=True)
class PauseRelay:
    """Switch ``switch``'s port facing ``peer``: PAUSE arriving there from its link node goes to ``targets``."""

    node: object
    switch: str
    peer: object
    dev: str                          # the switch's interface towards the link node
    targets: tuple                    # the feeders' interfaces on the same switch

    def argv(self) -> list[list[str]]:
        """The tc commands, run in the switch's namespace (:func:`testbed.pfc.relay.relay_argv`)."""
        return relay_argv(self.dev, self.targets)

    def to_json(self) -> dict:
        return {"switch": self.switch, "peer": str(self.peer), "dev": self.dev, "targets": list(self.targets)}


@dataclass(frozen=True)
class PfcPlan:
    """The spec's PFC block as planned: config, per-port headroom, and whether and how a replica applies it."""

    config: PfcConfig
    ports: tuple                      # PfcPortEntry, by switch then port
    applied: bool = False
    note: str = PFC_NOTE
    links: tuple = ()                 # PfcLink, when applied
    relays: tuple = ()                # PauseRelay, when applied
    p4: tuple = ()                    # P4PfcPort of every BMv2 switch port, when applied

    def p4_ports(self, node) -> tuple:
        """The :class:`P4PfcPort` entries of BMv2 switch ``node`` (empty for an OVS switch)."""
        return tuple(p for p in self.p4 if p.node == node)

    def link(self, u, v) -> PfcLink | None:
        for lk in self.links:
            if (lk.u, lk.v) == (u, v):
                return lk
        return None

    @property
    def over_buffer(self) -> tuple:
        """Ports where xoff + headroom exceed the spec's buffer (they cannot stay lossless under incast)."""
        return tuple(p for p in self.ports if p.fits_buffer is False)

    def to_json(self) -> dict:
        return {"applied": self.applied, "note": self.note, "config": self.config.to_dict(),
                "max_headroom_bytes": max((p.headroom_bytes for p in self.ports), default=None),
                "ports_over_buffer": len(self.over_buffer),
                "ports": [{"node": str(p.node), "switch": p.switch, "port": p.port, "peer": str(p.peer),
                           "headroom_bytes": p.headroom_bytes, "fits_buffer": p.fits_buffer, **p.detail}
                          for p in self.ports],
                "links": [lk.to_json() for lk in self.links], "relays": [r.to_json() for r in self.relays],
                "p4": [p.to_json() for p in self.p4]}


def plan_pfc(pfc: PfcConfig, links, switches, mtu: int, buffer_bytes: float | None, graph: nx.Graph | None = None,
             why_not: str | None = None, scale: float = 1.0) -> PfcPlan:
    """Headroom of every buffered switch port from the plan's own links (real rate and one-way delay, the
    layout's port numbers); with ``graph`` (the plan's graph, for the routing brain) and no ``why_not``, the
    link nodes' thresholds, the switches' PAUSE relays and the BMv2 switches' ingress accounting (applied;
    ``scale``: the dilation, for fabric.p4's refresh time).

    Raises:
        SpecError: a link into a switch without a rate (headroom needs it).
    """
    G = nx.Graph(mtu=mtu, buffer_bytes=buffer_bytes)
    for e in links:
        if not e.real.rate_bps:
            raise SpecError(f"links.{e.tier}.rate" if e.tier else f"edges.{e.u}-{e.v}.rate",
                            "PFC headroom needs the link's rate (pfc: is set)")
        G.add_edge(e.u, e.v, rate_bps=e.real.rate_bps, delay_s=e.real.one_way_delay_s,
                   ports={e.u: e.port_u, e.v: e.port_v})
    need = port_headrooms(G, pfc, mtu)
    ports = []
    for s in switches:
        if s.kind not in BUFFERED_KINDS:
            continue
        for p in s.ports:
            doc = dict(need[s.node][p.port])
            fits = doc.pop("fits_buffer", None)
            ports.append(PfcPortEntry(s.node, s.name, p.port, p.peer, float(doc.pop("bytes")), fits, doc))
    if graph is None or why_not is not None:
        return PfcPlan(pfc, tuple(ports), note=PFC_NOTE.format(why=why_not or "no routes"))
    feeds = feeders(graph)
    hr = {(p.node, p.peer): p.headroom_bytes for p in ports}
    hosts = {n for n, d in graph.nodes(data=True) if d.get("role") == HOST}
    names = {s.node: s.name for s in switches}
    intf, rate = {}, {}
    for e in links:
        intf[(e.u, e.v)], intf[(e.v, e.u)] = e.intf_u, e.intf_v
        rate[(e.u, e.v)] = rate[(e.v, e.u)] = e.emulated.rate_bps or 0.0   # BMv2 drains it where the node does not

    real = {(e.u, e.v): e.real.rate_bps for e in links} | {(e.v, e.u): e.real.rate_bps for e in links}
    bmv2 = {s.node for s in switches if s.kind == "bmv2"}
    p4 = {(p.node, p.peer): _p4_port(pfc, p, real[(p.node, p.peer)], rate[(p.node, p.peer)], scale)
          for p in ports if p.node in bmv2}

    def side(node, peer) -> PfcSide:
        if node in hosts:
            return PfcSide("nic", NIC_XOFF_BYTES, NIC_XON_BYTES, NIC_HEADROOM_BYTES)
        who = tuple(sorted(feeds.get(node, {}).get(peer, ()), key=str))
        room = sum(hr[(node, f)] for f in who) or hr[(node, peer)]
        allowance = sum(rate[(node, f)] / 8 * SWITCH_LAG_S for f in who)
        # BMv2 cannot stop its egress queue: a paused direction also receives all the switch holds for that
        # egress, up to each feeder's xoff + headroom (fabric.p4's limit), after its PAUSE
        allowance += sum(p4[(node, f)].limit_bytes for f in who if (node, f) in p4)
        return PfcSide("switch", pfc.xoff_bytes, pfc.xon_bytes, room + allowance, who, allowance)

    plinks = tuple(PfcLink(e.u, e.v, e.via, e.real.rate_bps, side(e.u, e.v), side(e.v, e.u),
                           e.applied.red is not None) for e in links)
    relays = []   # tc relays of OVS switches; a BMv2 switch relays in fabric.p4 (pfc_relay, the same feeders)
    for sw, outs in sorted(feeds.items(), key=lambda kv: str(kv[0])):
        for peer, who in sorted(outs.items(), key=lambda kv: str(kv[0])):
            if who and sw not in bmv2:
                relays.append(PauseRelay(sw, names[sw], peer, intf[(sw, peer)],
                                         tuple(intf[(sw, f)] for f in sorted(who, key=str))))
    p4 = tuple(p4.values())
    note = PFC_P4_NOTE.format(n=len(p4)) + PFC_APPLIED_NOTE.removeprefix("pfc: applied ") if p4 else PFC_APPLIED_NOTE
    return PfcPlan(pfc, tuple(ports), applied=True, note=note, links=plinks, relays=tuple(relays), p4=p4)


def _p4_port(pfc: PfcConfig, p: PfcPortEntry, real_bps: float, emulated_bps: float, scale: float) -> P4PfcPort:
    """fabric.p4's accounting of ingress port ``p``: the spec's xoff/xon, the port's own headroom (its cable:
    what its peer still sends after the PAUSE) plus what reaches BMv2's ingress late (SWITCH_LAG_S of the
    port's emulated rate: frames waiting in BMv2's input and in the PAUSE's path out of the switch)."""
    allowance = emulated_bps / 8 * SWITCH_LAG_S
    pause_s = quanta_seconds(pfc.quanta, real_bps, Dilation(scale))
    refresh_s = min(REFRESH * pause_s, P4_REFRESH_S)
    return P4PfcPort(p.node, p.switch, p.port, p.peer, pfc.xoff_bytes, pfc.xon_bytes, p.headroom_bytes + allowance,
                     allowance, pfc.quanta, max(1, round(refresh_s * 1e6)))


def feeders(G: nx.Graph) -> dict:
    """``{switch: {out neighbour: {in neighbour, ...}}}``: who sends traffic out of each switch port, under the
    routing brain's routes of the healthy fabric (every destination host; a host feeds its switch's ports
    towards every other host). Pure; what the PAUSE relays follow.
    """
    from testbed.routing.brain import RoutingBrain
    from testbed.routing.deadlock import next_hops

    brain = RoutingBrain(G)
    brain.compute_all()
    hosts = {n for n, d in G.nodes(data=True) if d.get("role") == HOST}
    out: dict = {}
    for prefix, hops_of in next_hops(G, list(brain.routes.values())).items():
        dest = {h for h in hosts if brain.prefix(h) == prefix}
        for sw, outs in hops_of.items():
            ins = {u for u, hops in hops_of.items() if sw in hops}
            ins |= {h for h in G.neighbors(sw) if h in hosts and h not in dest}
            for w in outs:
                out.setdefault(sw, {}).setdefault(w, set()).update(x for x in ins if x != w)
    return out


def _thresholds(config: PfcConfig, side: PfcSide) -> PfcConfig:
    from dataclasses import replace

    return replace(config, xoff_bytes=side.xoff_bytes, xon_bytes=side.xon_bytes)
