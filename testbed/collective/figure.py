"""``busbw.png`` of a collective run: what it draws (pure: series from the nccl-tests rows) and the drawing.

    +-- bandwidth ------------------------+   +-- allreduce, fraction of each one's link --+
    | emulated Mb/s        real GB/s (x s) |   | algbw/link (solid) busbw/link (dashed)     |
    |  one series per (job, collective,    |   |  one series per replica (``compare``):     |
    |  algorithm, skew): busbw filled,     |   |  ring on small at 10 Mbit/s, in-network on |
    |  algbw hollow; the host-link rate    |   |  agg-leaf at 4 Mbit/s; 1.0 = the link      |
    +--------------------------------------+   +--------------------------------------------+
               size (KiB / MiB, the same in both worlds)

Why fractions in the second panel: two replicas at different emulated link rates (the aggregation switch on
BMv2 sustains 4 x 4 Mbit/s, the OVS fabric runs 10 Mbit/s) have different times and Mb/s for the same
real fabric, but algbw over the link rate is what each would reach on its real 100G links. ``busbw`` is
nccl-tests' ``algbw x 2(n-1)/n`` for allreduce: it assumes each link carries 2(n-1)/n of the size, as a ring
does; the switch moves ~1x, so its busbw exceeds 1 of the link while its algbw is the fair comparison.
"""

from __future__ import annotations

from testbed.collective.metrics import bus_factor
from testbed.errors import SpecError


def size_label(nbytes: int) -> str:
    """Binary size for an axis tick: 65536 -> ``64 KiB``, 4194304 -> ``4 MiB``, 1536 -> ``1.5 KiB``."""
    for unit, f in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= f:
            return f"{nbytes / f:g} {unit}"
    return f"{nbytes:g} B"


def series(jobs: list[dict]) -> list[dict]:
    """The left panel's lines: each job's rows grouped by (collective, algorithm, skew) in the order they ran,
    sorted by size, so a sweep of one collective is a line and the others at one size are points (not one
    line zig-zagging through every collective). The job's name leads the label when there are several jobs."""
    out: dict = {}
    named = len([j for j in jobs if j.get("rows")]) > 1
    for j in jobs:
        for r in j.get("rows") or []:
            skew = r.get("skew", 1.0)
            key = (j["name"], r["collective"], r.get("algorithm"), skew)
            if key not in out:
                what = r["collective"] + (f" ({r['algorithm']})" if r.get("algorithm") else "")
                what += f" skew {skew:g}" if skew != 1 else ""
                out[key] = {"label": f"{j['name']} {what}" if named else what, "rows": []}
            out[key]["rows"].append(r)
    lines = []
    for s in out.values():
        rows = sorted(s["rows"], key=lambda r: r["size_bytes"])
        lines.append({"label": s["label"], "sizes": [r["size_bytes"] for r in rows],
                      "busbw_bps": [r["busbw_bps"] for r in rows], "algbw_bps": [r["algbw_bps"] for r in rows]})
    return lines


def link_fractions(label: str, rows: list[dict], link_rate_bps: float, scale: float,
                   algorithm: str | None = None) -> dict:
    """One replica's allreduce rows (of ``algorithm`` if given) as fractions of its own host-link rate, by size:
    ``algbw_over_link`` and ``busbw_over_link`` (nccl-tests: algbw x 2(n-1)/n, from each row's rank count).
    ``real_link_bps`` (link rate x scale) is the real fabric's rate the fraction applies to.

    Raises:
        SpecError: a link rate or scale that is not positive (no fraction of it means anything).
    """
    if not link_rate_bps > 0 or not scale > 0:
        raise SpecError("link_rate_bps", f"fractions need a positive link rate and scale, got {link_rate_bps!r}, "
                                         f"{scale!r}")
    rows = sorted((r for r in rows if r["collective"] == "allreduce"
                   and (algorithm is None or r.get("algorithm") == algorithm)), key=lambda r: r["size_bytes"])
    return {"label": label, "link_rate_bps": link_rate_bps, "real_link_bps": link_rate_bps * scale,
            "sizes": [r["size_bytes"] for r in rows],
            "algbw_over_link": [r["algbw_bps"] / link_rate_bps for r in rows],
            "busbw_over_link": [r["algbw_bps"] * bus_factor("allreduce", r["ranks"]) / link_rate_bps for r in rows]}


def _size_axis(ax, sizes) -> None:
    ax.set_xscale("log", base=2)
    ticks = sorted(set(sizes))
    if ticks:
        ax.set_xticks(ticks, [size_label(s) for s in ticks])
        ax.minorticks_off()
        if len(ticks) == 1:
            ax.set_xlim(ticks[0] / 2, ticks[0] * 2)
    ax.set_xlabel("size per rank (bytes, as in the real fabric)")


def plot(jobs: list[dict], link_rate_bps: float, path, scale: float | None = None, compare: tuple = (),
         title: str | None = None) -> None:
    """Draw ``busbw.png``: the jobs' bandwidths (emulated Mb/s; real-world GB/s on a right axis when ``scale``
    is given), and with ``compare`` (:func:`link_fractions` of each replica) a second panel of fractions."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    from testbed.units import format_rate

    compare = [c for c in compare if c["sizes"]]
    fig, axes = plt.subplots(1, 2 if compare else 1, figsize=(12.5 if compare else 6.5, 4.6), squeeze=False)
    ax = axes[0][0]
    lines = series(jobs)
    markers = "osD^v<>ph*"
    for k, s in enumerate(lines):
        colour, marker = f"C{k % 10}", markers[k % len(markers)]
        ax.plot(s["sizes"], [b / 1e6 for b in s["busbw_bps"]], marker=marker, color=colour, label=s["label"])
        ax.plot(s["sizes"], [b / 1e6 for b in s["algbw_bps"]], marker=marker, color=colour, ls=":", mfc="none")
    ax.axhline(link_rate_bps / 1e6, color="grey", ls="--", label=f"host link {format_rate(link_rate_bps)}")
    slow = [min(x["emulated_bps"] for x in j["nics"]["ranks"]) for j in jobs
            if (j.get("nics") or {}).get("heterogeneous")]
    if slow:
        ax.axhline(min(slow) / 1e6, color="tab:red", ls=":", label="slowest NIC")
    _size_axis(ax, [x for s in lines for x in s["sizes"]])
    ax.set_ylim(bottom=0)
    ax.set_ylabel("emulated Mb/s (filled: busbw, hollow dotted: algbw)")
    if scale:
        right = ax.secondary_yaxis("right", functions=(lambda m, f=scale: m * f / 8e3, lambda g, f=scale: g * 8e3 / f))
        right.set_ylabel(f"real-world GB/s (x {scale:,.0f})")
        ax.set_title(f"bandwidth, {format_rate(link_rate_bps)} links = {format_rate(link_rate_bps * scale)} real",
                     fontsize=9)
    ax.legend(fontsize=7, loc="best")
    if compare:
        _fractions_panel(axes[0][1], compare, Line2D, format_rate)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _fractions_panel(ax, compare: list[dict], Line2D, format_rate) -> None:
    """Allreduce algbw (solid) and busbw (dashed) over each replica's own link rate; real GB/s on the right
    axis when every replica emulates the same real link rate (then 1.0 is that rate for all of them)."""
    for k, c in enumerate(compare):
        colour = f"C{k % 10}"
        ax.plot(c["sizes"], c["algbw_over_link"], marker="o", color=colour,
                label=f"{c['label']}, {format_rate(c['link_rate_bps'])} links")
        ax.plot(c["sizes"], c["busbw_over_link"], marker="s", color=colour, ls="--", mfc="none")
    ax.axhline(1.0, color="grey", ls="-", lw=0.8)
    _size_axis(ax, [x for c in compare for x in c["sizes"]])
    ax.set_ylim(0, max(1.1, max(v for c in compare for v in c["busbw_over_link"]) * 1.1))
    ax.set_ylabel("fraction of its own host-link rate")
    real = {c["real_link_bps"] for c in compare}
    if len(real) == 1:
        r = real.pop()
        ax.secondary_yaxis("right", functions=(lambda x, r=r: x * r / 8e9, lambda g, r=r: g * 8e9 / r)).set_ylabel(
            f"real-world GB/s at {format_rate(r)} links")
    ax.set_title("allreduce: the link rates differ, so fractions compare (1.0 = the link)", fontsize=9)
    style = [Line2D([], [], color="black", marker="o", label="solid: algbw / link"),
             Line2D([], [], color="black", marker="s", mfc="none", ls="--",
                    label="dashed: busbw / link = algbw x 2(n-1)/n / link")]
    ax.legend(handles=ax.get_legend_handles_labels()[0] + style, fontsize=7, loc="best")
