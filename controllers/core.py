"""The controller's core: fabric state in, OpenFlow messages out (no sockets, no threads, no os-ken app).

The os-ken app (:mod:`controllers.fabric`) translates each OpenFlow event into one call here and sends
what comes back; the status API reads the ``*_doc`` methods. Time is an argument (``now``), so unit tests
drive the whole controller with a fake clock and :func:`controllers.ofrules.proto` as the datapath::

    switch connects      --join()-->         base flows + every route of that switch + port-desc request;
                                             a switch that was down rejoins: RoutingBrain.switch_up
    switch disconnects   --disconnect()-->   RoutingBrain.switch_down --> the others route around it
    port-desc reply      --port_desc()-->    liveness, LLDP probes, routes of links found down
    port-status          --port_status()-->  RoutingBrain.link_down/up --> group mods (failover event);
                                             carrier lost, or OFPPS_LIVE lost (BFD down, carrier up)
    packet-in ARP        --packet_in()-->    ARP reply from the address plan (never flooded)
    packet-in LLDP       --packet_in()-->    link seen; mismatch with the graph reported
    testbed fail link    --admin_link()-->   port mods (ports administratively down/up)

Anything unexpected (unknown datapath, garbage packet-in, port not in the graph) is counted and logged
by the caller, never raised: one bad message must not take the fabric's brain down.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import networkx as nx

from controllers import ofrules
from controllers.compat import ofproto_v1_3 as ofp
from controllers.compat import ofproto_v1_3_parser as parser
from testbed.routing.brain import RouteDiff, RoutingBrain, route_dict
from testbed.routing.gray import GrayPolicy, GrayWatch
from testbed.routing.verify import walk
from testbed.topo.graph import HOST, hosts, neighbour_on_port, switches


@dataclass
class PortInfo:
    name: str = ""
    hw_addr: str = "00:00:00:00:00:00"
    down: bool = False


@dataclass
class Failover:
    """One port event that changed routes; times are the caller's clock (wall seconds)."""

    time: float
    kind: str   # link_down | link_up | switch_down | switch_up
    link: tuple  # (a, b) of a link; (switch,) of a switch event
    cause: str  # port-status | port-desc | datapath-disconnect | datapath-connect | gray-loss | gray-release
    switch: str
    port: int
    compute_ms: float = 0.0
    pushed: float = 0.0
    messages: int = 0
    destinations: int = 0
    detail: dict = field(default_factory=dict)  # e.g. the loss a gray-failure decision saw

    def as_dict(self) -> dict:
        return {"time": self.time, "kind": self.kind, "link": list(self.link), "cause": self.cause,
                "switch": self.switch, "port": self.port, "compute_ms": round(self.compute_ms, 3),
                "pushed": self.pushed, "messages": self.messages,
                "destinations_recomputed": self.destinations, **({"detail": self.detail} if self.detail else {})}


@dataclass
class ControllerCore:
    """State of one fabric controller.

    Args:
        G: the fabric graph (hosts with ip/mac, switches with dpid, edges with ports).
        mode: ``controller`` (recompute on port events) or ``fast-failover`` (groups repair locally too).
        aggregate: one route per first-tier switch's block of hosts where the address plan allows.
        ecmp: ``multipath`` (NX multipath, OVS) or ``select`` (OpenFlow 1.3 SELECT groups); see ofrules.
        gray: gray-failure detection from port counters (:mod:`testbed.routing.gray`); None: off. The
            shim polls the counters; :meth:`gray_check` judges them.
    """

    G: nx.Graph
    mode: str = "controller"
    started: float = 0.0
    aggregate: bool = False
    ecmp: str = "multipath"
    gray: GrayPolicy | None = None
    brain: RoutingBrain = field(init=False)
    dps: dict = field(default_factory=dict)          # switch -> datapath
    ports: dict = field(default_factory=dict)        # (switch, port_no) -> PortInfo
    lldp_seen: dict = field(default_factory=dict)    # (switch, port) -> (switch, port) seen
    live_seen: set = field(default_factory=set)      # (switch, port) once reported OFPPS_LIVE
    pending_join: dict = field(default_factory=dict)  # switch -> the others' messages held until it is ready
    mismatches: list = field(default_factory=list)
    failovers: list = field(default_factory=list)
    unknown_datapaths: set = field(default_factory=set)
    counters: dict = field(default_factory=dict)     # (switch, port) -> dict
    stats: dict = field(default_factory=lambda: {"packet_ins": 0, "arp_replies": 0, "lldp_in": 0,
                                                 "malformed": 0, "ignored": 0, "errors": 0,
                                                 "handler_errors": 0, "messages_sent": 0})

    def __post_init__(self):
        if self.mode not in ofrules.MODES:
            raise ValueError(f"mode must be one of {ofrules.MODES}, got {self.mode!r}")
        ofrules.check_ecmp(self.ecmp)
        self.brain = RoutingBrain(self.G, aggregate=self.aggregate)
        self.gray_watch = GrayWatch(self.gray) if self.gray is not None else None
        self.brain.compute_all(self.started)
        self.by_dpid = {int(self.G.nodes[s]["dpid"]): s for s in switches(self.G)}
        self.macs = {h: self.G.nodes[h].get("mac") for h in hosts(self.G)}
        self.basis = {s: ofrules.hash_basis(int(self.G.nodes[s]["dpid"])) for s in switches(self.G)}
        self.ip_to_mac = {self.G.nodes[h]["ip"]: self.G.nodes[h].get("mac") for h in hosts(self.G)
                          if self.G.nodes[h].get("mac")}
        for h in hosts(self.G):  # gateways in the address plan are answered with the router MAC
            gw = self.G.nodes[h].get("gateway")
            if gw and gw not in self.ip_to_mac:
                self.ip_to_mac[gw] = ofrules.ROUTER_MAC

    # ------------------------------------------------------------------ switch lifecycle
    def switch_of(self, dpid: int) -> str | None:
        return self.by_dpid.get(dpid)

    def connect(self, dpid: int, dp) -> list:
        """A switch connected: clean slate, then every current route of that switch (messages for ``dp``).

        The shim calls :meth:`join`, which also brings a switch that was down back into the brain.
        """
        sw = self.switch_of(dpid)
        if sw is None:
            self.unknown_datapaths.add(dpid)
            return []
        self.dps[sw] = dp
        msgs = ofrules.base_msgs(dp)
        for r in sorted(self.brain.routes.values(), key=lambda r: r.prefix):
            if r.switch == sw:
                msgs += ofrules.route_msgs(dp, r, self.mode, self.macs.get(r.dest), "add",
                                           basis=self.basis[sw], ecmp=self.ecmp)[0]
        msgs.append(parser.OFPPortDescStatsRequest(dp, 0))
        return msgs

    def join(self, dpid: int, dp, now: float) -> list:
        """A switch connected; returns ``(switch, message)`` pairs: its own tables first, then the others'.

        A switch the brain holds as down (it disconnected earlier) rejoins: ``switch_up`` recomputes, the
        joining switch gets its full tables (after the clean-slate delete) and a port-description request.
        The difference that spreads the other switches' traffic over it again is held until that reply
        comes (:meth:`port_desc`): a switch answers in order, so the reply means its tables are in, and
        its ports exist -- no neighbour sends into a switch still being programmed. Any other event
        before then sends the held messages first (switches and brain never disagree).
        """
        sw = self.switch_of(dpid)
        if sw is None:
            self.unknown_datapaths.add(dpid)
            return []
        held = self._flush()
        diff, old, ev = RouteDiff(), {}, None
        if sw in self.brain.down_switches:
            old = dict(self.brain.routes)
            t0 = time.perf_counter()
            diff = self.brain.switch_up(sw, now)
            ev = Failover(time=now, kind="switch_up", link=(sw,), cause="datapath-connect", switch=sw, port=0,
                          compute_ms=(time.perf_counter() - t0) * 1e3,
                          destinations=self.brain.events[-1].destinations if diff else 0)
            self.failovers.append(ev)
        pairs = held + [(sw, m) for m in self.connect(dpid, dp)]
        if diff:
            others = RouteDiff(add=tuple(r for r in diff.add if r.switch != sw),
                               modify=tuple(r for r in diff.modify if r.switch != sw),
                               delete=tuple(r for r in diff.delete if r.switch != sw))
            self.pending_join[sw] = list(ofrules.diff_msgs(self._dp, others, self.mode, self.macs, old,
                                                           self.basis, first=set(self.G.neighbors(sw)),
                                                           ecmp=self.ecmp))
        return pairs

    def _flush(self) -> list:
        """Every held rejoin message (see :meth:`join`), to send before anything else."""
        out = [pair for pairs in self.pending_join.values() for pair in pairs]
        self.pending_join.clear()
        return out

    def disconnect(self, dpid: int, now: float = 0.0, dp=None) -> list:
        """A switch's OpenFlow connection ended: it is down (crashed, or cut off from its controller).

        The brain's ``switch_down`` recomputes every destination the switch could carry and the other
        switches get the difference (``(switch, message)`` pairs, the switch's neighbours first). A
        stale connection ending after the switch reconnected (``dp`` is not the current one) changes
        nothing.
        """
        sw = self.switch_of(dpid)
        if sw is None or sw not in self.dps or (dp is not None and self.dps[sw] is not dp):
            return []
        held = self._flush()
        self.dps.pop(sw)
        old = dict(self.brain.routes)
        t0 = time.perf_counter()
        diff = self.brain.switch_down(sw, now)
        self.failovers.append(Failover(time=now, kind="switch_down", link=(sw,), cause="datapath-disconnect",
                                       switch=sw, port=0, compute_ms=(time.perf_counter() - t0) * 1e3,
                                       destinations=self.brain.events[-1].destinations if diff else 0))
        return held + list(ofrules.diff_msgs(self._dp, diff, self.mode, self.macs, old, self.basis,
                                             first=set(self.G.neighbors(sw)), ecmp=self.ecmp))

    def _dp(self, sw):
        return self.dps.get(sw)

    # ------------------------------------------------------------------ ports and failover
    def _link_of(self, sw, port_no):
        try:
            return neighbour_on_port(self.G, sw, port_no)
        except KeyError:
            return None

    def _port_down(self, sw, port_no) -> bool:
        info = self.ports.get((sw, port_no))
        return bool(info and info.down)

    def _link_should_be_down(self, sw, nbr) -> bool:
        if self.gray_watch is not None and self.gray_watch.is_held(frozenset((sw, nbr))):
            return True
        if self._port_down(sw, self.G.edges[sw, nbr]["ports"][sw]):
            return True
        return nbr in self.by_dpid.values() and self._port_down(nbr, self.G.edges[sw, nbr]["ports"][nbr])

    def _update_port(self, sw, port_no, name, hw_addr, down, now, cause):
        """Record a port's state; if its link's liveness changes, recompute and return the messages.

        Returns:
            ``(switch, message)`` pairs, rendered lazily in sending order (:func:`ofrules.diff_msgs`); the
            caller counts them into the last :class:`Failover`.
        """
        self.ports[(sw, port_no)] = PortInfo(name=name, hw_addr=hw_addr, down=down)
        nbr = self._link_of(sw, port_no)
        if nbr is None:
            return []
        should_down = self._link_should_be_down(sw, nbr)
        if should_down == (not self.brain.is_link_up(sw, nbr)):
            return []
        return self._link_change(sw, nbr, now, should_down, cause, port_no)

    def _link_change(self, sw, nbr, now, down: bool, cause: str, port_no: int, detail: dict | None = None):
        """Take link ``sw``-``nbr`` down (or up) in the brain, log the :class:`Failover`, and return the
        ``(switch, message)`` pairs of the route difference (rendered lazily, neighbours first)."""
        old = dict(self.brain.routes)
        t0 = time.perf_counter()  # measured for the event log only; the logic takes ``now``
        diff = self.brain.link_down(sw, nbr, now) if down else self.brain.link_up(sw, nbr, now)
        self.failovers.append(Failover(time=now, kind="link_down" if down else "link_up", link=(sw, nbr),
                                       cause=cause, switch=sw, port=port_no,
                                       compute_ms=(time.perf_counter() - t0) * 1e3,
                                       destinations=self.brain.events[-1].destinations if diff else 0,
                                       detail=detail or {}))
        return ofrules.diff_msgs(self._dp, diff, self.mode, self.macs, old, self.basis, first=(sw, nbr),
                                 ecmp=self.ecmp)

    def port_status(self, dpid: int, port_no: int, name: str, hw_addr: str, config: int, state: int,
                    now: float, reason: int | None = None):
        """A port changed; returns ``(switch, message)`` pairs to send (none when routes stay)."""
        sw = self.switch_of(dpid)
        if sw is None:
            self.unknown_datapaths.add(dpid)
            return []
        held = self._flush()
        if reason == ofp.OFPPR_DELETE:
            down = True
        else:
            down = self._port_state_down(sw, port_no, config, state)
        if held:
            return held + list(self._update_port(sw, port_no, name, hw_addr, down, now, "port-status"))
        return self._update_port(sw, port_no, name, hw_addr, down, now, "port-status")

    def _port_state_down(self, sw, port_no, config: int, state: int) -> bool:
        """Admin down or no carrier; or no longer ``OFPPS_LIVE`` after having been (OVS clears it when the
        port's BFD session goes down with carrier still up). A switch that never sets LIVE is judged by
        carrier alone."""
        if state & ofp.OFPPS_LIVE:
            self.live_seen.add((sw, port_no))
        elif (sw, port_no) in self.live_seen:
            return True
        return ofrules.port_is_down(config, state)

    def port_desc(self, dpid: int, descs, now: float) -> list:
        """Port description reply: record names/liveness, LLDP probes; returns ``(switch, message)`` pairs."""
        sw = self.switch_of(dpid)
        if sw is None:
            return []
        out: list = self._flush()  # this switch's rejoin (it is ready now), and any other held
        for d in descs:
            if d.port_no > ofp.OFPP_MAX:
                continue
            name = d.name.decode(errors="replace") if isinstance(d.name, bytes) else str(d.name)
            down = self._port_state_down(sw, d.port_no, d.config, d.state)
            out += list(self._update_port(sw, d.port_no, name, d.hw_addr, down, now, "port-desc"))
            if not down and sw in self.dps:
                out.append((sw, self.lldp_probe(sw, d.port_no)))
        return out

    def lldp_probe(self, sw, port_no):
        dp = self.dps[sw]
        return ofrules.packet_out(dp, port_no, ofrules.lldp_frame(int(self.G.nodes[sw]["dpid"]), port_no))

    def lldp_all(self) -> list:
        """LLDP probes on every live port of every connected switch (periodic re-discovery)."""
        return [(sw, self.lldp_probe(sw, port_no)) for (sw, port_no), info in sorted(self.ports.items())
                if not info.down and sw in self.dps]

    def admin_link(self, a, b, down: bool) -> list:
        """Port mods that set both ends of link a-b administratively down (or up again).

        Raises:
            KeyError: naming the link when the fabric has no such link.
        """
        if not self.G.has_edge(a, b):
            raise KeyError(f"no link {a} - {b} in the fabric")
        out = []
        for sw, other in ((a, b), (b, a)):
            if self.G.nodes[sw].get("role") == HOST or sw not in self.dps:
                continue
            port_no = self.G.edges[sw, other]["ports"][sw]
            info = self.ports.get((sw, port_no), PortInfo())
            out.append((sw, ofrules.port_mod(self.dps[sw], port_no, info.hw_addr, down)))
        return out

    def admin_switch(self, s, down: bool) -> list:
        """Port mods for every link of switch ``s`` (its neighbours see link down: a dead switch)."""
        if s not in self.by_dpid.values():
            raise KeyError(f"{s!r} is not a switch of the fabric")
        return [pair for nbr in self.G.neighbors(s) for pair in self.admin_link(s, nbr, down)]

    def set_mode(self, mode: str) -> list:
        """Switch between ``controller`` and ``fast-failover`` groups; returns the messages re-pushing them."""
        if mode not in ofrules.MODES:
            raise KeyError(f"mode must be one of {', '.join(ofrules.MODES)}, got {mode!r}")
        return self._repush(mode, self.ecmp)

    def set_ecmp(self, ecmp: str) -> list:
        """Switch the ECMP method (``multipath`` | ``select``); returns the messages re-pushing every route."""
        if ecmp not in ofrules.ECMP_METHODS:
            raise KeyError(f"ecmp must be one of {', '.join(ofrules.ECMP_METHODS)}, got {ecmp!r}")
        return self._repush(self.mode, ecmp)

    def _repush(self, mode: str, ecmp: str) -> list:
        (old_mode, old_ecmp), (self.mode, self.ecmp) = (self.mode, self.ecmp), (mode, ecmp)
        out = self._flush()
        if (old_mode, old_ecmp) == (mode, ecmp):
            return out
        for r in sorted(self.brain.routes.values(), key=lambda r: r.key):
            dp = self.dps.get(r.switch)
            if dp is None:
                continue
            mac, basis = self.macs.get(r.dest), self.basis[r.switch]
            # group types differ between modes (INDIRECT vs FAST_FAILOVER): replace, do not modify
            delete = ofrules.route_msgs(dp, r, old_mode, mac, "delete", ecmp=old_ecmp)
            add = ofrules.route_msgs(dp, r, mode, mac, "add", basis=basis, ecmp=ecmp)[0]
            out += [(r.switch, m) for m in (*delete[0], *delete[1], *add)]
        return out

    # ------------------------------------------------------------------ packet-in
    def packet_in(self, dpid: int, in_port: int, data: bytes) -> list:
        """Handle a packet-in; returns ``[(switch, message)]``. Never raises on bad input."""
        self.stats["packet_ins"] += 1
        sw = self.switch_of(dpid)
        if sw is None:
            self.unknown_datapaths.add(dpid)
            self.stats["ignored"] += 1
            return []
        try:
            seen = ofrules.parse_lldp(data)
            if seen is not None:
                self.stats["lldp_in"] += 1
                self._lldp(sw, in_port, *seen)
                return []
            reply = ofrules.arp_reply(data, self.ip_to_mac)
        except Exception:  # noqa: BLE001 - garbage from the wire is counted, not fatal
            self.stats["malformed"] += 1
            return []
        if reply is None:
            self.stats["ignored"] += 1
            return []
        self.stats["arp_replies"] += 1
        dp = self.dps.get(sw)
        return [(sw, ofrules.packet_out(dp, in_port, reply))] if dp is not None else []

    def _lldp(self, sw, in_port, tx_dpid, tx_port) -> None:
        tx = self.switch_of(tx_dpid)
        self.lldp_seen[(sw, in_port)] = (tx, tx_port)
        expected = self._link_of(sw, in_port)
        exp_port = self.G.edges[sw, expected]["ports"].get(expected) if expected is not None else None
        if expected != tx or exp_port != tx_port:
            entry = {"switch": sw, "port": in_port,
                     "expected": None if expected is None else f"{expected}:{exp_port}",
                     "seen": f"{tx if tx is not None else hex(tx_dpid)}:{tx_port}"}
            if entry not in self.mismatches:
                self.mismatches.append(entry)

    # ------------------------------------------------------------------ port counters
    def port_stats(self, dpid: int, body, now: float) -> None:
        sw = self.switch_of(dpid)
        if sw is None:
            return
        for st in body:
            if st.port_no > ofp.OFPP_MAX:
                continue
            self.counters[(sw, st.port_no)] = {
                "time": now, "rx_packets": st.rx_packets, "tx_packets": st.tx_packets,
                "rx_bytes": st.rx_bytes, "tx_bytes": st.tx_bytes, "rx_dropped": st.rx_dropped,
                "tx_dropped": st.tx_dropped}

    def gray_check(self, now: float) -> list:
        """Judge the latest counters of every switch-to-switch link (:class:`GrayWatch`); a link that
        turns gray goes down in the brain (cause ``gray-loss``), one whose hold-down ended comes back
        (``gray-release``) unless its ports say otherwise. Returns ``(switch, message)`` pairs."""
        if self.gray_watch is None:
            return []
        for a, b, d in self.G.edges(data=True):
            if a not in self.dps or b not in self.dps:
                continue
            for x, y in ((a, b), (b, a)):
                tx, rx = self.counters.get((x, d["ports"][x])), self.counters.get((y, d["ports"][y]))
                if tx and rx:
                    self.gray_watch.observe(frozenset((a, b)), (x, y), tx["tx_packets"], rx["rx_packets"],
                                            max(tx["time"], rx["time"]))
        out: list = []
        for kind, link, detail in self.gray_watch.decide(now):
            a, b = sorted(link)
            if kind == "down" and self.brain.is_link_up(a, b):
                x, y = detail["direction"]
                out += self._link_change(x, y, now, True, "gray-loss", self.G.edges[x, y]["ports"][x], detail)
            elif kind == "up" and not self.brain.is_link_up(a, b) and not self._link_should_be_down(a, b):
                out += self._link_change(a, b, now, False, "gray-release", self.G.edges[a, b]["ports"][a], detail)
        return out

    # ------------------------------------------------------------------ status documents
    def health_doc(self, now: float) -> dict:
        expected = len(self.by_dpid)
        return {"status": "ok", "mode": self.mode, "ecmp": self.ecmp, "uptime_s": round(now - self.started, 3),
                "switches_connected": len(self.dps), "switches_expected": expected,
                "ready": len(self.dps) == expected, "unknown_datapaths": sorted(self.unknown_datapaths),
                "routes": len(self.brain.routes), "down_links": len(self.brain.down_links),
                "down_switches": sorted(self.brain.down_switches),
                "lldp_mismatches": len(self.mismatches), **self.stats}

    def topology_doc(self) -> dict:
        links = []
        for a, b, d in self.G.edges(data=True):
            pa, pb = d["ports"][a], d["ports"][b]
            seen = [self.lldp_seen.get((a, pa)) == (b, pb), self.lldp_seen.get((b, pb)) == (a, pa)]
            links.append({"a": a, "b": b, "ports": {a: pa, b: pb}, "up": self.brain.is_link_up(a, b),
                          "lldp_seen": any(seen), "tier": d.get("tier")})
        sws = [{"name": s, "dpid": self.G.nodes[s]["dpid"], "role": self.G.nodes[s].get("role"),
                "connected": s in self.dps} for s in switches(self.G)]
        hs = [{"name": h, "ip": self.G.nodes[h].get("ip"), "mac": self.G.nodes[h].get("mac")}
              for h in hosts(self.G)]
        names = {f"{s}:{p}": info.name for (s, p), info in sorted(self.ports.items())}
        return {"switches": sws, "hosts": hs, "links": links, "lldp_mismatches": list(self.mismatches),
                "port_names": names}

    def paths_doc(self, src, dst) -> dict:
        for n in (src, dst):
            if n not in self.G or self.G.nodes[n].get("role") != HOST:
                raise KeyError(f"{n!r} is not a host of the fabric")
        w = walk(self.G, self.brain.tables(), src, dst, frozenset(self.brain.down_links),
                 frozenset(self.brain.down_switches))
        return {"src": src, "dst": dst, "paths": w.paths, "equal_cost": len(w.paths), "ok": w.ok,
                "loops": w.loops, "blackholes": w.blackholes}

    def ports_doc(self) -> dict:
        out: dict = {}
        for (sw, port_no), c in sorted(self.counters.items()):
            info = self.ports.get((sw, port_no), PortInfo())
            nbr = self._link_of(sw, port_no)
            out.setdefault(sw, {})[str(port_no)] = {**c, "name": info.name, "down": info.down,
                                                    "neighbour": nbr}
        return out

    def events_doc(self) -> dict:
        return {"failovers": [e.as_dict() for e in self.failovers],
                "brain": [e.as_dict() for e in self.brain.events]}

    def routes_doc(self, switch=None) -> list:
        return [route_dict(r) for r in sorted(self.brain.routes.values(), key=lambda r: r.key)
                if switch is None or r.switch == switch]


__all__ = ["ControllerCore", "Failover", "PortInfo", "RouteDiff"]
