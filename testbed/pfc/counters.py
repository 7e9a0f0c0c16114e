"""What a replica's PFC link nodes counted, per link direction, and the frame ledger of a trial (pure).

A link node's stats document has ``directions`` ``a>b`` / ``b>a``; a replica names them by the plan's ends,
``u>v`` (switch u's egress to v, or a host's NIC when u is a host). A trial reads every node before and after
(:func:`delta`), and accounts every datagram its streams sent: received, dropped by a modelled queue (by
direction and reason), or unaccounted. Used by the scenarios ``pfc_fabric`` and ``pfc_deadlock``.
"""

from __future__ import annotations


def direction_counters(stats: dict, priority: int) -> dict:
    """``{"a>b": {...}, "b>a": {...}}`` of one link node's stats document: what a trial reads of each
    direction (the priority's frames; PFC counters of priority ``priority``)."""
    out = {}
    for d, doc in (stats.get("directions") or {}).items():
        prio = (doc.get("priorities") or {}).get(str(priority), {})
        pfc = doc.get("pfc") or {}
        ing = (pfc.get("ingress") or {}).get(str(priority), {})
        eg = (pfc.get("egress") or {}).get(str(priority), {})
        out[d] = {"rx": prio.get("rx_packets", 0), "forwarded": prio.get("forwarded_packets", 0),
                  "drop_tail": prio.get("drop_tail", 0), "drop_red": prio.get("drop_red", 0),
                  "drop_loss": prio.get("drop_loss", 0), "drop_pfc_headroom": prio.get("drop_pfc_headroom", 0),
                  "drop_pfc_watchdog": prio.get("drop_pfc_watchdog", 0), "pause_sent": ing.get("pause_sent", 0),
                  "xon_sent": ing.get("xon_sent", 0), "pause_received": eg.get("pause_received", 0),
                  "paused_s": eg.get("paused_s", 0.0), "paused_real_s": eg.get("paused_real_s", 0.0),
                  "max_bytes": ing.get("max_bytes", 0), "ce_marked": prio.get("ce_marked", 0),
                  "storms": ((pfc.get("watchdog") or {}).get(str(priority)) or {}).get("storms", 0),
                  # states at the end, not counters: what is still held there and whether it is paused
                  "queued": prio.get("queued_packets", 0), "paused_now": bool(pfc.get("paused_now", 0) >> priority & 1)}
    return out


DROPS = ("drop_tail", "drop_red", "drop_loss", "drop_pfc_headroom", "drop_pfc_watchdog")


def delta(before: dict, after: dict) -> dict:
    """``after - before`` per direction and counter; the end states as read at the end. ``max_bytes`` is
    the trial's peak only if the trial raised it: a link node keeps one peak per priority for its whole run,
    so on a replica that runs several trials a peak not above an earlier trial's is unknown (None)."""
    out = {}
    for d, a in after.items():
        b = before.get(d, {})
        out[d] = {k: (v if k in STATES else v - b.get(k, 0)) for k, v in a.items()}
        if "max_bytes" in a and a["max_bytes"] <= b.get("max_bytes", 0) and a["max_bytes"] > 0:
            out[d]["max_bytes"] = None
    return out


#: Values that are states of the moment, not counters (kept as read at the end of a trial).
STATES = ("max_bytes", "queued", "paused_now")


def ledger(senders: dict, hops: dict) -> dict:
    """Sent = received + dropped by a modelled queue + still held in a queue + unaccounted, for one trial's
    priority (held: frames a deadlock keeps in its queues at the end; 0 once the queues drained).

    ``senders``: {host: {"sent", "received"}}; ``hops``: {link node: {"u>v": counters}} (deltas)."""
    sent = sum(s["sent"] for s in senders.values())
    received = sum(s["received"] for s in senders.values())
    drops = {}
    for node, dirs in hops.items():
        for d, c in dirs.items():
            for k in DROPS:
                if c.get(k):
                    drops[f"{node} {d} {k}"] = c[k]
    dropped = sum(drops.values())
    held = sum(c.get("queued", 0) for dirs in hops.values() for c in dirs.values())
    return {"sent": sent, "received": received, "dropped": dropped, "drops": drops, "held": held,
            "unaccounted": sent - received - dropped - held}


def port_ledger(hops: dict, hosts) -> dict:
    """The frame ledger of one priority from the link nodes alone (pure), for traffic the trial cannot count
    itself (RoCE: resends, ACKs and data share the priority, and the endpoints count QPs, not frames).

    Every frame of the priority enters the fabric at a host's NIC side (``h>x``: its link node's rx) and
    leaves it at a switch's port to a host (``x>h``: forwarded), unless a modelled queue dropped it or it is
    still held: sent = delivered + dropped + held + unaccounted. ``hosts``: every host of the replica (a
    frame to or from any of them counts; the switches learn MACs before a trial, so nothing is flooded).
    """
    hosts = {str(h) for h in hosts}
    sent = delivered = 0
    for dirs in hops.values():
        for d, c in dirs.items():
            u, v = d.split(">")
            if u in hosts:
                sent += c["rx"]
            if v in hosts:
                delivered += c["forwarded"]
    led = ledger({"all": {"sent": sent, "received": delivered}}, hops)
    return led


def delta_all(before: dict, after: dict) -> dict:
    """:func:`delta` of every link node: ``{node: {"u>v": counters}}``."""
    return {node: delta(before.get(node, {}), dirs) for node, dirs in after.items()}


def sides(pfc_links: list) -> dict:
    """``{"u>v": side}`` of plan.json's ``pfc.links`` (pure)."""
    out = {}
    for lk in pfc_links:
        out[f"{lk['u']}>{lk['v']}"], out[f"{lk['v']}>{lk['u']}"] = lk["ab"], lk["ba"]
    return out


def allowance_used(flat: dict, by_dir: dict) -> dict:
    """Per switch egress, the bytes its lossless queue held beyond xoff + the physics headroom: what only
    the emulator allowance kept from being dropped (a real switch would not need it). Pure."""
    out = {}
    for d, c in flat.items():
        side = by_dir.get(d)
        if side and side["role"] == "switch":
            over = (c.get("max_bytes") or 0) - side["xoff_bytes"] - side["physics_headroom_bytes"]
            if over > 0:
                out[d] = over
    return out


def attribute(led: dict, emulator: dict) -> dict:
    """Split a ledger's unaccounted datagrams into lost inside the emulator and still unexplained (pure).

    ``emulator``: frames lost inside OVS's userspace datapath over the trial
    (:func:`testbed.emu.ovsloss.losses`: its send socket, inferred by conservation over the switch ports, and
    its port sockets) plus the kernel backlog's drops. Those count every frame, the hosts' own background
    ones too, so they explain the trial's missing datagrams only up to their total; a remainder stays
    unaccounted. Returns ``{"lost_inside_emulator", "unaccounted", "emulator_losses"}``.
    """
    missing = max(0, led["unaccounted"])
    inside = min(missing, max(0, sum(int(v or 0) for v in emulator.values())))
    return {"lost_inside_emulator": inside, "unaccounted": led["unaccounted"] - inside,
            "emulator_losses": dict(emulator)}


def delays_ms(tx_ns, rx_ns) -> dict:
    """One-way delays of a stream's received datagrams (sender and receiver stamp the same clock: one
    machine), ms: p50, p99 (nearest rank) and max; Nones without datagrams."""
    from testbed.stats import nearest_rank

    d = [(r - t) / 1e6 for t, r in zip(tx_ns, rx_ns, strict=True)]
    if not d:
        return {"p50": None, "p99": None, "max": None}
    return {"p50": round(nearest_rank(d, 0.5), 3), "p99": round(nearest_rank(d, 0.99), 3), "max": round(max(d), 3)}


#: fabric.p4 drop reasons that are modelled queues (a BMv2 switch's egress queue full, RED's early drop of a
#: non-ECT frame, PFC's headroom exceeded); the others (malformed, no route, TTL) mean the emulation is wrong.
SWITCH_MODELLED = ("tail", "queue", "pfc_headroom")


def switch_delta(before: dict, after: dict) -> dict:
    """``after - before`` of BMv2 switch snapshots ``{switch: {counter: {key: n}}}`` (pure; key: a port or a
    drop reason)."""
    return {sw: {name: dict(vals) if name in SWITCH_STATES else
                 {k: n - before.get(sw, {}).get(name, {}).get(k, 0) for k, n in vals.items()}
                 for name, vals in doc.items()} for sw, doc in after.items()}


#: BMv2 values that are states of the moment (kept as read at the end of a trial).
SWITCH_STATES = ("pfc_held_bytes",)


def fold_switches(led: dict, switches: dict) -> dict:
    """``led`` with the BMv2 switches' modelled drops in it (``"<switch> bmv2 <reason>"``), and the frames
    they dropped for reasons no queue models, ``{"bmv2 <switch> <reason>": n}`` (pure). A switch counts every
    frame of every priority: in a trial whose streams are the only traffic (the replica's ARP is done
    before), those are the streams' frames."""
    strange = {}
    for sw, doc in switches.items():
        drops = dict(doc.get("drops", {}))
        drops["tail"] = sum(doc.get("tail", {}).values())
        for reason, n in drops.items():
            if n <= 0 or reason == "not_ip":
                continue
            if reason in SWITCH_MODELLED:
                led["drops"][f"{sw} bmv2 {reason}"] = n
                led["dropped"] += n
                led["unaccounted"] -= n
            else:
                strange[f"bmv2 {sw} {reason}"] = n
    return strange
