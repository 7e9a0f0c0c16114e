"""Where a frame was lost: conservation of frames at every element and on every wire of a run (pure).

The QP counters say *how many* frames a flow lost; they cannot say *where*. The kernel counts every frame
each interface sent and received (``/proc/net/dev``), in every namespace, for free. Read before and after a
trial, those counters close a ledger around each element of the replica::

    host h0 --veth-- [x0-eth1] BMv2 x0 [x0-eth3] --veth-- [dl2-eth1] link node dl2 [dl2-eth2] --veth-- ...
              wire: tx(h0-eth0) = rx(x0-eth1) + veth drops
                          element: sum rx(x0-*) + generated (switch CNPs) = sum tx(x0-*) + counted drops
                                   + frames still queued (0 once a trial has drained)

A frame missing on a wire was lost between two interfaces (veth/backlog: the kernel counts those as
``rx_dropped``/``tx_dropped``); one missing inside an element was lost by that element's process: for a
BMv2 switch, frames neither forwarded nor counted by its pipeline (fabric.p4 counts every drop it makes, and
its egress queue's, ``to_port`` - ``from_queue``) were lost between its packet socket and its parser (its
input buffer) or on transmit; for a link node, past its own counters. Each loss is thereby *named by
place*, which is what :func:`testbed.links.accounting.account` needs for a ledger with nothing unaccounted.

All traffic counts (ARP, the endpoints' out-of-band TCP, IPv6 neighbour discovery where enabled), so these
sums are of frames, not of one flow's frames; :func:`hop_ledger` only reports where frames went missing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

FIELDS = ("rx_packets", "rx_errors", "rx_dropped", "tx_packets", "tx_errors", "tx_dropped")


def parse_proc_net_dev(text: str) -> dict:
    """{ifname: {rx_packets, rx_errors, rx_dropped, tx_packets, tx_errors, tx_dropped}} from /proc/net/dev."""
    out = {}
    for line in text.splitlines():
        name, sep, rest = line.partition(":")
        if not sep or "|" in line:
            continue
        cols = rest.split()
        if len(cols) < 12:
            continue
        try:
            rx_p, rx_e, rx_d = int(cols[1]), int(cols[2]), int(cols[3])
            tx_p, tx_e, tx_d = int(cols[9]), int(cols[10]), int(cols[11])
        except ValueError:
            continue
        out[name.strip()] = dict(zip(FIELDS, (rx_p, rx_e, rx_d, tx_p, tx_e, tx_d), strict=True))
    return out


def delta(before: dict, after: dict) -> dict:
    """Per interface, the counters' growth between two :func:`parse_proc_net_dev` readings."""
    return {name: {k: a[k] - before.get(name, {}).get(k, 0) for k in FIELDS} for name, a in after.items()}


@dataclass(frozen=True)
class Element:
    """One forwarding element of the replica and its interfaces (keys into the counter readings).

    ``kind``: ``switch`` (BMv2/OVS), ``link`` (a link node), ``host`` (a source/sink: not conserved).
    """

    name: str
    kind: str
    intfs: tuple = field(default_factory=tuple)


def hop_ledger(elements: list[Element], wires: list[tuple], counters: dict, counted: dict | None = None,
               generated: dict | None = None, queued: dict | None = None) -> dict:
    """Frames missing on every wire and inside every element between two readings.

    Args:
        elements: the replica's elements.
        wires: ``(a, b)`` interface keys of each veth pair.
        counters: :func:`delta` of the run, keyed like the elements' ``intfs`` (e.g. ``"h0/h0-eth0"``).
        counted: {element: frames it dropped and counted itself (pipeline drops, queue tail, model drops)}.
        generated: {element: frames it made itself (switch CNPs)}.
        queued: {element: frames still held when the counters were read (a link node's ``in_flight``)}.

    Returns:
        ``{"wires": {"a>b": missing}, "elements": {name: {in, out, counted, generated, missing}},
        "missing": {place: frames}}``: ``missing`` names every place where frames went missing (> 0 only),
        e.g. ``"inside switch x1"`` or ``"wire h0-eth0>x0-eth1"``; a negative balance (more out than in,
        e.g. a frame received just before the first reading) is reported per element but never subtracted
        from another place's losses.
    """
    counted, generated, queued = counted or {}, generated or {}, queued or {}
    zero = dict.fromkeys(FIELDS, 0)
    wire_out, missing = {}, {}
    for a, b in wires:
        for src, dst in ((a, b), (b, a)):
            s, d = counters.get(src, zero), counters.get(dst, zero)
            gap = s["tx_packets"] - d["rx_packets"]
            label = f"{src.rsplit('/', 1)[-1]}>{dst.rsplit('/', 1)[-1]}"
            wire_out[label] = gap
            if gap > 0:
                missing[f"wire {label}"] = gap
    elems = {}
    for e in elements:
        rx = sum(counters.get(i, zero)["rx_packets"] for i in e.intfs)
        tx = sum(counters.get(i, zero)["tx_packets"] for i in e.intfs)
        doc = {"kind": e.kind, "in": rx, "out": tx}
        if e.kind != "host":
            doc.update(counted=int(counted.get(e.name, 0)), generated=int(generated.get(e.name, 0)),
                       queued=int(queued.get(e.name, 0)))
            doc["missing"] = rx + doc["generated"] - tx - doc["counted"] - doc["queued"]
            if doc["missing"] > 0:
                missing[f"inside {e.kind} {e.name}"] = doc["missing"]
        elems[e.name] = doc
    return {"wires": wire_out, "elements": elems, "missing": missing}
