"""The pure build plan of a replica: names, ports, addresses, recorded interfaces."""

from __future__ import annotations

import networkx as nx
import pytest

from testbed.errors import SpecError
from testbed.plan.layout import default_mac, host_batch, host_config, interfaces, mininet_names, static_arp
from testbed.plan.layout import layout as plan


def _fabric():
    G = nx.Graph()
    for n, role in (("h1", "host"), ("h2", "host"), ("leaf1", "leaf"), ("leaf2", "leaf"), ("spine1", "spine")):
        G.add_node(n, role=role)
    G.add_edge("h1", "leaf1", ports={"h1": 1, "leaf1": 3})
    G.add_edge("h2", "leaf2", ports={"h2": 1, "leaf2": 3})
    G.add_edge("leaf1", "spine1", ports={"leaf1": 1, "spine1": 1})
    G.add_edge("leaf2", "spine1", ports={"leaf2": 1, "spine1": 2})
    return G


def test_default_addresses_are_deterministic_and_unique():
    p = plan(_fabric())
    assert [(h.name, h.ip, h.prefixlen) for h in p.hosts] == [("h1", "10.0.0.1", 8), ("h2", "10.0.0.2", 8)]
    assert p.hosts[0].mac == default_mac(0) != p.hosts[1].mac
    assert plan(_fabric()).hosts[1].mac == p.hosts[1].mac


def test_graph_addresses_and_ports_are_kept():
    G = _fabric()
    G.nodes["h2"].update(ip="192.168.7.9", prefixlen=24, mac="02:AA:00:00:00:01")
    p = plan(G)
    h2 = p.host("h2")
    assert (h2.ip, h2.prefixlen, h2.mac) == ("192.168.7.9", 24, "02:aa:00:00:00:01")
    link = next(lk for lk in p.links if {lk.u, lk.v} == {"h1", "leaf1"})
    assert p.intf("leaf1", link.port_v if link.v == "leaf1" else link.port_u) == "leaf1-eth3"
    assert sorted(interfaces(p)) == sorted(["h1-eth1", "leaf1-eth3", "h2-eth1", "leaf2-eth3", "leaf1-eth1",
                                            "spine1-eth1", "leaf2-eth1", "spine1-eth2"])


def test_dpids_explicit_or_assigned_without_clash():
    G = _fabric()
    G.nodes["spine1"]["dpid"] = 1
    dpids = {s.node: s.dpid for s in plan(G).switches}
    assert dpids["spine1"] == 1 and len(set(dpids.values())) == 3
    G.nodes["leaf1"]["dpid"] = 1
    with pytest.raises(SpecError, match="dpid"):
        plan(G)


def test_long_or_odd_names_get_short_aliases():
    G = nx.Graph()
    G.add_node("campus1-pod2-leaf33", role="leaf")
    G.add_node(7, role="host")
    G.add_edge("campus1-pod2-leaf33", 7)
    names = mininet_names(G)
    assert names == {"campus1-pod2-leaf33": "n0", 7: "n1"}
    p = plan(G)
    assert all(len(i) <= 15 for i in interfaces(p))


def test_missing_ports_filled_and_duplicates_rejected():
    G = nx.Graph()
    G.add_node("a", role="switch")
    G.add_node("b", role="switch")
    G.add_node("c", role="switch")
    G.add_edge("a", "b", ports={"a": 1})
    G.add_edge("a", "c")
    ports = {(lk.u, lk.v): (lk.port_u, lk.port_v) for lk in plan(G).links}
    assert ports == {("a", "b"): (1, 1), ("a", "c"): (2, 1)}
    G.edges["a", "c"]["ports"] = {"a": 1, "c": 1}
    with pytest.raises(SpecError, match="used twice"):
        plan(G)


def test_bad_host_addresses_name_the_field():
    G = _fabric()
    G.nodes["h1"]["ip"] = "10.0.0.300"
    with pytest.raises(SpecError, match="nodes.h1.ip"):
        plan(G)
    G = _fabric()
    G.nodes["h1"]["ip"] = G.nodes["h2"]["ip"] = "10.1.1.1"
    with pytest.raises(SpecError, match="also used by h1"):
        plan(G)


def test_link_nodes_keep_end_ports():
    G = _fabric()
    p = plan(G, link_nodes=[(u, v) for u, v in G.edges() if "spine1" in (u, v)])
    vias = [lk for lk in p.links if lk.via]
    assert len(vias) == 2 and all(lk.via.startswith("dl") for lk in vias)
    switch_dpids = {sw.dpid for sw in p.switches}
    assert len({lk.via_dpid for lk in vias}) == 2 and not switch_dpids & {lk.via_dpid for lk in vias}
    names = interfaces(p)
    for lk in vias:
        assert f"{lk.via}-eth1" in names and f"{lk.via}-eth2" in names
    assert "spine1-eth2" in names and "leaf2-eth1" in names


def test_static_arp_lists_every_other_host():
    arp = static_arp(plan(_fabric()))
    assert arp == {"h1": [("10.0.0.2", default_mac(1))], "h2": [("10.0.0.1", default_mac(0))]}


def test_host_batch_neighbours_and_routes_to_other_subnets():
    G = _fabric()
    G.nodes["h1"].update(ip="10.1.0.1", prefixlen=24)
    G.nodes["h2"].update(ip="10.2.0.1", prefixlen=24)
    p = plan(G)
    text = host_batch(p, p.host("h1"), "h1-eth1")
    assert text.splitlines() == [f"neigh replace 10.2.0.1 lladdr {p.host('h2').mac} dev h1-eth1 nud permanent",
                                 "route replace 10.2.0.0/24 dev h1-eth1"]
    assert host_batch(p, p.host("h1"), "h1-eth1", with_arp=False) == "route replace 10.2.0.0/24 dev h1-eth1\n"
    assert host_batch(plan(_fabric()), plan(_fabric()).hosts[0], "h1-eth1", with_arp=False) == ""


def test_host_config_is_the_data_host_batch_renders():
    G = _fabric()
    G.nodes["h1"].update(ip="10.1.0.1", prefixlen=24)
    G.nodes["h2"].update(ip="10.2.0.1", prefixlen=24)
    p = plan(G)
    assert host_config(p, p.host("h1")) == ([("10.2.0.1", p.host("h2").mac)], ["10.2.0.0/24"])
    assert host_config(p, p.host("h1"), with_arp=False) == ([], ["10.2.0.0/24"])
