"""Fabric failover: all-to-all traffic on a fat-tree while a core link fails and returns.

    pod 0            pod 1            pod 2            pod 3          cores cr0..cr3
    h0 h1 h2 h3      h4 .. h7         h8 .. h11        h12 .. h15     aggs  a0..a7
      \\ | | /          ...              ...              ...           ToRs  t0..t7
     t0 t1 -- a0 a1 ==X== cr ...                                       X: agg-core link cut at 1/3 of
                                                                          the run, restored at 2/3 (or
                                                                          any --failures schedule)

Every host sends constant-rate UDP with sequence numbers to every other host (240 flows, one small
Python sender per host), through OVS switches driven by the fabric controller (ECMP over all equal-cost
paths, NX multipath on IPs and UDP ports). The replica is shaped like every other: the spec's 100G links
run at 100G / scale on tc HTB (scale from the spec, 1000: 100 Mbit/s). A core link is cut as a cable cut
looks to OVS (``ip link set down`` on the switch port); the switches report port-status, the controller
recomputes and pushes the changed groups and flows; later the link returns and the routes spread over it.
That default is a failure schedule (``--link`` down at 1/3 of the traffic, up at 2/3); ``--failures
SCHEDULE`` runs any other (``2s:down:a0-cr0,4s:up:a0-cr0,5s:crash:cr2,7s:recover:cr2``, flaps; times from
the traffic's start; docs/failures.md) through the same driver as a collective's failures
(:mod:`testbed.emu.failctl`: ``ip link`` on the switch end, a crashed switch's own ends); what is still
failed when the traffic ends is restored, and every interface it touched is checked up again.

What it shows, for every cut of the schedule (a link or switch going down, until its repair): which flows
were *affected* (lost at least one packet while it was down; most never crossed it), the outage of each
(lost packets x sending interval, so the resolution is the interval), the controller's reaction and push
times, and which flows' equal-cost path sets changed (from the controller's tables before and after; from
the same routing brain while it is down); per-flow throughput over time with the failures marked
(throughput.png). The summary's ``cuts`` has one entry per cut, ``failures`` the schedule's log (what ran
when, how long the control path took, what was restored at the end); its top-level figures are the
first cut's.

Time, emulated and real: the data plane is dilated (rates / scale, so a packet's time on the wire x
scale), but the failure detection (OVS noticing the port), the controller's computation and its pushes
run on the wall clock, undilated. So the report keeps them apart: the outage as measured (emulated
milliseconds), its control-plane part (detection + push, wall clock, taken as real-world time as is)
and the rest (data plane, emulated: / scale for real-world time). The real-world estimate is control
plane + ``--control-latency-ms`` (a real controller's distance, added, not emulated) + data plane / scale.
The senders are small Python processes on a shared machine: when the CPU is busy they fall behind and
catch up in bursts, which shows as dips and spikes in every flow; loss is counted by sequence number,
so it is exact all the same. Nothing is injected before the first cut: ``pre_cut`` sorts the probes lost
before it into those the cut took while still in the fabric (transit here is tens to hundreds of
wall-clock ms) and those lost before it, each by the counter that saw it (:mod:`testbed.routing.precut`;
the emulator's make the run unhealthy, as does a loss no counter saw). ``--mode fast-failover`` uses
OpenFlow fast-failover groups so OVS repairs locally before the controller recomputes.

    sudo testbed run fabric_failover --quick      # 9 s of traffic, 50 ms per-flow interval (< 2 min);
                                                  # outage resolution 50 ms (emulated)
    sudo testbed run fabric_failover --mode fast-failover --json
    sudo testbed run fabric_failover --quick --failures 2s:down:a0-cr0,3.5s:up:a0-cr0,5s:crash:cr2,7s:recover:cr2
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

if __name__ == "__main__" and __package__ is None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from testbed import failures as F  # noqa: E402
from testbed.console import require_root  # noqa: E402
from testbed.emu.health import CpuWatch, emulator_processes  # noqa: E402
from testbed.errors import EmulationError, SpecError  # noqa: E402
from testbed.links.probe import wait_bound, wait_finished  # noqa: E402
from testbed.poll import poll  # noqa: E402
from testbed.routing import precut as P  # noqa: E402
from testbed.routing.failover import (  # noqa: E402
    BIN_S,
    brain_paths,
    controller_paths,
    cut_report,
    flow_outages,
    flow_table,
    loadavg,
    path_changes,
    pick_link,
    plot_throughput,
    reaction,
    throughput_series,
)
from testbed.scenario import REPO_ROOT, Results, run_main, scenario_parser  # noqa: E402

NAME = "fabric_failover"
SPEC = REPO_ROOT / "scenarios" / "specs" / "fat-tree-k4.yaml"
PORT = 5201
PROBE = [sys.executable, "-m", "testbed.links.probe"]


# ------------------------------------------------------------------------------------------ pure analysis
# ------------------------------------------------------------------------------------------ root glue
def default_schedule(link: tuple, duration: float) -> str:
    """The scenario's own failure: ``link`` down at 1/3 of the traffic, back at 2/3 (a schedule, so the one
    code path runs every failure)."""
    a, b = link
    return f"{duration / 3:.6g}s:down:{a}-{b},{2 * duration / 3:.6g}s:up:{a}-{b}"


def events_of(G, args) -> tuple[str, list]:
    """The schedule to run (``--failures`` or the default) and its events, checked before anything is
    built (field-named, exit 2). The links are tc HTB rates on both ends, so gray loss runs as a random-drop
    filter on each end (testbed.plan.gray)."""
    if args.failures and args.link:
        raise SpecError("--link", "picks the default schedule's link; with --failures the schedule names its "
                                  "links (drop --link)")
    text = args.failures or default_schedule(pick_link(G, args.link), args.duration)
    from testbed.plan import Overrides
    from testbed.plan.gray import gray_links_of

    events = F.parse(text, G, gray_links=gray_links_of(G, Overrides(links="rates", static_arp=False)))
    F.check_within(events, args.duration, "the traffic")
    return text, events


def run(G, res: Results, args, schedule: str, events: list) -> dict:
    from controllers.launch import start_controller
    from testbed.doctor import plan_capabilities
    from testbed.emu import Replica, RunRegistry, probewatch
    from testbed.emu.failctl import FabricControl, FailureDriver
    from testbed.emu.ovsloss import switch_ports
    from testbed.plan import Overrides, plan_replica
    from testbed.plan.gray import gray_tc
    from testbed.topo.graph import hosts

    hs = hosts(G)
    probe_dir = res.path("probe").resolve()  # the probes run in the repository folder
    probe_dir.mkdir(exist_ok=True)
    with RunRegistry(NAME) as reg:
        ctl = start_controller(reg, G, res.dir, mode=args.mode, lldp_interval=0)
        plan = plan_replica(G, plan_capabilities(), Overrides(links="rates", static_arp=False))
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
            control = FabricControl(rep, G, ctl, method="ifdown", gray_tc=gray_tc)   # a cut, as OVS sees it
            ports = switch_ports(plan)[0]
            counters = [probewatch.snapshot(rep, hs, ports)]   # before the first datagram
            with CpuWatch(emulator_processes(rep, ctl)) as cpu:   # the traffic's span
                t_start = time.time()
                sends = {h: rep.popen(h, PROBE + ["send", "--dst", ",".join(ip_of[d] for d in hs if d != h),
                                                  "--port", str(PORT), "--sport", str(47000 + i),
                                                  "--interval", str(args.interval), "--duration", str(args.duration),
                                                  "--size", str(args.size), "--out", str(probe_dir / f"{h}-send.json")],
                                      **kw) for i, h in enumerate(hs)}
                driver = FailureDriver(control, events, lambda: t_start, timeout=30, what="the traffic to start")
                try:
                    if events:
                        t_cut = t_start + min(e.at for e in events)
                        counters.append(read_before_cut(rep, hs, ports, t_cut - args.interval, counters[0]))
                    for procs, what in ((sends, "sender"), (recvs, "receiver")):
                        for h, p in procs.items():
                            wait_finished(p, f"{what} on {h}", args.duration + 30)
                finally:
                    t_end = time.time()
                    record = driver.finish()
            touched = [link for x in record["log"] for link in F.links_of(G, x["kind"].split("_")[0], x["target"])]
            checked, still_down = control.down_interfaces(list(dict.fromkeys(touched)))
            cuts = F.cuts(record["log"], args.duration)
            failovers = reactions(ctl, G, cuts, t_start, t_end) if not record["error"] else {}
            after = controller_paths(ctl, hs)
            res.write_json("events.json", ctl.get("/events"))
            health = ctl.get("/health")
    res.write_json("failures.json", record)
    if record["error"]:
        raise EmulationError(f"failure schedule: {record['error']} (restored: {', '.join(record['restored']) or 'nothing'}"
                             f"; log in {res.path('failures.json')})")
    if still_down:
        raise EmulationError(f"interfaces still down after the schedule was restored: {', '.join(still_down)}")
    return analyse(G, res, args, hs, ip_of, probe_dir, t_start, schedule, record, cuts, failovers, (before, after),
                   plan.scale, counters, {"ping_all_loss_pct": ping_loss, "load": load, "cpu": cpu.summary(),
                    "controller_handler_errors": health["handler_errors"], "interfaces_checked_up": len(checked),
                    "link_rate_emulated_bps": max(e.applied.rate_bps or 0 for e in plan.links)})


def read_before_cut(rep, hs, ports, t_end: float, first: dict) -> dict:
    """The second counter read (:func:`testbed.emu.probewatch.snapshot`), timed to end before the first cut:
    it starts four times the first read's duration, and at least 0.4 s, before the pre-cut window ends
    (``t_end``; a read under traffic took up to 2.5 times the one before it, 250 ms beside two busy loops,
    and 290 ms in a run whose first read had taken less than a third of that: that one ended after the
    cut). Whether it did end in time is checked with the schedule's log (:func:`pre_cut`)."""
    from testbed.emu import probewatch
    from testbed.poll import sleep_until

    sleep_until(t_end - max(4 * (first["t"][1] - first["t"][0]), 0.4))
    return probewatch.snapshot(rep, hs, ports)


def pre_cut(G, flows: dict, recv_docs: dict, before: dict, record: dict, counters: list, t_start: float,
            args) -> dict:
    """Probes lost before the first cut, split from those the cut took and set against the counters read
    before it (:mod:`testbed.routing.precut`). The counters count only when their second read ended
    before the cut started (else the cut's own drops may be in them: nothing is attributed)."""
    if record["log"]:
        x = record["log"][0]
        t_cut, links = t_start + x["at_s"], F.links_of(G, x["kind"].split("_")[0], x["target"])
    else:
        t_cut, links = t_start + args.duration, []
    t_end = t_cut - args.interval   # where the cut's own window starts (cut_report: one round)
    split = P.split_losses(flows, t_end, t_cut, P.crossing(before, links))
    causes = read = None
    if len(counters) == 2 and counters[1]["t"][1] < t_cut:
        causes, read = P.counter_causes(*counters), counters[1]["t"]
    doc = P.attribute(split, causes, read[0] if read else None)
    return {"lost": split["lost"], "in_flight_at_cut": split["in_flight_at_cut"], **doc,
            "window_end_s": round(t_end - t_start, 3), "cut_s": round(t_cut - t_start, 3),
            "counters": causes, "counters_read_s": [round(t - t_start, 3) for t in counters[-1]["t"]],
            "counters_before_cut": read is not None, "transit_ms_wall": P.transit_ms(recv_docs, t_start, t_end),
            "flows": split["flows"]}


def pre_cut_line(pre: dict) -> str:
    """The pre-cut losses in a line: how many, their causes, and what the cut took in flight."""
    causes = ", ".join(f"{n} {c.replace('_', ' ')}" for c, n in pre["by_cause"].items())
    if pre["unattributed"]:
        causes = ", ".join(x for x in (causes, f"{pre['unattributed']} without a counted cause") if x)
    t = pre["transit_ms_wall"]
    return (f"before the first cut: {pre['lost']} probes lost{f' ({causes})' if causes else ''}; "
            f"{pre['in_flight_at_cut']} more were in flight when it came (the cut's; transit p99 {t['p99']} ms, "
            f"max {t['max']} ms wall)")


def reactions(ctl, G, cuts: list[dict], t_start: float, t_end: float) -> dict:
    """The controller's reaction to every cut and repair ({index: (down, up)}), from its ``/events``; waits
    until each link or switch cut shows (a crashed switch: at least one of its links), and its repair (in
    the schedule, or the driver's restore at ``t_end``: then not reported, but the paths taken after it
    are the restored fabric's)."""
    def seen():
        fo = ctl.get("/events")["failovers"]
        got = {}
        for i, c in enumerate(cuts):
            links = F.links_of(G, c["kind"], c["target"])
            if not links:
                got[i] = (None, None)
                continue
            down = reaction(fo, links, "link_down", t_start + c["down_s"] - 0.01)
            up = reaction(fo, links, "link_up", (t_start + c["up_s"] if c["repaired"] else t_end) - 0.01)
            if down is None or up is None:
                return None
            got[i] = (down, up if c["repaired"] else None)
        return got
    return poll(seen, timeout=15, interval=0.05, what="the controller to report every failure and repair")


def analyse(G, res: Results, args, hs, ip_of, probe_dir: Path, t_start: float, schedule: str, record: dict,
            cuts: list[dict], failovers: dict, paths: tuple, scale: float, counters: list, measured: dict) -> dict:
    """Every cut's report (affected flows, outage, control plane, path changes) from the probes' records."""
    from controllers.launch import addressed

    before, after = paths
    send_docs = {h: json.loads((probe_dir / f"{h}-send.json").read_text()) for h in hs}
    recv_docs = {h: json.loads((probe_dir / f"{h}-recv.json").read_text()) for h in hs}
    flows = flow_table(send_docs, recv_docs, ip_of)
    reports, per_cut = [], []
    for i, c in enumerate(cuts):
        during = brain_paths(addressed(G), hs, F.down_after(record["log"], c["log_index"], G))
        next_s = cuts[i + 1]["down_s"] if i + 1 < len(cuts) else float("inf")
        down, up = failovers.get(i, (None, None))
        doc, flows_i = cut_report(flows, c, t_start, next_s, (before, during, after), down, up, scale,
                                  args.control_latency_ms)
        reports.append(doc)
        per_cut.append(flows_i)
    bin_s = max(BIN_S, 10 * args.interval)  # at least ten packets per flow per bin
    edges, series = throughput_series(flows, t_start, t_start + args.duration, args.size, bin_s)
    worst = {k: max((fc[k] for fc in per_cut), key=lambda o: o["outage_ms"]) for k in flows} if per_cut else {}
    plot_throughput(res.path("throughput.png"), edges, series, worst,
                    [(c["down_s"], c["up_s"], c["event"]) for c in cuts], args.mode)
    changes = path_changes(before, before, after)
    per_flow = [{"src": s, "dst": d, "sent": o["sent"], "received": o["received"], "lost": o["lost"],
                 "cuts": [fc[(s, d)] for fc in per_cut], "paths_before": len(before[(s, d)]),
                 "paths_after": len(after[(s, d)])}
                for (s, d), o in sorted(flow_outages(flows, (t_start, float("inf"))).items())]
    res.write_json("flows.json", per_flow)
    res.write_json("series.json", {"bin_s": bin_s, "t": edges,
                                   "mbps": {f"{s}->{d}": v for (s, d), v in series.items()}})
    head = reports[0] if reports else {}
    pre = pre_cut(G, flows, recv_docs, before, record, counters, t_start, args)
    return {
        "mode": args.mode, "schedule": schedule, "flows": len(flows), "scale": scale,
        "interval_ms": args.interval * 1e3, "resolution_ms_emulated": args.interval * 1e3,
        "resolution_ms_real": args.interval * 1e3 / scale,
        # the first cut's figures at the top (every cut's in ``cuts``)
        "link": head.get("target"), "cut_at_s": head.get("at_s"), "restore_at_s": head.get("repaired_at_s"),
        **{k: v for k, v in head.items() if k not in ("event", "kind", "target", "at_s", "repaired_at_s",
                                                      "repair_event")},
        "cuts": reports,
        "failures": {k: record[k] for k in ("log", "skipped", "restored", "error")},
        "flows_back_to_original_paths": len(changes["same_as_before_after_restore"]),
        "lost_before_cut": pre["lost"], "pre_cut": pre,
        **measured,
        "plot": str(res.path("throughput.png")),
    }


def cut_line(cut: dict, summary: dict) -> str:
    """One cut in a line: affected flows and their outage (emulated), the control plane (wall clock)."""
    back = f"repaired at {cut['repaired_at_s']:.2f} s" if cut["repaired_at_s"] is not None else "not repaired in the run"
    line = (f"{cut['event']} (ran at {cut['at_s']:.2f} s, {back}): {cut['flows_affected']} of {summary['flows']} flows "
            f"affected; outage median {cut['outage_ms_emulated_median']:.1f} ms, max {cut['outage_ms_emulated_max']:.1f} "
            f"ms emulated (resolution {summary['resolution_ms_emulated']:g} ms; scale {summary['scale']:g})")
    if "detection_ms_wall" in cut:
        line += (f"; control plane (wall clock, undilated): detection {cut['detection_ms_wall']:.1f} ms + push "
                 f"{cut['controller_push_ms_wall']:.1f} ms, data plane {cut['data_plane_ms_emulated']:.1f} ms "
                 f"emulated; real-world estimate {cut['outage_ms_real_estimate']:.2f} ms")
    return line


def main(argv=None) -> int:
    parser = scenario_parser(__doc__, prog=f"testbed run {NAME}")
    parser.add_argument("--mode", choices=("controller", "fast-failover"), default="controller")
    parser.add_argument("--duration", type=float, default=None, help="seconds of traffic (default 15; --quick 9)")
    parser.add_argument("--interval", type=float, default=None,
                        help="per-flow sending interval in seconds (default 0.02; --quick 0.05)")
    parser.add_argument("--size", type=int, default=200, help="UDP payload bytes")
    parser.add_argument("--link", help="the default schedule's link as A,B (default: the first agg-core link)")
    parser.add_argument("--failures", metavar="SCHEDULE",
                        help="failures during the traffic, AT:ACTION:TARGET[:ARGS],... from the traffic's start "
                             "(down/up/flap/crash/recover; docs/failures.md); default: --link down at 1/3 of "
                             "the traffic, up at 2/3")
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
    schedule, events = events_of(G, args)       # checked before anything is built
    config = {"spec": str(SPEC), "mode": args.mode, "duration_s": args.duration, "interval_s": args.interval,
              "size": args.size, "failures": schedule}
    with Results(NAME, args, config) as res:
        require_root(f"testbed run {NAME}")
        summary = run(G, res, args, schedule, events)
        pre = summary["pre_cut"]
        summary.update(res.health(cpu=summary.pop("cpu"), unaccounted=pre["unattributed"], lost_inside=pre["emulator"]))
        res.out.print(pre_cut_line(pre), markup=False, highlight=False, soft_wrap=True)
        for cut in summary["cuts"]:
            res.out.print(cut_line(cut, summary), markup=False, highlight=False, soft_wrap=True)
        res.out.print(f"restored at the end: {', '.join(summary['failures']['restored']) or 'nothing'}; "
                      f"{summary['load']}", markup=False, highlight=False)
        res.finish(summary)
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
