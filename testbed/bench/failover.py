"""``testbed bench failover SPEC [--json] [--repetitions N] [--quick]``: how long a link cut loses packets.

One replica of SPEC (OVS switches, the fabric controller), then:

    1. controller reroute (x N): a constant-rate UDP stream with sequence numbers between two pods; the
       link on its path from the highest ECMP switch is cut (``ip link set <intf> down``, a cable cut as
       OVS sees it); OVS reports port-status, the controller recomputes and pushes group mods; restore.
       outage = packets lost while cut x sending interval.
    2. fast-failover (x N): the same with groups whose buckets watch their ports, so OVS drops the dead
       bucket locally before the controller hears of it.
    3. switch loss (x N): the same stream; the core switch it crosses crashes (its OVS bridge deleted:
       tables and OpenFlow connection gone, neighbours' ports still up, so no port-status); the
       controller sees the datapath disconnect and routes around it (RoutingBrain.switch_down); then the
       switch restarts empty and rejoins (switch_up). outage = lost while dead x interval; the loss on
       rejoin is reported apart.
    5. gray failure (x N, on a second, small replica: testbed/bench/gray_failover.py): the link a stream
       uses starts losing 10 % of its frames with its carrier up (a userspace link node's loss changed at
       runtime); the controller polls port counters every 0.1 s, declares the link gray and reroutes;
       detection = injection -> the controller's gray-loss decision; reroute = injection -> the stream's
       last lost probe. Goal (issue 18): <= 1 s.
    6. P4 (x N, on a second replica of SPEC with every switch on BMv2 fabric.p4: testbed/bench/p4_failover.py):
       the same stream and cut rule; the BMv2 failover driver sees the port go down (netlink), asks the
       same routing brain and rewrites only the entries that change (Thrift). Printed beside the
       controller figure as a ratio, with detection / compute / table-write times apart.
    4. ECMP balance, for each method (NX multipath; OpenFlow 1.3 select groups) on the same replica:
       16 flows between the hosts of two pods, and 16 flows between one host pair differing only in UDP
       ports (RoCEv2 QPs); bytes on each uplink of the source pod from port counters; max/mean per tier
       (the worse tier is reported).

    h(pod 0) --t--a--X--cr--a--t-- h(last pod)          X: the cut link

JSON keys: controller_outage_ms_median, controller_outage_ms_p95, fast_failover_outage_ms_median/_p95,
switch_loss_outage_ms_median/_p95, ecmp_max_over_mean, gray_detect_ms_median/_p95, gray_reroute_ms_median/_p95,
p4_outage_ms_median/_p95 (+ p4_detect/_repaired), repetitions, load (uptime before and after), (+ details).
Links are not shaped here (scale 1), so emulated and real-world times are the same: every millisecond is
detection and control plane, on the wall clock. Resolution: the sending interval. Figures are noisy on a
shared 2-core machine: the load is printed with them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from testbed.console import console, print_json, require_root
from testbed.console import out as stdout
from testbed.emu.ops import set_link_state, warm_netlink
from testbed.errors import EmulationError, UsageError
from testbed.links.probe import Outage, outage, wait_bound, wait_finished
from testbed.poll import poll, sleep_until
from testbed.routing.failover import link_event, loadavg
from testbed.topo.graph import HOST, hosts

REPO = Path(__file__).resolve().parent.parent.parent
CASES = ("controller", "fast-failover", "switch", "ecmp", "gray", "p4")
#: Issue 18's goal for a gray failure (10 % loss): detected and rerouted within this many ms.
GRAY_GOAL_MS = 1000.0
PROBE = [sys.executable, "-m", "testbed.links.probe"]


def register(sub) -> None:
    parser = sub.add_parser("failover", help="link-cut outage (controller vs fast-failover) and ECMP balance",
                            description=__doc__, formatter_class=__import__("argparse").RawDescriptionHelpFormatter)
    parser.add_argument("spec", metavar="SPEC", help="fabric spec YAML (e.g. scenarios/specs/fat-tree-k4.yaml)")
    parser.add_argument("--repetitions", type=int, default=20, help="cuts per mode (default 20)")
    parser.add_argument("--quick", action="store_true", help="5 cuts per mode")
    parser.add_argument("--interval", type=float, default=0.0005, help="sending interval, seconds (default 0.5 ms)")
    parser.add_argument("--cases", default=",".join(CASES),
                        help=f"comma-separated cases to run (default all: {','.join(CASES)})")
    parser.add_argument("--datapath", choices=("user", "kernel"),
                        help="Open vSwitch datapath of the controller, fast-failover, switch and ecmp cases "
                             "(default: the kernel one where the machine has it, as every replica; `make "
                             "failover-vm` runs both in the test VM)")
    parser.add_argument("--out", help="folder for logs and raw results (default: a temp folder)")
    parser.add_argument("--json", action="store_true")
    parser.set_defaults(func=_main)


# ------------------------------------------------------------------------------------------ pure
def cut_timeline(send_times, o: Outage, t_cut: float, t_cut_done: float) -> dict:
    """Where a cut's outage sits against the cut command (pure): the command's own duration, and the send
    times of the first and last probe of the longest loss run inside the cut (``o``: the :func:`outage` of
    the cut's window), from the command's start. A first loss before the command returned means frames were
    dropping while the kernel was still taking the port down (and before it could tell anyone)."""
    out = {"cut_command_ms": (t_cut_done - t_cut) * 1e3, "first_lost_ms": None, "last_lost_ms": None}
    if o.window_run:
        first, last = o.window_run
        out.update(first_lost_ms=(send_times[first] - t_cut) * 1e3, last_lost_ms=(send_times[last] - t_cut) * 1e3)
    return out


def max_over_mean(values) -> float:
    values = [float(v) for v in values]
    mean = sum(values) / len(values) if values else 0.0
    return max(values) / mean if mean > 0 else float("inf")


def pod_pairs(G, n_flows: int = 16) -> tuple[list, list]:
    """Hosts of the first and last pod (any kind: the first and last first-tier groups by ``pod``)."""
    hs = hosts(G)
    pods = sorted({G.nodes[h].get("pod") for h in hs if G.nodes[h].get("pod") is not None})
    if len(pods) < 2:
        raise UsageError("the failover bench needs a fabric with pods (e.g. a fat-tree spec)")
    a = [h for h in hs if G.nodes[h].get("pod") == pods[0]]
    b = [h for h in hs if G.nodes[h].get("pod") == pods[-1]]
    return a, b


def flow_links(G, before: dict, after: dict, min_bytes: int) -> list[tuple]:
    """Switch-to-switch links ``(u, v)`` whose ``u`` port sent at least ``min_bytes`` between two counter
    snapshots (``/ports`` documents)."""
    out = []
    for sw, ports in after.items():
        for port_no, c in ports.items():
            nbr = c.get("neighbour")
            if nbr is None or G.nodes[nbr].get("role") == HOST:
                continue
            prev = before.get(sw, {}).get(port_no, {}).get("tx_bytes", 0)
            if c["tx_bytes"] - prev >= min_bytes:
                out.append((sw, nbr))
    return out


def path_cut(rep, G, links: list[tuple], routes: list[dict], stream, src, dst, tag: str) -> tuple:
    """:func:`cut_candidate` towards ``dst``; none (the stream is ended first) is an :class:`EmulationError`."""
    cut = cut_candidate(G, links, routes, f"{rep.ip(dst)}/32")
    if cut is None:
        stream.result()
        raise EmulationError(f"{tag}: found no ECMP link on the path of {src} -> {dst} (links seen: {links})")
    return cut


def cut_candidate(G, links: list[tuple], routes: list[dict], dst_prefix: str):
    """The link to cut: on the flow's path, leaving the highest-tier switch that has ECMP alternatives."""
    ecmp = {r["switch"] for r in routes if r["prefix"] == dst_prefix and len(r["ports"]) > 1}
    best = [(G.nodes[u].get("tier", 0), u, v) for u, v in links if u in ecmp]
    if not best:
        return None
    _, u, v = max(best)
    return (u, v)


def _median(xs):
    return float(np.median(xs)) if xs else None


def _p95(xs):
    return float(np.percentile(xs, 95)) if xs else None


def parse_cases(text: str) -> tuple[str, ...]:
    """The ``--cases`` list, in the bench's order (pure)."""
    asked = [c.strip() for c in text.split(",") if c.strip()]
    bad = [c for c in asked if c not in CASES]
    if bad or not asked:
        raise UsageError(f"--cases: unknown case {', '.join(bad) or '(none)'}; allowed: {', '.join(CASES)}")
    return tuple(c for c in CASES if c in asked)


def summarize_gray(runs: list[dict]) -> dict:
    """Gray-failure figures over the valid trials (each run carries ``problems``; pure)."""
    ok = [r for r in runs if not r["problems"]]
    d = [r["detect_ms"] for r in ok]
    rr = [max(r["last_loss_ms"], r["pushed_ms"]) for r in ok]
    worst = max(_p95(d) or 0.0, _p95(rr) or 0.0) if ok else None
    return {"gray_detect_ms_median": _median(d), "gray_detect_ms_p95": _p95(d),
            "gray_reroute_ms_median": _median(rr), "gray_reroute_ms_p95": _p95(rr),
            "gray_trials": len(runs), "gray_valid": len(ok),
            "gray_goal_ms": GRAY_GOAL_MS, "gray_goal_met": (worst is not None and worst <= GRAY_GOAL_MS
                                                           and len(ok) == len(runs)),
            "gray_runs": runs}


def summarize_p4(runs: list[dict]) -> dict:
    """BMv2 failover figures (pure): outage, detection and repair (the last table write) after the cut, over
    the valid trials (a trial whose stream sent nothing into the break carries ``problems``)."""
    ok = [r for r in runs if not r.get("problems")]

    def col(key):
        return [r[key] for r in ok]
    return {"p4_trials": len(runs), "p4_valid": len(ok),"p4_outage_ms_median": _median(col("outage_ms")), "p4_outage_ms_p95": _p95(col("outage_ms")),
            "p4_detect_ms_median": _median(col("detect_ms")), "p4_detect_ms_p95": _p95(col("detect_ms")),
            "p4_repaired_ms_median": _median(col("repaired_ms")), "p4_repaired_ms_p95": _p95(col("repaired_ms")),
            "p4_table_ops_median": _median(col("table_ops")), "p4_errors": sum(len(r["errors"]) for r in runs),
            "p4_runs": runs}


def summarize(controller: list[dict], fast: list[dict], ecmp: dict, switch: list[dict] | None = None,
              gray: list[dict] | None = None, p4: list[dict] | None = None) -> dict:
    c = [r["outage_ms"] for r in controller]
    f = [r["outage_ms"] for r in fast]
    w = [r["outage_ms"] for r in switch or []]
    return {
        "controller_outage_ms_median": _median(c),
        "controller_outage_ms_p95": _p95(c),
        "fast_failover_outage_ms_median": _median(f),
        "fast_failover_outage_ms_p95": _p95(f),
        "switch_loss_outage_ms_median": _median(w),
        "switch_loss_outage_ms_p95": _p95(w),
        "switch_loss_rejoin_lost_max": max((r["rejoin_lost"] for r in switch or []), default=None),
        "fast_failover_port_status_ms_median": _median([r["controller_reaction_ms"] for r in fast]),
        "fast_failover_cut_command_ms_median": _median([r["cut_command_ms"] for r in fast if "cut_command_ms" in r]),
        "ecmp_max_over_mean": {m: {k: v["max_over_mean"] for k, v in kinds.items()} for m, kinds in ecmp.items()},
        "repetitions": min(len(c), len(f)) if f else len(c),
        "ecmp": ecmp, "controller_runs": controller, "fast_failover_runs": fast, "switch_loss_runs": switch or [],
        **summarize_gray(gray or []),
        **summarize_p4(p4 or []),
    }


# ------------------------------------------------------------------------------------------ root glue
class Stream:
    """One probe stream (receiver + sender processes in host namespaces).

    The receiver stops after ``idle`` seconds of silence, so ``idle`` must outlast any outage the stream
    is there to measure: a receiver that quit during an outage counts the rest of the stream as lost.
    The sender starts only once the receiver's socket is bound: before that, every probe is lost at the
    destination, and a cut made while a slow-starting receiver (hundreds of ms on a loaded machine) was not
    yet listening counted those losses as its outage (a 185 ms "fast-failover outage" whose first 571
    probes, from the stream's first, never had a socket to reach).
    """

    def __init__(self, rep, src, dst, port: int, sport: int, interval: float, duration: float, workdir: Path,
                 tag: str, idle: float = 3.0):
        self.recv_file = workdir / f"{tag}-recv.json"
        self.send_file = workdir / f"{tag}-send.json"
        ready = workdir / f"{tag}-recv.ready"
        ready.unlink(missing_ok=True)
        kw = {"cwd": str(REPO), "stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE}
        self.recv = rep.popen(dst, PROBE + ["recv", "--port", str(port), "--timeout", str(duration + 3),
                                            "--idle", str(idle), "--ready", str(ready), "--out", str(self.recv_file)],
                              **kw)
        try:
            wait_bound({ready: (self.recv, f"udp probe receiver on {dst}")})
        except BaseException:
            if self.recv.poll() is None:
                self.recv.kill()
                self.recv.wait()
            raise
        self.send = rep.popen(src, PROBE + ["send", "--dst", rep.ip(dst), "--port", str(port), "--sport",
                                            str(sport), "--interval", str(interval), "--duration", str(duration),
                                            "--size", "200", "--out", str(self.send_file)], **kw)
        self.interval = interval

    def result(self, window=None) -> dict:
        for proc, what in ((self.send, "udp probe sender"), (self.recv, "udp probe receiver")):
            wait_finished(proc, what, 30)
        sent = json.loads(self.send_file.read_text())
        got = json.loads(self.recv_file.read_text())
        return {"send_times": sent["send_times"], "seq": got["seq"], "interval": self.interval,
                "window": window}


def stream_links(ctl, G, interval: float, timeout: float = 5.0) -> list[tuple]:
    """Links the stream crosses, once port counters show it up to a core (a busy machine starts the
    sender late, and counters climb hop by hop); [] if it never shows within ``timeout``."""
    before = ctl.get("/ports", fresh=1)
    min_bytes = int(0.1 / interval * 100)  # about half of what the stream sends in 0.2 s

    def seen():
        links = flow_links(G, before, ctl.get("/ports", fresh=1), min_bytes)
        return links if any(G.nodes[v].get("role") == "core" for _, v in links) else None
    try:
        return poll(seen, timeout=timeout, interval=0.1, what="the stream on an agg -> core link")
    except TimeoutError:
        return []


def one_cut(rep, ctl, G, src, dst, sport: int, interval: float, workdir: Path, tag: str) -> dict:
    """Stream src -> dst, find its path, cut the ECMP link on it, restore; returns the outage record."""
    duration = 4.0
    stream = Stream(rep, src, dst, 5001, sport, interval, duration, workdir, tag)
    links = stream_links(ctl, G, interval)
    cut = path_cut(rep, G, links, ctl.get("/routes"), stream, src, dst, tag)
    intfs = [rep.intf_name(cut[0], cut[1])]
    t_cut = time.time()
    set_link_state(intfs, up=False)
    t_cut_done = time.time()
    try:
        ev = poll(lambda: link_event(ctl, "link_down", cut, t_cut - 0.01), timeout=10, interval=0.02,
                  what=f"controller to see {cut[0]}-{cut[1]} down")
        sleep_until(max(t_cut + 0.4, time.time()))
    finally:
        t_restore = time.time()
        set_link_state(intfs, up=True)
    poll(lambda: link_event(ctl, "link_up", cut, t_restore - 0.01), timeout=10, interval=0.02,
         what=f"controller to see {cut[0]}-{cut[1]} up")
    raw = stream.result()
    o = outage(raw["send_times"], raw["seq"], interval, window=(t_cut - 0.002, t_restore))
    r = outage(raw["send_times"], raw["seq"], interval, window=(t_restore, float("inf")))
    return {"src": src, "dst": dst, "sport": sport, "cut": list(cut), **o.as_dict(),
            "restore_lost": r.lost_in_window, "controller_reaction_ms": (ev["time"] - t_cut) * 1e3,
            **cut_timeline(raw["send_times"], o, t_cut, t_cut_done),
            "controller_push_ms": (ev["pushed"] - ev["time"]) * 1e3 if ev.get("pushed") else None}


def one_switch_loss(rep, ctl, G, src, dst, sport: int, interval: float, workdir: Path, tag: str) -> dict:
    """Stream src -> dst, crash the core switch on its path, restart it; returns the outage record."""
    from testbed.emu.switchlife import crash_switch, restart_switch
    from testbed.routing.failover import switch_event

    duration = 5.0
    stream = Stream(rep, src, dst, 5001, sport, interval, duration, workdir, tag)
    links = stream_links(ctl, G, interval)
    cores = sorted({v for _, v in links if G.nodes[v].get("role") == "core"})
    if not cores:
        stream.result()
        raise EmulationError(f"{tag}: the stream {src} -> {dst} crosses no core switch (links seen: {links})")
    core = cores[0]
    t_kill = time.time()
    crash_switch(rep, core)
    try:
        ev = poll(lambda: switch_event(ctl, "switch_down", core, t_kill - 0.01), timeout=10, interval=0.02,
                  what=f"controller to route around {core}")
        sleep_until(max(t_kill + 0.5, time.time()))
    finally:
        t_restart = time.time()
        restart_switch(rep, core)
    up = poll(lambda: switch_event(ctl, "switch_up", core, t_restart - 0.01), timeout=20, interval=0.02,
              what=f"{core} to rejoin")
    raw = stream.result()
    o = outage(raw["send_times"], raw["seq"], interval, window=(t_kill - 0.002, t_restart))
    r = outage(raw["send_times"], raw["seq"], interval, window=(t_restart, float("inf")))
    return {"src": src, "dst": dst, "sport": sport, "switch": core, **o.as_dict(), "rejoin_lost": r.lost_in_window,
            "controller_reaction_ms": (ev["time"] - t_kill) * 1e3,
            "controller_push_ms": (ev["pushed"] - ev["time"]) * 1e3 if ev.get("pushed") else None,
            "rejoin_ms": (up["time"] - t_restart) * 1e3}


def uplink_balance(G, src_hosts, before: dict, after: dict) -> dict:
    """Bytes each uplink of the sources' pod sent between two ``/ports`` snapshots, max/mean per tier.

    Only switches that sent something upwards count (a ToR without sources is not an imbalance).
    """
    pod = G.nodes[src_hosts[0]].get("pod")
    pod_switches = {n for h in src_hosts for n in G.neighbors(h)}
    pod_switches |= {n for n in G if G.nodes[n].get("pod") == pod and G.nodes[n].get("role") != HOST}
    tiers: dict = {}
    for sw in sorted(pod_switches):
        ups = {}
        for port_no, c in after.get(sw, {}).items():
            nbr = c.get("neighbour")
            if nbr is None or G.nodes[nbr].get("role") == HOST:
                continue
            if G.nodes[nbr].get("tier", 0) <= G.nodes[sw].get("tier", 0):
                continue  # only uplinks
            ups[f"{sw}->{nbr}"] = c["tx_bytes"] - before.get(sw, {}).get(port_no, {}).get("tx_bytes", 0)
        if sum(ups.values()) > 0:
            role = G.nodes[sw].get("role")
            up_role = G.nodes[next(iter(ups)).split("->")[1]].get("role")
            tiers.setdefault(f"{role}->{up_role}", {}).update(ups)
    per_tier = {t: round(max_over_mean(v.values()), 3) for t, v in tiers.items()}
    return {"uplink_bytes": tiers, "max_over_mean_per_tier": per_tier,
            "max_over_mean": max(per_tier.values()) if per_tier else None}


def ecmp_balance(rep, ctl, G, interval: float, workdir: Path, pairs: list, tag: str) -> dict:
    """One flow per entry of ``pairs`` (distinct UDP ports), all at once; uplink balance of the sources' pod."""
    for s, d in set(pairs):
        rep.host(s).cmd(f"ping -c1 -W1 {rep.ip(d)}")
    before = ctl.get("/ports", fresh=1)
    streams = [Stream(rep, s, d, 6000 + i, 41000 + 7 * i, interval, 2.0, workdir, f"{tag}{i}")
               for i, (s, d) in enumerate(pairs)]
    for st in streams:
        st.result()
    after = ctl.get("/ports", fresh=1)
    return {"flows": len(pairs), **uplink_balance(G, sorted({s for s, _ in pairs}), before, after)}


def ecmp_pairs(G, n_flows: int = 16) -> dict:
    """``pods``: flows between many host pairs of the first and last pod; ``one_pair``: all between one
    pair, differing only in UDP ports (how RoCEv2 QPs between two GPUs look)."""
    a, b = pod_pairs(G)
    return {"pods": [(a[i % len(a)], b[(i // len(a)) % len(b)]) for i in range(n_flows)],
            "one_pair": [(a[0], b[-1])] * n_flows}


def run_bench(G, repetitions: int, interval: float, out_dir: Path, cases: tuple = CASES,
              datapath: str | None = None) -> dict:
    from controllers.launch import start_controller
    from controllers.ofrules import ECMP_METHODS
    from testbed.doctor import plan_capabilities
    from testbed.emu import Replica, RunRegistry
    from testbed.plan import Overrides, plan_replica

    a, b = pod_pairs(G)
    workdir = out_dir / "probe"
    workdir.mkdir(parents=True, exist_ok=True)
    results: dict = {"controller": [], "fast-failover": []}
    used: list = []
    switch: list = []
    ecmp: dict = {}
    if set(cases) & {"controller", "fast-failover", "switch", "ecmp"}:
        with RunRegistry("bench-failover") as run:
            ctl = start_controller(run, G, out_dir, mode="controller", lldp_interval=0)
            plan = plan_replica(G, plan_capabilities(), Overrides(links="off", static_arp=False, datapath=datapath))
            used = sorted({sw.datapath for sw in plan.switches if sw.kind == "ovs"})
            with Replica(plan, controller=ctl.address, run=run, out_dir=out_dir, name="bench-failover") as rep:
                ctl.wait_ready()
                warm_netlink()   # not inside the first cut's timing
                src, dst = a[0], b[-1]
                rep.host(src).cmd(f"ping -c2 -W1 {rep.ip(dst)}")
                for mode in ("controller", "fast-failover"):
                    if mode not in cases:
                        continue
                    ctl.post("/mode", m=mode)
                    for i in range(repetitions):
                        rec = one_cut(rep, ctl, G, src, dst, 42000 + 13 * i + (0 if mode == "controller" else 5000),
                                      interval, workdir, f"{mode}-{i}")
                        results[mode].append(rec)
                        console.print(f"[dim]{mode} {i + 1}/{repetitions}: cut {'-'.join(rec['cut'])} "
                                      f"lost {rec['lost_in_window']} = {rec['outage_ms']:.1f} ms[/dim]")
                ctl.post("/mode", m="controller")
                for i in range(repetitions if "switch" in cases else 0):
                    rec = one_switch_loss(rep, ctl, G, src, dst, 52000 + 13 * i, interval, workdir, f"switch-{i}")
                    switch.append(rec)
                    console.print(f"[dim]switch loss {i + 1}/{repetitions}: crash {rec['switch']} lost "
                                  f"{rec['lost_in_window']} = {rec['outage_ms']:.1f} ms, rejoin lost "
                                  f"{rec['rejoin_lost']}[/dim]")
                for method in ECMP_METHODS if "ecmp" in cases else ():
                    ctl.post("/ecmp", m=method)
                    ecmp[method] = {kind: ecmp_balance(rep, ctl, G, 0.002, workdir, pairs, f"ecmp-{method}-{kind}-")
                                    for kind, pairs in ecmp_pairs(G).items()}
                ctl.post("/ecmp", m="multipath")
    gray = run_gray(repetitions, out_dir / "gray") if "gray" in cases else []
    p4 = []
    if "p4" in cases:
        from testbed.bench.p4_failover import run_p4

        p4 = run_p4(G, repetitions, interval, out_dir / "p4", a[0], b[-1],
                    log=lambda line: console.print(f"[dim]{line}[/dim]"))
    doc = summarize(results["controller"], results["fast-failover"], ecmp, switch, gray, p4)
    if used:
        doc["ovs_datapath"] = used[0] if len(used) == 1 else used
    return doc


def run_gray(repetitions: int, out_dir: Path) -> list[dict]:
    """The gray-failure trials on their own small replica (:mod:`testbed.bench.gray_failover`)."""
    from testbed.bench.gray_failover import check_record, gray_fabric, one_gray
    from testbed.routing.gray import GrayPolicy

    out_dir.mkdir(parents=True, exist_ok=True)
    runs = []
    with gray_fabric(out_dir, "bench-gray") as (G, src, dst, ctl, rep):
        for i in range(repetitions):
            rec = one_gray(rep, ctl, G, src, dst, 47000 + 13 * i, out_dir, f"gray-{i}", loss=0.1)
            rec["problems"] = check_record(rec)
            runs.append(rec)
            console.print(f"[dim]gray {i + 1}/{repetitions}: {'-'.join(rec['link'])} 10% loss declared after "
                          f"{rec['detect_ms']:.0f} ms, flow's last loss at {rec['last_loss_ms']:.0f} ms"
                          + (f" INVALID: {'; '.join(rec['problems'])}" if rec["problems"] else "") + "[/dim]")
            # let the released link's probation (route-flap damping) run out: the next trial is a first failure
            policy = GrayPolicy.for_interval(rec["gray_interval_s"])
            sleep_until(time.time() + max(0.0, policy.probation_s - rec["released_ms_after_clear"] / 1e3 + 0.2))
    return runs


def _ms(x) -> str:
    return "-" if x is None else f"{x:.1f} ms"


def report_lines(doc: dict, reps: int) -> list[str]:
    """The bench's figures as text lines, one per case that ran (pure)."""
    lines = [f"Open vSwitch datapath: {doc['ovs_datapath']}"] if doc.get("ovs_datapath") else []
    if doc["controller_runs"]:
        lines.append(f"controller reroute outage: median {_ms(doc['controller_outage_ms_median'])}, "
                     f"p95 {_ms(doc['controller_outage_ms_p95'])} ({reps} cuts)")
    if doc["fast_failover_runs"]:
        lines.append(f"fast-failover outage: median {_ms(doc['fast_failover_outage_ms_median'])}, "
                     f"p95 {_ms(doc['fast_failover_outage_ms_p95'])}; Open vSwitch's port status reached the "
                     f"controller a median {_ms(doc['fast_failover_port_status_ms_median'])} after the cut began "
                     f"(the cut command took {_ms(doc['fast_failover_cut_command_ms_median'])}): the group's "
                     "bucket waits for that same notice (docs/sdn.md)")
    if doc["switch_loss_runs"]:
        lines.append(f"switch loss outage: median {_ms(doc['switch_loss_outage_ms_median'])}, "
                     f"p95 {_ms(doc['switch_loss_outage_ms_p95'])}; packets lost on rejoin at most "
                     f"{doc['switch_loss_rejoin_lost_max']}")
    for method, kinds in doc["ecmp"].items():
        lines.append(f"ECMP {method}: max/mean uplink bytes over 16 flows: "
                     + "; ".join(f"{k} {v['max_over_mean']} (per tier {v['max_over_mean_per_tier']})"
                                 for k, v in kinds.items()))
    if doc["gray_runs"]:
        r0 = doc["gray_runs"][0]
        lines.append(f"gray failure (10% loss, carrier up; counters polled every {r0['gray_interval_s'] * 1e3:g} ms, "
                     f"window {r0['window_s'] * 1e3:.0f} ms, policy bound {r0['bound_ms']:.0f} ms, resolution "
                     f"{r0['interval_s'] * 1e3:g} ms): detected median "
                     f"{_ms(doc['gray_detect_ms_median'])}, p95 {_ms(doc['gray_detect_ms_p95'])}; rerouted (the "
                     f"flow's last loss) median {_ms(doc['gray_reroute_ms_median'])}, p95 "
                     f"{_ms(doc['gray_reroute_ms_p95'])}; {doc['gray_valid']}/{doc['gray_trials']} trials valid; "
                     f"goal <= {doc['gray_goal_ms']:.0f} ms: {'met' if doc['gray_goal_met'] else 'NOT met'} "
                     "(scale 1: emulated = real-world; all of it is counter polling and control, on the wall clock)")
    if doc["p4_runs"]:
        ratio = ""
        if doc["controller_runs"] and doc["controller_outage_ms_median"]:
            ratio = (f"; {doc['p4_outage_ms_median'] / doc['controller_outage_ms_median']:.2f} x the OVS "
                     f"controller's median ({_ms(doc['controller_outage_ms_median'])}, same run)")
        lines.append(f"P4 (BMv2 fabric.p4, netlink + incremental tables) outage: median "
                     f"{_ms(doc['p4_outage_ms_median'])}, p95 {_ms(doc['p4_outage_ms_p95'])} "
                     f"({doc['p4_valid']}/{doc['p4_trials']} cuts valid){ratio}; port seen down median {_ms(doc['p4_detect_ms_median'])} "
                     f"(p95 {_ms(doc['p4_detect_ms_p95'])}), tables repaired median {_ms(doc['p4_repaired_ms_median'])} "
                     f"(p95 {_ms(doc['p4_repaired_ms_p95'])}) after the cut, {doc['p4_table_ops_median']:g} table ops "
                     f"per cut (median), {doc['p4_errors']} write errors")
    return lines


def _main(args) -> int:
    from testbed.topo.spec import build_graph, load_spec, resolve_spec

    reps = 5 if args.quick else args.repetitions
    if reps < 1:
        raise UsageError("--repetitions must be at least 1")
    if not 0.0001 <= args.interval <= 0.1:
        raise UsageError("--interval must be between 0.0001 and 0.1 seconds")
    cases = parse_cases(args.cases)
    G = build_graph(load_spec(resolve_spec(args.spec)))
    pod_pairs(G)  # a fabric without pods is refused before anything is built
    require_root("testbed bench failover")
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="bench-failover-"))
    load_before = loadavg()
    doc = run_bench(G, reps, args.interval, out, cases, datapath=args.datapath)
    doc["load"] = {"before": load_before, "after": loadavg()}
    doc["spec"] = args.spec
    doc["interval_ms"] = args.interval * 1e3
    (out / "failover.json").write_text(json.dumps(doc, indent=1))
    if args.json:
        print_json(doc)
    else:
        if set(cases) - {"gray"}:
            stdout.print(f"scale 1 (links not shaped): emulated = real-world time; resolution {args.interval * 1e3:g} ms")
        for line in report_lines(doc, reps):
            stdout.print(line)
        stdout.print(f"load: before {doc['load']['before']}; after {doc['load']['after']}")
        console.print(f"raw results in {out}")
    return 0
