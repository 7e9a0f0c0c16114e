"""``testbed run pfc_fabric --quick --switches bmv2``: PFC on a BMv2 fabric (p4/fabric.p4 accounts lossless
bytes per ingress port and pauses the ports that filled its queue).

The same 4:1 incast as on OVS (test_pfc_fabric.py): on the lossy priority BMv2's full queues drop, each drop
counted by the switch; on the lossless priority nothing is lost and the switches' own PAUSE frames reach
the senders. What differs from OVS, and is asserted: a BMv2 leaf pauses only the ingress ports whose
frames filled the queue; h5, whose NIC sends nothing, is never paused (on OVS every feeder of the port is).
"""

from __future__ import annotations

import json
import shutil

import pytest

from tests.integration.pfcwire import decode_pfc
from tests.integration.runhealth import check_health

pytestmark = [pytest.mark.root, pytest.mark.mininet, pytest.mark.bmv2, pytest.mark.slow]

#: Runs the lossless claim may take: it holds only for a trial whose emulator reacted in time (the trial
#: says INVALID, why, and where the frames went otherwise). 2 of ~20 quick runs on 2026-12-05 had BMv2's
#: accounting drop lossless frames at l0 (docs/pfc.md "On BMv2": cause not yet found), hence three.
ATTEMPTS = 3


def _run(out, capsys):
    from scenarios import pfc_fabric

    assert pfc_fabric.main(["--quick", "--switches", "bmv2", "--out", str(out)]) == 0
    printed = capsys.readouterr()
    assert "PFC in a spine-leaf replica" in printed.out, printed.out
    summary = json.loads((out / "summary.json").read_text())
    metrics = json.loads((out / "metrics.json").read_text())
    return {r["trial"]: r for r in summary["rows"]}, metrics, printed, summary


def test_pfc_fabric_quick_on_bmv2(tmp_path, capsys):
    for attempt in range(1, ATTEMPTS + 1):
        rows, metrics, printed, summary = _run(tmp_path / f"run{attempt}", capsys)
        if rows["lossless"]["valid"]:
            break
    assert summary["switches"] == "bmv2" and summary["pfc"]["applied"] and summary["pfc"]["p4_ports"] == 10
    lossy, lossless = rows["lossy"], rows["lossless"]
    assert lossless["valid"], f"the lossless trial was invalid {ATTEMPTS} times: {metrics['emulator']['reasons']}"
    trials = {t["label"]: t for t in metrics["trials"]}
    # lossless: every datagram arrives, nothing dropped anywhere (link node or switch)
    assert lossless["sent"] > 3000 and lossless["received"] == lossless["sent"] and lossless["dropped"] == 0
    assert all(s["lost"] == 0 for s in trials["lossless"]["streams"].values())
    # once the queues drained, fabric.p4 accounts nothing any more (no bytes leaked in its registers)
    held = {sw: doc["pfc_held_bytes"] for sw, doc in trials["lossless"]["switches"].items()}
    assert all(v == 0 for ports in held.values() for v in ports.values()), held
    # the switches paused the ingress ports that filled their queues: l0's hosts (its uplink carries 1.2x),
    # and at l1 the spine's port or h3's (h4's queue); never h5, which sends nothing
    sw = lossless["switch_pause_sent"]
    paused = set(lossless["directions_paused"])
    assert {"l0>h0", "l0>h1", "l0>h2"} <= set(sw), sw
    assert set(sw) & {"l1>s0", "l1>h3"}, sw
    assert "l1>h5" not in sw and "h5>l1" not in paused, (sw, paused)
    assert {"h0>l0", "h1>l0", "h2>l0"} <= paused and lossless["senders_paused"] >= 3, paused
    assert "l1>s0" not in paused and "s0>l0" not in paused      # not feeders of the congested ports
    # a paused link node behind a switch sent PAUSE into it, and the switch relayed it (fabric.p4's
    # pfc_relay): the spine's queue towards l1 paused l0's uplink
    if "s0>l1" in paused:
        assert "l0>s0" in paused and trials["lossless"]["switches"]["s0"]["pfc_rx"]
    # lossy: BMv2's queues overflow, every loss one of the switches' counted drops
    assert lossy["dropped"] > 0 and lossy["pause_sent_total"] == 0 and lossy["switch_pause_sent"] == {}
    drops = trials["lossy"]["ledger"]["drops"]
    # at BMv2's full queues; a link node behind one may also tail-drop what BMv2 bursts after a stall
    assert any(" bmv2 tail" in k for k in drops), drops
    assert all(" bmv2 " in k or k.endswith(" drop_tail") for k in drops), drops
    if lossy["valid"]:
        assert lossy["unaccounted"] == 0 and lossy["received"] + lossy["dropped"] == lossy["sent"]
    check_health(metrics, printed.out + printed.err, healthy=False, links=True)
    # the PFC frames l1 sent out of its port to the spine, on the wire, decoded by an independent dissector
    assert shutil.which("tshark"), "tshark is missing: make setup installs it (a setup failure, not a skip)"
    from testbed.p4rt.entries import router_mac

    plan = json.loads((tmp_path / f"run{attempt}" / "plan.json").read_text())
    l1 = router_mac(next(s["dpid"] for s in plan["switches"] if s["node"] == "l1"))
    layers = decode_pfc(tmp_path / f"run{attempt}" / trials["lossless"]["pcap"]["file"])
    to_spine = [x for x in layers if x["eth.src"][0] == l1]
    p4 = trials["lossless"]["switches"]["l1"]
    port = next(p["port"] for s in plan["switches"] if s["node"] == "l1" for p in s["ports"] if p["peer"] == "s0")
    assert len(to_spine) == p4["pfc_pause_sent"][str(port)] + p4["pfc_xon_sent"][str(port)]
    if sw.get("l1>s0"):
        assert {int(x["macc.opcode"][0], 0) for x in to_spine} == {0x0101}
        assert {int(x["macc.cbfc.enbv"][0], 0) for x in to_spine} == {0x08}           # priority 3 only
        assert 0xFFFF in [int(x["macc.cbfc.pause_time.c3"][0]) for x in to_spine]
