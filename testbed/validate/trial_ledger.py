"""One long-haul trial made checkable (pure): its frame ledger, its health and its validity verdict.

The long-haul scenario measures a trial (soft-RDMA senders' and receivers' QP counters, the switches' drop
counters, the delay line's stats, the host/switch socket losses); this module turns those documents into
the fields that :func:`testbed.validate.trials.trial_validity` and ``testbed validate --long-haul`` read
(docs/validation.md, "What the long-haul scenario must emit"), so that a trial is checked before it is shown::

    frames(results, switch_cnps)         -> sent, delivered per direction (data; ACK/NAK/CNP)
    places(hops, ring_drops)             -> {place: frames} the emulator lost, found by frame conservation
    sender_pacing(results)               -> how much DCQCN allowance the senders lost to late wake-ups
    verdict(trial, ledger_doc, sat)      -> {accounting, unaccounted_losses, health, emulator_ok, validity}
    label(validity)                      -> "valid" | "INVALID: first reason (+n more)"

Everything here is arithmetic on plain dicts, unit-tested without root.
"""

from __future__ import annotations

from testbed.links import accounting
from testbed.validate.trials import trial_validity


def sender_pacing(results: list[dict]) -> dict:
    """``{lost_share, late_max_ms, by_sender: [lost share, ...]}``: per sender, allowance lost over allowance
    (sent + lost); the worst sender decides. Results without the fields (older senders) read 0."""
    from testbed.rdma.perf import pacing_lost_share

    shares = [round(pacing_lost_share(x), 5) for x in results]
    late = max((float(x.get("pacing_late_max_s", 0.0)) for x in results), default=0.0)
    return {"lost_share": max(shares, default=0.0), "late_max_ms": round(late * 1e3, 3), "by_sender": shares}


def frames(results: list[dict], switch_cnps: int = 0) -> tuple[dict, dict]:
    """``(sent, delivered)`` per direction of every sender-receiver pair, from the senders' result documents.

    Forward (``h>r data``): frames the sender's QP sent (retransmissions included) against frames the
    receiver's QP received. Reverse (``r>h acks``): the receiver's ACK/NAK/CNP frames plus the CNPs the
    switches generated (they are not the receiver's, so they are added to the reverse sum once, on the first
    pair) against frames the sender's QP received.
    """
    sent, delivered = {}, {}
    for i, x in enumerate(results):
        name = f"{i}:{x.get('local', {}).get('ip', '?')}>{x.get('remote', {}).get('ip', '?')}"
        server = (x.get("server") or {}).get("stats", {})
        sent[f"{name} data"] = int(x.get("tx_packets", 0))
        delivered[f"{name} data"] = int(server.get("rx_packets", 0))
        sent[f"{name} reverse"] = int(server.get("tx_packets", 0)) + (int(switch_cnps) if i == 0 else 0)
        delivered[f"{name} reverse"] = int(x.get("rx_packets", 0))
    return sent, delivered


def emulator_losses(results: list[dict], udp_rcvbuf_errors: int = 0, switch_socket_drops: int = 0) -> dict:
    """Frames lost inside the emulator but counted, as :func:`accounting.account`'s ``interface_deltas``."""
    out = {}
    enobufs = sum(int(x.get("dropped_tx", 0)) for x in results)
    if enobufs:
        out["sender sockets"] = {"tx_dropped": enobufs}
    if udp_rcvbuf_errors:
        out["host udp receive buffers"] = {"rx_dropped": int(udp_rcvbuf_errors)}
    if switch_socket_drops:
        out["switch packet sockets"] = {"rx_dropped": int(switch_socket_drops)}
    return out


def places(hops: dict | None, ring_drops: dict | None = None) -> dict:
    """Where the emulator lost frames that no model counted, from :func:`testbed.links.hops.hop_ledger`.

    A switch's missing frames are split by its capture rings' own drop counters (``ring_drops``:
    {element: frames}, from :mod:`testbed.p4rt.rx`): the rings' share is ``"switch X capture ring"``, the
    rest ``"inside switch X, past its capture ring"`` (its input buffer or transmit). Where the rings were
    not measured (``ring_drops`` None) the whole balance is named ``"inside switch X"``.
    """
    out: dict = {}
    if not hops:
        return out
    for place, n in hops.get("missing", {}).items():
        kind_name = place.removeprefix("inside ")
        kind, _, name = kind_name.partition(" ")
        if kind != "switch" or ring_drops is None or name not in ring_drops:
            out[place] = n
            continue
        ring = max(0, min(n, int(ring_drops[name])))
        if ring:
            out[f"switch {name} capture ring"] = ring
        if n - ring:
            out[f"inside switch {name}, past its capture ring"] = n - ring
    for name, n in (ring_drops or {}).items():  # ring drops a balance did not see (other traffic in flight)
        if n > 0 and f"switch {name} capture ring" not in out and f"inside switch {name}" not in hops.get("missing", {}):
            out[f"switch {name} capture ring"] = int(n)
    return out


def verdict(trial: dict, block: dict, saturation: list[str]) -> dict:
    """The checked fields of one trial.

    Args:
        trial: the row's protocol fields (``mode``, ``switch_cnps``, ``cnps_rx``, ``marks``), its
            ``feedback_check`` (:func:`testbed.validate.trials.feedback_check`; None: not measured) and its
            ``data_check`` (:func:`testbed.roce.sample.data_verdict`; None: not checked).
        block: :func:`accounting.metrics_block`'s result for the trial.
        saturation: :func:`testbed.emu.health.saturation`'s reasons.

    Returns:
        ``{accounting, unaccounted_losses, emulator_ok, emulator, health: {healthy, reasons}, feedback_check,
        data_check, validity}``;
        ``health`` joins the saturation reasons and the ledger's (unaccounted or in-emulator losses, late
        frames), so a trial is healthy only when both say so.
    """
    total = block["accounting"]["total"]
    reasons = list(saturation) + [r for r in block["emulator"]["reasons"] if r not in saturation]
    health = {"healthy": not reasons, "reasons": reasons}
    doc = {"accounting": total, "unaccounted_losses": total["unaccounted"], "emulator_ok": block["emulator_ok"],
           "emulator": block["emulator"], "health": health, "feedback_check": trial.get("feedback_check"),
           "data_check": trial.get("data_check")}
    doc["validity"] = trial_validity({**trial, **doc})
    return doc


def label(validity: dict) -> str:
    """A table cell: ``valid``, or ``INVALID: <first reason>`` (and how many more)."""
    if validity["valid"]:
        return "valid"
    first, more = validity["reasons"][0], len(validity["reasons"]) - 1
    return f"INVALID: {first}" + (f" (+{more} more)" if more else "")


def metrics_block(results: list[dict], switch_cnps: int, link_stats: dict, switch_drops: dict,
                  udp_rcvbuf_errors: int = 0, switch_socket_drops: int = 0, processes: dict | None = None,
                  hops: dict | None = None, ring_drops: dict | None = None) -> dict:
    """:func:`accounting.metrics_block` of one trial from the scenario's raw documents.

    With ``hops`` (the trial's :func:`testbed.links.hops.hop_ledger`) the losses inside switches and on
    wires are named by place (:func:`places`); the switches' packet-socket drops are then part of those
    balances and not added again.
    """
    sent, delivered = frames(results, switch_cnps)
    counted = {sw: {k: n for k, n in reasons.items() if k != "not_ip" and n} for sw, reasons in switch_drops.items()}
    found = places(hops, ring_drops)
    losses = emulator_losses(results, udp_rcvbuf_errors, 0 if hops else switch_socket_drops)
    doc = accounting.metrics_block(sent, delivered, link_stats, losses, counted, processes, found)
    if hops:
        doc["accounting"]["hops"] = hops
    # recorded, not yet judged: how much allowance a healthy trial loses at scale 2000 is still to be measured
    doc["emulator"]["sender_pacing"] = sender_pacing(results)
    return doc
