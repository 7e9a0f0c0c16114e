"""Pictures for validation rows and for the long-haul experiment (matplotlib, Agg; pure: data in, file out).

* :func:`plot_dcqcn`: replica vs fluid model, per-flow rate and queue over time (real-world time axis).
* :func:`plot_ccdf`: Mininet-HiFi's CCDF of gap deviations.
* :func:`plot_red`: marked share per depth bin against the configured curve.
* :func:`plot_bars`: replica vs reference for scalar rows (delay, rate, goodput, bounds).
* :func:`plot_long_haul_timeseries`: per-QP rate, queue at the congestion point and CNP arrivals over
  time, ECN and fast CNP side by side.
* :func:`plot_gain_vs_distance`: the replica's gain with its confidence band, and the fluid prediction.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    _plt().close(fig)
    return path


def plot_dcqcn(data: dict, path: Path) -> Path:
    """``data``: t (emulated s), model_rates/replica_rates (samples x flows, bit/s), model_queue/replica_queue
    (packets), scale, kmin, kmax, window (emulated s), model_name (the legend's, default "fluid model")."""
    plt = _plt()
    scale = data["scale"]
    t_ms = np.asarray(data["t"]) / scale * 1e3
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    mr, rr = np.asarray(data["model_rates"]), np.asarray(data["replica_rates"])
    name = data.get("model_name", "fluid model")
    for i in range(mr.shape[1]):
        ax1.plot(t_ms, rr[:, i] * scale / 1e6, lw=0.8, label=f"replica flow {i + 1}")
        ax1.plot(t_ms, mr[:, i] * scale / 1e6, lw=1.2, ls="--", label=f"{name} flow {i + 1}")
    ax1.set_ylabel("rate R_C (Mb/s, real)")
    ax1.legend(fontsize=7, ncol=2)
    ax2.plot(t_ms, data["replica_queue"], lw=0.8, label="replica queue")
    ax2.plot(t_ms, data["model_queue"], lw=1.2, ls="--", label=f"{name} queue")
    for k, name in ((data["kmin"], "Kmin"), (data["kmax"], "Kmax")):
        ax2.axhline(k, color="grey", lw=0.6, ls=":")
        ax2.text(t_ms[-1], k, name, fontsize=7, ha="right", va="bottom")
    if "window" in data:
        for ax in (ax1, ax2):
            ax.axvspan(*(np.asarray(data["window"]) / scale * 1e3), color="orange", alpha=0.12)
    ax2.set_ylabel("bottleneck queue (packets)")
    ax2.set_xlabel(f"time (ms, real world; emulated x {scale:g})")
    ax2.legend(fontsize=7)
    return _save(fig, path)


def plot_ccdf(errors, path: Path, title: str) -> Path:
    plt = _plt()
    xs = np.sort(np.asarray(errors, dtype=float)) * 100
    fig, ax = plt.subplots(figsize=(6, 4))
    if xs.size:
        ax.step(xs, 1 - np.arange(1, xs.size + 1) / xs.size, where="post")
        ax.set_yscale("log")
    ax.axvline(10, color="grey", ls=":", lw=0.8)
    ax.set_xlabel("|gap - 1514*8/rate| / ideal (%)")
    ax.set_ylabel("CCDF")
    ax.set_title(title, fontsize=9)
    return _save(fig, path)


def plot_red(bins: list[dict], red: dict, path: Path) -> Path:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    mid = [(b["depth_from"] + b["depth_to"]) / 2 for b in bins]
    ax.plot(mid, [b["expected"] for b in bins], "--", label="configured curve (bin mean)")
    ax.plot(mid, [b["observed"] for b in bins], "o", label="replica marked share")
    ax.set_xlabel(f"queue depth at arrival ({red.get('unit', 'packets')})")
    ax.set_ylabel("marking probability")
    ax.set_title(f"RED Kmin {red.get('kmin')} Kmax {red.get('kmax')} Pmax {red.get('pmax')}", fontsize=9)
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_bars(label: str, replica: float, reference: float, unit: str, path: Path) -> Path:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(4.5, 3.5))
    ax.bar(["replica", "reference"], [replica, reference], color=["tab:blue", "tab:grey"])
    ax.set_ylabel(unit)
    ax.set_title(label, fontsize=8)
    return _save(fig, path)


def plot_long_haul_timeseries(modes: dict, path: Path, title: str = "") -> Path:
    """ECN and fast CNP side by side.

    Args:
        modes: ``{mode: {"qp_rates": {qp: (t_real_s, rate_bps_real)}, "queue": (t_real_s, packets),
               "cnp_times": {qp: [t_real_s, ...]}}}``; times are real-world seconds.
    """
    plt = _plt()
    names = list(modes)
    fig, axes = plt.subplots(3, len(names), figsize=(5.5 * len(names), 7), sharex="col", squeeze=False)
    for col, mode in enumerate(names):
        m = modes[mode]
        ax_r, ax_q, ax_c = axes[0][col], axes[1][col], axes[2][col]
        for qp, (t, r) in m.get("qp_rates", {}).items():
            ax_r.plot(np.asarray(t) * 1e3, np.asarray(r) / 1e9, lw=0.8, label=f"QP {qp}")
        ax_r.set_title(f"{mode}", fontsize=10)
        ax_r.set_ylabel("rate (Gb/s)")
        ax_r.legend(fontsize=7)
        t, q = m.get("queue", ([], []))
        ax_q.plot(np.asarray(t) * 1e3, q, lw=0.8, color="tab:red")
        ax_q.set_ylabel("queue at congestion point (pkts)")
        for i, (qp, times) in enumerate(m.get("cnp_times", {}).items()):
            ax_c.plot(np.asarray(times) * 1e3, np.full(len(times), i), "|", ms=8, label=f"QP {qp}")
        ax_c.set_ylabel("CNP arrivals")
        ax_c.set_xlabel("time (ms, real world)")
    if title:
        fig.suptitle(title, fontsize=10)
    return _save(fig, path)


def plot_gain_vs_distance(points: list[dict], path: Path, predicted: list[dict] | None = None,
                          title: str = "fast CNP gain over ECN", steady: list[dict] | None = None,
                          discrete: list[dict] | None = None) -> Path:
    """``points``: ``{"distance_km", "mean", "low", "high"}`` (gain as a fraction); ``predicted``:
    ``{"distance_km", "gain"}``, the fluid model of the same flows
    (:func:`testbed.validate.trials.predicted_flow_gain`); ``steady``: the same for long flows
    (:func:`testbed.validate.trials.predicted_gain`), drawn dotted; ``discrete``: ``{"distance_km", "gain",
    "low", "high"}``, the discrete simulation's paired mean over seeds with its 5-95 % range (error bars)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.5, 4))
    pts = sorted(points, key=lambda p: p["distance_km"])
    x = [p["distance_km"] for p in pts]
    ax.plot(x, [p["mean"] * 100 for p in pts], "o-", label="replica (mean of repetitions)")
    lows = [p["low"] for p in pts]
    if all(v is not None for v in lows):
        ax.fill_between(x, [p["low"] * 100 for p in pts], [p["high"] * 100 for p in pts], alpha=0.25,
                        label="95% confidence")
    if predicted:
        pr = sorted(predicted, key=lambda p: p["distance_km"])
        ax.plot([p["distance_km"] for p in pr], [p["gain"] * 100 for p in pr], "s--",
                label="fluid model, the same flows")
    if discrete:
        ds = sorted(discrete, key=lambda p: p["distance_km"])
        g = [p["gain"] * 100 for p in ds]
        ax.errorbar([p["distance_km"] for p in ds], g, fmt="D", color="tab:green", capsize=3,
                    yerr=[[v - p["low"] * 100 for v, p in zip(g, ds, strict=True)],
                          [p["high"] * 100 - v for v, p in zip(g, ds, strict=True)]],
                    label="discrete simulation, the same flows (5-95 %)")
    if steady:
        st = sorted(steady, key=lambda p: p["distance_km"])
        ax.plot([p["distance_km"] for p in st], [p["gain"] * 100 for p in st], "^:", color="grey",
                label="fluid model, steady state (long flows)")
    ax.axhline(0, color="grey", lw=0.6)
    ax.set_xlabel("long-haul distance (km)")
    ax.set_ylabel("goodput gain (%)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    return _save(fig, path)
