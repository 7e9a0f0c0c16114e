"""Closed-form fabric sizes agree with the generators, and `topo show` of huge fabrics answers from them
(fat-tree k=1024, 1e8 hosts) without building a graph."""

from __future__ import annotations

import json

import pytest

from testbed import cli
from testbed.topo.counts import WALK_LIMIT, closed_form
from testbed.topo.spec import build_graph, parse_spec

CASES = [("fat-tree", {"k": 4}), ("fat-tree", {"k": 8}), ("spine-leaf", {"leaves": 3, "spines": 2, "hosts_per_leaf": 4}),
         ("torus", {"dims": [4, 4]}), ("torus", {"dims": [3, 4, 5], "hosts_per_switch": 2}),
         ("full-mesh", {"dims": [4, 4], "hosts_per_switch": 2}), ("full-mesh", {"dims": [3, 2, 4]}),
         ("big-switch", {"hosts": 7}), ("dragonfly", {"a": 4, "p": 2, "h": 2})]


@pytest.mark.parametrize("kind, params", CASES)
def test_closed_form_matches_the_built_graph(kind, params):
    G = build_graph(parse_spec({"name": "x", "kind": kind, "params": params}))
    hosts = sum(1 for _, d in G.nodes(data=True) if d["role"] == "host")
    assert closed_form(kind, params) == {"hosts": hosts, "switches": G.number_of_nodes() - hosts,
                                         "links": G.number_of_edges(), "nodes": G.number_of_nodes()}


@pytest.mark.parametrize("body, hosts, formulas", [("kind: fat-tree\nparams: {k: 1024}\n", 1024 ** 3 // 4, True),
                                                   ("kind: big-switch\nparams: {hosts: 100000000}\n", 10 ** 8, True),
                                                   ("kind: torus\nparams: {dims: [50, 50]}\n", 2500, False)])
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
