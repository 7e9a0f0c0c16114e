"""``testbed bench failover SPEC [--json] [--repetitions N] [--quick]``: how long a link cut loses packets.

One replica of SPEC (OVS switches, the fabric controller), then:

    1. controller reroute (x N): a constant-rate UDP stream with sequence numbers between two pods; the
       link on its path from the highest ECMP switch is cut (``ip link set <intf> down``, a cable cut as
       OVS sees it); OVS reports port-status, the controller recomputes and pushes group mods; restore.
       outage = packets lost while cut x sending interval.
    2. fast-failover (x N): the same with groups whose buckets watch their ports, so OVS drops the dead
       bucket locally before the controller hears of it.
    3. ECMP balance: 16 flows between two pods; bytes on each uplink of the source pod from port
       counters; max/mean per tier (the worse tier is reported).

    h(pod 0) --t--a--X--cr--a--t-- h(last pod)          X: the cut link

JSON keys: controller_outage_ms_median, controller_outage_ms_p95, fast_failover_outage_ms_median,
ecmp_max_over_mean, repetitions (+ details). Figures are noisy on a shared 2-core machine: run it alone.
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
from testbed.emu.ops import set_link_state
from testbed.errors import EmulationError, UsageError
from testbed.poll import poll, sleep_until
from testbed.routing.failover import link_event
from testbed.routing.udpprobe import outage
from testbed.topo.graph import HOST, hosts

REPO = Path(__file__).resolve().parent.parent.parent
PROBE = [sys.executable, "-m", "testbed.routing.udpprobe"]


def register(sub) -> None:
    parser = sub.add_parser("failover", help="link-cut outage (controller vs fast-failover) and ECMP balance",
                            description=__doc__, formatter_class=__import__("argparse").RawDescriptionHelpFormatter)
    parser.add_argument("spec", metavar="SPEC", help="fabric spec YAML (e.g. scenarios/specs/fat-tree-k4.yaml)")
    parser.add_argument("--repetitions", type=int, default=20, help="cuts per mode (default 20)")
    parser.add_argument("--quick", action="store_true", help="5 cuts per mode")
    parser.add_argument("--interval", type=float, default=0.0005, help="sending interval, seconds (default 0.5 ms)")
    parser.add_argument("--out", help="folder for logs and raw results (default: a temp folder)")
    parser.add_argument("--json", action="store_true")
    parser.set_defaults(func=_main)


# ------------------------------------------------------------------------------------------ pure
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


def cut_candidate(G, links: list[tuple], routes: list[dict], dst_prefix: str):
    """The link to cut: on the flow's path, leaving the highest-tier switch that has ECMP alternatives."""
    ecmp = {r["switch"] for r in routes if r["prefix"] == dst_prefix and len(r["ports"]) > 1}
    best = [(G.nodes[u].get("tier", 0), u, v) for u, v in links if u in ecmp]
    if not best:
        return None
    _, u, v = max(best)
    return (u, v)


def summarize(controller: list[dict], fast: list[dict], ecmp: dict) -> dict:
    c = [r["outage_ms"] for r in controller]
    f = [r["outage_ms"] for r in fast]
    return {
        "controller_outage_ms_median": float(np.median(c)) if c else None,
        "controller_outage_ms_p95": float(np.percentile(c, 95)) if c else None,
        "fast_failover_outage_ms_median": float(np.median(f)) if f else None,
        "fast_failover_outage_ms_p95": float(np.percentile(f, 95)) if f else None,
        "ecmp_max_over_mean": ecmp.get("max_over_mean"),
        "repetitions": min(len(c), len(f)) if f else len(c),
        "ecmp": ecmp, "controller_runs": controller, "fast_failover_runs": fast,
    }


# ------------------------------------------------------------------------------------------ root glue
class Stream:
    """One probe stream (receiver + sender processes in host namespaces)."""

    def __init__(self, rep, src, dst, port: int, sport: int, interval: float, duration: float, workdir: Path,
                 tag: str):
        self.recv_file = workdir / f"{tag}-recv.json"
        self.send_file = workdir / f"{tag}-send.json"
        kw = {"cwd": str(REPO), "stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE}
        self.recv = rep.popen(dst, PROBE + ["recv", "--port", str(port), "--duration", str(duration + 3),
                                            "--idle", "0.5", "--out", str(self.recv_file)], **kw)
        self.send = rep.popen(src, PROBE + ["send", "--dst", rep.ip(dst), "--port", str(port), "--sport",
                                            str(sport), "--interval", str(interval), "--duration", str(duration),
                                            "--out", str(self.send_file)], **kw)
        self.interval = interval

    def result(self, window=None) -> dict:
        for proc, what in ((self.send, "sender"), (self.recv, "receiver")):
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                raise EmulationError(f"udp probe {what} did not finish") from None
            if proc.returncode != 0:
                err = proc.stderr.read().decode(errors="replace")[-300:] if proc.stderr else ""
                raise EmulationError(f"udp probe {what} failed ({proc.returncode}): {err}")
        sent = json.loads(self.send_file.read_text())
        got = json.loads(self.recv_file.read_text())
        return {"send_times": sent["send_times"], "seqs": got["seqs"], "interval": self.interval,
                "window": window}


def one_cut(rep, ctl, G, src, dst, sport: int, interval: float, workdir: Path, tag: str) -> dict:
    """Stream src -> dst, find its path, cut the ECMP link on it, restore; returns the outage record."""
    duration = 2.0
    stream = Stream(rep, src, dst, 5001, sport, interval, duration, workdir, tag)
    t0 = time.time()
    sleep_until(t0 + 0.6)
    before = ctl.get("/ports", fresh=1)
    sleep_until(t0 + 0.8)
    after = ctl.get("/ports", fresh=1)
    min_bytes = int(0.1 / interval * 100)  # at least half the stream's bytes in 0.2 s
    links = flow_links(G, before, after, min_bytes)
    prefix = f"{rep.ip(dst)}/32"
    cut = cut_candidate(G, links, ctl.get("/routes"), prefix)
    if cut is None:
        stream.result()
        raise EmulationError(f"{tag}: found no ECMP link on the path of {src} -> {dst} (links seen: {links})")
    intfs = [rep.intf_name(cut[0], cut[1])]
    t_cut = time.time()
    set_link_state(intfs, up=False)
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
    o = outage(raw["send_times"], raw["seqs"], interval, window=(t_cut - 0.002, t_restore))
    r = outage(raw["send_times"], raw["seqs"], interval, window=(t_restore, float("inf")))
    return {"src": src, "dst": dst, "sport": sport, "cut": list(cut), **o.as_dict(),
            "restore_lost": r.lost_in_window, "controller_reaction_ms": (ev["time"] - t_cut) * 1e3,
            "controller_push_ms": (ev["pushed"] - ev["time"]) * 1e3 if ev.get("pushed") else None}


def ecmp_balance(rep, ctl, G, interval: float, workdir: Path, n_flows: int = 16) -> dict:
    """``n_flows`` flows from the first pod to the last; bytes per uplink of the first pod, per tier."""
    a, b = pod_pairs(G)
    pairs = [(a[i % len(a)], b[(i // len(a)) % len(b)]) for i in range(n_flows)]
    for s, d in set(pairs):
        rep.host(s).cmd(f"ping -c1 -W1 {rep.ip(d)}")
    before = ctl.get("/ports", fresh=1)
    streams = [Stream(rep, s, d, 6000 + i, 41000 + 7 * i, interval, 2.0, workdir, f"ecmp{i}")
               for i, (s, d) in enumerate(pairs)]
    for st in streams:
        st.result()
    after = ctl.get("/ports", fresh=1)
    pod_switches = {n for h in a for n in G.neighbors(h)}
    pod = G.nodes[a[0]].get("pod")
    pod_switches |= {n for n in G if G.nodes[n].get("pod") == pod and G.nodes[n].get("role") != HOST}
    tiers: dict = {}
    for sw in sorted(pod_switches):
        for port_no, c in after.get(sw, {}).items():
            nbr = c.get("neighbour")
            if nbr is None or G.nodes[nbr].get("role") == HOST:
                continue
            if G.nodes[nbr].get("tier", 0) <= G.nodes[sw].get("tier", 0):
                continue  # only uplinks
            sent = c["tx_bytes"] - before.get(sw, {}).get(port_no, {}).get("tx_bytes", 0)
            tiers.setdefault(f"{G.nodes[sw].get('role')}->{G.nodes[nbr].get('role')}", {})[f"{sw}->{nbr}"] = sent
    per_tier = {t: round(max_over_mean(v.values()), 3) for t, v in tiers.items()}
    return {"flows": n_flows, "uplink_bytes": tiers, "max_over_mean_per_tier": per_tier,
            "max_over_mean": max(per_tier.values()) if per_tier else None}


def run_bench(G, repetitions: int, interval: float, out_dir: Path) -> dict:
    from controllers.launch import start_controller
    from testbed.doctor import plan_capabilities
    from testbed.emu import Replica, RunRegistry
    from testbed.plan import Overrides, plan_replica

    a, b = pod_pairs(G)
    workdir = out_dir / "probe"
    workdir.mkdir(parents=True, exist_ok=True)
    with RunRegistry("bench-failover") as run:
        ctl = start_controller(run, G, out_dir, mode="controller", lldp_interval=0)
        plan = plan_replica(G, plan_capabilities(), Overrides(links="off", static_arp=False))
        with Replica(plan, controller=ctl.address, run=run, out_dir=out_dir, name="bench-failover") as rep:
            ctl.wait_ready()
            src, dst = a[0], b[-1]
            rep.host(src).cmd(f"ping -c2 -W1 {rep.ip(dst)}")
            results: dict = {"controller": [], "fast-failover": []}
            for mode in ("controller", "fast-failover"):
                ctl.post("/mode", m=mode)
                for i in range(repetitions):
                    rec = one_cut(rep, ctl, G, src, dst, 42000 + 13 * i + (0 if mode == "controller" else 5000),
                                  interval, workdir, f"{mode}-{i}")
                    results[mode].append(rec)
                    console.print(f"[dim]{mode} {i + 1}/{repetitions}: cut {'-'.join(rec['cut'])} "
                                  f"lost {rec['lost_in_window']} = {rec['outage_ms']:.1f} ms[/dim]")
            ctl.post("/mode", m="controller")
            ecmp = ecmp_balance(rep, ctl, G, 0.002, workdir)
    return summarize(results["controller"], results["fast-failover"], ecmp)


def _main(args) -> int:
    from testbed.topo.spec import build_graph, load_spec, resolve_spec

    reps = 5 if args.quick else args.repetitions
    if reps < 1:
        raise UsageError("--repetitions must be at least 1")
    if not 0.0001 <= args.interval <= 0.1:
        raise UsageError("--interval must be between 0.0001 and 0.1 seconds")
    G = build_graph(load_spec(resolve_spec(args.spec)))
    pod_pairs(G)  # a fabric without pods is refused before anything is built
    require_root("testbed bench failover")
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="bench-failover-"))
    doc = run_bench(G, reps, args.interval, out)
    doc["spec"] = args.spec
    doc["interval_ms"] = args.interval * 1e3
    (out / "failover.json").write_text(json.dumps(doc, indent=1))
    if args.json:
        print_json(doc)
    else:
        stdout.print(f"controller reroute outage: median {doc['controller_outage_ms_median']:.1f} ms, "
                     f"p95 {doc['controller_outage_ms_p95']:.1f} ms ({reps} cuts)")
        stdout.print(f"fast-failover outage: median {doc['fast_failover_outage_ms_median']:.1f} ms")
        stdout.print(f"ECMP max/mean uplink bytes: {doc['ecmp_max_over_mean']} "
                     f"(per tier {doc['ecmp']['max_over_mean_per_tier']})")
        console.print(f"raw results in {out}")
    return 0
