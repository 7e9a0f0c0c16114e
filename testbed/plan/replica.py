"""The replica plan: the one place that turns a real-world fabric into the emulated replica (pure).

    graph (real units) --+
    Capabilities (data) -+--> plan_replica() --> ReplicaPlan --> Replica(plan) executes it (root)
    Overrides (data) ----+                            |
                                                      +--> plan.json in the results folder, `testbed plan`

It owns the single :class:`~testbed.dilation.Dilation` and, for every link, the real
(:attr:`LinkEntry.real`) and emulated (:attr:`LinkEntry.emulated`) parameters, the backend that emulates
it (``none`` | ``htb`` | ``netem`` | ``userspace``) and why, and the exact tc argv per link end; for every
switch its kind, datapath, dpid, Thrift port and device id and, per port, the egress queue (depth in
packets, drain rate in real and emulated units) with its RED/ECN and fast-CNP settings; for every host
its addresses and its DCQCN configuration (real and emulated). Real and emulated quantities are told
apart by name: ``real_*`` / ``emulated_*`` (or ``real`` / ``emulated`` LinkParams); counts of packets and
bytes are the same in both (dilation keeps buffers in packets).

Every spec setting either takes effect here or is refused with a :class:`SpecError` naming the field;
what a backend cannot do is written into the plan (``notes``), with the backend's floor, never dropped
without a word. A note that means the replica behaves unlike the spec is also in ``warnings`` (printed as
a warning when the replica is built and by ``testbed plan``), e.g. a spec's ``pfc:`` block that this
replica cannot apply (:mod:`testbed.plan.pfc`: links not emulated); where it applies, every link becomes a
link node carrying ``--pfc`` and every BMv2 switch port gets fabric.p4's ingress accounting.

Queues (``queue:`` on a link, ``buffer:`` per switch egress port): a link's own ``queue:`` wins, else
the spec's ``buffer:`` at every switch egress, else 1000 packets (the kernel's txqueuelen). They become
the HTB leaf's pfifo/bfifo limit, the delay line's queue, or BMv2's ``set_queue_depth``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import networkx as nx

from testbed.dilation import Dilation
from testbed.errors import SpecError
from testbed.links import tc
from testbed.links.model import BYTES, PACKETS, LinkParams
from testbed.plan.alloc import Allocator
from testbed.plan.capabilities import ASSUMED, Capabilities
from testbed.plan.layout import Layout, layout
from testbed.plan.marking import marking_profile
from testbed.plan.pfc import PfcPlan, plan_pfc
from testbed.rdma.dcqcn import DcqcnParams, params_dict
from testbed.seeds import derive as derive_seed
from testbed.topo.graph import HOST

#: Emulated one-way delays each backend can add (below it the link is emulated without the delay).
#: userspace: the delay line's own forwarding latency (~0.1 ms); netem: tc's time unit (1 us).
DELAY_FLOOR_S = {"userspace": 100e-6, "netem": 1e-6}
#: Why a link without delay, loss or RED still gets a link node under ``Overrides.serialise``.
SERIALISE_REASON = "serialise: the link node adds each frame's serialisation"
#: Link backends (``kernel`` is accepted as another name of ``netem``).
LINK_BACKENDS = ("auto", "netem", "userspace")
ECN_MODES = ("off", "ecn", "fast-cnp", "both")
LINK_MODES = ("spec", "rates", "off")
ETHERNET_HEADER = 14
#: Switch roles the plan does not build itself: their node class comes from the run's ``switch_factory``
#: (e.g. the optical circuit switch of testbed/ocs/node.py, layer 1, no queues of its own).
EXTERNAL_ROLES = ("ocs",)
#: BMv2's egress queue depth is 19 bits wide.
MAX_QDEPTH = (1 << 19) - 1
#: DCQCN's CNP interval (DcqcnParams owns it; the switch rate-limits its own CNPs the same way) and the QP
#: retransmission timeout of the real fabric (DOMAIN.md).
CNP_INTERVAL_S = DcqcnParams.cnp_interval
QP_TIMEOUT_S = 50e-3


@dataclass(frozen=True)
class Overrides:
    """Choices a run makes on top of the spec (each one is recorded in the plan).

    Attributes:
        scale: replaces the spec's time-dilation factor.
        link_backend: ``auto`` | ``netem`` | ``userspace`` for links that need delay, loss or RED.
        links: ``spec`` (everything the spec says), ``rates`` (rates only, on tc HTB: no delay lines;
            each link notes what it leaves out), ``off`` (plain veths, for routing-only runs).
        datapath: ``user`` | ``kernel`` OVS datapath (None: the kernel one where the machine has it).
        static_arp: hosts get permanent neighbour entries for every other host.
        seed: base seed of the delay lines' random draws (per link: derived from it and the ends).
        frame_bytes: full frame size for packet counts and BMv2 drain rates (default MTU + 14).
        ecn_mode: fabric.p4 mode on ports with RED thresholds: off | ecn | fast-cnp | both.
        red_profile: ``(name, rtt_s, pmax)``: the marking profile (:mod:`testbed.plan.marking`: ``per-25g``,
            Alibaba's, or ``bdp``, Juniper's long-haul one over the real round trip ``rtt_s``) of switch
            ports whose link has no ``red:``, each by its real rate; a profile with a buffer rule
            deepens the port to it. None: only links with ``red:`` mark.
        cnp_interval_s: the real fabric's CNP interval (DCQCN's and the switch's).
        thrift_base: first Thrift port tried.
        p4_program: run every switch as BMv2 with this program (None: the spec's ``switches:``).
        serialise: every link with a rate runs through a link node that serialises each frame at the rate
            (store and forward: a frame reaches the next hop ``len * 8 / rate`` after its turn began). BMv2's
            queues and tc's HTB/TBF pace frames but hand each one over whole at the start of its turn, so
            without it every hop is one serialisation early: microseconds that matter where the feedback
            loop itself is microseconds (long_haul_cnp at 0-10 km; docs/validation.md). Costs a link node
            per link; a link on netem serialises with netem's own ``rate`` instead (no link node), except at
            an end with kernel RED, where tbf paces as before (noted in the plan).
    """

    scale: float | None = None
    link_backend: str = "auto"
    links: str = "spec"
    datapath: str | None = None
    static_arp: bool = True
    seed: int | None = None
    frame_bytes: int | None = None
    ecn_mode: str | None = None
    red_profile: tuple | None = None
    cnp_interval_s: float = CNP_INTERVAL_S
    thrift_base: int = 9090
    p4_program: str | None = None
    external_roles: tuple = EXTERNAL_ROLES
    serialise: bool = False

    def __post_init__(self):
        backend = "netem" if self.link_backend == "kernel" else self.link_backend
        if backend not in LINK_BACKENDS:
            raise SpecError("link_backend", f"unknown backend {self.link_backend!r}; allowed: "
                                            f"{', '.join(LINK_BACKENDS)}")
        object.__setattr__(self, "link_backend", backend)
        if self.links not in LINK_MODES:
            raise SpecError("links", f"{self.links!r} is not one of: {', '.join(LINK_MODES)}")
        if self.datapath not in (None, "user", "kernel"):
            raise SpecError("datapath", f"{self.datapath!r} is not one of: user, kernel")
        if self.ecn_mode is not None and self.ecn_mode not in ECN_MODES:
            raise SpecError("ecn_mode", f"{self.ecn_mode!r} is not one of: {', '.join(ECN_MODES)}")
        if self.frame_bytes is not None and not 64 <= self.frame_bytes <= 9300:
            raise SpecError("frame_bytes", f"must be 64..9300 bytes, got {self.frame_bytes!r}")


@dataclass(frozen=True)
class EcnEntry:
    """RED/ECN marking and fast CNP of one BMv2 egress port (thresholds in packets of the plan's frame)."""

    kmin_pkts: int
    kmax_pkts: int
    pmax: float
    mode: str
    real_cnp_interval_s: float
    emulated_cnp_interval_s: float


@dataclass(frozen=True)
class PortEntry:
    """One switch egress port: its queue in packets, its drain rate in real and emulated units."""

    port: int
    peer: object
    depth_pkts: int
    depth_source: str                 # link queue | buffer | default | pfc (BMv2: fabric.p4's accounting)
    real_rate_bps: float | None
    emulated_rate_bps: float | None
    emulated_rate_pps: int | None     # BMv2 set_queue_rate (None for OVS: the link's shaper drains it)
    ecn: EcnEntry | None = None


@dataclass(frozen=True)
class SwitchEntry:
    node: object
    name: str
    role: str
    kind: str                         # ovs | bmv2 | external (built by the run's switch_factory)
    dpid: int
    program: str | None = None        # P4 program (bmv2)
    datapath: str | None = None       # OVS: user | kernel
    thrift_port: int | None = None
    device_id: int | None = None
    ports: tuple = ()                 # PortEntry, by port number
    reason: str = ""

    def port(self, number: int) -> PortEntry:
        for p in self.ports:
            if p.port == number:
                return p
        raise KeyError(f"{self.node} has no port {number}")


@dataclass(frozen=True)
class LinkEntry:
    """One edge: real and emulated parameters, the backend and why, the commands per end."""

    u: object
    v: object
    port_u: int
    port_v: int
    tier: str | None
    real: LinkParams                  # the spec's link, real units
    emulated: LinkParams              # dilated: what the replica behaves like
    applied: LinkParams               # what the backend is given (emulated minus what `notes` name)
    backend: str                      # none | htb | netem | userspace
    reason: str
    intf_u: str = ""
    intf_v: str = ""
    via: str | None = None            # the delay-line node (userspace)
    via_dpid: int | None = None
    seed: int | None = None
    tc: tuple = ()                    # ((node, ((argv...), ...)), ...) run in that node's namespace
    notes: tuple = ()


@dataclass(frozen=True)
class EndpointEntry:
    """One host NIC: addresses, line rate, DCQCN (real and emulated constants) and QP timeout."""

    node: object
    name: str
    ip: str
    prefixlen: int
    mac: str
    real_line_rate_bps: float | None
    emulated_line_rate_bps: float | None
    real_dcqcn: dict | None
    emulated_dcqcn: dict | None
    real_qp_timeout_s: float
    emulated_qp_timeout_s: float


@dataclass(frozen=True)
class ReplicaPlan:
    """Everything a :class:`~testbed.emu.replica.Replica` builds, computed without root."""

    name: str
    dilation: Dilation
    capabilities: Capabilities
    overrides: Overrides
    layout: Layout
    graph: nx.Graph                   # the fabric, hosts carrying the addresses they get
    links: tuple
    switches: tuple
    endpoints: tuple
    mtu: int
    frame_bytes: int
    notes: tuple = field(default=())
    warnings: tuple = field(default=())   # the notes that say the replica departs from the spec
    pfc: PfcPlan | None = None            # the spec's pfc: block, planned; PfcPlan.applied: runs in the link nodes

    @property
    def scale(self) -> float:
        return self.dilation.scale

    def link(self, u, v) -> LinkEntry:
        for e in self.links:
            if {e.u, e.v} == {u, v}:
                return e
        raise KeyError(f"no link {u}--{v}")

    def switch(self, node) -> SwitchEntry:
        for s in self.switches:
            if s.node == node:
                return s
        raise KeyError(f"no switch {node}")

    def endpoint(self, node) -> EndpointEntry:
        for h in self.endpoints:
            if h.node == node:
                return h
        raise KeyError(f"no host {node}")

    def summary_line(self) -> str:
        count = {}
        for e in self.links:
            count[e.backend] = count.get(e.backend, 0) + 1
        kinds = ", ".join(f"{n} {b}" for b, n in sorted(count.items()))
        return (f"{self.name}: scale {self.scale:g}, {len(self.endpoints)} hosts, {len(self.switches)} switches, "
                f"{len(self.links)} links ({kinds})")

    def to_json(self) -> dict:
        from testbed.plan.render import plan_json

        return plan_json(self)


# -- the planner --------------------------------------------------------------------------------------------
def edge_link(G: nx.Graph, u, v) -> LinkParams:
    """Real-world parameters of edge u--v: its ``link`` LinkParams, with rate/delay filled from the edge.

    Raises:
        SpecError: the edge's flat ``rate_bps``/``delay_s`` disagree with its ``link`` (someone changed one
            without the other; use :func:`testbed.topo.builder.set_link`).
    """
    attrs = G.edges[u, v]
    base = attrs.get("link") or LinkParams()
    if not isinstance(base, LinkParams):
        raise SpecError(f"edges.{u}-{v}.link", f"must be a LinkParams, got {type(base).__name__}")
    lp = base.with_defaults(rate_bps=attrs.get("rate_bps"), delay_s=attrs.get("delay_s"),
                            distance_m=attrs.get("distance_m"))
    for key, have in (("rate_bps", lp.rate_bps), ("delay_s", lp.one_way_delay_s)):
        flat = attrs.get(key)
        if flat is not None and have is not None and not math.isclose(flat, have, rel_tol=1e-9, abs_tol=1e-15):
            raise SpecError(f"edges.{u}-{v}.{key}", f"{flat:g} disagrees with the edge's link ({have:g}); "
                                                    "change links with testbed.topo.builder.set_link")
    return lp


def _queue(lp: LinkParams, switch_end: bool, buffer_bytes: float | None, frame: int) -> tuple[float, str, str]:
    """(limit, unit, source) of an egress queue; see the module docstring."""
    if lp.limit is not None:
        return lp.limit, lp.limit_unit, "link queue"
    if switch_end and buffer_bytes:
        return math.floor(buffer_bytes / frame), PACKETS, "buffer"
    limit, unit = lp.queue_limit
    return limit, unit, "default"


def _packets(limit: float, unit: str, frame: int) -> int:
    return int(limit) if unit == PACKETS else max(1, int(limit // frame))


def _backend(emulated: LinkParams, caps: Capabilities, ov: Overrides) -> tuple[str, str]:
    """(backend, reason) of a link whose emulated parameters need more than a rate shaper."""
    kernel_ok = caps.netem and (emulated.red is None or caps.red)
    missing = "sch_netem" if not caps.netem else "sch_red"
    if ov.link_backend == "netem":
        if not kernel_ok:
            raise SpecError("link_backend", f"netem was asked for but this kernel lacks {missing} "
                                            f"({caps.source}); use userspace")
        return "netem", "asked for netem (overrides.link_backend)"
    if ov.link_backend == "userspace":
        return "userspace", "asked for the userspace delay line (overrides.link_backend)"
    if kernel_ok:
        return "netem", "delay/loss/RED and the kernel has netem" + (" and RED" if emulated.red else "")
    return "userspace", f"delay/loss/RED and the kernel lacks {missing} ({caps.source} capabilities)"


def _ecn(lp: LinkParams, real_rate: float | None, frame: int, ov: Overrides, dil: Dilation) -> EcnEntry | None:
    if lp.red is not None:
        scale = frame if lp.red.unit == BYTES else 1
        kmin, kmax, pmax = lp.red.kmin / scale, lp.red.kmax / scale, lp.red.pmax
    elif ov.red_profile is not None and real_rate:
        prof = _profile(ov, real_rate, frame)
        kmin, kmax, pmax = prof.kmin_bytes / frame, prof.kmax_bytes / frame, prof.pmax
    else:
        return None
    kmin_pkts = max(1, round(kmin))
    kmax_pkts = max(kmin_pkts + 1, round(kmax))
    return EcnEntry(kmin_pkts, kmax_pkts, pmax, ov.ecn_mode or "ecn", ov.cnp_interval_s,
                    dil.time(ov.cnp_interval_s))


def _profile(ov: Overrides, real_rate: float, frame: int):
    name, rtt_s, pmax = ov.red_profile
    return marking_profile(name, real_rate, rtt_s, frame, pmax)


def plan_replica(G: nx.Graph, capabilities: Capabilities = ASSUMED, overrides: Overrides | None = None
                 ) -> ReplicaPlan:
    """The plan of the replica of ``G`` (pure: no root, no processes, milliseconds).

    Args:
        G: the fabric graph in real units (``testbed.topo.spec.build_graph``); ``G.graph['dilation']``
            or ``scale`` give the time dilation unless ``overrides.scale`` does.
        capabilities: what this machine can do (``testbed.doctor.plan_capabilities()``).
        overrides: the run's choices.

    Raises:
        SpecError: a setting no backend can honour, named by its field.
    """
    ov = overrides or Overrides()
    caps = capabilities
    scale = ov.scale or G.graph.get("scale") or getattr(G.graph.get("dilation"), "scale", None) or 1.0
    dil = Dilation(float(scale))
    mtu = int(G.graph.get("mtu") or 1500)
    frame = ov.frame_bytes or mtu + ETHERNET_HEADER
    buffer_bytes = G.graph.get("buffer_bytes")
    roles = {n: d.get("role") for n, d in G.nodes(data=True)}
    p4 = {n: (ov.p4_program or d.get("p4")) for n, d in G.nodes(data=True) if roles[n] != HOST}
    bmv2 = {n for n, prog in p4.items() if prog}

    spec_pfc = getattr(G.graph.get("spec"), "pfc", None)
    pfc_off = _pfc_not_applied(spec_pfc, ov)
    pfc_links = spec_pfc is not None and pfc_off is None

    # links: decide each backend first (the layout needs to know where delay lines go)
    drafts = []
    for u, v in G.edges():
        real = edge_link(G, u, v)
        emulated = real.scaled(dil)
        drafts.append(_link_draft(G, u, v, real, emulated, bmv2, roles, buffer_bytes, frame, caps, ov, pfc_links))
    via = {(d["u"], d["v"]) for d in drafts if d["backend"] == "userspace"}
    lay = layout(G, link_nodes=via)
    links = []
    for d, lk in zip(drafts, lay.links, strict=True):
        u, v = lk.u, lk.v
        intf = {u: lay.intf(u, lk.port_u), v: lay.intf(v, lk.port_v)}
        commands = []
        if d["backend"] in ("htb", "netem"):
            for node in d["shaped_ends"]:
                applied = d["applied"]
                if d["backend"] == "netem" and node in bmv2:
                    # BMv2 drains this end's egress at the rate and marks with fabric.p4's RED: its netem
                    # carries the direction's delay and loss only, with a queue that never fills; with
                    # ``serialise`` also each frame's serialisation at BMv2's drain rate.
                    applied = replace(applied, rate_bps=applied.rate_bps if d.get("serialise") else None,
                                      red=None, limit=1e6, limit_unit=PACKETS)
                commands.append((node, tuple(tuple(a) for a in _tc_cmds(intf[node], applied, d["backend"],
                                                                         d.get("serialise", False)))))
        seed = None
        if ov.seed is not None and lk.via:
            seed = derive_seed(ov.seed, f"{u}|{v}")
        links.append(LinkEntry(u, v, lk.port_u, lk.port_v, G.edges[u, v].get("tier"), d["real"], d["emulated"],
                               d["applied"], d["backend"], d["reason"], intf[u], intf[v], lk.via, lk.via_dpid,
                               seed, tuple(commands), tuple(d["notes"])))

    alloc = Allocator(ov.thrift_base, port_free=lambda p: p not in caps.tcp_ports_in_use)
    datapath = ov.datapath or ("kernel" if caps.ovs_kernel else "user")
    dp_reason = (f"datapath {datapath} (overrides)" if ov.datapath else
                 f"OVS {'kernel' if caps.ovs_kernel else 'userspace (netdev)'} datapath "
                 f"({'present' if caps.ovs_kernel else 'no kernel datapath'}, {caps.source})")
    by_edge = {frozenset((e.u, e.v)): e for e in links}
    switches = []
    for sw in lay.switches:
        ports = []
        for nbr in G.neighbors(sw.node):
            e = by_edge[frozenset((sw.node, nbr))]
            number = e.port_u if e.u == sw.node else e.port_v
            limit, unit, source = _queue(e.real, True, buffer_bytes, frame)
            depth = _packets(limit, unit, frame)
            if sw.node in bmv2:
                ecn = _ecn(e.real, e.real.rate_bps, frame, ov, dil)
                if depth > MAX_QDEPTH:
                    raise SpecError(f"links.{e.tier}.queue" if source == "link queue" else "buffer",
                                    f"{depth} packets exceeds BMv2's queue depth limit of {MAX_QDEPTH}")
                if ecn is not None:
                    depth = max(depth, ecn.kmax_pkts + 1)
                    if e.real.red is None and ov.red_profile is not None:   # the profile's buffer rule
                        prof = _profile(ov, e.real.rate_bps, frame)
                        depth = max(depth, prof.packets(prof.buffer_bytes) or 0)
                rate = e.emulated.rate_bps if ov.links != "off" else None
                pps = _bmv2_pps(rate, frame) if rate else None
                ports.append(PortEntry(number, nbr, depth, source, e.real.rate_bps, rate, pps, ecn))
            else:
                ports.append(PortEntry(number, nbr, depth, source, e.real.rate_bps,
                                       e.emulated.rate_bps if ov.links != "off" else None, None, None))
        ports.sort(key=lambda p: p.port)
        role = roles[sw.node]
        if role in ov.external_roles:
            switches.append(SwitchEntry(sw.node, sw.name, role, "external", sw.dpid, ports=tuple(ports),
                                        reason=f"role {role}: its node class comes from the run's switch_factory"))
        elif sw.node in bmv2:
            nums = alloc.switch(sw.name)
            switches.append(SwitchEntry(sw.node, sw.name, role, "bmv2", sw.dpid, program=p4[sw.node],
                                        thrift_port=nums["thrift_port"], device_id=nums["device_id"],
                                        ports=tuple(ports), reason=f"spec runs P4 program {p4[sw.node]}"
                                        if not ov.p4_program else f"overrides.p4_program={ov.p4_program}"))
        else:
            switches.append(SwitchEntry(sw.node, sw.name, role, "ovs", sw.dpid, datapath=datapath,
                                        ports=tuple(ports), reason=dp_reason))

    endpoints = []
    for h in lay.hosts:
        e = by_edge[frozenset((h.node, next(iter(G.neighbors(h.node)))))] if G.degree(h.node) else None
        rate = e.real.rate_bps if e is not None else None
        dcqcn = DcqcnParams(line_rate=rate, cnp_interval=ov.cnp_interval_s) if rate else None
        endpoints.append(EndpointEntry(h.node, h.name, h.ip, h.prefixlen, h.mac, rate,
                                       dil.rate(rate) if rate else None,
                                       params_dict(dcqcn) if dcqcn else None,
                                       params_dict(dcqcn.dilated(dil)) if dcqcn else None,
                                       QP_TIMEOUT_S, dil.time(QP_TIMEOUT_S)))
    H = G.copy()
    for h in lay.hosts:
        H.nodes[h.node].update(ip=h.ip, prefixlen=h.prefixlen, mac=h.mac)
    for s in switches:
        H.nodes[s.node]["dpid"] = s.dpid
    notes = []
    absorbed = [e for e in links if any("floor" in n for n in e.notes)]
    if absorbed:
        notes.append(f"{len(absorbed)} links have an emulated delay below their backend's floor and are "
                     "emulated without it (see each link's notes)")
    if ov.links == "off":
        notes.append("links are not emulated (overrides.links=off): plain veths, no rates or delays")
    elif ov.links == "rates":
        notes.append("rates only (overrides.links=rates): delays, loss and RED are not emulated")
    warnings = []
    pfc = plan_pfc(spec_pfc, links, switches, mtu, buffer_bytes, H, pfc_off, dil.scale) if spec_pfc is not None else None
    if pfc is not None and pfc.p4:
        switches = [_pfc_depths(s, pfc, frame) for s in switches]
    if pfc is not None:
        notes.append(pfc.note)
        if not pfc.applied:
            warnings.append(pfc.note)
    return ReplicaPlan(name=str(G.graph.get("name", "fabric")), dilation=dil, capabilities=caps, overrides=ov,
                       layout=lay, graph=H, links=tuple(links), switches=tuple(switches),
                       endpoints=tuple(endpoints), mtu=mtu, frame_bytes=frame, notes=tuple(notes),
                       warnings=tuple(warnings), pfc=pfc)


def _pfc_depths(sw: SwitchEntry, pfc: PfcPlan, frame: int) -> SwitchEntry:
    """A BMv2 switch with PFC: every egress queue deep enough for what all its ingress ports may hold
    (each up to xoff + headroom, fabric.p4's pfc_headroom drop), so the queue's tail never drops a lossless
    frame before the accounting does. Lossy traffic shares the queue and sees the same depth (plan note)."""
    ports = pfc.p4_ports(sw.node)
    if not ports:
        return sw
    need = min(MAX_QDEPTH, math.ceil(sum(p.limit_bytes for p in ports) / frame) + 1)
    return replace(sw, ports=tuple(p if p.depth_pkts >= need else replace(p, depth_pkts=need, depth_source="pfc")
                                   for p in sw.ports))


def _pfc_not_applied(spec_pfc, ov: Overrides) -> str | None:
    """Why a spec's ``pfc:`` cannot run in this replica (None: it runs; testbed/plan/pfc.py).

    Raises:
        SpecError: the run asked for a kernel link backend, which cannot pause (refused, not ignored).
    """
    if spec_pfc is None:
        return None
    if ov.link_backend == "netem":
        raise SpecError("link_backend", "pfc: runs in the userspace link nodes (netem cannot pause); "
                                        "drop the netem backend or the pfc: block")
    if ov.links != "spec":
        return f"links are not emulated (overrides.links={ov.links})"
    return None


def _link_draft(G, u, v, real, emulated, bmv2, roles, buffer_bytes, frame, caps, ov, pfc: bool = False) -> dict:
    """Backend, applied parameters and notes of one link (see :func:`plan_replica`); ``pfc``: every link is
    a link node (the userspace backend), where PFC runs."""
    notes = []
    switch_end = roles[u] != HOST or roles[v] != HOST
    limit, unit, source = _queue(real, switch_end, buffer_bytes, frame)
    applied = replace(emulated, limit=limit, limit_unit=unit)
    tier = G.edges[u, v].get("tier")
    field = f"links.{tier}" if tier else f"edges.{u}-{v}"
    if ov.links == "off":
        return {"u": u, "v": v, "real": real, "emulated": emulated, "applied": LinkParams(), "backend": "none",
                "reason": "links not emulated (overrides.links=off)", "notes": notes, "shaped_ends": ()}
    if ov.links == "rates":
        left = [k for k, on in (("delay", applied.delay_s), ("jitter", applied.jitter_s), ("RED", applied.red),
                                ("loss", applied.loss is not None and applied.loss.active)) if on]
        if left:
            notes.append(f"{', '.join(left)} not emulated (overrides.links=rates)")
        applied = replace(applied, delay_s=0.0, jitter_s=0.0, red=None, loss=None)
    both_p4 = u in bmv2 and v in bmv2
    serialise = ov.serialise and bool(applied.rate_bps)
    if serialise and (u in bmv2 or v in bmv2):
        # the node serialises what BMv2 hands over at BMv2's own drain rate (whole packets per second),
        # never slower: the queue stays in BMv2, where fabric.p4 marks, and each frame is one
        # serialisation later, as on a wire
        applied = replace(applied, rate_bps=max(applied.rate_bps, bmv2_drain_bps(applied.rate_bps, frame)))
    if both_p4:
        # BMv2 drains each end's egress at the link rate and marks with fabric.p4's RED: the link itself
        # only carries delay and loss, and a queue that never fills. With PFC it keeps the rate: a paused
        # direction holds what BMv2 still sends into it and drains it at the line rate after the XON.
        # With ``serialise`` too: the node adds each frame's serialisation.
        applied = replace(applied, rate_bps=applied.rate_bps if pfc or serialise else None, red=None,
                          limit=1e6, limit_unit=PACKETS)
    elif emulated.red is not None and not emulated.rate_bps:
        raise SpecError(f"{field}.red", "RED marking needs a rate (a queue only forms at a bottleneck)")
    shaped_ends = tuple(n for n in (u, v) if n not in bmv2)
    node = pfc or serialise   # a link node whatever the delay: PAUSE, or each frame's serialisation
    if not applied.needs_delay_line and not node:
        if not applied.rate_bps or not shaped_ends:
            return {"u": u, "v": v, "real": real, "emulated": emulated, "applied": applied, "backend": "none",
                    "reason": "both ends are BMv2 (their egress queues drain at the rate)" if both_p4
                    else "no rate, delay or loss", "notes": notes, "shaped_ends": ()}
        return _htb(u, v, real, emulated, applied, field, notes, shaped_ends, bmv2)
    if pfc:
        backend, reason = "userspace", "pfc: lossless accounting and PAUSE run in the link node"
    elif serialise and not applied.needs_delay_line:
        backend, reason = "userspace", SERIALISE_REASON
    else:
        backend, reason = _backend(applied, caps, ov)
    floor = DELAY_FLOOR_S[backend]
    if 0 < applied.delay_s < floor and not applied.jitter_s:
        notes.append(f"delay {applied.delay_s * 1e6:.3g} us (emulated) is below the {backend} floor of "
                     f"{floor * 1e6:g} us: not emulated")
        applied = replace(applied, delay_s=0.0)
        if serialise and not applied.needs_delay_line:
            backend, reason = "userspace", SERIALISE_REASON
        if not applied.needs_delay_line and not node:
            if not applied.rate_bps or not shaped_ends:
                return {"u": u, "v": v, "real": real, "emulated": emulated, "applied": applied,
                        "backend": "none", "reason": "only a delay below the floor", "notes": notes,
                        "shaped_ends": ()}
            return _htb(u, v, real, emulated, applied, field, notes, shaped_ends, bmv2)
    if serialise and backend == "netem":
        # netem's ``rate`` serialises (tc.link_cmds); an end with kernel RED keeps tbf, which marks
        red_ends = [n for n in (u, v) if n not in bmv2 and not tc.serialises(applied)]
        notes.append("netem's rate serialises each frame (store and forward)" if not red_ends else
                     f"serialisation latency not emulated at the {' and '.join(red_ends)} end"
                     f"{'s' if len(red_ends) > 1 else ''}: kernel RED marks tbf's queue, and tbf hands each "
                     "frame over whole")
    if applied.rate_bps is not None and applied.rate_bps < tc.MIN_RATE_BPS and backend == "netem":
        raise SpecError(f"{field}.rate", f"emulated rate {applied.rate_bps:g} bit/s is below tc's 8 kbit/s; "
                                         "use a smaller scale")
    return {"u": u, "v": v, "real": real, "emulated": emulated, "applied": applied, "backend": backend,
            "reason": reason, "notes": notes, "shaped_ends": (u, v) if backend == "netem" else (),
            "serialise": serialise and backend == "netem"}


def _bmv2_pps(rate_bps: float, frame: int) -> int:
    """BMv2's ``set_queue_rate`` (packets per second) of an egress draining ``rate_bps`` in ``frame``-byte frames."""
    return max(1, round(rate_bps / (8 * frame)))


def bmv2_drain_bps(rate_bps: float, frame: int) -> float:
    """The bit rate BMv2 drains ``frame``-byte frames at for a link of ``rate_bps`` (:func:`_bmv2_pps`
    rounds, so up to half a packet per second above the link's rate)."""
    return _bmv2_pps(rate_bps, frame) * 8.0 * frame


def _htb(u, v, real, emulated, applied, field, notes, shaped_ends, bmv2) -> dict:
    if applied.rate_bps < tc.MIN_RATE_BPS:
        raise SpecError(f"{field}.rate", f"emulated rate {applied.rate_bps:g} bit/s is below tc's minimum of "
                                         "8 kbit/s; use a smaller scale")
    reason = "rate only: tc HTB" + (" on the non-BMv2 end (BMv2 drains its own queue)"
                                    if len(shaped_ends) == 1 else " on both ends")
    return {"u": u, "v": v, "real": real, "emulated": emulated, "applied": applied, "backend": "htb",
            "reason": reason, "notes": notes, "shaped_ends": shaped_ends}


def _tc_cmds(dev: str, applied: LinkParams, backend: str, serialise: bool = False) -> list[list[str]]:
    if backend == "htb":
        limit, unit = applied.queue_limit
        return tc.htb_cmds(dev, applied.rate_bps, limit=int(limit), limit_unit=unit)
    return tc.link_cmds(dev, applied, serialise=serialise)
