"""Failover experiments, the parts both ``testbed bench failover`` and ``scenarios/fabric_failover.py`` use.

Pure analysis of UDP-probe records (which flows lost what while a link was down, throughput over time,
which equal-cost path sets changed) and the few questions asked of the running controller (its events
and installed paths, over its loopback API). Cutting the link itself is :func:`testbed.emu.ops.set_link_state`.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from testbed.emu.cpustat import load_average
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


def brain_paths(G, hs, down_links=()) -> dict:
    """The same path sets from the routing brain the controller runs, with ``down_links`` failed.

    Used for the state while links are down, so that 240 API calls do not load the machine in the
    middle of the measurement (the controller's tables are this brain's output).
    """
    from testbed.routing.brain import RoutingBrain
    from testbed.routing.verify import walk

    brain = RoutingBrain(G)
    brain.compute_all()
    for link in down_links:
        brain.link_down(*link, now=0.0)
    down = frozenset(frozenset(link) for link in down_links)
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


def reaction(failovers: list[dict], links: list[tuple], kind: str, after: float) -> dict | None:
    """The controller's reaction to ``links`` going ``kind`` (link_down | link_up) from ``after`` on (wall
    seconds; its ``/events`` ``failovers``): the first event of each link, joined. A link that is never
    reported is left out (a crashed ToR's host links are not fabric links); None when none is.

    Returns ``{"first", "last_pushed", "links", "compute_ms", "messages", "destinations_recomputed"}``.
    """
    found = []
    for link in links:
        ev = next((e for e in failovers if e["kind"] == kind and set(e["link"]) == set(link)
                   and e["time"] >= after), None)
        if ev is not None:
            found.append(ev)
    if not found:
        return None
    return {"first": min(e["time"] for e in found), "last_pushed": max(e["pushed"] for e in found),
            "links": len(found), "compute_ms": round(sum(e["compute_ms"] for e in found), 3),
            "messages": sum(e["messages"] for e in found),
            "destinations_recomputed": sum(e["destinations_recomputed"] for e in found)}


def cut_report(flows: dict, cut: dict, t0: float, next_s: float, paths: tuple, down: dict | None,
               up: dict | None, scale: float, control_latency_ms: float = 0.0) -> tuple[dict, dict]:
    """One cut of a failure schedule (:func:`testbed.failures.cuts`, times in s after ``t0``): the flows it
    affected and their outage, its control-plane reaction, the path sets it changed.

    A flow's packets count from one sending interval before the cut: a probe's send time is its round's
    (:mod:`testbed.links.probe`), whose datagrams to the other destinations leave up to one interval later.

    Args:
        next_s: when the next cut starts (s after t0; inf: none): losses from the repair to then are the
            repair's (``lost_after_restore``).
        paths: ``(before, during, after)`` path sets (:func:`controller_paths`, :func:`brain_paths`).
        down, up: the controller's :func:`reaction` to the cut and to its repair (None: not seen).

    Returns:
        (the cut's figures, per flow ``{lost_in_window, outage_ms, lost_after_restore}``).
    """
    t_cut, t_up = t0 + cut["down_s"], t0 + cut["up_s"]
    lead = max((f["interval"] for f in flows.values()), default=0.0)
    outages = flow_outages(flows, (t_cut - lead, t_up))
    after = flow_outages(flows, (t_up, t0 + next_s - lead)) if cut["repaired"] else {}
    hit = [o["outage_ms"] for o in outages.values() if o["lost_in_window"] > 0]
    median = statistics.median(hit) if hit else 0.0
    doc = {"event": cut["event"], "kind": cut["kind"], "target": cut["target"], "at_s": round(cut["down_s"], 3),
           "repaired_at_s": round(cut["up_s"], 3) if cut["repaired"] else None, "repair_event": cut["up_event"],
           "flows_affected": len(hit), "outage_ms_emulated_median": median,
           "outage_ms_emulated_max": max(hit) if hit else 0.0,
           "packets_lost_after_restore": sum(o["lost_in_window"] for o in after.values())}
    if down is not None:
        doc.update(split_outage(median, (down["first"] - t_cut) * 1e3, (down["last_pushed"] - down["first"]) * 1e3,
                                scale, control_latency_ms))
        doc.update(controller_compute_ms_wall=down["compute_ms"], route_messages_on_failure=down["messages"],
                   destinations_recomputed=down["destinations_recomputed"], links_reported=down["links"])
    doc["restore_reaction_ms_wall"] = round((up["first"] - t_up) * 1e3, 2) if up is not None else None
    changes = path_changes(*paths)
    doc.update(flows_path_set_changed_on_failure=len(changes["changed_on_failure"]),
               flows_path_set_changed_on_restore=len(changes["changed_on_restore"]))
    per_flow = {k: {"lost_in_window": o["lost_in_window"], "outage_ms": o["outage_ms"],
                    "lost_after_restore": after[k]["lost_in_window"] if after else None}
                for k, o in outages.items()}
    return doc, per_flow


def split_outage(outage_ms: float, detect_ms: float, push_ms: float, scale: float,
                 control_latency_ms: float = 0.0) -> dict:
    """An outage measured in emulated time, split into what runs on the wall clock and what is dilated.

    Detection (the cut until the controller's port-status) and the push run undilated, so they count as
    real-world time as measured; the rest of the outage (packets in flight, queues) ran on the dilated
    data plane and is divided by ``scale``. Detection is timed from the start of the command that cuts
    the link, so it can exceed the outage the flows saw; the control-plane share is then capped at the
    outage (``control_plane_ms_wall``), and the raw figures are reported beside it.
    ``control_latency_ms`` is a real controller's extra distance, added to the estimate only.
    """
    measured = detect_ms + push_ms
    control = min(measured, outage_ms)
    data = outage_ms - control
    return {"detection_ms_wall": round(detect_ms, 2), "controller_push_ms_wall": round(push_ms, 2),
            "control_plane_ms_wall": round(control, 2), "control_plane_measured_ms_wall": round(measured, 2),
            "data_plane_ms_emulated": round(data, 2), "control_latency_ms_real_added": control_latency_ms,
            "outage_ms_real_estimate": round(control + control_latency_ms + data / scale, 3)}


def plot_throughput(path: Path, edges: list, series: dict, outages: dict, spans: list[tuple], mode: str) -> None:
    """Per-flow throughput with the failures marked (``spans``: ``(start_s, end_s, label)``) and, below,
    each flow's outage (``outages``: per flow its worst cut's ``{lost_in_window, outage_ms}``)."""
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
    for start, end, label in spans:
        ax.axvspan(start, end, color="red", alpha=0.12, label=label)
        ax.axvline(start, color="red", linewidth=1)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("received (Mbit/s)")
    ax.set_title(f"per-flow throughput, {len(series)} flows ({mode}); coloured: affected flows (lost packets)")
    if len(hit) + len(spans) <= 20:
        ax.legend(fontsize=7, ncol=4, loc="lower left")
    ranked = sorted(outages.items(), key=lambda kv: -kv[1]["outage_ms"])
    bx.bar(range(len(ranked)), [o["outage_ms"] for _, o in ranked], color="tab:red")
    bx.set_xlabel("flows, by outage")
    bx.set_ylabel("outage (ms)")
    bx.set_title("outage per flow, its worst failure (lost packets x interval, emulated ms)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def loadavg() -> str:
    """The machine's load averages, printed next to every figure (a shared 2-core machine)."""

    return "load average " + ", ".join(f"{x:.2f}" for x in load_average())


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
