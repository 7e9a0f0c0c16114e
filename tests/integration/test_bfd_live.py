"""BFD on OVS under the fabric controller: a link black-holed with its carrier up (invisible to
port-status) is seen by BFD -- OVS clears the port's LIVE bit -- and the controller routes around it."""

from __future__ import annotations

import time

import pytest

from testbed.bench.failover import cut_candidate
from testbed.emu.bfd import bfd_argv, bfd_ready, enable_bfd
from testbed.emu.faults import apply, blackhole_argv
from testbed.emu.ops import run
from testbed.links.probe import outage
from testbed.poll import poll, sleep_until
from testbed.routing.failover import link_event
from tests.integration.ovsfabric import ovs_fat_tree, stream_to_core

pytestmark = [pytest.mark.root, pytest.mark.mininet, pytest.mark.ovs, pytest.mark.timing_first]


def _link_up(ctl, link) -> bool:
    return any({lk["a"], lk["b"]} == set(link) and lk["up"] for lk in ctl.get("/topology")["links"])


def test_bfd_sees_a_black_holed_link_with_carrier_up(tmp_path, quiet_cpu):
    with ovs_fat_tree(tmp_path, "test-bfd") as (G, ctl, rep):
        src, dst = "h2", "h13"
        stream, links = stream_to_core(G, ctl, rep, src, dst, 5103, 43312, 0.001, 10.0, tmp_path, "bfd")
        cut = cut_candidate(G, links, ctl.get("/routes"), f"{rep.ip(dst)}/32")
        assert cut is not None
        # 50 ms x 3 (scale 1 here). A session starts down, so the port is not LIVE until it is up:
        # wait for the sessions at their fast rate and for the controller to have the link up again.
        intfs = enable_bfd(rep, [cut], interval_s=0.05, mult=3)
        poll(lambda: bfd_ready(intfs, 0.05) and _link_up(ctl, cut),
             timeout=15, what="BFD sessions up at 50 ms and the link up in the controller")
        t_block = time.time()
        apply(blackhole_argv(rep.intf_name(*cut), True), "black-hole the link")  # carrier stays up
        try:
            ev = poll(lambda: link_event(ctl, "link_down", cut, t_block - 0.01), timeout=5, interval=0.02,
                      what="BFD to take the link down")
            sleep_until(t_block + 1.0)
        finally:
            apply(blackhole_argv(rep.intf_name(*cut), False), "restore the link")
        t_fix = time.time()
        poll(lambda: link_event(ctl, "link_up", cut, t_fix - 0.01), timeout=15, what="BFD up, the link back")
        raw = stream.result()
        run(bfd_argv(intfs, None), what="turn BFD off")
    # Detection is 3 x 50 ms once the sessions run at 50 ms (measured 110-155 ms on an idle machine);
    # the flow then loses that plus the push (~170 packets at 1 ms). Without BFD it would lose all 1000.
    assert ev["cause"] == "port-status" and (ev["time"] - t_block) < 0.5, ev["time"] - t_block
    lost = outage(raw["send_times"], raw["seq"], 0.001, window=(t_block, t_block + 1.0))
    assert lost.lost_in_window < 400, lost
