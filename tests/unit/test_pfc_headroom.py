"""Headroom from physics against values computed by hand (docs/pfc.md gives the formula)."""

from __future__ import annotations

import pytest

from testbed.pfc.config import PfcConfig
from testbed.pfc.headroom import headroom, headroom_for_distance, port_headrooms, response_quanta
from testbed.topo.spec import build_graph, parse_spec

# By hand, MTU 1500 (frame on the wire 1500 + 38 = 1538 B):
#   100G: 12.5e9 B/s; response 394 quanta * 64 B = 25,216 B; fixed part 3*1538 + 84 + 25,216 = 29,914 B
#         cable 2 * 5 us/km * d * 12.5e9 B/s = 125,000 B per km
#   400G: 50e9 B/s; response 905 quanta * 64 B = 57,920 B; fixed part 3*1538 + 84 + 57,920 = 62,618 B
#         cable 500,000 B per km
HAND = [
    (100e9, 0, 29_914), (100e9, 10, 1_279_914), (100e9, 30, 3_779_914), (100e9, 100, 12_529_914),
    (400e9, 0, 62_618), (400e9, 10, 5_062_618), (400e9, 30, 15_062_618), (400e9, 100, 50_062_618),
]


@pytest.mark.parametrize("rate,km,expected", HAND, ids=[f"{r / 1e9:g}G-{k}km" for r, k, _ in HAND])
def test_headroom_matches_hand_computation(rate, km, expected):
    assert headroom_for_distance(rate, km * 1000.0).total == expected


def test_thirty_km_at_100g_needs_megabytes_and_grows_linearly_with_distance():
    h30 = headroom_for_distance(100e9, 30e3)
    assert 3.5e6 < h30.total < 4e6
    h60 = headroom_for_distance(100e9, 60e3)
    assert h60.cable == pytest.approx(2 * h30.cable)
    assert h30.cable / h30.total > 0.99                      # distance dominates a DCI link


def test_terms_mtu_and_response():
    h = headroom(100e9, 0.0, mtu=9000)
    assert (h.crossing_frame, h.own_frame, h.peer_frame, h.pause_frame) == (9038, 9038, 9038, 84)
    assert h.total == 3 * 9038 + 84 + 25_216
    assert headroom(100e9, 0.0, response_time_s=1e-6).response == pytest.approx(12_500)   # 1 us at 100G
    assert headroom(100e9, 0.0, interface_delay_s=100e-9).interface == pytest.approx(2 * 1250)
    assert response_quanta(100e9) == 394 and response_quanta(400e9) == 905
    assert response_quanta(150e9) == 453                     # between entries: the faster, larger bound
    assert response_quanta(1.6e12) == 905                    # beyond the table: its last entry
    with pytest.raises(ValueError):
        headroom(0, 0.0)
    with pytest.raises(ValueError):
        headroom(100e9, -1.0)


def test_port_headrooms_per_port_from_the_graph():
    spec = parse_spec({
        "name": "cc", "kind": "cross-campus", "pfc": {"priorities": [3]},
        "params": {"campuses": [{"kind": "big-switch", "params": {"hosts": 1}},
                                {"kind": "big-switch", "params": {"hosts": 1}}], "distance": "30km"},
        "links": {"default": {"rate": "100G"}}})
    G = build_graph(spec)
    ports = port_headrooms(G, spec.pfc)
    dci = [(a, b) for a, b, d in G.edges(data=True) if d["tier"] == "dci"]
    assert len(dci) == 1
    a, b = dci[0]
    for node in (a, b):
        doc = ports[node][G.edges[a, b]["ports"][node]]
        assert doc["bytes"] == 3_779_914                      # 30 km at 100G, as by hand above
    host_edge = next((u, v) for u, v, d in G.edges(data=True) if d["tier"] == "host")
    u, v = host_edge
    short = ports[u][G.edges[u, v]["ports"][u]]["bytes"]
    assert 29_914 <= short < 40_000                          # a few metres of cable
    fixed = port_headrooms(G, PfcConfig(headroom_bytes=1e6))
    assert fixed[a][G.edges[a, b]["ports"][a]] == {"bytes": 1e6, "fixed": True, "auto_bytes": 3_779_914,
                                                    "rate_bps": 100e9, "one_way_delay_s": pytest.approx(150e-6)}
    assert "fits_buffer" not in fixed[a][G.edges[a, b]["ports"][a]]      # the spec sets no buffer


def test_a_long_haul_port_that_cannot_hold_its_headroom_is_flagged():
    spec = parse_spec({
        "name": "cc", "kind": "cross-campus", "buffer": "2MB", "pfc": {"xoff": "100KB"},
        "params": {"campuses": [{"kind": "big-switch", "params": {"hosts": 1}},
                                {"kind": "big-switch", "params": {"hosts": 1}}], "distance": "30km"},
        "links": {"default": {"rate": "100G"}}})
    G = build_graph(spec)
    docs = [(G.edges[a, b]["tier"], d) for a, b in G.edges for node in (a, b)
            for d in [port_headrooms(G, spec.pfc)[node][G.edges[a, b]["ports"][node]]]]
    assert {t: d["fits_buffer"] for t, d in docs} == {"dci": False, "campus-dci": True, "host": True}
