"""``testbed run pfc_fabric --quick``: PFC inside a replica (OVS spine-leaf, every link a link node).

Issue 16's acceptance on a replica: on the same fabric a 4:1 incast on a lossy priority loses frames at the
queues that overflow, each loss counted where it happened; on the lossless priority nothing is lost, the
receiver's port sends PAUSE, and the pause spreads hop by hop back to every sender's NIC (through the spine
and the far leaf's uplink: the relays follow the routes).
"""

from __future__ import annotations

import json
import shutil

import pytest

from tests.integration.pfcwire import decode_pfc
from tests.integration.runhealth import check_health

pytestmark = [pytest.mark.root, pytest.mark.mininet, pytest.mark.ovs, pytest.mark.slow]

#: Runs the lossless claim may take: it holds only for a trial whose link nodes reacted in time (a late
#: PAUSE overruns the headroom: the trial then says INVALID, why, and where the frames went).
ATTEMPTS = 2


def _run(out, capsys):
    from scenarios import pfc_fabric

    assert pfc_fabric.main(["--quick", "--out", str(out)]) == 0
    printed = capsys.readouterr()
    assert "PFC in a spine-leaf replica" in printed.out, printed.out
    summary = json.loads((out / "summary.json").read_text())
    metrics = json.loads((out / "metrics.json").read_text())
    return {r["trial"]: r for r in summary["rows"]}, metrics, printed


def test_pfc_fabric_quick(tmp_path, capsys):
    for attempt in range(1, ATTEMPTS + 1):
        rows, metrics, printed = _run(tmp_path / f"run{attempt}", capsys)
        if rows["lossless"]["valid"]:
            break
    lossy, lossless = rows["lossy"], rows["lossless"]
    assert lossless["valid"], f"the lossless trial was invalid {ATTEMPTS} times: {metrics['emulator']['reasons']}"
    trials = {t["label"]: t for t in metrics["trials"]}
    # lossless: every datagram of every sender arrives, no queue dropped one, and the pause spread
    assert lossless["sent"] > 3000 and lossless["received"] == lossless["sent"] and lossless["dropped"] == 0
    assert all(s["lost"] == 0 for s in trials["lossless"]["streams"].values())
    assert len(trials["lossless"]["streams"]) == 4 and trials["lossless"]["ledger"]["held"] == 0
    assert lossless["pause_sent_at_receiver_port"] > 0
    paused = set(lossless["directions_paused"])
    # one hop (the receiver leaf's feeders), two hops (the spine's feeder), three (the far leaf's hosts)
    assert {"h3>l1", "h5>l1", "s0>l1", "l0>s0", "h0>l0", "h1>l0", "h2>l0"} <= paused, paused
    assert "l1>s0" not in paused and "s0>l0" not in paused      # not feeders of the congested ports
    assert lossless["senders_paused"] == 4 and lossless["sender_paused_s_mean"] > 0
    hops = {d: c for dirs in trials["lossless"]["hops"].values() for d, c in dirs.items()}
    xoff = 40e3
    assert xoff <= hops["l1>h4"]["max_bytes"] < xoff + metrics_headroom(tmp_path, attempt, "l1", "h4")
    # lossy, same replica, same load: the overflowing queues drop, and every loss is one of their drops
    assert lossy["dropped"] > 0 and lossy["pause_sent_total"] == 0 and lossy["directions_paused"] == []
    drops = trials["lossy"]["ledger"]["drops"]
    assert set(drops) <= {"dl3 l0>s0 drop_tail", "dl5 l1>h4 drop_tail"} and drops, drops
    if lossy["valid"]:
        assert lossy["unaccounted"] == 0 and lossy["received"] + lossy["dropped"] == lossy["sent"]
    check_health(metrics, printed.out + printed.err, healthy=False, links=True)
    # the PFC frames h4's port sent, on the wire at l1's port, decoded by an independent dissector
    assert shutil.which("tshark"), "tshark is missing: make setup installs it (a setup failure, not a skip)"
    layers = decode_pfc(tmp_path / f"run{attempt}" / trials["lossless"]["pcap"]["file"])
    port = hops["l1>h4"]
    assert len(layers) == port["pause_sent"] + port["xon_sent"] > 0
    assert {x["eth.dst"][0] for x in layers} == {"01:80:c2:00:00:01"}
    assert {int(x["macc.opcode"][0], 0) for x in layers} == {0x0101}
    assert {int(x["macc.cbfc.enbv"][0], 0) for x in layers} == {0x08}                # priority 3 only
    times = [int(x["macc.cbfc.pause_time.c3"][0]) for x in layers]
    assert times.count(0xFFFF) == port["pause_sent"] and times.count(0) == port["xon_sent"]


def metrics_headroom(tmp_path, attempt: int, u: str, v: str) -> float:
    """The headroom the plan gave direction u->v (plan.json of that run)."""
    plan = json.loads((tmp_path / f"run{attempt}" / "plan.json").read_text())
    for lk in plan["pfc"]["links"]:
        if (lk["u"], lk["v"]) == (u, v):
            return lk["ab"]["headroom_bytes"]
        if (lk["v"], lk["u"]) == (u, v):
            return lk["ba"]["headroom_bytes"]
    raise AssertionError(f"no PFC link {u}-{v} in plan.json")
