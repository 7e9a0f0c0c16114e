"""A delay line inside a fabric replica: the link-node factory inserts it on the delayed edge only.

    h1 --(rate only: HTB)-- s1 --(10 Mbit/s, 20 ms: delay line dl<i>)-- h2
"""

from __future__ import annotations

import re

import networkx as nx
import pytest

from testbed.dilation import Dilation
from testbed.links.emulation import LinkEmulation
from testbed.links.model import LinkParams

pytestmark = [pytest.mark.root, pytest.mark.mininet, pytest.mark.ovs]


def test_delayed_edge_gets_a_delay_line(tmp_path):
    from testbed.emu import Replica

    G = nx.Graph()
    for n, role in (("h1", "host"), ("h2", "host"), ("s1", "leaf")):
        G.add_node(n, role=role)
    G.add_edge("h1", "s1", ports={"h1": 1, "s1": 1}, rate_bps=50e6, delay_s=0.0)
    G.add_edge("s1", "h2", ports={"s1": 2, "h2": 1}, rate_bps=10e6, delay_s=0.0,
               link=LinkParams(delay_s=0.010))
    dilation = Dilation(2)  # 10 ms real -> 20 ms emulated, 10 Mbit/s -> 5 Mbit/s
    links = LinkEmulation(dilation, backend="userspace", out_dir=tmp_path, seed=5)
    with Replica(G, dilation=dilation, name="link-replica-test", out_dir=tmp_path, datapath="user",
                 **links.replica_hooks()) as rep:
        out = rep.host("h1").cmd("ping -c 6 -i 0.2 -q", rep.ip("h2"))
        avg = float(re.search(r"= [\d.]+/([\d.]+)/", out).group(1))
        dl = rep.link_node("s1", "h2")
        assert avg / 2 == pytest.approx(20.0, rel=0.10), out
        assert dl.stats()["params"]["rate_bps"] == pytest.approx(5e6)
    assert dl.final_stats["directions"]["a>b"]["tx_packets"] >= 6  # ping requests went s1 -> h2
    assert dl.final_stats["core"] == "c"  # the compiled core is the default link node
    backends = {frozenset(edge.split("--")): d["backend"] for edge, d in links.summary().items()}
    assert backends == {frozenset({"h1", "s1"}): "htb", frozenset({"s1", "h2"}): "userspace"}
