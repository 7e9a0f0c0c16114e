"""Soft RDMA between two network namespaces (a veth), as root:

* a 64 MiB RDMA WRITE arrives byte-exact with 1% random loss at both ends, and ``testbed roce check``
  on a tcpdump capture of the receiver's interface reports the retransmissions and no violation;
* 10,000 fuzzed RoCE packets go into the validator (as a capture) and into a live endpoint while a
  transfer runs beside them: nothing crashes, they are counted as malformed, the transfer completes.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from scapy.utils import wrpcap

from testbed.emu.registry import RunRegistry
from testbed.poll import poll
from testbed.rdma.netns import make_path, roce_capture
from testbed.roce.check import check_capture, passed
from testbed.roce.craft import fuzzed

pytestmark = [pytest.mark.root]

CLI = [sys.executable, "-m", "testbed.cli"]


def _client(path, *args, timeout=240):
    argv = ["ip", "netns", "exec", path.ns_a] + CLI + ["rdma", "write-bw", path.ip_b, "--wait", "20s", "--json",
                                                       *args]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, res.stderr[-2000:]
    return json.loads(res.stdout)


def test_64mb_write_with_loss_is_byte_exact_and_capture_validates(tmp_path):
    pcap = tmp_path / "rx.pcap"
    with RunRegistry("rdma-it-loss", exclusive=False) as run:
        path = make_path(run, "rdt1")
        run.spawn(CLI + ["rdma", "server", "--once", "--bind", "0.0.0.0"], netns=path.ns_b, log=tmp_path / "server.log")
        with roce_capture(run, path, pcap):
            r = _client(path, "--size", "64MiB", "--iters", "1", "--loss", "1%", "--window", "32",
                        "--timeout", "20ms", "--verify")
    assert r["verified"] is True and r["iterations"] == 1 and r["bytes"] == 64 << 20
    assert r["retransmissions"] > 0 and r["dropped_tx"] > 0
    report = check_capture(pcap)
    assert passed(report), report["violations"][:5]
    data_qp = next(q for q in report["qps"] if q["dqpn"] == r["remote"]["qpn"])
    assert data_qp["retransmissions"] > 0 and data_qp["messages"] == 1
    assert data_qp["message_bytes"] == 64 << 20
    ack_qp = next(q for q in report["qps"] if q["dqpn"] == r["local"]["qpn"])
    assert ack_qp["naks"] > 0 and report["icrc_bad"] == 0 and report["malformed"] == 0


def test_fuzz_into_validator_and_live_endpoint(tmp_path):
    frames = fuzzed(10_000, seed=11, src="10.77.2.1", dst="10.77.2.2")
    cap = tmp_path / "fuzz.pcap"
    wrpcap(str(cap), frames, linktype=101)
    report = check_capture(cap)
    assert report["packets"] == 10_000 and report["malformed"] > 5_000

    frames_file = tmp_path / "fuzz.bin"
    frames_file.write_bytes(b"".join(len(f).to_bytes(2, "big") + f for f in frames))
    blaster = tmp_path / "blast.py"
    blaster.write_text(
        "import socket, sys\n"
        "blob = open(sys.argv[1], 'rb').read()\n"
        "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "i = sent = 0\n"
        "while i < len(blob):\n"
        "    n = int.from_bytes(blob[i:i + 2], 'big'); f = blob[i + 2:i + 2 + n]; i += 2 + n\n"
        "    s.sendto(f[28:], (sys.argv[2], 4791)); sent += 1\n"
        "print(sent)\n")
    with RunRegistry("rdma-it-fuzz", exclusive=False) as run:
        path = make_path(run, "rdt2", subnet="10.77.2")
        run.spawn(CLI + ["rdma", "server", "--once", "--json", "--bind", "0.0.0.0"], netns=path.ns_b, log=tmp_path / "server.log")
        client = subprocess.Popen(["ip", "netns", "exec", path.ns_a] + CLI +
                                  ["rdma", "write-bw", path.ip_b, "--wait", "20s", "--json", "--size", "256KiB",
                                   "--duration", "6s", "--verify"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True)
        poll(lambda: subprocess.run(["ip", "netns", "exec", path.ns_b, "ss", "-Hunl", "sport", "=", ":4791"],
                                    capture_output=True, text=True).stdout.strip(), 30,
             what="the server's RoCE port to open")
        blast = subprocess.run(["ip", "netns", "exec", path.ns_a, sys.executable, str(blaster), str(frames_file),
                                path.ip_b], capture_output=True, text=True, timeout=120)
        out, err = client.communicate(timeout=240)
    assert blast.returncode == 0 and int(blast.stdout) == 10_000
    assert client.returncode == 0, err[-2000:]
    r = json.loads(out)
    assert r["verified"] is True and r["iterations"] > 0
    dev = r["server"]["device"]
    stats = r["server"]["stats"]
    set_aside = dev["rx_malformed"] + dev["rx_icrc_bad"] + dev["rx_unknown_qp"] + stats["malformed_rx"]
    assert set_aside >= 5_000 and dev["rx"] >= set_aside  # (a few are lost to a full socket buffer)
