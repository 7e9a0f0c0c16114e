"""Slim fly on MMS graphs, checked against published numbers, not against the construction itself.

Reference values: Besta & Hoefler, "Slim Fly: A Cost Effective Low-Diameter Network Topology", SC'14
(router count N_r = 2q^2, router degree k' = (3q - delta)/2 for q = 4w + delta, diameter 2; their worked
example q = 19: 722 routers, k' = 29, p = 15, 10,830 endpoints). q = 5 gives the Hoffman-Singleton graph
(Hafner 2004), the strongly regular graph srg(50, 7, 0, 1): adjacent routers share no neighbour,
non-adjacent ones exactly one -- a property of that graph, independent of how the code builds it.
"""

import itertools

import networkx as nx
import pytest

from testbed.errors import SpecError
from testbed.topo import generators as gen
from testbed.topo.galois import GF, prime_power
from testbed.topo.graph import hosts, switches
from testbed.topo.metrics import paths
from testbed.topo.spec import build_graph, parse_spec

#: q -> (routers, router degree k'), from the formulas and tables of the slim fly paper.
PAPER = {3: (18, 5), 4: (32, 6), 5: (50, 7), 7: (98, 11), 8: (128, 12), 9: (162, 13), 11: (242, 17),
         13: (338, 19), 16: (512, 24), 19: (722, 29)}


@pytest.mark.parametrize("q", sorted(PAPER))
def test_mms_router_count_degree_and_diameter(q):
    M = gen.mms_graph(q)
    routers, degree = PAPER[q]
    assert M.number_of_nodes() == routers
    assert {M.degree(n) for n in M} == {degree}
    assert nx.diameter(M) == 2
    assert gen.slim_fly_degree(q) == degree


def test_q5_is_the_hoffman_singleton_graph():
    M = gen.mms_graph(5)
    for u, v in itertools.combinations(M.nodes, 2):
        common = len(set(M[u]) & set(M[v]))
        assert common == (0 if M.has_edge(u, v) else 1)


def test_paper_example_q19_endpoints():
    want = gen.expected_counts("slim-fly", q=19, hosts_per_router=15)
    assert (want["switches"], want["router_degree"], want["hosts"]) == (722, 29, 10_830)
    assert gen.expected_counts("slim-fly", q=19)["hosts"] == 722 * 15  # default p = ceil(k'/2)


def test_slim_fly_graph_hosts_ports_and_host_diameter():
    G = gen.slim_fly(5)
    assert len(switches(G)) == 50 and len(hosts(G)) == 50 * 4
    assert all(G.degree(r) == 7 + 4 for r in switches(G))
    assert G.number_of_edges() == gen.expected_counts("slim-fly", q=5)["links"]
    assert paths(G)["diameter"] == 4          # host, router, router, router, host
    assert paths(G)["switch_diameter"] == 2


@pytest.mark.parametrize("q", [2, 6, 10, 12, 1, 0])
def test_not_a_prime_power_or_too_small_is_refused(q):
    with pytest.raises(ValueError, match="prime power"):
        gen.mms_graph(q)


def test_spec_slim_fly_and_bad_q():
    G = build_graph(parse_spec({"name": "sf", "kind": "slim-fly", "params": {"q": 4, "hosts_per_router": 1}}))
    assert len(switches(G)) == 32 and len(hosts(G)) == 32
    with pytest.raises(SpecError) as err:
        parse_spec({"name": "sf", "kind": "slim-fly", "params": {"q": 6}})
    assert err.value.field == "params.q" and "prime power" in err.value.message


@pytest.mark.parametrize("q", [4, 8, 9, 25, 27])
def test_gf_prime_power_fields_are_fields(q):
    F = GF(q)
    xi = F.primitive_element()
    assert F.order(xi) == q - 1
    assert len({F.power(xi, e) for e in range(q - 1)}) == q - 1      # generates every non-zero element
    for a in range(1, q):
        assert sum(1 for b in range(1, q) if F.mul(a, b) == 1) == 1  # one inverse each
    for a, b, c in itertools.islice(itertools.product(range(q), repeat=3), 0, None, 7):
        assert F.mul(a, F.add(b, c)) == F.add(F.mul(a, b), F.mul(a, c))
    p, _ = prime_power(q)
    assert all(_times(F, a, p) == 0 for a in range(q))             # characteristic p


def _times(F, a, n):
    out = 0
    for _ in range(n):
        out = F.add(out, a)
    return out
