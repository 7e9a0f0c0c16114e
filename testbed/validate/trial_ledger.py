"""One long-haul trial made checkable (pure): its frame ledger, its health and its validity verdict.

The long-haul scenario measures a trial (soft-RDMA senders' and receivers' QP counters, the switches' drop
counters, the delay line's stats, the host/switch socket losses); this module turns those documents into
the fields that :func:`testbed.validate.trials.trial_validity` and ``testbed validate --long-haul`` read
(docs/validation.md, "What the long-haul scenario must emit"), so that a trial is checked before it is shown::

    frames(results, switch_cnps)         -> sent, delivered per direction (data; ACK/NAK/CNP)
    verdict(trial, ledger_doc, sat)      -> {accounting, unaccounted_losses, health, emulator_ok, validity}
    label(validity)                      -> "valid" | "INVALID: first reason (+n more)"

Everything here is arithmetic on plain dicts, unit-tested without root.
"""

from __future__ import annotations

from testbed.links import accounting
from testbed.validate.trials import trial_validity


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


def verdict(trial: dict, block: dict, saturation: list[str]) -> dict:
    """The checked fields of one trial.

    Args:
        trial: the row's protocol fields (``mode``, ``switch_cnps``, ``cnps_rx``, ``marks``).
        block: :func:`accounting.metrics_block`'s result for the trial.
        saturation: :func:`testbed.emu.health.saturation`'s reasons.

    Returns:
        ``{accounting, unaccounted_losses, emulator_ok, emulator, health: {healthy, reasons}, validity}``;
        ``health`` joins the saturation reasons and the ledger's (unaccounted or in-emulator losses, late
        frames), so a trial is healthy only when both say so.
    """
    total = block["accounting"]["total"]
    reasons = list(saturation) + [r for r in block["emulator"]["reasons"] if r not in saturation]
    health = {"healthy": not reasons, "reasons": reasons}
    doc = {"accounting": total, "unaccounted_losses": total["unaccounted"], "emulator_ok": block["emulator_ok"],
           "emulator": block["emulator"], "health": health}
    doc["validity"] = trial_validity({**trial, **doc})
    return doc


def label(validity: dict) -> str:
    """A table cell: ``valid``, or ``INVALID: <first reason>`` (and how many more)."""
    if validity["valid"]:
        return "valid"
    first, more = validity["reasons"][0], len(validity["reasons"]) - 1
    return f"INVALID: {first}" + (f" (+{more} more)" if more else "")


def metrics_block(results: list[dict], switch_cnps: int, link_stats: dict, switch_drops: dict,
                  udp_rcvbuf_errors: int = 0, switch_socket_drops: int = 0, processes: dict | None = None) -> dict:
    """:func:`accounting.metrics_block` of one trial from the scenario's raw documents."""
    sent, delivered = frames(results, switch_cnps)
    counted = {sw: {k: n for k, n in reasons.items() if k != "not_ip" and n} for sw, reasons in switch_drops.items()}
    return accounting.metrics_block(sent, delivered, link_stats,
                                    emulator_losses(results, udp_rcvbuf_errors, switch_socket_drops), counted,
                                    processes)
