"""Frame conservation per element and wire (testbed.links.hops), the places it names in a trial's ledger
(testbed.validate.trial_ledger.places), link-node stats over one trial, and the BMv2 ring counters."""

from __future__ import annotations

from testbed.links import accounting
from testbed.links.hops import Element, delta, hop_ledger, parse_proc_net_dev
from testbed.p4rt.rx import ring_drops
from testbed.validate import trial_ledger as TL

PROC_NET_DEV = """Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:    1000      10    0    0    0     0          0         0     1000      10    0    0    0     0       0          0
x0-eth1: 2000000    1900    1    2    0     0          0         0    70000      70    0    3    0     0       0          0
"""


def test_parse_proc_net_dev_reads_packets_errors_and_drops():
    got = parse_proc_net_dev(PROC_NET_DEV)
    assert got["x0-eth1"] == {"rx_packets": 1900, "rx_errors": 1, "rx_dropped": 2, "tx_packets": 70,
                              "tx_errors": 0, "tx_dropped": 3}
    assert set(got) == {"lo", "x0-eth1"}


def _c(rx=0, tx=0):
    return {"rx_packets": rx, "rx_errors": 0, "rx_dropped": 0, "tx_packets": tx, "tx_errors": 0, "tx_dropped": 0}


def _chain(sw_out: int, wire_rx: int, counted: int = 0, generated: int = 0):
    """h0 -> s1 -> h1: h0 sends 100, s1 receives 100 and sends sw_out, h1 receives wire_rx."""
    elements = [Element("h0", "host", ("h0/h0-eth0",)), Element("s1", "switch", ("root/s1-eth1", "root/s1-eth2")),
                Element("h1", "host", ("h1/h1-eth0",))]
    wires = [("h0/h0-eth0", "root/s1-eth1"), ("root/s1-eth2", "h1/h1-eth0")]
    counters = {"h0/h0-eth0": _c(tx=100), "root/s1-eth1": _c(rx=100), "root/s1-eth2": _c(tx=sw_out),
                "h1/h1-eth0": _c(rx=wire_rx)}
    return hop_ledger(elements, wires, counters, {"s1": counted}, {"s1": generated})


def test_a_balanced_chain_has_nothing_missing():
    assert _chain(100, 100)["missing"] == {}


def test_frames_missing_inside_a_switch_are_named_by_the_switch():
    got = _chain(92, 92, counted=3)
    assert got["missing"] == {"inside switch s1": 5}
    assert got["elements"]["s1"]["missing"] == 5 and "missing" not in got["elements"]["h0"]


def test_frames_the_switch_made_balance_what_it_sent_beyond_what_it_received():
    assert _chain(104, 104, generated=4)["missing"] == {}


def test_frames_missing_on_a_wire_are_named_by_its_direction():
    assert _chain(100, 97)["missing"] == {"wire s1-eth2>h1-eth0": 3}


def test_a_surplus_at_one_place_never_hides_a_loss_at_another():
    got = _chain(103, 95)  # s1 sends 3 more than it got (e.g. read just before the first reading)
    assert got["missing"] == {"wire s1-eth2>h1-eth0": 8}
    assert got["elements"]["s1"]["missing"] == -3


def test_delta_subtracts_readings_per_interface():
    assert delta({"a": _c(1, 2)}, {"a": _c(11, 7), "b": _c(1, 1)}) == {"a": _c(10, 5), "b": _c(1, 1)}


def test_places_split_a_switch_balance_by_its_capture_ring_counters():
    hops = {"missing": {"inside switch x1": 8, "wire d0-eth2>dl6-eth1": 1}}
    assert TL.places(hops, {"x1": 6, "d0": 0}) == {"switch x1 capture ring": 6,
                                                    "inside switch x1, past its capture ring": 2,
                                                    "wire d0-eth2>dl6-eth1": 1}
    assert TL.places(hops, None) == hops["missing"]  # rings not measured: the place is the whole switch
    assert TL.places(None, None) == {}


def _sender(tx=1000, rx=60, server_rx=1000, server_tx=60):
    return {"tx_packets": tx, "rx_packets": rx, "local": {"ip": "10.0.0.1"}, "remote": {"ip": "10.1.0.1"},
            "server": {"stats": {"rx_packets": server_rx, "tx_packets": server_tx}}}


def test_losses_found_by_conservation_are_attributed_and_make_the_trial_unhealthy():
    hops = {"missing": {"inside switch x1": 8}}
    block = TL.metrics_block([_sender(server_rx=992)], 0, {}, {}, hops=hops, ring_drops={"x1": 8})
    total = block["accounting"]["total"]
    assert total["lost"] == 8 and total["unaccounted"] == 0
    assert total["places"] == {"switch x1 capture ring": 8}
    assert not block["emulator_ok"] and "switch x1 capture ring 8" in block["emulator"]["reasons"][0]
    v = TL.verdict({"mode": "ecn", "switch_cnps": 0, "cnps_rx": 3, "marks": 5}, block, [])
    assert not v["validity"]["valid"] and "unhealthy" in TL.label(v["validity"])


def test_without_conservation_the_same_loss_is_unaccounted():
    block = TL.metrics_block([_sender(server_rx=992)], 0, {}, {})
    assert block["accounting"]["total"]["unaccounted"] == 8


def test_switch_socket_drops_are_not_counted_twice_when_the_balance_already_has_them():
    hops = {"missing": {"inside switch x1": 8}}
    block = TL.metrics_block([_sender(server_rx=992)], 0, {}, {}, switch_socket_drops=8, hops=hops)
    assert block["accounting"]["total"]["emulator"]["named_places"] == 8
    assert sum(block["accounting"]["total"]["emulator"].values()) == 8


def test_stats_delta_covers_one_interval_of_cumulative_link_counters():
    before = {"rx_kernel_drops": 2, "directions": {"a>b": {"rx_packets": 100, "tx_packets": 98, "drop_tail": 2,
                                                           "in_flight": 0, "lateness_histogram": {"<10us": 90}}}}
    after = {"rx_kernel_drops": 5, "directions": {"a>b": {"rx_packets": 300, "tx_packets": 290, "drop_tail": 4,
                                                          "in_flight": 6, "lateness_histogram": {"<10us": 280}}}}
    d = accounting.stats_delta(before, after)
    a = d["directions"]["a>b"]
    assert (a["rx_packets"], a["tx_packets"], a["drop_tail"], a["in_flight"]) == (200, 192, 2, 6)
    assert a["lateness_histogram"] == {"<10us": 190} and d["rx_kernel_drops"] == 3
    assert accounting.stats_delta(None, after) is after


def test_ring_drops_per_port_between_two_shim_documents():
    before = {"ports": {"x1-eth1": {"recv": 10, "drop": 1}}}
    after = {"ports": {"x1-eth1": {"recv": 900, "drop": 9}, "x1-eth2": {"recv": 5, "drop": 0}}}
    assert ring_drops(before, after) == {"x1-eth1": 8, "x1-eth2": 0}
    assert ring_drops(before, None) is None


def test_switch_clock_epoch_takes_the_tightest_bracket_midpoint():
    from testbed.p4rt.fabric_stats import clock_epoch_us

    class Clock:  # the switch's clock zero is at wall 1_000_000 us; each Thrift call costs 'costs' us
        def __init__(self, costs):
            self.now, self.costs = 0, list(costs)

        def _tick(self):
            self.now += self.costs.pop(0)
            return self.now

        def time_elapsed_us(self):
            return self._tick()

        def time_since_epoch_us(self):
            return 1_000_000 + self._tick()

    # a slow first try (40 ms between the readings), then a fast one: the fast one wins, within 1 us
    assert abs(clock_epoch_us(Clock([10, 40_000, 40_000, 10, 2, 2]), tries=2) - 1_000_000) <= 1


def test_ring_frames_is_the_smallest_port_ring_and_unknown_when_not_said():
    from testbed.p4rt.rx import ring_frames

    doc = {"ports": {"x0-eth1": {"recv": 5, "drop": 0, "frames": 10486}, "x0-eth2": {"recv": 1, "frames": 256}}}
    assert ring_frames(doc) == 256
    assert ring_frames({"ports": {"x0-eth1": {"recv": 5, "drop": 0}}}) is None   # a shim that does not say
    assert ring_frames(None) is None
