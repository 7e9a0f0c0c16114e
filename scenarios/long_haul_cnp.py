"""Long-haul congestion feedback: end-to-end ECN vs switch-generated fast CNP across a DCI link.

    campus A                                                                          campus B
    h0 --\\                                                                          /-- h2
          x0 (ToR) -- d0 (DCI) ==[ long haul 0..100 km: delay line, no queue ]== d1 (DCI) -- x1 (ToR)
    h1 --/            ^ case sender-dci: d0's egress onto the long haul         case receiver-tor: ^  \\-- h3
                        10G, fed by two 10G senders (2:1)                     x1's ports to h2, h3 at 5G

    h0 -> h2 and h1 -> h3: soft-RDMA RC WRITEs with DCQCN (``testbed rdma write-lat``: one message in
    flight, so every message is a flow with its own completion time), all switches BMv2 + p4/fabric.p4.

    mode ecn:       d0 marks CE -> long haul -> receiver (NP) -> CNP -> long haul -> sender cuts its rate
    mode fast-cnp:  d0 sends the CNP itself (to the sender's QP: the control plane preloads every switch's QP
                    map, as vendors keep a flow table; --learn-qp learns it from the ACKs instead) -> sender
                    so feedback skips two long-haul crossings.  At the receiver-side ToR (case 2) both
                    paths cross the long haul once: fast CNP saves only x1 -> receiver -> x1.

What it shows: per distance, mode and case the goodput, flow completion time p50/p99, the congestion
point's queue (peak and mean, read from registers of fabric.p4), the feedback delay (first CE mark or
switch CNP at the congestion point -> first CNP at the sender, from the switch's clock and a capture on
the sender) and drops. Times are reported in real-world units (emulated / scale) with the emulated ones
beside them. The run also watches the emulator (switch CPU, machine CPU, delay-line lateness) and says
when it saturated, so that such rows are not read as protocol behaviour.

Real fabric -> replica: ``scale`` from the spec (1000): 10G -> 10 Mbit/s, 30 km (150 us) -> 150 ms,
DCQCN timers and the CNP interval x 1000; queues and RED thresholds stay in packets/bytes.

    sudo testbed run long_haul_cnp --quick        # 30 km, both modes, both cases (~1-2 min)
    sudo testbed run long_haul_cnp                # 0, 10, 30, 50, 100 km
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

if __name__ == "__main__" and __package__ is None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from testbed.console import console, require_root  # noqa: E402
from testbed.emu.health import CpuWatch, LossWatch, saturation  # noqa: E402
from testbed.errors import EmulationError, SpecError  # noqa: E402
from testbed.plan import Overrides, plan_replica  # noqa: E402
from testbed.scenario import REPO_ROOT, Results, run_main, scenario_parser  # noqa: E402
from testbed.topo.builder import set_link  # noqa: E402
from testbed.units import parse_size  # noqa: E402
from testbed.validate import trial_ledger as TL  # noqa: E402

NAME = "long_haul_cnp"
SPEC = REPO_ROOT / "scenarios" / "specs" / "long-haul.yaml"
DISTANCES_KM = (0, 10, 30, 50, 100)
QUICK_DISTANCES_KM = (30,)
MODES = ("ecn", "fast-cnp")
CASES = ("sender-dci", "receiver-tor")
#: soft-RDMA IB path MTU; frames are Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + payload + ICRC 4.
IB_MTU = 1024
FRAME_BYTES = 14 + 20 + 8 + 12 + IB_MTU + 4
#: RED thresholds scaled with the port rate (Alibaba's production rule, DOMAIN.md): per 25G of rate.
KMIN_BYTES_PER_25G, KMAX_BYTES_PER_25G, PMAX = 100e3, 400e3, 0.2
#: Real-world DCQCN CNP interval; the switch rate-limits its own CNPs the same way.
CNP_INTERVAL_S = 50e-6


# -- pure: the plan of one trial -----------------------------------------------------------------------
@dataclass(frozen=True)
class Roles:
    senders: tuple
    receivers: tuple
    dci: tuple          # (sender side, receiver side)
    receiver_tor: str


def roles(G) -> Roles:
    """Senders = hosts of campus 0, receivers = hosts of campus 1, paired in order (from attributes)."""
    hosts = [n for n, d in G.nodes(data=True) if d.get("role") == "host"]
    senders = tuple(h for h in hosts if G.nodes[h].get("campus") == 0)
    receivers = tuple(h for h in hosts if G.nodes[h].get("campus") == 1)
    dci = {G.nodes[n]["campus"]: n for n, d in G.nodes(data=True) if d.get("role") == "dci"}
    if not senders or len(senders) != len(receivers) or set(dci) != {0, 1}:
        raise SpecError("params.campuses", "long_haul_cnp needs two campuses with the same number of hosts "
                                           "and one DCI switch each")
    tors = {nbr for r in receivers for nbr in G.neighbors(r)}
    if len(tors) != 1:
        raise SpecError("params.campuses", f"receivers must share one ToR, found {sorted(tors)}")
    return Roles(senders, receivers, (dci[0], dci[1]), tors.pop())


def with_distance(G, distance_km: float):
    """Copy of G whose long-haul (dci-tier) link is ``distance_km`` long (5 us/km one way)."""
    H = G.copy()
    for u, v, d in H.edges(data=True):
        if d.get("tier") == "dci":
            set_link(H, u, v, distance_m=distance_km * 1e3)
    return H


def case_rates(G, case: str, r: Roles) -> dict:
    """Real-world rate of each edge (frozenset) for a case: the spec's, with the case's bottleneck."""
    rates = {frozenset((u, v)): d["rate_bps"] for u, v, d in G.edges(data=True)}
    host_rate = max(G.edges[s, next(iter(G.neighbors(s)))]["rate_bps"] for s in r.senders)
    if case == "sender-dci":
        rates[frozenset(r.dci)] = host_rate * len(r.senders) / 2   # 2:1 onto the long haul
    elif case == "receiver-tor":
        rates[frozenset(r.dci)] = host_rate * len(r.senders) * 2   # long haul not the bottleneck
        for h in r.receivers:
            rates[frozenset((r.receiver_tor, h))] = host_rate / 2  # receiver ports at half the line rate
    else:
        raise SpecError("case", f"{case!r} is not one of: {', '.join(CASES)}")
    return rates


def bottleneck(case: str, r: Roles) -> tuple:
    """(switch, neighbour) whose egress queue is the congestion point (first receiver's for the ToR)."""
    return (r.dci[0], r.dci[1]) if case == "sender-dci" else (r.receiver_tor, r.receivers[0])


def case_graph(G, case: str):
    """Copy of G with the case's real-world link rates (:func:`case_rates`)."""
    H = G.copy()
    for edge, rate in case_rates(G, case, roles(G)).items():
        u, v = tuple(edge)
        set_link(H, u, v, rate_bps=rate)
    return H


def overrides(mode: str = "ecn") -> Overrides:
    """The run's choices on top of the spec: RoCE frames, Alibaba's RED rule, the userspace delay line."""
    return Overrides(link_backend="userspace", frame_bytes=FRAME_BYTES, ecn_mode=mode,
                     red_per_25g=(KMIN_BYTES_PER_25G, KMAX_BYTES_PER_25G, PMAX), cnp_interval_s=CNP_INTERVAL_S)


def case_plan(G, case: str, mode: str, capabilities=None):
    """The replica plan of one case and mode: BMv2 queue rates/depths, RED and fast-CNP per port."""
    from testbed.plan import ASSUMED

    return plan_replica(case_graph(G, case), capabilities or ASSUMED, overrides(mode))


def row(case: str, distance_km: float, mode: str, scale: float, t: dict, repetition: int = 0) -> dict:
    """One result row: real-world units, the emulated figures beside them, and the trial's verdict
    (the fields ``testbed validate --long-haul`` reads, docs/validation.md)."""
    def real_ms(x):
        return None if x is None else round(x / scale * 1e3, 4)

    return {"case": case, "distance_km": distance_km, "mode": mode, "repetition": repetition,
            "valid": t["validity"]["valid"], "validity": t["validity"], "health": t["health"],
            "emulator_ok": t["emulator_ok"], "unaccounted_losses": t["unaccounted_losses"],
            "accounting": t["accounting"], "bottleneck": t["bottleneck"], "cnps_rx": t["cnps_rx"],
            "throughput_mbps": round(t["goodput_bps"] * scale / 1e6, 1),
            "fct_p50_ms": real_ms(t["fct_p50_s"]), "fct_p99_ms": real_ms(t["fct_p99_s"]),
            "queue_peak_pkts": t["queue_peak"], "queue_mean_pkts": t["queue_mean"],
            "feedback_delay_ms": real_ms(t["feedback_delay_s"]), "drops": t["drops"],
            "marks": t["marks"], "switch_cnps": t["switch_cnps"], "cnps_at_senders": t["cnps_rx"],
            "retransmissions": t["retransmissions"], "emulator_saturated": bool(t["saturation"]),
            "saturation": t["saturation"],
            "emulated": {"throughput_mbps": round(t["goodput_bps"] / 1e6, 3), "fct_p50_ms": _ms(t["fct_p50_s"]),
                         "fct_p99_ms": _ms(t["fct_p99_s"]), "feedback_delay_ms": _ms(t["feedback_delay_s"])}}


def validate_fields(G) -> dict:
    """Config fields ``testbed validate --long-haul`` reads: the senders' real line rate, how many share the
    bottleneck, one campus' cabling (host + campus-DCI link) and the backends."""
    r = roles(G)
    s = r.senders[0]
    tor = next(iter(G.neighbors(s)))
    up = next(n for n in G.neighbors(tor) if G.nodes[n].get("role") == "dci")
    return {"line_rate_bps": G.edges[s, tor]["rate_bps"], "flows": len(r.senders),
            "local_fibre_m": G.edges[s, tor].get("distance_m", 0.0) + G.edges[tor, up].get("distance_m", 0.0),
            "backends": ["bmv2", "userspace", "soft-rdma"]}


def _ms(x):
    return None if x is None else round(x * 1e3, 2)


def pair_qpns(i: int) -> tuple[int, int]:
    """(sender's, receiver's) QP number of sender-receiver pair ``i``: fixed, so the QP maps can be preloaded."""
    return 0x100 + i, 0x200 + i


def qp_map_entries(plan, r: Roles) -> list:
    """The control plane's QP map: (sender ip, receiver ip, receiver QP) -> sender QP for every pair."""
    from testbed.p4rt import entries as E

    return [E.qp_map_entry(plan.endpoint(s).ip, plan.endpoint(d).ip, pair_qpns(i)[1], pair_qpns(i)[0])
            for i, (s, d) in enumerate(zip(r.senders, r.receivers, strict=True))]


def sender_config(plan, sender, receiver, args, qpns=None) -> dict:
    """The send document of one sender (:mod:`testbed.rdma.endpoint`): the plan's emulated DCQCN and timeout,
    and (preloaded QP maps) the pair's QP numbers."""
    ep = plan.endpoint(sender)
    doc = {"host": plan.endpoint(receiver).ip, "test": "write_lat", "size": args.size, "iters": args.iters,
           "mtu": IB_MTU, "window": args.window, "timeout_s": ep.emulated_qp_timeout_s, "dcqcn": ep.emulated_dcqcn}
    if qpns is not None:
        doc["qpns"] = list(qpns)
    return doc


# -- root glue --------------------------------------------------------------------------------------------
ENDPOINT = [sys.executable, "-m", "testbed.rdma.endpoint"]


def first_cnp_time(pcap: Path) -> float | None:
    """Capture time of the first CNP a sender received (None when there is none)."""
    from testbed.roce.timing import first_opcode_time

    t, why = first_opcode_time(pcap)
    if why:
        console.print(f"[yellow]{why}[/yellow]")
    return t


def run_distance(G, distance_km: float, cases, modes, args, res, bench_pps: float) -> list[dict]:
    from testbed.doctor import plan_capabilities
    from testbed.emu.replica import Replica
    from testbed.links.node import DelayLineNode
    from testbed.p4rt import entries as E
    from testbed.p4rt.mininet_switch import plan_switch_factory
    from testbed.poll import poll
    from testbed.routing.brain import RoutingBrain

    r = roles(G)
    out = res.dir / f"{distance_km:g}km"
    out.mkdir(parents=True, exist_ok=True)
    caps = plan_capabilities()
    plan = plan_replica(G, caps, overrides())
    factory = plan_switch_factory(plan, log_dir=out, pcap_dir=out / "pcap" if args.pcap else None)
    rows = []
    with Replica(plan, out_dir=out, name=NAME, switch_factory=factory, link_node_class=DelayLineNode) as rep:
        clients = {s.node: rep.switch(s.node).client() for s in plan.switches}
        brain = RoutingBrain(plan.graph)
        brain.compute_all(0.0)
        tables = brain.tables()
        for sw, c in clients.items():
            prog = E.fabric_program(plan.graph, sw, tables.get(sw, {}).values())
            c.apply(prog.entries)
            for session, port in prog.mirrors:
                c.mirroring_add(session, port)
            if not args.learn_qp:
                c.apply(qp_map_entries(plan, r))
        servers = [rep.popen(h, ENDPOINT + ["serve", "0.0.0.0"], stdout=open(out / f"server-{h}.log", "w"),  # noqa: SIM115
                             stderr=subprocess.STDOUT) for h in r.receivers]
        nodes = {}
        for u, v in plan.graph.edges:
            try:
                nodes[f"{u}-{v}"] = rep.link_node(u, v)
            except KeyError:
                pass  # not a userspace link
        long_haul = nodes.get(f"{r.dci[0]}-{r.dci[1]}") or nodes.get(f"{r.dci[1]}-{r.dci[0]}")
        try:
            for case in cases:
                for mode in modes:
                    trial_plan = case_plan(G, case, mode, caps)
                    console.print(f"[bold]{distance_km:g} km, {case}, {mode}[/bold]")
                    t = trial(rep, trial_plan, r, clients, case, mode, args, out / f"{case}-{mode}", long_haul, poll,
                              nodes)
                    res.write_json(f"{distance_km:g}km/{case}-{mode}/plan.json", trial_plan.to_json())
                    rows.append(row(case, distance_km, mode, plan.scale, t))
                    res.write_json(f"{distance_km:g}km/{case}-{mode}/trial.json", t)
                    console.print(f"  emulator_ok: {t['emulator_ok']}"
                                  + (f" ({'; '.join(t['emulator']['reasons'])})" if not t["emulator_ok"] else "")
                                  + f"; lost {t['accounting']['lost']}, unaccounted {t['unaccounted_losses']}; "
                                  + TL.label(t["validity"]))
        finally:
            for p in servers:
                p.terminate()
            for c in clients.values():
                c.close()
    return rows


def trial(rep, plan, r: Roles, clients, case, mode, args, out: Path, long_haul, poll, nodes=None) -> dict:
    from testbed.p4rt import fabric_stats as F
    from testbed.rdma.endpoint import summarise_write_lat

    out.mkdir(parents=True, exist_ok=True)
    G = plan.graph
    rep.apply_queues(plan)
    F.program_ecn(clients, plan)
    F.reset(clients)
    bsw, bnbr = bottleneck(case, r)
    bport = G.edges[bsw, bnbr]["ports"][bsw]
    epoch = F.clock_epoch_us(clients[bsw])
    dumps = []
    for s in r.senders:
        err = out / f"tcpdump-{s}.log"
        dumps.append((rep.popen(s, ["tcpdump", "-i", rep.intf_name(s, next(iter(G.neighbors(s)))), "-U", "-n",
                                    "-w", str(out / f"cnp-{s}.pcap"), "udp dst port 4791 and udp[8] = 0x81"],
                                stdout=subprocess.DEVNULL, stderr=open(err, "w")), err))
    poll(lambda: all("listening on" in e.read_text() for _, e in dumps), timeout=20, what="tcpdump on senders")
    docs = [sender_config(plan, s, d, args, None if args.learn_qp else pair_qpns(i))
            for i, (s, d) in enumerate(zip(r.senders, r.receivers, strict=True))]
    senders = [(s, rep.popen(s, ENDPOINT + ["send", json.dumps(doc)],
                             stdout=open(out / f"sender-{s}.json", "w"), stderr=open(out / f"sender-{s}.log", "w")))
               for s, doc in zip(r.senders, docs, strict=True)]
    pids = [rep.switch(sw).process.proc.pid for sw in clients]
    losses = LossWatch(rep, r.senders + r.receivers, pids).start()
    started = time.monotonic()
    with CpuWatch(pids) as cpu:
        poll(lambda: all(p.poll() is not None for _, p in senders), timeout=args.trial_timeout, interval=0.2,
             what=f"senders of {case}/{mode}")
    elapsed = time.monotonic() - started
    lost = losses.stop()
    for p, _ in dumps:
        p.terminate()
        p.wait(timeout=10)
    results = []
    for s, p in senders:
        text = (out / f"sender-{s}.json").read_text()
        if p.returncode != 0 or not text.strip():
            raise EmulationError(f"sender {s} failed (status {p.returncode}); see {out / f'sender-{s}.log'}")
        results.append(json.loads(text))
    flows = summarise_write_lat(results)
    neck = F.port_stats(clients[bsw], bport)
    crossing = r.senders if case == "sender-dci" else r.senders[:1]  # flows through the bottleneck port
    cnp_times = [t for t in (first_cnp_time(out / f"cnp-{s}.pcap") for s in crossing) if t is not None]
    feedback = None
    if neck["first_signal_us"] and cnp_times:
        signal_wall = (epoch + neck["first_signal_us"]) * 1e-6
        later = [t - signal_wall for t in cnp_times if t >= signal_wall]
        feedback = min(later) if later else None
    dropped = F.drops(clients, plan)
    sat = saturation(cpu.summary(), long_haul.stats() if long_haul is not None else None,
                     dropped["busiest_pkts"] / elapsed, args.bench_pps, lost["udp_rcvbuf_errors"],
                     lost["switch_socket_drops"], max(0, flows["receiver_naks"] - dropped["counted"]))
    port = plan.switch(bsw).port(bport)
    block = TL.metrics_block(results, neck["switch_cnps"],
                             {name: st for name, n in (nodes or {}).items() if (st := n.stats())},
                             {**dropped["by_switch"], "egress queues": {"tail": dropped["tail"]}},
                             lost["udp_rcvbuf_errors"], lost["switch_socket_drops"])
    checked = TL.verdict({"mode": mode, "switch_cnps": neck["switch_cnps"], "cnps_rx": flows["cnps_rx"],
                          "marks": neck["marks"]}, block, sat)
    return {**flows, **neck, "feedback_delay_s": feedback, "drops": dropped["tail"] + dropped["red"],
            "bottleneck": {"switch": bsw, "port": bport, "rate_pps": port.emulated_rate_pps,
                           "kmin_pkts": port.ecn.kmin_pkts, "kmax_pkts": port.ecn.kmax_pkts,
                           "real_rate_bps": G.edges[bsw, bnbr]["rate_bps"],
                           "kmin_bytes": port.ecn.kmin_pkts * FRAME_BYTES,
                           "kmax_bytes": port.ecn.kmax_pkts * FRAME_BYTES, "pmax": port.ecn.pmax},
            **lost, "switch_drops": dropped["by_switch"], "cpu": cpu.summary(), "elapsed_s": elapsed,
            "saturation": sat, **checked, "senders": results}


# -- output -------------------------------------------------------------------------------------------------
def print_table(rows) -> None:
    from rich.table import Table

    t = Table("case", "km", "mode", "goodput Mb/s", "FCT p50 ms", "FCT p99 ms", "queue peak", "queue mean",
              "feedback ms", "drops", "retx", "switch CNPs", "CNPs rx", "sat.", "valid", title="long-haul congestion feedback (real-world units)")
    for x in rows:
        t.add_row(x["case"], f"{x['distance_km']:g}", x["mode"], f"{x['throughput_mbps']:.0f}",
                  _fmt(x["fct_p50_ms"]), _fmt(x["fct_p99_ms"]), str(x["queue_peak_pkts"]),
                  f"{x['queue_mean_pkts']:.1f}", _fmt(x["feedback_delay_ms"]), str(x["drops"]),
                  str(x["retransmissions"]), str(x["switch_cnps"]), str(x["cnps_at_senders"]),
                  "yes" if x["emulator_saturated"] else "", "valid" if x["valid"] else "INVALID")
    console.print(t)
    for x in rows:
        if not x["valid"]:
            console.print(f"  {x['case']} {x['distance_km']:g} km {x['mode']}: {TL.label(x['validity'])}; "
                          + "; ".join(x["validity"]["reasons"][1:]))


def _fmt(v) -> str:
    return "-" if v is None else f"{v:.3f}"


def plot(rows, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = sorted({x["case"] for x in rows}, key=CASES.index)
    metrics = (("throughput_mbps", "goodput (Mb/s)"), ("fct_p99_ms", "FCT p99 (ms)"),
               ("feedback_delay_ms", "feedback delay (ms)"), ("queue_peak_pkts", "peak queue (pkts)"))
    fig, axes = plt.subplots(len(cases), len(metrics), figsize=(4 * len(metrics), 3.2 * len(cases)), squeeze=False)
    for i, case in enumerate(cases):
        for j, (key, label) in enumerate(metrics):
            ax = axes[i][j]
            for mode in MODES:
                pts = sorted((x["distance_km"], x[key]) for x in rows
                             if x["case"] == case and x["mode"] == mode and x[key] is not None)
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=mode)
            ax.set_ylim(bottom=0)
            ax.set_title(f"{case}: {label}", fontsize=9)
            ax.set_xlabel("distance (km)")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# -- main ---------------------------------------------------------------------------------------------------
def main(argv=None) -> int:
    parser = scenario_parser(__doc__, prog=f"testbed run {NAME}")
    parser.add_argument("--distances", help="comma-separated km (default 0,10,30,50,100; --quick 30)")
    parser.add_argument("--modes", default=",".join(MODES), help="ecn,fast-cnp (default both)")
    parser.add_argument("--cases", default=",".join(CASES), help="sender-dci,receiver-tor (default both)")
    parser.add_argument("--size", default="1MB", help="message (flow) size (default 1MB)")
    parser.add_argument("--iters", type=int, default=None, help="messages per sender (default 8; --quick 2)")
    parser.add_argument("--window", type=int, default=128,
                        help="packets in flight per QP (default 128, the endpoint's; the 30 km BDP is ~350 "
                             "packets, so senders are window-limited beyond ~10 km; larger windows let "
                             "DCQCN limit them but turn each emulator loss into a long go-back-N burst)")
    parser.add_argument("--pcap", action="store_true", help="per-port pcaps of every switch")
    parser.add_argument("--learn-qp", action="store_true",
                        help="fast CNP learns each sender's QP from the ACKs (shows the learning delay) instead of "
                             "the control plane preloading the switches' QP maps (default)")
    parser.add_argument("--bench-pps", type=float, default=15000,
                        help="BMv2 forwarding rate on this machine (testbed bench p4), for saturation checks")
    parser.add_argument("--trial-timeout", type=float, default=180, help="seconds a trial may take")
    args = parser.parse_args(argv)
    args.size = int(parse_size(args.size, "--size"))
    if args.size < 1:
        raise SpecError("--size", f"must be at least 1 byte, such as 64KB or 1MB; got {args.size}")
    if args.iters is None:  # 0 and negatives are refused by the parser (exit 2)
        args.iters = 2 if args.quick else 8
    if not 1 <= args.window <= 1 << 20:
        raise SpecError("--window", f"must be 1..{1 << 20} packets, got {args.window}")
    distances = _list(args.distances or ",".join(map(str, QUICK_DISTANCES_KM if args.quick else DISTANCES_KM)),
                      "--distances", float)
    modes = _list(args.modes, "--modes", str, MODES)
    cases = _list(args.cases, "--cases", str, CASES)
    if any(d < 0 or d > 2000 for d in distances):
        raise SpecError("--distances", f"each distance must be 0..2000 km, got {args.distances!r}")
    from testbed.topo.spec import build_graph, load_spec

    G0 = build_graph(load_spec(SPEC))
    roles(G0)
    config = {"spec": str(SPEC), "distances_km": distances, "modes": modes, "cases": cases,
              "message_bytes": args.size, "messages_per_sender": args.iters, "window_pkts": args.window, "scale": G0.graph["scale"],
              "ib_mtu": IB_MTU, "frame_bytes": FRAME_BYTES, "cnp_interval_s": CNP_INTERVAL_S,
              "red_per_25g": {"kmin_bytes": KMIN_BYTES_PER_25G, "kmax_bytes": KMAX_BYTES_PER_25G, "pmax": PMAX},
              "qp_map": "learned from ACKs" if args.learn_qp else "preloaded by the control plane",
              **validate_fields(G0)}
    with Results(NAME, args, config) as res:
        require_root(f"testbed run {NAME}")
        rows = []
        for km in distances:
            rows += run_distance(with_distance(G0, km), km, cases, modes, args, res, args.bench_pps)
            res.write_json("rows.json", rows)
        print_table(rows)
        plot(rows, res.path("long_haul_cnp.png"))
        saturated = any(x["emulator_saturated"] for x in rows)
        invalid = [x for x in rows if not x["valid"]]
        if invalid:
            console.print(f"[yellow]{len(invalid)} of {len(rows)} trials are INVALID (column 'valid'): they are "
                          "not results of their mode[/yellow]")
        emulator_ok = all(x["emulator_ok"] for x in rows)
        console.print(f"emulator_ok: {emulator_ok}")
        res.write_json("metrics.json", {"emulator_ok": emulator_ok, "trials": [
            {k: x[k] for k in ("case", "distance_km", "mode", "repetition", "valid", "validity", "emulator_ok",
                               "health", "unaccounted_losses", "accounting")} for x in rows]})
        if saturated:
            console.print("[yellow]the emulator saturated in some trials (column 'sat.'): do not read those "
                          "rows as protocol behaviour[/yellow]")
        keys = ("case", "distance_km", "mode", "throughput_mbps", "fct_p50_ms", "fct_p99_ms", "queue_peak_pkts",
                "feedback_delay_ms", "drops", "valid", "validity", "emulator_ok")
        summary = {"rows": [{k: x[k] for k in keys} | {"emulated": x["emulated"],
                                                        "emulator_saturated": x["emulator_saturated"]}
                            for x in rows],
                   "emulator_saturated": saturated, "emulator_ok": emulator_ok, "invalid_trials": len(invalid),
                   "scale": G0.graph["scale"]}
        res.finish(summary)
    return 0


def _list(text: str, field: str, cast, allowed=None) -> list:
    try:
        items = [cast(x.strip()) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SpecError(field, f"expected a comma-separated list, got {text!r}") from None
    if not items:
        raise SpecError(field, "must not be empty")
    if allowed is not None:
        bad = [x for x in items if x not in allowed]
        if bad:
            raise SpecError(field, f"{bad[0]!r} is not one of: {', '.join(allowed)}")
    return items


if __name__ == "__main__":
    sys.exit(run_main(main))
