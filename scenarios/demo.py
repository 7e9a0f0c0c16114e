"""Demo: a small spine-leaf replica, all-pairs ping and iperf3 between two leaves.

    spines      s0        s1            100G leaf-spine links (4:1 dilated rates, see below)
               /  \\ ___/  \\
              /  __X__    \\
    leaves   l0         l1   (l2)
            /  \\        /  \\
    hosts  h0  h1     h2  h3         100G host links

Open vSwitch switches (userspace datapath when the kernel one is absent) are driven by the fabric
controller (ECMP over both spines) when there is more than one spine; with ``--spines 1`` the fabric is
loop-free and the switches are plain learning bridges.  Rates are time-dilated so that the machine can
carry them (100G / scale, shaped with tc HTB on every link): iperf3's measured rate is reported both as
measured and mapped back to the real fabric.

What it shows: every host reaches every other (ping matrix, RTTs), and a TCP flow between two leaves gets
close to the (dilated) line rate.  ``--quick`` uses two leaves and a 3 s iperf3 run.

    sudo testbed run demo [--quick] [--json]         results in results/demo/<timestamp>/
"""

from __future__ import annotations

import itertools
import json
import re
import sys

from rich.table import Table

from testbed.dilation import Dilation, pick_scale
from testbed.doctor import plan_capabilities
from testbed.emu import Replica, RunRegistry
from testbed.emu.health import CpuWatch, emulator_processes
from testbed.plan import Overrides, plan_replica
from testbed.scenario import Results, run_main, scenario_parser
from testbed.topo import generators
from testbed.topo.graph import hosts

NAME = "demo"
#: why ``--failures`` is refused here (a scenario takes a failure schedule or says why not)
NO_FAILURES = (
    "a ping matrix and iperf3 smoke run, with no failure window in its report; run fabric_failover "
    "--failures, or testbed up and testbed fail")

_RTT_RE = re.compile(r"time=([\d.]+) ms")


def build_graph(leaves: int, spines: int, hosts_per_leaf: int):
    return generators.spine_leaf(leaves, spines, hosts_per_leaf)


def ping_matrix(rep, G) -> dict:
    """{src: {dst: rtt_ms | None}} with one ping per ordered pair."""
    result = {}
    for a, b in itertools.permutations(hosts(G), 2):
        out = rep.host(a).cmd("ping", "-c1", "-W3", rep.ip(b))
        m = _RTT_RE.search(out)
        result.setdefault(a, {})[b] = float(m.group(1)) if m else None
    return result


def iperf(rep, src, dst, seconds: float) -> dict:
    server = rep.popen(dst, ["iperf3", "-s", "-1", "-J"], stdout=-1, stderr=-1, text=True)
    from testbed.poll import poll

    poll(lambda: ":5201" in rep.host(dst).cmd("ss -ltn"), timeout=10, what=f"iperf3 server on {dst}")
    out = rep.host(src).cmd("iperf3", "-c", rep.ip(dst), "-t", f"{seconds:g}", "-J")
    server.communicate(timeout=30)
    doc = json.loads(out[out.index("{"):])
    if "error" in doc:
        raise RuntimeError(f"iperf3 {src}->{dst}: {doc['error']}")
    end = doc["end"]
    return {"bps": end["sum_received"]["bits_per_second"], "retransmits": end["sum_sent"].get("retransmits"),
            "seconds": seconds}


def main(argv=None) -> int:
    parser = scenario_parser(__doc__, prog="demo", refuse_failures=NO_FAILURES)
    parser.add_argument("--spines", type=int, default=2, help="spine switches (1: loop-free, no controller)")
    args = parser.parse_args(argv)
    leaves = 2 if args.quick else 3
    G = build_graph(leaves, args.spines, 2)
    rate = max(d["rate_bps"] for _, _, d in G.edges(data=True))
    dil = Dilation(pick_scale(rate, 100e6))
    seconds = 3 if args.quick else 10
    config = {"leaves": leaves, "spines": args.spines, "hosts_per_leaf": 2, "scale": dil.scale,
              "iperf_seconds": seconds}
    with Results(NAME, args, config) as res:
        with RunRegistry(NAME) as run:
            ctl = None
            if args.spines > 1:
                from controllers.launch import start_controller

                ctl = start_controller(run, G, res.dir)
            plan = plan_replica(G, plan_capabilities(), Overrides(scale=dil.scale, links="rates", static_arp=ctl is None))
            with Replica(plan, controller=ctl.address if ctl else None, out_dir=res.dir, name=NAME,
                         run=run) as rep:
                if ctl:
                    ctl.wait_ready()
                with CpuWatch(emulator_processes(rep, ctl)) as cpu:
                    pings = ping_matrix(rep, G)
                    hs = hosts(G)
                    src, dst = hs[0], hs[-1]
                    flow = iperf(rep, src, dst, seconds)
        ok = sum(v is not None for row in pings.values() for v in row.values())
        total = sum(len(row) for row in pings.values())
        rtts = [v for row in pings.values() for v in row.values() if v is not None]
        metrics = {"ping": pings, "iperf": {"src": src, "dst": dst, **flow,
                                            "line_rate_bps": dil.rate(rate),
                                            "real_bps": dil.real_rate(flow["bps"])}}
        _print_table(pings, hs, res.out)
        res.out.print(f"iperf3 {src} -> {dst}: {flow['bps'] / 1e6:.1f} Mb/s measured of "
                      f"{dil.rate(rate) / 1e6:.0f} Mb/s line rate (scale {dil.scale:g}: "
                      f"{dil.real_rate(flow['bps']) / 1e9:.1f} Gb/s real)")
        # tc HTB links and OVS: no link node to time, no frame ledger (TCP retransmits what it loses)
        metrics.update(res.health(cpu=cpu.summary()))
        res.write_json("metrics.json", metrics)
        res.finish({"pairs_reachable": ok, "pairs": total,
                    "rtt_ms_median": sorted(rtts)[len(rtts) // 2] if rtts else None,
                    "iperf_bps": flow["bps"], "iperf_fraction_of_line_rate": flow["bps"] / dil.rate(rate),
                    "scale": dil.scale, "emulator_ok": metrics["emulator_ok"]})
    return 0 if ok == total else 1


def _print_table(pings: dict, hs: list, to) -> None:
    table = Table(title="ping RTT (ms), row -> column", title_justify="left")
    table.add_column("")
    for h in hs:
        table.add_column(str(h), justify="right")
    for a in hs:
        row = []
        for b in hs:
            v = pings.get(a, {}).get(b) if a != b else None
            row.append("-" if a == b else ("[red]lost[/red]" if v is None else f"{v:.2f}"))
        table.add_row(str(a), *row)
    to.print(table)


if __name__ == "__main__":
    sys.exit(run_main(main))
