"""How the commands find the running controller and name interfaces (no root, no replica)."""

from __future__ import annotations

import pytest

from controllers.graphio import dump_graph, load_graph
from controllers.launch import addressed, controllers_in_runs, find_controller
from testbed.commands.fail import ifdown_argv, link_interfaces
from testbed.errors import SpecError, UsageError
from tests.unit.test_routing_brain import fat_tree

RUNS = [
    {"run_id": "a", "name": "dead", "alive": False, "objects": [
        {"kind": "process", "pid": 1, "argv": ["python", "-m", "controllers.fabric", "--api-port", "9999"]}]},
    {"run_id": "b", "name": "demo", "alive": True, "objects": [
        {"kind": "bridge", "name": "t0"},
        {"kind": "process", "pid": 42, "argv": ["/usr/bin/python3", "-m", "controllers.fabric", "--graph", "g.json",
                                                "--of-port", "6654", "--api-port", "8654", "--mode",
                                                "fast-failover"]}]},
]


def test_controllers_in_runs_reads_live_records_only():
    assert controllers_in_runs(RUNS) == [{"run_id": "b", "name": "demo", "pid": 42, "api_port": 8654,
                                          "of_port": 6654, "mode": "fast-failover"}]


def test_find_controller_with_explicit_port():
    assert find_controller(8700).url == "http://127.0.0.1:8700"


def test_link_interfaces_from_topology():
    topo = {"links": [{"a": "a0", "b": "cr0", "ports": {"a0": 3, "cr0": 1}}],
            "port_names": {"a0:3": "a0-eth3", "cr0:1": "cr0-eth1"}}
    assert sorted(link_interfaces(topo, "cr0", "a0")) == ["a0-eth3", "cr0-eth1"]
    with pytest.raises(UsageError, match="no link"):
        link_interfaces(topo, "a0", "cr9")
    with pytest.raises(UsageError, match="no interface names"):
        link_interfaces({**topo, "port_names": {}}, "a0", "cr0")
    assert ifdown_argv(["a0-eth3"], True) == [["ip", "link", "set", "dev", "a0-eth3", "down"]]


def test_graph_file_roundtrip_keeps_the_contract(tmp_path):
    G = fat_tree(4)
    G.graph["spec"] = object()  # not JSON: stays home
    G.edges["t0", "h0"]["link"] = object()
    H = load_graph(dump_graph(addressed(G), tmp_path / "g.json"))
    assert set(H.nodes) == set(G.nodes) and H.number_of_edges() == G.number_of_edges()
    assert H.edges["t0", "h0"]["ports"] == G.edges["t0", "h0"]["ports"]
    assert H.nodes["h0"]["ip"] == G.nodes["h0"]["ip"] and H.nodes["cr0"]["dpid"] == G.nodes["cr0"]["dpid"]
    assert "spec" not in H.graph
    (tmp_path / "bad.json").write_text("{nope")
    with pytest.raises(SpecError, match="bad.json"):
        load_graph(tmp_path / "bad.json")


def test_cli_parsers_exist():
    from testbed.cli import build_parser

    p = build_parser()
    args = p.parse_args(["fail", "link", "a0", "cr0", "--method", "ifdown", "--json"])
    assert (args.what, args.a, args.b, args.down, args.method) == ("link", "a0", "cr0", True, "ifdown")
    args = p.parse_args(["restore", "switch", "cr1"])
    assert (args.what, args.s, args.down) == ("switch", "cr1", False)
    args = p.parse_args(["controller", "status", "--paths", "h0", "h15"])
    assert args.paths == ["h0", "h15"]
    args = p.parse_args(["bench", "failover", "spec.yaml", "--quick"])
    assert args.quick and args.repetitions == 20
