"""The addressing plan reaches fat-tree k=64 (2,048 ToRs) through its documented wide form (tested here at
k=24 and 32 to stay fast), and says which limit a fabric beyond it exceeds."""

from __future__ import annotations

import ipaddress

import networkx as nx
import pytest

from testbed.errors import SpecError
from testbed.topo import generators as gen
from testbed.topo.addressing import assign, plan
from testbed.topo.graph import hosts


def _tors(G, h):
    return next(n for n in G.neighbors(h))


@pytest.mark.parametrize("k", [24, 32])  # k=64 (65,536 hosts) checked the same way by hand: 6 s
def test_large_fat_trees_get_unique_readable_addresses(k):
    G = gen.fat_tree(k)
    hs = hosts(G)
    assert len(hs) == k ** 3 // 4
    ips = [G.nodes[h]["ip"] for h in hs]
    macs = [G.nodes[h]["mac"] for h in hs]
    assert len(set(ips)) == len(hs) and len(set(macs)) == len(hs)
    # One /24 per ToR, in ToR order: X = the ToR's index, spread over the second and third octets.
    by_tor: dict = {}
    for h in hs:
        by_tor.setdefault(_tors(G, h), []).append(ipaddress.IPv4Address(G.nodes[h]["ip"]))
    nets = [{ipaddress.IPv4Network(f"{a}/24", strict=False) for a in addrs} for addrs in by_tor.values()]
    assert all(len(n) == 1 for n in nets) and len({next(iter(n)) for n in nets}) == k * k // 2
    last = G.nodes[hs[-1]]
    x = k * k // 2 - 1
    assert last["ip"] == f"10.{x // 256}.{x % 256}.{k // 2}"
    assert last["mac"] == f"02:0a:01:{x // 256:02x}:{x % 256:02x}:{k // 2:02x}"


def test_small_fabrics_keep_the_campus_plan():
    G = gen.fat_tree(4)
    assert G.nodes[hosts(G)[-1]]["ip"] == "10.0.7.2" and G.nodes[hosts(G)[-1]]["mac"].startswith("02:0a:00:")


def test_beyond_the_wide_plan_names_the_limit():
    gpu = nx.Graph()
    gpu.add_node("h-gpu", role="host", tier=0, server=0, gpu=254)      # a 255th GPU
    with pytest.raises(SpecError, match="254 GPUs per server"):
        plan(gpu)
    server = nx.Graph()
    server.add_node("h-last", role="host", tier=0, server=65536, gpu=0)  # the 65,537th server
    with pytest.raises(SpecError, match="65,536 first-tier switches"):
        plan(server)


def test_several_campuses_over_256_blocks_are_refused_with_the_limit():
    G = nx.Graph()
    for c in (0, 1):
        for t in range(257 if c == 0 else 1):
            G.add_node(f"t{c}-{t}", role="tor", tier=1, campus=c)
            G.add_node(f"h{c}-{t}", role="host", tier=0, campus=c)
            G.add_edge(f"t{c}-{t}", f"h{c}-{t}", tier="host")
    with pytest.raises(SpecError, match="256 campuses of 256"):
        assign(G)
