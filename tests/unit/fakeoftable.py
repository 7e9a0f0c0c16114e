"""A small fake OpenFlow 1.3 pipeline (FAUCET's ``clib/fakeoftable.py`` idea) for the controller's output.

It applies the flow and group mods the controller emits, exactly as a switch would store them, and then
answers "where does this packet go?" -- so tests check the southbound messages against an independent
expectation (networkx's shortest paths), never the routing brain against itself::

    tables = FakeFabric(G)                  # one FakeOFTable per switch
    tables.apply(sw, msg)                   # every message of ControllerCore.connect / port_status
    tables.deliveries(src_host, dst_ip)     # {(switch path, eth_dst at the host)} over every ECMP choice

Supported: tables 0/1, priorities, matches on eth_type / ipv4_dst (masked) / reg0, ADD (replacing an
identical match+priority), DELETE (all) and DELETE_STRICT; groups ADD / MODIFY / DELETE (an ADD of an
existing group or a MODIFY/DELETE of a missing one is an error, as on a switch); actions output, group,
set_field eth_dst, NX multipath (every member index explored), goto_table; INDIRECT, FAST_FAILOVER (a
bucket is live when its watch port is) and SELECT groups (every bucket explored; a group action in a
bucket is followed, so chained groups work).
"""

from __future__ import annotations

import ipaddress

from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from testbed.topo.graph import is_host, neighbour_on_port


class OpenFlowError(AssertionError):
    """The switch would have rejected a message (as an OFPT_ERROR)."""


def _fields(match) -> dict:
    return dict(match._fields2)


def _matches(fields: dict, pkt: dict) -> bool:
    for key, want in fields.items():
        have = pkt.get(key)
        if have is None:
            return False
        if key == "ipv4_dst":
            ip = int(ipaddress.IPv4Address(have))
            if isinstance(want, tuple):
                value, mask = (int(ipaddress.IPv4Address(x)) for x in want)
            else:
                value, mask = int(ipaddress.IPv4Address(want)), 0xFFFFFFFF
            if ip & mask != value & mask:
                return False
        elif have != want:
            return False
    return True


class FakeOFTable:
    """The flow tables and groups of one switch."""

    def __init__(self):
        self.flows: dict[int, list] = {}    # table -> [(priority, fields, instructions)]
        self.groups: dict[int, tuple] = {}  # group id -> (type, buckets)

    def apply(self, msg) -> None:
        if isinstance(msg, parser.OFPFlowMod):
            self._flow_mod(msg)
        elif isinstance(msg, parser.OFPGroupMod):
            self._group_mod(msg)
        # port mods, packet-outs and stats requests do not change the pipeline

    def _flow_mod(self, m) -> None:
        fields = _fields(m.match)
        if m.command == ofp.OFPFC_DELETE:
            if m.table_id == ofp.OFPTT_ALL and not fields:
                self.flows.clear()
                return
            raise NotImplementedError("non-strict DELETE with a match")
        table = self.flows.setdefault(m.table_id, [])
        same = [f for f in table if f[0] == m.priority and f[1] == fields]
        if m.command == ofp.OFPFC_DELETE_STRICT:
            for f in same:
                table.remove(f)
            return
        if m.command != ofp.OFPFC_ADD:
            raise NotImplementedError(f"flow mod command {m.command}")
        for f in same:
            table.remove(f)
        table.append((m.priority, fields, list(m.instructions)))

    def _group_mod(self, m) -> None:
        if m.command == ofp.OFPGC_DELETE:
            if m.group_id == ofp.OFPG_ALL:
                self.groups.clear()
            elif self.groups.pop(m.group_id, None) is None:
                raise OpenFlowError(f"group {m.group_id:#x} deleted but absent")
            return
        exists = m.group_id in self.groups
        if m.command == ofp.OFPGC_ADD and exists:
            raise OpenFlowError(f"group {m.group_id:#x} added twice (OFPGMFC_GROUP_EXISTS)")
        if m.command == ofp.OFPGC_MODIFY and not exists:
            raise OpenFlowError(f"group {m.group_id:#x} modified but absent (OFPGMFC_UNKNOWN_GROUP)")
        self.groups[m.group_id] = (m.type, list(m.buckets))

    def lookup(self, table: int, pkt: dict):
        hits = [f for f in self.flows.get(table, []) if _matches(f[1], pkt)]
        if not hits:
            return None
        best = max(f[0] for f in hits)
        top = [f for f in hits if f[0] == best]
        if len(top) > 1:
            raise OpenFlowError(f"ambiguous lookup in table {table}: {len(top)} flows at priority {best}")
        return top[0]

    def outputs(self, pkt: dict, live) -> list[tuple[int, dict]]:
        """Every (port, packet as it leaves) over all multipath choices; ``live(port)`` for FF groups."""
        return self._table(0, dict(pkt), live, depth=0)

    def _table(self, table: int, pkt: dict, live, depth: int) -> list:
        if depth > 8:
            raise OpenFlowError("goto_table loop")
        flow = self.lookup(table, pkt)
        if flow is None:
            return []  # table miss without a flow: drop
        results = [(pkt, [])]  # branches: (packet, outputs so far)
        goto = None
        for inst in flow[2]:
            if isinstance(inst, parser.OFPInstructionGotoTable):
                goto = inst.table_id
                continue
            branches = []
            for p, outs in results:
                branches += self._actions(inst.actions, p, live, outs)
            results = branches
        out = [o for _, outs in results for o in outs]
        if goto is not None:
            for p, _ in results:
                out += self._table(goto, p, live, depth + 1)
        return out

    def _actions(self, actions, pkt: dict, live, outs: list) -> list:
        branches = [(dict(pkt), list(outs))]
        for a in actions:
            nxt = []
            for p, o in branches:
                if isinstance(a, parser.OFPActionOutput):
                    o = o + [(a.port, dict(p))]
                    nxt.append((p, o))
                elif isinstance(a, parser.OFPActionSetField):
                    p = {**p, a.key: a.value}
                    nxt.append((p, o))
                elif isinstance(a, parser.OFPActionGroup):
                    nxt.append((p, o + self._group(a.group_id, p, live)))
                elif isinstance(a, parser.NXActionMultipath):
                    nxt += [({**p, a.dst: i}, o) for i in range(a.max_link + 1)]
                else:
                    raise NotImplementedError(type(a).__name__)
            branches = nxt
        return branches

    def _group(self, group_id: int, pkt: dict, live) -> list:
        if group_id not in self.groups:
            raise OpenFlowError(f"action points at missing group {group_id:#x}")
        gtype, buckets = self.groups[group_id]
        if gtype == ofp.OFPGT_INDIRECT:
            chosen = buckets[:1]
        elif gtype == ofp.OFPGT_FF:
            chosen = [b for b in buckets if live(b.watch_port)][:1]
        elif gtype == ofp.OFPGT_SELECT:
            chosen = buckets  # the switch hashes onto one bucket: every choice is explored
        else:
            raise NotImplementedError(f"group type {gtype}")
        out = []
        for b in chosen:
            for _, outs in self._actions(b.actions, pkt, live, []):
                out += outs
        return out


class FakeFabric:
    """One :class:`FakeOFTable` per switch of ``G`` and the wiring between them."""

    def __init__(self, G):
        self.G = G
        self.tables = {s: FakeOFTable() for s in G if not is_host(G, s)}
        self.down: set = set()  # frozenset({a, b}) of cut links

    def apply(self, switch, msg) -> None:
        self.tables[switch].apply(msg)

    def apply_all(self, pairs) -> int:
        n = 0
        for sw, msg in pairs:
            self.apply(sw, msg)
            n += 1
        return n

    def deliveries(self, src, dst_ip: str, eth_type: int = 0x0800) -> set:
        """{(node path from src to a host, eth_dst on arrival)} for a packet from host ``src`` to ``dst_ip``;
        a path ending in ``"DROP"`` was dropped (table miss, dead INDIRECT bucket, cut wire)."""
        (first,) = list(self.G.neighbors(src))
        found: set = set()
        self._walk(first, (src, first), {"eth_type": eth_type, "ipv4_dst": dst_ip}, found)
        return found

    def _walk(self, sw, path: tuple, pkt: dict, found: set) -> None:
        if len(path) > 12:
            raise OpenFlowError(f"forwarding loop: {path}")

        def live(port):
            try:
                nbr = neighbour_on_port(self.G, sw, port)
            except KeyError:
                return False
            return frozenset((sw, nbr)) not in self.down

        outs = self.tables[sw].outputs(pkt, live)
        if not outs:
            found.add((path + ("DROP",), None))
        for port, p in outs:
            nbr = neighbour_on_port(self.G, sw, port)
            if frozenset((sw, nbr)) in self.down:
                found.add((path + ("DROP",), None))
            elif is_host(self.G, nbr):
                found.add((path + (nbr,), p.get("eth_dst")))
            else:
                self._walk(nbr, path + (nbr,), p, found)
