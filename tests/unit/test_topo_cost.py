"""Cost model: each price term checked against a sum written out by hand, so dropping a term fails.

Reference case: spine-leaf, 1,024 hosts at 400G, default table. Radix = 51.2T / 400G = 128, so
16 leaves (64 down) + 8 spines; 1,024 host links of 2 m (DAC) and 1,024 leaf-spine links of 40 m
(SR, reach 50 m: two modules + 40 m of fibre).
"""

import json

import pytest

from testbed import cli
from testbed.errors import SpecError
from testbed.topo import deepseek, sizing
from testbed.topo import generators as gen
from testbed.topo.cost import COST_TABLE, Prices, graph_cost
from testbed.topo.graph import switches
from testbed.topo.spec import build_graph, parse_spec

T = COST_TABLE


def _spine_leaf_1k(**over):
    P = Prices.from_table(over)
    return sizing.price(sizing.bom("spine-leaf", 1024, 400, P), P)


def _hand(t=T):
    ports = 24 * 128 * t["port_fixed_400g"]
    host = 1024 * t["dac_400g"]
    optics = 1024 * 2 * t["sr_400g"]
    fibre = 1024 * t["len_leaf_spine_m"] * t["fibre_per_m"]
    return ports, host, optics, fibre


def test_reference_case_is_the_hand_sum():
    r = _spine_leaf_1k()
    ports, host, optics, fibre = _hand()
    assert (r["switches"], r["switch_ports"], r["tiers"]) == (24, 24 * 128, 2)
    assert [lt["medium"] for lt in r["link_tiers"]] == ["dac", "sr"]
    assert r["switch_ports_usd"] == pytest.approx(ports)
    assert r["cables_usd"] == pytest.approx(host)
    assert r["modules_usd"] == pytest.approx(optics)
    assert r["fibre_usd"] == pytest.approx(fibre)
    assert r["cost_usd"] == pytest.approx(ports + host + optics + fibre)
    assert r["per_host_port_usd"] == pytest.approx((ports + host + optics + fibre) / 1024, abs=0.01)
    assert r["per_gbps_usd"] == pytest.approx(r["per_host_port_usd"] / 400, abs=1e-3)


@pytest.mark.parametrize("key,term", [("port_fixed_400g", 0), ("dac_400g", 1), ("sr_400g", 2),
                                      ("fibre_per_m", 3)])
def test_every_price_term_moves_the_total_by_its_share(key, term):
    base = _spine_leaf_1k()["cost_usd"]
    cheaper = _spine_leaf_1k(**{key: T[key] / 2})["cost_usd"]
    assert base - cheaper == pytest.approx(_hand()[term] / 2)  # a dropped term would move it by 0


def test_media_by_reach_and_allowed_set():
    P = Prices.from_table()
    assert [P.medium(m, 400)[0] for m in (2, 5, 45, 400, 1500, 8000, 30000)] == \
        ["dac", "sr", "sr", "dr", "fr", "lr", "zr"]
    extra = Prices.from_table(media=("dac", "acc", "aec", "lpo", "sr", "dr"))
    assert [extra.medium(m, 400)[0] for m in (2, 4, 6, 45, 400)] == ["dac", "acc", "aec", "lpo", "lpo"]
    with pytest.raises(SpecError, match="no allowed medium"):
        P.medium(200_000, 400)
    with pytest.raises(SpecError) as err:
        Prices.from_table({"gold_400g": 1})
    assert err.value.field == "cost.gold_400g"


def test_port_price_depends_on_speed_and_form():
    P = Prices.from_table()
    assert P.radix(400) == 128 and P.radix(800) == 64 and P.radix(400, "chassis") == 576
    r400 = sizing.price(sizing.bom("spine-leaf", 1024, 400, P), P)
    r800 = sizing.price(sizing.bom("spine-leaf", 1024, 800, P), P)
    # 800G: radix 64 -> 32 leaves + 16 spines of 64 ports each at the 800G port price
    assert r800["switch_ports_usd"] == pytest.approx(48 * 64 * T["port_fixed_800g"])
    assert r800["switch_ports_usd"] != r400["switch_ports_usd"]


def test_formula_counts_equal_the_built_graphs():
    per, level = sizing.clos_counts(16, 4, 3)           # k = 4 fat-tree
    G = gen.fat_tree(4)
    assert sum(per) == len(switches(G)) and 16 + 2 * level == G.number_of_edges()
    per, level = sizing.clos_counts(32, 8, 2)           # radix 8: 8 leaves, 4 spines
    G = gen.spine_leaf(8, 4, 4)
    assert sum(per) == len(switches(G)) and 32 + level == G.number_of_edges()
    assert sizing.clos_tiers(8192, 128) == 2 and sizing.clos_tiers(8193, 128) == 3


def test_sizes_beyond_the_priced_tiers_are_infeasible_rows_not_a_crash():
    # 10^20 hosts need an 11-tier Clos of 128-port switches; the model names 5 tiers (once an IndexError)
    rows = {r["kind"]: r for r in sizing.study(sizing.KINDS, [10 ** 20], 400, Prices.from_table())}
    assert "11-tier" in rows["fat-tree"]["infeasible"] and "at most 5 tiers" in rows["fat-tree"]["infeasible"]
    assert all("infeasible" in r for r in rows.values())


def test_large_sizes_by_formula_and_infeasible_rows():
    P = Prices.from_table()
    rows = {(r["kind"], r["hosts"]): r for r in sizing.study(sizing.KINDS, [1024, 131072], 400, P)}
    assert "infeasible" in rows["spine-leaf", 131072] and "8192" in rows["spine-leaf", 131072]["infeasible"]
    assert rows["fat-tree", 131072]["tiers"] == 3 and rows["fat-tree", 131072]["switches"] == 5120
    # rail-only: 8 rails of 16,384 hosts, each a 3-tier Clos; no spine joins the rails
    assert rows["rail-only", 131072]["switches"] == 8 * (2 * 256 + 128)
    # rail-optimized pays optics on host links that a ToR design does with DAC
    assert rows["rail-optimized", 1024]["optical_modules"] > rows["spine-leaf", 1024]["optical_modules"]


def test_graph_cost_prices_by_rate_and_skips_the_server_inside():
    def big(rate):
        return build_graph(parse_spec({"name": "b", "kind": "big-switch", "params": {"hosts": 4},
                                       "links": {"host": {"rate": rate, "distance": "2m"}}}))
    c100, c400 = graph_cost(big("100G")), graph_cost(big("400G"))
    assert c400["switch_ports_usd"] - c100["switch_ports_usd"] == pytest.approx(
        4 * (T["port_chassis_400g"] - T["port_chassis_100g"]))
    assert c400["cabling"]["host"]["media"] == {"dac": 4}
    R = gen.rail_only(2, 4)
    c = graph_cost(R)
    assert c["cabling"]["nvlink"]["media"] == {"in-server": 8} and c["cabling"]["host"]["media"] == {"in-server": 8}
    assert c["ports_used"] == 8  # only the rail switches' ports are fabric ports


def test_deepseek_validation_row():
    rows = {r["topology"]: r for r in deepseek.table()}
    assert all(r["counts_match"] for r in rows.values())             # our formulas give their counts
    assert all(abs(r["error"]) <= 0.15 for r in rows.values())
    assert abs(rows["DF"]["error"]) <= 0.05 and abs(rows["SF"]["error"]) <= 0.05   # predicted rows
    a = deepseek.assumptions()
    assert a["port_usd"] == pytest.approx(1280, rel=1e-3) and a["link_usd"] == pytest.approx(550, rel=1e-3)
    P = deepseek.prices()                                             # the general model, their prices
    ft3 = sizing.price(sizing.bom("fat-tree", 65536, 400, P), P)
    mpft = sizing.price(sizing.bom("multi-plane", 16384, 400, P), P)
    assert ft3["per_host_port_usd"] == pytest.approx(7500, rel=0.01)
    assert mpft["per_host_port_usd"] == pytest.approx(4390, rel=0.01)


def test_cli_topo_cost_json_plot_and_bad_input(tmp_path, capsys):
    out = tmp_path / "cost.png"
    assert cli.main(["topo", "cost", "--hosts", "1k,128k", "--json", "--validate", "--plot", str(out)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {r["kind"] for r in doc["rows"]} == {"fat-tree", "spine-leaf", "rail-optimized", "big-switch"}
    assert len(doc["rows"]) == 8 and out.stat().st_size > 1000 and doc["deepseek"]["rows"]
    for argv, word in ((["--hosts", "lots"], "--hosts"), (["--kinds", "mesh"], "--kinds"),
                       (["--price", "gold=1"], "gold"), (["--speed", "300G"], "--speed"),
                       (["--media", "pigeon"], "pigeon")):
        assert cli.main(["topo", "cost", *argv]) == 2
        err = capsys.readouterr().err
        assert word in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_slim_fly_bill_of_materials_uses_the_smallest_fitting_q():
    P = Prices.from_table()
    b = sizing.bom("slim-fly", 10_000, 400, P)   # q = 19 (722 routers x 15 hosts = 10,830) is the first >= 10k
    assert b.switches == {("router", "fixed"): (722, 128)}
    assert [lt.links for lt in b.links] == [10_000, 19 * 19 * 29]
    with pytest.raises(sizing.Infeasible):
        sizing.bom("slim-fly", 10_000, 800, Prices.from_table({"fixed_capacity_gbps": 800 * 40}))  # radix 40
