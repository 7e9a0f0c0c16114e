"""Closed-form hops, ECMP and bisection equal the graph walk and networkx's max-flow (an independent
computation) on small fabrics of many shapes and per-tier rates; huge fabrics get them in milliseconds."""

from __future__ import annotations

import time

import pytest

from testbed.topo import analytic
from testbed.topo.metrics import bisection, paths
from testbed.topo.spec import build_graph, parse_spec

KEYS = ("diameter", "switch_diameter", "avg_hops", "ecmp", "bisection_gbps", "full_bisection_gbps",
        "bisection_ratio")


def _spec(kind, params, links):
    return parse_spec({"name": "t", "kind": kind, "params": params, "links": links})


def _walked(spec) -> dict:
    G = build_graph(spec)
    return {**paths(G), **bisection(G)}


CASES = [
    ("fat-tree", {"k": 2}, {"default": {"rate": "100G"}}),
    ("fat-tree", {"k": 4}, {"default": {"rate": "400G"}, "host": {"rate": "200G"}}),
    ("fat-tree", {"k": 6}, {"default": {"rate": "100G"}, "agg-core": {"rate": "25G"}}),
    ("fat-tree", {"k": 4}, {"default": {"rate": "100G"}, "edge-agg": {"rate": "10G"}}),
    ("spine-leaf", {"leaves": 4, "spines": 2, "hosts_per_leaf": 3}, {"default": {"rate": "100G"}}),
    ("spine-leaf", {"leaves": 3, "spines": 2, "hosts_per_leaf": 3},          # the split falls inside a leaf
     {"host": {"rate": "100G"}, "leaf-spine": {"rate": "40G"}}),
    ("spine-leaf", {"leaves": 5, "spines": 1, "hosts_per_leaf": 4},
     {"host": {"rate": "100G"}, "leaf-spine": {"rate": "100G"}}),
    ("spine-leaf", {"leaves": 3, "spines": 4, "hosts_per_leaf": 5},
     {"host": {"rate": "25G"}, "leaf-spine": {"rate": "400G"}}),
    ("spine-leaf", {"leaves": 1, "spines": 1, "hosts_per_leaf": 4}, {"default": {"rate": "100G"}}),
    ("spine-leaf", {"leaves": 2, "spines": 3, "hosts_per_leaf": 1}, {"default": {"rate": "100G"}}),
    ("big-switch", {"hosts": 7}, {"default": {"rate": "100G"}}),
]


@pytest.mark.parametrize("kind, params, links", CASES, ids=[f"{c[0]}-{'-'.join(map(str, c[1].values()))}"
                                                          f"-{i}" for i, c in enumerate(CASES)])
def test_closed_form_equals_the_graph_walk(kind, params, links):
    spec = _spec(kind, params, links)
    closed, walked = analytic.metrics(spec), _walked(spec)
    for key in KEYS:
        assert closed[key] == pytest.approx(walked[key], rel=1e-6), key


def test_a_fat_tree_k1024_in_milliseconds():
    spec = _spec("fat-tree", {"k": 1024}, {"default": {"rate": "400G"}, "host": {"rate": "200G"}})
    t0 = time.perf_counter()
    m = analytic.metrics(spec)
    assert time.perf_counter() - t0 < 0.5
    assert m["diameter"] == 6 and m["ecmp"]["max"] == 512 ** 2 and m["ecmp"]["min"] == 512
    assert m["bisection_ratio"] == 1.0 and m["full_bisection_gbps"] == 1024 ** 3 / 8 * 200


def test_kinds_without_formulas_say_so():
    spec = _spec("torus", {"dims": [3, 3]}, {"default": {"rate": "100G"}})
    assert analytic.metrics(spec) is None




def test_topo_show_and_plan_give_the_figures_of_a_fabric_too_big_to_build(tmp_path, run_cli):
    import json

    path = tmp_path / "k1024.yaml"
    path.write_text("name: k1024\nkind: fat-tree\nparams: {k: 1024}\n")
    code, out, err = run_cli(["topo", "show", str(path), "--json"])
    doc = json.loads(out)
    assert code == 0 and doc["analytic"] and doc["diameter"] == 6 and doc["ecmp"]["max"] == 262144
    assert "bisection" not in doc["not_computed"] and "cost" in doc["not_computed"]
    code, out, err = run_cli(["plan", str(path)])
    assert code == 2 and "diameter / avg hops" in out and "6 / 5.998" in out
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "interfaces" in lines[0] and "Traceback" not in err
    code, out, err = run_cli(["plan", str(path), "--json"])
    assert code == 2 and json.loads(out)["buildable"] is False
