"""Routing-brain differences -> the fewest fabric.p4 table operations, ordered make-before-break (pure).

    RoutingBrain.link_down/up/switch_down --RouteDiff--> diff_ops(diff, installed, G)
        per switch: old entries of each touched prefix (from what is installed)
                    new entries (entries.route_entries of the new Route; none for a deleted one)
                    --entry_ops--> add / modify / delete of the entries whose value changed, in order:
           1. ecmp_nhop add, modify      the members a new or changed lpm entry will point to exist first
           2. ipv4_lpm add, modify       then the group size (set_ecmp_group count) changes
           3. ipv4_lpm delete            a route that goes stops pointing at its members first
           4. ecmp_nhop delete           then the members beyond the new count go

So at every moment the switch's lpm entry of a prefix with count ``n`` finds ``ecmp_nhop`` members
``0..n-1`` installed, and each of them names a port that is up in the new state or the old one (never a
missing entry: a miss in ``ecmp_nhop`` would drop the packet). A route whose ECMP members did not change
(e.g. only its fast-failover backups did, which fabric.p4 has no use for) produces no operation at all:
nothing is cleared and reloaded.

:func:`apply_ops` plays operations onto a ``{key: TableEntry}`` table (what a fake switch or the driver's
record of the switch holds); the driver (:mod:`testbed.p4rt.failover`) sends the same operations over
Thrift. Entries are keyed by ``(table, match)`` (``(table, "default")`` for a default action), which is
how BMv2 identifies them too (an entry's key is unique in its table).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from testbed.errors import SpecError
from testbed.p4rt import entries as E

#: Tables in write order: a table's entries point into the tables before it (lpm -> nhop group members).
WRITE_ORDER = ("ecmp_nhop", "ipv4_lpm")
KINDS = ("add", "modify", "delete")


def entry_key(e: E.TableEntry) -> tuple:
    """The identity of an entry in its switch: ``(table, match)``, or ``(table, "default")``."""
    return (e.table, "default" if e.default else e.match)


@dataclass(frozen=True)
class TableOp:
    """One table operation: ``add`` an entry, ``modify`` the action data of the entry with the same key, or
    ``delete`` the entry with that key (``entry`` is then the one being removed)."""

    kind: str
    entry: E.TableEntry

    def __post_init__(self):
        if self.kind not in KINDS:
            raise SpecError("op.kind", f"{self.kind!r} is not one of {', '.join(KINDS)}")

    @property
    def key(self) -> tuple:
        return entry_key(self.entry)

    def render(self) -> str:
        """What the operation is, in ``simple_switch_CLI`` words (handles are the driver's business)."""
        match = " ".join(self.entry.match)
        if self.kind == "delete":
            return f"table_delete {self.entry.table} {match}"
        if self.kind == "modify":
            return f"table_modify {self.entry.table} {self.entry.action} {match} => {' '.join(self.entry.params)}"
        return self.entry.render()


def _rank(op: TableOp) -> tuple:
    order = {t: i for i, t in enumerate(WRITE_ORDER)}
    pos = order.get(op.entry.table, len(WRITE_ORDER))
    if op.kind == "delete":
        return (1, -pos)  # deletes after every write, in the reverse table order
    return (0, pos)


def entry_ops(old: Iterable[E.TableEntry], new: Iterable[E.TableEntry]) -> list[TableOp]:
    """Operations turning the entries ``old`` into ``new`` (same switch), make-before-break ordered.

    Unchanged entries give no operation; an entry whose action or parameters changed is modified in place.
    """
    old_by = {entry_key(e): e for e in old}
    new_by = {entry_key(e): e for e in new}
    ops = []
    for k, e in new_by.items():
        if k not in old_by:
            ops.append(TableOp("add", e))
        elif old_by[k] != e:
            ops.append(TableOp("modify", e))
    ops += [TableOp("delete", e) for k, e in old_by.items() if k not in new_by]
    return sorted(ops, key=lambda op: (_rank(op), op.entry.table, op.entry.match))


def _dest_macs(G) -> dict:
    return {n: d["mac"] for n, d in G.nodes(data=True) if d.get("role") == "host" and "mac" in d}


def route_keys(installed: Mapping[tuple, E.TableEntry], prefix: str, group: int) -> list[tuple]:
    """Keys of the installed entries that belong to one route: its lpm entry and its group's members."""
    lpm = ("ipv4_lpm", (prefix,))
    return [k for k in installed
            if k == lpm or (k[0] == "ecmp_nhop" and k[1] != "default" and k[1][0] == str(group))]


def diff_ops(G, diff, installed: Mapping[str, Mapping[tuple, E.TableEntry]],
             skip: Iterable[str] = ()) -> dict[str, list[TableOp]]:
    """``{switch: [TableOp]}`` applying a :class:`testbed.routing.brain.RouteDiff` to fabric.p4 switches.

    Args:
        G: the fabric graph (hosts' MACs, switches' dpids: the same inputs as ``entries.fabric_program``).
        diff: what the routing brain changed.
        installed: ``{switch: {entry_key: TableEntry}}``, what each switch holds now.
        skip: switches to leave alone (a dead switch cannot be programmed; it gets a full program on return).

    Switches whose operations come out empty are left out.
    """
    skip = set(skip)
    macs = _dest_macs(G)
    touched: dict = {}
    for r in diff.delete:
        touched.setdefault(r.switch, {})[(r.prefix, r.group)] = None
    for r in (*diff.add, *diff.modify):
        touched.setdefault(r.switch, {})[(r.prefix, r.group)] = r
    out = {}
    for sw, routes in sorted(touched.items()):
        if sw in skip:
            continue
        have = installed.get(sw, {})
        smac = E.router_mac(G.nodes[sw]["dpid"])
        old, new = [], []
        for (prefix, group), r in routes.items():
            old += [have[k] for k in route_keys(have, prefix, group)]
            if r is not None:
                new += E.routes_to_entries([r], macs, smac)
        ops = entry_ops(old, new)
        if ops:
            out[sw] = ops
    return out


def apply_ops(table: dict, ops: Iterable[TableOp]) -> dict:
    """Play ``ops`` onto ``table`` (``{entry_key: TableEntry}``, changed in place and returned).

    Raises:
        SpecError: adding a key that exists, or modifying/deleting one that does not (what BMv2 refuses too).
    """
    for op in ops:
        k = op.key
        if op.kind == "add":
            if k in table:
                raise SpecError("op", f"{op.render()}: an entry with this key exists")
            table[k] = op.entry
        elif k not in table:
            raise SpecError("op", f"{op.render()}: no such entry")
        elif op.kind == "modify":
            table[k] = op.entry
        else:
            del table[k]
    return table


def _field_int(text: str):
    """One CLI field as an integer: a decimal, a MAC, an IPv4 address, or ``addr/len`` -> (int, len)."""
    import ipaddress

    if "/" in text:
        addr, plen = text.split("/")
        return (int(ipaddress.IPv4Address(addr)), int(plen))
    if ":" in text:
        return int(text.replace(":", ""), 16)
    if "." in text:
        return int(ipaddress.IPv4Address(text))
    return int(text, 0)


def normalized(e: E.TableEntry) -> tuple:
    """``(match, action, params)`` in integers: how :meth:`testbed.p4rt.client.SwitchClient.table_dump`
    reads an entry back from a switch."""
    return (tuple(_field_int(m) for m in e.match), e.action, tuple(_field_int(p) for p in e.params))


def program_table(prog: E.FabricProgram) -> dict:
    """A fresh program as ``{entry_key: TableEntry}`` (what :func:`apply_ops` results compare against)."""
    return {entry_key(e): e for e in prog.entries}
