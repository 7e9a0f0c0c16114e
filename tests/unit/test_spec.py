"""Spec schema: strict validation naming the field, frozen objects, units, defaults, CLI exit 2."""

import copy
import dataclasses

import pytest
import yaml

from testbed import cli
from testbed.dilation import pick_scale
from testbed.errors import SpecError
from testbed.topo.graph import hosts, switches
from testbed.topo.spec import build_graph, load_spec, parse_spec, shipped_specs

BASE = {"name": "t", "kind": "fat-tree", "params": {"k": 4}}

CROSS = {
    "name": "cc", "kind": "cross-campus",
    "params": {"campuses": [{"kind": "big-switch", "params": {"hosts": 2}},
                            {"kind": "spine-leaf", "params": {"leaves": 2, "spines": 1, "hosts_per_leaf": 2}}],
               "distance": "30km"},
    "links": {"default": {"rate": "100G"}, "dci": {"rate": "400G"}},
}


def _with(doc, path, value):
    doc = copy.deepcopy(doc)
    *parents, last = path
    node = doc
    for key in parents:
        node = node.setdefault(key, {}) if isinstance(key, str) else node[key]
    if value is KeyError:
        del node[last]
    else:
        node[last] = value
    return doc


INVALID = [
    (_with(BASE, ["colour"], "red"), "colour"),
    (_with(BASE, ["kind"], "hypercube"), "kind"),
    (_with(BASE, ["name"], KeyError), "name"),
    (_with(BASE, ["params", "k"], 5), "params.k"),
    (_with(BASE, ["params", "k"], "four"), "params.k"),
    (_with(BASE, ["params", "k"], KeyError), "params.k"),
    (_with(BASE, ["params", "radix"], 8), "params.radix"),
    ({"name": "b", "kind": "big-switch", "params": {"hosts": 0}}, "params.hosts"),
    ({"name": "t", "kind": "torus", "params": {"dims": [2, 4]}}, "params.dims[0]"),
    ({"name": "t", "kind": "torus", "params": {"dims": 4}}, "params.dims"),
    (_with(BASE, ["links", "host", "distance"], "-5km"), "links.host.distance"),
    (_with(BASE, ["links", "host", "rate"], "fast"), "links.host.rate"),
    (_with(BASE, ["links", "leaf-spine"], {"rate": "100G"}), "links.leaf-spine"),
    (_with(BASE, ["links", "host", "colour"], 1), "links.host.colour"),
    (_with(BASE, ["mtu"], 100000), "mtu"),
    (_with(BASE, ["buffer"], "1B"), "buffer"),
    (_with(BASE, ["scale"], -3), "scale"),
    (_with(BASE, ["scale"], "fast"), "scale"),
    (_with(BASE, ["switches"], {"tor": {"p4": "nosuch"}}), "switches.tor.p4"),
    (_with(BASE, ["switches"], {"spine": "ovs"}), "switches.spine"),
    (_with(BASE, ["switches"], {"tor": "bmv2"}), "switches.tor"),
    (_with(BASE, ["cost"], {"dr_400g": -1}), "cost.dr_400g"),
    (_with(BASE, ["cost"], {"gold": 1}), "cost.gold"),
    (_with(CROSS, ["params", "distance"], "-1km"), "params.distance"),
    (_with(CROSS, ["params", "distance"], KeyError), "params.distance"),
    (_with(CROSS, ["params", "campuses", 0, "kind"], "cross-campus"), "params.campuses[0].kind"),
    (_with(CROSS, ["params", "campuses", 1, "params", "spines"], 0), "params.campuses[1].params.spines"),
    (_with(CROSS, ["links", "dci", "distance"], "10km"), "links.dci.distance"),
    (_with(CROSS, ["params", "campuses"], [{"kind": "big-switch", "params": {"hosts": 2}}]), "params.campuses"),
    ({"name": "s", "kind": "spine-leaf",
      "params": {"leaves": 2, "spines": 2, "hosts_per_leaf": 4, "oversubscription": 3},
      "links": {"host": {"rate": "100G"}, "leaf-spine": {"rate": "100G"}}}, "params.oversubscription"),
]


@pytest.mark.parametrize("doc,field", INVALID, ids=[f for _, f in INVALID])
def test_invalid_spec_names_the_field(doc, field):
    with pytest.raises(SpecError) as err:
        parse_spec(doc)
    assert err.value.field == field
    assert err.value.exit_code == 2


@pytest.mark.parametrize("doc,field", INVALID[:6] + INVALID[-3:], ids=[f for _, f in INVALID[:6] + INVALID[-3:]])
def test_invalid_spec_through_cli_exits_2(doc, field, tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert cli.main(["topo", "show", str(path), "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err.strip()
    assert len(err.splitlines()) == 1 and field in err


def test_not_yaml_and_missing_file(tmp_path):
    bad = tmp_path / "x.yaml"
    bad.write_text("name: [unclosed")
    with pytest.raises(SpecError, match="not valid YAML"):
        load_spec(bad)
    with pytest.raises(SpecError, match="cannot read"):
        load_spec(tmp_path / "missing.yaml")


def test_allowed_values_are_listed():
    with pytest.raises(SpecError) as err:
        parse_spec(_with(BASE, ["kind"], "hypercube"))
    assert "fat-tree" in err.value.message and "dragonfly" in err.value.message
    with pytest.raises(SpecError) as err:
        parse_spec(_with(BASE, ["links", "leaf-spine"], {}))
    assert "edge-agg" in err.value.message


def test_spec_is_frozen():
    spec = parse_spec(BASE)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.kind = "torus"
    with pytest.raises(TypeError):
        spec.params["k"] = 6
    with pytest.raises(TypeError):
        spec.links["host"] = None


def test_real_units_and_tier_defaults():
    spec = parse_spec({**BASE, "links": {"default": {"rate": "400G"}, "host": {"rate": "100G", "distance": "2m"},
                                         "agg-core": {"delay": "1us"}}, "buffer": "32MB", "mtu": 9000})
    assert spec.links["host"].rate_bps == 100e9 and spec.links["edge-agg"].rate_bps == 400e9
    assert spec.buffer_bytes == 32e6 and spec.mtu == 9000
    G = build_graph(spec)
    host_edge = next(d for _, _, d in G.edges(data=True) if d["tier"] == "host")
    assert host_edge["distance_m"] == 2 and host_edge["delay_s"] == pytest.approx(10e-9)
    core_edge = next(d for _, _, d in G.edges(data=True) if d["tier"] == "agg-core")
    assert core_edge["delay_s"] == pytest.approx(1e-6)
    assert core_edge["link"].rate_bps == 400e9


def test_scale_auto_and_explicit():
    spec = parse_spec({**BASE, "links": {"default": {"rate": "400G"}}})
    assert spec.scale is None
    G = build_graph(spec)
    assert G.graph["scale"] == pick_scale(400e9)
    assert build_graph(parse_spec({**BASE, "scale": 250})).graph["scale"] == 250


def test_cross_campus_long_haul_delay_from_distance():
    G = build_graph(parse_spec(CROSS))
    (edge,) = [d for _, _, d in G.edges(data=True) if d["tier"] == "dci"]
    assert edge["distance_m"] == 30000
    assert edge["delay_s"] == pytest.approx(150e-6)  # 5 us/km
    assert edge["rate_bps"] == 400e9
    assert len(hosts(G)) == 6


def test_link_block_passes_through_to_link_params():
    spec = parse_spec(_with(CROSS, ["links", "dci", "red"], {"kmin": "100KB", "kmax": "400KB", "pmax": "20%"}))
    G = build_graph(spec)
    (edge,) = [d for _, _, d in G.edges(data=True) if d["tier"] == "dci"]
    assert edge["link"].red.kmax == 400e3 and edge["link"].red.pmax == pytest.approx(0.2)
    with pytest.raises(SpecError) as err:
        parse_spec(_with(CROSS, ["links", "dci", "red"], {"kmin": "400KB", "kmax": "100KB", "pmax": "20%"}))
    assert err.value.field.startswith("links.dci.red")


def test_switch_backends_by_role_and_tier():
    spec = parse_spec({**BASE, "switches": {"default": "ovs", "tor": {"p4": "aggregation"},
                                            "tier3": {"p4": "fabric"}}})
    G = build_graph(spec)
    p4 = {G.nodes[s]["role"]: G.nodes[s]["p4"] for s in switches(G)}
    assert p4 == {"tor": "aggregation", "agg": None, "core": "fabric"}


@pytest.mark.parametrize("name", sorted(shipped_specs()))
def test_every_shipped_spec_loads(name):
    spec = load_spec(shipped_specs()[name])
    assert spec.name == name
    G = build_graph(spec)
    assert G.graph["spec"] is spec and G.graph["scale"] >= 1


def test_required_examples_are_shipped():
    need = {"fat-tree-k4", "fat-tree-k8", "dragonfly-a4-p2-h2", "spine-leaf", "rail-optimized", "rail-only",
            "torus-2d", "torus-3d", "big-switch", "full-mesh", "cross-campus-30km"}
    assert need <= set(shipped_specs())
    assert {load_spec(p).kind for p in shipped_specs().values()} >= {
        "fat-tree", "spine-leaf", "rail-optimized", "rail-only", "dragonfly", "torus", "big-switch",
        "full-mesh", "cross-campus"}
