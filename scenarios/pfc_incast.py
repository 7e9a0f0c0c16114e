"""N:1 incast with and without PFC: the RoCE priority stays lossless, the lossy one drops (issue 16).

    netns S0 [h0] -- L0 (NIC) --\\
    netns S1 [h1] -- L1 (NIC) ---+  tc fan-in switch  -- LR (bottleneck, 1 x line rate) -- [r0] netns R
      ...                       /   (PAUSE from LR is relayed to every NIC)
    netns Sk [hk] -- Lk (NIC) -/

Every hop is a link core (``testbed/links/core``) running PFC (``testbed/pfc/link.py``'s model): the
bottleneck LR accounts priority 3 (DSCP 26, RoCE) per ingress, sends PAUSE at xoff and XON at xon out of its
upstream side; the NICs hold priority 3 while paused (their queue is the host's memory). Each sender
offers 45 % of the line rate on priority 3 and 45 % on priority 0 (lossy), so the bottleneck is offered
N x 0.9 of its rate. With PFC off the same data path runs with no lossless priority (tail drop for all).

Then a stuck receiver (``testbed.pfc.storm``: PAUSE refreshed for ``--storm`` seconds, the bottleneck's
egress held) without and with the PFC watchdog (detect/restore 0.5 ms real = 0.5 s emulated, drop): without
it the pause spreads to every sender for the whole storm; with it the storm is declared on the bottleneck's
queue, its priority-3 frames are dropped (``pfc_watchdog``) and the senders run again. The storm starts
before the senders (its first PAUSE is out when they begin) and they send for ``--storm`` plus
``--seconds``, so the watchdog's restoration is followed by traffic that is delivered again.

What it shows, per trial: the per-priority frame ledger (sent, where each drop happened, delivered,
unaccounted = 0), PAUSE/XON frames sent and received and the time each sender was paused (emulated and
real), the bottleneck's queue and the senders' pause state over time (``pfc_incast.png``), the emulator's
PFC reaction lag against what the headroom covers, and emulator health (late frames, socket drops, CPU).
A trial whose emulator was unhealthy says so (``valid: false``); its numbers are not protocol behaviour.

Real fabric -> replica: 20G links at scale 1000 -> 20 Mbit/s; pause quanta at the real 20G, dilated.

    sudo testbed run pfc_incast --quick     # 4:1, PFC on and off (~30 s)
    sudo testbed run pfc_incast             # 4:1 and 8:1
"""

from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__" and __package__ is None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from testbed.console import console, require_root  # noqa: E402
from testbed.emu.registry import RunRegistry  # noqa: E402
from testbed.emu.runhealth import assess  # noqa: E402
from testbed.links.wire import name_prefix  # noqa: E402
from testbed.pfc.config import PfcConfig, WatchdogParams  # noqa: E402
from testbed.pfc.fanin import FanIn, IncastParams, run_trial  # noqa: E402
from testbed.scenario import Results, run_main, scenario_parser  # noqa: E402

NAME = "pfc_incast"
#: why ``--failures`` is refused here (a scenario takes a failure schedule or says why not)
NO_FAILURES = (
    "its hops are link cores with no replica, controller or per-link interface to fail; its fault is "
    "the stuck receiver (--storm)")
RATE = 20e6
ROCE_TOS, LOSSY_TOS = 26 << 2 | 2, 0


def _args(argv):
    p = scenario_parser(__doc__, prog=f"testbed run {NAME}", refuse_failures=NO_FAILURES)
    p.add_argument("--seconds", type=float, default=1.5, help="how long the senders send (default 1.5)")
    p.add_argument("--xoff", type=float, default=30e3, help="bottleneck xoff, bytes (default 30000)")
    p.add_argument("--storm", type=float, default=3.0, help="seconds the receiver is stuck (default 3)")
    p.add_argument("--headroom", type=float, default=50e3,
                   help="bottleneck headroom per ingress port, bytes (default 50000; the formula gives "
                        "10.3 KB at the real 20G, which leaves < 1 ms for the emulator's reaction)")
    return p.parse_args(argv)


def _flows(n: int) -> list:
    return [(i, tos, 0.45 * RATE / 8000) for i in range(n) for tos in (ROCE_TOS, LOSSY_TOS)]


def _row(n: int, res: dict) -> dict:
    led = res["ledger"]["priorities"]
    lr = res["pfc"].get("LR", {}).get("a>b", {})
    nics = [res["pfc"][f"L{i}"]["a>b"]["egress"].get("3", {}) for i in range(n) if res["pfc"].get(f"L{i}")]
    wd = lr.get("watchdog") or {}
    lr_eg = lr.get("egress", {}).get("3", {})
    return {"senders": n, "pfc": res["params"]["pfc_on"], "storm_s": res.get("storm_s"),
            "watchdog": (res["params"]["pfc"].get("watchdog") or {}).get("action"), "valid": res["valid"],
            "invalid_because": sorted(k for k, v in res["checks"].items() if not v),
            "roce_sent": led["3"]["sent"], "roce_dropped": led["3"]["dropped"],
            "lossy_sent": led["0"]["sent"], "lossy_dropped": led["0"]["dropped"],
            "unaccounted": sum(r["unaccounted"] for r in led.values()),
            "pause_sent": lr.get("ingress", {}).get("3", {}).get("pause_sent", 0),
            "xon_sent": lr.get("ingress", {}).get("3", {}).get("xon_sent", 0),
            "paused_s_mean": sum(e.get("paused_s", 0.0) for e in nics) / len(nics) if nics else 0.0,
            "paused_real_s_mean": sum(e.get("paused_real_s", 0.0) for e in nics) / len(nics) if nics else 0.0,
            "max_bytes": lr.get("ingress", {}).get("3", {}).get("max_bytes", 0),
            "reaction_worst_ms": res["reaction"]["worst_s"] * 1e3,
            "reaction_allowance_ms": (res["params"]["reaction_allowance_s"] or 0) * 1e3,
            "bottleneck_paused_s": lr_eg.get("paused_s", 0.0), "storms": wd.get("3", {}).get("storms", 0),
            "storm_time_s": wd.get("3", {}).get("storm_s", 0.0),
            "watchdog_drops": led["3"]["drops"].get("bottleneck_drop_pfc_watchdog", 0),
            "machine_cpu_mean": res["cpu"]["machine_mean"], "late_frames": res["emulator_late"],
            "late_fraction": res["late_fraction"], "host_steal": res["host_steal"]}


def _health(trial: dict) -> dict:
    """A trial's emulator health (its link cores' stats taken out of the trial): lateness, socket losses,
    the per-priority ledger's unaccounted frames, CPU, and the checks only this scenario makes."""
    stats = trial.pop("stats")
    checks, react = trial["checks"], trial["reaction"]
    reasons = []
    if not checks.get("reaction_within_headroom", True):
        reasons.append(f"PFC reaction {react['worst_s'] * 1e3:.1f} ms beyond the "
                       f"{trial['params']['reaction_allowance_s'] * 1e3:.1f} ms the headroom covers")
    if not checks["delivered_equals_receiver"]:
        led = trial["ledger"]
        reasons.append(f"the bottleneck sent {led['bottleneck_tx_packets']} frames, the receiver got "
                       f"{led['receiver_packets']}")
    unaccounted = sum(r["unaccounted"] for r in trial["ledger"]["priorities"].values())
    return assess(cpu=trial["cpu"], link_stats=stats, unaccounted=unaccounted, reasons=reasons)


def _print_rows(rows: list[dict], labels: list[str], to) -> None:
    """One line per trial on the run's data console: the RoCE ledger, PAUSE, reaction lag, verdict."""
    from rich.table import Table

    t = Table("trial", "RoCE sent", "RoCE dropped", "lossy dropped", "unaccounted", "PAUSE sent",
              "paused s (real)", "reaction ms (allowance)", "watchdog drops", "valid",
              title=f"PFC incast at {RATE / 1e6:g} Mbit/s emulated (scale 1000)")
    for label, r in zip(labels, rows, strict=True):
        t.add_row(label, str(r["roce_sent"]), str(r["roce_dropped"]), str(r["lossy_dropped"]), str(r["unaccounted"]),
                  str(r["pause_sent"]), f"{r['paused_real_s_mean']:.4f}",
                  f"{r['reaction_worst_ms']:.1f} ({r['reaction_allowance_ms']:.1f})", str(r["watchdog_drops"]),
                  "valid" if r["valid"] else "INVALID: " + ", ".join(r["invalid_because"]))
    to.print(t)


def _plot(trials: list, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(trials), figsize=(5 * len(trials), 6), squeeze=False, sharex="col")
    for col, (label, res) in enumerate(trials):
        lr = res["series"].get("LR", [])
        t0 = lr[0][0] if lr else 0.0
        ax = axes[0][col]
        ax.plot([s[0] - t0 for s in lr], [s[2] / 1e3 for s in lr], lw=0.8)
        if res["params"]["pfc_on"]:
            xoff = res["params"]["pfc"]["xoff_bytes"] / 1e3
            ax.axhline(xoff, ls="--", c="k", lw=0.6, label="xoff")
            ax.axhline(xoff + res["params"]["headroom_bytes"] / 1e3, ls=":", c="r", lw=0.6, label="xoff + headroom")
            ax.legend(fontsize=7)
        ax.set_title(label, fontsize=9)
        ax.set_ylabel("bottleneck queue, all priorities (KB)")
        ax = axes[1][col]
        for name, series in sorted(res["series"].items()):
            if name == "LR" or not series:
                continue
            idx = int(name[1:])
            ax.step([s[0] - t0 for s in series], [idx + 0.8 * (s[3] >> 3 & 1) for s in series], where="post", lw=0.8)
        ax.set_ylabel("sender k: priority 3 paused (k + 0.8)")
        ax.set_xlabel("emulated time (s)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    args = _args(argv)
    require_root(f"testbed run {NAME}")
    counts = (4,) if args.quick else (4, 8)
    with Results(NAME, args, config={"rate_bps": RATE, "scale": 1000, "counts": counts}) as res:
        rows, trials, health = [], [], {}
        with RunRegistry(NAME) as run:
            for n in counts:
                fan = FanIn(run, name_prefix(str(n)), res.dir, n)
                fan.build()
                pfc = PfcConfig(priorities=(3,), xoff_bytes=args.xoff, xon_bytes=args.xoff - 2 * 1538,
                                headroom_bytes=n * args.headroom)
                for on in (True, False):
                    console.print(f"{n}:1 incast, PFC {'on' if on else 'off'}")
                    trial = run_trial(fan, IncastParams(senders=n, rate_bps=RATE, pfc=pfc, pfc_on=on),
                                      _flows(n), args.seconds, capture=res.path(f"pfc-{n}-{on}.pcap") if on else None)
                    label = f"{n}:1, PFC {'on' if on else 'off'}"
                    health[label] = _health(trial)
                    rows.append(_row(n, trial))
                    trials.append((label, trial))
                if n != counts[0]:
                    continue
                for wd in (None, WatchdogParams(detect_s=0.5e-3, restore_s=0.5e-3, action="drop")):
                    label = f"{n}:1, stuck receiver {args.storm:g} s, watchdog {'drop' if wd else 'off'}"
                    console.print(label)
                    storm_pfc = PfcConfig(priorities=(3,), xoff_bytes=pfc.xoff_bytes, xon_bytes=pfc.xon_bytes,
                                          headroom_bytes=pfc.headroom_bytes, watchdog=wd)
                    trial = run_trial(fan, IncastParams(senders=n, rate_bps=RATE, pfc=storm_pfc), _flows(n),
                                      args.storm + args.seconds, storm_s=args.storm)
                    health[label] = _health(trial)
                    rows.append(_row(n, trial))
                    trials.append((label, trial))
        _print_rows(rows, [label for label, _ in trials], res.out)
        block = res.health(health)
        res.write_json("metrics.json", {"rows": rows, "trials": [{"label": k, **v} for k, v in trials], **block})
        _plot(trials, res.path("pfc_incast.png"))
        res.finish({"rows": rows, "all_valid": all(r["valid"] for r in rows), "emulator_ok": block["emulator_ok"]})
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
