"""Heterogeneous NICs in one job (issue 17, deliverable 4): ``--nic-rate`` parsed and refused per field, the
host links of those ranks slowed in every job (and nothing else), the plan emulating them at rate / scale,
and the gate named from measured link utilisation, not from the configured rates."""

from __future__ import annotations

import pytest

from testbed.collective import experiment as X
from testbed.collective.report import nic_gating
from testbed.errors import SpecError

G_HOST = 100e9


def test_nic_rates_parse_sorted_in_real_units():
    assert X.parse_nic_rates("3=50G, 1=25G", 4, G_HOST, 10e6) == ((1, 25e9), (3, 50e9))
    assert X.parse_nic_rates(None, 4, G_HOST, 10e6) == ()


@pytest.mark.parametrize("text,word", [
    ("1", "RANK=RATE"), ("a=25G", "RANK=RATE"), ("4=25G", "rank 4 does not exist"),
    ("1=25G,1=50G", "twice"), ("1=200G", "host-link rate"), ("1=500M", "100 kbit/s emulated"),
    ("1=fast", "--nic-rate"),
])
def test_bad_nic_rates_name_the_flag(text, word):
    with pytest.raises(SpecError) as exc:
        X.parse_nic_rates(text, 4, G_HOST, 10e6)
    assert exc.value.field == "--nic-rate" and word in str(exc.value)


def test_only_the_given_ranks_links_slow_down_in_every_job():
    G = X.fabric_graph("fat-tree-k4")
    placements = [["h0", "h1", "h2", "h3"], ["h8", "h9", "h10", "h11"]]
    H = X.with_nic_rates(G, placements, ((1, 25e9), (3, 50e9)))
    changed = {(u, v): d["rate_bps"] for u, v, d in H.edges(data=True) if d["rate_bps"] != G.edges[u, v]["rate_bps"]}
    want = {"h1": 25e9, "h3": 50e9, "h9": 25e9, "h11": 50e9}
    assert {next(n for n in e if n.startswith("h")): r for e, r in changed.items()} == want
    assert all(d["rate_bps"] == G_HOST for u, v, d in G.edges(data=True) if "h1" in (u, v))   # G untouched
    assert X.nic_rate(H, "h1") == 25e9 and X.nic_rate(H, "h0") == G_HOST


def test_the_plan_emulates_a_slow_nic_at_its_rate_over_the_fabrics_scale():
    from testbed.plan import Overrides, plan_replica
    from testbed.plan.capabilities import Capabilities

    G = X.fabric_graph("small")
    H = X.with_nic_rates(G, [X.place_jobs(G, X.Options())[0]], ((2, 25e9),))
    scale = X.host_link_rate(G) / 10e6
    plan = plan_replica(H, Capabilities(), Overrides(scale=scale, links="rates", static_arp=True))
    slow = X.place_jobs(G, X.Options())[0][2]
    rates = {frozenset((e.u, e.v)): e.applied.rate_bps for e in plan.links}
    for e, r in rates.items():
        expect = 2.5e6 if slow in e else 10e6
        assert r == pytest.approx(expect), (sorted(e), r)


def _links(util: dict) -> list[dict]:
    return [{"link": k, "bytes": 1, "utilisation": u} for k, u in util.items()]


def test_the_gate_is_the_busiest_host_link_and_whether_it_is_a_slow_nic():
    nic = {"h0": 100e9, "h1": 25e9, "h2": 100e9, "h3": 100e9}
    links = _links({"h0->l0": 0.24, "l0->h0": 0.25, "h1->l0": 0.93, "l0->h1": 0.95, "h2->l1": 0.23,
                    "l1->h2": 0.24, "h3->l1": 0.25, "l1->h3": 0.22, "l0->s0": 0.5})
    g = nic_gating(["h0", "h1", "h2", "h3"], nic, links, 1e4)
    assert g["gate"] == 1 and g["gate_is_slowest"] and g["heterogeneous"]
    assert g["gate_utilisation"] == 0.95 and g["others_max_utilisation"] == 0.25
    assert g["ranks"][1]["emulated_bps"] == 2.5e6 and g["slowest_ranks"] == [1]
    # the same NICs, but the measured busiest host link is a fast one: said, not assumed away
    links = _links({"h0->l0": 0.2, "h1->l0": 0.3, "h2->l1": 0.9, "h3->l1": 0.2})
    g = nic_gating(["h0", "h1", "h2", "h3"], nic, links, 1e4)
    assert g["gate"] == 2 and not g["gate_is_slowest"]
    assert "NOT a slowest NIC" in X.nic_line(g)
    homogeneous = nic_gating(["h0", "h2"], {"h0": 1e11, "h2": 1e11}, links, 1e4)
    assert not homogeneous["heterogeneous"]
