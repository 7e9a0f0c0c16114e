"""Inside the test VM: the kernel link backend (tc netem -> tbf -> red from testbed.links.tc) between two
namespaces, measured the way tests/integration/test_link_delayline.py measures the userspace delay line
(ping RTT, iperf3 goodput, the UDP probe's loss and CE counts), and every lost probe attributed to a qdisc
counter.

    netns A [10.78.0.1] ==veth (tc on both egresses)== [10.78.0.2] netns B

Rates and packet rates are lower than the host test's: the guest's CPU is QEMU TCG on a shared machine.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.emu import ops
from testbed.emu.registry import RunRegistry
from testbed.links import tc
from testbed.links.model import LinkParams, LossModel, RedParams
from testbed.links.probe import summarise
from testbed.poll import poll

IP_A, IP_B = "10.78.0.1", "10.78.0.2"
REPO = Path(__file__).resolve().parents[3]


class KernelWire:
    def __init__(self, run: RunRegistry, workdir: Path):
        p = f"kw{os.getpid() % 10000:04d}"
        self.run, self.workdir = run, workdir
        self.ns = {"a": f"{p}A", "b": f"{p}B"}
        self.dev = {"a": f"{p}a", "b": f"{p}b"}
        run.add_netns(self.ns["a"])
        run.add_netns(self.ns["b"])
        run.add_veth(self.dev["a"], self.dev["b"], ns_a=self.ns["a"], ns_b=self.ns["b"])
        for side, ip in (("a", IP_A), ("b", IP_B)):
            ops.run(ops.in_netns(["ip", "addr", "add", f"{ip}/24", "dev", self.dev[side]], self.ns[side]),
                    what=f"address {self.dev[side]}")

    def shape(self, params: LinkParams, sides=("a", "b")) -> None:
        for side in ("a", "b"):
            subprocess.run(tc.clear_cmd(self.dev[side], self.ns[side]), capture_output=True)
        for side in sides:
            for argv in tc.link_cmds(self.dev[side], params, netns=self.ns[side]):
                ops.run(argv, what=f"tc on {self.dev[side]}")

    def qdiscs(self, side: str) -> dict[str, dict]:
        out = subprocess.run(["ip", "netns", "exec", self.ns[side], "tc", "-s", "-j", "qdisc", "show", "dev",
                              self.dev[side]], capture_output=True, text=True, check=True).stdout
        return {q["kind"]: q for q in json.loads(out)}

    def exec_argv(self, side: str, argv: list[str]) -> list[str]:
        return ops.netns_exec_argv(argv, self.ns[side])

    def probe(self, count: int, pps: float, size: int, tos: int = 0, port: int = 5201) -> tuple[dict, dict]:
        ready, out = self.workdir / "probe.ready", self.workdir / "probe.json"
        for f in (ready, out):
            f.unlink(missing_ok=True)
        py = [sys.executable, "-m", "testbed.links.probe"]
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        recv = subprocess.Popen(self.exec_argv("b", py + ["recv", "--port", str(port), "--ready", str(ready),
                                                          "--out", str(out), "--count", str(count),
                                                          "--idle", "2", "--timeout", "120"]), env=env)
        try:
            poll(ready.exists, timeout=30, interval=0.05, what="probe receiver to bind")
            sent = subprocess.run(self.exec_argv("a", py + ["send", "--dst", IP_B, "--port", str(port), "--count",
                                                            str(count), "--pps", str(pps), "--size", str(size),
                                                            "--tos", str(tos)]),
                                  env=env, capture_output=True, text=True, timeout=180, check=True)
            recv.wait(timeout=180)
        finally:
            if recv.poll() is None:
                recv.kill()
                recv.wait()
        return json.loads(sent.stdout), json.loads(out.read_text())


@pytest.fixture(scope="module")
def wire(tmp_path_factory):
    with RunRegistry("vm-kernel-links", exclusive=False) as run:
        yield KernelWire(run, tmp_path_factory.mktemp("kwire"))


def test_netem_50ms_one_way_delay_by_ping(wire):
    wire.shape(LinkParams(delay_s=0.050))
    out = subprocess.run(wire.exec_argv("a", ["ping", "-c", "10", "-i", "0.2", "-q", IP_B]),
                         capture_output=True, text=True, check=True).stdout
    avg_rtt_ms = float(re.search(r"= [\d.]+/([\d.]+)/", out).group(1))
    assert avg_rtt_ms / 2 == pytest.approx(50.0, rel=0.05), out
    assert wire.qdiscs("a")["netem"]["packets"] >= 10


def test_netem_tbf_20mbit_rate_by_iperf3(wire):
    wire.shape(LinkParams(rate_bps=20e6, delay_s=0.002, limit=200))
    server = wire.run.spawn(wire.exec_argv("b", ["iperf3", "-s", "-1", "-p", "5301"]),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    poll(lambda: subprocess.run(wire.exec_argv("b", ["ss", "-Hltn", "sport = :5301"]), capture_output=True,
                                text=True).stdout.strip(), timeout=30, what="iperf3 server to listen")
    out = subprocess.run(wire.exec_argv("a", ["iperf3", "-c", IP_B, "-p", "5301", "-t", "5", "-O", "1", "-J"]),
                         capture_output=True, text=True, timeout=120)
    server.wait(timeout=30)
    assert out.returncode == 0, out.stdout[-500:] + out.stderr[-500:]
    received_bps = json.loads(out.stdout)["end"]["sum_received"]["bits_per_second"]
    assert received_bps == pytest.approx(20e6, rel=0.10)


def test_netem_one_percent_loss_over_10k_packets(wire):
    wire.shape(LinkParams(loss=LossModel(rate=0.01)), sides=("a",))
    sent, result = wire.probe(count=10_000, pps=2000, size=64)
    s = summarise(result, sent["sent"])
    netem = wire.qdiscs("a")["netem"]
    assert s["loss"] == pytest.approx(0.01, abs=0.003)
    assert s["lost"] == netem["drops"]   # every loss is netem's, none the machine's


@pytest.mark.parametrize("tos", [0x02, 0x00], ids=["ect", "not-ect"])
def test_red_marks_ect_and_drops_not_ect_above_the_bottleneck(wire, tos):
    red = RedParams(kmin=5, kmax=30, pmax=0.2, unit="packets")
    wire.shape(LinkParams(rate_bps=10e6, delay_s=0.002, limit=100, red=red), sides=("a",))
    sent, result = wire.probe(count=2000, pps=1700, size=1472, tos=tos)  # 2x the 10 Mbit/s bottleneck
    s = summarise(result, sent["sent"])
    q = wire.qdiscs("a")
    marked = q["red"].get("marked", 0)
    drops = sum(x.get("drops", 0) for x in q.values())
    if tos:
        assert s["ce"] > 0 and marked == s["ce"] and q["red"].get("early", 0) == 0, q["red"]
    else:
        assert s["ce"] == 0 and marked == 0 and q["red"].get("early", 0) > 0, q["red"]
    assert s["lost"] == drops, q   # every lost probe is a qdisc drop (tail or RED)
