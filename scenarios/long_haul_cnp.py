"""Long-haul congestion feedback: end-to-end ECN vs switch-generated fast CNP across a DCI link.

    campus A                                                                          campus B
    h0 --\\                                                                          /-- h2
          x0 (ToR) -- d0 (DCI) ==[ long haul 0..100 km: netem or delay line ]== d1 (DCI) -- x1 (ToR)
    h1 --/            ^ case sender-dci: d0's egress onto the long haul         case receiver-tor: ^  \\-- h3
                        10G, fed by two 10G senders (2:1;                     x1's ports to h2, h3 at 5G
                        N:1 with --incast N: h0..hN-1 -> hN..h2N-1)

    h0 -> h2 and h1 -> h3: soft-RDMA RC WRITEs with DCQCN (``testbed rdma write-lat``: one message in
    flight, so every message is a flow with its own completion time), all switches BMv2 + p4/fabric.p4.

    mode ecn:       d0 marks CE -> long haul -> receiver (NP) -> CNP -> long haul -> sender cuts its rate
    mode fast-cnp:  d0 sends the CNP itself (to the sender's QP: the control plane preloads every switch's QP
                    map, as vendors keep a flow table; --learn-qp learns it from the ACKs instead) -> sender
                    so feedback skips two long-haul crossings.  At the receiver-side ToR (case 2) both
                    paths cross the long haul once: fast CNP saves only x1 -> receiver -> x1.

What it shows: per distance, mode and case the goodput, flow completion time p50/p99, the congestion
point's queue (peak and mean, read from registers of fabric.p4), the feedback delay (the congestion
point's first CE-marked frame or CNP on the wire -> the first CNP at a sender, both captured on the one
kernel clock) and drops, in real-world units (emulated / scale) with the emulated ones beside them. The
run watches the emulator (switch CPU, machine CPU, delay-line lateness) and says when it saturated.

Real fabric -> replica: ``scale`` from the spec (2000): 10G -> 5 Mbit/s, 30 km (150 us) -> 300 ms,
DCQCN timers and the CNP interval x 2000; queues and RED thresholds stay in packets/bytes. Each distance's
``timeline.png`` shows one trial per case and mode over time: the senders' DCQCN rates, the queue, CNPs.

Every trial is checked before it is shown (``testbed.validate.trial_ledger``): its frame ledger names the
place of every lost frame (a modelled queue, or the emulator: a wire, a switch's capture ring, a link node,
a host socket; found by conservation of frames at every element, ``testbed.links.hops``); a trial with
emulator losses, unaccounted losses or a saturated machine is INVALID with the reason. So is one whose
data fails ``testbed roce check --expect-ect`` (``data_check`` in trial.json and rows.json, column
"data"): DCQCN needs ECN-capable data, and the switches mark only ECT frames. The sample checked is the
first sender's first 1500 RoCEv2 frames (``tcpdump -c``), both directions at its host link, whole (the
ICRC covers every byte); a sample that bounded ends inside a message, which the check is told
(``cut_at``), and it holds the NAKs and CNPs the sender got, so resends and CNPs are judged as in a full
capture; its data is never CE (no switch has seen it yet), so CE -> CNP is timed elsewhere, not judged
here (``testbed.validate.longhaul_captures``). The pure set-up
lives in ``testbed.validate.longhaul_setup``, the tables and plots in ``longhaul_report``.

    sudo testbed run long_haul_cnp --quick        # 30 km, both modes, both cases, 1 repetition (~2 min)
    sudo testbed run long_haul_cnp                # 0, 10, 30, 50, 100 km, 5 repetitions each
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

if __name__ == "__main__" and __package__ is None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from testbed.console import console, require_root  # noqa: E402
from testbed.emu.health import CpuWatch, saturation  # noqa: E402
from testbed.plan import plan_replica  # noqa: E402
from testbed.scenario import REPO_ROOT, Results, run_main, scenario_parser  # noqa: E402
from testbed.validate import longhaul_report as report  # noqa: E402
from testbed.validate import longhaul_setup as S  # noqa: E402
from testbed.validate import trial_ledger as TL  # noqa: E402

NAME = "long_haul_cnp"
#: why ``--failures`` is refused here (a scenario takes a failure schedule or says why not)
NO_FAILURES = (
    "its trials judge every lost frame against the loss ledger and the DCQCN feedback checks, which a "
    "schedule's losses are not wired into yet (and the long haul has no second path: a down is a "
    "total outage)")
SPEC = REPO_ROOT / "scenarios" / "specs" / "long-haul.yaml"
ENDPOINT = [sys.executable, "-m", "testbed.rdma.endpoint"]


def run_distance(G, distance_km: float, cases, modes, args, res) -> list[dict]:
    from testbed.doctor import plan_capabilities
    from testbed.emu.replica import Replica
    from testbed.links.node import late_tolerance_at, node_class
    from testbed.p4rt import entries as E
    from testbed.p4rt.mininet_switch import plan_switch_factory
    from testbed.p4rt.program import install
    from testbed.routing.brain import RoutingBrain

    r = S.roles(G)
    out = res.dir / f"{distance_km:g}km"
    out.mkdir(parents=True, exist_ok=True)
    caps = plan_capabilities()
    rows, timelines = [], {}
    for case in cases:
        # one replica per case, from the case's own plan: its link nodes serialise at the case's rates
        # (the bottleneck moves between cases; a node's rate is fixed while it runs)
        plans = {m: S.case_plan(G, case, m, caps, args.link_backend, args.red, not args.no_serialise) for m in modes}
        plan = plans[modes[0]]
        backend, why = S.long_haul_backend(plan, r)
        window = args.window or S.default_window(G, r)
        console.print(f"[bold]{distance_km:g} km, {case}[/bold]: long haul {backend} ({why}); window {window} packets "
                      f"per QP (BDP {S.worst_bdp_pkts(G, r):.0f}); " + S.describe_red(S.red_rule(G, args.red)))
        rep_dir = out / f"replica-{case}"
        factory = plan_switch_factory(plan, log_dir=rep_dir, pcap_dir=rep_dir / "pcap" if args.pcap else None)
        with Replica(plan, out_dir=rep_dir, name=NAME, switch_factory=factory,
                     link_node_class=node_class(late_tolerance_at(plan.scale))) as rep:
            clients = {s.node: rep.switch(s.node).client() for s in plan.switches}
            brain = RoutingBrain(plan.graph)
            brain.compute_all(0.0)
            tables = brain.tables()
            for sw, c in clients.items():
                install(c, E.fabric_program(plan.graph, sw, tables.get(sw, {}).values()))
                if not args.learn_qp:
                    c.apply(S.qp_map_entries(plan, r))
            servers = [rep.popen(h, ENDPOINT + ["serve", "0.0.0.0"], stdout=open(rep_dir / f"server-{h}.log", "w"),  # noqa: SIM115
                                 stderr=subprocess.STDOUT) for h in r.receivers]
            nodes = rep.link_nodes()
            try:
                for mode in modes:
                    for rep_i in range(args.repetitions):
                        trial_plan = plans[mode]
                        tag = f"{case}-{mode}" + (f"-{rep_i}" if args.repetitions > 1 else "")
                        console.print(f"[bold]{distance_km:g} km, {case}, {mode}[/bold]"
                                      + (f", repetition {rep_i + 1}/{args.repetitions}" if args.repetitions > 1 else ""))
                        t = trial(rep, trial_plan, r, clients, case, mode, args, out / tag, nodes, servers, window)
                        res.write_json(f"{distance_km:g}km/{tag}/plan.json", trial_plan.to_json())
                        rows.append(S.row(case, distance_km, mode, plan.scale, t, rep_i))
                        res.write_json(f"{distance_km:g}km/{tag}/trial.json", t)
                        console.print(report.trial_line(t))
                        timelines.setdefault((case, mode), t["timeline"])  # the first repetition's
            finally:
                for p in servers:
                    p.terminate()
                for c in clients.values():
                    c.close()
    report.plot_timeline(timelines, out / "timeline.png", f"{distance_km:g} km: one trial of each case and mode")
    return rows


def trial(rep, plan, r, clients, case, mode, args, out: Path, nodes, servers, window: int) -> dict:
    from testbed.emu.capture import tcpdump, tcpdump_argv
    from testbed.links.kwire import replica_egress_drops
    from testbed.links.node import late_tolerance_at
    from testbed.p4rt import fabric_stats as F
    from testbed.poll import poll
    from testbed.rdma.endpoint import sender_result, summarise_write_lat
    from testbed.validate import longhaul_captures as LC
    from testbed.validate.trial_watch import TrialWatch

    out.mkdir(parents=True, exist_ok=True)
    G = plan.graph
    rep.apply_queues(plan)
    F.program_ecn(clients, plan)
    F.reset(clients)
    bsw, bnbr = S.bottleneck(case, r)
    bport = G.edges[bsw, bnbr]["ports"][bsw]
    epoch = F.clock_epoch_us(clients[bsw])
    docs = [S.sender_config(plan, s, d, args, window, None if args.learn_qp else S.pair_qpns(i), i)
            for i, (s, d) in enumerate(zip(r.senders, r.receivers, strict=True))]
    backend, _why = S.long_haul_backend(plan, r)
    dci = [r.dci, r.dci[::-1]] if backend == "netem" else []  # the netem long haul's qdiscs count its drops
    netem0 = replica_egress_drops(rep, dci)
    with ExitStack() as captures:  # CNPs where the senders get them, the congestion point's first signal, data
        for node, nbr, way, expr, name, count in S.captures(G, case, r):
            argv = tcpdump_argv(rep.intf_name(node, nbr), out / f"{name}.pcap", [expr], buffer_kib=4096, direction=way,
                                count=count)
            captures.enter_context(tcpdump(lambda a, log, n=node: rep.popen(n, a, stdout=log.open("w"),  # noqa: SIM115
                                                                             stderr=subprocess.STDOUT),
                                           argv, out / f"tcpdump-{name}.log", f"{node}-{nbr}"))
        watch = TrialWatch(rep, clients, nodes, r.senders + r.receivers,
                           {f"receiver {h}": p.pid for h, p in zip(r.receivers, servers, strict=True)}).start()
        senders = [(s, rep.popen(s, ENDPOINT + ["send", json.dumps(doc)], stdout=open(out / f"sender-{s}.json", "w"),  # noqa: SIM115
                                 stderr=open(out / f"sender-{s}.log", "w")))  # noqa: SIM115
                   for s, doc in zip(r.senders, docs, strict=True)]
        sampler = F.QueueSampler(rep.switch(bsw).client, bport, S.TIMELINE_EVERY_S * plan.scale).start()
        started = time.monotonic()
        with CpuWatch([rep.switch(sw).process.proc.pid for sw in clients],  # keep-awake spinners left out
                      timer_tolerance_s=late_tolerance_at(plan.scale)) as cpu:  # the link nodes' own bound
            poll(lambda: all(p.poll() is not None for _, p in senders), timeout=args.trial_timeout, interval=0.2,
                 what=f"senders of {case}/{mode}")
        elapsed, queue = time.monotonic() - started, sampler.stop()
        watch.stop(quiet_s=S.path_rtt_s(G, r.senders[0], r.receivers[0]) * plan.scale / 2 + 0.1,  # in flight
                   drain_s=S.drain_s(plan, bsw, bnbr))
    results = [sender_result(p, out / f"sender-{s}.json", out / f"sender-{s}.log") for s, p in senders]
    flows, neck = summarise_write_lat(results), F.port_stats(clients[bsw], bport)
    times = LC.capture_times(out, case, r, S.capture_lags(plan, case, r))   # behind a netem qdisc: stamped late
    feedback, parts = LC.feedback(times, mode)
    data = LC.data_check(out, r.senders[0], plan.endpoint(r.senders[0]).emulated_dcqcn["cnp_interval"], plan.scale)
    dropped = F.drops(clients, plan)
    ev = watch.evidence(dropped)
    long_haul = ev["link_stats"].get(rep.link_node(*r.dci).name) if backend == "userspace" else None
    attributed = sum(n for k, n in TL.places(ev["hops"], ev["ring_drops"]).items() if "wire" in k or "switch" in k)
    sat = saturation(cpu.summary(), long_haul, dropped["busiest_pkts"] / elapsed, args.bench_pps,
                     ev["udp_rcvbuf_errors"], 0,
                     max(0, flows["receiver_naks"] - dropped["counted"] - attributed))
    netem_lost = replica_egress_drops(rep, dci) - netem0
    if netem_lost:   # the long haul models no loss: a netem drop is its queue overflowing, not the protocol
        sat.append(f"the netem long haul dropped {netem_lost} frames (tc -s: its queue limit)")
    block = TL.metrics_block(results, sum(dropped["cnps_by_switch"].values()), ev["link_stats"],
                             {**dropped["by_switch"], "egress queues": {"tail": dropped["tail"]}},
                             ev["udp_rcvbuf_errors"], ev["switch_socket_drops"], watch.own_cpu(), hops=ev["hops"],
                             ring_drops=ev["ring_drops"])
    neck_doc = S.bottleneck_doc(plan, bsw, bnbr, len(S.crossing(case, r)))
    checked = TL.verdict({"mode": mode, "switch_cnps": neck["switch_cnps"], "cnps_rx": flows["cnps_rx"], "marks": neck["marks"],
                          "feedback_check": S.feedback_check(plan, case, r, mode, feedback, neck_doc),
                          "data_check": data}, block, sat)
    return {**flows, **neck, "feedback_delay_s": feedback, "long_haul_backend": backend,
            "feedback_delay_switch_clock_s": S.feedback_delay(epoch, neck["first_signal_us"], times["crossing"]),
            "long_haul_netem_drops": netem_lost if backend == "netem" else None, "drops": dropped["tail"] + dropped["red"],
            "bottleneck": neck_doc, "unsettled": watch.unsettled,
            "marks_by_port": dropped["marks_by_port"], "feedback_parts": parts,
            **{k: ev[k] for k in ("udp_rcvbuf_errors", "switch_socket_drops", "ring_drops", "ring_frames_min", "hops")},
            "switch_drops": dropped["by_switch"], "cpu": cpu.summary(), "elapsed_s": elapsed, "settled_s": watch.settled_s,
            "window_pkts": window, "saturation": sat, **checked, "senders": results,
            "timeline": S.timeline(r.senders, results, queue, times["cnps"], plan.scale,
                                                       neck_doc.get("rate_pps")), "queue_sampler_error": sampler.error}


def main(argv=None) -> int:
    parser = scenario_parser(__doc__, prog=f"testbed run {NAME}", refuse_failures=NO_FAILURES)
    parser.add_argument("--distances", help="comma-separated km (default 0,10,30,50,100; --quick 30)")
    parser.add_argument("--modes", default=",".join(S.MODES), help="ecn,fast-cnp (default both)")
    parser.add_argument("--cases", help="sender-dci,receiver-tor (default both; with --incast above 2: sender-dci)")
    parser.add_argument("--incast", type=int, default=S.DEFAULT_INCAST,
                        help=f"senders (and receivers) per campus, {S.MIN_INCAST}..{S.MAX_INCAST} (default 2): "
                             "N senders at line rate into the sender-side DCI's one port, N:1")
    parser.add_argument("--size", default="1MB",
                        help="message (flow) size, or a flow-size mix such as 64KB,1MB,4MB: each sender cycles "
                             "through it (starting at a different size per sender) and completion times are "
                             "reported per size (default 1MB)")
    parser.add_argument("--iters", type=int, default=None,
                        help="messages per sender (default 8; --quick 2; with a mix rounded up to a multiple of "
                             "its sizes)")
    parser.add_argument("--repetitions", type=int, default=None,
                        help="trials per point (default 5; --quick 1): mean and 95%% interval over the valid ones")
    parser.add_argument("--window", type=int, default=None,
                        help="packets in flight per QP (default: 2 x the path's BDP, at least 128, so DCQCN and "
                             "not the window limits the senders, as a NIC's; the 30 km BDP is ~350 packets)")
    parser.add_argument("--red", choices=S.RED_RULES, default="per-25g",
                        help="ECN thresholds: per-25g (Alibaba: Kmin 100 KB, Kmax 400 KB per 25G of port rate, "
                             "the default) or bdp (Juniper's long-haul profile: Kmin 0.75, Kmax 1.5 x the "
                             "path's BDP at the port's rate); config.json and the console say which")
    parser.add_argument("--pcap", action="store_true", help="per-port pcaps of every switch")
    parser.add_argument("--learn-qp", action="store_true",
                        help="fast CNP learns the senders' QPs from ACKs (shows the delay), not preloaded (default)")
    parser.add_argument("--bench-pps", type=float, default=15000,
                        help="BMv2 forwarding rate on this machine (testbed bench p4), for saturation checks")
    parser.add_argument("--trial-timeout", type=float, default=180, help="seconds a trial may take")
    parser.add_argument("--scale", type=float, default=None,
                        help="time dilation (default: the spec's, 2000); a slower emulator needs more (docs/vm.md)")
    parser.add_argument("--link-backend", choices=("auto", "netem", "userspace"), default="auto",
                        help="the long haul: auto (default) = tc netem where doctor finds it, else the link node")
    parser.add_argument("--no-serialise", action="store_true",
                        help="links hand each frame over at the start of its turn, as BMv2 and HTB pace, instead of "
                             "serialising it in a link node (for comparison; one serialisation early per hop)")
    args = parser.parse_args(argv)
    distances, modes, cases = S.checked_args(args)
    from testbed.doctor import plan_capabilities

    G0 = S.graph(SPEC, args.scale, args.incast)
    long_haul, _why = S.long_haul_backend(plan_replica(G0, plan_capabilities(), S.overrides(link_backend=args.link_backend,
                                                                                  serialise=not args.no_serialise)),
                                          S.roles(G0))
    config = S.run_config(G0, SPEC, args, distances, modes, cases, long_haul)
    with Results(NAME, args, config) as res:
        require_root(f"testbed run {NAME}")
        rows = []
        for km in distances:
            rows += run_distance(S.with_distance(G0, km), km, cases, modes, args, res)
            res.write_json("rows.json", rows)
        report.print_table(rows, res.out)
        groups = report.summarise(rows)
        if args.repetitions > 1:
            report.print_summary(groups, res.out)
        report.print_fct_classes(groups, res.out)
        report.plot(rows, res.path("long_haul_cnp.png"))
        report.plot_fct_classes(groups, res.path("fct_by_size.png"))
        report.print_verdict(rows, res.out)
        block = res.health(report.health_parts(rows))    # every trial's ledger, CPU and saturation
        metrics, summary = report.documents(rows, G0.graph["scale"], block)
        res.write_json("metrics.json", metrics)
        res.finish(summary)
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
