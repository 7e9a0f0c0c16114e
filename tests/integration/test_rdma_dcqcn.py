"""DCQCN closed loop on a real emulated path (root): a soft-RDMA WRITE stream at twice the bottleneck's
rate through the link engineer's delay line, which marks CE with RED; the receiver's notification point
answers with CNPs, the sender's reaction point cuts its rate, and the capture validates (CNP format,
CNP spacing per QP, ECN codepoints)::

    ns A: testbed rdma write-bw --dcqcn (line 100G / scale 1000 = 100 Mbit/s)
        --> delay line: 50 Mbit/s, RED on the queue (ECN)  --> ns B: testbed rdma server (+ tcpdump)
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from testbed.emu.registry import RunRegistry
from testbed.links.model import LinkParams, RedParams
from testbed.links.wire import open_wire
from testbed.roce.check import check_capture, passed

pytestmark = [pytest.mark.root]

CLI = [sys.executable, "-m", "testbed.cli"]
SCALE = 1000


def test_ce_marks_become_cnps_and_rate_cuts(tmp_path):
    red = RedParams(kmin=5, kmax=40, pmax=0.2, unit="packets", ecn=True)
    series = tmp_path / "series.csv"
    with RunRegistry("rdma-it-dcqcn", exclusive=False) as run:
        wire = open_wire(run, tmp_path, LinkParams(rate_bps=50e6, delay_s=0.0005, red=red), tag="r")
        run.spawn(CLI + ["rdma", "server", "--once", "--bind", "0.0.0.0"], netns=wire.ns_b, log=tmp_path / "server.log")
        with wire.capture("b", 4791, "roce") as pcap:
            res = subprocess.run(wire.exec_argv("a", CLI + [
                "rdma", "write-bw", wire.ip_b, "--size", "256KiB", "--duration", "4s", "--dcqcn",
                "--line-rate", "100G", "--scale", str(SCALE), "--timeout", "1ms", "--wait", "20s",
                "--series", str(series), "--verify", "--json"]), capture_output=True, text=True, timeout=120)
        wire.stop()
    assert res.returncode == 0, res.stderr[-2000:]
    r = json.loads(res.stdout)
    server = r["server"]["stats"]
    assert r["verified"] is True
    assert server["ce_rx"] > server["cnps_tx"] > 0, server     # NP: at most one CNP per interval
    assert r["cnps_rx"] > 0                                     # RP saw them
    rows = series.read_text().strip().splitlines()[1:]
    rates = [float(row.split(",")[1]) for row in rows]
    assert min(rates) < 0.75 * 100e6                            # the rate was cut below line rate
    report = check_capture(pcap, cnp_interval=50e-6 * SCALE, require_ect=True)
    assert passed(report), report["violations"][:5]
    assert report["cnp"] > 0 and sum(q["ce_marked"] for q in report["qps"]) > 0
