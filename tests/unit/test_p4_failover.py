"""BMv2 failover driver against a fake Thrift switch: a link cut touches only the entries that change, and
the switches end up holding what a *fresh* compile of the post-failure fabric gives (an independent
routing brain started with the link already down, then entries.fabric_program) -- never the
incremental path checked against itself."""

from __future__ import annotations

import itertools

import pytest

from testbed.errors import SpecError
from testbed.p4rt import entries as E
from testbed.p4rt.failover import P4Fabric
from testbed.p4rt.incremental import TableOp, apply_ops, entry_key, entry_ops, program_table
from testbed.routing.brain import RoutingBrain
from testbed.topo import addressing
from testbed.topo import generators as gen
from testbed.topo.graph import HOST, switches


class FakeSwitch:
    """Holds entries by handle like BMv2 does; refuses a duplicate key or an unknown handle; logs calls."""

    def __init__(self, name):
        self.name = name
        self.entries: dict = {}  # handle -> TableEntry
        self.defaults: dict = {}
        self.mirrors: list = []
        self.calls: list = []
        self._next = itertools.count()

    def _keys(self):
        return {entry_key(e): h for h, e in self.entries.items()}

    def table_add(self, table, action, match, params=(), priority=0):
        e = E.TableEntry(table, action, tuple(match), tuple(params), priority)
        if entry_key(e) in self._keys():
            raise RuntimeError(f"{self.name}: duplicate entry {e.render()}")
        h = next(self._next)
        self.entries[h] = e
        self.calls.append(("add", table, tuple(match)))
        return h

    def table_set_default(self, table, action, params=()):
        self.defaults[table] = E.TableEntry(table, action, (), tuple(params), default=True)
        self.calls.append(("default", table, ()))

    def table_modify(self, table, action, handle, params=()):
        old = self.entries[handle]  # KeyError: no such handle
        assert old.table == table
        self.entries[handle] = E.TableEntry(table, action, old.match, tuple(params), old.priority)
        self.calls.append(("modify", table, old.match))

    def table_delete(self, table, handle):
        old = self.entries.pop(handle)
        assert old.table == table
        self.calls.append(("delete", table, old.match))

    def table_clear(self, table):  # pragma: no cover - the driver must never need it
        raise AssertionError("the driver cleared a table")

    def apply(self, entries):
        out = []
        for e in entries:
            if e.default:
                self.table_set_default(e.table, e.action, e.params)
                out.append(None)
            else:
                out.append(self.table_add(e.table, e.action, e.match, e.params, e.priority))
        return out

    def send_writes(self, writes):
        """Applied at once (a real switch applies them in order too); answers handed out by recv_writes."""
        out = []
        for w in writes:
            if w[0] == "add":
                out.append(self.table_add(w[1], w[2], w[3], w[4], w[5]))
            elif w[0] == "modify":
                out.append(self.table_modify(w[1], w[2], w[3], w[4]))
            else:
                out.append(self.table_delete(w[1], w[2]))
        return out

    def recv_writes(self, sent):
        return list(sent)

    def mirroring_add(self, session, port):
        self.mirrors.append((session, port))

    def table(self) -> dict:
        """``{entry_key: TableEntry}`` of everything the switch holds (defaults included)."""
        out = {entry_key(e): e for e in self.entries.values()}
        out.update({entry_key(e): e for e in self.defaults.values()})
        return out


def _fabric(G):
    fakes = {sw: FakeSwitch(sw) for sw in switches(G)}
    fab = P4Fabric(G, fakes, RoutingBrain(G), clock=lambda: 100.0)
    fab.program()
    for f in fakes.values():
        f.calls.clear()
    return fab, fakes


def _fresh(G, down_links=(), down_switches=()) -> dict:
    """Independent expectation: a new brain that starts with the failure, fully compiled."""
    brain = RoutingBrain(G, down_links={frozenset(lk) for lk in down_links}, down_switches=set(down_switches))
    brain.compute_all(0.0)
    tables = brain.tables()
    return {sw: program_table(E.fabric_program(G, sw, tables.get(sw, {}).values())) for sw in switches(G)
            if sw not in down_switches}


def _changed(before: dict, after: dict) -> set:
    """(switch, key) of entries that differ between two sets of fresh programs."""
    out = set()
    for sw in after:
        b, a = before.get(sw, {}), after[sw]
        out |= {(sw, k) for k in b.keys() | a.keys() if b.get(k) != a.get(k)}
    return out


def _touched(fakes) -> set:
    return {(sw, (table, match)) for sw, f in fakes.items() for _, table, match in f.calls}


@pytest.fixture
def fat_tree():
    return addressing.assign(gen.fat_tree(4))


def _inter_switch_links(G):
    return [(a, b) for a, b in G.edges if HOST not in (G.nodes[a]["role"], G.nodes[b]["role"])]


def test_initial_program_is_the_fresh_compile(fat_tree):
    fab, fakes = _fabric(fat_tree)
    fresh = _fresh(fat_tree)
    assert all(fakes[sw].table() == fresh[sw] for sw in fresh)
    assert all(fakes[sw].mirrors for sw in fakes)


@pytest.mark.parametrize("link", [("a0", "cr0"), ("t0", "a0"), ("t7", "a7"), ("a3", "cr3")])
def test_link_cut_touches_only_changed_entries_and_equals_a_fresh_compile(fat_tree, link):
    G = fat_tree
    assert G.has_edge(*link)
    fab, fakes = _fabric(G)
    before = _fresh(G)
    ev = fab.link_down(*link, detected=99.0)
    after = _fresh(G, down_links=[link])
    for sw in after:
        assert fakes[sw].table() == after[sw], sw
    changed = _changed(before, after)
    assert changed, "a cut ECMP link must change some entries"
    assert _touched(fakes) == changed                       # exactly the entries that differ, nothing else
    assert ev.table_ops == len(changed) and not ev.errors
    total = sum(len(t) for t in after.values())
    assert ev.table_ops < total / 5                          # incremental, not a reload (fat-tree k=4)
    ends = [sw for sw in link if sw in ev.ops]
    assert ends and list(ev.ops)[:len(ends)] == ends          # the link's own ends are repaired first
    # and back: the restore returns every switch to the original program, again touching only what changes
    for f in fakes.values():
        f.calls.clear()
    fab.link_up(*link, detected=101.0)
    for sw in before:
        assert fakes[sw].table() == before[sw], sw
    assert _touched(fakes) == changed


def test_every_single_link_cut_matches_a_fresh_compile(fat_tree):
    G = fat_tree
    fab, fakes = _fabric(G)
    for link in _inter_switch_links(G):
        fab.link_down(*link)
        after = _fresh(G, down_links=[link])
        assert all(fakes[sw].table() == after[sw] for sw in after), link
        fab.link_up(*link)
    before = _fresh(G)
    assert all(fakes[sw].table() == before[sw] for sw in before)


def test_two_cuts_and_a_host_link(fat_tree):
    G = fat_tree
    fab, fakes = _fabric(G)
    fab.link_down("a0", "cr0")
    fab.link_down("a0", "cr1")          # a0 loses both cores: its pod reaches the others through a1 only
    fab.link_down("t0", "h0")           # h0 unreachable: its routes go everywhere
    after = _fresh(G, down_links=[("a0", "cr0"), ("a0", "cr1"), ("t0", "h0")])
    assert all(fakes[sw].table() == after[sw] for sw in after)
    h0 = f"{G.nodes['h0']['ip']}/32"
    assert not any(k == ("ipv4_lpm", (h0,)) for f in fakes.values() for k in f.table())


def test_switch_down_routes_around_it_and_never_writes_to_it(fat_tree):
    G = fat_tree
    fab, fakes = _fabric(G)
    ev = fab.switch_down("cr0", detected=5.0)
    assert not fakes["cr0"].calls
    after = _fresh(G, down_switches=["cr0"])
    assert all(fakes[sw].table() == after[sw] for sw in after)
    assert set(ev.ops) and "cr0" not in ev.ops
    assert list(ev.ops)[0] in set(G.neighbors("cr0"))   # the dead switch's neighbours first


def test_ecmp_shrink_is_ordered_make_before_break():
    old = E.route_entries("10.0.0.1/32", 5, (1, 2, 3), "02:fe:00:00:00:01", "02:0a:00:00:00:01")
    new = E.route_entries("10.0.0.1/32", 5, (1, 3), "02:fe:00:00:00:01", "02:0a:00:00:00:01")
    ops = entry_ops(old, new)
    assert [(o.kind, o.entry.table) for o in ops] == [("modify", "ecmp_nhop"), ("modify", "ipv4_lpm"),
                                                       ("delete", "ecmp_nhop")]
    assert ops[0].entry.match == ("5", "1") and ops[0].entry.params[0] == "3"
    # at every step the lpm count finds all its members installed
    table = {entry_key(e): e for e in old}
    for op in ops:
        apply_ops(table, [op])
        lpm = table[("ipv4_lpm", ("10.0.0.1/32",))]
        n = int(lpm.params[1])
        assert all(("ecmp_nhop", ("5", str(i))) in table for i in range(n))
    assert table == {entry_key(e): e for e in new}


def test_route_removal_deletes_lpm_before_members_and_unchanged_gives_nothing():
    old = E.route_entries("10.0.0.1/32", 5, (1, 2), "02:fe:00:00:00:01", "02:0a:00:00:00:01")
    ops = entry_ops(old, [])
    assert [o.entry.table for o in ops] == ["ipv4_lpm", "ecmp_nhop", "ecmp_nhop"]
    assert all(o.kind == "delete" for o in ops)
    assert entry_ops(old, list(old)) == []
    grow = entry_ops(E.route_entries("10.0.0.1/32", 5, (2,), "02:fe:00:00:00:01", "02:0a:00:00:00:01"), old)
    assert sorted((o.kind, o.entry.table) for o in grow[:2]) == [("add", "ecmp_nhop"), ("modify", "ecmp_nhop")]
    assert (grow[2].kind, grow[2].entry.table) == ("modify", "ipv4_lpm")   # the count grows last


def test_apply_ops_refuses_what_bmv2_refuses():
    e = E.route_entries("10.0.0.1/32", 5, (1,), "02:fe:00:00:00:01", "02:0a:00:00:00:01")[0]
    with pytest.raises(SpecError, match="exists"):
        apply_ops({entry_key(e): e}, [TableOp("add", e)])
    with pytest.raises(SpecError, match="no such entry"):
        apply_ops({}, [TableOp("delete", e)])
    with pytest.raises(SpecError, match="op.kind"):
        TableOp("replace", e)
    assert TableOp("delete", e).render() == "table_delete ipv4_lpm 10.0.0.1/32"


# ------------------------------------------------------------------------------------------ link watcher (pure)
def test_netlink_link_messages_parse_to_port_states():
    from testbed.p4rt.linkwatch import IFF_LOWER_UP, IFF_UP, RTM_DELLINK, link_message, parse_link_messages

    data = (link_message("s1-eth1", IFF_UP | IFF_LOWER_UP) + link_message("s1-eth2", IFF_UP)
            + link_message("s2-eth1", IFF_LOWER_UP) + link_message("s2-eth2", IFF_UP | IFF_LOWER_UP, RTM_DELLINK))
    assert parse_link_messages(data) == [("s1-eth1", True), ("s1-eth2", False), ("s2-eth1", False),
                                         ("s2-eth2", False)]
    assert parse_link_messages(data[:-3]) == [("s1-eth1", True), ("s1-eth2", False), ("s2-eth1", False)]
    assert parse_link_messages(b"") == []


def test_port_states_report_each_link_transition_once():
    from testbed.p4rt.linkwatch import PortStates

    st = PortStates({("a", "b"): ["a-eth1", "b-eth1"], ("b", "h"): ["b-eth2"]})
    assert st.update("a-eth1", False) == (("a", "b"), False)
    assert st.update("b-eth1", False) is None            # the peer losing carrier: the same cut
    assert st.update("a-eth1", True) is None             # one end back is not the link back
    assert st.update("b-eth1", True) == (("a", "b"), True)
    assert st.update("b-eth2", False) == (("b", "h"), False)
    assert st.update("lo", False) is None
    assert PortStates({("a", "b"): ["x", "y"]}, up={"x": False}).link_up == {("a", "b"): False}


def test_normalized_entries_are_integers_like_a_switch_reads_them_back():
    from testbed.p4rt.incremental import normalized

    lpm, nhop = E.route_entries("10.0.1.0/24", 3, (2,), "02:fe:00:00:00:01", "02:0a:00:00:00:0b")
    assert normalized(lpm) == (((0x0A000100, 24),), "set_ecmp_group", (3, 1))
    assert normalized(nhop) == ((3, 0), "set_nhop", (2, 0x02FE00000001, 0x020A0000000B))


def test_a_switch_that_fails_its_writes_is_reported_and_the_others_are_repaired(fat_tree):
    G = fat_tree
    fab, fakes = _fabric(G)
    before = {sw: f.table() for sw, f in fakes.items()}

    def broken(writes):
        raise RuntimeError("switch a2: cannot connect to Thrift port")
    fakes["a2"].send_writes = broken
    ev = fab.link_down("a0", "cr0")
    assert ev.errors == ["a2: switch a2: cannot connect to Thrift port"] and "a2" not in ev.ops
    after = _fresh(G, down_links=[("a0", "cr0")])
    assert all(fakes[sw].table() == after[sw] for sw in after if sw != "a2")
    assert fakes["a2"].table() == before["a2"] and fab.tables()["a2"] == before["a2"]  # the record stays true


def test_p4_link_intfs_finds_links_and_a_switch_links_and_refuses_unknown_ones():
    from testbed.commands.fail import p4_link_intfs
    from testbed.errors import UsageError

    p4 = {"links": [{"names": ["l0", "s0"], "nodes": ["l0", "s0"], "intfs": ["l0-eth2", "s0-eth1"]},
                    {"names": ["l0", "s1"], "nodes": ["l0", "s1"], "intfs": ["l0-eth3", "s1-eth1"]},
                    {"names": ["h0", "l0"], "nodes": ["h0", "l0"], "intfs": ["l0-eth1"]}]}
    assert [lk["intfs"] for lk in p4_link_intfs(p4, "link", "s0", "l0")] == [["l0-eth2", "s0-eth1"]]
    assert len(p4_link_intfs(p4, "switch", "l0")) == 3
    with pytest.raises(UsageError, match="no link l0 - h9"):
        p4_link_intfs(p4, "link", "l0", "h9")
    with pytest.raises(UsageError, match="no switch 'x9'"):
        p4_link_intfs(p4, "switch", "x9")


def test_find_event_matches_kind_link_either_way_and_time():
    from testbed.p4rt.live import find_event

    docs = [{"kind": "link_down", "target": ["a", "b"], "detected": 5.0},
            {"kind": "link_up", "target": ["b", "a"], "detected": 6.0}]
    assert find_event(docs, "link_up", ["a", "b"], 5.5) is docs[1]
    assert find_event(docs, "link_down", ["b", "a"], 5.5) is None
