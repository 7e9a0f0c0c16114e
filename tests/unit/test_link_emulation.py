"""Per-edge backend decisions for replicas (pure)."""

import pytest

from testbed.dilation import Dilation
from testbed.links.emulation import LinkEmulation, decide, edge_params
from testbed.links.model import LinkParams

NO_NETEM = {"netem": False, "red": False}


def test_rate_only_edge_gets_htb_at_dilated_rate():
    d = decide({"rate_bps": 100e9, "delay_s": 0.0}, Dilation(1000), NO_NETEM)
    assert d.backend == "htb" and d.params.rate_bps == pytest.approx(100e6)


def test_dci_edge_gets_delay_line_with_delay_from_distance():
    attrs = {"rate_bps": 400e9, "distance_m": 30_000, "delay_s": 0.0, "link": LinkParams.from_spec({"loss": "0.1%"})}
    d = decide(attrs, Dilation(1000), NO_NETEM)
    assert d.backend == "userspace"
    assert d.params.delay_s == pytest.approx(0.15) and d.params.rate_bps == pytest.approx(400e6)
    assert decide(attrs, Dilation(1000), {"netem": True, "red": True}).backend == "kernel"


def test_tiny_delays_are_not_worth_a_delay_line():
    d = decide({"rate_bps": 10e9, "delay_s": 1e-6}, Dilation(10), NO_NETEM)
    assert d.backend == "htb" and d.ignored_delay_s == pytest.approx(10e-6) and d.params.delay_s == 0


def test_plain_edge_needs_nothing_and_link_block_wins():
    assert decide({}, Dilation(1), NO_NETEM).backend == "nothing"
    p = edge_params({"rate_bps": 10e9, "delay_s": 1e-3, "link": LinkParams(delay_s=5e-3)})
    assert p.rate_bps == 10e9 and p.one_way_delay_s == 5e-3


def test_hooks_insert_delay_lines_only_where_needed():
    pytest.importorskip("mininet")
    links = LinkEmulation(Dilation(100), capabilities=NO_NETEM, seed=1)
    assert links.node_factory("a", "b", {"rate_bps": 1e9}) is None
    cls, params = links.node_factory("dc1", "dc2", {"rate_bps": 1e9, "delay_s": 1e-3})
    assert cls.__name__ == "DelayLineNode" and params["link"].delay_s == pytest.approx(0.1)
    assert params["seed"] == links.node_factory("dc1", "dc2", {"rate_bps": 1e9, "delay_s": 1e-3})[1]["seed"]
    assert set(links.summary()) == {"a--b", "dc1--dc2"}
