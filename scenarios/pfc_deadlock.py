"""A PFC deadlock on a ring, and the PFC watchdog breaking it (issue 16).

::

    h0   h1   h2   h3   h4          ring of 5 OVS switches under the fabric controller, one host each;
    |    |    |    |    |           every link a link node with PFC (testbed/plan/pfc.py)
    x0 - x1 - x2 - x3 - x4 - (x0)   flows h_i -> h_(i+2): two hops clockwise, the only shortest path

Every ring channel x_j -> x_(j+1) carries two of the flows (h_j's first hop, h_(j-1)'s second), each at
60 % of the line rate: 1.2 x what it can send. Each channel's queue crosses xoff and pauses its feeders,
among them the previous ring channel, whose frames wait for room in this one: the buffer dependencies
close a cycle (``testbed pfc deadlock`` finds it in the routes: x0 -> x1 -> x2 -> x3 -> x4 -> x0). Once every
channel of the cycle is full and paused by the next, nothing moves, for ever: a deadlock (Hu et al.,
HotNets'16). The same replica with the PFC watchdog (storm after 0.5 ms real paused with frames queued,
then drop that queue's frames; restore after 0.5 ms without PAUSE) breaks it: the storm is declared, the
paused queues drop, traffic moves again (and may lock again; each time the watchdog breaks it).

Per trial: per flow sent / received / lost and delivered per 0.25 s; per ring channel at the end whether it
is paused and how many frames it still holds; storms and watchdog drops; the ledger (sent = received +
dropped + held in a queue + unaccounted). ``pfc_deadlock.png``: the flows' delivered rate over time, both
trials. Real fabric -> replica: 100G, 2 m links, scale 20000 (5 Mbit/s: the ring keeps OVS below ~6 kpps);
watchdog times dilated (25 us real -> 0.5 s).

    sudo testbed run pfc_deadlock --quick     # both trials, 3 s of traffic each (~1 min)
    sudo testbed run pfc_deadlock             # 6 s each
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

if __name__ == "__main__" and __package__ is None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from testbed.console import console, require_root  # noqa: E402
from testbed.pfc.streams import FRAME, judge, run_streams  # noqa: E402
from testbed.scenario import Results, run_main, scenario_parser  # noqa: E402

NAME = "pfc_deadlock"
NO_FAILURES = "a deadlock needs every ring link up; a failure would break the cycle this run is about"
RING = 5
LOAD = 0.6                     # of the line rate, per flow; two flows per ring channel
ROCE_TOS, PRIORITY = 26 << 2, 3
WATCHDOG = {"detect": "25us", "restore": "25us", "action": "drop"}
SPEC = {"name": "pfc-ring", "kind": "torus", "params": {"dims": [RING], "hosts_per_switch": 1},
        "links": {"default": {"rate": "100G", "distance": "2m"}}, "buffer": "100KB", "scale": 20000,
        "pfc": {"priorities": [PRIORITY], "xoff": "40KB"}}
FLOWS = [(f"h{i}", f"h{(i + 2) % RING}") for i in range(RING)]
CYCLE = [f"x{j}>x{(j + 1) % RING}" for j in range(RING)]


def _args(argv):
    p = scenario_parser(__doc__, prog=f"testbed run {NAME}", refuse_failures=NO_FAILURES)
    p.add_argument("--seconds", type=float, default=None, help="how long the flows send (quick 3, else 6)")
    return p.parse_args(argv)


def verdict(trial: dict) -> dict:
    """What a trial shows (pure): the ring channels' state at the end, whether the flows froze (nothing
    delivered in the second half of the sending time), storms and watchdog drops."""
    last_s = trial["seconds"] / 2
    flat = {d: c for dirs in trial["hops"].values() for d, c in dirs.items()}
    ring = {d: flat.get(d, {}) for d in CYCLE}
    bins = int(round(last_s / trial["bin_s"]))
    end = int(round(trial["seconds"] / trial["bin_s"]))
    tail = {k: sum(s["delivered_per_bin"][max(0, end - bins):end]) for k, s in trial["streams"].items()}
    return {"ring_paused_at_end": sum(1 for c in ring.values() if c.get("paused_now")),
            "ring_held_frames": sum(c.get("queued", 0) for c in ring.values()),
            "delivered_second_half": sum(tail.values()),
            "frozen": all(v == 0 for v in tail.values()),
            "deadlocked": all(c.get("paused_now") and c.get("queued", 0) > 0 for c in ring.values()),
            "storms": sum(c.get("storms", 0) for c in flat.values()),
            "watchdog_drops": sum(c.get("drop_pfc_watchdog", 0) for c in flat.values())}


def _trial(spec: dict, label: str, seconds: float, out_dir: Path) -> dict:
    """Build the ring replica (with its controller), run the flows, tear it down."""
    from controllers.launch import start_controller
    from testbed.doctor import plan_capabilities
    from testbed.emu import Replica, RunRegistry
    from testbed.links.node import DelayLineNode
    from testbed.plan import Overrides, plan_replica
    from testbed.topo.spec import build_graph, parse_spec

    G = build_graph(parse_spec(spec, source=NAME))
    plan = plan_replica(G, plan_capabilities(), Overrides(seed=1))
    if plan.pfc is None or not plan.pfc.applied:
        raise RuntimeError(f"the plan did not apply PFC: {plan.pfc.note if plan.pfc else 'no pfc block'}")
    out_dir.mkdir(parents=True, exist_ok=True)
    with RunRegistry(NAME) as run:
        ctl = start_controller(run, G, out_dir, lldp_interval=0)
        with Replica(plan, controller=ctl.address, run=run, out_dir=out_dir, name=NAME,
                     link_node_class=DelayLineNode) as rep:
            ctl.wait_ready()
            for src, dst in FLOWS:     # the routes are in place before the flows start
                rep.host(src).cmd(f"ping -c1 -W2 {rep.ip(dst)}")
            pps = LOAD * rep.plan.link("h0", "x0").applied.rate_bps / (FRAME * 8)
            console.print(f"{label}: {len(FLOWS)} flows h_i -> h_i+2 at {LOAD:.0%} of the line rate, {seconds:g} s")
            t = run_streams(rep, FLOWS, ROCE_TOS, PRIORITY, seconds, pps, out_dir, label.replace(" ", "-"), idle=3.0)
    t["label"] = label
    t["verdict"] = verdict(t)
    # frames a deadlock holds are accounted (ledger "held"); what is neither received, dropped nor held is not
    t["health"] = judge(t)
    return t


def _plot(trials: list, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(trials), figsize=(6 * len(trials), 4), squeeze=False, sharey=True)
    for ax, t in zip(axes[0], trials, strict=True):
        b = t["bin_s"]
        for key, s in sorted(t["streams"].items()):
            bins = s["delivered_per_bin"]
            ax.step([i * b for i in range(len(bins))], [n * FRAME * 8 / b / 1e6 for n in bins], where="post",
                    lw=0.9, label=key)
        ax.axvline(t["seconds"], ls="--", c="k", lw=0.6)
        v = t["verdict"]
        ax.set_title(f"{t['label']}: {'DEADLOCK' if v['deadlocked'] else 'moving'}, storms {v['storms']}, "
                     f"watchdog drops {v['watchdog_drops']}", fontsize=9)
        ax.set_xlabel("s since the flows started (dashed: they stop sending)")
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("delivered, Mbit/s (emulated)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _print(trials: list, to) -> None:
    from rich.table import Table

    t = Table("trial", "sent", "received", "dropped (watchdog)", "held at end", "unaccounted",
              "ring channels paused at end", "delivered in 2nd half", "storms", "result", "valid",
              title=f"PFC on a ring of {RING}: flows h_i -> h_i+2 at {LOAD:.0%} each")
    for tr in trials:
        v, led = tr["verdict"], tr["ledger"]
        t.add_row(tr["label"], str(led["sent"]), str(led["received"]), f"{led['dropped']} ({v['watchdog_drops']})",
                  str(led["held"]), str(led["unaccounted"]), f"{v['ring_paused_at_end']}/{RING}",
                  str(v["delivered_second_half"]), str(v["storms"]),
                  "DEADLOCK" if v["deadlocked"] else ("frozen" if v["frozen"] else "moving"),
                  "valid" if tr["valid"] else "INVALID")
    to.print(t)


def main(argv=None) -> int:
    args = _args(argv)
    require_root(f"testbed run {NAME}")
    seconds = args.seconds or (3.0 if args.quick else 6.0)
    watched = json.loads(json.dumps(SPEC))
    watched["pfc"]["watchdog"] = WATCHDOG
    with Results(NAME, args, config={"spec": SPEC, "watchdog": WATCHDOG, "seconds": seconds, "load_per_flow": LOAD,
                                      "flows": FLOWS}) as res:
        trials = [_trial(SPEC, "no watchdog", seconds, res.dir),
                  _trial(watched, "watchdog drop", seconds, res.dir / "watchdog")]
        _print(trials, res.out)
        block = res.health({t["label"]: t.pop("health") for t in trials})
        rows = [{"trial": t["label"], **t["verdict"], **{k: t["ledger"][k] for k in
                                                         ("sent", "received", "dropped", "held", "unaccounted")},
                 "valid": t["valid"]} for t in trials]
        res.write_json("metrics.json", {"rows": rows, "trials": trials, **block})
        _plot(trials, res.path("pfc_deadlock.png"))
        res.finish({"rows": rows, "all_valid": all(r["valid"] for r in rows), "emulator_ok": block["emulator_ok"]})
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
