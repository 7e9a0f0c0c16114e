"""What a RoCE trial's senders measured, over the time they all sent (pure).

Senders start a few hundred milliseconds apart (each is a process; a busy machine starts them late) and
stop ``duration`` after their own start, so a goodput over each sender's own time, summed, can exceed the
bottleneck: the flows did not overlap all along. Every sender samples its acknowledged bytes
(``series``: ``t`` since its start, ``acked_bytes``), so the fair comparison is over the *common window*,
from the last start to the first planned stop.
"""

from __future__ import annotations


def _column(series: dict, name: str) -> list:
    cols = series.get("columns") or []
    return [r[cols.index(name)] for r in series.get("rows") or []] if name in cols else []


def common_window(results: dict, duration: float) -> tuple[float, float] | None:
    """(start, end) in wall-clock seconds during which every sender was sending; None when they did not
    overlap. ``results``: {flow: the endpoint's result document (``started_at``, ``series``)}."""
    starts = [r["started_at"] for r in results.values()]
    t0, t1 = max(starts), min(starts) + duration
    return (t0, t1) if t1 > t0 else None


def acked_at(result: dict, when: float) -> float:
    """Bytes the sender had acknowledged at wall-clock ``when`` (linear between its samples)."""
    ts = [result["started_at"] + t for t in _column(result["series"], "t")]
    acked = _column(result["series"], "acked_bytes")
    if not ts or when <= ts[0]:
        return float(acked[0]) if acked and ts and when >= ts[0] else 0.0
    for i in range(1, len(ts)):
        if when <= ts[i]:
            f = (when - ts[i - 1]) / (ts[i] - ts[i - 1]) if ts[i] > ts[i - 1] else 1.0
            return acked[i - 1] + f * (acked[i] - acked[i - 1])
    return float(acked[-1])


def goodputs(results: dict, duration: float) -> dict:
    """{flow: goodput in bit/s (emulated) over the common window}; {} when the senders never overlapped."""
    win = common_window(results, duration)
    if win is None:
        return {}
    t0, t1 = win
    return {k: (acked_at(r, t1) - acked_at(r, t0)) * 8 / (t1 - t0) for k, r in results.items()}


def rate_bins(result: dict, origin: float, bin_s: float) -> tuple[list, list]:
    """The sender's goodput per ``bin_s`` (bit/s, emulated) from wall-clock ``origin``: (bin starts, rates)."""
    ts = [result["started_at"] + t - origin for t in _column(result["series"], "t")]
    if len(ts) < 2:
        return [], []
    n = int(max(ts) // bin_s)
    starts = [i * bin_s for i in range(max(0, int(ts[0] // bin_s)), n)]
    rates = [(acked_at(result, origin + s + bin_s) - acked_at(result, origin + s)) * 8 / bin_s for s in starts]
    return starts, rates


def jain(xs) -> float | None:
    """Jain's fairness index (1: equal shares; 1/n: one flow has everything); None without traffic."""
    xs = list(xs)
    sq = sum(x * x for x in xs)
    return sum(xs) ** 2 / (len(xs) * sq) if sq else None
