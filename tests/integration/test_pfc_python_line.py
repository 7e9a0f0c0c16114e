"""The Python delay line's PFC (``python -m testbed.pfc.line``, the fallback core) on a 2:1 incast.

The model is diffed against the compiled core in tests/unit/test_pfc_link.py; this runs the Python line's
forwarding loop with it: PFC frames read on one side pause the other direction, PAUSE/XON leave by the input
side, frames start on the model's timer. What is asserted is PFC behaviour (no loss on priority 3, pauses
sent and honoured, everything accounted, no frame lost in the emulator), not timing: the Python line sends
a few per cent of its frames more than 250 us late on this busy 2-core machine (4 % at 2 Mbit/s, load ~10;
the compiled core is the one to trust for timing), which delays frames but loses none, so a trial that is
only late is accepted here and its lateness is printed.
"""

from __future__ import annotations

import pytest

from testbed.emu.registry import RunRegistry
from testbed.links.wire import name_prefix
from testbed.pfc.config import PfcConfig
from testbed.pfc.fanin import FanIn, IncastParams, run_trial

pytestmark = [pytest.mark.root]

RATE = 2e6
FLOWS = [(i, tos, 0.45 * RATE / 8000) for i in range(2) for tos in (26 << 2 | 2, 0)]


def test_python_line_keeps_roce_lossless_under_incast(tmp_path):
    pfc = PfcConfig(priorities=(3,), xoff_bytes=20e3, xon_bytes=20e3 - 2 * 1538, headroom_bytes=2 * 30e3)
    params = IncastParams(senders=2, rate_bps=RATE, scale=10000, limit_bytes=40e3, pfc=pfc)
    with RunRegistry("pfc-python-line-test") as run:
        fan = FanIn(run, name_prefix("y"), tmp_path, 2)
        fan.build()
        for attempt in range(2):
            res = run_trial(fan, params, FLOWS, 2.0, seed=3 + attempt, core_name="python")
            checks = {k: v for k, v in res["checks"].items() if k != "late_fraction_ok"}
            if all(checks.values()):
                break
    print(f"python line: {res['emulator_late']} of {res['frames']} frames late; checks {res['checks']}")
    assert all(checks.values()), f"emulator unhealthy twice: {res['checks']}"
    assert {s["core"] for s in res["stats"].values()} == {"python"}
    roce, lossy = res["ledger"]["priorities"]["3"], res["ledger"]["priorities"]["0"]
    assert roce["sent"] > 250 and roce["dropped"] == 0 and roce["delivered"] == roce["sent"], roce["drops"]
    assert lossy["drops"].get("bottleneck_drop_tail", 0) > 0 and lossy["unaccounted"] == 0
    lr = res["pfc"]["LR"]["a>b"]
    assert lr["ingress"]["3"]["pause_sent"] > 0 and lr["pfc_tx_frames"] > 0
    assert all(res["pfc"][f"L{i}"]["a>b"]["egress"]["3"]["pause_received"] > 0 for i in range(2))
