"""Rail-only as in Wang et al. (HOTI'24): no Ethernet between rails; cross-rail goes through NVLink.

The earlier generator was isomorphic to a spine-leaf (NVSwitch as leaf, rails as spines), so a GPU had
no affinity to its rail. These tests pin the structure that makes it rail-only.
"""

import networkx as nx
import pytest

from testbed.topo import generators as gen
from testbed.topo import railonly
from testbed.topo.graph import hosts, switches


def _at(G):
    return {(G.nodes[h]["server"], G.nodes[h]["gpu"]): h for h in hosts(G)}


def _role(G, role, **attrs):
    return [n for n, d in G.nodes(data=True) if d["role"] == role and all(d.get(k) == v for k, v in attrs.items())]


@pytest.mark.parametrize("servers,gpus", [(3, 4), (4, 8), (2, 2)])
def test_rail_only_is_not_spine_leaf_nor_rail_optimized(servers, gpus):
    G = gen.rail_only(servers, gpus)
    assert not nx.is_isomorphic(G, gen.spine_leaf(servers, gpus, gpus))
    assert not nx.is_isomorphic(G, gen.rail_optimized(servers, gpus, 1))


@pytest.mark.parametrize("servers,gpus", [(3, 4), (4, 8)])
def test_no_ethernet_path_between_rails(servers, gpus):
    G = gen.rail_only(servers, gpus)
    assert railonly.ethernet_rail_reach(G) == {g: [g] for g in range(gpus)}
    E = G.copy()
    E.remove_edges_from([(u, v) for u, v, d in G.edges(data=True) if d["tier"] == "nvlink"])
    rails = {g: _role(G, "rail", rail=g)[0] for g in range(gpus)}
    for g in range(gpus):
        for h in range(gpus):
            assert nx.has_path(E, rails[g], rails[h]) == (g == h)
    # the contrast: rail-optimized joins rails over its spines
    assert railonly.report(gen.rail_optimized(servers, gpus, 2))["ethernet_cross_rail"] is True


def test_gpu_reaches_another_rail_only_through_its_own_nvlink_domain():
    G = gen.rail_only(4, 4)
    at = _at(G)
    S = switches(G)
    for (s, g), h in at.items():
        nvs = _role(G, "nvswitch", server=s)[0]
        for r in range(4):
            rail = _role(G, "rail", rail=r)[0]
            routes = list(nx.all_shortest_paths(G.subgraph(S + [h]), h, rail))
            if r == g:
                assert all(nvs not in p for p in routes) and len(routes[0]) == 3  # host, nic, rail
            else:
                assert routes and all(nvs in p for p in routes)                 # host, nic, nvswitch, nic, rail
                assert all(G.edges[p[1], p[2]]["tier"] == "nvlink" for p in routes)


def test_hops_and_bisection_show_what_rail_only_gives_up():
    G = gen.rail_only(4, 8)  # 100G everywhere
    doc = railonly.report(G)
    assert doc["ethernet_cross_rail"] is False
    assert doc["hops"]["same_rail"] == {"links": 4, "nvlink_links": 0}
    assert doc["hops"]["cross_rail"] == {"links": 6, "nvlink_links": 2}
    assert doc["hops"]["same_server"] == {"links": 4, "nvlink_links": 2}
    assert doc["rail_bisection_gbps"] == pytest.approx(2 * 100)          # 2 servers' links into one rail
    assert doc["cross_rail_bisection_gbps"]["ethernet_only"] == 0
    # with NVLink the 8 left GPUs (servers 0-1, rails 0-3) reach the 8 right ones (servers 2-3, rails
    # 4-7) at their full 8 x 100G: the NVLink detour costs hops, not bandwidth, at equal link rates
    assert doc["cross_rail_bisection_gbps"]["with_nvlink"] == pytest.approx(8 * 100)
    ro = railonly.report(gen.rail_optimized(4, 8, 4))
    assert ro["hops"]["cross_rail"]["links"] == 4 and ro["hops"]["same_rail"]["links"] == 2
