"""Fabric failover: all-to-all traffic on a fat-tree while a core link fails and returns.

    pod 0            pod 1            pod 2            pod 3          cores cr0..cr3
    h0 h1 h2 h3      h4 .. h7         h8 .. h11        h12 .. h15     aggs  a0..a7
      \\ | | /          ...              ...              ...           ToRs  t0..t7
     t0 t1 -- a0 a1 ==X== cr ...                                       X: agg-core link cut at 1/3 of
                                                                          the run, restored at 2/3

Every host sends constant-rate UDP with sequence numbers to every other host (240 flows, one small
Python sender per host), through OVS switches driven by the fabric controller (ECMP over all equal-cost
paths, NX multipath on IPs and UDP ports). The replica is shaped like every other: the spec's 100G links
run at 100G / scale on tc HTB (scale from the spec, 1000: 100 Mbit/s). A core link is cut as a cable cut
looks to OVS (``ip link set down`` on the switch port); the switches report port-status, the controller
recomputes and pushes the changed groups and flows; later the link returns and the routes spread over it.

What it shows: per-flow throughput over time with the failure marked (throughput.png), which flows were
*affected* (lost at least one packet while the link was down; most never crossed it), the outage of each
(lost packets x sending interval, so the resolution is the interval), the controller's reaction and push
times, and which flows' equal-cost path sets changed (from the controller's tables before and after; from
the same routing brain while the link is down).

Time, emulated and real: the data plane is dilated (rates / scale, so a packet's time on the wire x
scale), but the failure detection (OVS noticing the port), the controller's computation and its pushes
run on the wall clock, undilated. So the report keeps them apart: the outage as measured (emulated
milliseconds), its control-plane part (detection + push, wall clock, taken as real-world time as is)
and the rest (data plane, emulated: / scale for real-world time). The real-world estimate is control
plane + ``--control-latency-ms`` (a real controller's distance, added, not emulated) + data plane / scale.
The senders are small Python processes on a shared machine: when the CPU is busy they fall behind and
catch up in bursts, which shows as dips and spikes in every flow; loss is counted by sequence number,
so it is exact all the same. ``--mode fast-failover`` uses OpenFlow fast-failover groups so OVS repairs
locally before the controller recomputes.

    sudo testbed run fabric_failover --quick      # 9 s of traffic, 50 ms per-flow interval (< 2 min);
                                                  # outage resolution 50 ms (emulated)
    sudo testbed run fabric_failover --mode fast-failover --json
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

if __name__ == "__main__" and __package__ is None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from testbed.console import console, require_root  # noqa: E402
from testbed.emu.health import CpuWatch, emulator_processes  # noqa: E402
from testbed.emu.ops import set_link_state  # noqa: E402
from testbed.errors import SpecError  # noqa: E402
from testbed.links.probe import wait_bound, wait_finished  # noqa: E402
from testbed.poll import poll, sleep_until  # noqa: E402
from testbed.routing.failover import (  # noqa: E402
    BIN_S,
    brain_paths,
    controller_paths,
    flow_outages,
    flow_table,
    link_event,
    loadavg,
    lost_before,
    path_changes,
    pick_link,
    plot_throughput,
    split_outage,
    throughput_series,
)
from testbed.scenario import REPO_ROOT, Results, run_main, scenario_parser  # noqa: E402

NAME = "fabric_failover"
SPEC = REPO_ROOT / "scenarios" / "specs" / "fat-tree-k4.yaml"
PORT = 5201
PROBE = [sys.executable, "-m", "testbed.links.probe"]


# ------------------------------------------------------------------------------------------ pure analysis
# ------------------------------------------------------------------------------------------ root glue
def run(G, res: Results, args) -> dict:
    from controllers.launch import addressed, start_controller
    from testbed.doctor import plan_capabilities
    from testbed.emu import Replica, RunRegistry
    from testbed.plan import Overrides, plan_replica
    from testbed.topo.graph import hosts

    hs = hosts(G)
    link = pick_link(G, args.link)
    probe_dir = res.path("probe").resolve()  # the probes run in the repository folder
    probe_dir.mkdir(exist_ok=True)
    with RunRegistry(NAME) as reg:
        ctl = start_controller(reg, G, res.dir, mode=args.mode, lldp_interval=0)
        plan = plan_replica(G, plan_capabilities(), Overrides(links="rates", static_arp=False))
        scale = plan.scale
        with Replica(plan, controller=ctl.address, run=reg, out_dir=res.dir, name=NAME) as rep:
            ctl.wait_ready()
            load = loadavg()
            ping_loss = rep.net.pingAll(timeout="1")
            before = controller_paths(ctl, hs)
            ip_of = {h: rep.ip(h) for h in hs}
            kw = {"cwd": str(REPO_ROOT), "stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE}
            recvs = {h: rep.popen(h, PROBE + ["recv", "--port", str(PORT), "--timeout", str(args.duration + 10),
                                              "--idle", "1.5", "--ready", str(probe_dir / f"{h}-recv.ready"),
                                              "--out", str(probe_dir / f"{h}-recv.json")],
                                  **kw) for h in hs}
            wait_bound({probe_dir / f"{h}-recv.ready": (recvs[h], f"udp probe receiver on {h}") for h in hs},
                       timeout=60)
            with CpuWatch(emulator_processes(rep, ctl)) as cpu:   # the traffic's span
                t_start = time.time()
                sends = {h: rep.popen(h, PROBE + ["send", "--dst", ",".join(ip_of[d] for d in hs if d != h),
                                                  "--port", str(PORT), "--sport", str(47000 + i),
                                                  "--interval", str(args.interval), "--duration", str(args.duration),
                                                  "--size", str(args.size), "--out", str(probe_dir / f"{h}-send.json")],
                                      **kw) for i, h in enumerate(hs)}
                intf = rep.intf_name(*link)
                sleep_until(t_start + args.duration / 3)
                t_cut = time.time()
                console.print(f"cutting {link[0]}-{link[1]} ({intf}) at {t_cut - t_start:.2f} s")
                set_link_state([intf], up=False)
                try:
                    down_ev = poll(lambda: link_event(ctl, "link_down", link, t_cut - 0.01), timeout=15, interval=0.02,
                                   what=f"the controller to see {link[0]}-{link[1]} down")
                    sleep_until(t_start + 2 * args.duration / 3)
                finally:
                    t_restore = time.time()
                    set_link_state([intf], up=True)
                console.print(f"restored {link[0]}-{link[1]} at {t_restore - t_start:.2f} s")
                up_ev = poll(lambda: link_event(ctl, "link_up", link, t_restore - 0.01), timeout=15, interval=0.02,
                             what=f"the controller to see {link[0]}-{link[1]} up")
                for procs, what in ((sends, "sender"), (recvs, "receiver")):
                    for h, p in procs.items():
                        wait_finished(p, f"{what} on {h}", args.duration + 30)
            after = controller_paths(ctl, hs)
            events = ctl.get("/events")
            health = ctl.get("/health")
    during = brain_paths(addressed(G), hs, link)
    send_docs = {h: json.loads((probe_dir / f"{h}-send.json").read_text()) for h in hs}
    recv_docs = {h: json.loads((probe_dir / f"{h}-recv.json").read_text()) for h in hs}
    flows = flow_table(send_docs, recv_docs, ip_of)
    outages = flow_outages(flows, (t_cut - 0.002, t_restore))
    after_restore = flow_outages(flows, (t_restore, float("inf")))
    bin_s = max(BIN_S, 10 * args.interval)  # at least ten packets per flow per bin
    edges, series = throughput_series(flows, t_start, t_start + args.duration, args.size, bin_s)
    changes = path_changes(before, during, after)
    plot_throughput(res.path("throughput.png"), edges, series, outages, t_cut - t_start, t_restore - t_start, link, args.mode)
    hit = [o["outage_ms"] for o in outages.values() if o["lost_in_window"] > 0]
    calm = lost_before(flows, t_cut - 0.002)
    timing = split_outage(statistics.median(hit) if hit else 0.0, (down_ev["time"] - t_cut) * 1e3,
                          (down_ev["pushed"] - down_ev["time"]) * 1e3, scale, args.control_latency_ms)
    per_flow = [{"src": s, "dst": d, **o, "lost_after_restore": after_restore[(s, d)]["lost_in_window"],
                 "paths_before": len(before[(s, d)]), "paths_during": len(during[(s, d)]),
                 "paths_after": len(after[(s, d)])} for (s, d), o in sorted(outages.items())]
    res.write_json("flows.json", per_flow)
    res.write_json("events.json", events)
    res.write_json("series.json", {"bin_s": bin_s, "t": edges,
                                   "mbps": {f"{s}->{d}": v for (s, d), v in series.items()}})
    return {
        "mode": args.mode, "link": list(link), "flows": len(flows), "ping_all_loss_pct": ping_loss,
        "scale": scale, "link_rate_emulated_bps": max(e.applied.rate_bps or 0 for e in plan.links),
        "interval_ms": args.interval * 1e3, "resolution_ms_emulated": args.interval * 1e3,
        "resolution_ms_real": args.interval * 1e3 / scale,
        "cut_at_s": round(t_cut - t_start, 3), "restore_at_s": round(t_restore - t_start, 3),
        "flows_affected": len(hit),
        "outage_ms_emulated_median": statistics.median(hit) if hit else 0.0,
        "outage_ms_emulated_max": max(hit) if hit else 0.0,
        **timing,
        "packets_lost_after_restore": sum(f["lost_after_restore"] for f in per_flow),
        "controller_compute_ms_wall": round(down_ev["compute_ms"], 3),
        "restore_reaction_ms_wall": round((up_ev["time"] - t_restore) * 1e3, 2),
        "route_messages_on_failure": down_ev["messages"],
        "destinations_recomputed": down_ev["destinations_recomputed"],
        "flows_path_set_changed_on_failure": len(changes["changed_on_failure"]),
        "flows_path_set_changed_on_restore": len(changes["changed_on_restore"]),
        "flows_back_to_original_paths": len(changes["same_as_before_after_restore"]),
        "controller_handler_errors": health["handler_errors"],
        "load": load, "lost_before_cut": calm,
        "cpu": cpu.summary(),
        "plot": str(res.path("throughput.png")),
    }


def main(argv=None) -> int:
    parser = scenario_parser(__doc__, prog=f"testbed run {NAME}")
    parser.add_argument("--mode", choices=("controller", "fast-failover"), default="controller")
    parser.add_argument("--duration", type=float, default=None, help="seconds of traffic (default 15; --quick 9)")
    parser.add_argument("--interval", type=float, default=None,
                        help="per-flow sending interval in seconds (default 0.02; --quick 0.05)")
    parser.add_argument("--size", type=int, default=200, help="UDP payload bytes")
    parser.add_argument("--link", help="link to cut as A,B (default: the first agg-core link)")
    parser.add_argument("--control-latency-ms", type=float, default=0.0, minimum=0,
                        help="a real controller's extra latency, real-world ms, added to the real-world estimate")
    args = parser.parse_args(argv)
    args.duration = args.duration or (9.0 if args.quick else 15.0)
    args.interval = args.interval or (0.05 if args.quick else 0.02)
    if not 3 <= args.duration <= 600:
        raise SpecError("--duration", f"must be 3..600 seconds, got {args.duration}")
    if not 0.002 <= args.interval <= 1:
        raise SpecError("--interval", f"must be 0.002..1 seconds, got {args.interval}")
    if not 16 <= args.size <= 1400:
        raise SpecError("--size", f"must be 16..1400 bytes, got {args.size}")
    from testbed.topo.spec import build_graph, load_spec

    G = build_graph(load_spec(SPEC))
    config = {"spec": str(SPEC), "mode": args.mode, "duration_s": args.duration, "interval_s": args.interval,
              "size": args.size}
    with Results(NAME, args, config) as res:
        require_root(f"testbed run {NAME}")
        summary = run(G, res, args)
        summary.update(res.health(cpu=summary.pop("cpu"), unaccounted=summary["lost_before_cut"]))
        res.out.print(
            f"{summary['flows_affected']} of {summary['flows']} flows affected (lost packets while "
            f"{'-'.join(summary['link'])} was down); outage per affected flow: median "
            f"{summary['outage_ms_emulated_median']:.1f} ms, max {summary['outage_ms_emulated_max']:.1f} ms "
            f"emulated (resolution {summary['resolution_ms_emulated']:g} ms; scale {summary['scale']:g})")
        res.out.print(
            f"control plane (wall clock, undilated): detection {summary['detection_ms_wall']:.1f} ms (from the "
            f"start of the cut command) + push {summary['controller_push_ms_wall']:.1f} ms, "
            f"{summary['control_plane_ms_wall']:.1f} ms of the outage; data plane {summary['data_plane_ms_emulated']:.1f} ms "
            f"emulated; real-world estimate {summary['outage_ms_real_estimate']:.2f} ms; {summary['load']}")
        res.finish(summary)
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
