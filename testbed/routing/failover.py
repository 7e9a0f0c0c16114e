"""Failover experiments, the parts both ``testbed bench failover`` and ``scenarios/fabric_failover.py`` use.

Pure analysis of UDP-probe records (which flows lost what while a link was down, throughput over time,
which equal-cost path sets changed) and the few questions asked of the running controller (its events
and installed paths, over its loopback API). Cutting the link itself is :func:`testbed.emu.ops.set_link_state`.
"""

from __future__ import annotations

from testbed.errors import SpecError

#: Throughput bin (seconds) of the per-flow series.
BIN_S = 0.25


def flow_table(send_docs: dict, recv_docs: dict, ip_of: dict) -> dict:
    """``{(src, dst): {"send_times": [...], "arrivals": [(seq, t), ...]}}`` from the probes' records
    (:mod:`testbed.links.probe` sender ``--out`` and receiver documents)."""
    host_of = {ip: h for h, ip in ip_of.items()}
    flows = {}
    for src, doc in send_docs.items():
        for dst_ip in doc["dsts"]:
            flows[(src, host_of[dst_ip])] = {"send_times": doc["send_times"], "interval": doc["interval"],
                                             "arrivals": []}
    for dst, doc in recv_docs.items():
        for src_ip, seq, rx_ns in zip(doc["src"], doc["seq"], doc["rx_ns"], strict=True):
            key = (host_of.get(src_ip), dst)
            if key in flows:
                flows[key]["arrivals"].append((seq, rx_ns / 1e9))
    return flows


def flow_outages(flows: dict, window: tuple[float, float]) -> dict:
    """Per flow: packets lost while sent in ``window`` and the outage they mean (lost x interval)."""
    from testbed.links.probe import outage

    out = {}
    for key, f in flows.items():
        o = outage(f["send_times"], [s for s, _ in f["arrivals"]], f["interval"], window=window)
        out[key] = {"lost_in_window": o.lost_in_window, "outage_ms": o.outage_ms, "lost": o.lost,
                    "sent": o.sent, "received": o.received}
    return out


def throughput_series(flows: dict, t0: float, t1: float, size: int, bin_s: float = BIN_S) -> tuple[list, dict]:
    """Bins (seconds from ``t0``) and per-flow received Mbit/s in each bin."""
    n = max(1, int((t1 - t0) / bin_s))
    edges = [i * bin_s for i in range(n)]
    series = {}
    for key, f in flows.items():
        counts = [0] * n
        for _, t in f["arrivals"]:
            i = int((t - t0) / bin_s)
            if 0 <= i < n:
                counts[i] += 1
        series[key] = [c * size * 8 / bin_s / 1e6 for c in counts]
    return edges, series


def path_changes(before: dict, during: dict, after: dict) -> dict:
    """Flows whose equal-cost path sets changed when the link failed, and when it returned."""
    failed = sorted(k for k in before if before[k] != during.get(k))
    back = sorted(k for k in before if during.get(k) != after.get(k))
    restored = sorted(k for k in before if before[k] == after.get(k))
    return {"changed_on_failure": failed, "changed_on_restore": back, "same_as_before_after_restore": restored}


def controller_paths(ctl, hs) -> dict:
    """Equal-cost path sets of every pair as the controller's installed tables give them."""
    return {(a, b): tuple(tuple(p) for p in ctl.get("/paths", src=a, dst=b)["paths"])
            for a in hs for b in hs if a != b}


def brain_paths(G, hs, down_link: tuple | None) -> dict:
    """The same path sets from the routing brain the controller runs, with ``down_link`` failed.

    Used for the state while the link is down, so that 240 API calls do not load the machine in the
    middle of the measurement (the controller's tables are this brain's output).
    """
    from testbed.routing.brain import RoutingBrain
    from testbed.routing.verify import walk

    brain = RoutingBrain(G)
    brain.compute_all()
    down = frozenset()
    if down_link:
        brain.link_down(*down_link, now=0.0)
        down = frozenset({frozenset(down_link)})
    return {(a, b): tuple(tuple(p) for p in walk(G, brain.tables(), a, b, down_links=down).paths)
            for a in hs for b in hs if a != b}


def link_event(ctl, kind: str, link: tuple, after: float) -> dict | None:
    """The controller's first ``kind`` (link_down | link_up) event of ``link`` at or after ``after``."""
    for ev in ctl.get("/events")["failovers"]:
        if ev["kind"] == kind and set(ev["link"]) == set(link) and ev["time"] >= after:
            return ev
    return None


def switch_event(ctl, kind: str, switch: str, after: float) -> dict | None:
    """The controller's first ``kind`` (switch_down | switch_up) event of ``switch`` at or after ``after``."""
    for ev in ctl.get("/events")["failovers"]:
        if ev["kind"] == kind and ev["link"] == [switch] and ev["time"] >= after:
            return ev
    return None


def pick_link(G, wanted: str | None) -> tuple:
    if wanted:
        a, _, b = wanted.partition(",")
        if not G.has_edge(a, b):
            raise SpecError("--link", f"no link {a} - {b} in the fabric; give it as A,B (e.g. a0,cr0)")
        return (a, b)
    for a, b, d in G.edges(data=True):
        if d.get("tier") == "agg-core":
            return (a, b) if G.nodes[a].get("role") == "agg" else (b, a)
    raise SpecError("--link", "the fabric has no agg-core link; give one with --link A,B")
