"""fabric.p4 compiles, and the compiled program matches what testbed.p4rt.entries writes into it
(table names, action names, parameter counts and widths, counter sizes). Needs p4c, not root."""

from __future__ import annotations

import json

import pytest

from testbed.p4rt import entries as E
from testbed.scenario import REPO_ROOT

pytestmark = pytest.mark.bmv2


@pytest.fixture(scope="module")
def program():
    from testbed.p4rt.compile import compile_p4

    return json.loads(compile_p4(REPO_ROOT / "p4" / "fabric.p4").read_text())


def _tables(prog):
    return {t["name"].split(".")[-1]: t for p in prog["pipelines"] for t in p["tables"]}


def _actions(prog):
    return {a["name"].split(".")[-1]: a for a in prog["actions"]}


def _sample_entries():
    cfg = E.EcnConfig(1, 2, mode="both")
    return (E.switch_config_entries("02:fe:00:00:00:01")
            + E.route_entries("10.0.0.0/24", 1, [1, 2], "02:fe:00:00:00:01", "02:00:00:00:00:01")
            + E.ecn_entries(cfg) + E.ecn_entries(cfg, port=1)
            + [E.qp_map_entry("10.0.0.1", "10.0.0.2", 1, 2)]
            + E.pfc_entries(1, E.PfcPortConfig(3000, 1000, 6000, 100, 1000))
            + E.pfc_priority_entries({26: 3}, [3]))


def test_every_entry_names_a_table_action_with_matching_arity(program):
    tables, actions = _tables(program), _actions(program)
    for e in _sample_entries():
        assert e.table in tables, e
        table = tables[e.table]
        assert e.action in {a.split(".")[-1] for a in table["actions"]}, e
        assert len(actions[e.action]["runtime_data"]) == len(e.params), e
        if not e.default:
            assert len(table["key"]) == len(e.match), e


def test_parameter_widths_hold_the_values_builders_produce(program):
    actions = _actions(program)
    widths = [p["bitwidth"] for p in actions["set_ecn"]["runtime_data"]]
    top = E.EcnConfig(E.MAX_QDEPTH - 1, E.MAX_QDEPTH, pmax=1.0, mode="both", cnp_interval_s=3599)
    for value, width in zip(top.params(), widths, strict=True):
        assert int(value) < 1 << width
    nhop = [p["bitwidth"] for p in actions["set_nhop"]["runtime_data"]]
    assert nhop == [9, 48, 48]
    widths = [p["bitwidth"] for p in actions["set_pfc"]["runtime_data"]]
    top = E.PfcPortConfig(E.MAX_U32 - 1, E.MAX_U32 - 1, E.MAX_U32, E.MAX_QUANTA, E.MAX_U32)
    for value, width in zip(top.params(), widths, strict=True):
        assert int(value) < 1 << width
    assert [p["bitwidth"] for p in actions["set_lossless"]["runtime_data"]] == [3]   # priority 0..7


def test_counters_and_registers_the_tools_read_exist(program):
    counters = {c["name"].split(".")[-1]: c["size"] for c in program["counter_arrays"]}
    assert counters["drops"] > max(E.DROP_REASONS.values())
    assert counters["cnp_skipped"] > max(E.CNP_SKIP_REASONS.values())
    assert counters["marks"] >= 512 and counters["cnps"] >= 512
    registers = {r["name"].split(".")[-1]: r for r in program["register_arrays"]}
    assert {"sender_qp", "cnp_last_us"} <= set(registers)
    for name in E.PFC_COUNTERS:
        assert counters[name] >= 512, name
    # one slot per (port, priority): index = port * 8 + priority for ports 0..511
    assert registers["pfc_bytes"]["size"] >= 512 * 8 and registers["pfc_paused_at"]["size"] >= 512 * 8
    assert registers["pfc_bytes"]["bitwidth"] == 32 and registers["pfc_paused_at"]["bitwidth"] == 48
