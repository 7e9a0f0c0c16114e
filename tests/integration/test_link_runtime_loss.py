"""A running link node's loss changes without a restart (a gray failure), on each link core.

    netns A --veth-- link node (loss 0 -> 20 % -> 0, by control file + SIGUSR2) --veth-- netns B

Counted in frames, not seconds: the drop rate follows each change, every lost probe is a ``drop_loss``
of the node, and the counters run on across the changes (nothing restarted).
"""

from __future__ import annotations

import os
import signal

import pytest

from testbed.emu.registry import RunRegistry
from testbed.links.control import acknowledged, control_path
from testbed.links.model import LinkParams
from testbed.links.probe import summarise
from testbed.links.wire import open_wire, set_link_loss
from testbed.poll import poll

pytestmark = [pytest.mark.root]


@pytest.fixture(scope="module", params=["c", "python"])
def wire(request, tmp_path_factory):
    with RunRegistry("link-runtime-loss", exclusive=False) as run:
        w = open_wire(run, tmp_path_factory.mktemp("rtloss"), tag=f"r{request.param[0]}", core=request.param)
        yield w
        w.stop()


def _lost(wire, count: int) -> tuple[int, int]:
    """(probes lost, drop_loss a>b added) over ``count`` probes A -> B."""
    before = wire.stats()["directions"]["a>b"]["drop_loss"]
    sent, result = wire.probe(count=count, pps=4000, size=64)
    s = summarise(result, sent["sent"])
    doc = set_link_loss(wire.proc.pid, wire.stats_path, {}, what=wire.prefix)  # a fresh stats file
    return s["lost"], doc["directions"]["a>b"]["drop_loss"] - before


def test_loss_follows_runtime_changes_counters_kept(wire):
    wire.restart(LinkParams(delay_s=0.001), seed=11)
    assert _lost(wire, 2000) == (0, 0)
    doc = set_link_loss(wire.proc.pid, wire.stats_path, {"a>b": 0.2}, what=wire.prefix)
    assert doc["directions"]["a>b"]["loss_rate_now"] == pytest.approx(0.2)
    assert doc["directions"]["b>a"]["loss_rate_now"] == 0.0 and doc["control_error"] == ""
    lost, dropped = _lost(wire, 5000)
    assert lost == dropped                      # every lost probe is the link's
    assert 850 <= lost <= 1150, lost            # 0.2 x 5000 +- 5 standard deviations (28)
    set_link_loss(wire.proc.pid, wire.stats_path, {"a>b": 0.0, "b>a": 0.0}, what=wire.prefix)
    assert _lost(wire, 2000) == (0, 0)
    final = wire.stop()
    a = final["directions"]["a>b"]
    assert a["drop_loss"] == lost and a["rx_packets"] >= 9000   # one process, counters never reset
    assert final["rx_kernel_drops"] == 0


def test_a_bad_request_is_refused_and_changes_nothing(wire):
    wire.restart(LinkParams(delay_s=0.001), seed=12)
    set_link_loss(wire.proc.pid, wire.stats_path, {"b>a": 0.3}, what=wire.prefix)
    seq = wire.stats()["control_seq"] + 1
    control_path(wire.stats_path).write_text(f"seq {seq}\nloss a>b random,0.5\nloss b>a random,7\n")
    os.kill(wire.proc.pid, signal.SIGUSR2)
    doc = poll(lambda: (lambda d: d if acknowledged(d, seq) else None)(wire.stats()), timeout=5,
               what="the link node to answer the bad request")
    assert "RATE in 0..1" in doc["control_error"]
    assert doc["directions"]["a>b"]["loss_rate_now"] == 0.0             # all of it or none of it
    assert doc["directions"]["b>a"]["loss_rate_now"] == pytest.approx(0.3)
    wire.stop()
