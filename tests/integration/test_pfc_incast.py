"""2:1 incast through link cores with PFC (issue 16): lossless on the RoCE priority, lossy still drops, and
without PFC the same incast drops on both.

Fixture: :mod:`testbed.pfc.fanin` (two sender namespaces, each behind a link core = its NIC, a tc fan-in
switch, one bottleneck link core into the receiver). Each sender offers 45 % of the line rate on priority 3
(DSCP 26) and 45 % on priority 0, so the bottleneck is offered 1.8x its rate. The PAUSE
frames the bottleneck sends are captured at the switch port and decoded by tshark (an independent dissector).
A capture at sender L0's switch-side interface (its data out, the PAUSE/XON it receives) shows which of its
frames started while its priority 3 was paused: priority 0 keeps flowing, priority 3 does not.
A trial on an unhealthy emulator (socket drops, late frames, a PFC reaction slower than the headroom covers)
is rerun once; if still unhealthy the test fails saying so, it does not skip — except lateness alone (docs/pfc.md,
"Lateness in the incast fixture": it tracks the hypervisor's steal time on this VM, the plain core is as late in
the same fixture): the counted checks still run, the trial stays invalid for timing and the warning gives its
late fraction next to the host steal measured over the trial.
"""

from __future__ import annotations

import json
import shutil
import warnings
from contextlib import ExitStack

import pytest

from testbed.emu.capture import tcpdump, tcpdump_argv
from testbed.emu.registry import RunRegistry
from testbed.links.accounting import link_node_ledger
from testbed.links.pcap import read_pcap
from testbed.links.wire import name_prefix
from testbed.pfc.config import PfcConfig, WatchdogParams
from testbed.pfc.fanin import FanIn, IncastParams, run_trial, started_while_paused
from tests.integration.pfcwire import decode_pfc

pytestmark = [pytest.mark.root]

RATE = 20e6
ROCE_TOS, LOSSY_TOS = 26 << 2 | 2, 0
#: xoff 30 KB; headroom fixed at 200 KB for the ingress ports the bottleneck's buffer stands for (the formula
#: gives 10.3 KB a port at the real 20G over 20 m, which covers < 1 ms of emulator reaction at these rates).
PFC = PfcConfig(priorities=(3,), xoff_bytes=30e3, xon_bytes=30e3 - 2 * 1538, headroom_bytes=200e3)
SENDERS = 2  # 2:1: three link cores (the fewer processes, the fewer vCPU wake-ups; docs/pfc.md)
FLOWS = [(i, tos, 0.45 * RATE / 8000) for i in range(SENDERS) for tos in (ROCE_TOS, LOSSY_TOS)]
SECONDS = 1.5
#: A stuck receiver refreshing PAUSE for 2 s (emulated); the bottleneck's watchdog detects after 0.5 ms real
#: (0.5 s emulated) of continuous pause with frames queued and restores 0.5 s after the last PAUSE.
STORM_S = 2.0
WATCHDOG_PFC = PfcConfig(priorities=(3,), xoff_bytes=PFC.xoff_bytes, xon_bytes=PFC.xon_bytes,
                         headroom_bytes=PFC.headroom_bytes,
                         watchdog=WatchdogParams(detect_s=0.5e-3, restore_s=0.5e-3, action="drop"))


def _trial(fan, tmp_path, pfc_on: bool, capture: bool = False, pfc: PfcConfig = PFC, storm_s=None) -> dict:
    params = IncastParams(senders=SENDERS, rate_bps=RATE, pfc=pfc, pfc_on=pfc_on)
    # a storm starts before the senders (its first PAUSE is out) and they send through it and SECONDS
    # after it, so what the watchdog restores is seen delivered again
    seconds = SECONDS + (storm_s or 0.0)
    for attempt in range(2):
        sender_pcap = tmp_path / f"l0-{pfc_on}-{attempt}.pcap"
        with ExitStack() as stack:
            if capture:   # sender L0's b side: its data frames out, the PFC frames it receives (64 B each)
                argv = tcpdump_argv(f"{fan.p}b0", sender_pcap, [], snaplen=64, buffer_kib=8192, nano=True)
                stack.enter_context(tcpdump(lambda a, log: fan.run.spawn(a, log=log), argv,
                                            sender_pcap.with_suffix(".log"), "sender L0's switch side"))
            res = run_trial(fan, params, FLOWS, seconds, seed=7 + attempt, storm_s=storm_s,
                            capture=tmp_path / f"pfc-{pfc_on}-{attempt}.pcap" if capture else None)
        res["pcap"] = tmp_path / f"pfc-{pfc_on}-{attempt}.pcap"
        if capture:
            res["l0"] = started_while_paused(read_pcap(sender_pcap), params)
        if res["valid"]:
            return res
    if [k for k, ok in res["checks"].items() if not ok] == ["late_fraction_ok"]:
        # docs/pfc.md, "Lateness in the incast fixture": late frames come in episodes where the hypervisor runs
        # none of the VM's vCPUs (steal); the plain core is as late in this fixture. What these tests assert
        # (drops per priority, PAUSE counts, tshark) is counted, not timed, and the reaction check still guards
        # the headroom; the trial stays marked invalid.
        assert res["emulator_late"] > 0 and not res["valid"]
        warnings.warn(f"PFC trial late on {res['emulator_late']} of {res['frames']} frames "
                      f"({100 * res['late_fraction']:.1f} %, host steal {100 * res['host_steal']:.1f} % over the trial; "
                      "invalid for timing)", stacklevel=2)
        return res
    raise AssertionError(f"emulator unhealthy twice (PFC {'on' if pfc_on else 'off'}): {res['checks']}, "
                         f"reaction {res['reaction']}, late {res['emulator_late']} of {res['frames']}, "
                         f"host steal {100 * res['host_steal']:.1f} %")


@pytest.fixture(scope="module")
def trials(tmp_path_factory):
    assert shutil.which("tshark"), "tshark is missing: make setup installs it (a setup failure, not a skip)"
    tmp = tmp_path_factory.mktemp("pfc-incast")
    with RunRegistry("pfc-incast-test") as run:
        fan = FanIn(run, name_prefix("p"), tmp, SENDERS)
        fan.build()
        yield {"on": _trial(fan, tmp, True, capture=True), "off": _trial(fan, tmp, False),
               "storm": _trial(fan, tmp, True, pfc=WATCHDOG_PFC, storm_s=STORM_S)}


def test_pfc_on_roce_priority_is_lossless_and_lossy_drops(trials):
    led = trials["on"]["ledger"]["priorities"]
    roce, lossy = led["3"], led["0"]
    assert roce["lossless"] and roce["sent"] > 2500
    assert roce["dropped"] == 0 and roce["delivered"] == roce["sent"], roce["drops"]
    assert lossy["drops"].get("bottleneck_drop_tail", 0) > 0          # priority 0 is not protected
    assert lossy["unaccounted"] == 0 and roce["unaccounted"] == 0
    for name, doc in trials["on"]["stats"].items():                   # the run-wide ledger reads the same stats
        node = link_node_ledger(doc)
        assert node["unaccounted"] == 0 and node["in_flight"] == 0, (name, node)
        assert node["modelled"]["pfc"] == 0
    lr = trials["on"]["pfc"]["LR"]["a>b"]
    assert lr["ingress"]["3"]["pause_sent"] > 0 and lr["ingress"]["3"]["xon_sent"] > 0
    assert lr["ingress"]["3"]["max_bytes"] >= PFC.xoff_bytes          # xoff was crossed, the headroom held
    assert lr["ingress"]["3"]["max_bytes"] <= PFC.xoff_bytes + PFC.headroom_bytes
    for n in [f"L{i}" for i in range(SENDERS)]:                                # every sender was held, then resumed
        eg = trials["on"]["pfc"][n]["a>b"]["egress"]["3"]
        assert eg["pause_received"] > 0 and eg["paused_s"] > 0.1 * SECONDS


def test_a_paused_priority_does_not_stop_another(trials):
    """Issue 16, live: while sender L0's priority 3 was paused, its priority 0 kept starting frames (at about
    its offered rate) and priority 3 did not. Windows: the PFC frames captured at L0, each acting one cable
    after its stamp; the capture must see the PFC frames L0's core took and the paused time it reports."""
    on = trials["on"]
    got, l0 = on["l0"], on["pfc"]["L0"]["a>b"]
    print("sender L0's capture:", json.dumps(got), "core:", l0["pfc_rx_frames"], "PFC frames,",
          l0["egress"]["3"]["paused_s"], "s paused")                   # the figures (pytest -rP shows them)
    assert got["pfc_frames"] == l0["pfc_rx_frames"] > 0
    assert got["paused_s"] == pytest.approx(l0["egress"]["3"]["paused_s"], rel=0.02)
    p0, p3 = got["frames"][0], got["frames"][3]
    pps = 0.45 * RATE / 8000                                           # priority 0's offered rate
    # stopped with priority 3, priority 0 would start ~0 frames in the pauses; flowing, about pps x paused_s
    # (less the 0.5 ms margin at each pause's start and the frames of catch-up bursts)
    assert p0["in"] >= 0.25 * pps * got["paused_s"], got
    assert p3["in"] <= 0.01 * (p3["in"] + p3["out"]), got               # the pauses held priority 3


def test_pfc_off_same_incast_drops_on_both_priorities(trials):
    led = trials["off"]["ledger"]["priorities"]
    assert not led["3"]["lossless"]
    assert led["3"]["drops"].get("bottleneck_drop_tail", 0) > 0.2 * led["3"]["sent"]
    assert led["0"]["drops"].get("bottleneck_drop_tail", 0) > 0
    assert all(r["unaccounted"] == 0 for r in led.values())
    assert trials["off"]["pfc"]["LR"]["a>b"]["pfc_tx_frames"] == 0    # nothing paused


def test_tshark_decodes_the_captured_pauses_as_pfc(trials):
    on = trials["on"]
    layers = decode_pfc(on["pcap"])
    sent = on["pfc"]["LR"]["a>b"]["pfc_tx_frames"]
    assert len(layers) == sent                                       # every PAUSE/XON sent was on the wire
    assert {x["eth.dst"][0] for x in layers} == {"01:80:c2:00:00:01"}
    assert {int(x["macc.opcode"][0], 0) for x in layers} == {0x0101}
    assert {int(x["macc.cbfc.enbv"][0], 0) for x in layers} == {0x08}
    times = [int(x["macc.cbfc.pause_time.c3"][0]) for x in layers]
    assert times.count(0xFFFF) == on["pfc"]["LR"]["a>b"]["ingress"]["3"]["pause_sent"]
    assert times.count(0) == on["pfc"]["LR"]["a>b"]["ingress"]["3"]["xon_sent"]


def test_watchdog_breaks_a_stuck_receivers_storm_and_restores(trials):
    storm = trials["storm"]
    lr = storm["pfc"]["LR"]["a>b"]
    wd = lr["watchdog"]["3"]
    assert lr["egress"]["3"]["pause_received"] >= 4                     # the stuck receiver's refreshes
    assert wd["storms"] >= 1 and wd["restorations"] == wd["storms"] and not wd["in_storm"]
    # declared 0.5 s into the pause, ended 0.5 s after the last PAUSE: about the storm's length
    assert 0.5 * STORM_S <= wd["storm_s"] <= STORM_S + 1.0
    roce = storm["ledger"]["priorities"]["3"]
    assert roce["drops"].get("bottleneck_drop_pfc_watchdog", 0) > 0      # dropped while in storm, counted
    assert roce["drops"].get("bottleneck_drop_pfc_headroom", 0) == 0
    assert roce["unaccounted"] == 0 and roce["delivered"] > 0           # and delivered again after it
