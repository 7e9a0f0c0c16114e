"""testbed.validate.trial_ledger: a long-haul trial's frame ledger, health and validity from its raw documents."""

from __future__ import annotations

from testbed.validate import trial_ledger as TL


def _sender(tx=1000, rx=400, server_rx=1000, server_tx=390, dropped_tx=0):
    return {"local": {"ip": "10.0.0.1"}, "remote": {"ip": "10.0.1.1"}, "tx_packets": tx, "rx_packets": rx,
            "dropped_tx": dropped_tx, "server": {"stats": {"rx_packets": server_rx, "tx_packets": server_tx}}}


def test_frames_count_both_directions_and_the_switch_cnps_once():
    sent, got = TL.frames([_sender(), _sender()], switch_cnps=10)
    assert sent["0:10.0.0.1>10.0.1.1 data"] == 1000
    assert sum(v for k, v in sent.items() if k.endswith("reverse")) == 2 * 390 + 10
    assert sum(v for k, v in got.items() if k.endswith("reverse")) == 800


def test_counted_switch_drops_explain_losses_and_uncounted_ones_make_the_trial_invalid():
    fwd_lost = [_sender(server_rx=990, rx=390, server_tx=390)]
    ok = TL.metrics_block(fwd_lost, 0, {}, {"d0": {"queue": 4, "not_ip": 99}, "egress queues": {"tail": 6}})
    assert ok["accounting"]["total"]["unaccounted"] == 0 and ok["emulator_ok"]
    bad = TL.metrics_block(fwd_lost, 0, {}, {"d0": {"queue": 4, "not_ip": 99}})  # not_ip is not a data loss
    assert bad["accounting"]["total"]["unaccounted"] == 6 and not bad["emulator_ok"]
    v = TL.verdict({"mode": "ecn", "switch_cnps": 0, "cnps_rx": 5, "marks": 9}, bad, [])
    assert v["unaccounted_losses"] == 6 and not v["health"]["healthy"] and not v["validity"]["valid"]
    assert TL.label(v["validity"]).startswith("INVALID: 6 lost frames are not accounted for")


def test_socket_losses_are_explained_but_make_the_emulator_unhealthy():
    doc = TL.metrics_block([_sender(server_rx=997, dropped_tx=3)], 0, {}, {}, udp_rcvbuf_errors=0)
    assert doc["accounting"]["total"]["unaccounted"] == 0
    assert not doc["emulator_ok"] and "inside the emulator" in doc["emulator"]["reasons"][0]


def test_a_fast_cnp_trial_needs_switch_cnps_and_cnps_at_the_senders():
    clean = TL.metrics_block([_sender(server_tx=380)], 10, {}, {})
    assert TL.verdict({"mode": "fast-cnp", "switch_cnps": 10, "cnps_rx": 10, "marks": 0}, clean, [])["validity"] \
        == {"valid": True, "reasons": []}
    v = TL.verdict({"mode": "fast-cnp", "switch_cnps": 0, "cnps_rx": 0, "marks": 0}, clean, [])["validity"]
    assert not v["valid"] and len(v["reasons"]) == 2
    assert TL.label(v) == f"INVALID: {v['reasons'][0]} (+1 more)"
    sat = TL.verdict({"mode": "ecn", "switch_cnps": 0, "cnps_rx": 3, "marks": 3}, clean, ["machine CPU 99%"])
    assert sat["health"] == {"healthy": False, "reasons": ["machine CPU 99%"]} and not sat["validity"]["valid"]


def test_the_senders_lost_pacing_allowance_is_recorded_per_sender_and_the_worst_decides():
    """1.5 % lost (15 kB of 985 + 15 kB) on one sender, 3 % on the other: the worst is the trial's figure."""
    def paced(lost, sent=1_000_000, late=0.0004):
        return {**_sender(), "tx_bytes": sent - lost, "pacing_lost_bytes": lost, "pacing_late_max_s": late}

    doc = TL.metrics_block([paced(15_000), paced(30_000, late=0.0123)], 0, {}, {})
    assert doc["emulator"]["sender_pacing"] == {"lost_share": 0.03, "late_max_ms": 12.3, "by_sender": [0.015, 0.03]}
    assert TL.sender_pacing([_sender()]) == {"lost_share": 0.0, "late_max_ms": 0.0, "by_sender": [0.0]}
