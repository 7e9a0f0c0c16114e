"""What the long-haul experiment prints and plots (pure apart from drawing; no root).

    trial_line(t)         a trial's health as it ends: losses and where, CPU, its data check, valid or why not
    print_table(rows, to) one line per trial, real-world units, its data check, its verdict (INVALID
                          trials say why)
    data_cell(check)      the data check in a word: "1500 ECT" (frames checked, all clean), "FAIL" or "-"
    summarise(rows)       per (case, km, mode): mean and 95% interval over the valid repetitions
    print_summary(groups, to)  that table, when a point has more than one repetition
    print_fct_classes(groups, to)  with a flow-size mix: FCT p50/p99 per message size, per point
    print_verdict(rows, to)    closing lines: invalid trials, saturation
    health_parts(rows)    each trial's emulator health in the shared shape (testbed.emu.runhealth)
                          (``to``: the run's data console, ``Results.out``: stdout, stderr with --json)
    plot(rows, path)      goodput, FCT p99, feedback delay and peak queue against distance, per case;
                          with repetitions the mean and its interval as a band
    plot_timeline(timelines, path, title)  one distance over time, ECN and fast CNP side by side: each
                          sender's DCQCN rate, the congestion point's queue, CNP arrivals
    plot_fct_classes(groups, path)  with a flow-size mix: FCT against message size, per case, mode, distance
"""

from __future__ import annotations

from pathlib import Path

from testbed.units import format_size
from testbed.validate import trial_ledger as TL
from testbed.validate.longhaul_setup import CASES, MODES
from testbed.validate.stats import confidence_interval

METRICS = ("throughput_mbps", "fct_p99_ms", "feedback_delay_ms", "queue_peak_pkts")


def trial_line(t: dict) -> str:
    """One trial's health on the console: the emulator's verdict, every lost frame and where, CPU, validity."""
    places = t["accounting"].get("places") or {}
    where = f" (emulator: {', '.join(f'{k} {n}' for k, n in places.items())})" if places else ""
    return (f"  emulator_ok: {t['emulator_ok']}; lost {t['accounting']['lost']}{where}, unaccounted "
            f"{t['unaccounted_losses']}; own CPU {t['emulator']['own_cores']:.2f} cores, machine "
            f"{t['cpu']['machine_mean']:.0f}%; data {data_cell(t.get('data_check'))}; {TL.label(t['validity'])}")


def data_cell(check: dict | None) -> str:
    """A trial's ``data_check`` (:func:`testbed.roce.sample.data_verdict`) in a word: the
    frames ``roce check --expect-ect`` passed, ``FAIL`` (the reasons are the trial's validity's) or ``-``
    (not checked: results from before the check)."""
    if check is None:
        return "-"
    return f"{check['packets']} ECT" if check["ok"] else "FAIL"


def print_table(rows, to) -> None:
    """One line per trial on ``to`` (a run's data console: stdout, stderr with --json)."""
    from rich.table import Table

    t = Table("case", "km", "mode", "goodput Mb/s", "FCT p50 ms", "FCT p99 ms", "queue peak", "queue mean",
              "feedback ms", "drops", "retx", "switch CNPs", "CNPs rx", "data", "sat.", "valid",
              title="long-haul congestion feedback (real-world units)")
    for x in rows:
        t.add_row(x["case"], f"{x['distance_km']:g}", x["mode"], f"{x['throughput_mbps']:.0f}",
                  _fmt(x["fct_p50_ms"]), _fmt(x["fct_p99_ms"]), str(x["queue_peak_pkts"]),
                  f"{x['queue_mean_pkts']:.1f}", _fmt(x["feedback_delay_ms"]), str(x["drops"]),
                  str(x["retransmissions"]), str(x["switch_cnps"]), str(x["cnps_at_senders"]),
                  data_cell(x.get("data_check")), "yes" if x["emulator_saturated"] else "",
                  "valid" if x["valid"] else "INVALID")
    to.print(t)
    for x in rows:
        if not x["valid"]:
            to.print(f"  {x['case']} {x['distance_km']:g} km {x['mode']}: {TL.label(x['validity'])}; "
                          + "; ".join(x["validity"]["reasons"][1:]))


def _fmt(v) -> str:
    return "-" if v is None else f"{v:.3f}"


def plot(rows, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = summarise(rows)
    cases = sorted({x["case"] for x in rows}, key=CASES.index)
    labels = ("goodput (Mb/s)", "FCT p99 (ms)", "feedback delay (ms)", "peak queue (pkts)")
    fig, axes = plt.subplots(len(cases), len(METRICS), figsize=(4 * len(METRICS), 3.2 * len(cases)), squeeze=False)
    for i, case in enumerate(cases):
        for j, (key, label) in enumerate(zip(METRICS, labels, strict=True)):
            ax = axes[i][j]
            for mode in MODES:
                pts = sorted((g["distance_km"], g[key]) for g in groups
                             if g["case"] == case and g["mode"] == mode and key in g)
                if not pts:
                    continue
                xs = [p[0] for p in pts]
                line, = ax.plot(xs, [p[1]["mean"] for p in pts], marker="o", label=mode)
                if all(p[1]["low"] is not None for p in pts):
                    ax.fill_between(xs, [p[1]["low"] for p in pts], [p[1]["high"] for p in pts],
                                    color=line.get_color(), alpha=0.2)
            ax.set_ylim(bottom=0)
            ax.set_title(f"{case}: {label}", fontsize=9)
            ax.set_xlabel("distance (km)")
            ax.grid(alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def summarise(rows) -> list[dict]:
    """Per (case, distance, mode) over its *valid* trials: n and, per metric, mean, low, high (95%)."""
    groups: dict = {}
    for x in rows:
        groups.setdefault((x["case"], x["distance_km"], x["mode"]), []).append(x)
    out = []
    for (case, km, mode), trials in sorted(groups.items(), key=lambda kv: (CASES.index(kv[0][0]), kv[0][1],
                                                                           MODES.index(kv[0][2]))):
        valid = [t for t in trials if t["valid"]]
        doc = {"case": case, "distance_km": km, "mode": mode, "trials": len(trials), "valid": len(valid)}
        for key in METRICS:
            values = [t[key] for t in valid if t.get(key) is not None]   # rows of older runs may lack one
            if values:
                doc[key] = _interval(values)
        classes = fct_classes(valid)
        if classes:
            doc["fct_by_size"] = classes
        out.append(doc)
    return out


def fct_classes(trials) -> list[dict]:
    """Per message size over ``trials`` (valid ones, with a size mix): {"bytes", "fct_p50_ms", "fct_p99_ms"},
    each the mean and 95% interval of the trials' own per-class figures, smallest size first."""
    per: dict[int, dict[str, list]] = {}
    for t in trials:
        for c in t.get("fct_by_size") or ():
            d = per.setdefault(c["bytes"], {"fct_p50_ms": [], "fct_p99_ms": []})
            for key in d:
                if c[key] is not None:
                    d[key].append(c[key])
    out = []
    for size, d in sorted(per.items()):
        doc = {"bytes": size}
        for key, values in d.items():
            if values:
                doc[key] = _interval(values)
        out.append(doc)
    return out


def _interval(values) -> dict:
    """A metric over repetitions as the summary keeps it: mean and 95% interval (low/high None with one)."""
    ci = confidence_interval(values)
    return {"mean": ci.mean, "low": ci.low, "high": ci.high, "n": ci.n}


def print_fct_classes(groups, to) -> None:
    """FCT per message size (real ms; mean over the valid repetitions, 95% interval with more than one),
    one line per point: what a flow-size mix is for. Nothing without a mix."""
    from rich.table import Table

    sizes = sorted({c["bytes"] for g in groups for c in g.get("fct_by_size", ())})
    if len(sizes) < 2:
        return
    t = Table("case", "km", "mode", *[f"{format_size(s)} p50 / p99" for s in sizes],
              title="flow completion time per message size (real ms, mean over valid repetitions)")
    for g in groups:
        by = {c["bytes"]: c for c in g.get("fct_by_size", ())}
        cells = []
        for s in sizes:
            c = by.get(s, {})
            p50, p99 = c.get("fct_p50_ms"), c.get("fct_p99_ms")
            cells.append("-" if p50 is None else f"{_ci_cell(p50)} / {_ci_cell(p99)}")
        t.add_row(g["case"], f"{g['distance_km']:g}", g["mode"], *cells)
    to.print(t)


def _ci_cell(m) -> str:
    """A summary metric (:func:`_interval`) in a table cell: mean [low, high], the mean alone, or "-"."""
    if m is None:
        return "-"
    return f"{m['mean']:.3g}" if m["low"] is None else f"{m['mean']:.3g} [{m['low']:.3g}, {m['high']:.3g}]"


def plot_fct_classes(groups, path: Path) -> bool:
    """FCT p50 (solid) and p99 (dotted) against message size, one panel per case, a colour per mode and
    distance; False (nothing drawn) without a mix."""
    sizes = sorted({c["bytes"] for g in groups for c in g.get("fct_by_size", ())})
    if len(sizes) < 2:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = sorted({g["case"] for g in groups}, key=CASES.index)
    fig, axes = plt.subplots(1, len(cases), figsize=(5.5 * len(cases), 3.8), squeeze=False)
    for ax, case in zip(axes[0], cases, strict=True):
        for g in (g for g in groups if g["case"] == case and g.get("fct_by_size")):
            pts = [(c["bytes"], c["fct_p50_ms"]["mean"], c.get("fct_p99_ms", {}).get("mean"))
                   for c in g["fct_by_size"] if c.get("fct_p50_ms")]
            line, = ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o",
                            label=f"{g['mode']} {g['distance_km']:g} km")
            ax.plot([p[0] for p in pts], [p[2] for p in pts], ls=":", color=line.get_color())
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(sizes, [format_size(s) for s in sizes])
        ax.set_title(f"{case}: FCT p50 (solid), p99 (dotted)", fontsize=9)
        ax.set_xlabel("message size")
        ax.set_ylabel("real ms")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def print_summary(groups, to) -> None:
    from rich.table import Table

    t = Table("case", "km", "mode", "valid/trials", *METRICS, title="mean and 95% interval over valid repetitions")
    for g in groups:
        t.add_row(g["case"], f"{g['distance_km']:g}", g["mode"], f"{g['valid']}/{g['trials']}",
                  *[_ci_cell(g.get(key)) for key in METRICS])
    to.print(t)


#: Per-trial fields of summary.json and metrics.json.
SUMMARY_KEYS = ("case", "distance_km", "mode", "repetition", "throughput_mbps", "fct_p50_ms", "fct_p99_ms",
                "fct_by_size",
                "queue_peak_pkts", "feedback_delay_ms", "drops", "valid", "validity", "emulator_ok", "data_check")
METRICS_KEYS = ("case", "distance_km", "mode", "repetition", "valid", "validity", "emulator_ok", "health",
                "unaccounted_losses", "accounting")


def documents(rows, scale: float, health: dict) -> tuple[dict, dict]:
    """``(metrics.json, summary.json)`` of a run: emulator health (``health``: the run's ``Results.health``
    block of :func:`health_parts`) and every trial's ledger; the rows, the per-point summary and the run's
    verdict."""
    saturated = any(x["emulator_saturated"] for x in rows)
    metrics = {**health, "trials": [{k: x[k] for k in METRICS_KEYS} for x in rows]}
    summary = {"rows": [{k: x[k] for k in SUMMARY_KEYS} | {"emulated": x["emulated"],
                                                           "emulator_saturated": x["emulator_saturated"]}
                        for x in rows],
               "summary": summarise(rows), "emulator_saturated": saturated, "emulator_ok": health["emulator_ok"],
               "invalid_trials": sum(1 for x in rows if not x["valid"]), "scale": scale}
    return metrics, summary


def health_parts(rows) -> dict:
    """Each trial's emulator health in the shape every run writes (:func:`testbed.emu.runhealth.assess`):
    its frame ledger's evidence, its CPU, and every reason to distrust it (saturation and ledger), keyed
    ``"case km mode #repetition"``; ``Results.health`` joins them into the run's ``emulator_ok`` block."""
    from testbed.emu.runhealth import assess

    return {f"{x['case']} {x['distance_km']:g} km {x['mode']} #{x['repetition']}":
            assess(cpu=x["cpu"], ledger=x["emulator"], reasons=x["health"]["reasons"]) for x in rows}


def print_verdict(rows, to) -> None:
    """The run's closing lines: how many trials are invalid, saturation (``Results.health`` says the
    emulator's health)."""
    invalid = [x for x in rows if not x["valid"]]
    if invalid:
        to.print(f"[yellow]{len(invalid)} of {len(rows)} trials are INVALID (column 'valid'): they are "
                      "not results of their mode[/yellow]")
    if any(x["emulator_saturated"] for x in rows):
        to.print("[yellow]the emulator saturated in some trials (column 'sat.'): do not read those "
                      "rows as protocol behaviour[/yellow]")


def plot_timeline(timelines: dict, path: Path, title: str) -> None:
    """``timelines``: {(case, mode): :func:`testbed.validate.longhaul_setup.timeline`}; one row of three panels
    (rate, queue, CNPs) per case and mode, the modes of a case next to each other, real-world time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = [c for c in CASES if any(k[0] == c for k in timelines)]
    modes = [m for m in MODES if any(k[1] == m for k in timelines)]
    if not cases or not modes:
        return
    fig, axes = plt.subplots(3 * len(cases), len(modes), figsize=(6 * len(modes), 7 * len(cases)),
                             squeeze=False, sharex=True, sharey="row")   # the modes on the same scales
    for i, case in enumerate(cases):
        for j, mode in enumerate(modes):
            tl = timelines.get((case, mode))
            ax_rate, ax_queue, ax_cnp = (axes[3 * i + k][j] for k in range(3))
            ax_rate.set_title(f"{case}, {mode}", fontsize=10)
            if tl is None:
                continue
            for k, (s, series) in enumerate(sorted(tl["rate"].items())):
                ax_rate.step(series["t_ms"], series["rate_gbps"], where="post", label=f"{s} (QP rate)")
                ax_cnp.eventplot([tl["cnps"].get(s, [])], lineoffsets=k, linelengths=0.8, colors=f"C{k}")
            ax_queue.plot(tl["queue"]["t_ms"], tl["queue"]["pkts"], color="C3")
            ax_rate.set_ylabel("DCQCN rate (Gb/s)")
            ax_queue.set_ylabel("queue at the\ncongestion point (pkts)")
            ax_cnp.set_ylabel("CNPs at senders")
            ax_cnp.set_yticks(range(len(tl["rate"])), sorted(tl["rate"]))
            ax_cnp.set_xlabel("time (real ms)")
            ax_rate.legend(fontsize=7, loc="upper right")
            for ax in (ax_rate, ax_queue):
                ax.set_ylim(bottom=0)
                ax.grid(alpha=0.3)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
