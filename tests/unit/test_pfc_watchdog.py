"""PFC watchdog: storm detection after a continuous pause with frames queued, drop/ignore, restoration."""

from __future__ import annotations

import pytest

from testbed.dilation import Dilation
from testbed.pfc.config import PfcConfig, WatchdogParams
from testbed.pfc.state import DROP, HOLD, SEND, PauseFrame, PfcEgress
from testbed.pfc.watchdog import RESTORED, STORM, PfcWatchdog

CONFIG = PfcConfig(priorities=(3, 4))
XOFF = PauseFrame.of({3: 0xFFFF})          # 335.5 us at 100G
REFRESH = 150e-6


def storm(egress, start, end, frame=XOFF):
    """The peer refreshes a PAUSE every 150 us from start to end."""
    t = start
    while t < end:
        egress.receive(t, frame)
        t += REFRESH


def setup(action="drop", detect=1e-3, restore=2e-3, dilation=None):
    e = PfcEgress(CONFIG, 100e9, dilation)
    return e, PfcWatchdog(WatchdogParams(detect_s=detect, restore_s=restore, action=action), e)


def test_storm_after_the_detection_time_then_drop():
    e, wd = setup("drop")
    storm(e, 0.0, 1.2e-3)
    assert wd.poll(0.9e-3, {3: 5000}) == []                  # paused 0.9 ms < 1 ms
    assert e.gate(0.9e-3, 3) == HOLD
    events = wd.poll(1.05e-3, {3: 5000})
    assert [(ev.priority, ev.kind, ev.action) for ev in events] == [(3, STORM, "drop")]
    assert e.gate(1.05e-3, 3) == DROP and e.counters[3]["drop_pfc_watchdog"] == 1
    assert e.gate(1.05e-3, 4) == SEND                        # the other priority is untouched
    assert wd.counters[3]["storms"] == 1 and wd.in_storm[3] and not wd.in_storm[4]


def test_ignore_sends_despite_pause():
    e, wd = setup("ignore")
    storm(e, 0.0, 1.2e-3)
    wd.poll(1.1e-3, {3: 1})
    assert e.paused(1.1e-3, 3) and e.gate(1.1e-3, 3) == SEND


def test_no_storm_without_queued_frames_or_with_breaks_in_the_pause():
    e, wd = setup()
    storm(e, 0.0, 1.2e-3)
    assert wd.poll(1.1e-3, {3: 0}) == []                     # nothing waits: a pause, not a storm
    e2, wd2 = setup()
    for start in (0.0, 0.6e-3):                               # two pauses of 5.12 us, 0.6 ms apart
        e2.receive(start, PauseFrame.of({3: 1000}))
    assert wd2.poll(0.6e-3 + 1e-6, {3: 100}) == []
    assert wd2.poll(1.1e-3, {3: 100}) == []                   # the pause expired: not continuous


def test_restoration_after_quiet_time_and_a_new_storm_counts_again():
    e, wd = setup("drop", detect=1e-3, restore=2e-3)
    storm(e, 0.0, 4e-3)                                       # last PAUSE at ~3.9 ms
    wd.poll(1.1e-3, {3: 1})
    assert wd.poll(3e-3, {3: 1}) == []                        # PAUSE still arriving: storm goes on
    last = e.last_pause[3]
    assert wd.next_deadline(4e-3) == pytest.approx(last + 2e-3)
    assert wd.poll(last + 1.9e-3, {3: 1}) == []
    events = wd.poll(last + 2.1e-3, {3: 1})
    assert [ev.kind for ev in events] == [RESTORED]
    assert e.override[3] is None and e.gate(last + 2.1e-3, 3) == SEND
    assert wd.counters[3]["restorations"] == 1
    assert wd.counters[3]["storm_s"] == pytest.approx(last + 2.1e-3 - 1.1e-3)
    storm(e, 10e-3, 11.2e-3)
    assert [ev.kind for ev in wd.poll(11.1e-3, {3: 1})] == [STORM]
    assert wd.counters[3]["storms"] == 2
    assert [ev.as_dict()["event"] for ev in wd.events] == [STORM, RESTORED, STORM]


def test_times_are_dilated():
    e, wd = setup(detect=200e-3, restore=200e-3, dilation=Dilation(10))
    assert wd.detect == pytest.approx(2.0) and wd.restore == pytest.approx(2.0)
    e.receive(0.0, XOFF)
    assert wd.next_deadline(0.0) == pytest.approx(2.0)
    assert wd.next_deadline(3.0) is None                      # pause expired long ago (3.36 ms emulated)
