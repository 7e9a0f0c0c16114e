"""A host of a fat-tree k=16 gets 1,023 permanent neighbours in one ``configure_host`` call: their acks once
overran the netlink socket's receive buffer (ENOBUFS, an OSError out of the replica's build). Here 2,000
neighbours and a route go onto a veth in a namespace of this test's own, and all are there."""

from __future__ import annotations

import ipaddress
import subprocess

import pytest

from testbed.emu import RunRegistry, ops

pytestmark = [pytest.mark.root]


def test_two_thousand_neighbours_in_one_call():
    ns = "tbnlbatch"
    neighbours = [(str(ipaddress.ip_address("10.8.0.1") + i), f"02:00:00:00:{i // 256:02x}:{i % 256:02x}")
                  for i in range(2000)]
    with RunRegistry("netlink-batch-test") as run:
        run.add_netns(ns)
        run.add_veth("d0", "d1", ns, ns)  # no dummy module on every kernel
        ops.configure_host(f"/run/netns/{ns}", "d0", neighbours, ["10.8.0.0/16"])
        neigh = subprocess.run(["ip", "-n", ns, "neigh", "show", "dev", "d0", "nud", "permanent"],
                               capture_output=True, text=True, check=True).stdout.splitlines()
        routes = subprocess.run(["ip", "-n", ns, "route", "show", "dev", "d0"],
                                capture_output=True, text=True, check=True).stdout
    assert sorted(line.split()[0] for line in neigh) == sorted(ip for ip, _ in neighbours)
    assert "10.8.0.0/16" in routes
