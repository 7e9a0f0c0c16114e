"""Pure OpenFlow 1.3 rendering of the routing brain's output (no sockets, no os-ken app).

Every message the controller sends is built here from :class:`~testbed.routing.brain.Route` objects and
the address plan, so unit tests can serialise and inspect it without a switch::

    Route(switch, prefix, group, ports, backups) --render--> group mods + flow mods (see route_msgs)

    ECMP, one of two (``ecmp=``):
    "multipath" (default): NX ``multipath`` hashes IP addresses and L4 ports (UDP too, so RoCEv2 flows
                          spread by source port) with a per-switch basis into reg0; table 1 sends member
                          i to its own group. An Open vSwitch extension.
    "select":             a standard OpenFlow 1.3 SELECT group whose buckets chain to the member groups
                          (any OF1.3 switch). The switch picks the hash: OVS >= 2.10 uses dp_hash
                          (symmetric L3/L4; before, its default hashed L4 ports of TCP/SCTP only). Asking
                          OVS for ``selection_method=hash`` with chosen fields is a Netronome property of
                          the OpenFlow 1.5 group mod, which does not exist in 1.3 -- so not here.
    mode "controller":    member groups are INDIRECT: a dead port keeps its share of the hash until the
                          controller recomputes (the outage we measure).
    mode "fast-failover": member groups are FAST_FAILOVER: the member's port, then the other members (or
                          the brain's loop-free backup) -- OVS repairs locally before the controller acts.

Ethernet on the last hop is rewritten to the host's MAC (hosts with a gateway work too).
Also here: ARP replies from the address plan, LLDP probe frames and their parsing.
"""

from __future__ import annotations

import struct

from controllers.compat import ProtocolDesc, arp, ether_types, ethernet, lldp, nicira_ext, packet
from controllers.compat import ofproto_v1_3 as ofp
from controllers.compat import ofproto_v1_3_parser as parser
from testbed.routing.brain import Route, RouteDiff

MODES = ("controller", "fast-failover")
ECMP_METHODS = ("multipath", "select")

#: OVS ``nx_hash_fields``: IPs and L4 ports, UDP included (OVS's default select-group dp_hash leaves UDP
#: ports out, so RoCEv2 flows between two hosts would all take one path).
NX_HASH_FIELDS_SYMMETRIC_L3L4_UDP = 3
NXActionMultipath = parser.NXActionMultipath

#: Tables: 0 classifies (punts, routes), 1 maps the ECMP member index (reg0) to its group.
TABLE_ECMP = 1

#: Flow priorities (table 0).
PRIO_LLDP = 300
PRIO_ARP = 200
PRIO_ROUTE = 100
PRIO_MISS = 0

#: MAC the controller answers with for gateway addresses (locally administered).
ROUTER_MAC = "02:5e:00:00:00:01"
#: Cookie marking every flow we install (so a restart can find them).
COOKIE = 0x5CA1E

#: LLDP chassis id subtype "locally assigned" carries "dpid:<16 hex>".
_LLDP_PREFIX = b"dpid:"


def proto() -> ProtocolDesc:
    """A datapath stand-in with OF1.3 ``ofproto``/``ofproto_parser``, for building messages offline."""
    return ProtocolDesc(ofp.OFP_VERSION)


def _flow(dp, match, instructions, priority, command=ofp.OFPFC_ADD):
    return parser.OFPFlowMod(dp, cookie=COOKIE, command=command, priority=priority, match=match,
                             instructions=instructions, out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY,
                             flags=0)


def base_msgs(dp) -> list:
    """A clean slate for a switch that just connected: delete our old state, install punts and a drop.

    ARP and LLDP go to the controller (ARP is answered from the address plan, never flooded: the fabric
    has loops). Everything else that misses the route table is dropped.
    """
    to_ctrl = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS,
                                            [parser.OFPActionOutput(ofp.OFPP_CONTROLLER, ofp.OFPCML_NO_BUFFER)])]
    return [
        parser.OFPFlowMod(dp, command=ofp.OFPFC_DELETE, table_id=ofp.OFPTT_ALL, out_port=ofp.OFPP_ANY,
                          out_group=ofp.OFPG_ANY, match=parser.OFPMatch()),
        parser.OFPGroupMod(dp, command=ofp.OFPGC_DELETE, group_id=ofp.OFPG_ALL),
        _flow(dp, parser.OFPMatch(eth_type=ether_types.ETH_TYPE_LLDP), to_ctrl, PRIO_LLDP),
        _flow(dp, parser.OFPMatch(eth_type=ether_types.ETH_TYPE_ARP), to_ctrl, PRIO_ARP),
        _flow(dp, parser.OFPMatch(), [], PRIO_MISS),
    ]


def _bucket_actions(route: Route, port_no: int, dest_mac: str | None) -> list:
    actions = []
    if route.last_hop and dest_mac:
        actions.append(parser.OFPActionSetField(eth_dst=dest_mac))
    actions.append(parser.OFPActionOutput(port_no))
    return actions


def member_group(route: Route, port_no: int) -> int:
    """Group id of the ECMP member leaving by ``port_no`` (one allocator: destination group << 8 | port).

    Keyed by port, not by position, so a route that loses one member keeps the other members' groups
    untouched: repairing it is one flow mod.
    """
    if not 0 < port_no < 256:
        raise ValueError(f"port {port_no} out of range 1..255 for member groups")
    return (route.group << 8) | port_no


def select_group(route: Route) -> int:
    """Group id of a route's SELECT group (``ecmp="select"``): member-group numbering with port 0."""
    return route.group << 8


def select_group_mod(dp, route: Route, command: int):
    if command == ofp.OFPGC_DELETE:
        return parser.OFPGroupMod(dp, command=command, group_id=select_group(route))
    buckets = [parser.OFPBucket(weight=1, watch_port=ofp.OFPP_ANY, watch_group=ofp.OFPG_ANY,
                                actions=[parser.OFPActionGroup(member_group(route, p))]) for p in route.ports]
    return parser.OFPGroupMod(dp, command=command, type_=ofp.OFPGT_SELECT, group_id=select_group(route),
                              buckets=buckets)


def check_ecmp(ecmp: str) -> str:
    if ecmp not in ECMP_METHODS:
        raise ValueError(f"ecmp must be one of {ECMP_METHODS}, got {ecmp!r}")
    return ecmp


def member_ports(route: Route, port_no: int, mode: str) -> list[int]:
    """Ports of the member group of ``port_no``: that port, then (fast-failover) the fallbacks in order.

    Fallbacks are the other ECMP members rotated from this one (so a dead member's share spreads), or
    the brain's loop-free backup when there is a single next hop.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if mode == "controller":
        return [port_no]
    k = len(route.ports)
    if k > 1:
        i = route.ports.index(port_no)
        return [route.ports[(i + j) % k] for j in range(k)]
    backup = route.backup_for(port_no)
    return [port_no] + ([backup] if backup is not None else [])


def group_type(mode: str) -> int:
    """INDIRECT (one port, dead or alive) for ``controller``; FAST_FAILOVER (first live port) otherwise."""
    return ofp.OFPGT_FF if mode == "fast-failover" else ofp.OFPGT_INDIRECT


def member_group_mod(dp, route: Route, port_no: int, mode: str, dest_mac: str | None, command: int):
    if command == ofp.OFPGC_DELETE:
        return parser.OFPGroupMod(dp, command=command, group_id=member_group(route, port_no))
    ff = mode == "fast-failover"
    buckets = [parser.OFPBucket(weight=0, watch_port=p if ff else ofp.OFPP_ANY, watch_group=ofp.OFPG_ANY,
                                actions=_bucket_actions(route, p, dest_mac))
               for p in member_ports(route, port_no, mode)]
    return parser.OFPGroupMod(dp, command=command, type_=group_type(mode), group_id=member_group(route, port_no),
                              buckets=buckets)


def multipath(route: Route, basis: int):
    """NX multipath: hash IPs and L4 ports (UDP included) into reg0 = member index (HRW)."""
    return NXActionMultipath(fields=NX_HASH_FIELDS_SYMMETRIC_L3L4_UDP, basis=basis & 0xFFFF,
                             algorithm=nicira_ext.NX_MP_ALG_HRW, max_link=len(route.ports) - 1, arg=0,
                             ofs_nbits=nicira_ext.ofs_nbits(0, 15), dst="reg0")


def hash_basis(dpid: int) -> int:
    """A different hash basis per switch, so consecutive tiers do not pick correlated members."""
    return (dpid * 2654435761) >> 8 & 0xFFFF


def _route_match(route: Route, member: int | None = None):
    ip, plen = route.prefix.split("/")
    extra = {} if member is None else {"reg0": member}
    if plen == "32":
        return parser.OFPMatch(eth_type=ether_types.ETH_TYPE_IP, ipv4_dst=ip, **extra)
    mask = (0xFFFFFFFF << (32 - int(plen))) & 0xFFFFFFFF
    return parser.OFPMatch(eth_type=ether_types.ETH_TYPE_IP,
                           ipv4_dst=(ip, ".".join(str((mask >> s) & 0xFF) for s in (24, 16, 8, 0))), **extra)


def _apply(actions) -> list:
    return [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)]


def _prio(route: Route) -> int:
    """Longer prefixes win (a ToR's host /32 over an aggregate elsewhere is never ambiguous, but be safe)."""
    return PRIO_ROUTE + int(route.prefix.split("/")[1])


def _table0_flow(dp, route: Route, basis: int, ecmp: str = "multipath"):
    if len(route.ports) == 1:
        inst = _apply([parser.OFPActionGroup(member_group(route, route.ports[0]))])
    elif ecmp == "select":
        inst = _apply([parser.OFPActionGroup(select_group(route))])
    else:
        inst = _apply([multipath(route, basis)]) + [parser.OFPInstructionGotoTable(TABLE_ECMP)]
    return _flow(dp, _route_match(route), inst, _prio(route))


def _member_flow(dp, route: Route, i: int, command=ofp.OFPFC_ADD):
    inst = [] if command != ofp.OFPFC_ADD else _apply([parser.OFPActionGroup(member_group(route, route.ports[i]))])
    return parser.OFPFlowMod(dp, cookie=COOKIE, table_id=TABLE_ECMP, command=command, priority=_prio(route),
                             match=_route_match(route, i), instructions=inst, out_port=ofp.OFPP_ANY,
                             out_group=ofp.OFPG_ANY)


def route_msgs(dp, route: Route, mode: str, dest_mac: str | None, command: str,
               old: Route | None = None, basis: int = 0, ecmp: str = "multipath") -> tuple[list, list]:
    """Messages for one route as ``(apply, cleanup)``; send every ``apply`` before any ``cleanup``.

        table 0: ipv4_dst=X --(1 port)--> member group of that port
                            --(k ports, multipath)-> multipath(ip, L4 ports) -> reg0, goto table 1
                            --(k ports, select)----> SELECT group: bucket i -> member group of ports[i]
        table 1: reg0=i, ipv4_dst=X --> member group of ports[i]
        member group of port p: INDIRECT [p], or FAST_FAILOVER [p, fallbacks...]

    ``apply`` moves traffic to the new state (new groups, then what points at them): when a link dies
    this is usually one flow mod (multipath) or one group mod (select) per destination. ``cleanup``
    removes what nothing points at any more.

    Args:
        command: ``add`` | ``modify`` | ``delete``.
        old: the previous route on ``modify``.
        basis: the switch's hash basis (:func:`hash_basis`).
        ecmp: ``multipath`` | ``select`` (see the module docstring).
    """
    check_ecmp(ecmp)
    sel = ecmp == "select"
    k = len(route.ports)
    if command == "delete":
        cleanup = [_member_flow(dp, route, i, ofp.OFPFC_DELETE_STRICT) for i in range(k)] if k > 1 and not sel else []
        cleanup += [select_group_mod(dp, route, ofp.OFPGC_DELETE)] if k > 1 and sel else []
        cleanup += [member_group_mod(dp, route, p, mode, None, ofp.OFPGC_DELETE) for p in route.ports]
        return [_flow(dp, _route_match(route), [], _prio(route), ofp.OFPFC_DELETE_STRICT)], cleanup
    if command not in ("add", "modify"):
        raise ValueError(f"command must be add, modify or delete, got {command!r}")
    if command == "add" or old is None:
        apply = [member_group_mod(dp, route, p, mode, dest_mac, ofp.OFPGC_ADD) for p in route.ports]
        if k > 1:
            apply += [select_group_mod(dp, route, ofp.OFPGC_ADD)] if sel else \
                [_member_flow(dp, route, i) for i in range(k)]
        return apply + [_table0_flow(dp, route, basis, ecmp)], []
    old_k = len(old.ports)
    apply = []
    for p in route.ports:
        if p not in old.ports:
            apply.append(member_group_mod(dp, route, p, mode, dest_mac, ofp.OFPGC_ADD))
        elif member_ports(old, p, mode) != member_ports(route, p, mode) or old.last_hop != route.last_hop:
            apply.append(member_group_mod(dp, route, p, mode, dest_mac, ofp.OFPGC_MODIFY))
    if k > 1 and sel:
        if old_k == 1:
            apply.append(select_group_mod(dp, route, ofp.OFPGC_ADD))
        elif old.ports != route.ports:
            apply.append(select_group_mod(dp, route, ofp.OFPGC_MODIFY))
    elif k > 1:
        apply += [_member_flow(dp, route, i) for i in range(k)
                  if old_k == 1 or i >= old_k or old.ports[i] != route.ports[i]]
    if (k == 1) != (old_k == 1) or (k == 1 and old.ports != route.ports) or (not sel and k != old_k):
        apply.append(_table0_flow(dp, route, basis, ecmp))
    cleanup = []
    if sel:
        cleanup += [select_group_mod(dp, route, ofp.OFPGC_DELETE)] if old_k > 1 and k == 1 else []
    else:
        old_t1, new_t1 = (old_k if old_k > 1 else 0), (k if k > 1 else 0)
        cleanup += [_member_flow(dp, route, i, ofp.OFPFC_DELETE_STRICT) for i in range(new_t1, old_t1)]
    cleanup += [member_group_mod(dp, route, p, mode, None, ofp.OFPGC_DELETE)
                for p in old.ports if p not in route.ports]
    return apply, cleanup


def diff_msgs(dp_for, diff: RouteDiff, mode: str, macs: dict, old: dict | None = None,
              basis: dict | None = None, first=None, ecmp: str = "multipath"):
    """Render a :class:`RouteDiff` lazily as ``(switch, message)`` pairs, in the order to send them.

    Every ``apply`` message comes before any ``cleanup``; the switches in ``first`` (both ends of the
    failed link) come before the others, so local repair is not queued behind the rest of the fabric.
    Switches ``dp_for`` does not know (not connected) are skipped; they get their routes on connect.

    Args:
        dp_for: switch name -> datapath or None.
        macs: host node -> MAC (last-hop rewrite).
        old: ``{(switch, prefix): Route}`` before the change.
        basis: switch -> hash basis.
        first: a switch or switches to serve first.
        ecmp: ``multipath`` | ``select``.
    """
    old = old or {}
    basis = basis or {}
    work = [(c, r) for c, routes in (("delete", diff.delete), ("add", diff.add), ("modify", diff.modify))
            for r in routes]
    first = {first} if isinstance(first, str) else set(first or ())
    work.sort(key=lambda cr: cr[1].switch not in first)  # stable: keeps the order within each group
    cleanups = []
    for command, r in work:
        dp = dp_for(r.switch)
        if dp is None:
            continue
        prev = old.get(r.key)
        apply, cleanup = route_msgs(dp, r, mode, macs.get(r.dest), command, prev, basis.get(r.switch, 0), ecmp)
        for m in apply:
            yield r.switch, m
        cleanups += [(r.switch, m) for m in cleanup]
    yield from cleanups


def port_mod(dp, port_no: int, hw_addr: str, down: bool):
    """Administratively set a port down/up (how ``testbed fail link`` acts through the controller)."""
    return parser.OFPPortMod(dp, port_no=port_no, hw_addr=hw_addr,
                             config=ofp.OFPPC_PORT_DOWN if down else 0, mask=ofp.OFPPC_PORT_DOWN)


def port_is_down(config: int, state: int) -> bool:
    """A port counts as down when administratively down or without link."""
    return bool(config & ofp.OFPPC_PORT_DOWN or state & ofp.OFPPS_LINK_DOWN)


# ------------------------------------------------------------------------ ARP
def arp_reply(frame: bytes, ip_to_mac: dict) -> bytes | None:
    """An ARP reply for a request whose target is in the address plan, else None.

    Raises nothing on garbage: a frame that is not an ARP request gives None.
    """
    pkt = packet.Packet(frame)
    eth = pkt.get_protocol(ethernet.ethernet)
    req = pkt.get_protocol(arp.arp)
    if eth is None or req is None or req.opcode != arp.ARP_REQUEST:
        return None
    mac = ip_to_mac.get(req.dst_ip)
    if mac is None:
        return None
    reply = packet.Packet()
    reply.add_protocol(ethernet.ethernet(ethertype=ether_types.ETH_TYPE_ARP, dst=req.src_mac, src=mac))
    reply.add_protocol(arp.arp(opcode=arp.ARP_REPLY, src_mac=mac, src_ip=req.dst_ip,
                               dst_mac=req.src_mac, dst_ip=req.src_ip))
    reply.serialize()
    return bytes(reply.data)


def packet_out(dp, port_no: int, data: bytes):
    return parser.OFPPacketOut(dp, buffer_id=ofp.OFP_NO_BUFFER, in_port=ofp.OFPP_CONTROLLER,
                               actions=[parser.OFPActionOutput(port_no)], data=data)


# ------------------------------------------------------------------------ LLDP
def lldp_frame(dpid: int, port_no: int, src_mac: str = "02:00:00:00:00:01") -> bytes:
    """LLDP probe carrying ``dpid`` and ``port_no`` (chassis id subtype 7, port id subtype 2)."""
    pkt = packet.Packet()
    pkt.add_protocol(ethernet.ethernet(dst=lldp.LLDP_MAC_NEAREST_BRIDGE, src=src_mac,
                                       ethertype=ether_types.ETH_TYPE_LLDP))
    tlvs = (lldp.ChassisID(subtype=lldp.ChassisID.SUB_LOCALLY_ASSIGNED,
                           chassis_id=_LLDP_PREFIX + f"{dpid:016x}".encode()),
            lldp.PortID(subtype=lldp.PortID.SUB_PORT_COMPONENT, port_id=struct.pack("!I", port_no)),
            lldp.TTL(ttl=120), lldp.End())
    pkt.add_protocol(lldp.lldp(tlvs))
    pkt.serialize()
    return bytes(pkt.data)


def parse_lldp(frame: bytes) -> tuple[int, int] | None:
    """``(dpid, port_no)`` from one of our probes; None for any other frame."""
    pkt = packet.Packet(frame)
    msg = pkt.get_protocol(lldp.lldp)
    if msg is None or len(msg.tlvs) < 2:
        return None
    chassis, port_id = msg.tlvs[0], msg.tlvs[1]
    cid = getattr(chassis, "chassis_id", b"")
    pid = getattr(port_id, "port_id", b"")
    if not cid.startswith(_LLDP_PREFIX) or len(pid) != 4:
        return None
    try:
        dpid = int(cid[len(_LLDP_PREFIX):], 16)
    except ValueError:
        return None
    return dpid, struct.unpack("!I", pid)[0]
