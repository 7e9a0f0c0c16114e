"""Every transport of the soft-RDMA endpoint between two namespaces (root), captured and checked:

    netns rdt3-a: testbed rdma <test> --verify  ==veth==  netns rdt3-b: testbed rdma server (+ tcpdump)

* the server, started with no ``--bind`` inside its own namespace, listens on all addresses and says so;
* RC WRITE on 2 QPs, RC READ, RC atomics, UC WRITE, UC SEND and UD SEND all verify byte-exact;
* ``testbed roce check --expect-ect`` on the capture reports 0 violations, 0 malformed, 0 bad ICRC;
* each QP sends from the UDP source port rdma_rxe would use for its QP number.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from scapy.layers.inet import UDP
from scapy.utils import rdpcap

from testbed.emu.registry import RunRegistry
from testbed.poll import poll
from testbed.rdma.netns import make_path, roce_capture
from testbed.rdma.wire import qp_source_port
from testbed.roce.check import check_capture, failures

pytestmark = [pytest.mark.root]

CLI = [sys.executable, "-m", "testbed.cli"]
RUNS = [("write-bw", "RC", "20KB", 2), ("read-bw", "RC", "20KB", 1), ("atomic-bw", "RC", "8B", 2),
        ("write-bw", "UC", "5KB", 1), ("send-bw", "UC", "3KB", 1), ("send-bw", "UD", "1KB", 2)]


def test_every_transport_verifies_and_its_capture_is_clean(tmp_path):
    pcap = tmp_path / "all.pcap"
    server_log = tmp_path / "server.log"
    results = []
    with RunRegistry("rdma-it-transports", exclusive=False) as run:
        path = make_path(run, "rdt3", subnet="10.77.3")
        run.spawn(CLI + ["rdma", "server"], netns=path.ns_b, log=server_log)
        with roce_capture(run, path, pcap):
            poll(lambda: "listening on" in server_log.read_text(), 30, what="the RDMA server to listen")
            for test, conn, size, qps in RUNS:
                argv = ["ip", "netns", "exec", path.ns_a] + CLI + [
                    "rdma", test, path.ip_b, "--connection", conn, "--size", size, "--iters", "20", "--qps", str(qps),
                    "--verify", "--json", "--wait", "20s"]
                res = subprocess.run(argv, capture_output=True, text=True, timeout=120)
                assert res.returncode == 0, (test, conn, res.stderr[-1500:])
                results.append(json.loads(res.stdout))
    assert "listening on 0.0.0.0:18515 (all addresses" in server_log.read_text()
    for (test, conn, _size, qps), r in zip(RUNS, results, strict=True):
        assert r["verified"] is True and r["iterations"] == 20 and r["qps"] == qps, (test, conn)
        assert r["transport"] == conn.lower()
    report = check_capture(pcap, require_ect=True)
    assert not failures(report), (failures(report), report["violations"][:5])
    assert report["malformed"] == 0 and report["icrc_bad"] == 0 and report["truncated_file"] is False
    opcodes = {bytes(p[UDP].payload)[0] for p in rdpcap(str(pcap))}
    # RC WRITE FIRST, READ request + FIRST response, FETCH_ADD + its ACK, UC WRITE FIRST, UC SEND FIRST, UD
    assert {0x06, 0x0C, 0x0D, 0x14, 0x12, 0x26, 0x20, 0x64} <= opcodes
    # each QP's datagrams leave from its rxe-derived source port
    ports = {}
    for p in rdpcap(str(pcap)):
        if p[UDP].sport != 4791 and bytes(p[UDP].payload)[0] != 0x81:
            ports.setdefault(p[UDP].sport, set())
    local_qps = [q for r in results for q in r["qp_list"]]
    assert all(q["sport"] == qp_source_port(q["qpn"]) for q in local_qps)
    assert {q["sport"] for q in local_qps} <= set(ports)


def test_rc_pingpong_protocol_between_namespaces(tmp_path):
    """``testbed rdma rc-pingpong`` on both ends with ibv_rc_pingpong's defaults (TCP 18515, UDP 4791):
    the server, in a namespace of its own, listens on all addresses; every message arrives intact; the
    capture of the exchange passes ``roce check``."""
    pcap = tmp_path / "pp.pcap"
    log = tmp_path / "pp-server.log"
    with RunRegistry("rdma-it-pingpong", exclusive=False) as run:
        path = make_path(run, "rdt4", subnet="10.77.4")
        with roce_capture(run, path, pcap):
            server = run.spawn(CLI + ["rdma", "rc-pingpong", "-n", "300", "--chk", "--json"], netns=path.ns_b, log=log)
            poll(lambda: "listening on 0.0.0.0:18515" in log.read_text(), 30, what="the rc-pingpong server")
            res = subprocess.run(["ip", "netns", "exec", path.ns_a] + CLI + ["rdma", "rc-pingpong", path.ip_b, "-n", "300",
                                                                             "--chk", "--json"],
                                 capture_output=True, text=True, timeout=120)
            server.wait(60)
    assert res.returncode == 0, res.stderr[-1500:]
    r = json.loads(res.stdout)
    served = json.loads(log.read_text()[log.read_text().index("{"):])
    assert r["verified"] and served["verified"] and r["iters"] == 300
    assert r["remote"]["gid"] == "00000000000000000000ffff0a4d0402"  # ::ffff:10.77.4.2, as rxe's GID
    report = check_capture(pcap, require_ect=True)
    assert not failures(report), (failures(report), report["violations"][:5])
    assert sum(q["messages"] for q in report["qps"]) == 600
