"""Probe datagrams lost before a failure schedule's first cut: which the cut took, which the emulator lost,
and where (pure; the counters come from :func:`testbed.emu.probewatch.snapshot`).

Why: nothing is injected before the first cut, so a probe lost then is not the modelled network's doing --
unless it was still inside the fabric when the cut came. The window used to end one sending interval
before the cut (a round's datagrams leave within one interval), taking transit through the fabric as
nothing. It is not: ovs-vswitchd shares the machine's two cores with 32 probe processes, and a datagram's
wall-clock transit across the fat-tree (five OVS hops) measured p50 11-165 ms, p99 75-428 ms and at most
106-594 ms before the cut, in 16 quick runs beside one or two busy loops (docs/failures.md). A datagram
sent 60 ms before a cut with 150 ms still to go is lost by the cut, and the old window counted it "before the
cut" with no cause: 2-27 of them in 5 of those runs, every one on a flow that lost datagrams in the
cut's own window too (CI, under load: 1, 15 and 1 in three attempts, the test failing unhealthy).

The rule, per flow (its path set is fixed before the cut, and one path is FIFO: veths, OVS ports, HTB)::

    first delivery                    t_end = t_cut - interval           t_cut
         |------------- window (by round send time) ------|------------------|
    lost k, and some later seq arrived before t_cut  -> lost before the cut (it would have arrived first)
    lost k, nothing later arrived before t_cut, and the flow's paths cross the cut
                                                     -> in flight at the cut: the cut's (modelled)

A loss before the cut also has a bound on when it happened: before the next delivered datagram of its
flow arrived. Losses bounded before the second counter read are set against the counters' causes
(:data:`CAUSES`): the emulator's first, then the modelled network's; what is left is unattributed.
"""

from __future__ import annotations

#: counter groups a lost probe can show in: ``{cause: (what counted it, kind)}``; kind ``emulator``
#: (the run is not to be trusted: :mod:`testbed.emu.runhealth` calls it unhealthy) or ``modelled`` (the
#: replica's queues or its controller's tables: the fabric under test, a failure)
CAUSES = {
    "receiver_socket_buffer": ("Udp RcvbufErrors in the receiving host (the probe read too late)", "emulator"),
    "host_interfaces": ("rx/tx dropped of the hosts' interfaces (veth, CPU backlog)", "emulator"),
    "switch_interfaces": ("rx/tx dropped of the switch ports (veth, CPU backlog)", "emulator"),
    "ovs_port_sockets": ("ovs-vswitchd's port sockets full (sk_drops)", "emulator"),
    "ovs_datapath": ("OVS datapath drops: lost upcalls (dpctl/show), datapath_drop_* (coverage)", "emulator"),
    "host_queues": ("the senders' link queues (Udp SndbufErrors: tc HTB refused the datagram)", "modelled"),
    "switch_queues": ("the switch ports' link queues (tc HTB drops)", "modelled"),
    "ovs_pipeline": ("the OpenFlow tables dropped it (IPv4 drop flows of the datapath: no route installed)",
                     "modelled"),
}


def crossing(paths: dict, cut_links) -> set:
    """Flows (``(src, dst)``) with an equal-cost path across any of ``cut_links`` (``[(a, b)]``; a switch
    crash is its links), from ``paths`` (:func:`testbed.routing.failover.controller_paths`)."""
    cut = {frozenset(link) for link in cut_links}
    return {k for k, ps in paths.items()
            if any(frozenset(hop) in cut for p in ps for hop in zip(p, p[1:], strict=False))}


def split_losses(flows: dict, t_end: float, t_cut: float, crosses) -> dict:
    """Lost datagrams sent (by their round's time) from each flow's first delivery to ``t_end``, split by
    the rule above.

    Args:
        flows: :func:`testbed.routing.failover.flow_table`.
        t_end: the window's end (the cut's own window starts there: :func:`failover.cut_report`).
        t_cut: when the cut started (wall seconds): arrivals before it prove a loss happened before it.
        crosses: flows whose paths cross the cut (:func:`crossing`).

    Returns:
        ``{"lost", "in_flight_at_cut", "bounds": [wall time each loss happened by, ascending],
        "flows": {"src->dst": {"lost", "in_flight_at_cut"}}}`` (flows with neither left out).
    """
    lost, in_flight, bounds, per_flow = 0, 0, [], {}
    crosses = set(crosses)
    for key, f in flows.items():
        if not f["arrivals"]:
            continue
        got = sorted(f["arrivals"])
        seqs = {s for s, _ in got}
        first = f["send_times"][got[0][0]]
        before_cut = [s for s, t in got if t < t_cut]
        last = max(before_cut, default=-1)
        n_lost = n_flight = 0
        for k, t in enumerate(f["send_times"]):
            if k in seqs or not first <= t < t_end:
                continue
            if k > last and key in crosses:
                n_flight += 1
                continue
            n_lost += 1   # by when: the next delivered datagram of the flow (none: not known)
            bounds.append(min((t for s, t in got if s > k), default=float("inf")))
        if n_lost or n_flight:
            per_flow[f"{key[0]}->{key[1]}"] = {"lost": n_lost, "in_flight_at_cut": n_flight}
        lost += n_lost
        in_flight += n_flight
    return {"lost": lost, "in_flight_at_cut": in_flight, "bounds": sorted(bounds), "flows": per_flow}


def counter_causes(before: dict, after: dict) -> dict:
    """``{cause: frames}`` of :data:`CAUSES` between two :func:`testbed.emu.probewatch.snapshot` s."""
    def d(key):
        return after[key] - before[key]

    def hosts(field):
        return sum(after["hosts"][h][field] - before["hosts"][h][field] for h in after["hosts"])

    # a drop flow's packets count from its install: one new since the first read counts whole, one
    # gone (expired, replaced) counts nothing; its packets meanwhile are lost to the count (drop flows of
    # probes live while probes hit them: 10 s idle before OVS removes one)
    flows_before = before["ovs_drop_flows"]
    dropped = sum(max(0, n - flows_before.get(m, 0)) for m, n in after["ovs_drop_flows"].items())
    return {"receiver_socket_buffer": hosts("rcvbuf_errors"), "host_interfaces": hosts("if_drops"),
            "switch_interfaces": d("switch_if_drops"), "ovs_port_sockets": d("ovs_port_sockets"),
            "ovs_datapath": d("ovs_datapath"), "host_queues": hosts("sndbuf_errors"),
            "switch_queues": d("switch_queue_drops"), "ovs_pipeline": dropped}


def attribute(split: dict, causes: dict | None, counted_until: float | None) -> dict:
    """Set the losses before the cut (:func:`split_losses`) against the counters' ``causes``
    (:func:`counter_causes` over the window ending ``counted_until``; None: no clean reading).

    Only losses known to have happened by ``counted_until`` can show in the counters; they go to the
    emulator's causes first (a run that lost frames inside the emulator is not to be trusted, whatever
    else happened), then to the modelled ones, each up to what it counted. The rest is unattributed.

    Returns:
        ``{"by_cause": {cause: losses}, "emulator": n, "modelled": n, "unattributed": n,
        "after_counters": n}`` (``after_counters``: losses that happened after the counters were read,
        part of ``unattributed``).
    """
    if causes is None or counted_until is None:
        countable = 0
    else:
        countable = sum(1 for b in split["bounds"] if b <= counted_until)
    left, by_cause, kinds = countable, {}, {"emulator": 0, "modelled": 0}
    for kind in ("emulator", "modelled"):
        for cause, (_, k) in CAUSES.items():
            if k != kind or not left:
                continue
            n = min(left, max(0, (causes or {}).get(cause, 0)))
            if n:
                by_cause[cause] = n
                kinds[kind] += n
                left -= n
    return {"by_cause": by_cause, **kinds, "unattributed": split["lost"] - kinds["emulator"] - kinds["modelled"],
            "after_counters": split["lost"] - countable}


def transit_ms(recv_docs: dict, t0: float, t1: float) -> dict:
    """Wall-clock transit of the probes sent in ``[t0, t1)`` (receive minus send timestamp, ms): ``{"p50",
    "p99", "max", "n"}`` (None figures when none arrived). Same clock in every namespace of one machine."""
    ms = sorted((rx - tx) / 1e6 for doc in recv_docs.values() for tx, rx in zip(doc["tx_ns"], doc["rx_ns"], strict=True)
                if t0 <= tx / 1e9 < t1)
    if not ms:
        return {"p50": None, "p99": None, "max": None, "n": 0}

    def q(f):
        return round(ms[min(len(ms) - 1, int(f * len(ms)))], 2)

    return {"p50": q(0.5), "p99": q(0.99), "max": round(ms[-1], 2), "n": len(ms)}
