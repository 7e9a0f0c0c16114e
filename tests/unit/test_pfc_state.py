"""The PFC state machine: thresholds, headroom drops, PAUSE refresh, quanta expiry, XON, priorities, dilation."""

from __future__ import annotations

import pytest

from testbed.dilation import Dilation
from testbed.pfc.config import PfcConfig
from testbed.pfc.state import DROP_HEADROOM, HOLD, SEND, PauseFrame, PfcEgress, PfcIngress, quanta_seconds

FRAME = 1000
CONFIG = PfcConfig(priorities=(3,), xoff_bytes=10 * FRAME, xon_bytes=6 * FRAME, quanta=0xFFFF)


def ingress(headroom=4 * FRAME, **kw):
    return PfcIngress(CONFIG, rate_bps=100e9, headroom_bytes=headroom, **kw)


def fill(ing, n, now=0.0, priority=3):
    out = []
    for _ in range(n):
        out.append(ing.arrive(now, priority, FRAME))
    return out


def test_pause_is_sent_once_when_xoff_is_reached():
    ing = ingress()
    results = fill(ing, 9)
    assert all(r == (None, []) for r in results)            # 9 KB < xoff 10 KB: nothing sent
    reason, frames = ing.arrive(1e-6, 3, FRAME)              # 10 KB: XOFF
    assert reason is None and frames == [PauseFrame.of({3: 0xFFFF})]
    assert frames[0].class_enable == 0b1000 and frames[0].quanta == (0, 0, 0, 0xFFFF, 0, 0, 0, 0)
    assert fill(ing, 2) == [(None, []), (None, [])]           # still above: no second PAUSE
    assert ing.counters[3]["pause_sent"] == 1


def test_headroom_overflow_drops_with_reason_and_keeps_accounting():
    ing = ingress(headroom=4 * FRAME)                        # limit = xoff + headroom = 14 frames
    results = fill(ing, 16)
    reasons = [r for r, _ in results]
    assert reasons[:14] == [None] * 14 and reasons[14:] == [DROP_HEADROOM, DROP_HEADROOM]
    assert ing.bytes[3] == 14 * FRAME                        # the dropped frames are not buffered
    assert ing.counters[3]["drop_pfc_headroom"] == 2 and ing.counters[3]["drop_pfc_headroom_bytes"] == 2 * FRAME
    assert ing.max_bytes[3] == 14 * FRAME


def test_xon_only_at_or_below_the_xon_threshold():
    ing = ingress()
    fill(ing, 12)                                             # paused at 10, now 12 KB
    outs = [ing.depart(1e-6, 3, FRAME) for _ in range(5)]     # 11, 10, 9, 8, 7 KB: above xon 6 KB
    assert outs == [[]] * 5
    assert ing.depart(2e-6, 3, FRAME) == [PauseFrame.of({3: 0})]   # 6 KB: XON (pause time 0)
    assert ing.depart(3e-6, 3, FRAME) == []                   # no second XON
    assert ing.counters[3]["xon_sent"] == 1 and not ing.xoff[3]
    fill(ing, 5)                                               # back to 10 KB: a new PAUSE
    assert ing.counters[3]["pause_sent"] == 2


def test_departing_more_than_arrived_is_an_error():
    ing = ingress()
    ing.arrive(0.0, 3, FRAME)
    with pytest.raises(ValueError, match="more bytes departed"):
        ing.depart(0.0, 3, 2 * FRAME)


def test_refresh_before_expiry_at_the_real_rate_then_dilated():
    real_pause = 0xFFFF * 512 / 100e9                        # 335.5 us at 100G
    assert quanta_seconds(0xFFFF, 100e9) == pytest.approx(real_pause)
    assert quanta_seconds(0xFFFF, 100e9, Dilation(1000)) == pytest.approx(real_pause * 1000)
    ing = ingress(dilation=Dilation(1000))
    fill(ing, 10, now=5.0)
    assert ing.next_deadline() == pytest.approx(5.0 + 0.5 * real_pause * 1000)   # half the pause time
    assert ing.tick(5.0 + 0.1) == []                          # not yet due
    frames = ing.tick(5.0 + 0.2)                              # due: the PAUSE is repeated
    assert frames == [PauseFrame.of({3: 0xFFFF})]
    assert ing.next_deadline() == pytest.approx(5.2 + 0.5 * real_pause * 1000)
    for _ in range(4):
        ing.depart(5.3, 3, FRAME)                             # 6 KB: XON; no refresh pending any more
    assert ing.next_deadline() is None and ing.tick(100.0) == []


def test_refresh_covers_several_priorities_in_one_frame():
    cfg = PfcConfig(priorities=(3, 4), xoff_bytes=2 * FRAME, xon_bytes=FRAME)
    ing = PfcIngress(cfg, rate_bps=100e9, headroom_bytes=10 * FRAME)
    for p in (3, 4):
        fill(ing, 2, priority=p)
    due = ing.next_deadline()
    assert ing.tick(due) == [PauseFrame.of({3: 0xFFFF, 4: 0xFFFF})]


def test_lossy_priorities_are_not_accounted_nor_dropped():
    ing = ingress(headroom=FRAME)
    assert all(r == (None, []) for r in fill(ing, 100, priority=0))
    assert ing.bytes[0] == 0 and ing.depart(0.0, 0, FRAME) == []


def test_egress_holds_for_the_quanta_then_resumes_on_expiry():
    e = PfcEgress(CONFIG, rate_bps=100e9)
    e.receive(1.0, PauseFrame.of({3: 1000}))                 # 1000 quanta at 100G = 5.12 us
    assert e.gate(1.0, 3) == HOLD
    assert e.gate(1.0 + 5.11e-6, 3) == HOLD
    assert e.resume_at(3) == pytest.approx(1.0 + 5.12e-6)
    assert e.gate(1.0 + 5.13e-6, 3) == SEND
    assert e.paused_time(2.0, 3) == pytest.approx(5.12e-6)
    assert e.counters[3]["pause_received"] == 1


def test_egress_quanta_are_real_bit_times_dilated():
    e = PfcEgress(CONFIG, rate_bps=400e9, dilation=Dilation(500))
    e.receive(0.0, PauseFrame.of({3: 0xFFFF}))
    real = 0xFFFF * 512 / 400e9                               # 83.9 us at 400G
    assert e.resume_at(3) == pytest.approx(real * 500)
    snap = e.snapshot(10.0)["3"]
    assert snap["paused_s"] == pytest.approx(real * 500) and snap["paused_real_s"] == pytest.approx(real)


def test_xon_resumes_early_and_a_refresh_restarts_the_timer():
    e = PfcEgress(CONFIG, rate_bps=100e9)
    e.receive(0.0, PauseFrame.of({3: 0xFFFF}))
    e.receive(100e-6, PauseFrame.of({3: 0xFFFF}))            # refresh: the timer restarts from now
    assert e.resume_at(3) == pytest.approx(100e-6 + 0xFFFF * 512 / 100e9)
    e.receive(150e-6, PauseFrame.of({3: 0}))                  # XON
    assert e.gate(150e-6, 3) == SEND
    assert e.paused_time(1.0, 3) == pytest.approx(150e-6)     # one continuous pause, closed by XON
    assert e.counters[3] == {"pause_received": 2, "xon_received": 1, "drop_pfc_watchdog": 0}


def test_a_paused_priority_does_not_stop_another():
    cfg = PfcConfig(priorities=(3, 4), xoff_bytes=2 * FRAME, xon_bytes=FRAME)
    e = PfcEgress(cfg, rate_bps=100e9)
    e.receive(0.0, PauseFrame.of({3: 0xFFFF}))
    assert e.gate(1e-6, 3) == HOLD
    assert e.gate(1e-6, 4) == SEND                            # another lossless priority
    assert e.gate(1e-6, 0) == SEND                            # a lossy priority


def test_pause_for_a_lossy_priority_is_counted_and_ignored():
    e = PfcEgress(CONFIG, rate_bps=100e9)
    e.receive(0.0, PauseFrame.of({0: 0xFFFF, 3: 10}))
    assert e.gate(1e-9, 0) == SEND and e.ignored[0] == 1
    assert e.gate(1e-9, 3) == HOLD


def test_paused_time_sums_separate_pauses():
    e = PfcEgress(CONFIG, rate_bps=100e9)
    q = 1000                                                   # 5.12 us each
    e.receive(0.0, PauseFrame.of({3: q}))
    e.receive(1e-3, PauseFrame.of({3: q}))                    # after the first expired
    assert e.paused_time(0.5e-3, 3) == pytest.approx(5.12e-6)
    assert e.paused_time(2e-3, 3) == pytest.approx(2 * 5.12e-6)
    assert e.paused_time(1e-3 + 1e-6, 3) == pytest.approx(5.12e-6 + 1e-6)


def test_pause_frame_wire_fields_and_validation():
    f = PauseFrame.from_wire(0b0100_1000 | 0x100, [0, 0, 0, 7, 0, 0, 9, 5])  # bit 8 reserved: ignored
    assert f.times == ((3, 7), (6, 9))                        # time7 = 5 not enabled: not a pause
    with pytest.raises(ValueError):
        PauseFrame.of({8: 1})
    with pytest.raises(ValueError):
        PauseFrame.of({3: 0x10000})


def test_random_traffic_keeps_the_invariants():
    """Random arrivals/departures of random sizes: what must hold after every event, whatever the order."""
    import random

    rng = random.Random(16)
    cfg = PfcConfig(priorities=(3, 4), xoff_bytes=20_000, xon_bytes=12_000)
    for trial in range(30):
        ing = PfcIngress(cfg, rate_bps=100e9, headroom_bytes=rng.choice((1600, 8000, 30_000)))
        held = {3: [], 4: []}
        outstanding = {3: False, 4: False}
        now = 0.0
        for _ in range(400):
            now += rng.random() * 1e-6
            p = rng.choice((3, 4))
            if held[p] and rng.random() < 0.45:
                length = held[p].pop(rng.randrange(len(held[p])))
                frames = ing.depart(now, p, length)
                if frames:                                       # XON only for an outstanding PAUSE, at xon
                    assert frames == [PauseFrame.of({p: 0})] and outstanding[p]
                    assert ing.bytes[p] <= cfg.xon_bytes
                    outstanding[p] = False
            else:
                length = rng.randint(64, 1538)
                reason, frames = ing.arrive(now, p, length)
                if reason is None:
                    held[p].append(length)
                else:                                            # dropped only when it would overflow
                    assert reason == DROP_HEADROOM
                    assert ing.bytes[p] + length > cfg.xoff_bytes + ing.headroom_bytes
                if frames:                                       # PAUSE once, on reaching xoff
                    assert frames == [PauseFrame.of({p: cfg.quanta})] and not outstanding[p]
                    assert ing.bytes[p] >= cfg.xoff_bytes
                    outstanding[p] = True
            for q in (3, 4):
                assert ing.bytes[q] == sum(held[q])              # accounting is exact
                assert ing.bytes[q] <= cfg.xoff_bytes + ing.headroom_bytes
                assert ing.xoff[q] == outstanding[q]
                assert (ing.next_refresh[q] is not None) == outstanding[q]
                if ing.bytes[q] >= cfg.xoff_bytes:
                    assert outstanding[q]                        # never above xoff without a PAUSE out
        c = ing.counters
        assert all(c[q]["pause_sent"] - c[q]["xon_sent"] == int(outstanding[q]) for q in (3, 4)), trial


def test_random_pause_sequences_match_a_sampled_reference():
    """paused() and paused_time() against a reference that looks only at the last frame before each instant."""
    import random

    rng = random.Random(3)
    e = PfcEgress(CONFIG, rate_bps=100e9)
    frames = []                                   # (time, quanta) received for priority 3
    t = 0.0
    for _ in range(60):
        t += rng.random() * 8e-6
        q = rng.choice((0, 100, 1000, 2000))     # XON, 0.5 us, 5 us, 10 us at 100G
        frames.append((t, q))
    step = 1e-8
    samples = [i * step for i in range(int((t + 20e-6) / step))]
    paused_ref = 0
    k = 0
    for s in samples:                             # feed frames as time passes, as a port would
        while k < len(frames) and frames[k][0] <= s:
            e.receive(frames[k][0], PauseFrame.of({3: frames[k][1]}))
            k += 1
        last = frames[k - 1] if k else None
        ref = last is not None and last[1] > 0 and s < last[0] + last[1] * 512 / 100e9
        assert e.paused(s, 3) == ref
        paused_ref += ref
    assert e.paused_time(samples[-1], 3) == pytest.approx(paused_ref * step, rel=0.01)
