"""A replica too big for the machine is refused up front, naming the limit (pure: no root)."""

from __future__ import annotations

import pytest

from testbed.errors import SpecError
from testbed.plan.limits import MAX_INTERFACES, check_buildable, estimate, mem_available_mib
from testbed.topo.spec import build_graph, load_spec, parse_spec, resolve_spec


def test_estimate_counts_what_the_replica_creates():
    G = build_graph(load_spec(resolve_spec("fat-tree-k4")))
    est = estimate(G)
    assert (est.nodes, est.links) == (36, 48)
    assert est.interfaces == 2 * est.links + 2 * est.delay_lines
    assert 0 < est.delay_lines <= est.links and est.bmv2 == 0


def test_memory_limit_names_the_numbers():
    G = build_graph(load_spec(resolve_spec("fat-tree-k4")))
    need = estimate(G).memory_mib
    assert check_buildable(G, available_mib=need * 2).memory_mib == need
    with pytest.raises(SpecError, match=r"MiB are available") as err:
        check_buildable(G, available_mib=need)
    assert err.value.exit_code == 2 and "36 nodes" in str(err.value)


def test_interface_limit():
    G = build_graph(parse_spec({"name": "big", "kind": "fat-tree", "params": {"k": 24}}))
    with pytest.raises(SpecError, match=f"at most {MAX_INTERFACES}"):
        check_buildable(G, available_mib=1e9)


def test_meminfo_parsing():
    assert mem_available_mib("MemTotal: 100 kB\nMemAvailable:   2048 kB\n") == 2.0
    assert mem_available_mib("MemTotal: 100 kB\n") is None
