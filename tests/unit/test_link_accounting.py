"""The frame ledger: sent = delivered + modelled drops + emulator losses, and the emulator_ok verdict."""

from __future__ import annotations

import json

from testbed.links import accounting


def _direction(rx, tx, tail=0, red=0, loss=0, tx_errors=0, in_flight=0, late=0, hist=None):
    return {"rx_packets": rx, "tx_packets": tx, "drop_tail": tail, "drop_red": red, "drop_loss": loss,
            "tx_errors": tx_errors, "in_flight": in_flight, "emulator_late": late, "max_lateness_s": 0.0042,
            "lateness_histogram": hist or {"<10us": tx, "10-20us": 0, "20-50us": 0, "50-100us": 0,
                                           "100-200us": 0, "200-500us": 0, "500-1000us": 0, ">=1000us": 0}}


def _stats(ab, ba=None, kernel_drops=0):
    return {"core": "c", "rx_kernel_drops": kernel_drops,
            "directions": {"a>b": ab, "b>a": ba or _direction(0, 0)}}


def test_all_losses_explained_by_the_model_is_healthy():
    link = _stats(_direction(rx=1000, tx=950, tail=30, red=15, loss=5))
    doc = accounting.metrics_block({"h1>h2": 1000}, {"h1>h2": 950}, {"dl0": link})
    total = doc["accounting"]["total"]
    assert total["lost"] == 50 and total["modelled"] == {"tail": 30, "red": 15, "loss": 5, "pfc": 0}
    assert total["unaccounted"] == 0 and doc["emulator_ok"] is True
    assert doc["accounting"]["flows"]["h1>h2"] == {"sent": 1000, "delivered": 950, "lost": 50}


def test_a_loss_nobody_counted_fails_the_run_and_says_how_many():
    link = _stats(_direction(rx=1000, tx=1000))
    doc = accounting.metrics_block({"f": 1000}, {"f": 998}, {"dl0": link})
    assert doc["accounting"]["total"]["unaccounted"] == 2
    assert doc["emulator_ok"] is False and "2 frames lost without a counted cause" in doc["emulator"]["reasons"][0]


def test_socket_overflow_and_veth_drops_are_the_emulators_losses():
    link = _stats(_direction(rx=990, tx=988, tx_errors=2), kernel_drops=10)
    before = accounting.parse_ip_stats(json.dumps([{"ifname": "s1-eth1", "stats64": {
        "rx": {"packets": 5, "dropped": 0}, "tx": {"packets": 7, "dropped": 1}}}]))
    after = accounting.parse_ip_stats(json.dumps([{"ifname": "s1-eth1", "stats64": {
        "rx": {"packets": 5, "dropped": 0}, "tx": {"packets": 9, "dropped": 4}}}]))
    deltas = accounting.interface_drops(before, after)
    assert deltas == {"s1-eth1": {"rx_dropped": 0, "rx_errors": 0, "tx_dropped": 3, "tx_errors": 0}}
    doc = accounting.metrics_block({"f": 1000}, {"f": 985}, {"dl0": link}, deltas)
    total = doc["accounting"]["total"]
    assert total["emulator"]["rx_kernel_drops"] == 10 and total["emulator"]["tx_errors"] == 2
    assert total["emulator"]["interface_drops"] == 3 and total["unaccounted"] == 0
    assert doc["emulator_ok"] is False and "inside the emulator" in doc["emulator"]["reasons"][0]


def test_late_frames_make_the_run_unhealthy_but_are_delivered():
    hist = {"<10us": 900, "10-20us": 0, "20-50us": 0, "50-100us": 0, "100-200us": 0, "200-500us": 50,
            "500-1000us": 0, ">=1000us": 50}
    link = _stats(_direction(rx=1000, tx=1000, late=100, hist=hist))
    doc = accounting.metrics_block({"f": 1000}, {"f": 1000}, {"dl0": link})
    assert doc["accounting"]["total"]["lost"] == 0
    assert doc["emulator_ok"] is False and doc["emulator"]["late_fraction"] == 0.1
    assert doc["accounting"]["links"]["dl0"]["lateness_us"]["a>b"] == {"p50": 10, "p99": 4200.0, "p99.9": 4200.0}


def test_lateness_percentiles_pick_the_bucket_edge():
    hist = {"<10us": 50, "10-20us": 40, "20-50us": 9, "50-100us": 1, "100-200us": 0, "200-500us": 0,
            "500-1000us": 0, ">=1000us": 0}
    assert accounting.lateness_percentiles({"lateness_histogram": hist}) == {"p50": 10, "p99": 50, "p99.9": 100}
    assert accounting.lateness_percentiles({}) == {"p50": None, "p99": None, "p99.9": None}


def test_frames_inside_a_link_node_are_counted_per_node():
    ledger = accounting.link_node_ledger(_stats(_direction(rx=100, tx=90, tail=5, in_flight=3)))
    assert ledger["unaccounted"] == 2 and ledger["in_flight"] == 3


def test_cpu_per_process_in_the_evidence():
    ledger = accounting.account({"f": 10}, {"f": 10}, {"dl0": _stats(_direction(10, 10))})
    health = accounting.emulator_health(ledger, {"dl0": {"cpu_s": 0.5, "wall_s": 2.0}})
    assert health["cpu"]["dl0"]["cpu_fraction"] == 0.25 and health["emulator_ok"]


def test_link_node_cpu_comes_from_its_stats():
    link = _stats(_direction(10, 10))
    link.update(cpu_s=0.3, uptime_s=3.0)
    doc = accounting.metrics_block({"f": 10}, {"f": 10}, {"dl0": link}, processes={"s1": {"cpu_s": 1, "wall_s": 2}})
    assert doc["emulator"]["cpu"]["dl0"]["cpu_fraction"] == 0.1 and doc["emulator"]["cpu"]["s1"]["cpu_fraction"] == 0.5


def test_kernel_drop_summary_keeps_real_drops_and_leaves_out_benign_ones():
    text = """\
          python skbaddr=0xffff8882b75880e0 rx_sk=(nil) protocol=2048 location=ip_rcv_core+0x22c reason: OTHERHOST
 linkcore-c2cac7 skbaddr=0xffff8882b614e300 rx_sk=(nil) protocol=2048 location=tpacket_rcv+0x1a reason: PACKET_SOCK_ERROR
 simple_switch_f skbaddr=0xffff8882b614e301 rx_sk=0xffff888 protocol=2048 location=udp_queue_rcv_one_skb+0x437 reason: SOCKET_RCVBUFF
 simple_switch_f skbaddr=0xffff8882b614e302 rx_sk=0xffff888 protocol=2048 location=udp_queue_rcv_one_skb+0x437 reason: SOCKET_RCVBUFF
"""
    assert accounting.summarise_kernel_drops(text) == {"udp_queue_rcv_one_skb:SOCKET_RCVBUFF": 2,
                                                       "tpacket_rcv:PACKET_SOCK_ERROR": 1}
    assert accounting.kernel_drop_trace_argv(2, "/tmp/x.data")[:4] == ["perf", "record", "-q", "-e"]
