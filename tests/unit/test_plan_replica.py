"""The replica plan of every shipped spec, checked against invariants computed here from the spec itself
(not from the plan's code): BDP in packets real vs emulated, timers x scale, rates / scale, every
``buffer:``/``queue:`` present, one allocator's numbers unique; and settings that cannot take effect are
refused or noted with the backend's floor."""

from __future__ import annotations

import json
import time

import networkx as nx
import pytest
import yaml

from testbed.errors import SpecError
from testbed.links.model import LinkParams, RedParams
from testbed.plan import DELAY_FLOOR_S, Capabilities, Overrides, plan_replica
from testbed.topo.builder import set_link
from testbed.topo.spec import build_graph, load_spec, shipped_specs
from testbed.units import parse_distance, parse_rate, parse_size

SPECS = shipped_specs()
NETEM = Capabilities(netem=True, red=True, source="test")


@pytest.fixture(scope="module", params=sorted(SPECS))
def shipped(request):
    path = SPECS[request.param]
    raw = yaml.safe_load(path.read_text())
    G = build_graph(load_spec(path))
    return raw, G, plan_replica(G)


def test_every_shipped_spec_plans_in_milliseconds():
    for path in SPECS.values():
        G = build_graph(load_spec(path))
        t0 = time.perf_counter()
        plan_replica(G)
        budget = max(1.0, G.number_of_edges() / 1000)  # 1 s, or 1 ms a link (fat-tree k=16: 3,072 links)
        assert time.perf_counter() - t0 < budget, path  # pure: no probes, no processes


def test_rates_divided_delays_multiplied_bdp_in_packets_kept(shipped):
    raw, G, plan = shipped
    scale = plan.scale
    if raw.get("scale") not in (None, "auto"):
        assert scale == raw["scale"]
    mtu = raw.get("mtu", 1500)
    for e in plan.links:
        attrs = G.edges[e.u, e.v]
        real_rate, real_delay = attrs["rate_bps"], attrs["delay_s"]
        assert e.emulated.rate_bps == pytest.approx(real_rate / scale, rel=1e-9)
        assert e.emulated.one_way_delay_s == pytest.approx(real_delay * scale, rel=1e-9, abs=1e-15)
        real_bdp = real_rate * 2 * real_delay / (8 * mtu)
        emulated_bdp = e.emulated.rate_bps * 2 * e.emulated.one_way_delay_s / (8 * mtu)
        assert emulated_bdp == pytest.approx(real_bdp, rel=0.01)
        if e.backend in ("htb", "netem") and e.applied.rate_bps:
            assert e.applied.rate_bps == pytest.approx(real_rate / scale)


def test_tier_rates_and_distances_written_in_the_spec_reach_the_plan(shipped):
    raw, G, plan = shipped
    tiers = raw.get("links") or {}
    for e in plan.links:
        block = {**(tiers.get("default") or {}), **(tiers.get(e.tier) or {})}
        if "rate" in block and raw.get("params", {}).get("oversubscription") is None:
            assert e.real.rate_bps == pytest.approx(parse_rate(block["rate"], "rate"))
        if "distance" in (tiers.get(e.tier) or {}):
            metres = parse_distance(tiers[e.tier]["distance"], "distance")
            assert e.real.one_way_delay_s == pytest.approx(metres * 5e-9)


def test_every_buffer_and_queue_is_in_the_plan(shipped):
    raw, G, plan = shipped
    mtu = raw.get("mtu", 1500)
    frame = mtu + 14
    tiers = raw.get("links") or {}
    buffer = parse_size(raw["buffer"], "buffer") if raw.get("buffer") else None
    for s in plan.switches:
        for p in s.ports:
            tier = G.edges[s.node, p.peer]["tier"]
            queue = (tiers.get(tier) or {}).get("queue", (tiers.get("default") or {}).get("queue"))
            if queue is not None:
                want = queue if isinstance(queue, int) else (
                    int(str(queue).rstrip("p")) if str(queue).rstrip("p").isdigit()
                    else int(parse_size(queue, "queue") // frame))
                assert (p.depth_pkts, p.depth_source) == (want, "link queue"), (s.node, p)
            elif buffer is not None:
                assert (p.depth_pkts, p.depth_source) == (int(buffer // frame), "buffer"), (s.node, p)
            else:
                assert (p.depth_pkts, p.depth_source) == (1000, "default")
    for e in plan.links:
        if e.backend == "htb":
            limit = [a for _, argvs in e.tc for a in argvs if "pfifo" in a or "bfifo" in a]
            assert len(limit) == len(e.tc), e  # every shaped end has the queue as its leaf


def test_every_delay_is_emulated_or_noted_with_its_floor(shipped):
    _, _, plan = shipped
    for e in plan.links:
        d = e.emulated.one_way_delay_s
        if e.applied.one_way_delay_s == pytest.approx(d) or e.backend == "none" and not d:
            continue
        assert any("floor" in n and "us" in n for n in e.notes), e
        floor = DELAY_FLOOR_S["userspace"]
        assert d < floor


def test_one_allocator_numbers_are_unique(shipped):
    _, G, plan = shipped
    dpids = [s.dpid for s in plan.switches] + [e.via_dpid for e in plan.links if e.via]
    assert len(dpids) == len(set(dpids))
    names = [s.name for s in plan.switches] + [h.name for h in plan.endpoints] + [e.via for e in plan.links if e.via]
    assert len(names) == len(set(names)) and all(len(n) + len("-eth99") <= 15 for n in names)
    intfs = [i for e in plan.links for i in (e.intf_u, e.intf_v)]
    assert len(intfs) == len(set(intfs))
    assert len({h.ip for h in plan.endpoints}) == len(plan.endpoints)
    thrift = [s.thrift_port for s in plan.switches if s.kind == "bmv2"]
    assert len(thrift) == len(set(thrift))


def test_dcqcn_timers_times_scale_rates_divided(shipped):
    _, G, plan = shipped
    for h in plan.endpoints:
        rate = G.edges[h.node, next(iter(G.neighbors(h.node)))]["rate_bps"]
        real, emu = h.real_dcqcn, h.emulated_dcqcn
        assert real["line_rate"] == rate and emu["line_rate"] == pytest.approx(rate / plan.scale)
        for timer in ("alpha_timer", "rate_increase_timer", "cnp_interval"):
            assert emu[timer] == pytest.approx(real[timer] * plan.scale)
        assert emu["byte_counter"] == real["byte_counter"]  # bytes are kept
        assert h.emulated_qp_timeout_s == pytest.approx(h.real_qp_timeout_s * plan.scale)


def test_plan_json_round_trips_through_json(shipped):
    _, _, plan = shipped
    doc = json.loads(json.dumps(plan.to_json()))
    assert len(doc["links"]) == len(plan.links) and doc["scale"] == plan.scale
    for link in doc["links"]:
        assert link["real"]["rate_bps"] * 1 == pytest.approx(link["emulated"]["rate_bps"] * plan.scale)


def test_p4_replica_gets_bmv2_queue_rate_and_depth_from_the_plan():
    plan = plan_replica(build_graph(load_spec(SPECS["long-haul"])))
    for s in plan.switches:
        assert s.kind == "bmv2" and s.program == "fabric"
        for p in s.ports:
            assert p.emulated_rate_pps == round(p.real_rate_bps / plan.scale / (8 * plan.frame_bytes))
    long_haul = next(e for e in plan.links if e.tier == "dci")
    # both ends BMv2: they drain their own queues; the delay line only delays
    assert long_haul.backend == "userspace" and long_haul.applied.rate_bps is None
    assert long_haul.applied.one_way_delay_s == pytest.approx(30e3 * 5e-9 * plan.scale)


def test_serialise_puts_a_link_node_that_serialises_on_every_link_with_a_rate():
    """Without it a 0 km long haul between two BMv2 switches is a plain veth (BMv2 paces, the frame arrives
    at the start of its turn); with it, a link node at BMv2's own drain rate (whole packets per second from
    the frame size, computed here) adds each frame's serialisation, and a 3 m host link gets one too."""
    G = build_graph(load_spec(SPECS["long-haul"]))
    for u, v, d in G.edges(data=True):
        if d.get("tier") == "dci":
            set_link(G, u, v, distance_m=0.0)
    plain = plan_replica(G)
    haul = next(e for e in plain.links if e.tier == "dci")
    assert haul.backend == "none" and haul.via is None
    plan = plan_replica(G, overrides=Overrides(serialise=True))
    haul = next(e for e in plan.links if e.tier == "dci")
    pps = round(10e9 / plan.scale / (8 * plan.frame_bytes))
    assert haul.backend == "userspace" and haul.via is not None and "serialis" in haul.reason
    assert haul.applied.rate_bps == pytest.approx(pps * 8 * plan.frame_bytes)
    assert haul.applied.rate_bps >= 10e9 / plan.scale          # never slower than BMv2 drains: its queue stays
    hosts = [e for e in plan.links if e.tier == "host"]
    assert hosts and all(e.backend == "userspace" and e.via is not None and e.applied.rate_bps for e in hosts)
    # on netem: no link node, netem's own rate serialises each frame, a BMv2 end at BMv2's drain rate
    set_link(G, "d0", "d1", distance_m=30e3)
    netem = plan_replica(G, NETEM, Overrides(serialise=True))
    haul = next(e for e in netem.links if e.tier == "dci")
    assert haul.backend == "netem" and haul.via is None
    for node in ("d0", "d1"):
        (argv,) = dict(haul.tc)[node]
        assert argv[argv.index("rate") + 1] == f"{pps * 8 * plan.frame_bytes}bit" and "tbf" not in argv
    assert any("store and forward" in n for n in haul.notes)
    assert all("tbf" not in argv for e in netem.links if e.backend == "netem" for _, argvs in e.tc for argv in argvs)
    # without serialise: netem delays, BMv2 paces, nothing serialises
    plain = next(e for e in plan_replica(G, NETEM).links if e.tier == "dci")
    assert all("rate" not in argv for _, argvs in plain.tc for argv in argvs)


def test_serialise_on_netem_keeps_tbf_where_kernel_red_marks():
    G = _two_switches(rate_bps=1e9, delay_s=1e-3, red=RedParams(20, 60, 0.1, unit="packets"))
    e = plan_replica(G, NETEM, Overrides(serialise=True)).links[0]
    assert e.backend == "netem" and any("tbf" in argv for _, argvs in e.tc for argv in argvs)
    assert any("serialisation latency not emulated at the a and b ends" in n for n in e.notes), e.notes


def _two_switches(**link) -> nx.Graph:
    G = nx.Graph(name="t", scale=10.0)
    G.add_node("a", role="leaf", tier=1)
    G.add_node("b", role="leaf", tier=1)
    G.add_edge("a", "b", ports={"a": 1, "b": 1}, tier="leaf-spine", link=LinkParams(**link))
    return G


def test_backend_follows_capabilities_given_as_data():
    G = _two_switches(rate_bps=1e9, delay_s=1e-3, red=RedParams(20, 60, 0.1, unit="packets"))
    assert plan_replica(G).links[0].backend == "userspace"
    assert "lacks sch_netem" in plan_replica(G).links[0].reason
    netem = plan_replica(G, NETEM).links[0]
    assert netem.backend == "netem" and {n for n, _ in netem.tc} == {"a", "b"}
    assert any("red" in argv for _, argvs in netem.tc for argv in argvs)
    assert plan_replica(G, Capabilities(netem=True, red=False)).links[0].backend == "userspace"
    assert plan_replica(G, NETEM, Overrides(link_backend="userspace")).links[0].backend == "userspace"
    with pytest.raises(SpecError, match="link_backend"):
        plan_replica(G, Capabilities(), Overrides(link_backend="netem"))


def test_rate_only_link_is_htb_with_its_queue():
    plan = plan_replica(_two_switches(rate_bps=1e9, limit=64))
    e = plan.links[0]
    assert e.backend == "htb"
    for _, argvs in e.tc:
        assert ["tc", "class", "replace"] == list(argvs[1][:3]) and "100000000bit" in argvs[1]
        assert list(argvs[2][-3:]) == ["pfifo", "limit", "64"]


def test_short_delay_is_noted_with_the_floor_not_dropped_silently():
    e = plan_replica(_two_switches(rate_bps=1e9, delay_s=2e-6)).links[0]  # 20 us emulated
    assert e.backend == "htb" and e.applied.one_way_delay_s == 0
    assert "20 us" in e.notes[0] and "floor of 100 us" in e.notes[0]
    assert plan_replica(_two_switches(rate_bps=1e9, delay_s=2e-6), NETEM).links[0].backend == "netem"


def test_settings_no_backend_can_honour_are_refused_naming_the_field():
    with pytest.raises(SpecError, match="links.leaf-spine.red"):
        plan_replica(_two_switches(delay_s=1e-3, red=RedParams(20, 60, 0.1, unit="packets")))
    with pytest.raises(SpecError, match="links.leaf-spine.rate"):
        plan_replica(_two_switches(rate_bps=50e3), overrides=Overrides(scale=100))  # 500 bit/s emulated
    G = _two_switches(rate_bps=1e9)
    G.edges["a", "b"]["rate_bps"] = 5e9  # changed without set_link: the plan refuses to guess
    with pytest.raises(SpecError, match="rate_bps"):
        plan_replica(G)


def test_set_link_keeps_edge_attributes_in_step():
    from testbed.topo.builder import set_link

    G = _two_switches(rate_bps=1e9, delay_s=1e-3)
    set_link(G, "a", "b", rate_bps=4e9)
    assert G.edges["a", "b"]["rate_bps"] == 4e9 and plan_replica(G).links[0].real.rate_bps == 4e9
    set_link(G, "a", "b", distance_m=1000)
    assert plan_replica(G).links[0].real.one_way_delay_s == pytest.approx(5e-6)


def test_links_off_and_rates_modes_say_what_they_leave_out():
    G = _two_switches(rate_bps=1e9, delay_s=1e-3)
    off = plan_replica(G, overrides=Overrides(links="off"))
    assert off.links[0].backend == "none" and not off.links[0].tc and "not emulated" in off.notes[0]
    rates = plan_replica(G, overrides=Overrides(links="rates")).links[0]
    assert rates.backend == "htb" and "delay not emulated" in rates.notes[0]


def test_ovs_datapath_comes_from_capabilities():
    G = _two_switches(rate_bps=1e9)
    assert {s.datapath for s in plan_replica(G).switches} == {"user"}
    assert {s.datapath for s in plan_replica(G, Capabilities(ovs_kernel=True)).switches} == {"kernel"}


def test_thrift_ports_skip_ports_in_use():
    G = _two_switches(rate_bps=1e9)
    for n in G:
        G.nodes[n]["p4"] = "fabric"
    plan = plan_replica(G, Capabilities(tcp_ports_in_use=frozenset({9090, 9092})))
    assert [s.thrift_port for s in plan.switches] == [9091, 9093]
    assert [s.device_id for s in plan.switches] == [1, 2]


def test_ocs_nodes_are_external_switches_built_by_the_run():
    G = _two_switches(rate_bps=1e9)
    G.nodes["b"]["role"] = "ocs"
    kinds = {s.node: s.kind for s in plan_replica(G).switches}
    assert kinds == {"a": "ovs", "b": "external"}
    from testbed.emu.replica import Replica

    with pytest.raises(SpecError, match="switch_factory"):
        Replica(plan_replica(G))


# -- the spec's pfc: block (testbed/plan/pfc.py) --------------------------------------------------------------
def _pfc_plan(buffer: str, pfc: dict, overrides: Overrides | None = None):
    from testbed.topo.spec import parse_spec

    doc = {"name": "sl-pfc", "kind": "spine-leaf", "params": {"leaves": 2, "spines": 2, "hosts_per_leaf": 2,
                                                             "oversubscription": 1},
           "links": {"host": {"rate": "100G", "distance": "2m"}, "leaf-spine": {"distance": "10km"}},
           "buffer": buffer, "scale": 1000, "pfc": pfc}
    return plan_replica(build_graph(parse_spec(doc)), overrides=overrides)


def _by_hand(rate_bps: float, one_way_s: float, mtu: int = 1500) -> float:
    """802.1Qbb headroom written out: crossing + own + peer frame, the PAUSE, the cable both ways, and the
    sender's response (394 quanta of 512 bits at 100G, IEEE 802.3 31B.3.7)."""
    frame = mtu + 38
    return 3 * frame + 84 + 2 * one_way_s * rate_bps / 8 + 394 * 512 / 8


def test_pfc_block_is_planned_per_switch_port_and_applied_on_an_ovs_fabric():
    plan = _pfc_plan("2MB", {"priorities": [3], "xoff": "100KB"})
    pfc = plan.pfc
    assert pfc is not None and pfc.applied is True
    assert pfc.note in plan.notes and plan.warnings == () and "applied in the link nodes" in pfc.note
    # every link is a link node (host links too: they carry the NIC side), chosen because of pfc:
    assert {e.backend for e in plan.links} == {"userspace"} and all(e.via for e in plan.links)
    assert all(e.reason.startswith("pfc:") for e in plan.links)
    # every switch port and nothing else: 2 leaves x (2 hosts + 2 spines) + 2 spines x 2 leaves
    assert sorted((str(p.node), p.port) for p in pfc.ports) == sorted(
        (str(s.node), p.port) for s in plan.switches for p in s.ports)
    assert len(pfc.ports) == 12
    for p in pfc.ports:
        e = plan.link(p.node, p.peer)
        assert p.headroom_bytes == pytest.approx(_by_hand(100e9, e.real.one_way_delay_s))
        assert p.fits_buffer is (100e3 + p.headroom_bytes <= 2e6)
    host_port = next(p for p in pfc.ports if str(p.peer).startswith("h"))
    uplink = next(p for p in pfc.ports if not str(p.peer).startswith("h"))
    assert host_port.headroom_bytes == pytest.approx(30_164)          # 2 m: the response term dominates
    assert uplink.headroom_bytes == pytest.approx(1_279_914)          # 10 km: 1.25 MB of cable
    doc = json.loads(json.dumps(plan.to_json()))
    assert doc["pfc"]["applied"] is True and doc["pfc"]["config"]["priorities"] == [3]
    assert doc["pfc"]["config"]["xoff_bytes"] == 100e3 and len(doc["pfc"]["ports"]) == 12
    assert doc["pfc"]["max_headroom_bytes"] == pytest.approx(1_279_914) and doc["pfc"]["ports_over_buffer"] == 0
    assert doc["warnings"] == [] and pfc.note in doc["notes"]
    assert len(doc["pfc"]["links"]) == 8 and len(doc["pfc"]["relays"]) == 12


def test_pfc_pauses_follow_the_routes_and_each_egress_holds_its_feeders_headroom():
    """spine-leaf 2x2, 2 hosts per leaf: a leaf's uplink is fed by its hosts only (up-down routing never
    sends spine -> leaf -> spine), a spine's downlink by the other leaf, a host port by everything else on
    the leaf. Each egress's headroom is the sum of its feeders' port headrooms (by hand: 30,164 B per 2 m
    host port, 1,279,914 B per 10 km uplink) plus, per feeder, what the userspace switch may hold back
    (100 Mbit/s emulated x SWITCH_LAG_S), reported apart; the host side of a host link is the NIC."""
    from testbed.pfc.config import NIC_LIMIT_BYTES, NIC_XOFF_BYTES
    from testbed.plan.pfc import SWITCH_LAG_S

    plan = _pfc_plan("2MB", {"priorities": [3], "xoff": "100KB"})
    pfc = plan.pfc
    host_hr, up_hr, lag = _by_hand(100e9, 10e-9), _by_hand(100e9, 50e-6), 100e6 / 8 * SWITCH_LAG_S

    def physics(side):
        assert side.allowance_bytes == pytest.approx(len(side.feeders) * lag)
        return side.headroom_bytes - side.allowance_bytes

    up = pfc.link("l0", "s0")
    assert set(up.ab.feeders) == {"h0", "h1"} and physics(up.ab) == pytest.approx(2 * host_hr)
    assert set(up.ba.feeders) == {"l1"} and physics(up.ba) == pytest.approx(up_hr)
    down = pfc.link("l0", "h0")
    assert set(down.ab.feeders) == {"h1", "s0", "s1"}
    assert physics(down.ab) == pytest.approx(host_hr + 2 * up_hr) and down.ab.role == "switch"
    assert down.ab.to_json()["physics_headroom_bytes"] == pytest.approx(host_hr + 2 * up_hr)
    assert (down.ba.role, down.ba.xoff_bytes, down.ba.headroom_bytes) == ("nic", NIC_XOFF_BYTES,
                                                                           NIC_LIMIT_BYTES - NIC_XOFF_BYTES)
    assert down.ab.xoff_bytes == 100e3 and down.ab.xon_bytes == pfc.config.xon_bytes
    args = down.port(pfc.config, 1000).linkcore_args()[1]
    assert "xoff=100000.0," in args and f"xoff_ba={NIC_XOFF_BYTES!r}" in args and "scale=1000.0" in args
    # the relay of l0's port towards s0 copies PAUSE to l0's ports towards its hosts, and nowhere else
    relay = next(r for r in pfc.relays if (r.node, r.peer) == ("l0", "s0"))
    e = plan.link("l0", "s0")
    assert relay.dev == (e.intf_u if e.u == "l0" else e.intf_v)
    assert set(relay.targets) == {plan.link("l0", h).intf_u if plan.link("l0", h).u == "l0"
                                  else plan.link("l0", h).intf_v for h in ("h0", "h1")}
    argv = relay.argv()
    assert argv[0] == ["tc", "qdisc", "add", "dev", relay.dev, "clsact"] and "0x8808" in argv[1]
    assert [a for a in argv[1] if a in ("mirror", "redirect")] == ["mirror", "redirect"]


def test_with_host_tier_red_only_the_switch_side_of_a_host_link_marks():
    """A NIC has no AQM: with ``red:`` on the host tier, a host link node's NIC side runs without RED
    (``red_off`` in its --pfc) and its switch side with it; links without red mark on neither side."""
    from testbed.topo.spec import parse_spec

    doc = {"name": "sl-pfc-red", "kind": "spine-leaf", "params": {"leaves": 2, "spines": 2, "hosts_per_leaf": 2,
                                                                 "oversubscription": 1},
           "links": {"host": {"rate": "100G", "distance": "2m", "red": {"kmin": "20p", "kmax": "80p", "pmax": 0.2}},
                     "leaf-spine": {"distance": "10km"}},
           "buffer": "2MB", "scale": 1000, "pfc": {"priorities": [3]}}
    plan = plan_replica(build_graph(parse_spec(doc)))
    pfc = plan.pfc
    assert pfc.applied and len(pfc.links) == 8
    host_links = [lk for lk in pfc.links if "nic" in (lk.ab.role, lk.ba.role)]
    assert len(host_links) == 4
    for lk in host_links:
        assert plan.link(lk.u, lk.v).applied.red is not None and lk.red is True
        nic = [i for i, side in enumerate((lk.ab, lk.ba)) if side.role == "nic"]
        assert len(nic) == 1
        port = lk.port(pfc.config, 1000)
        assert port.red_off == tuple(nic)
        assert port.linkcore_args()[1].endswith(",red_off=" + ("ab", "ba")[nic[0]])
        sides = lk.to_json()
        assert [sides[k]["marks"] for k in ("ab", "ba")] == [i not in nic for i in (0, 1)]
    for lk in pfc.links:
        if lk not in host_links:
            assert lk.red is False and lk.port(pfc.config, 1000).red_off == ()
            assert not lk.to_json()["ab"]["marks"] and not lk.to_json()["ba"]["marks"]
    doc = json.loads(json.dumps(plan.to_json()))
    marks = sorted((lk["ab"]["role"], lk["ab"]["marks"], lk["ba"]["role"], lk["ba"]["marks"])
                   for lk in doc["pfc"]["links"])
    assert marks.count(("switch", True, "nic", False)) + marks.count(("nic", False, "switch", True)) == 4


def test_pfc_on_bmv2_accounts_per_ingress_port_in_fabric_p4_beside_the_link_nodes():
    """BMv2's own egress queue is the congestion point: every BMv2 port gets fabric.p4's ingress accounting
    (xoff/xon of the spec, its own cable's headroom plus the emulator allowance, a refresh at half the pause
    time on BMv2's wall clock), its egress queues hold what all ingress ports may, and the link nodes and
    relays are the OVS fabric's."""
    from testbed.pfc.state import quanta_seconds
    from testbed.plan.pfc import P4_REFRESH_S, SWITCH_LAG_S

    ovs = _pfc_plan("2MB", {"priorities": [3], "xoff": "100KB"})
    plan = _pfc_plan("2MB", {"priorities": [3], "xoff": "100KB"}, Overrides(p4_program="fabric"))
    pfc = plan.pfc
    assert pfc.applied and plan.warnings == () and ovs.pfc.p4 == ()
    assert pfc.relays == () and len(ovs.pfc.relays) == 12      # BMv2 relays in fabric.p4, not by tc
    limit = {(p.node, p.peer): p.limit_bytes for p in pfc.p4}
    for lk, o in zip(pfc.links, ovs.pfc.links, strict=True):
        for (node, _peer), side, oside in (((lk.u, lk.v), lk.ab, o.ab), ((lk.v, lk.u), lk.ba, o.ba)):
            assert (side.role, side.xoff_bytes, side.feeders) == (oside.role, oside.xoff_bytes, oside.feeders)
            # a paused link node behind BMv2 also takes all BMv2 holds for that egress (it cannot stop)
            extra = sum(limit[(node, f)] for f in side.feeders) if side.role == "switch" else 0.0
            assert side.allowance_bytes == pytest.approx(oside.allowance_bytes + extra)
            assert side.headroom_bytes == pytest.approx(oside.headroom_bytes + extra)
    assert sorted((str(p.node), p.port) for p in pfc.p4) == sorted((str(p.node), p.port) for p in pfc.ports)
    need = {(p.node, p.port): p.headroom_bytes for p in pfc.ports}
    for p in pfc.p4:
        rate = plan.link(p.node, p.peer).emulated.rate_bps
        assert (p.xoff_bytes, p.xon_bytes) == (100e3, pfc.config.xon_bytes)
        assert p.allowance_bytes == pytest.approx(rate / 8 * SWITCH_LAG_S) and p.allowance_bytes > 0
        assert p.headroom_bytes == pytest.approx(need[(p.node, p.port)] + p.allowance_bytes)
        assert p.limit_bytes == pytest.approx(100e3 + p.headroom_bytes)
        pause_s = quanta_seconds(pfc.config.quanta, plan.link(p.node, p.peer).real.rate_bps, plan.dilation)
        assert p.refresh_us == round(min(pause_s / 2, P4_REFRESH_S) * 1e6) == 5_000 < pause_s / 2 * 1e6
    for s in plan.switches:
        total = sum(p.limit_bytes for p in pfc.p4_ports(s.node))
        assert all(q.depth_pkts * plan.frame_bytes >= total and q.depth_source == "pfc" for q in s.ports)
    doc = plan.to_json()["pfc"]
    assert len(doc["p4"]) == len(pfc.ports) and doc["p4"][0]["refresh_us"] == pfc.p4[0].refresh_us


def test_pfc_not_applied_where_the_replica_cannot_and_refused_with_netem():
    rates = _pfc_plan("2MB", {"priorities": [3]}, Overrides(links="rates"))
    assert rates.pfc.applied is False and "overrides.links=rates" in rates.pfc.note
    with pytest.raises(SpecError) as err:
        _pfc_plan("2MB", {"priorities": [3]}, Overrides(link_backend="netem"))
    assert err.value.field == "link_backend" and "netem cannot pause" in str(err.value)


def test_pfc_ports_whose_headroom_overflows_the_buffer_are_flagged():
    plan = _pfc_plan("1MB", {"priorities": [3]})                      # 100 KB + 1.28 MB > 1 MB on uplinks
    over = plan.pfc.over_buffer
    assert len(over) == 8 and all(not str(p.peer).startswith("h") for p in over)
    assert plan.to_json()["pfc"]["ports_over_buffer"] == 8


def test_fixed_pfc_headroom_is_reported_with_what_auto_would_give():
    plan = _pfc_plan("2MB", {"priorities": [3, 4], "headroom": "200KB"})
    uplink = next(p for p in plan.pfc.ports if not str(p.peer).startswith("h"))
    assert uplink.headroom_bytes == 200e3 and uplink.detail["fixed"] is True
    assert uplink.detail["auto_bytes"] == pytest.approx(1_279_914) and uplink.fits_buffer is True


def test_a_spec_without_pfc_has_no_pfc_block_and_no_warning():
    plan = plan_replica(build_graph(load_spec(SPECS["spine-leaf"])))
    assert plan.pfc is None and plan.warnings == ()
    assert plan.to_json()["pfc"] is None and not any("pfc" in n for n in plan.notes)
