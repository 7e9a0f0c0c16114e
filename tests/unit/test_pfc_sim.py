"""Model check (not an emulation result): the pure PFC pieces chained over modelled wires.

Incast: with headroom from physics nothing is lost; without PFC the same buffer memory overflows; a headroom
sized for a short cable loses frames on a long one despite PFC; the outcome does not depend on the dilation.
Ring: a cyclic buffer dependency (the deadlock analysis finds it in the same routes) freezes throughput to
zero with nothing lost; the PFC watchdog breaks it; without the cycle there is no freeze.
"""

from __future__ import annotations

import pytest

from testbed.dilation import Dilation
from testbed.pfc.config import PfcConfig, WatchdogParams
from testbed.pfc.headroom import headroom_for_distance
from testbed.pfc.sim import incast, ring_network, victim_network
from testbed.routing.deadlock import cycles, dependencies

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
    assert off.drops["tail"] > 0.3 * senders * frames and off.pause_sent == 0
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
    assert slow.last_delivery == pytest.approx(real.last_delivery * 1000, rel=1e-9)
    assert slow.paused_s == pytest.approx(real.paused_s * 1000, rel=1e-9)


def ring_run(hops=2, watchdog=None, until=4e-3):
    net, flows, routes = ring_network(4, rate_bps=10e9, hops=hops, pfc=PFC)
    return net.run(flows, until=until, watchdog=watchdog), routes, flows


def static_cycles(routes, flows):
    """Cycles of the dependency graph of the routes the flows use (switches on their paths only)."""
    table: dict = {}
    for f in flows:
        node = next(s for (s, dst), nxt in routes.items() if nxt == f.src)   # the source's switch
        while node != f.dst:
            nxt = routes[(node, f.dst)]
            table.setdefault(f.dst, {})[node] = [nxt]
            node = nxt
    return cycles({3: dependencies(table, {s for s, _ in routes})})


def test_ring_with_a_cyclic_dependency_freezes_without_loss():
    stats, routes, flows = ring_run()
    assert static_cycles(routes, flows), "the deadlock analysis sees the cycle the simulated traffic makes"
    assert stats.delivered > 0                                 # traffic flowed at first ...
    assert stats.delivered_between(1e-3, 4e-3) == 0            # ... then nothing for 3 ms: deadlock
    assert stats.lost == 0 and stats.paused_s > 4 * 2e-3       # lossless, every ring port paused
    assert stats.sent > stats.delivered                        # frames are stuck in the buffers


def test_ring_without_a_cyclic_dependency_keeps_flowing():
    stats, routes, flows = ring_run(hops=1)                   # each host sends to the next switch's host
    assert static_cycles(routes, flows) == []
    assert stats.delivered_between(3e-3, 4e-3) > 0.9 * 4 * 10e9 / 8 * 1e-3   # line rate to every host
    assert stats.lost == 0


def test_watchdog_drop_breaks_the_deadlock_at_the_price_of_the_queue():
    wd = WatchdogParams(detect_s=0.5e-3, restore_s=2e-3, action="drop")   # restore > the 1.7 ms refresh
    stats, _, _ = ring_run(watchdog=wd)
    storms = [e[3] for e in stats.watchdog_events if e[2] == "storm"]
    restored = [e[3] for e in stats.watchdog_events if e[2] == "restored"]
    assert storms and min(storms) > 0.5e-3                    # declared after the detection time
    assert stats.drops["pfc_watchdog"] > 0                    # the storm queues' frames are discarded
    assert restored and stats.delivered_between(min(restored), min(restored) + 0.5e-3) > 0   # flows again
    # (with the same load and no congestion control the cycle fills again and a new storm follows)


def test_watchdog_ignore_keeps_the_ring_moving_without_loss():
    wd = WatchdogParams(detect_s=0.5e-3, restore_s=2e-3, action="ignore")
    stats, _, _ = ring_run(watchdog=wd)
    assert [e[2] for e in stats.watchdog_events] == ["storm"] * 4          # every ring queue, once
    fair = 4 * 5e9 / 8 * 1e-3                                  # two flows share each 10G ring link
    assert stats.delivered_between(3e-3, 4e-3) > 0.9 * fair
    assert stats.lost == 0                                     # the hosts are paused instead


def gbps(stats, flow, seconds):
    return stats.delivered_by_flow[flow] * 8 / seconds / 1e9


def test_pause_spreads_upstream_and_blocks_a_victim_on_the_same_priority_only():
    until, rate = 2e-3, 25e9
    same, flows = victim_network(victim_priority=3, rate_bps=rate, pfc=PFC)
    same = same.run(flows, until=until)
    other, flows = victim_network(victim_priority=0, rate_bps=rate, pfc=PFC, buffer_bytes=1e6)
    other = other.run(flows, until=until)
    victim = ("hv", "h6")
    # same priority: h6 is idle and s1 -> s2 has room, yet the victim crawls at the incast senders' pace
    assert gbps(same, victim, until) < rate / 4 / 1e9
    assert same.lost == 0
    # another priority is not stopped by the pause of priority 3: several times the throughput
    assert gbps(other, victim, until) > 2 * gbps(same, victim, until)
    incast_flows = [f for f in other.dropped_by_flow if f != victim]
    assert all(other.dropped_by_flow[f] == 0 for f in incast_flows)   # priority 3 stays lossless
    # the pause reached the first hop: the remote senders get less than the local one (PFC unfairness)
    assert gbps(same, ("h4", "h0"), until) > 2 * gbps(same, ("h1", "h0"), until)
