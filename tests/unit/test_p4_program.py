"""A replica plan -> fabric.p4 programs (testbed/p4rt/program.py, pure): routes, PFC accounting per ingress
port, the DSCP map, and the PFC relays as multicast groups of the plan's feeders."""

from __future__ import annotations

import pytest

from testbed.errors import SpecError
from testbed.p4rt import entries as E
from testbed.p4rt.program import pfc_relays, replica_programs
from testbed.plan import Overrides, plan_replica
from testbed.routing.brain import RoutingBrain
from testbed.topo.spec import build_graph, parse_spec


def _plan(p4: bool = True, pfc: bool = True):
    doc = {"name": "sl", "kind": "spine-leaf", "params": {"leaves": 2, "spines": 1, "hosts_per_leaf": 3},
           "links": {"host": {"rate": "100G", "distance": "2m"}, "leaf-spine": {"rate": "100G", "distance": "100m"}},
           "buffer": "100KB", "scale": 10000}
    if pfc:
        doc["pfc"] = {"priorities": [3], "xoff": "40KB"}
    return plan_replica(build_graph(parse_spec(doc)), overrides=Overrides(p4_program="fabric" if p4 else None))


def _tables(plan):
    brain = RoutingBrain(plan.graph)
    brain.compute_all(0.0)
    return brain.tables()


def test_each_bmv2_switch_gets_its_ports_accounting_the_dscp_map_and_its_relays():
    plan = _plan()
    progs = replica_programs(plan, _tables(plan))
    assert set(progs) == {"l0", "l1", "s0"}
    l1 = progs["l1"]
    port = {p.peer: p.port for p in plan.switch("l1").ports}
    cfg = {e.match[0]: e.params for e in l1.entries if e.table == "pfc_config"}
    assert sorted(cfg) == sorted(str(p) for p in port.values())
    want = next(p for p in plan.pfc.p4 if p.node == "l1" and p.peer == "s0")
    assert cfg[str(port["s0"])] == (str(int(want.xoff_bytes)), str(int(want.xon_bytes)), str(int(want.limit_bytes)),
                                    str(want.quanta), str(want.refresh_us))
    lossless = {e.match[0]: e.params for e in l1.entries if e.table == "pfc_priority"}
    assert lossless == {str(d): ("3",) for d in range(64) if plan.pfc.config.dscp_map[d] == 3} and "26" in lossless
    # relays: a PFC frame from the link node behind h4's port goes to the ports that feed it (h3, h5, s0);
    # behind the uplink, to l1's hosts (up-down routing: the spine never feeds the spine)
    groups = dict(l1.mc_groups)
    relay = {e.match[0]: int(e.params[0]) for e in l1.entries if e.table == "pfc_relay"}
    assert groups[relay[str(port["h4"])]] == tuple(sorted((port["h3"], port["h5"], port["s0"])))
    assert groups[relay[str(port["s0"])]] == tuple(sorted((port["h3"], port["h4"], port["h5"])))
    assert pfc_relays(plan, plan.switch("s0")) == {1: [2], 2: [1]}
    rendered = l1.render()
    assert f"table_add pfc_relay relay_pfc {port['h4']} => {relay[str(port['h4'])]}" in rendered
    assert f"mc_mgrp_create {relay[str(port['h4'])]}" in rendered


def test_without_pfc_or_on_ovs_no_pfc_entries():
    plan = _plan(pfc=False)
    progs = replica_programs(plan, _tables(plan))
    assert all(not any(e.table.startswith("pfc") for e in p.entries) and p.mc_groups == () for p in progs.values())
    assert replica_programs(_plan(p4=False), _tables(_plan(p4=False))) == {}


def test_relay_entries_skip_the_port_itself_and_empty_groups_and_refuse_bad_ports():
    entries, groups = E.pfc_relay_entries({3: [1, 2, 3], 4: [4]})
    assert [e.render() for e in entries] == ["table_add pfc_relay relay_pfc 3 => 4"] and groups == [(4, (1, 2))]
    with pytest.raises(SpecError) as err:
        E.pfc_relay_entries({1: [600]})
    assert err.value.field == "pfc.relay.target"
