#!/usr/bin/env python3
"""Link fidelity, kernel (tc netem -> tbf -> red) vs the userspace delay line, side by side in one run.

Run inside the test VM (its kernel has netem and RED) by ``sudo make link-fidelity`` on the host, which
writes the table to docs/link-fidelity.md. Both backends are measured in the same guest, one after the
other, with the same probes the integration tests use: ping RTT/2 for delay, iperf3 goodput for rate, the
UDP probe (testbed.links.probe) for loss and ECN marks.

    python scripts/vm/link_fidelity.py --out FILE.md     (root, a kernel with sch_netem and sch_red)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "vm" / "guest"))

from kernelwire import KernelWire  # noqa: E402

from testbed.emu.registry import RunRegistry  # noqa: E402
from testbed.links.model import LinkParams, LossModel, RedParams  # noqa: E402
from testbed.links.probe import summarise  # noqa: E402
from testbed.links.wire import open_wire  # noqa: E402
from testbed.poll import poll  # noqa: E402

RED = RedParams(kmin=5, kmax=30, pmax=0.2, unit="packets")
CASES = (
    ("one-way delay (ping RTT/2), ms", "20", LinkParams(delay_s=0.020), "delay"),
    ("delay jitter (ping mdev), ms", "0", LinkParams(delay_s=0.020), "mdev"),
    ("goodput (iperf3 TCP), Mbit/s", "20", LinkParams(rate_bps=20e6, delay_s=0.002, limit=200), "rate"),
    ("random loss, % of 10k probes", "1.0", LinkParams(loss=LossModel(rate=0.01)), "loss"),
    ("ECT at 2x a 10 Mbit/s bottleneck: CE, % delivered", "RED 5-30 pkt, p 0.2",
     LinkParams(rate_bps=10e6, delay_s=0.002, limit=100, red=RED), "ce"),
    ("ECT at 2x the bottleneck: lost, %", "tail drops only", LinkParams(rate_bps=10e6, delay_s=0.002, limit=100,
                                                                         red=RED), "ect_loss"),
    ("not-ECT at 2x the bottleneck: lost, %", "RED + tail drops", LinkParams(rate_bps=10e6, delay_s=0.002,
                                                                              limit=100, red=RED), "nonect_loss"),
)


def _ping(link) -> tuple[float, float]:
    subprocess.run(link.exec_argv("a", ["ping", "-c", "1", "-W", "2", link.ip_b]), capture_output=True)
    out = subprocess.run(link.exec_argv("a", ["ping", "-c", "20", "-i", "0.2", "-q", link.ip_b]),
                         capture_output=True, text=True, check=True).stdout
    _mn, avg, _mx, mdev = (float(x) for x in re.search(r"= ([\d.]+)/([\d.]+)/([\d.]+)/([\d.]+)", out).groups())
    return avg / 2, mdev


def _iperf(link) -> float:
    server = link.run.spawn(link.exec_argv("b", ["iperf3", "-s", "-1", "-p", "5302"]),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    poll(lambda: subprocess.run(link.exec_argv("b", ["ss", "-Hltn", "sport = :5302"]), capture_output=True,
                                text=True).stdout.strip(), timeout=30, what="iperf3 server")
    out = subprocess.run(link.exec_argv("a", ["iperf3", "-c", link.ip_b, "-p", "5302", "-t", "5", "-O", "1", "-J"]),
                         capture_output=True, text=True, timeout=120, check=True)
    server.wait(timeout=30)
    return json.loads(out.stdout)["end"]["sum_received"]["bits_per_second"] / 1e6


def measure(link, metric: str) -> float:
    if metric == "delay":
        return _ping(link)[0]
    if metric == "mdev":
        return _ping(link)[1]
    if metric == "rate":
        return _iperf(link)
    if metric == "loss":
        sent, got = link.probe(10_000, 2000, 64)
        return 100 * summarise(got, sent["sent"])["loss"]
    tos = 0 if metric == "nonect_loss" else 0x02
    sent, got = link.probe(2000, 1700, 1472, tos)
    s = summarise(got, sent["sent"])
    if metric == "ce":
        return 100 * s["ce_fraction"]
    return 100 * s["loss"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="markdown file to write")
    args = ap.parse_args(argv)
    work = Path("/tmp/link-fidelity")
    rows = []
    with RunRegistry("link-fidelity", exclusive=False) as run:
        kw = KernelWire(run, work / "kernel")
        user = open_wire(run, work / "user", tag="u")
        for label, configured, params, metric in CASES:
            kw.shape(params, sides=("a", "b") if metric in ("delay", "mdev", "rate") else ("a",))
            k = measure(kw, metric)
            kw.shape(LinkParams())
            user.restart(params, seed=7)
            u = measure(user, metric)
            user.stop()
            user.proc = None
            rows.append((label, configured, k, u))
            print(f"{label}: kernel {k:.3g}, userspace {u:.3g}", flush=True)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    lines = ["# Link fidelity: kernel tc (netem -> tbf -> red) vs the userspace delay line", "",
             "Generated by `sudo make link-fidelity` (boots the test VM, docs/vm.md, and runs "
             "`scripts/vm/link_fidelity.py` inside it); do not edit by hand. Both backends measured in the same "
             "guest (QEMU TCG, Debian's 6.1 kernel), one after the other, with the integration tests' probes.", "",
             "| measurement | configured | kernel (netem/tbf/red) | userspace delay line |", "|---|---|---|---|"]
    lines += [f"| {label} | {configured} | {k:.3g} | {u:.3g} |" for label, configured, k, u in rows]
    lines += ["", f"Guest load average at the end: {load}; generated {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
              "Under TCG the guest CPU is slow: absolute rates are those of this emulated machine, the columns "
              "are comparable with each other."]
    Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
