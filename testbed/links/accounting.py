"""Every frame accounted for: where each frame sent into an emulated network went (pure).

A run's figures come from several places; this module adds them up so that nothing is lost unexplained::

    sent (by the sources)
      = delivered (by the sinks)
      + dropped by a modelled queue   tail / RED / loss model / PFC      (link-node stats, BMv2 counters)
      + lost inside the emulator      socket or ring overflow (rx_kernel_drops, tx_errors, rx_truncated),
                                      veth/qdisc drops (``ip -s link``, ``tc -s qdisc``), late frames
      + unaccounted                   (must be 0 for a valid result)
      (+ in flight when the counters were read)

Frames sent later than the tolerance are delivered, but the run was not faithful: they count against
``emulator_ok``, not against delivery. Inputs are plain documents (the link node's stats JSON, parsed
``ip -j -s link`` output, BMv2 drop counters) so that the arithmetic is unit-tested without root; the
root side that reads the interface counters is :func:`interface_counters_argv` + :func:`parse_ip_stats`.

:func:`emulator_health` gives the verdict and its evidence (lateness percentiles, unaccounted losses,
CPU per process) that a scenario writes into ``metrics.json`` (:func:`metrics_block`).
"""

from __future__ import annotations

import json
import re
from collections import Counter

#: Upper edges (us) of the link node's lateness histogram buckets, in its label order.
_LATE_EDGES_US = {"<10us": 10, "10-20us": 20, "20-50us": 50, "50-100us": 100, "100-200us": 200,
                  "200-500us": 500, "500-1000us": 1000}
#: A run is healthy when at most this fraction of the frames left a link node late.
MAX_LATE_FRACTION = 0.01
MODELLED = ("drop_tail", "drop_red", "drop_loss", "drop_pfc")


def lateness_percentiles(direction: dict, quantiles=(50, 99, 99.9)) -> dict:
    """Upper bounds (us) of the send-lateness percentiles of one direction, from its histogram.

    A percentile in the open top bucket (>= 1 ms) is given as the direction's maximum lateness.
    """
    hist = direction.get("lateness_histogram", direction) or {}
    counts = list(hist.items())
    total = sum(n for _label, n in counts)
    out = {}
    for q in quantiles:
        key = f"p{q:g}"
        if not total:
            out[key] = None
            continue
        need, seen = total * q / 100.0, 0
        for label, n in counts:
            seen += n
            if seen >= need:
                edge = _LATE_EDGES_US.get(label)
                out[key] = edge if edge is not None else round(direction.get("max_lateness_s", 0.0) * 1e6, 1)
                break
    return out


def link_node_ledger(stats: dict) -> dict:
    """One link node's frames, from its stats document (both cores write the same keys).

    Returns:
        {received, delivered, modelled: {tail, red, loss, pfc}, emulator: {rx_kernel_drops, tx_errors,
        rx_truncated}, in_flight, late, unaccounted} summed over both directions.
    """
    dirs = stats.get("directions", {}).values()
    rx = sum(d.get("rx_packets", 0) for d in dirs)
    tx = sum(d.get("tx_packets", 0) for d in dirs)
    modelled = {k.removeprefix("drop_"): sum(d.get(k, 0) for d in dirs) for k in MODELLED}
    emulator = {"tx_errors": sum(d.get("tx_errors", 0) for d in dirs),
                "rx_truncated": sum(d.get("rx_truncated", 0) for d in dirs)}
    in_flight = sum(d.get("in_flight", 0) for d in dirs)
    late = sum(d.get("emulator_late", 0) for d in dirs)
    # inside the node: rx = tx + modelled drops + tx errors + still queued
    unaccounted = rx - tx - sum(modelled.values()) - emulator["tx_errors"] - in_flight
    emulator["rx_kernel_drops"] = stats.get("rx_kernel_drops", 0)  # never reached rx: the socket overflowed
    return {"received": rx, "delivered": tx, "modelled": modelled, "emulator": emulator, "in_flight": in_flight,
            "late": late, "unaccounted": unaccounted, "core": stats.get("core")}


def interface_counters_argv(intf: str, netns: str | None = None) -> list[str]:
    """``ip -j -s link show dev INTF`` (in ``netns``): the kernel's rx/tx drop counters of one interface."""
    argv = ["ip", "-j", "-s", "link", "show", "dev", intf]
    return ["ip", "netns", "exec", netns, *argv] if netns else argv


def parse_ip_stats(text: str) -> dict:
    """{ifname: {rx_dropped, tx_dropped, rx_packets, tx_packets, ...}} from ``ip -j -s link`` output."""
    out = {}
    for link in json.loads(text or "[]"):
        s64 = link.get("stats64", {})
        rx, tx = s64.get("rx", {}), s64.get("tx", {})
        out[link["ifname"]] = {"rx_packets": rx.get("packets", 0), "rx_dropped": rx.get("dropped", 0),
                               "rx_errors": rx.get("errors", 0), "tx_packets": tx.get("packets", 0),
                               "tx_dropped": tx.get("dropped", 0), "tx_errors": tx.get("errors", 0)}
    return out


def interface_drops(before: dict, after: dict) -> dict:
    """Per interface, drops and errors that happened between two :func:`parse_ip_stats` readings."""
    out = {}
    for name, a in after.items():
        b = before.get(name, {})
        delta = {k: a[k] - b.get(k, 0) for k in ("rx_dropped", "rx_errors", "tx_dropped", "tx_errors")}
        if any(delta.values()):
            out[name] = delta
    return out


def account(sent: dict, delivered: dict, link_stats: dict | None = None, interface_deltas: dict | None = None,
            bmv2_drops: dict | None = None, places: dict | None = None) -> dict:
    """The frame ledger of a run, per flow and in total.

    Args:
        sent, delivered: {flow: frames} counted by the sources and sinks.
        link_stats: {link node name: its stats document}.
        interface_deltas: :func:`interface_drops` of the run's interfaces.
        bmv2_drops: {switch: {reason: frames}} from the BMv2 counters.
        places: {place: frames} lost inside the emulator where no counter of the above saw them, found by
            frame conservation (:func:`testbed.links.hops.hop_ledger`), e.g. ``"switch x1 capture ring"``.

    Returns:
        {flows: {flow: {sent, delivered, lost}}, total: {sent, delivered, lost, modelled: {...},
        emulator: {...}, explained, unaccounted}, links: {name: ledger}}. Drops are known per place, not
        per flow, so the per-flow lines say how many were lost and the total says where.
    """
    flows = {f: {"sent": n, "delivered": delivered.get(f, 0), "lost": n - delivered.get(f, 0)}
             for f, n in sent.items()}
    links = {name: link_node_ledger(doc) for name, doc in (link_stats or {}).items()}
    modelled = dict.fromkeys(("tail", "red", "loss", "pfc"), 0)
    emulator = {"rx_kernel_drops": 0, "tx_errors": 0, "rx_truncated": 0, "interface_drops": 0,
                "link_node_unaccounted": 0, "named_places": sum(int(n) for n in (places or {}).values() if n > 0)}
    for ledger in links.values():
        for k, v in ledger["modelled"].items():
            modelled[k] += v
        for k, v in ledger["emulator"].items():
            emulator[k] += v
        emulator["link_node_unaccounted"] += max(0, ledger["unaccounted"])
    for delta in (interface_deltas or {}).values():
        emulator["interface_drops"] += sum(delta.values())
    bmv2 = {}
    for switch, reasons in (bmv2_drops or {}).items():
        for reason, n in reasons.items():
            bmv2[f"{switch}:{reason}"] = n
    total_sent = sum(f["sent"] for f in flows.values())
    total_delivered = sum(f["delivered"] for f in flows.values())
    lost = total_sent - total_delivered
    explained = sum(modelled.values()) + sum(emulator.values()) + sum(bmv2.values())
    in_flight = sum(ledger["in_flight"] for ledger in links.values())
    return {"flows": flows, "links": links,
            "total": {"sent": total_sent, "delivered": total_delivered, "lost": lost, "modelled": modelled,
                      "emulator": emulator, "places": {k: int(n) for k, n in (places or {}).items() if n > 0},
                      "bmv2": bmv2, "in_flight": in_flight, "explained": explained,
                      "unaccounted": max(0, lost - explained - in_flight)}}


def emulator_health(ledger: dict, processes: dict | None = None, late_fraction_max: float = MAX_LATE_FRACTION
                    ) -> dict:
    """``emulator_ok`` and its evidence.

    Healthy: no unaccounted loss, no loss inside the emulator (socket/ring/interface drops are the
    machine's, not the model's), and at most ``late_fraction_max`` of the link nodes' frames late.

    Args:
        ledger: :func:`account`'s result.
        processes: {name: {"cpu_s": .., "wall_s": ..}} of the emulator's processes (link nodes, switches).
    """
    total = ledger["total"]
    links = ledger["links"]
    delivered = sum(x["delivered"] for x in links.values())
    late = sum(x["late"] for x in links.values())
    late_fraction = late / delivered if delivered else 0.0
    emulator_lost = sum(total["emulator"].values())
    reasons = []
    if total["unaccounted"]:
        reasons.append(f"{total['unaccounted']} frames lost without a counted cause")
    if emulator_lost:
        where = _nonzero({k: v for k, v in total["emulator"].items() if k != "named_places"})
        named = _nonzero(total.get("places", {}))
        where = ", ".join(x for x in (where, named) if x != "none") or "none"
        reasons.append(f"{emulator_lost} frames lost inside the emulator ({where})")
    if late_fraction > late_fraction_max:
        reasons.append(f"{late_fraction:.2%} of link-node frames late (> {late_fraction_max:.0%})")
    cpu = {name: {**p, "cpu_fraction": round(p["cpu_s"] / p["wall_s"], 3) if p.get("wall_s") else None}
           for name, p in (processes or {}).items()}
    # the emulator's own load, in cores (link nodes' wall time is their uptime: their share is cpu_fraction)
    own_cores = round(sum(p["cpu_fraction"] or 0.0 for p in cpu.values()), 2)
    return {"emulator_ok": not reasons, "reasons": reasons, "late_fraction": round(late_fraction, 5),
            "unaccounted": total["unaccounted"], "lost_inside_emulator": emulator_lost,
            "lateness_us": {name: doc.get("lateness_us", {}) for name, doc in links.items()}, "cpu": cpu,
            "own_cores": own_cores}


def _nonzero(d: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in d.items() if v) or "none"


def link_node_processes(link_stats: dict) -> dict:
    """{name: {"cpu_s", "wall_s", "core"}} of the link nodes, from their stats documents (both cores
    write ``cpu_s`` and ``uptime_s``)."""
    return {name: {"cpu_s": doc.get("cpu_s", 0.0), "wall_s": doc.get("uptime_s", 0.0), "core": doc.get("core")}
            for name, doc in link_stats.items() if "cpu_s" in doc}


def metrics_block(sent: dict, delivered: dict, link_stats: dict | None = None, interface_deltas: dict | None = None,
                  bmv2_drops: dict | None = None, processes: dict | None = None, places: dict | None = None) -> dict:
    """What a scenario puts into ``metrics.json``: ``{"accounting": ledger, "emulator": health}``,
    with the lateness percentiles of every link node's directions and CPU per process (the link nodes'
    own, added to ``processes``) in the health evidence.

    Example (a scenario, after its trial)::

        doc = accounting.metrics_block({"h0>h2": sent}, {"h0>h2": got}, {"dl6": rep.link_node("d0", "d1").stats()})
        metrics["emulator_ok"], metrics["accounting"] = doc["emulator_ok"], doc
    """
    processes = {**link_node_processes(link_stats or {}), **(processes or {})}
    ledger = account(sent, delivered, link_stats, interface_deltas, bmv2_drops, places)
    for name, doc in (link_stats or {}).items():
        ledger["links"][name]["lateness_us"] = {d: lateness_percentiles(x)
                                                for d, x in doc.get("directions", {}).items()}
    health = emulator_health(ledger, processes)
    return {"accounting": ledger, "emulator": health, "emulator_ok": health["emulator_ok"]}


_COUNTERS = ("rx_packets", "tx_packets", "forwarded_packets", "drop_loss", "drop_red", "drop_tail", "drop_pfc",
             "ce_marked", "tx_errors", "rx_errors", "rx_truncated", "emulator_late")


def stats_delta(before: dict | None, after: dict) -> dict:
    """A link node's stats document for the interval between two readings (its counters are cumulative).

    Counters and histograms are subtracted; levels (``in_flight``), maxima and everything else are the
    later reading's. With ``before`` None the document is returned as it is.
    """
    if not before:
        return after
    out = {**after, "directions": {}}
    for key in ("rx_kernel_drops", "emulator_late", "cpu_s", "uptime_s"):
        if key in after:
            out[key] = after[key] - before.get(key, 0)
    for name, d in after.get("directions", {}).items():
        b = before.get("directions", {}).get(name, {})
        nd = dict(d)
        for k in _COUNTERS:
            if k in d:
                nd[k] = d[k] - b.get(k, 0)
        for hist in ("lateness_histogram", "rx_latency_histogram"):
            if isinstance(d.get(hist), dict):
                nd[hist] = {label: n - b.get(hist, {}).get(label, 0) for label, n in d[hist].items()}
        out["directions"][name] = nd
    return out


#: Kernel drop reasons that are not losses of emulated traffic: a veth's own stack discarding the copy
#: of a frame meant for another MAC (every switch port and link-node port sees those), IPv6 switched off.
BENIGN_DROP_REASONS = ("OTHERHOST", "IPV6DISABLED")


def kernel_drop_trace_argv(seconds: float, out: str) -> list[str]:
    """``perf record`` of every ``skb:kfree_skb`` (drop location and reason) on the machine for ``seconds``.

    Machine-wide: on a shared machine other runs' drops are in it too; read it next to the ledger.
    """
    return ["perf", "record", "-q", "-e", "skb:kfree_skb", "-a", "-o", str(out), "--", "sleep", repr(float(seconds))]


_DROP_LINE = re.compile(r"^\s*(?P<comm>.+?)\s+skbaddr=\S+.*?location=(?P<loc>[\w.]+)(?:\+0x[0-9a-f]+)?\s+"
                        r"reason:\s+(?P<reason>\w+)")


def summarise_kernel_drops(perf_script_text: str) -> dict:
    """{"location:REASON": frames} from ``perf script -F comm,trace`` output, benign reasons left out."""
    counts: Counter = Counter()
    for line in perf_script_text.splitlines():
        m = _DROP_LINE.match(line)
        if m and m.group("reason") not in BENIGN_DROP_REASONS:
            counts[f"{m.group('loc')}:{m.group('reason')}"] += 1
    return dict(counts.most_common())
