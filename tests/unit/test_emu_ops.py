"""argv builders of the emulation core."""

from __future__ import annotations

import pytest

from testbed.emu import ops
from testbed.errors import EmulationError


def test_veth_argv_places_ends_in_namespaces():
    cmds = ops.veth_argv("a0", "b0", ns_a="nsA", mtu=9000)
    assert cmds[0] == ["ip", "link", "add", "a0", "netns", "nsA", "type", "veth", "peer", "name", "b0"]
    assert ["ip", "-n", "nsA", "link", "set", "a0", "mtu", "9000"] in cmds
    assert ["ip", "link", "set", "b0", "up"] in cmds


def test_ifname_limits():
    assert ops.check_ifname("s1-eth12") == "s1-eth12"
    for bad in ("", "x" * 16, "a/b", "a b"):
        with pytest.raises(EmulationError, match="invalid"):
            ops.check_ifname(bad)


def test_offloads_and_netns_exec():
    argv = ops.offload_off_argv("h1-eth0", "ns1")
    assert argv[:4] == ["ip", "netns", "exec", "ns1"] and argv[4:7] == ["ethtool", "-K", "h1-eth0"]
    assert {"tso", "gso", "gro", "tx"} <= set(argv)


def test_neigh_batch():
    text = ops.neigh_batch([("10.0.0.2", "02:00:00:00:00:02", "h1-eth0")])
    assert text == "neigh replace 10.0.0.2 lladdr 02:00:00:00:00:02 dev h1-eth0 nud permanent\n"




def test_bridge_list_parses_ovs_csv():
    text = 's1,9f0e5c1a-0000-4000-8000-000000000001\n"x-2",9f0e5c1a-0000-4000-8000-000000000002\n\n'
    assert ops.parse_bridge_list(text) == {"s1": "9f0e5c1a-0000-4000-8000-000000000001",
                                           "x-2": "9f0e5c1a-0000-4000-8000-000000000002"}


def test_link_state_argv_matches_ip():
    assert ops.link_state_argv("a0-eth3", up=False) == ["ip", "link", "set", "dev", "a0-eth3", "down"]
