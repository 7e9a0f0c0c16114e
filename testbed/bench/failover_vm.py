"""``make failover-vm``: link-cut outages on Open vSwitch's userspace and kernel datapaths, side by side,
in the test VM (its Debian kernel has the openvswitch module; this machine's has not; issue 18).

On this machine the fast-failover outage is ovs-vswitchd's main thread learning that its own port went
down: the userspace (netdev) datapath forwards every frame in that same thread (docs/sdn.md, "Where the
time goes"). With the kernel datapath the frames stay in the kernel and the group's choice is in the
datapath's flow actions, so the question is whether fast failover gets faster there. One TCG guest runs
``testbed bench failover --cases fast-failover,controller`` twice, ``--datapath user`` then ``--datapath
kernel``, same fabric, same cuts rule, one after the other, and prints both with their ratio. A TCG vCPU
is several times slower than the core under it, so absolute figures are the guest's, not a machine's;
the ratio is what this measures. Raw results: ``<out>/vm0/failover-<datapath>/failover.json``.

    sudo make failover-vm              # = python -m testbed.bench.failover_vm [--repetitions N] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from testbed.emu.cpustat import load_average

REPO = Path(__file__).resolve().parents[2]
DATAPATHS = ("user", "kernel")
SPEC = "scenarios/specs/fat-tree-k4.yaml"
#: Probe interval in the guest: a Python sender in a TCG guest does not keep 0.5 ms (the host's default).
INTERVAL = 0.002
KEYS = (("controller reroute outage", "controller_outage_ms"), ("fast-failover outage", "fast_failover_outage_ms"),
        ("port status at the controller (fast failover)", "fast_failover_port_status"))


def command(datapath: str, repetitions: int) -> str:
    out = f"/mnt/out/failover-{datapath}"
    return (f"testbed bench failover {SPEC} --cases fast-failover,controller --repetitions {repetitions} "
            f"--interval {INTERVAL} --datapath {datapath} --out {out} > {out}.txt 2>&1")


def _stat(doc: dict, key: str, q: str):
    if key == "fast_failover_port_status":
        return doc.get("fast_failover_port_status_ms_median") if q == "median" else None
    return doc.get(f"{key}_{q}")


def table(docs: dict, header: list[str]) -> str:
    """Markdown: one row per figure, user | kernel | kernel / user (pure)."""
    lines = [*header, "", "| | userspace (netdev) | kernel | kernel / user |", "|---|---|---|---|"]
    for label, key in KEYS:
        for q in ("median", "p95"):
            u, k = (_stat(docs.get(d, {}), key, q) for d in DATAPATHS)
            if u is None and k is None:
                continue
            ratio = f"{k / u:.2f}" if u and k is not None else "-"
            cell = [("-" if x is None else f"{x:.1f} ms") for x in (u, k)]
            lines.append(f"| {label}, {q} | {cell[0]} | {cell[1]} | {ratio} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    from testbed.emu.vm import VMGroup
    from testbed.emu.vmimage import VMError, ensure_image

    ap = argparse.ArgumentParser(prog="python -m testbed.bench.failover_vm", description=__doc__.splitlines()[0])
    ap.add_argument("--repetitions", type=int, default=10, help="cuts per mode and datapath (default 10)")
    ap.add_argument("--out", help="results folder (default results/failover-vm/<timestamp>)")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("failover-vm: needs root (sudo make failover-vm)", file=sys.stderr)
        return 2
    if args.repetitions < 1:
        print("failover-vm: --repetitions must be at least 1", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else REPO / "results" / "failover-vm" / time.strftime("%Y%m%d-%H%M%S")
    host = f"{os.cpu_count()} cores, load average {' '.join(f'{x:.2f}' for x in load_average())} at the start"
    docs = {}
    try:
        image, _built = ensure_image()
        with VMGroup(image, out, names=("vm0",)) as vms:
            vm = vms["vm0"]
            vm.provision()
            host = f"QEMU {vms.accel} ({vms.cpus} vCPUs) on the host: {host}"
            uptimes = []
            for dp in DATAPATHS:
                print(f"failover-vm: {dp} datapath, {args.repetitions} cuts per mode ...", flush=True)
                res = vm.run(command(dp, args.repetitions), timeout=3600, check=False)
                uptimes.append(vm.run("cat /proc/loadavg", timeout=60).output.split()[:3])
                if res.rc != 0:
                    text = out / "vm0" / f"failover-{dp}.txt"
                    raise VMError(f"bench failover --datapath {dp} exited {res.rc}; see {text}")
                docs[dp] = json.loads((out / "vm0" / f"failover-{dp}" / "failover.json").read_text())
                got = docs[dp].get("ovs_datapath")
                if got != dp:
                    raise VMError(f"asked for the {dp} datapath, the replica ran on {got!r}")
    except VMError as exc:
        print(f"failover-vm: {exc}", file=sys.stderr)
        return 1
    header = [f"`testbed bench failover {SPEC} --cases fast-failover,controller --repetitions {args.repetitions} "
              f"--interval {INTERVAL}` in one TCG guest, `--datapath user` then `--datapath kernel`; resolution "
              f"{INTERVAL * 1e3:g} ms; links not shaped (scale 1).",
              f"Guest load after each: {' / '.join(' '.join(u) for u in uptimes)}. Host: {host}."]
    text = table(docs, header)
    (out / "failover-vm.md").write_text(text)
    print(text)
    print(f"failover-vm: raw results in {out / 'vm0'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
