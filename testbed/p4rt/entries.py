"""Pure builders of fabric.p4 table entries (no switch, no root): routes -> entries, ECN/fast-CNP config, PFC.

    RoutingBrain Route(prefix, group, ports, dest) --route_entries--> ipv4_lpm   prefix -> set_ecmp_group(g, n)
                                                                      ecmp_nhop  (g, i)  -> set_nhop(port_i, smac, dmac)
    EcnConfig(kmin, kmax, pmax, mode, cnp_interval) --ecn_entries--> ecn_config (default or per port)
    PfcPortConfig(xoff, xon, limit, quanta, refresh) --pfc_entries--> pfc_config (per ingress port)
    {DSCP: priority}, lossless priorities --pfc_priority_entries--> pfc_priority (DSCP -> lossless priority)
    ports --mirror_sessions--> clone session p sends out of port p (fast CNPs, PFC PAUSE/XON leave by the
                               ingress port)

Every entry is a :class:`TableEntry` whose :meth:`TableEntry.render` is the ``simple_switch_CLI`` line,
so a program can be dumped, diffed and replayed by hand; :meth:`testbed.p4rt.client.SwitchClient.apply`
programs a list of them over Thrift.

The destination MAC written on every hop is the destination host's own MAC: hosts use static ARP (or
fabric.p4's proxy ARP), switches never check MACs, so one rewrite serves every hop including the last.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Iterable, Mapping

from testbed.errors import SpecError

#: fabric.p4 egress modes (bit 0 = ECN marking, bit 1 = fast CNP).
MODES = {"off": 0, "ecn": 1, "fast-cnp": 2, "both": 3}
#: pmax is carried as a Q16 fraction (65536 = probability 1).
PMAX_ONE = 1 << 16
#: BMv2 enq_qdepth is 19 bits.
MAX_QDEPTH = (1 << 19) - 1
#: Counter indexes of fabric.p4 (``drops`` and ``cnp_skipped``).
DROP_REASONS = {"malformed": 0, "no_route": 1, "ttl": 2, "queue": 3, "not_ip": 4, "pfc_headroom": 5}
#: ``pfc_xon``: the congested packet's egress pass sent an XON, and BMv2 keeps one clone per pass.
CNP_SKIP_REASONS = {"rate_limited": 0, "qp_unknown": 1, "pfc_xon": 2}
#: fabric.p4's PFC counters, per port (``testbed.p4rt.fabric_stats`` reads them).
PFC_COUNTERS = ("pfc_rx", "pfc_pause_sent", "pfc_xon_sent")
#: IEEE 802.1Q priorities, DSCP values, largest pause time (16 bits), 32-bit action parameters.
PRIORITIES = 8
DSCPS = 64
MAX_QUANTA = 0xFFFF
MAX_U32 = (1 << 32) - 1

_MAC = re.compile(r"^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$")


@dataclass(frozen=True)
class TableEntry:
    """One table entry (or, with ``default``, a table's default action) in CLI syntax."""

    table: str
    action: str
    match: tuple[str, ...] = ()
    params: tuple[str, ...] = ()
    priority: int = 0
    default: bool = False

    def render(self) -> str:
        """The ``simple_switch_CLI`` command for this entry."""
        if self.default:
            return " ".join(["table_set_default", self.table, self.action, *self.params])
        line = ["table_add", self.table, self.action, *self.match, "=>", *self.params]
        if self.priority:
            line.append(str(self.priority))
        return " ".join(line)


@dataclass(frozen=True)
class EcnConfig:
    """RED marking and fast-CNP settings of one egress port (or, as default, of all ports).

    Args:
        kmin_pkts, kmax_pkts: RED thresholds on the egress queue, in packets (BMv2 counts packets).
        pmax: marking probability reached at kmax (0..1); at and above kmax every ECT packet is marked.
        mode: off | ecn | fast-cnp | both.
        cnp_interval_s: at most one switch CNP per flow per interval, in *emulated* seconds (the plan's
            ``EcnEntry.emulated_cnp_interval_s``; the real interval is DcqcnParams.cnp_interval).
    """

    kmin_pkts: int
    kmax_pkts: int
    pmax: float = 1.0
    mode: str = "ecn"
    cnp_interval_s: float = 50e-6

    def __post_init__(self):
        if self.mode not in MODES:
            raise SpecError("ecn.mode", f"{self.mode!r} is not one of: {', '.join(MODES)}")
        for name in ("kmin_pkts", "kmax_pkts"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_QDEPTH:
                raise SpecError(f"ecn.{name}", f"must be an integer number of packets in 0..{MAX_QDEPTH}, "
                                               f"got {v!r}")
        if self.kmax_pkts <= self.kmin_pkts:
            raise SpecError("ecn.kmax_pkts", f"must be greater than kmin_pkts ({self.kmin_pkts}), "
                                             f"got {self.kmax_pkts}")
        if not 0.0 <= self.pmax <= 1.0:
            raise SpecError("ecn.pmax", f"must be a probability in 0..1, got {self.pmax!r}")
        if not 0.0 <= self.cnp_interval_s < 3600:
            raise SpecError("ecn.cnp_interval_s", f"must be in 0..3600 s, got {self.cnp_interval_s!r}")

    @classmethod
    def from_bytes(cls, kmin_bytes: float, kmax_bytes: float, mtu: int = 1500, **kw) -> "EcnConfig":
        """Thresholds given in bytes (as DCQCN papers give them) rounded to packets of ``mtu`` bytes."""
        kmin = max(0, round(kmin_bytes / mtu))
        kmax = max(kmin + 1, round(kmax_bytes / mtu))
        return cls(kmin_pkts=kmin, kmax_pkts=kmax, **kw)

    def params(self) -> tuple[str, ...]:
        return (str(self.kmin_pkts), str(self.kmax_pkts), str(round(self.pmax * PMAX_ONE)),
                str(MODES[self.mode]), str(round(self.cnp_interval_s * 1e6)))


@dataclass(frozen=True)
class PfcPortConfig:
    """PFC thresholds of one ingress port of fabric.p4 (table ``pfc_config``), in bytes of lossless traffic
    that came in by the port and has not left the switch's queue, per priority.

    Args:
        xoff_bytes: at or above, a PAUSE goes out of the port (upstream).
        xon_bytes: at or below, after a PAUSE, an XON (pause time 0) follows.
        limit_bytes: xoff + headroom; a packet that would take the priority above it is dropped
            (``drops[pfc_headroom]``): headroom is what the upstream still sends after the PAUSE.
        quanta: the pause time a PAUSE carries (512-bit times of the real line rate), 1..65535.
        refresh_us: another PAUSE goes when the port is still at or above xoff and its last PAUSE is at
            least this old, in the switch's (emulated) microseconds; choose it below the pause time so the
            upstream never resumes while the queue is full.
    """

    xoff_bytes: int
    xon_bytes: int
    limit_bytes: int
    quanta: int
    refresh_us: int

    def __post_init__(self):
        for name, low in (("xoff_bytes", 1), ("xon_bytes", 0), ("limit_bytes", 1), ("refresh_us", 1)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= MAX_U32:
                raise SpecError(f"pfc.{name}", f"must be an integer in {low}..{MAX_U32}, got {v!r}")
        q = self.quanta
        if isinstance(q, bool) or not isinstance(q, int) or not 1 <= q <= MAX_QUANTA:
            raise SpecError("pfc.quanta", f"must be an integer pause time in 1..{MAX_QUANTA}, got {q!r}")
        if self.xon_bytes > self.xoff_bytes:
            raise SpecError("pfc.xon_bytes", f"must not exceed xoff_bytes ({self.xoff_bytes}), got {self.xon_bytes}")
        if self.limit_bytes <= self.xoff_bytes:
            raise SpecError("pfc.limit_bytes", f"must exceed xoff_bytes ({self.xoff_bytes}): xoff + headroom, "
                                               f"got {self.limit_bytes}")

    def params(self) -> tuple[str, ...]:
        """``set_pfc(xoff, xon, limit, quanta, refresh_us)``."""
        return (str(self.xoff_bytes), str(self.xon_bytes), str(self.limit_bytes), str(self.quanta),
                str(self.refresh_us))


def _check_port(port, field: str) -> int:
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port < 512:
        raise SpecError(field, f"port {port!r} is not in 0..511")
    return port


def pfc_entries(port: int, cfg: PfcPortConfig) -> list[TableEntry]:
    """The ``pfc_config`` entry of ingress ``port``; a port without one does no PFC accounting."""
    _check_port(port, "pfc.port")
    return [TableEntry("pfc_config", "set_pfc", match=(str(port),), params=cfg.params())]


def pfc_priority_entries(dscp_priority: Mapping[int, int], lossless: Iterable[int]) -> list[TableEntry]:
    """``pfc_priority`` entries: one per DSCP whose priority is lossless, sorted by DSCP.

    Args:
        dscp_priority: {DSCP: priority} (e.g. ``dict(enumerate(PfcConfig.dscp_map))``).
        lossless: the lossless priorities (``PfcConfig.priorities``).

    Raises:
        SpecError: a DSCP outside 0..63 or a priority outside 0..7.
    """
    lossless = set(lossless)
    for p in lossless:
        if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p < PRIORITIES:
            raise SpecError("pfc.priorities", f"expected priorities 0..{PRIORITIES - 1}, got {p!r}")
    out = []
    for dscp, prio in sorted(dscp_priority.items()):
        if isinstance(dscp, bool) or not isinstance(dscp, int) or not 0 <= dscp < DSCPS:
            raise SpecError(f"pfc.dscp.{dscp}", f"DSCP must be an integer 0..{DSCPS - 1}")
        if isinstance(prio, bool) or not isinstance(prio, int) or not 0 <= prio < PRIORITIES:
            raise SpecError(f"pfc.dscp.{dscp}", f"expected a priority 0..{PRIORITIES - 1}, got {prio!r}")
        if prio in lossless:
            out.append(TableEntry("pfc_priority", "set_lossless", match=(str(dscp),), params=(str(prio),)))
    return out


def ecn_config(entry) -> EcnConfig:
    """The :class:`EcnConfig` of a plan's :class:`testbed.plan.EcnEntry` (None: marking off)."""
    if entry is None:
        return EcnConfig(0, 1, pmax=0.0, mode="off", cnp_interval_s=0.0)
    return EcnConfig(entry.kmin_pkts, entry.kmax_pkts, pmax=entry.pmax, mode=entry.mode,
                     cnp_interval_s=entry.emulated_cnp_interval_s)


def check_mac(mac: str, field: str) -> str:
    if not isinstance(mac, str) or not _MAC.match(mac):
        raise SpecError(field, f"expected a MAC address like 02:00:00:00:00:01, got {mac!r}")
    return mac.lower()


def router_mac(dpid: int) -> str:
    """The switch's own MAC (source of rewritten frames, proxy-ARP answers): ``02:fe:`` + 32-bit dpid."""
    if not isinstance(dpid, int) or not 0 < dpid < 1 << 32:
        raise SpecError("dpid", f"must be an integer in 1..2^32-1, got {dpid!r}")
    return "02:fe:" + ":".join(f"{(dpid >> s) & 0xFF:02x}" for s in (24, 16, 8, 0))


def switch_config_entries(mac: str) -> list[TableEntry]:
    return [TableEntry("switch_config", "set_router_mac", params=(check_mac(mac, "router_mac"),), default=True)]


def route_entries(prefix: str, group: int, ports: Iterable[int], smac: str, dmac: str) -> list[TableEntry]:
    """Entries forwarding ``prefix`` over the ECMP group ``group`` whose members are ``ports``.

    Members are indexed in sorted port order, so the same routes always give the same entries.

    Raises:
        SpecError: bad prefix, empty or out-of-range ports, bad group id or MAC.
    """
    try:
        net = ipaddress.IPv4Network(prefix, strict=True)
    except ValueError as exc:
        raise SpecError("route.prefix", f"{prefix!r} is not an IPv4 prefix: {exc}") from None
    members = sorted(set(ports))
    if not members:
        raise SpecError(f"route.{prefix}.ports", "an ECMP group needs at least one port")
    for p in members:
        if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p < 512:
            raise SpecError(f"route.{prefix}.ports", f"port {p!r} is not in 0..511")
    if isinstance(group, bool) or not isinstance(group, int) or not 0 <= group < 1 << 16:
        raise SpecError(f"route.{prefix}.group", f"must be an integer in 0..65535, got {group!r}")
    smac, dmac = check_mac(smac, "route.smac"), check_mac(dmac, "route.dmac")
    out = [TableEntry("ipv4_lpm", "set_ecmp_group", match=(f"{net.network_address}/{net.prefixlen}",),
                      params=(str(group), str(len(members))))]
    out += [TableEntry("ecmp_nhop", "set_nhop", match=(str(group), str(i)), params=(str(p), smac, dmac))
            for i, p in enumerate(members)]
    return out


def routes_to_entries(routes: Iterable, dest_macs: Mapping[str, str], smac: str) -> list[TableEntry]:
    """Entries for routing-brain routes of one switch (objects with ``prefix``, ``group``, ``ports``,
    ``dest``; see :class:`testbed.routing.brain.Route`).

    Args:
        routes: the switch's routes.
        dest_macs: {destination host: its MAC}.
        smac: the switch's router MAC.

    Raises:
        SpecError: a route's destination has no MAC.
    """
    out: list[TableEntry] = []
    for r in sorted(routes, key=lambda r: (r.group, r.prefix)):
        if r.dest not in dest_macs:
            raise SpecError(f"route.{r.prefix}.dest", f"no MAC known for destination host {r.dest!r}")
        out += route_entries(r.prefix, r.group, r.ports, smac, dest_macs[r.dest])
    return out


def ecn_entries(cfg: EcnConfig, port: int | None = None) -> list[TableEntry]:
    """The ``ecn_config`` entry of one egress ``port``, or (port None) the default for all ports."""
    if port is None:
        return [TableEntry("ecn_config", "set_ecn", params=cfg.params(), default=True)]
    return [TableEntry("ecn_config", "set_ecn", match=(str(port),), params=cfg.params())]


def qp_map_entry(sender_ip: str, receiver_ip: str, receiver_qp: int, sender_qp: int) -> TableEntry:
    """Control-plane mapping used by fast CNP when the switch never sees the flow's ACKs."""
    for name, qp in (("receiver_qp", receiver_qp), ("sender_qp", sender_qp)):
        if isinstance(qp, bool) or not isinstance(qp, int) or not 0 <= qp < 1 << 24:
            raise SpecError(f"qp_map.{name}", f"a QP number is 24 bits, got {qp!r}")
    for name, ip in (("sender_ip", sender_ip), ("receiver_ip", receiver_ip)):
        try:
            ipaddress.IPv4Address(ip)
        except ValueError:
            raise SpecError(f"qp_map.{name}", f"{ip!r} is not an IPv4 address") from None
    return TableEntry("qp_map", "set_sender_qp", match=(sender_ip, receiver_ip, str(receiver_qp)),
                      params=(str(sender_qp),))


def mirror_sessions(ports: Iterable[int]) -> list[tuple[int, int]]:
    """(session, port) pairs: fabric.p4 clones a CNP with session id == the data packet's ingress port."""
    return [(p, p) for p in sorted(set(ports))]


@dataclass(frozen=True)
class FabricProgram:
    """Everything one fabric.p4 switch is programmed with."""

    entries: tuple[TableEntry, ...]
    mirrors: tuple[tuple[int, int], ...]
    mc_groups: tuple[tuple[int, tuple[int, ...]], ...] = ()    # (group, ports): PFC relays

    def render(self) -> str:
        """The whole program as ``simple_switch_CLI`` input."""
        lines = [e.render() for e in self.entries]
        lines += [f"mirroring_add {s} {p}" for s, p in self.mirrors]
        for i, (group, ports) in enumerate(self.mc_groups):
            lines += [f"mc_mgrp_create {group}", f"mc_node_create 0 {' '.join(map(str, ports))}",
                      f"mc_node_associate {group} {i}"]
        return "\n".join(lines) + "\n"


def pfc_relay_group(port: int) -> int:
    """The multicast group that relays PFC frames arriving by ``port`` (group 0 is none)."""
    return _check_port(port, "pfc.relay.port") + 1


def pfc_relay_entries(relays: Mapping[int, Iterable[int]]) -> tuple[list[TableEntry], list[tuple[int, tuple[int, ...]]]]:
    """``pfc_relay`` entries and their multicast groups: a PFC frame arriving by port p (from the link node
    behind p, at its xoff or xon) is relayed to ``relays[p]``, the ports whose traffic leaves by p."""
    entries, groups = [], []
    for port, targets in sorted(relays.items()):
        targets = tuple(sorted({_check_port(t, "pfc.relay.target") for t in targets} - {port}))
        if not targets:
            continue
        group = pfc_relay_group(port)
        entries.append(TableEntry("pfc_relay", "relay_pfc", match=(str(port),), params=(str(group),)))
        groups.append((group, targets))
    return entries, groups


def fabric_program(G, switch, routes: Iterable, ecn: EcnConfig | None = None,
                   port_ecn: Mapping[int, EcnConfig] | None = None,
                   pfc_ports: Mapping[int, PfcPortConfig] | None = None,
                   pfc_dscp: Mapping[int, int] | None = None,
                   pfc_lossless: Iterable[int] = (),
                   pfc_relays: Mapping[int, Iterable[int]] | None = None) -> FabricProgram:
    """Program of ``switch`` in fabric graph ``G`` from its routing-brain routes.

    Args:
        G: fabric graph (hosts carry ``mac``; switches ``dpid``).
        switch: the switch node.
        routes: its routes (``RoutingBrain.tables()[switch].values()``).
        ecn: default ECN/fast-CNP config for every port (None: mode off).
        port_ecn: per-port overrides.
        pfc_ports: {ingress port: its PFC thresholds}; ports left out do no PFC accounting.
        pfc_dscp: {DSCP: priority}; None: the "trust dscp" default, priority = DSCP >> 3.
        pfc_lossless: lossless priorities; none (the default): no packet is lossless, no pfc_priority entry.
        pfc_relays: {port: ports fed out of it}: PFC frames from the link node behind the port go to those.
    """
    attrs = G.nodes[switch]
    if "dpid" not in attrs:
        raise SpecError(f"switches.{switch}.dpid", "switch has no dpid (run topo addressing first)")
    smac = router_mac(attrs["dpid"])
    dest_macs = {n: d["mac"] for n, d in G.nodes(data=True) if d.get("role") == "host" and "mac" in d}
    entries = switch_config_entries(smac)
    entries += routes_to_entries(routes, dest_macs, smac)
    if ecn is not None:
        entries += ecn_entries(ecn)
    for port, cfg in sorted((port_ecn or {}).items()):
        entries += ecn_entries(cfg, port)
    dscp = pfc_dscp if pfc_dscp is not None else {d: d >> 3 for d in range(DSCPS)}
    entries += pfc_priority_entries(dscp, pfc_lossless)
    for port, cfg in sorted((pfc_ports or {}).items()):
        entries += pfc_entries(port, cfg)
    relay_entries, groups = pfc_relay_entries(pfc_relays or {})
    entries += relay_entries
    ports = [G.edges[switch, nbr]["ports"][switch] for nbr in G.neighbors(switch)]
    return FabricProgram(entries=tuple(entries), mirrors=tuple(mirror_sessions(ports)), mc_groups=tuple(groups))
