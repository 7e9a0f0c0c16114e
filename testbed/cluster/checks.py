"""What a partitioned replica is checked for once up (the verdicts are pure; running them uses a Cluster).

* ``pingall``: every host pings every other host once (each source loops over all destinations; all
  sources at once). Every lost pair is listed, and whether it crosses machines.
* ``failover_cut``: a cut link the traffic uses is failed through the controller (both tunnel ports
  down, on two machines); the paths must leave it and pings across must not be lost; then restored.
* ``iperf_cut``: TCP from the first host of worker 0 to the first host of the last worker (any path
  between two parts crosses the cut), compared with the path's bottleneck rate as emulated. A TCP
  stream's goodput is below the wire rate by its headers (1448 B of payload per 1514 B frame at MTU
  1500), so the verdict compares the goodput with ``rate x payload/frame`` and passes within ``tolerance``;
  above ``rate`` is never valid (the shaper would be leaking).
"""

from __future__ import annotations

import json
import time

import networkx as nx

from testbed.topo.graph import HOST

TCP_IP_HEADERS = 52     # IPv4 20 + TCP 20 + timestamps 12
ETHERNET = 14


def ping_script(ips) -> list[str]:
    loop = " ".join(ips)
    return ["sh", "-c", f"for ip in {loop}; do if ping -c1 -W 5 -q $ip >/dev/null 2>&1; then echo ok $ip; "
                        f"else echo lost $ip; fi; done"]


def pingall(cluster, timeout: float = 300.0) -> dict:
    hosts = [h for h in cluster.plan.layout.hosts]
    jobs = [(h.node, ping_script([o.ip for o in hosts if o is not h])) for h in hosts]
    results = cluster.exec_many(jobs, timeout=timeout)
    by_ip = {h.ip: h for h in hosts}
    lost = []
    pairs = 0
    for h, (_rc, out) in zip(hosts, results, strict=True):
        seen = set()
        for line in out.splitlines():
            word, _, ip = line.partition(" ")
            if word in ("ok", "lost") and ip in by_ip:
                seen.add(ip)
                pairs += 1
                if word == "lost":
                    lost.append(_pair(cluster, h, by_ip[ip]))
        for o in hosts:   # a destination the loop never reported (the command died) is lost too
            if o is not h and o.ip not in seen:
                lost.append(_pair(cluster, h, o, "not tried: " + (out.strip().splitlines() or ["no output"])[-1]))
    return {"pairs": len(hosts) * (len(hosts) - 1), "answered": pairs - len([x for x in lost if "why" not in x]),
            "lost": lost, "passed": not lost}


def _pair(cluster, a, b, why: str | None = None) -> dict:
    doc = {"src": a.name, "dst": b.name,
           "crosses_cut": cluster.partition.assign[a.node] != cluster.partition.assign[b.node]}
    if why:
        doc["why"] = why
    return doc


def bottleneck_bps(plan, src, dst) -> float:
    """The smallest emulated rate on a shortest path src -> dst (ECMP paths of a fat-tree are alike)."""
    path = nx.shortest_path(plan.graph, src, dst)
    rates = [plan.link(u, v).emulated.rate_bps for u, v in zip(path, path[1:], strict=False)]
    return min(r for r in rates if r)


def iperf_pair(cluster):
    part = cluster.partition
    hosts = [h for h in cluster.plan.layout.hosts]
    src = next(h for h in hosts if part.assign[h.node] == 0)
    dst = next(h for h in hosts if part.assign[h.node] == part.n - 1)
    return src, dst


def iperf_verdict(received_bps: float, rate_bps: float, mtu: int, tolerance: float) -> dict:
    frame = mtu + ETHERNET
    expected = rate_bps * (mtu - TCP_IP_HEADERS) / frame
    ratio = received_bps / expected if expected else 0.0
    return {"received_bps": received_bps, "rate_bps": rate_bps, "expected_goodput_bps": expected,
            "ratio": round(ratio, 4), "tolerance": tolerance,
            "passed": abs(ratio - 1) <= tolerance and received_bps <= rate_bps}


def iperf_cut(cluster, seconds: float = 10.0, tolerance: float = 0.10) -> dict:
    src, dst = iperf_pair(cluster)
    if cluster.partition.assign[src.node] == cluster.partition.assign[dst.node]:
        return {"passed": False, "why": "one worker: no cut to measure"}
    rate = bottleneck_bps(cluster.plan, src.node, dst.node)
    server = ["iperf3", "-s", "-1", "-p", "5201"]
    # The client retries until the server listens (bounded: 100 tries), the server exits after one test. A
    # try counts only with a report: iperf 3.12 with -J can exit 0 on "Connection refused" (a CI run, 5 Dec)
    out = f"/tmp/iperf-{src.name}.json"
    client = ["sh", "-c", f"for i in $(seq 100); do iperf3 -c {dst.ip} -p 5201 -t {seconds:g} -J > {out} 2>&1; "
                          f"grep -q sum_received {out} && cat {out} && exit 0; sleep 0.2; done; cat {out}; exit 1"]
    (rc_s, out_s), (rc_c, out_c) = cluster.exec_many([(dst.node, server), (src.node, client)],
                                                     timeout=seconds + 120)
    doc = {"src": src.name, "dst": dst.name, "seconds": seconds, "client_rc": rc_c, "server_rc": rc_s}
    try:
        report = json.loads(out_c[out_c.index("{"):])
        received = float(report["end"]["sum_received"]["bits_per_second"])
    except (ValueError, KeyError, TypeError):
        return {**doc, "passed": False, "why": f"no iperf3 report: {out_c.strip()[-300:]}"}
    return {**doc, **iperf_verdict(received, rate, cluster.plan.mtu, tolerance),
            "retransmits": report["end"].get("sum_sent", {}).get("retransmits")}


def hosts_of(G) -> list:
    return [n for n, d in G.nodes(data=True) if d.get("role") == HOST]


def ping_loss(output: str) -> float | None:
    """Packet loss in percent from ping's summary line (None when there is none)."""
    import re

    m = re.search(r"([0-9.]+)% packet loss", output)
    return float(m.group(1)) if m else None


def cut_edge_on_paths(paths, part) -> tuple | None:
    """The first link of ``paths`` (lists of node names) whose ends are on two workers."""
    by_name = {str(n): w for n, w in part.assign.items()}
    for path in paths:
        for u, v in zip(path, path[1:], strict=False):
            if by_name.get(str(u)) is not None and by_name.get(str(v)) is not None and by_name[str(u)] != by_name[str(v)]:
                return str(u), str(v)
    return None


def failover_cut(cluster, pings: int = 20, timeout: float = 60.0) -> dict:
    """Fail a cut link the traffic h(w0) -> h(last) uses now (the controller sets both tunnel ports down,
    each on its own worker), wait until the controller's paths avoid it, ping across, restore it.

    Passes when the paths left the failed link and no ping was lost after the reroute."""
    from testbed.poll import poll

    if cluster.ctl is None:
        return {"passed": False, "why": "no fabric controller of our own (dry run or a foreign controller)"}
    src, dst = iperf_pair(cluster)
    before = cluster.ctl.get("/paths", src=src.name, dst=dst.name)
    edge = cut_edge_on_paths(before["paths"], cluster.partition)
    if edge is None:
        return {"passed": False, "why": f"no path {src.name} -> {dst.name} crosses the cut: {before['paths']}"}
    cluster.ctl.post("/fail/link", a=edge[0], b=edge[1])
    doc = {"src": src.name, "dst": dst.name, "failed": list(edge), "paths_before": before["paths"]}
    try:
        def rerouted():
            now = cluster.ctl.get("/paths", src=src.name, dst=dst.name)
            uses = any(_adjacent(p, edge) for p in now["paths"])
            return now if now["ok"] and now["paths"] and not uses else None

        t0 = time.monotonic()
        after = poll(rerouted, timeout=timeout, interval=0.2, what=f"paths {src.name} -> {dst.name} to avoid "
                                                                   f"{edge[0]}--{edge[1]}")
        doc["reroute_s"] = round(time.monotonic() - t0, 2)
        doc["paths_after"] = after["paths"]
        rc, out = cluster.exec(src.node, ["ping", "-c", str(pings), "-i", "0.2", "-W", "5", dst.ip],
                               timeout=pings + 60)
        doc["ping_loss_pct"] = ping_loss(out)
        doc["passed"] = rc == 0 and doc["ping_loss_pct"] == 0.0
    except TimeoutError as exc:
        doc.update(passed=False, why=str(exc))
    finally:
        cluster.ctl.post("/restore/link", a=edge[0], b=edge[1])
    return doc


def _adjacent(path, edge) -> bool:
    names = [str(n) for n in path]
    return any({a, b} == set(edge) for a, b in zip(names, names[1:], strict=False))


# ---------------------------------------------------------------------------------------------- UDP load
#: UDP payload of the load flows: small datagrams, so the figure is packets, not bytes.
UDP_PAYLOAD = 64
UDP_PORT = 5301


def load_pairs(G, imbalance: float, flows: int) -> list[tuple]:
    """``flows`` disjoint (src, dst) host pairs across the fabric's 2-way partition, alternating direction.

    The pairs depend on the fabric only, never on how many workers run it: one worker and two workers
    carry the same traffic, and with two workers (the same partition) every flow crosses the cut.

    Raises:
        SpecError: more flows than hosts on the smaller side.
    """
    from testbed.cluster.partition import partition
    from testbed.errors import SpecError

    part = partition(G, 2, imbalance)
    sides = [[h for h in hosts_of(G) if part.assign[h] == w] for w in (0, 1)]
    most = min(len(s) for s in sides)
    if not 1 <= flows <= most:
        raise SpecError("--udp-flows", f"expected 1..{most} (hosts on the smaller side of the fabric's 2-way "
                                       f"cut), got {flows}")
    return [(sides[0][i], sides[1][i]) if i % 2 == 0 else (sides[1][i], sides[0][i]) for i in range(flows)]


def check_udp_load(G, imbalance: float, flows: int, kpps: float) -> None:
    """``--udp-flows`` / ``--udp-kpps`` checked before anything is built or booted (one line naming the flag)."""
    from testbed.errors import SpecError

    if not 0 < kpps <= 1000:
        raise SpecError("--udp-kpps", f"expected 0 < K <= 1000 kpps per flow, got {kpps:g}")
    load_pairs(G, imbalance, flows)


def cpu_busy(output: str) -> float | None:
    """Busy share between the first and the last ``cpu`` line of ``output`` (two /proc/stat readings)."""
    from testbed.emu.cpustat import busy_fraction, cpu_times_of

    lines = [ln for ln in output.splitlines() if ln.split()[:1] == ["cpu"]]
    if len(lines) < 2:
        return None
    return round(busy_fraction(cpu_times_of(lines[0]), cpu_times_of(lines[-1])), 4)


def udp_rate(report: dict, seconds: float) -> dict:
    """Offered and delivered packets/s of one iperf3 UDP client report (its end summary, with the server's
    loss count): offered = datagrams sent, delivered = sent - lost.

    Raises:
        EmulationError: the report has no end-of-test summary.
    """
    from testbed.errors import EmulationError

    if report.get("error"):
        raise EmulationError(f"iperf3: {report['error']}")
    try:
        s = report["end"]["sum"]
        sent, lost = int(s["packets"]), int(s["lost_packets"])
        secs = float(s.get("seconds") or seconds)
    except (KeyError, TypeError, ValueError) as exc:
        raise EmulationError(f"iperf3 gave no UDP summary ({exc}): {str(report)[:200]}") from None
    got = max(0, sent - lost)
    return {"sent": sent, "lost": lost, "seconds": secs, "offered_pps": sent / secs if secs > 0 else 0.0,
            "delivered_pps": got / secs if secs > 0 else 0.0}


def load_summary(flows: list[dict], offer_pps: float) -> dict:
    """Sum of the flows' rates; ``passed`` when every flow reported."""
    ok = [f for f in flows if "delivered_pps" in f]
    sent = sum(f["sent"] for f in ok)
    lost = sum(f["lost"] for f in ok)
    return {"flows": len(flows), "reported": len(ok), "asked_pps": offer_pps * len(flows),
            "offered_pps": round(sum(f["offered_pps"] for f in ok), 1),
            "delivered_pps": round(sum(f["delivered_pps"] for f in ok), 1),
            "loss_pct": round(100.0 * lost / sent, 2) if sent else None, "passed": bool(flows) and len(ok) == len(flows)}


def udp_load(cluster, flows: int = 8, offer_kpps: float = 10.0, seconds: float = 10.0) -> dict:
    """``flows`` concurrent iperf3 UDP flows of UDP_PAYLOAD-byte datagrams, each offered ``offer_kpps``,
    between the hosts of :func:`load_pairs`; the packets per second delivered in sum, and how busy each
    worker's CPU was meanwhile (``/proc/stat`` read 1 s into the traffic and 1 s before its end, on the
    worker itself: a namespace shares the machine's /proc/stat).

    Offered above what the fabric carries, the delivered sum is the emulator's capacity (senders, switches,
    tunnels and receivers together); the CPU busy share says whether a worker was saturated."""
    from testbed.errors import EmulationError

    pairs = load_pairs(cluster.plan.graph, cluster.imbalance, flows)
    layout = cluster.plan.layout
    bps = offer_kpps * 1000 * UDP_PAYLOAD * 8
    jobs, meta = [], []
    for j, (src, dst) in enumerate(pairs):
        port = UDP_PORT + j
        jobs.append((dst, ["iperf3", "-s", "-1", "-p", str(port)]))
        # Retried while the server is not listening yet (iperf3 3.12 -J exits 0 even then: the JSON says
        # "unable to connect"); any other outcome is the flow's report.
        log = f"/tmp/udp-{port}.json"
        jobs.append((src, ["sh", "-c", f"for i in $(seq 100); do iperf3 -c {layout.host(dst).ip} -p {port} -u "
                                       f"-b {bps:.0f} -l {UDP_PAYLOAD} -t {seconds:g} -J > {log} 2>&1; "
                                       f"grep -q 'unable to connect' {log} || break; sleep 0.2; done; cat {log}"]))
        meta.append({"src": layout.host(src).name, "dst": layout.host(dst).name,
                     "crosses_cut": cluster.partition.assign[src] != cluster.partition.assign[dst]})
    samplers = []
    for w in range(cluster.partition.n):   # one sampler per worker, on a host it holds
        host = next(h for h in hosts_of(cluster.plan.graph) if cluster.partition.assign[h] == w)
        samplers.append(host)
        jobs.append((host, ["sh", "-c", f"sleep 1; head -1 /proc/stat; sleep {max(seconds - 2, 0.5):g}; "
                                        "head -1 /proc/stat"]))
    results = cluster.exec_many(jobs, timeout=seconds + 120)
    out = []
    for j, m in enumerate(meta):
        rc, text = results[2 * j + 1]
        try:
            report = json.loads(text[text.index("{"):])
            out.append({**m, **udp_rate(report, seconds)})
        except (ValueError, TypeError) as exc:
            out.append({**m, "rc": rc, "why": f"no iperf3 report ({exc}): {text.strip()[-300:]}"})
        except EmulationError as exc:   # keep the other flows
            out.append({**m, "rc": rc, "why": str(exc)})
    busy = [cpu_busy(results[2 * len(meta) + i][1]) for i in range(len(samplers))]
    return {**load_summary(out, offer_kpps * 1000), "payload_bytes": UDP_PAYLOAD, "seconds": seconds,
            "cpu_busy": {cluster.workers[i].label: b for i, b in enumerate(busy)}, "per_flow": out}
