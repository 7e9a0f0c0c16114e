"""``testbed bench rdma``: soft-RDMA goodput against iperf3 UDP on the same emulated path, READ against
WRITE, ECMP spreading of several QPs across a fat-tree, and the data path's packets per second per core.

    netns rdb-a [10.77.9.1] ==veth, HTB at --rate both ways== [10.77.9.2] netns rdb-b
        1. iperf3 -u -b 2x rate for --duration      -> iperf3_mbps (received payload)
        2. testbed rdma write-bw --duration          -> goodput_mbps (acknowledged RDMA WRITE payload)
        3. testbed rdma read-bw --duration           -> read_goodput_mbps (READ data placed, verified)
    k=4 fat-tree replica (OVS + the os-ken controller, ECMP hashing IPs and UDP ports):
        4. write-bw --qps 4 from a pod-0 host to a host of the last pod; port counters of the core
           switches before/after -> core_paths = core switches that carried >= half a QP's share
    loopback, one process, one thread:
        5. a 64 MiB RDMA WRITE between two devices   -> pps_per_core = data packets / CPU seconds

The default rate, 100 Mbit/s, is the per-link budget the default time-dilation scale assumes
(:func:`testbed.dilation.pick_scale`). Goals: goodput_ratio_vs_iperf3 >= 0.9, read_ratio_vs_write >= 0.9,
core_paths >= 2 (each QP sends from its own UDP source port, as rdma_rxe does).

``--json`` keys: goodput_ratio_vs_iperf3, read_ratio_vs_write, core_paths, goodput_mbps,
read_goodput_mbps, iperf3_mbps, pps_per_core, load (+ details).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

from testbed.console import console, out, print_json, require_root
from testbed.emu.cpustat import load_average
from testbed.errors import EmulationError, SpecError
from testbed.rdma.wire import IB_MTUS
from testbed.units import parse_duration, parse_rate, parse_size

IPERF_PORT = 5411


def register(sub) -> None:
    parser = sub.add_parser("rdma", help="soft-RDMA goodput vs iperf3 UDP, packets/s per core",
                            description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", default="100M", help="rate of the emulated path (default 100M)")
    parser.add_argument("--duration", default="5s", help="length of each goodput run (default 5s)")
    parser.add_argument("--mtu", type=int, default=1024, help="IB path MTU (default 1024 for a 1500 B link)")
    parser.add_argument("--size", default="1MiB", help="RDMA WRITE and READ message size (default 1MiB)")
    parser.add_argument("--no-ecmp", action="store_true", help="skip the fat-tree ECMP run (the slow part)")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    parser.set_defaults(func=run)


def run(args) -> int:
    from testbed.emu.registry import RunRegistry
    from testbed.rdma.netns import make_path

    rate = parse_rate(args.rate, "--rate")
    duration = parse_duration(args.duration, "--duration")
    if args.mtu not in IB_MTUS:
        raise SpecError("--mtu", f"an IB path MTU: one of {', '.join(map(str, IB_MTUS))}, got {args.mtu}")
    if not 0 < parse_size(args.size, "--size") <= 1 << 30:
        raise SpecError("--size", f"a message size in (0, 1GiB], got {args.size!r}")
    require_root("testbed bench rdma")
    result = {"rate_mbps": rate / 1e6, "duration_s": duration, "mtu": args.mtu}
    result["load_before"] = _load()
    with RunRegistry("bench-rdma") as reg:
        path = make_path(reg, "rdb", rate_bps=rate, subnet="10.77.9")
        console.print(f"path {path.ns_a} -> {path.ns_b} shaped to {rate / 1e6:g} Mbit/s")
        result["iperf3"] = _iperf3(reg, path, rate, duration)
        result["rdma"] = _rdma(reg, path, duration, args.mtu, args.size)
        result["read"] = _rdma(reg, path, duration, args.mtu, args.size, test="read-bw")
    result["iperf3_mbps"] = result["iperf3"]["goodput_mbps"]
    result["goodput_mbps"] = result["rdma"]["goodput_mbps"]
    result["read_goodput_mbps"] = result["read"]["goodput_mbps"]
    result["goodput_ratio_vs_iperf3"] = result["goodput_mbps"] / result["iperf3_mbps"]
    result["read_ratio_vs_write"] = result["read_goodput_mbps"] / result["goodput_mbps"]
    if not args.no_ecmp:
        from testbed.bench.rdma_ecmp import ecmp_qps

        result["ecmp"] = ecmp_qps(qps=4)
        result["core_paths"] = result["ecmp"]["core_paths"]
    result["loopback"] = loopback_pps()
    result["pps_per_core"] = result["loopback"]["pps_per_core"]
    result["load"] = _load()
    if args.json:
        print_json(result)
    else:
        out.print(f"iperf3 UDP   {result['iperf3_mbps']:8.1f} Mbit/s")
        out.print(f"RDMA WRITE   {result['goodput_mbps']:8.1f} Mbit/s  "
                  f"(ratio to iperf3 {result['goodput_ratio_vs_iperf3']:.3f}, goal >= 0.9; "
                  f"verified {result['rdma']['verified']})")
        out.print(f"RDMA READ    {result['read_goodput_mbps']:8.1f} Mbit/s  "
                  f"(ratio to WRITE {result['read_ratio_vs_write']:.3f}, goal >= 0.9; "
                  f"verified {result['read']['verified']})")
        if "ecmp" in result:
            e = result["ecmp"]
            out.print(f"ECMP         {e['qps']} QPs {e['src']} -> {e['dst']} over {e['core_paths']} of "
                      f"{len(e['core_bytes'])} core switches (goal >= 2); bytes per core {e['core_bytes']}; "
                      f"source ports {e['sports']}")
        out.print(f"loopback     {result['pps_per_core']:8.0f} packets/s per core "
                  f"({result['loopback']['goodput_mbps']:.0f} Mbit/s at MTU {result['loopback']['mtu']})")
        out.print(f"load average {result['load_before']} before, {result['load']} after (2 cores)")
    return 0


def _load() -> str:

    return " ".join(f"{x:.2f}" for x in load_average())


def _iperf3(reg, path, rate: float, duration: float) -> dict:
    reg.spawn(["iperf3", "-s", "-1", "-p", str(IPERF_PORT)], netns=path.ns_b,
              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    argv = ["ip", "netns", "exec", path.ns_a, "iperf3", "-c", path.ip_b, "-p", str(IPERF_PORT), "-u",
            "-b", str(int(rate * 2)), "-t", f"{duration:g}", "-J", "--get-server-output"]
    doc = None
    for _ in range(50):  # the server may still be starting: iperf3 fails fast then
        res = subprocess.run(argv, capture_output=True, text=True, timeout=duration + 60)
        if res.returncode == 0:
            doc = json.loads(res.stdout)
            break
        time.sleep(0.1)  # noqa: TID251 - retry pacing for an external tool, not a wait for state
    if doc is None:
        raise EmulationError(f"iperf3 did not run between {path.ns_a} and {path.ns_b}: {res.stderr.strip()[-200:]}")
    server = doc.get("server_output_json", {}).get("end", {}).get("sum", {})
    total = doc["end"]["sum"]
    seconds = server.get("seconds") or total["seconds"]
    received = server.get("bytes")
    if received is None:
        received = total["bytes"] * (1 - total.get("lost_percent", 0) / 100)
    return {"goodput_mbps": received * 8 / seconds / 1e6, "sent_mbps": total["bits_per_second"] / 1e6,
            "lost_percent": total.get("lost_percent"), "seconds": seconds}


def _rdma(reg, path, duration: float, mtu: int, size: str, test: str = "write-bw") -> dict:
    cli = [sys.executable, "-m", "testbed.cli"]
    reg.spawn(cli + ["rdma", "server", "--once", "--bind", "0.0.0.0"], netns=path.ns_b,
              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    argv = ["ip", "netns", "exec", path.ns_a] + cli + ["rdma", test, path.ip_b, "--size", size,
                                                       "--duration", f"{duration:g}s", "--mtu", str(mtu),
                                                       "--wait", "20s", "--verify", "--json"]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=duration + 120)
    if res.returncode != 0:
        raise EmulationError(f"soft-RDMA {test} failed: {res.stderr.strip()[-300:]}")
    r = json.loads(res.stdout)
    return {k: r[k] for k in ("goodput_mbps", "iterations", "bytes", "seconds", "retransmissions", "timeouts",
                              "read_retries", "verified")}


def loopback_pps(size: int = 64 << 20, mtu: int = 1024) -> dict:
    """Both ends in this process and thread: data packets handled per CPU-second (one core)."""
    from testbed.rdma.device import Device
    from testbed.rdma.qp import QpConfig, Remote
    from testbed.rdma.verbs import CompletionQueue

    with Device("127.0.0.1", 0, seed=1) as a, Device("127.0.0.1", 0, seed=2) as b:
        pa, pb = a.alloc_pd(), b.alloc_pd()
        cq = CompletionQueue()
        qa = a.create_qp(pa, cq, QpConfig(mtu=mtu))
        qb = b.create_qp(pb, CompletionQueue(), QpConfig(mtu=mtu))
        a.connect(qa, Remote(qb.qpn, 1, b.ip, b.port), 1)
        b.connect(qb, Remote(qa.qpn, 1, a.ip, a.port), 1)
        src, dst = bytearray(size), bytearray(size)
        ma, mb = pa.reg_mr(src), pb.reg_mr(dst)
        cpu0, wall0 = time.process_time(), time.monotonic()
        qa.post_write(1, ma, 0, size, mb.addr, mb.rkey)
        while not cq.poll():
            a.progress()
            b.progress()
        cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    packets = qa.stats.tx_packets
    return {"pps_per_core": packets / cpu, "packets": packets, "cpu_s": cpu, "wall_s": wall, "mtu": mtu,
            "goodput_mbps": size * 8 / wall / 1e6, "retransmissions": qa.stats.retransmissions}
