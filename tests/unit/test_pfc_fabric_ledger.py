"""A PFC replica trial's pure bookkeeping: counters per direction, trial deltas, the frame ledger and the
emulator allowance a lossless queue used (testbed/pfc/counters.py; scenarios pfc_fabric, pfc_deadlock)."""

from __future__ import annotations

from testbed.pfc.counters import allowance_used, delta, direction_counters, ledger, sides

STATS = {"directions": {
    "a>b": {"priorities": {"3": {"rx_packets": 10, "forwarded_packets": 8, "drop_pfc_headroom": 2}},
            "pfc": {"paused_now": 8, "watchdog": {"3": {"storms": 1}},
                    "ingress": {"3": {"pause_sent": 3, "xon_sent": 3, "max_bytes": 150_000}},
                    "egress": {"3": {"pause_received": 0, "paused_s": 0.0}}}},
    "b>a": {"priorities": {}, "pfc": {"ingress": {}, "egress": {"3": {"pause_received": 4, "paused_s": 1.5}}}}}}


def test_counters_deltas_and_the_ledger_add_up():
    now = direction_counters(STATS, 3)
    assert now["a>b"]["drop_pfc_headroom"] == 2 and now["a>b"]["pause_sent"] == 3
    assert now["a>b"]["paused_now"] is True and now["a>b"]["storms"] == 1 and now["b>a"]["paused_now"] is False
    assert now["b>a"] == {**now["b>a"], "rx": 0, "pause_received": 4, "paused_s": 1.5, "queued": 0}
    before = {"a>b": {**now["a>b"], "rx": 4, "drop_pfc_headroom": 1, "max_bytes": 90_000}}
    d = delta(before, now)
    assert d["a>b"]["rx"] == 6 and d["a>b"]["drop_pfc_headroom"] == 1
    assert d["a>b"]["max_bytes"] == 150_000          # the trial raised the peak: its own, not a difference
    # the node keeps one peak for its run: a trial that did not raise it has no peak of its own to report
    assert delta({"a>b": {**now["a>b"], "max_bytes": 150_000}}, now)["a>b"]["max_bytes"] is None
    assert d["b>a"]["pause_received"] == 4           # a direction absent before counts from zero
    led = ledger({"h0": {"sent": 10, "received": 7}, "h1": {"sent": 5, "received": 5}}, {"dl0": {"u>v": d["a>b"]}})
    assert led["drops"] == {"dl0 u>v drop_pfc_headroom": 1}
    assert (led["sent"], led["received"], led["dropped"], led["held"], led["unaccounted"]) == (15, 12, 1, 0, 2)
    d["a>b"]["queued"] = 2                           # a frozen queue still holds two: accounted as held
    led = ledger({"h0": {"sent": 10, "received": 7}, "h1": {"sent": 5, "received": 5}}, {"dl0": {"u>v": d["a>b"]}})
    assert (led["held"], led["unaccounted"]) == (2, 0)


def test_allowance_used_is_what_a_switch_queue_held_beyond_xoff_plus_physics():
    plan_links = [{"u": "l0", "v": "s0",
                   "ab": {"role": "switch", "xoff_bytes": 40e3, "physics_headroom_bytes": 90e3},
                   "ba": {"role": "switch", "xoff_bytes": 40e3, "physics_headroom_bytes": 42e3}},
                  {"u": "l0", "v": "h0", "ab": {"role": "switch", "xoff_bytes": 40e3, "physics_headroom_bytes": 1e5},
                   "ba": {"role": "nic", "xoff_bytes": 4e7, "physics_headroom_bytes": 1e7}}]
    by_dir = sides(plan_links)
    assert by_dir["s0>l0"]["physics_headroom_bytes"] == 42e3 and by_dir["h0>l0"]["role"] == "nic"
    flat = {"l0>s0": {"max_bytes": 150e3}, "s0>l0": {"max_bytes": 50e3}, "h0>l0": {"max_bytes": 5e8}}
    assert allowance_used(flat, by_dir) == {"l0>s0": 20e3}     # NICs are host memory, not a switch buffer


def test_the_deadlock_verdict_reads_the_ring_and_the_second_half():
    from scenarios.pfc_deadlock import CYCLE, verdict

    ring = {d: {"paused_now": True, "queued": 3, "storms": 0, "drop_pfc_watchdog": 0} for d in CYCLE}
    trial = {"seconds": 2.0, "bin_s": 0.25, "hops": {"dl": ring},
             "streams": {"h0>h2": {"delivered_per_bin": [5, 9, 0, 0, 0, 0, 0, 0]}}}
    v = verdict(trial)
    assert v["deadlocked"] and v["frozen"] and v["ring_paused_at_end"] == 5 and v["ring_held_frames"] == 15
    ring[CYCLE[2]] = {"paused_now": True, "queued": 0, "storms": 2, "drop_pfc_watchdog": 7}   # one drained
    trial["streams"]["h0>h2"]["delivered_per_bin"] = [5, 9, 0, 0, 0, 0, 0, 1]           # one in the 2nd half
    v = verdict(trial)
    assert not v["deadlocked"] and not v["frozen"] and v["delivered_second_half"] == 1
    assert (v["storms"], v["watchdog_drops"]) == (2, 7)


def test_delays_and_the_victims_figures():
    from scenarios.pfc_fabric import FRAME, VICTIM, victim
    from testbed.pfc.counters import delays_ms

    d = delays_ms([0, 0, 0, 0], [1_000_000, 2_000_000, 3_000_000, 40_000_000])     # 1, 2, 3, 40 ms
    assert d == {"p50": 2.0, "p99": 40.0, "max": 40.0}
    assert delays_ms([], []) == {"p50": None, "p99": None, "max": None}
    trial = {"seconds": 2.0, "streams": {">".join(VICTIM): {"sent": 100, "received": 50, "delay_ms": d}}}
    v = victim(trial)
    assert v["delivered_mbps"] == round(50 * FRAME * 8 / 2.0 / 1e6, 3) and v["delay_ms"]["p99"] == 40.0
    assert victim({"seconds": 1.0, "streams": {}}) is None


def test_bmv2_switch_drops_join_the_ledger_by_reason_and_unmodelled_ones_are_the_emulators():
    """A BMv2 switch's queue tail, RED's early drops and PFC's headroom drops are modelled losses of the
    trial; a frame dropped for no route or TTL is the emulation's fault (handed to attribute()), and the
    MAC Control frames the switch consumes (not_ip) are not the streams'."""
    from testbed.pfc.counters import attribute, fold_switches, switch_delta

    before = {"l1": {"drops": {"queue": 1, "pfc_headroom": 0, "no_route": 0, "not_ip": 3},
                     "tail": {1: 0, 2: 5}, "pfc_pause_sent": {1: 2, 2: 0}}}
    after = {"l1": {"drops": {"queue": 3, "pfc_headroom": 4, "no_route": 1, "not_ip": 9},
                    "tail": {1: 0, 2: 11}, "pfc_pause_sent": {1: 7, 2: 0}}}
    d = switch_delta(before, after)
    assert d["l1"]["tail"] == {1: 0, 2: 6} and d["l1"]["pfc_pause_sent"] == {1: 5, 2: 0}
    assert d["l1"]["drops"] == {"queue": 2, "pfc_headroom": 4, "no_route": 1, "not_ip": 6}
    led = ledger({"h0": {"sent": 20, "received": 7}}, {})
    strange = fold_switches(led, d)
    assert led["drops"] == {"l1 bmv2 queue": 2, "l1 bmv2 pfc_headroom": 4, "l1 bmv2 tail": 6}
    assert (led["dropped"], led["unaccounted"]) == (12, 1) and strange == {"bmv2 l1 no_route": 1}
    assert attribute(led, strange) == {"lost_inside_emulator": 1, "unaccounted": 0, "emulator_losses": strange}


def test_the_row_names_each_bmv2_pause_by_the_port_it_left():
    from scenarios.pfc_fabric import row

    trial = {"label": "lossless", "priority": 3, "seconds": 2.0, "streams": {},
             "hops": {"dl0": {"l1>h4": {**direction_counters(STATS, 3)["a>b"], "pause_received": 0}}},
             "ledger": {"sent": 10, "received": 10, "dropped": 0, "unaccounted": 0},
             "switches": {"l1": {"pfc_pause_sent": {1: 0, 2: 4}}, "l0": {"pfc_pause_sent": {3: 1}}}}
    r = row(trial, "l1>h4", {}, {"l1": {1: "h5", 2: "s0"}, "l0": {3: "h0"}})
    assert r["switch_pause_sent"] == {"l1>s0": 4, "l0>h0": 1}
    assert r["pause_sent_total"] == 3 + 4 + 1          # the link node's and the switches'


def test_pfc_drops_with_the_physics_headroom_are_the_emulators_and_with_a_fixed_one_the_results():
    from scenarios.pfc_fabric import emulator_drops

    by_dir = sides([{"u": "l0", "v": "s0", "ab": {"role": "switch"}, "ba": {"role": "switch"}},
                    {"u": "h0", "v": "l0", "ab": {"role": "nic"}, "ba": {"role": "switch"}}])
    trial = {"hops": {"dl3": {"l0>s0": {"drop_pfc_headroom": 350}, "s0>l0": {"drop_pfc_headroom": 0}},
                      "dl0": {"h0>l0": {"drop_pfc_headroom": 2}}}}
    reasons = emulator_drops(trial, by_dir, "auto")
    assert len(reasons) == 1 and reasons[0].startswith("350 lossless frames dropped at l0>s0")
    assert emulator_drops(trial, by_dir, "50KB") == []        # an undersized headroom: loss despite PFC
    assert emulator_drops({"hops": {"dl3": {"l0>s0": {"drop_pfc_headroom": 0}}}}, by_dir, "auto") == []
    bmv2 = {"hops": {}, "switches": {"l0": {"drops": {"pfc_headroom": 60, "queue": 3}}, "s0": {"drops": {}}}}
    assert [r.split(" with")[0] for r in emulator_drops(bmv2, by_dir, "auto")] == \
        ["60 lossless frames dropped by BMv2 l0's ingress accounting"]
    assert emulator_drops(bmv2, by_dir, "50KB") == []
