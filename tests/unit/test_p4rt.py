"""Pure parts of testbed.p4rt: cache keys, switch command lines, binary choice, allocator, entries."""

from __future__ import annotations

from pathlib import Path

import networkx as nx
import pytest

from testbed.errors import CapabilityError, SpecError
from testbed.p4rt import entries as E
from testbed.p4rt.compile import cache_key, include_files
from testbed.p4rt.switch import Bmv2Config, pick_binary, switch_argv
from testbed.plan.alloc import Allocator


def test_cache_key_changes_with_every_input():
    base = cache_key(b"prog", [("include/a.p4", b"x")], "p4c 1.2")
    assert base == cache_key(b"prog", [("include/a.p4", b"x")], "p4c 1.2")
    assert base != cache_key(b"prog2", [("include/a.p4", b"x")], "p4c 1.2")
    assert base != cache_key(b"prog", [("include/a.p4", b"y")], "p4c 1.2")
    assert base != cache_key(b"prog", [("include/b.p4", b"x")], "p4c 1.2")
    assert base != cache_key(b"prog", [("include/a.p4", b"x")], "p4c 1.3")
    assert base != cache_key(b"prog", [("include/a.p4", b"x")], "p4c 1.2", flags=("--std", "p4-14"))
    # boundaries between parts matter (no ambiguity from concatenation)
    assert cache_key(b"ab", [], "c") != cache_key(b"b", [], "ca")


def test_include_files_lists_the_include_folder(tmp_path):
    (tmp_path / "include" / "sub").mkdir(parents=True)
    (tmp_path / "include" / "b.p4").write_text("b")
    (tmp_path / "include" / "sub" / "a.p4").write_text("a")
    src = tmp_path / "x.p4"
    src.write_text("x")
    assert [p.relative_to(tmp_path).as_posix() for p in include_files(src)] == ["include/b.p4",
                                                                                 "include/sub/a.p4"]


def _cfg(**kw):
    base = dict(name="s1", json_path=Path("/x/fabric.json"), ports={2: "s1-eth2", 1: "s1-eth1"},
                thrift_port=9091, device_id=3, log_dir=Path("/tmp/logs"))
    base.update(kw)
    return Bmv2Config(**base)


def test_switch_argv_ports_sorted_thrift_and_json_last():
    argv = switch_argv(_cfg(), "simple_switch_fast")
    assert argv[0] == "simple_switch_fast"
    assert argv[argv.index("--thrift-port") + 1] == "9091"
    assert argv[argv.index("--device-id") + 1] == "3"
    i = [a for k, a in zip(argv[:-1], argv[1:], strict=True) if k == "-i"]
    assert i == ["1@s1-eth1", "2@s1-eth2"]
    cut = argv.index("--")                                     # target options after the JSON
    assert argv[cut - 1] == "/x/fabric.json"
    assert argv[cut + 1:] == ["--priority-queues", "8"]        # fabric.p4's CNP priority 6 needs a queue
    assert "--log-file" not in argv and not any(a.startswith("--pcap") for a in argv)
    assert any("9091" in a for a in argv if a.startswith("ipc://"))  # unique notification socket


def test_switch_argv_log_and_pcap():
    cfg = _cfg(log=True, pcap_dir=Path("/tmp/pc"))
    argv = switch_argv(cfg, "simple_switch")
    assert argv[argv.index("--log-file") + 1] + ".txt" == str(cfg.packet_log_path)
    assert "--pcap=/tmp/pc" in argv
    assert cfg.log_path == Path("/tmp/logs/s1.log")


@pytest.mark.parametrize("bad", [{"ports": {600: "x"}}, {"ports": {1: "a b"}}, {"thrift_port": 0}])
def test_config_rejects_bad_values(bad):
    with pytest.raises(SpecError):
        _cfg(**bad)


def test_pick_binary_prefers_fast_unless_logging():
    have = {"simple_switch_fast": "/b/ssf", "simple_switch": "/b/ss"}
    assert pick_binary(False, have.get) == "/b/ssf"
    assert pick_binary(True, have.get) == "/b/ss"
    assert pick_binary(False, {"simple_switch": "/b/ss"}.get) == "/b/ss"
    with pytest.raises(CapabilityError):
        pick_binary(True, {"simple_switch_fast": "/b/ssf"}.get)


def test_allocator_skips_busy_ports_and_is_stable_per_switch():
    busy = {9090, 9092}
    a = Allocator(9090, port_free=lambda p: p not in busy)
    s1, s2 = a.switch("s1"), a.switch("s2")
    assert s1 == {"thrift_port": 9091, "device_id": 1}
    assert s2 == {"thrift_port": 9093, "device_id": 2}
    assert a.switch("s1") == s1


def test_route_entries_members_in_port_order():
    es = E.route_entries("10.0.1.2/32", 7, [3, 2], "02:fe:00:00:00:01", "02:0a:00:00:01:02")
    assert [e.render() for e in es] == [
        "table_add ipv4_lpm set_ecmp_group 10.0.1.2/32 => 7 2",
        "table_add ecmp_nhop set_nhop 7 0 => 2 02:fe:00:00:00:01 02:0a:00:00:01:02",
        "table_add ecmp_nhop set_nhop 7 1 => 3 02:fe:00:00:00:01 02:0a:00:00:01:02",
    ]


@pytest.mark.parametrize("kw,field", [
    ({"prefix": "10.0.0.1/33"}, "route.prefix"), ({"prefix": "10.0.0.1/24"}, "route.prefix"),
    ({"ports": []}, "route.10.0.0.0/24.ports"), ({"ports": [512]}, "route.10.0.0.0/24.ports"),
    ({"group": 70000}, "route.10.0.0.0/24.group"), ({"dmac": "zz"}, "route.dmac")])
def test_route_entries_reject_bad_input(kw, field):
    args = {"prefix": "10.0.0.0/24", "group": 1, "ports": [1], "smac": "02:fe:00:00:00:01",
            "dmac": "02:00:00:00:00:01", **kw}
    with pytest.raises(SpecError) as err:
        E.route_entries(**args)
    assert err.value.field == field


def test_ecn_config_params_and_validation():
    cfg = E.EcnConfig(kmin_pkts=5, kmax_pkts=20, pmax=0.2, mode="fast-cnp", cnp_interval_s=50e-6)
    assert cfg.params() == ("5", "20", str(round(0.2 * 65536)), "2", "50")
    assert E.ecn_entries(cfg)[0].render() == "table_set_default ecn_config set_ecn 5 20 13107 2 50"
    assert E.ecn_entries(cfg, port=3)[0].render() == "table_add ecn_config set_ecn 3 => 5 20 13107 2 50"
    for bad, field in ((dict(mode="red"), "ecn.mode"), (dict(kmax_pkts=5), "ecn.kmax_pkts"),
                       (dict(pmax=1.5), "ecn.pmax"), (dict(kmin_pkts=-1), "ecn.kmin_pkts"),
                       (dict(kmin_pkts=2.5), "ecn.kmin_pkts")):
        with pytest.raises(SpecError) as err:
            E.EcnConfig(**{"kmin_pkts": 5, "kmax_pkts": 20, **bad})
        assert err.value.field == field


def test_ecn_from_bytes_rounds_to_packets():
    cfg = E.EcnConfig.from_bytes(100e3, 400e3, mtu=1000, mode="both")
    assert (cfg.kmin_pkts, cfg.kmax_pkts, cfg.mode) == (100, 400, "both")
    tiny = E.EcnConfig.from_bytes(5e3, 6e3, mtu=1500)
    assert tiny.kmax_pkts > tiny.kmin_pkts


def test_router_mac_and_qp_map():
    assert E.router_mac(0x0102) == "02:fe:00:00:01:02"
    with pytest.raises(SpecError):
        E.router_mac(0)
    e = E.qp_map_entry("10.0.0.1", "10.0.0.2", 0x456, 0x123)
    assert e.render() == "table_add qp_map set_sender_qp 10.0.0.1 10.0.0.2 1110 => 291"
    with pytest.raises(SpecError):
        E.qp_map_entry("10.0.0.1", "10.0.0.2", 1 << 24, 1)
    with pytest.raises(SpecError):
        E.qp_map_entry("10.0.0", "10.0.0.2", 1, 1)


def test_pfc_port_config_renders_set_pfc():
    cfg = E.PfcPortConfig(xoff_bytes=100_000, xon_bytes=97_000, limit_bytes=160_000, quanta=65535,
                          refresh_us=20_000)
    assert cfg.params() == ("100000", "97000", "160000", "65535", "20000")
    assert [e.render() for e in E.pfc_entries(7, cfg)] == [
        "table_add pfc_config set_pfc 7 => 100000 97000 160000 65535 20000"]
    # xon == xoff is allowed (XON as soon as the queue is below PAUSE's threshold again)
    assert E.PfcPortConfig(3000, 3000, 3001, 1, 1).xon_bytes == 3000
    with pytest.raises(SpecError) as err:
        E.pfc_entries(512, cfg)
    assert err.value.field == "pfc.port"


@pytest.mark.parametrize("bad,field", [
    (dict(xon_bytes=100_001), "pfc.xon_bytes"), (dict(limit_bytes=100_000), "pfc.limit_bytes"),
    (dict(quanta=0), "pfc.quanta"), (dict(quanta=65536), "pfc.quanta"), (dict(quanta=True), "pfc.quanta"),
    (dict(refresh_us=0), "pfc.refresh_us"), (dict(xoff_bytes=1 << 32), "pfc.xoff_bytes"),
    (dict(limit_bytes=1 << 32), "pfc.limit_bytes"), (dict(xon_bytes=-1), "pfc.xon_bytes"),
    (dict(xoff_bytes=100e3), "pfc.xoff_bytes"), (dict(refresh_us=1 << 32), "pfc.refresh_us")])
def test_pfc_port_config_rejects_bad_values_naming_the_field(bad, field):
    with pytest.raises(SpecError) as err:
        E.PfcPortConfig(**{"xoff_bytes": 100_000, "xon_bytes": 97_000, "limit_bytes": 160_000, "quanta": 65535,
                           "refresh_us": 20_000, **bad})
    assert err.value.field == field


def test_pfc_priority_entries_one_per_lossless_dscp():
    from testbed.pfc.config import default_dscp_map

    default = dict(enumerate(default_dscp_map()))
    lines = [e.render() for e in E.pfc_priority_entries(default, [3])]
    assert lines == [f"table_add pfc_priority set_lossless {d} => 3" for d in range(24, 32)]
    # an override moves DSCP 26 alone to priority 5; two lossless priorities, sorted by DSCP
    custom = {26: 5, 0: 0, 48: 6, 10: 1}
    assert [e.render() for e in E.pfc_priority_entries(custom, (5, 6))] == [
        "table_add pfc_priority set_lossless 26 => 5", "table_add pfc_priority set_lossless 48 => 6"]
    assert E.pfc_priority_entries(default, []) == []
    for args, field in ((({64: 3}, [3]), "pfc.dscp.64"), (({26: 8}, [3]), "pfc.dscp.26"),
                        (({26: 3}, [9]), "pfc.priorities")):
        with pytest.raises(SpecError) as err:
            E.pfc_priority_entries(*args)
        assert err.value.field == field


class _Route:
    def __init__(self, prefix, group, ports, dest):
        self.prefix, self.group, self.ports, self.dest = prefix, group, ports, dest


def _graph():
    G = nx.Graph()
    G.add_node("h1", role="host", mac="02:0a:00:00:00:01", ip="10.0.0.1")
    G.add_node("h2", role="host", mac="02:0a:00:00:00:02", ip="10.0.0.2")
    G.add_node("s1", role="tor", dpid=1)
    G.add_edge("h1", "s1", ports={"h1": 1, "s1": 1})
    G.add_edge("h2", "s1", ports={"h2": 1, "s1": 2})
    return G


def test_fabric_program_from_routes():
    G = _graph()
    routes = [_Route("10.0.0.2/32", 2, (2,), "h2"), _Route("10.0.0.1/32", 1, (1,), "h1")]
    prog = E.fabric_program(G, "s1", routes, ecn=E.EcnConfig(2, 8, mode="both"))
    text = prog.render().splitlines()
    assert text[0] == "table_set_default switch_config set_router_mac 02:fe:00:00:00:01"
    # routes sorted by group; dmac is the destination host's MAC
    assert text[1] == "table_add ipv4_lpm set_ecmp_group 10.0.0.1/32 => 1 1"
    assert text[2] == "table_add ecmp_nhop set_nhop 1 0 => 1 02:fe:00:00:00:01 02:0a:00:00:00:01"
    assert "table_set_default ecn_config set_ecn 2 8 65536 3 50" in text
    assert text[-2:] == ["mirroring_add 1 1", "mirroring_add 2 2"]


def test_fabric_program_with_pfc():
    G = _graph()
    cfg = E.PfcPortConfig(30_000, 27_000, 60_000, 65535, 10_000)
    prog = E.fabric_program(G, "s1", [_Route("10.0.0.2/32", 2, (2,), "h2")], pfc_ports={2: cfg, 1: cfg},
                            pfc_lossless=[3])
    text = prog.render().splitlines()
    # default DSCP map: DSCP 24..31 -> priority 3; the ports' thresholds in port order
    assert [t for t in text if "pfc_priority" in t] == [
        f"table_add pfc_priority set_lossless {d} => 3" for d in range(24, 32)]
    assert [t for t in text if "pfc_config" in t] == [
        "table_add pfc_config set_pfc 1 => 30000 27000 60000 65535 10000",
        "table_add pfc_config set_pfc 2 => 30000 27000 60000 65535 10000"]
    only26 = E.fabric_program(G, "s1", [], pfc_dscp={26: 3, 48: 6}, pfc_lossless=[3])
    assert [e.render() for e in only26.entries if e.table == "pfc_priority"] == [
        "table_add pfc_priority set_lossless 26 => 3"]
    # no PFC asked for: no PFC entry (the program of a switch without PFC is unchanged)
    assert not [e for e in E.fabric_program(G, "s1", []).entries if e.table.startswith("pfc_")]


def test_fabric_program_with_the_routing_brain():
    brain_mod = pytest.importorskip("testbed.routing.brain")
    G = _graph()
    brain = brain_mod.RoutingBrain(G)
    brain.compute_all(0.0)
    routes = brain.tables()["s1"].values()
    prog = E.fabric_program(G, "s1", routes)
    lpm = [e for e in prog.entries if e.table == "ipv4_lpm"]
    assert sorted(e.match[0] for e in lpm) == ["10.0.0.1/32", "10.0.0.2/32"]


def test_fabric_program_needs_dest_mac_and_dpid():
    G = _graph()
    del G.nodes["h2"]["mac"]
    with pytest.raises(SpecError):
        E.fabric_program(G, "s1", [_Route("10.0.0.2/32", 2, (2,), "h2")])
    del G.nodes["s1"]["dpid"]
    with pytest.raises(SpecError):
        E.fabric_program(G, "s1", [])


def test_defines_are_flags_in_the_cache_key():
    from testbed.p4rt.compile import BASE_FLAGS, P4CompileError, cache_key, define_flags

    assert define_flags({"B": 2, "A": 1}) == ("-DA=1", "-DB=2")
    assert define_flags(None) == ()
    plain = cache_key(b"p", [], "v", BASE_FLAGS)
    assert cache_key(b"p", [], "v", BASE_FLAGS + define_flags({"AGG_ELEMS": 64})) != plain
    with pytest.raises(P4CompileError, match="identifier"):
        define_flags({"A B": 1})


def test_plan_ecn_entry_becomes_the_switch_config():
    from testbed.p4rt.entries import MODES, ecn_config
    from testbed.plan import EcnEntry

    cfg = ecn_config(EcnEntry(10, 40, 0.2, "fast-cnp", 50e-6, 0.05))
    assert cfg.params() == ("10", "40", str(round(0.2 * 65536)), str(MODES["fast-cnp"]), "50000")
    assert ecn_config(None).mode == "off"


def test_switches_run_niced_so_endpoint_bursts_do_not_stall_the_data_plane(monkeypatch):
    import os

    from testbed.p4rt.switch import SWITCH_NICE, niced

    argv = ["simple_switch_fast", "--thrift-port", "9090", "prog.json"]
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert SWITCH_NICE < 0
    assert niced(argv) == ["nice", "-n", str(SWITCH_NICE), *argv]      # nice execs: the pid is the switch's
    assert niced(argv, 0) == argv
    monkeypatch.setattr(os, "geteuid", lambda: 1000)                   # raising priority needs root
    assert niced(argv) == argv
