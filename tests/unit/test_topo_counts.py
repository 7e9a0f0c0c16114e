"""Closed-form fabric sizes agree with the generators, and `topo show` of huge fabrics answers from them
(fat-tree k=1024, 1e8 hosts) without building a graph."""

from __future__ import annotations

import json

import pytest

from testbed import cli
from testbed.errors import SpecError
from testbed.topo.counts import GRAPH_LIMIT, WALK_LIMIT, closed_form
from testbed.topo.spec import KINDS, build_graph, parse_spec

CASES = [("fat-tree", {"k": 4}), ("fat-tree", {"k": 8}), ("spine-leaf", {"leaves": 3, "spines": 2, "hosts_per_leaf": 4}),
         ("torus", {"dims": [4, 4]}), ("torus", {"dims": [3, 4, 5], "hosts_per_switch": 2}),
         ("full-mesh", {"dims": [4, 4], "hosts_per_switch": 2}), ("full-mesh", {"dims": [3, 2, 4]}),
         ("big-switch", {"hosts": 7}), ("dragonfly", {"a": 4, "p": 2, "h": 2}),
         ("rail-optimized", {"servers": 3, "gpus_per_server": 4, "spines": 2}),
         ("rail-only", {"servers": 3, "gpus_per_server": 4}), ("slim-fly", {"q": 5}),
         ("slim-fly", {"q": 4, "hosts_per_router": 1}),
         ("cross-campus", {"campuses": [{"kind": "fat-tree", "params": {"k": 4}},
                                        {"kind": "spine-leaf", "params": {"leaves": 2, "spines": 3, "hosts_per_leaf": 2}}],
                           "distance": "30km"}),
         ("cross-campus", {"campuses": [{"kind": "rail-only", "params": {"servers": 2, "gpus_per_server": 2}},
                                        {"kind": "torus", "params": {"dims": [3, 3]}},
                                        {"kind": "dragonfly", "params": {"a": 2, "p": 1, "h": 1}}],
                           "dci_per_campus": 2, "distance": "1km"})]


@pytest.mark.parametrize("kind, params", CASES)
def test_closed_form_matches_the_built_graph(kind, params):
    spec = parse_spec({"name": "x", "kind": kind, "params": params})
    G = build_graph(spec)
    hosts = sum(1 for _, d in G.nodes(data=True) if d["role"] == "host")
    assert closed_form(kind, spec.params) == {"hosts": hosts, "switches": G.number_of_nodes() - hosts,
                                              "links": G.number_of_edges(), "nodes": G.number_of_nodes()}


def test_every_kind_has_a_closed_form():
    # A kind without one would be built and walked whatever its size (8 million rail NICs once were).
    assert {kind for kind, _ in CASES} == set(KINDS)


def test_a_graph_beyond_the_limit_is_refused_before_it_is_built(monkeypatch):
    import testbed.topo.spec as spec_module

    monkeypatch.setattr(spec_module, "Builder", None)  # building would fail loudly: it must not start
    spec = parse_spec({"name": "rails", "kind": "rail-optimized", "params": {"servers": 10 ** 6, "gpus_per_server": 8}})
    with pytest.raises(SpecError) as err:
        build_graph(spec)
    assert err.value.field == "params" and f"{GRAPH_LIMIT:,}" in str(err.value) and "8,000,009 nodes" in str(err.value)


@pytest.mark.parametrize("body, hosts, formulas", [("kind: fat-tree\nparams: {k: 1024}\n", 1024 ** 3 // 4, True),
                                                   ("kind: big-switch\nparams: {hosts: 100000000}\n", 10 ** 8, True),
                                                   ("kind: torus\nparams: {dims: [50, 50]}\n", 2500, False),
                                                   ("kind: rail-only\nparams: {servers: 100000, gpus_per_server: 8}\n",
                                                    800_000, False),
                                                   ("kind: slim-fly\nparams: {q: 101}\n", 20_402 * 76, False),
                                                   ("kind: cross-campus\nparams: {distance: 30km, campuses: "
                                                    "[{kind: fat-tree, params: {k: 1024}}, "
                                                    "{kind: rail-optimized, params: {servers: 9, gpus_per_server: 8}}]}\n",
                                                    1024 ** 3 // 4 + 72, False)])
def test_topo_show_of_huge_fabrics_is_closed_form(tmp_path, capsys, monkeypatch, body, hosts, formulas):
    import testbed.commands.topo as topo

    def no_graph(spec):
        raise AssertionError("a graph was built")

    monkeypatch.setattr(topo, "build_graph", no_graph)
    spec = tmp_path / "huge.yaml"
    spec.write_text("name: huge\n" + body)
    assert cli.main(["topo", "show", str(spec), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["analytic"] is True and doc["hosts"] == hosts and doc["nodes"] > WALK_LIMIT
    # hops, ECMP and bisection where the kind has formulas (testbed.topo.analytic); cost never (no graph)
    assert ("bisection" in doc["not_computed"]) is not formulas and "cost" in doc["not_computed"]
    assert ("diameter" in doc) is formulas
    assert cli.main(["topo", "draw", str(spec), "--out", str(tmp_path / "x.png")]) == 2
