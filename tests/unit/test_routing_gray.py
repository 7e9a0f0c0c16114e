"""Gray failure detection from counters (pure): 10 % loss is caught within two windows, a healthy busy
link and an idle link never are, the hold-down releases the link, and a relapse on probation doubles it."""

from __future__ import annotations

import pytest

from testbed.routing.gray import GrayPolicy, GrayWatch

L = frozenset({"a0", "cr0"})
AB, BA = ("a0", "cr0"), ("cr0", "a0")


def _run(w, t0, t1, pps, loss, step=0.1, start=(0, 0)):
    """Feed both directions: ``pps`` packets/s a0 -> cr0 losing ``loss``, the reverse lossless; returns
    every decision with its time and the counters at the end."""
    tx, rx = start
    out, t = [], t0
    while t < t1 + 1e-9:
        w.observe(L, AB, int(tx), int(rx), t)
        w.observe(L, BA, int(tx / 2), int(tx / 2), t)
        out += [(round(t, 3), *d) for d in w.decide(t)]
        tx += pps * step
        rx += pps * step * (1 - loss)
        t += step
    return out, (tx, rx)


def test_ten_percent_loss_is_seen_within_two_windows_and_names_the_direction():
    w = GrayWatch(GrayPolicy(window_s=0.3, windows=2))
    events, _ = _run(w, 0.0, 2.0, 1000, 0.10)
    kind, link, detail = events[0][1:]
    assert kind == "down" and link == L and detail["direction"] == list(AB)
    assert 0.08 < detail["loss"] < 0.12 and events[0][0] <= 0.6  # two evaluations of a 0.3 s window
    assert w.is_held(L)


@pytest.mark.parametrize("pps, loss", [(1000, 0.0), (1000, 0.03), (20, 0.5)])
def test_healthy_slightly_lossy_or_idle_links_stay_up(pps, loss):
    w = GrayWatch(GrayPolicy(loss_threshold=0.05, min_packets=50))
    events, _ = _run(w, 0.0, 5.0, pps, loss)
    assert events == []  # 3 % is under the threshold; 20 pps x 0.3 s is too few packets to judge


def test_hold_down_releases_and_a_relapse_on_probation_doubles_it():
    w = GrayWatch(GrayPolicy(hold_s=1.0, probation_s=5.0, max_hold_s=3.0))
    events, end = _run(w, 0.0, 1.0, 1000, 0.2)
    t_down = events[0][0]
    assert [e[1] for e in events] == ["down"]
    # routed around: no traffic on the link while held
    idle, end = _run(w, 1.1, t_down + 1.05, 0, 0.0, start=end)
    assert [e[1] for e in idle] == ["up"] and idle[0][3]["held_s"] == 1.0
    # back in use, still lossy: down again, held twice as long; then capped at max_hold_s
    again, end = _run(w, idle[0][0] + 0.1, idle[0][0] + 1.0, 1000, 0.2, start=end)
    assert again[0][1] == "down" and again[0][3]["hold_s"] == 2.0
    t2 = again[0][0]
    idle2, end = _run(w, t2 + 0.1, t2 + 2.05, 0, 0.0, start=end)
    third, _ = _run(w, idle2[-1][0] + 0.1, idle2[-1][0] + 1.0, 1000, 0.2, start=end)
    assert third[0][3]["hold_s"] == 3.0


def test_healed_link_released_after_hold_stays_up():
    w = GrayWatch(GrayPolicy(hold_s=1.0))
    events, end = _run(w, 0.0, 1.0, 1000, 0.2)
    later, _ = _run(w, 1.1, 6.0, 1000, 0.0, start=end)
    assert [e[1] for e in later] == ["up"]


def test_a_counter_reset_is_not_loss():
    w = GrayWatch()
    _run(w, 0.0, 1.0, 1000, 0.0)
    events, _ = _run(w, 1.1, 3.0, 1000, 0.0, start=(0, 0))  # the switch restarted: counters from zero
    assert events == []


def test_bad_policy_is_refused_by_field():
    with pytest.raises(ValueError, match="loss_threshold"):
        GrayPolicy(loss_threshold=1.5)
    with pytest.raises(ValueError, match="max_hold_s"):
        GrayPolicy(hold_s=5, max_hold_s=1)


def test_policy_for_an_interval_and_its_detection_bound():
    p = GrayPolicy.for_interval(0.1)
    assert p.window_s == pytest.approx(0.3)
    assert p.detection_bound_s(0.1) == pytest.approx(0.3 + 4 * 0.1)


def test_ten_percent_loss_is_declared_within_the_bound():
    """Polls every 0.1 s of a 1 kpps link that starts losing every 10th frame at t=1.0 (counted exactly)."""
    interval, p = 0.1, GrayPolicy.for_interval(0.1)
    w, tx, rx, declared = GrayWatch(p), 0, 0, None
    for k in range(1, 40):
        now = k * interval
        for i in range(100):
            tx += 1
            rx += 0 if now > 1.0 and i % 10 == 0 else 1
        w.observe("L", ("a", "b"), tx, rx, now)
        if any(kind == "down" for kind, _, _ in w.decide(now)):
            declared = now
            break
    assert declared is not None and 1.0 < declared <= 1.0 + p.detection_bound_s(interval), declared
