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


def test_host_config_requests_decode_to_what_ip_neigh_and_route_replace_send():
    """The netlink bytes configure_host sends, decoded by pyroute2's parser (not built again)."""
    import socket as _socket

    from pyroute2.netlink import NLM_F_ACK, NLM_F_CREATE, NLM_F_REPLACE, NLM_F_REQUEST
    from pyroute2.netlink.rtnl import RTM_NEWNEIGH, RTM_NEWROUTE
    from pyroute2.netlink.rtnl.ndmsg import ndmsg
    from pyroute2.netlink.rtnl.rtmsg import rtmsg

    from testbed.emu import ops

    ops.host_config_requests([("10.0.0.2", "02:00:00:00:00:02")], [], 3)  # the cached copy is not changed
    built = ops.host_config_requests([("10.0.0.2", "02:00:00:00:00:02")], ["10.1.0.0/24"], 7)
    neigh, route = ndmsg(bytes(built[0])), rtmsg(bytes(built[1]))
    neigh.decode()
    route.decode()
    flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE
    assert neigh["header"]["type"] == RTM_NEWNEIGH and neigh["header"]["flags"] == flags
    assert neigh["ifindex"] == 7 and neigh["state"] == 0x80 and neigh["family"] == _socket.AF_INET  # permanent
    assert neigh.get_attr("NDA_DST") == "10.0.0.2" and neigh.get_attr("NDA_LLADDR") == "02:00:00:00:00:02"
    assert route["header"]["type"] == RTM_NEWROUTE and route["header"]["flags"] == flags
    assert route["dst_len"] == 24 and route.get_attr("RTA_DST") == "10.1.0.0" and route.get_attr("RTA_OIF") == 7
    assert route["scope"] == 253 and route["table"] == 254  # on-link, main table: `route replace NET dev D`


def test_chunk_bounds_cap_requests_and_bytes():
    from testbed.emu.ops import REQUESTS_PER_CHUNK, chunk_bounds

    assert chunk_bounds([]) == []
    bounds = chunk_bounds([48] * 1023)  # a fat-tree k=16 host's neighbours: 1,023 acks at most 128 at a time
    assert bounds[0] == (0, REQUESTS_PER_CHUNK) and bounds[-1][1] == 1023
    assert all(b - a <= REQUESTS_PER_CHUNK for a, b in bounds)
    assert all(a == prev_end for (a, _), (_, prev_end) in zip(bounds[1:], bounds, strict=False))
    assert chunk_bounds([100] * 10, chunk_bytes=250) == [(0, 3), (3, 6), (6, 9), (9, 10)]
