"""Metrics, addressing, drawing layout and ``testbed topo`` on every shipped spec."""

import json

import pytest

from testbed import cli
from testbed.topo import generators as gen
from testbed.topo import metrics
from testbed.topo.addressing import assign, plan
from testbed.topo.draw import layout
from testbed.topo.graph import hosts
from testbed.topo.spec import build_graph, parse_spec, shipped_specs


def _spec(kind, params, links=None, **extra):
    return build_graph(parse_spec({"name": "t", "kind": kind, "params": params, "links": links or {}, **extra}))


def test_fat_tree_k4_has_full_bisection_at_equal_speeds():
    G = _spec("fat-tree", {"k": 4}, {"default": {"rate": "100G"}})
    b = metrics.bisection(G)
    assert b["bisection_gbps"] == pytest.approx(b["full_bisection_gbps"]) == pytest.approx(8 * 100)
    assert b["bisection_ratio"] == pytest.approx(1.0)


def test_fat_tree_bisection_follows_thin_core():
    G = _spec("fat-tree", {"k": 4}, {"default": {"rate": "100G"}, "agg-core": {"rate": "25G"}})
    assert metrics.bisection(G)["bisection_ratio"] == pytest.approx(0.25)


def test_spine_leaf_reports_its_oversubscription():
    G = _spec("spine-leaf", {"leaves": 4, "spines": 2, "hosts_per_leaf": 8},
              {"host": {"rate": "100G"}, "leaf-spine": {"rate": "100G"}})
    over = metrics.oversubscription(G)
    assert over["oversubscription"] == pytest.approx(4.0)
    assert over["oversubscription_by_role"] == {"leaf": pytest.approx(4.0)}
    assert metrics.bisection(G)["bisection_ratio"] == pytest.approx(0.25)


def test_oversubscription_param_derives_uplink_rate():
    G = _spec("spine-leaf", {"leaves": 2, "spines": 2, "hosts_per_leaf": 6, "oversubscription": 3},
              {"host": {"rate": "100G"}})
    assert metrics.oversubscription(G)["oversubscription"] == pytest.approx(3.0)
    assert {d["rate_bps"] for _, _, d in G.edges(data=True) if d["tier"] == "leaf-spine"} == {100e9}


def test_flat_kinds_have_no_oversubscription():
    assert metrics.oversubscription(gen.torus((3, 3)))["oversubscription"] is None


@pytest.mark.parametrize("G,diameter,ecmp_max", [
    (gen.fat_tree(4), 6, 4), (gen.fat_tree(8), 6, 16), (gen.spine_leaf(3, 2, 2), 4, 2),
    (gen.big_switch(4), 2, 1), (gen.dragonfly(4, 2, 2), 5, None), (gen.torus((5, 5)), 6, None),
])
def test_paths(G, diameter, ecmp_max):
    p = metrics.paths(G)
    assert p["diameter"] == diameter
    if ecmp_max is not None:
        assert p["ecmp"]["max"] == ecmp_max
    assert 2 <= p["avg_hops"] <= diameter


def test_fat_tree_k4_average_hops():
    # from one host: 1 host at 2 hops, 2 at 4 (same pod), 12 at 6 (other pods) -> (2 + 8 + 72) / 15
    assert metrics.paths(gen.fat_tree(4))["avg_hops"] == pytest.approx(82 / 15, abs=1e-3)


def test_cabling_copper_versus_optics_and_cost_override():
    G = _spec("fat-tree", {"k": 4}, {"host": {"distance": "2m"}, "edge-agg": {"distance": "20m"},
                                     "agg-core": {"distance": "20km"}})
    c = metrics.cabling(G)
    assert c["cabling"]["host"]["copper_cables"] == 16 and c["cabling"]["host"]["optical_modules"] == 0
    assert c["cabling"]["edge-agg"]["optical_modules"] == 32
    assert c["cabling"]["agg-core"]["coherent_modules"] == 32
    assert c["ports_used"] == 80
    assert c["cabling"]["edge-agg"]["media"] == {"sr": 16} and c["cabling"]["agg-core"]["media"] == {"zr": 16}
    dearer = metrics.cabling(G, {"sr_100g": metrics.COST_TABLE["sr_100g"] + 10})  # 20 m links: SR optics
    assert dearer["cost_usd"] == pytest.approx(c["cost_usd"] + 32 * 10)
    assert c["cost_per_host_port_usd"] == pytest.approx(c["cost_usd"] / 16)


def test_dilation_table_divides_rates_and_stretches_delays():
    G = _spec("big-switch", {"hosts": 2}, {"host": {"rate": "400G", "distance": "100m"}}, scale=1000,
              buffer="3MB")
    rows = {r["tier"]: r for r in metrics.dilation_table(G)}
    assert rows["host"]["emulated_rate_bps"] == pytest.approx(400e6)
    assert rows["host"]["emulated_delay_s"] == pytest.approx(500e-9 * 1000)
    assert rows["buffer (per port)"]["buffer_packets"] == 2000


def test_addresses_follow_the_plan_and_are_unique():
    G = gen.fat_tree(4)
    ips = [G.nodes[h]["ip"] for h in hosts(G)]
    macs = [G.nodes[h]["mac"] for h in hosts(G)]
    assert len(set(ips)) == len(ips) == 16 and len(set(macs)) == 16
    assert ips[:3] == ["10.0.0.1", "10.0.0.2", "10.0.1.1"]
    R = gen.rail_optimized(3, 4, 1)
    h = next(h for h in hosts(R) if R.nodes[h]["server"] == 2 and R.nodes[h]["gpu"] == 3)
    assert R.nodes[h]["ip"] == "10.0.2.4" and R.nodes[h]["prefixlen"] == 8
    C = gen.cross_campus([lambda b: gen.big_switch(2, b), lambda b: gen.big_switch(2, b)])
    assert [C.nodes[h]["ip"] for h in hosts(C)] == ["10.0.0.1", "10.0.0.2", "10.1.0.1", "10.1.0.2"]
    assert C.nodes[hosts(C)[2]]["mac"] == "02:0a:00:01:00:01"


def test_addressing_refuses_overflow():
    from testbed.errors import SpecError

    G = gen.big_switch(300)  # a big switch spans two /24-like blocks
    assert [G.nodes[h]["ip"] for h in hosts(G)][253:255] == ["10.0.0.254", "10.0.1.1"]
    # More than 256 leaves in one campus: the wide plan (docs/specs.md); several campuses cannot widen.
    assert len(set(plan(gen.spine_leaf(257, 1, 1)).values())) == 257
    with pytest.raises(SpecError) as err:
        gen.cross_campus([lambda b: gen.spine_leaf(257, 1, 1, b), lambda b: gen.big_switch(2, b)])
    assert err.value.field == "addressing"
    assert len(plan(gen.spine_leaf(256, 1, 1))) == 256


def test_layout_puts_tiers_in_rows():
    G = gen.cross_campus([lambda b: gen.fat_tree(4, b), lambda b: gen.fat_tree(4, b)])
    assign(G)
    pos = layout(G)
    assert all(pos[n][1] == d["tier"] for n, d in G.nodes(data=True))
    campus0 = [pos[n][0] for n, d in G.nodes(data=True) if d.get("campus") == 0 and d["role"] != "dci"]
    assert max(campus0) < 0.5


#: (switches, hosts, links) of each shipped spec, derived by hand from its params (not from build_graph):
SHIPPED_COUNTS = {
    "fat-tree-k4": (20, 16, 48),            # 5k^2/4 switches, k^3/4 hosts, k^3/4 + 2 * k^3/4 links
    "fat-tree-k8": (80, 128, 384),
    "fat-tree-k16": (320, 1024, 3072),
    "spine-leaf": (8, 48, 64),              # 4 leaves + 4 spines; 4 x 12 hosts; 48 + 4 x 4
    "big-switch": (1, 32, 32),
    "torus-2d": (16, 16, 48),               # 4x4 switches, 1 host each; 16 + 2 x 16 torus links
    "torus-3d": (64, 64, 256),              # 4x4x4; 64 + 3 x 64
    "full-mesh": (16, 32, 80),              # 4x4, 2 hosts each; 32 + (4 rows + 4 columns) x C(4,2)
    "dragonfly-a4-p2-h2": (36, 72, 162),    # g = a*h + 1 = 9 groups of 4; 72 + 9 x C(4,2) + C(9,2)
    "rail-only": (44, 32, 96),              # 8 rails + 4 NVSwitches + 32 NICs; per GPU host, nvlink, rail
    "rail-optimized": (12, 32, 64),         # 8 rails + 4 spines; 32 + 8 x 4
    "slim-fly-q5": (50, 200, 375),          # MMS: 2q^2 routers of degree (3q-1)/2 = 7, 4 hosts each; 200 + 175
    "long-haul": (4, 4, 7),                 # 2 x (big switch, 2 hosts) + 2 DCI; 4 + 2 + 1
    "cross-campus-30km": (28, 32, 79),      # fat-tree k4 (20, 16, 48) + spine-leaf 4/2/4 (6, 16, 24) + 2 DCI
}                                           #   + 6 campus-dci (4 cores, 2 spines) + 1 long haul


def test_every_shipped_spec_has_its_count():
    assert set(SHIPPED_COUNTS) == set(shipped_specs())


@pytest.mark.parametrize("name", sorted(shipped_specs()))
def test_topo_show_on_every_shipped_spec(name, capsys):
    assert cli.main(["topo", "show", name, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["switches"], doc["hosts"], doc["links"]) == SHIPPED_COUNTS[name]
    assert doc["diameter"] >= 2 and doc["bisection_gbps"] > 0
    assert doc["mapping"]


def test_topo_show_human_and_draw(tmp_path, capsys):
    assert cli.main(["topo", "show", "fat-tree-k4"]) == 0
    captured = capsys.readouterr()
    assert "bisection" in captured.out and captured.err == ""  # data on stdout: `| grep`, `> file` work
    out = tmp_path / "ft.png"
    assert cli.main(["topo", "draw", "fat-tree-k4", "--out", str(out)]) == 0
    assert out.read_bytes()[:4] == b"\x89PNG"


def test_topo_show_unknown_spec_exits_2(capsys):
    assert cli.main(["topo", "show", "no-such-fabric"]) == 2
    assert "fat-tree-k4" in capsys.readouterr().err


def test_grid_and_group_layouts_show_structure():
    from testbed.topo.draw import curved, style

    T = gen.torus((4, 4))
    pos = layout(T)
    assert style(T) == "grid"
    sw = [n for n, d in T.nodes(data=True) if d["role"] != "host"]
    # Switches on their grid (x = first coordinate, y = -second), every node at its own place.
    assert all(pos[n] == (T.nodes[n]["coord"][0], -T.nodes[n]["coord"][1]) for n in sw)
    assert len(set(pos.values())) == T.number_of_nodes()
    # Exactly the wrap-around links are arcs: 4 rows + 4 columns.
    arcs = curved(T, pos)
    assert len(arcs) == 8
    for u, v in arcs:
        assert sorted(abs(a - b) for a, b in zip(T.nodes[u]["coord"], T.nodes[v]["coord"], strict=True)) == [0, 3]
    M = gen.full_mesh((4,))
    assert len(curved(M, layout(M))) == 3  # 0-2, 1-3, 0-3 skip over neighbours
    D = gen.dragonfly(4, 2, 2)
    pos = layout(D)
    assert style(D) == "groups"
    groups: dict = {}
    for n, d in D.nodes(data=True):
        if d["role"] != "host":
            groups.setdefault(d["group"], []).append(pos[n])
    centres = {g: (sum(p[0] for p in ps) / len(ps), sum(p[1] for p in ps) / len(ps)) for g, ps in groups.items()}
    radii = [(x ** 2 + y ** 2) ** 0.5 for x, y in centres.values()]
    assert max(radii) - min(radii) < 1e-6  # group centres on one circle

    def spread(ps):
        return max(((a[0] - b[0]) ** 2 + (a[1] - b[1]) ** 2) ** 0.5 for a in ps for b in ps)

    nearest = min(((a[0] - b[0]) ** 2 + (a[1] - b[1]) ** 2) ** 0.5
                  for g, a in centres.items() for h, b in centres.items() if g != h)
    assert max(spread(ps) for ps in groups.values()) < nearest  # a group is tighter than the gap to the next
    # Hosts outside their group's ring of routers (not on its local links), no two nodes on top of each other.
    for h, d in D.nodes(data=True):
        if d["role"] == "host":
            (r,) = D.neighbors(h)
            cx, cy = centres[D.nodes[r]["group"]]
            assert ((pos[h][0] - cx) ** 2 + (pos[h][1] - cy) ** 2) > ((pos[r][0] - cx) ** 2 + (pos[r][1] - cy) ** 2)
    points = list(pos.values())
    assert min(((a[0] - b[0]) ** 2 + (a[1] - b[1]) ** 2) ** 0.5
               for i, a in enumerate(points) for b in points[i + 1:]) > 0.12
    assert style(gen.fat_tree(4)) == "tiers"
