"""nccl-tests' bandwidth figures and its output table (pure).

From nccl-tests ``doc/PERFORMANCE.md``: ``algbw = size / time`` (``size`` the per-rank buffer as the test
counts it), and ``busbw = algbw * factor`` so that busbw is comparable with the hardware's link rate
whatever the collective and rank count::

    allreduce        2 (n - 1) / n      every rank sends and receives 2 (n-1)/n of the buffer
    reduce_scatter   (n - 1) / n
    all_gather       (n - 1) / n
    all_to_all       (n - 1) / n
    broadcast        1

On a time-dilated replica the emulated time is ``scale`` times the real one, so the real-world
bandwidths are the emulated ones times ``scale`` (bytes are the same in both worlds).
"""

from __future__ import annotations

from testbed.errors import SpecError


def bus_factor(collective: str, n: int) -> float:
    if collective == "allreduce":
        return 2 * (n - 1) / n
    if collective in ("reduce_scatter", "all_gather", "all_to_all"):
        return (n - 1) / n
    if collective == "broadcast":
        return 1.0
    raise SpecError("collective", f"no bus bandwidth factor for {collective!r}")


def algbw_bps(size_bytes: int, seconds: float) -> float:
    """Algorithm bandwidth in bit/s (nccl-tests prints GB/s; we keep bits like link rates)."""
    return size_bytes * 8 / seconds if seconds > 0 else 0.0


def busbw_bps(collective: str, n: int, size_bytes: int, seconds: float) -> float:
    return algbw_bps(size_bytes, seconds) * bus_factor(collective, n)


def row(collective: str, n: int, size_bytes: int, seconds: float, scale: float, wrong: int, **extra) -> dict:
    """One nccl-tests line: emulated and real-world (``x scale``) time, algbw and busbw."""
    alg = algbw_bps(size_bytes, seconds)
    bus = alg * bus_factor(collective, n)
    return {"collective": collective, "ranks": n, "size_bytes": size_bytes, "count": size_bytes // 4,
            "type": "int32", "time_s": seconds, "real_time_us": seconds / scale * 1e6,
            "algbw_bps": alg, "busbw_bps": bus, "real_algbw_gbps": alg * scale / 1e9,
            "real_busbw_gbps": bus * scale / 1e9, "wrong": wrong, **extra}


def table_text(rows: list[dict]) -> str:
    """The rows laid out like nccl-tests (real-world GB/s first, the emulated Mb/s beside)."""
    head = (f"{'size':>12} {'count':>10} {'type':>6} {'time(us)':>12} {'algbw(GB/s)':>12} {'busbw(GB/s)':>12} "
            f"{'#wrong':>7} | {'emu time(s)':>11} {'algbw(Mb/s)':>11} {'busbw(Mb/s)':>11}")
    lines = [f"# {rows[0]['collective']}, {rows[0]['ranks']} ranks" if rows else "# no rows", head]
    for r in rows:
        lines.append(f"{r['size_bytes']:>12} {r['count']:>10} {r['type']:>6} {r['real_time_us']:>12.1f} "
                     f"{r['real_algbw_gbps'] / 8:>12.2f} {r['real_busbw_gbps'] / 8:>12.2f} {r['wrong']:>7} | "
                     f"{r['time_s']:>11.3f} {r['algbw_bps'] / 1e6:>11.2f} {r['busbw_bps'] / 1e6:>11.2f}")
    return "\n".join(lines)
