"""Fabric failover: all-to-all traffic on a fat-tree while a core link fails and returns.

    pod 0            pod 1            pod 2            pod 3          cores cr0..cr3
    h0 h1 h2 h3      h4 .. h7         h8 .. h11        h12 .. h15     aggs  a0..a7
      \\ | | /          ...              ...              ...           ToRs  t0..t7
     t0 t1 -- a0 a1 ==X== cr ...                                       X: agg-core link cut at 1/3 of
                                                                          the run, restored at 2/3

Every host sends constant-rate UDP with sequence numbers to every other host (240 flows, one small
Python sender per host), through OVS switches driven by the fabric controller (ECMP over all equal-cost
paths, NX multipath on IPs and UDP ports). A core link is cut as a cable cut looks to OVS (``ip link set
down`` on the switch port); the switches report port-status, the controller recomputes and pushes the
changed groups and flows; later the link returns and the routes spread over it again.

What it shows: per-flow throughput over time with the failure marked (throughput.png), the outage of each
flow (lost packets while the link was down x sending interval; most flows never crossed the link and
lose nothing), the controller's reaction and push times, and which flows' equal-cost path sets changed
(from the controller's tables before and after; from the same routing brain while the link is down).
The senders are small Python processes on a shared machine: when the CPU is busy they fall behind and
catch up in bursts, which shows as dips and spikes in every flow; loss is counted by sequence number,
so it is exact all the same. ``--mode fast-failover`` uses OpenFlow fast-failover groups so OVS repairs
locally before the controller recomputes.

    sudo testbed run fabric_failover --quick      # 9 s of traffic, 50 ms per-flow interval (< 2 min)
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
from testbed.emu.ops import set_link_state  # noqa: E402
from testbed.errors import EmulationError, SpecError  # noqa: E402
from testbed.poll import poll, sleep_until  # noqa: E402
from testbed.routing.failover import (  # noqa: E402
    BIN_S,
    brain_paths,
    controller_paths,
    flow_outages,
    flow_table,
    link_event,
    path_changes,
    pick_link,
    throughput_series,
)
from testbed.scenario import REPO_ROOT, Results, run_main, scenario_parser  # noqa: E402

NAME = "fabric_failover"
SPEC = REPO_ROOT / "scenarios" / "specs" / "fat-tree-k4.yaml"
PORT = 5201
PROBE = [sys.executable, "-m", "testbed.links.probe"]


# ------------------------------------------------------------------------------------------ pure analysis
def plot(path: Path, edges: list, series: dict, outages: dict, cut_at: float, restore_at: float,
         link: tuple, mode: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(2, 1, figsize=(10, 7.5), gridspec_kw={"height_ratios": [3, 2]})
    hit = {k for k, o in outages.items() if o["lost_in_window"] > 0}
    for key, ys in sorted(series.items()):
        if key not in hit:
            ax.plot(edges, ys, color="0.75", linewidth=0.6)
    for key in sorted(hit):
        ax.plot(edges, series[key], linewidth=1.2, label=f"{key[0]}->{key[1]}")
    ax.axvspan(cut_at, restore_at, color="red", alpha=0.12, label=f"{link[0]}-{link[1]} down")
    ax.axvline(cut_at, color="red", linewidth=1)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("received (Mbit/s)")
    ax.set_title(f"per-flow throughput, {len(series)} flows ({mode}); coloured: flows that lost packets")
    if len(hit) <= 16:
        ax.legend(fontsize=7, ncol=4, loc="lower left")
    ranked = sorted(outages.items(), key=lambda kv: -kv[1]["outage_ms"])
    bx.bar(range(len(ranked)), [o["outage_ms"] for _, o in ranked], color="tab:red")
    bx.set_xlabel("flows, by outage")
    bx.set_ylabel("outage (ms)")
    bx.set_title("outage per flow while the link was down (lost packets x interval)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ------------------------------------------------------------------------------------------ root glue
def run(G, res: Results, args) -> dict:
    from controllers.launch import addressed, start_controller
    from testbed.doctor import plan_capabilities
    from testbed.emu import Replica, RunRegistry
    from testbed.plan import Overrides, plan_replica
    from testbed.topo.graph import hosts

    hs = hosts(G)
    link = pick_link(G, args.link)
    probe_dir = res.path("probe")
    probe_dir.mkdir(exist_ok=True)
    with RunRegistry(NAME) as reg:
        ctl = start_controller(reg, G, res.dir, mode=args.mode, lldp_interval=0)
        plan = plan_replica(G, plan_capabilities(), Overrides(links="off", static_arp=False))
        with Replica(plan, controller=ctl.address, run=reg, out_dir=res.dir, name=NAME) as rep:
            ctl.wait_ready()
            ping_loss = rep.net.pingAll(timeout="1")
            before = controller_paths(ctl, hs)
            ip_of = {h: rep.ip(h) for h in hs}
            kw = {"cwd": str(REPO_ROOT), "stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE}
            recvs = {h: rep.popen(h, PROBE + ["recv", "--port", str(PORT), "--timeout", str(args.duration + 10),
                                              "--idle", "1.5", "--out", str(probe_dir / f"{h}-recv.json")],
                                  **kw) for h in hs}
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
                    try:
                        p.wait(timeout=args.duration + 30)
                    except subprocess.TimeoutExpired:
                        p.kill()
                        raise EmulationError(f"{what} on {h} did not finish") from None
                    if p.returncode != 0:
                        err = p.stderr.read().decode(errors="replace")[-300:]
                        raise EmulationError(f"{what} on {h} failed ({p.returncode}): {err}")
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
    plot(res.path("throughput.png"), edges, series, outages, t_cut - t_start, t_restore - t_start, link, args.mode)
    hit = [o["outage_ms"] for o in outages.values() if o["lost_in_window"] > 0]
    per_flow = [{"src": s, "dst": d, **o, "lost_after_restore": after_restore[(s, d)]["lost_in_window"],
                 "paths_before": len(before[(s, d)]), "paths_during": len(during[(s, d)]),
                 "paths_after": len(after[(s, d)])} for (s, d), o in sorted(outages.items())]
    res.write_json("flows.json", per_flow)
    res.write_json("events.json", events)
    res.write_json("series.json", {"bin_s": bin_s, "t": edges,
                                   "mbps": {f"{s}->{d}": v for (s, d), v in series.items()}})
    return {
        "mode": args.mode, "link": list(link), "flows": len(flows), "ping_all_loss_pct": ping_loss,
        "interval_ms": args.interval * 1e3, "cut_at_s": round(t_cut - t_start, 3),
        "restore_at_s": round(t_restore - t_start, 3),
        "flows_with_outage": len(hit),
        "outage_ms_median": statistics.median(hit) if hit else 0.0,
        "outage_ms_max": max(hit) if hit else 0.0,
        "lost_after_restore": sum(f["lost_after_restore"] for f in per_flow),
        "controller_reaction_ms": round((down_ev["time"] - t_cut) * 1e3, 2),
        "controller_push_ms": round((down_ev["pushed"] - down_ev["time"]) * 1e3, 2),
        "restore_reaction_ms": round((up_ev["time"] - t_restore) * 1e3, 2),
        "route_messages_on_failure": down_ev["messages"],
        "destinations_recomputed": down_ev["destinations_recomputed"],
        "flows_path_set_changed_on_failure": len(changes["changed_on_failure"]),
        "flows_path_set_changed_on_restore": len(changes["changed_on_restore"]),
        "flows_back_to_original_paths": len(changes["same_as_before_after_restore"]),
        "controller_handler_errors": health["handler_errors"],
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
        console.print(f"{summary['flows']} flows, {summary['flows_with_outage']} lost packets while "
                      f"{'-'.join(summary['link'])} was down: outage median {summary['outage_ms_median']:.1f} ms, "
                      f"max {summary['outage_ms_max']:.1f} ms; controller reacted after "
                      f"{summary['controller_reaction_ms']:.1f} ms and pushed in {summary['controller_push_ms']:.1f} ms")
        res.finish(summary)
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
