"""Long-haul congestion feedback: end-to-end ECN vs switch-generated fast CNP across a DCI link.

    campus A                                                                          campus B
    h0 --\\                                                                          /-- h2
          x0 (ToR) -- d0 (DCI) ==[ long haul 0..100 km: delay line, no queue ]== d1 (DCI) -- x1 (ToR)
    h1 --/            ^ case sender-dci: d0's egress onto the long haul         case receiver-tor: ^  \\-- h3
                        10G, fed by two 10G senders (2:1)                     x1's ports to h2, h3 at 5G

    h0 -> h2 and h1 -> h3: soft-RDMA RC WRITEs with DCQCN (``testbed rdma write-lat``: one message in
    flight, so every message is a flow with its own completion time), all switches BMv2 + p4/fabric.p4.

    mode ecn:       d0 marks CE -> long haul -> receiver (NP) -> CNP -> long haul -> sender cuts its rate
    mode fast-cnp:  d0 sends the CNP itself (to the sender's QP, learned from the ACKs) -> sender
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
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

if __name__ == "__main__" and __package__ is None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from testbed.console import console, require_root  # noqa: E402
from testbed.errors import EmulationError, SpecError  # noqa: E402
from testbed.scenario import REPO_ROOT, Results, run_main, scenario_parser  # noqa: E402
from testbed.units import FIBRE_DELAY_S_PER_M, parse_size  # noqa: E402

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
class Port:
    """One BMv2 egress port: drain rate and depth (packets), RED/fast-CNP thresholds (packets)."""

    rate_pps: int
    depth_pkts: int
    kmin_pkts: int
    kmax_pkts: int
    real_rate_bps: float


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
            link = d.get("link")
            H.edges[u, v].update(distance_m=distance_km * 1e3, delay_s=distance_km * 1e3 * FIBRE_DELAY_S_PER_M,
                                 link=replace(link, distance_m=distance_km * 1e3, delay_s=None) if link else None)
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


def port_plan(G, case: str, dilation) -> dict:
    """``{switch: {port: Port}}``: BMv2 queue rate/depth and RED thresholds from the link model."""
    r = roles(G)
    rates = case_rates(G, case, r)
    plan = {}
    for sw, d in G.nodes(data=True):
        if d.get("role") == "host":
            continue
        plan[sw] = {}
        for nbr in G.neighbors(sw):
            e = G.edges[sw, nbr]
            rate = rates[frozenset((sw, nbr))]
            limit, unit = e["link"].queue_limit if e.get("link") else (1000.0, "packets")
            depth = limit if unit == "packets" else limit / FRAME_BYTES
            kmin = max(1, round(KMIN_BYTES_PER_25G * rate / 25e9 / FRAME_BYTES))
            kmax = max(kmin + 1, round(KMAX_BYTES_PER_25G * rate / 25e9 / FRAME_BYTES))
            plan[sw][e["ports"][sw]] = Port(rate_pps=max(1, round(dilation.rate(rate) / (8 * FRAME_BYTES))),
                                            depth_pkts=int(max(kmax + 1, min(depth, 100000))),
                                            kmin_pkts=kmin, kmax_pkts=kmax, real_rate_bps=rate)
    return plan


def percentile(values, q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q / 100 * (len(s) - 1))))]


def saturation(cpu: dict, delay_line: dict | None, switch_pps: float, bench_pps: float,
               udp_overflows: int = 0, switch_socket_drops: int = 0, unexplained_gaps: int = 0) -> list[str]:
    """Reasons to distrust a trial: the emulator, not the protocol, was the limit (empty: trust it).

    Args:
        cpu: {"machine_mean", "switch_max"} percentages sampled during the trial.
        delay_line: the long haul's stats (None: no delay line). Frames sent late count only when the
            lateness is a noticeable share (2%) of the emulated one-way delay.
        switch_pps: busiest switch's packet rate during the trial.
        bench_pps: what one BMv2 forwards on this machine (``testbed bench p4``).
        udp_overflows: datagrams the hosts' kernels dropped because an endpoint did not read in time.
        switch_socket_drops: frames the kernel dropped because a BMv2 switch did not read in time.
        unexplained_gaps: sequence gaps the receivers NAKed beyond the drops the switches counted: every
            switch drop is counted in fabric.p4, so these frames were lost in the emulator's I/O.
    """
    why = []
    if cpu.get("machine_mean", 0) >= 95:
        why.append(f"machine CPU {cpu['machine_mean']:.0f}%")
    if cpu.get("switch_max", 0) >= 90:
        why.append(f"a BMv2 process at {cpu['switch_max']:.0f}% of a core")
    if delay_line:
        dirs = delay_line.get("directions", {}).values()
        sent = sum(d.get("tx_packets", 0) for d in dirs)
        late = delay_line.get("emulator_late", 0)
        worst = max((d.get("mean_late_lateness_s", 0.0) for d in dirs), default=0.0)
        one_way = (delay_line.get("params") or {}).get("delay_s") or 0.0
        if sent and late / sent > 0.01 and worst > 0.02 * one_way:
            why.append(f"delay line late on {late / sent:.1%} of frames (by {worst * 1e3:.1f} ms on average)")
        if delay_line.get("rx_kernel_drops", 0):
            why.append(f"delay line lost {delay_line['rx_kernel_drops']} frames in the kernel")
    if switch_pps > 0.8 * bench_pps:
        why.append(f"busiest switch at {switch_pps:.0f} pps, near BMv2's {bench_pps:.0f} pps here")
    if udp_overflows:
        why.append(f"{udp_overflows} datagrams lost in host socket buffers (an endpoint fell behind)")
    if switch_socket_drops:
        why.append(f"{switch_socket_drops} frames lost before BMv2 read them (a switch fell behind)")
    if unexplained_gaps:
        why.append(f"{unexplained_gaps} losses outside the switch pipelines (receiver NAKs without a counted drop)")
    return why


def packet_socket_drops(ss_text: str, pids) -> int:
    """Frames the kernel dropped on the packet sockets of processes ``pids`` (``ss -0 -m -p -H``: the
    ``d`` of ``skmem``): what a BMv2 switch lost because it did not read its ports in time."""
    import re

    want = {str(p) for p in pids}
    total = 0
    for line in ss_text.splitlines():
        owner = re.search(r"pid=(\d+)", line)
        drops = re.search(r"skmem:\([^)]*\bd(\d+)\)", line)
        if owner and drops and owner.group(1) in want:
            total += int(drops.group(1))
    return total


def udp_rcvbuf_errors(snmp_text: str) -> int:
    """``Udp: RcvbufErrors`` from /proc/net/snmp text (0 when absent)."""
    lines = [ln.split() for ln in snmp_text.splitlines() if ln.startswith("Udp:")]
    if len(lines) < 2 or "RcvbufErrors" not in lines[0]:
        return 0
    return int(lines[1][lines[0].index("RcvbufErrors")])


def row(case: str, distance_km: float, mode: str, scale: float, t: dict) -> dict:
    """One result row: real-world units, the emulated figures beside them."""
    def real_ms(x):
        return None if x is None else round(x / scale * 1e3, 4)

    return {"case": case, "distance_km": distance_km, "mode": mode,
            "throughput_mbps": round(t["goodput_bps"] * scale / 1e6, 1),
            "fct_p50_ms": real_ms(t["fct_p50_s"]), "fct_p99_ms": real_ms(t["fct_p99_s"]),
            "queue_peak_pkts": t["queue_peak"], "queue_mean_pkts": t["queue_mean"],
            "feedback_delay_ms": real_ms(t["feedback_delay_s"]), "drops": t["drops"],
            "marks": t["marks"], "switch_cnps": t["switch_cnps"], "cnps_at_senders": t["cnps_rx"],
            "retransmissions": t["retransmissions"], "emulator_saturated": bool(t["saturation"]),
            "saturation": t["saturation"],
            "emulated": {"throughput_mbps": round(t["goodput_bps"] / 1e6, 3), "fct_p50_ms": _ms(t["fct_p50_s"]),
                         "fct_p99_ms": _ms(t["fct_p99_s"]), "feedback_delay_ms": _ms(t["feedback_delay_s"])}}


def _ms(x):
    return None if x is None else round(x * 1e3, 2)


# -- root glue --------------------------------------------------------------------------------------------
class CpuWatch:
    """Samples machine CPU and the switches' CPU every 0.5 s on a thread (while a trial runs)."""

    def __init__(self, pids):
        import psutil

        self.procs = [psutil.Process(p) for p in pids]
        self.machine: list[float] = []
        self.switch: list[float] = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        import psutil

        psutil.cpu_percent(None)
        for p in self.procs:
            p.cpu_percent(None)
        while not self._stop.wait(0.5):
            self.machine.append(psutil.cpu_percent(None))
            try:
                self.switch.append(max(p.cpu_percent(None) for p in self.procs))
            except psutil.Error:
                pass

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join(timeout=5)

    def summary(self) -> dict:
        return {"machine_mean": statistics.fmean(self.machine) if self.machine else 0.0,
                "switch_max": max(self.switch, default=0.0)}


def _ss() -> str:
    return subprocess.run(["ss", "-0", "-m", "-p", "-H"], capture_output=True, text=True).stdout


#: The endpoints, run in the hosts without loading the whole CLI (imports cost seconds on a busy machine).
SERVER_CODE = "from testbed.rdma.perf import serve; serve(\"0.0.0.0\")"  # inside a replica host
SENDER_CODE = """import json, sys
from testbed.dilation import Dilation
from testbed.rdma.dcqcn import DcqcnParams
from testbed.rdma.perf import run_client
from testbed.rdma.qp import QpConfig
a = json.loads(sys.argv[1])
d = Dilation(a["scale"])
cfg = QpConfig(mtu=a["mtu"], window=a["window"], timeout=d.time(0.05),
               dcqcn=DcqcnParams(line_rate=a["line_rate"]).dilated(d))
print(json.dumps(run_client(a["host"], "write_lat", a["size"], iters=a["iters"], config=cfg, connect_wait=30)))
"""


def _py(code: str, *args) -> list[str]:
    return [sys.executable, "-c", code, *args]


def first_cnp_time(pcap: Path) -> float | None:
    """Wall-clock time of the first CNP in a capture (None when there is none)."""
    from testbed.roce.capture import read_records, roce_of

    try:
        records, _ = read_records(pcap)
        for rec in records:
            pkt = roce_of(rec)
            if pkt is not None and pkt.transport[:1] == b"\x81":
                return rec.ts
    except Exception as exc:  # noqa: BLE001 - a capture cut short by the stop: use what was read
        console.print(f"[yellow]capture {pcap}: {exc}[/yellow]")
    return None


def run_distance(G, distance_km: float, cases, modes, args, res, bench_pps: float) -> list[dict]:
    from testbed.emu.alloc import Allocator
    from testbed.emu.replica import Replica
    from testbed.links.emulation import LinkEmulation
    from testbed.links.model import LinkParams
    from testbed.p4rt import entries as E
    from testbed.p4rt.compile import compile_p4
    from testbed.p4rt.mininet_switch import bmv2_switch_factory
    from testbed.poll import poll
    from testbed.routing.brain import RoutingBrain

    dilation = G.graph["dilation"]
    r = roles(G)
    out = res.dir / f"{distance_km:g}km"
    out.mkdir(parents=True, exist_ok=True)
    links = LinkEmulation(dilation, backend="userspace", out_dir=out)

    def link_node(u, v, attrs):
        # The long haul is propagation delay only: no rate, a queue that never fills.
        if attrs.get("tier") != "dci" or not attrs.get("delay_s"):
            return None
        return links.node_factory(u, v, {"delay_s": attrs["delay_s"], "link": LinkParams(limit=1e6)})

    factory = bmv2_switch_factory(compile_p4(REPO_ROOT / "p4" / "fabric.p4"), Allocator(), log_dir=out,
                                  pcap_dir=out / "pcap" if args.pcap else None, only_p4=False)
    rows = []
    with Replica(G, dilation=dilation, out_dir=out, name=NAME, switch_factory=factory,
                 link_node_factory=link_node, link_shaper=None) as rep:
        switches = [n for n, d in G.nodes(data=True) if d.get("role") != "host"]
        clients = {sw: rep.switch(sw).client() for sw in switches}
        brain = RoutingBrain(G)
        brain.compute_all(0.0)
        tables = brain.tables()
        for sw, c in clients.items():
            prog = E.fabric_program(G, sw, tables.get(sw, {}).values())
            c.apply(prog.entries)
            for session, port in prog.mirrors:
                c.mirroring_add(session, port)
        servers = [rep.popen(h, _py(SERVER_CODE), stdout=open(out / f"server-{h}.log", "w"),  # noqa: SIM115
                             stderr=subprocess.STDOUT) for h in r.receivers]
        long_haul = None
        try:
            long_haul = rep.link_node(*r.dci)
        except KeyError:
            pass
        try:
            for case in cases:
                plan = port_plan(G, case, dilation)
                for mode in modes:
                    console.print(f"[bold]{distance_km:g} km, {case}, {mode}[/bold]")
                    t = trial(rep, G, r, clients, plan, case, mode, dilation, args, out / f"{case}-{mode}",
                              long_haul, poll)
                    rows.append(row(case, distance_km, mode, dilation.scale, t))
                    res.write_json(f"{distance_km:g}km/{case}-{mode}/trial.json", t)
        finally:
            for p in servers:
                p.terminate()
            for c in clients.values():
                c.close()
    return rows


def trial(rep, G, r: Roles, clients, plan, case, mode, dilation, args, out: Path, long_haul, poll) -> dict:
    from testbed.p4rt import entries as E

    out.mkdir(parents=True, exist_ok=True)
    interval = dilation.time(CNP_INTERVAL_S)
    for sw, ports in plan.items():
        c = clients[sw]
        c.table_clear("ecn_config")
        for port, p in ports.items():
            c.set_queue_rate(p.rate_pps, port=port)
            c.set_queue_depth(p.depth_pkts, port=port)
            c.apply(E.ecn_entries(E.EcnConfig(p.kmin_pkts, p.kmax_pkts, pmax=PMAX, mode=mode,
                                              cnp_interval_s=interval), port=port))
        for name in ("marks", "cnps", "drops", "cnp_skipped", "to_port", "from_queue"):
            c.counter_reset(name)
        for name in ("sender_qp", "cnp_last_us", "qdepth_peak", "qdepth_sum", "qdepth_pkts", "first_signal_us"):
            c.register_reset(name)
    bsw, bnbr = bottleneck(case, r)
    bport = G.edges[bsw, bnbr]["ports"][bsw]
    c = clients[bsw]
    epoch = c.time_since_epoch_us() - c.time_elapsed_us()  # BMv2 clock 0, in wall time (us)
    dumps = []
    for s in r.senders:
        intf = rep.intf_name(s, next(iter(G.neighbors(s))))
        err = out / f"tcpdump-{s}.log"
        dumps.append((rep.popen(s, ["tcpdump", "-i", intf, "-U", "-n", "-w", str(out / f"cnp-{s}.pcap"),
                                    "udp dst port 4791 and udp[8] = 0x81"], stdout=subprocess.DEVNULL,
                                stderr=open(err, "w")), err))
    poll(lambda: all("listening on" in e.read_text() for _, e in dumps), timeout=20, what="tcpdump on senders")
    senders = []
    line_rate = max(G.edges[s, next(iter(G.neighbors(s)))]["rate_bps"] for s in r.senders)
    for s, d in zip(r.senders, r.receivers, strict=True):
        argv = _py(SENDER_CODE, json.dumps({"host": G.nodes[d]["ip"], "size": args.size, "iters": args.iters,
                                            "mtu": IB_MTU, "line_rate": line_rate, "scale": dilation.scale,
                                            "window": args.window}))
        senders.append((s, rep.popen(s, argv, stdout=open(out / f"sender-{s}.json", "w"),
                                     stderr=open(out / f"sender-{s}.log", "w"))))
    hosts = r.senders + r.receivers
    overflows_before = {h: udp_rcvbuf_errors(rep.host(h).cmd("cat /proc/net/snmp")) for h in hosts}
    pids = [rep.switch(sw).process.proc.pid for sw in clients]
    sock_drops_before = packet_socket_drops(_ss(), pids)
    started = time.monotonic()
    with CpuWatch(pids) as cpu:
        poll(lambda: all(p.poll() is not None for _, p in senders), timeout=args.trial_timeout, interval=0.2,
             what=f"senders of {case}/{mode}")
    elapsed = time.monotonic() - started
    sock_drops = packet_socket_drops(_ss(), pids) - sock_drops_before
    overflows = sum(udp_rcvbuf_errors(rep.host(h).cmd("cat /proc/net/snmp")) - overflows_before[h] for h in hosts)
    for p, _ in dumps:
        p.terminate()
        p.wait(timeout=10)
    results = []
    for s, p in senders:
        text = (out / f"sender-{s}.json").read_text()
        if p.returncode != 0 or not text.strip():
            raise EmulationError(f"sender {s} failed (status {p.returncode}); see {out / f'sender-{s}.log'}")
        results.append(json.loads(text))
    # write-lat reports half round trips (perftest convention): a message's completion time is twice that
    p50 = statistics.median(2 * x["t_typical_usec"] * 1e-6 for x in results)
    p99 = max(2 * x["t_99_usec"] * 1e-6 for x in results)
    total_bytes = sum(x["bytes"] * x["iterations"] for x in results)
    seconds = max(x["seconds"] for x in results)
    first_signal = c.register_read("first_signal_us", bport)
    crossing = r.senders if case == "sender-dci" else r.senders[:1]  # flows through the bottleneck port
    cnp_times = [t for t in (first_cnp_time(out / f"cnp-{s}.pcap") for s in crossing) if t is not None]
    feedback = None
    if first_signal and cnp_times:
        signal_wall = (epoch + first_signal) * 1e-6
        later = [t - signal_wall for t in cnp_times if t >= signal_wall]
        feedback = min(later) if later else None
    pkts = c.register_read("qdepth_pkts", bport)
    tail = sum(max(0, cl.counter_read("to_port", p).packets - cl.counter_read("from_queue", p).packets)
               for sw, cl in clients.items() for p in plan[sw])
    red_drops = sum(cl.counter_read("drops", E.DROP_REASONS["queue"]).packets for cl in clients.values())
    busiest = max(sum(cl.counter_read("from_queue", p).packets for p in plan[sw]) for sw, cl in clients.items())
    dl_stats = long_haul.stats() if long_haul is not None else None
    naks = sum(x.get("server", {}).get("stats", {}).get("naks_tx", 0) for x in results)
    switch_drops = {sw: {k: cl.counter_read("drops", i).packets for k, i in E.DROP_REASONS.items()}
                    for sw, cl in clients.items()}
    counted = tail + sum(n for d in switch_drops.values() for k, n in d.items() if k != "not_ip")
    sat = saturation(cpu.summary(), dl_stats, busiest / elapsed, args.bench_pps, overflows, sock_drops,
                     max(0, naks - counted))
    return {"goodput_bps": total_bytes * 8 / seconds if seconds else 0.0, "fct_p50_s": p50, "fct_p99_s": p99,
            "queue_peak": c.register_read("qdepth_peak", bport),
            "queue_mean": round(c.register_read("qdepth_sum", bport) / pkts, 1) if pkts else 0.0,
            "feedback_delay_s": feedback, "drops": tail + red_drops,
            "marks": c.counter_read("marks", bport).packets, "switch_cnps": c.counter_read("cnps", bport).packets,
            "cnp_skipped": {k: c.counter_read("cnp_skipped", i).packets for k, i in E.CNP_SKIP_REASONS.items()},
            "cnps_rx": sum(x["cnps_rx"] for x in results),
            "retransmissions": sum(x["retransmissions"] for x in results),
            "bottleneck": {"switch": bsw, "port": bport, "rate_pps": plan[bsw][bport].rate_pps,
                           "kmin_pkts": plan[bsw][bport].kmin_pkts, "kmax_pkts": plan[bsw][bport].kmax_pkts},
            "udp_rcvbuf_errors": overflows, "switch_socket_drops": sock_drops, "receiver_naks": naks,
            "switch_drops": switch_drops, "cpu": cpu.summary(), "elapsed_s": elapsed, "saturation": sat, "senders": results}


# -- output -------------------------------------------------------------------------------------------------
def print_table(rows) -> None:
    from rich.table import Table

    t = Table("case", "km", "mode", "goodput Mb/s", "FCT p50 ms", "FCT p99 ms", "queue peak", "queue mean",
              "feedback ms", "drops", "retx", "CNPs", "sat.", title="long-haul congestion feedback (real-world units)")
    for x in rows:
        t.add_row(x["case"], f"{x['distance_km']:g}", x["mode"], f"{x['throughput_mbps']:.0f}",
                  _fmt(x["fct_p50_ms"]), _fmt(x["fct_p99_ms"]), str(x["queue_peak_pkts"]),
                  f"{x['queue_mean_pkts']:.1f}", _fmt(x["feedback_delay_ms"]), str(x["drops"]),
                  str(x["retransmissions"]), str(x["cnps_at_senders"]), "yes" if x["emulator_saturated"] else "")
    console.print(t)


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
    parser.add_argument("--bench-pps", type=float, default=15000,
                        help="BMv2 forwarding rate on this machine (testbed bench p4), for saturation checks")
    parser.add_argument("--trial-timeout", type=float, default=180, help="seconds a trial may take")
    args = parser.parse_args(argv)
    args.size = int(parse_size(args.size, "--size"))
    if args.size < 1:
        raise SpecError("--size", f"must be at least 1 byte, such as 64KB or 1MB; got {args.size}")
    args.iters = args.iters or (2 if args.quick else 8)
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
              "red_per_25g": {"kmin_bytes": KMIN_BYTES_PER_25G, "kmax_bytes": KMAX_BYTES_PER_25G, "pmax": PMAX}}
    with Results(NAME, args, config) as res:
        require_root(f"testbed run {NAME}")
        rows = []
        for km in distances:
            rows += run_distance(with_distance(G0, km), km, cases, modes, args, res, args.bench_pps)
            res.write_json("rows.json", rows)
        print_table(rows)
        plot(rows, res.path("long_haul_cnp.png"))
        saturated = any(x["emulator_saturated"] for x in rows)
        if saturated:
            console.print("[yellow]the emulator saturated in some trials (column 'sat.'): do not read those "
                          "rows as protocol behaviour[/yellow]")
        keys = ("case", "distance_km", "mode", "throughput_mbps", "fct_p50_ms", "fct_p99_ms", "queue_peak_pkts",
                "feedback_delay_ms", "drops")
        summary = {"rows": [{k: x[k] for k in keys} | {"emulated": x["emulated"],
                                                        "emulator_saturated": x["emulator_saturated"]}
                            for x in rows],
                   "emulator_saturated": saturated, "scale": G0.graph["scale"]}
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
