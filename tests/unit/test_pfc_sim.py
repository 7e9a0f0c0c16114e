"""Model check (not an emulation result): the pure PFC pieces chained over modelled wires in an N:1 incast.

With headroom from physics nothing is lost; without PFC the same buffer memory overflows; a headroom sized
for a short cable loses frames on a long one, despite PFC; the outcome does not depend on the dilation.
"""

from __future__ import annotations

import pytest

from testbed.dilation import Dilation
from testbed.pfc.config import PfcConfig
from testbed.pfc.headroom import headroom_for_distance
from testbed.pfc.sim import incast

FRAME = 1538
PFC = PfcConfig(priorities=(3,))


def conserved(r, senders, frames):
    assert r.sent + r.drops["pfc_watchdog"] * FRAME == senders * frames * FRAME
    assert r.sent == r.delivered + (r.drops["tail"] + r.drops["pfc_headroom"]) * FRAME


@pytest.mark.parametrize("senders", [4, 8])
def test_incast_loses_nothing_with_pfc_and_frames_without(senders):
    frames = 1500
    on = incast(senders=senders, frames_per_sender=frames, pfc=PFC)
    conserved(on, senders, frames)
    assert on.lost == 0 and on.delivered == senders * frames * FRAME
    assert on.pause_sent > 0 and on.xon_sent > 0 and on.paused_s > 0
    assert on.max_headroom_used <= on.headroom_bytes          # the physics bound holds ...
    assert on.max_headroom_used > 0.9 * on.headroom_bytes     # ... and is nearly reached: it is not slack
    off = incast(senders=senders, frames_per_sender=frames, pfc=None)   # same buffer memory, tail drop
    conserved(off, senders, frames)
    assert off.drops["tail"] > 0 and off.pause_sent == 0
    assert off.max_queue_bytes <= senders * (PFC.xoff_bytes + on.headroom_bytes)


def test_short_cable_headroom_on_a_long_haul_link_loses_despite_pfc():
    short = headroom_for_distance(100e9, 100.0).total        # a 100 m data-centre cable
    long_haul = dict(senders=4, distance_m=10e3, frames_per_sender=1500, pfc=PFC)
    under = incast(headroom_bytes=short, **long_haul)
    conserved(under, 4, 1500)
    assert under.drops["pfc_headroom"] > 0 and under.drops["tail"] == 0
    right = incast(**long_haul)                                # auto: 10 km of headroom
    assert right.lost == 0 and right.headroom_bytes == headroom_for_distance(100e9, 10e3).total


def test_the_outcome_does_not_depend_on_the_dilation():
    real = incast(pfc=PFC, frames_per_sender=800)
    slow = incast(pfc=PFC, frames_per_sender=800, dilation=Dilation(1000))
    assert (slow.lost, slow.pause_sent, slow.xon_sent) == (real.lost, real.pause_sent, real.xon_sent)
    assert slow.max_headroom_used == real.max_headroom_used
    assert slow.duration_s == pytest.approx(real.duration_s * 1000, rel=1e-9)
    assert slow.paused_s == pytest.approx(real.paused_s * 1000, rel=1e-9)
