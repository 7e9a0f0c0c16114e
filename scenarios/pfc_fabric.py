"""PFC inside a fabric replica: 4:1 incast on a spine-leaf of OVS switches, lossy and lossless (issue 16).

::

    h0 h1 h2 --- l0 === s0 === l1 --- h3 h4 h5          senders h0 h1 h2 h3 -> receiver h4
      (NICs)        100 m        (h4: the incast port)

Every link is a link node (the replica plan chooses them because the spec has ``pfc:``; testbed/plan/pfc.py):
a direction u->v is switch u's egress to v, a host's side is its NIC. The same replica runs two trials of the
same offered load (each sender 40 % of the line rate, 1.6 x the receiver's port, 1.2 x l0's uplink):

* **lossy** (DSCP 8, priority 1: nothing else in the replica uses it): tail drops where the queues
  overflow, l1->h4 and l0->s0;
* **lossless** (DSCP 26, RoCE, priority 3): l1->h4 crosses xoff and sends PAUSE into l1; l1 relays it to the
  ports that feed h4's port (h3's and h5's NICs, s0's link); s0->l1 fills and pauses s0's feeders (l0's
  uplink), which pauses l0's hosts: the pause spreads back to every sender's NIC, and nothing is lost.

The lossless trial records the PFC frames h4's port sends into l1 (``pfc-lossless.pcap``; tshark decodes
them as Class Based Flow Control). The full run adds a **victim**: h2 -> h3 (priority 3, 10 % of the line
rate), alone and beside a 3:1 lossless incast from h0, h1 and h3 (h2 sends nothing else: a NIC is one FIFO
here, where a real NIC would interleave its QPs). The victim's path (l0->s0, s0->l1, l1->h3) shares the
paused spine queue with the incast but not the congested port: head-of-line blocking, as on hardware (PFC
pauses a priority, not a destination). Per trial: each stream's datagrams sent, received and lost (by sequence
number) and its one-way delay; every link node direction's
drops by reason, PAUSE/XON sent, PAUSE received and the time its priority 3 was held (emulated and real);
the frame ledger (lost at the receiver = dropped by a modelled queue, else ``unaccounted``); emulator health.
``pfc_fabric.png``: per direction, the time held by PAUSE and the drops, both trials side by side.

Real fabric -> replica: 100G links at scale 10000 -> 10 Mbit/s; pause quanta at the real 100G, dilated.

``--switches bmv2`` runs the same fabric on BMv2 switches (p4/fabric.p4): there a switch's own egress queue
is the congestion point (it drains in packets per second; each frame is counted with the 24 bytes a real
wire adds, so BMv2, not the link node behind it, is the bottleneck), and fabric.p4 accounts lossless bytes
per *ingress* port, sending PAUSE out of the ports that filled the queue and only those; the link nodes
still hold what BMv2 sends into a paused direction and relay PAUSE past their xoff. Per trial the BMv2
switches' drops by reason and PFC frames per port are in ``switches``.

    sudo testbed run pfc_fabric --quick      # both trials, 2 s of traffic each (~20 s)
    sudo testbed run pfc_fabric --quick --switches bmv2     # the same on BMv2 (fabric.p4's PFC)
    sudo testbed run pfc_fabric              # 4 s each, a victim stream (head-of-line blocking), and the
                                             # lossless incast with 100 m, 1 km, 10 km and 100 km
                                             # uplinks, headroom from physics and a fixed 50 KB (~8 min)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

if __name__ == "__main__" and __package__ is None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from testbed.console import console, require_root  # noqa: E402
from testbed.pfc.counters import DROPS, allowance_used, sides  # noqa: E402
from testbed.pfc.streams import FRAME, judge, run_streams  # noqa: E402
from testbed.scenario import Results, run_main, scenario_parser  # noqa: E402

NAME = "pfc_fabric"
NO_FAILURES = "its subject is the pause itself; a failure schedule would mix two causes of loss in one trial"
SCALE = 10000
RATE_REAL = 100e9
SENDERS = ("h0", "h1", "h2", "h3")
RECEIVER = "h4"
LOAD = 0.4                     # of the line rate, per sender
TRIALS = (("lossy", 8 << 2, 1), ("lossless", 26 << 2, 3))   # (label, TOS, priority): DSCP 8 and 26
#: The full run's head-of-line trials on the base replica: the victim stream alone, then beside the incast.
VICTIM = ("h2", "h3")
VICTIM_LOAD = 0.1
VICTIM_INCAST = ("h0", "h1", "h3")          # the incast beside the victim: its source sends nothing else
VICTIM_TRIALS = (("victim alone", 26 << 2, 3), ("lossless + victim", 26 << 2, 3))
#: Bytes a real Ethernet wire carries per frame besides the frame (preamble + SFD 8, FCS 4, gap 12): BMv2
#: drains packets per second computed with them, slightly slower than the link node (which serialises the
#: frame alone), so its queue is where congestion builds.
WIRE_OVERHEAD = 24
SPEC = {"name": "pfc-spine-leaf", "kind": "spine-leaf", "params": {"leaves": 2, "spines": 1, "hosts_per_leaf": 3},
        "links": {"host": {"rate": "100G", "distance": "2m"}, "leaf-spine": {"rate": "100G", "distance": "100m"}},
        "buffer": "100KB", "scale": SCALE, "pfc": {"priorities": [3], "xoff": "40KB"}}


def _args(argv):
    p = scenario_parser(__doc__, prog=f"testbed run {NAME}", refuse_failures=NO_FAILURES)
    p.add_argument("--seconds", type=float, default=None, help="how long the senders send (quick 2, else 4)")
    p.add_argument("--switches", choices=("ovs", "bmv2"), default="ovs",
                   help="OVS (PFC in the link nodes, relayed to every feeder) or BMv2 running p4/fabric.p4 (PFC "
                        "accounted per ingress port in the switch); default ovs")
    return p.parse_args(argv)


def row(trial: dict, receiver_port: str, by_dir: dict, peers: dict | None = None) -> dict:
    """The trial's line in the table and summary (pure); ``peers``: {switch: {port: neighbour}} of the BMv2
    switches (their PAUSE is counted per port)."""
    hops = trial["hops"]
    flat = {d: c for dirs in hops.values() for d, c in dirs.items()}
    used = allowance_used(flat, by_dir)
    nics = [flat.get(f"{h}>l0") or flat.get(f"{h}>l1") or {} for h in SENDERS]
    led = trial["ledger"]
    # BMv2 switches (fabric.p4) send PAUSE out of the ingress ports that filled a queue: {switch: {port: n}}
    p4 = {f"{sw}>{(peers or {}).get(sw, {}).get(p, p)}": n for sw, doc in (trial.get("switches") or {}).items()
          for p, n in doc.get("pfc_pause_sent", {}).items() if n}
    return {"trial": trial["label"], "priority": trial["priority"], "sent": led["sent"], "received": led["received"],
            "lost": led["sent"] - led["received"], "dropped": led["dropped"], "unaccounted": led["unaccounted"],
            "pause_sent_at_receiver_port": flat.get(receiver_port, {}).get("pause_sent", 0),
            "pause_sent_total": sum(c["pause_sent"] for c in flat.values())
            + sum(p4.values()),
            "switch_pause_sent": p4,
            "directions_paused": sorted(d for d, c in flat.items() if c["pause_received"] > 0),
            "senders_paused": sum(1 for c in nics if c.get("pause_received", 0) > 0),
            "sender_paused_s_mean": sum(c.get("paused_s", 0.0) for c in nics) / len(nics),
            "emulator_allowance_used_bytes": used, "victim": victim(trial), "valid": trial.get("valid")}


def emulator_drops(trial: dict, by_dir: dict, headroom) -> list[str]:
    """Why a trial's PFC drops are the emulator's (pure): with the headroom from physics (``auto``) a switch
    queue only drops past xoff + physics + the emulator allowance, i.e. when the switch held frames back
    longer than the allowance (a real switch drops nothing there). With a fixed, undersized headroom the
    drops are the experiment's result."""
    if headroom != "auto":
        return []
    why = "(xoff + physics + emulator allowance exceeded: the switch held frames back longer than the allowance)"
    out = []
    for dirs in trial["hops"].values():
        for d, c in dirs.items():
            if c.get("drop_pfc_headroom") and (by_dir.get(d) or {}).get("role") == "switch":
                out.append(f"{c['drop_pfc_headroom']} lossless frames dropped at {d} with the headroom from physics {why}")
    for sw, doc in (trial.get("switches") or {}).items():   # a BMv2 switch's ingress accounting
        n = (doc.get("drops") or {}).get("pfc_headroom", 0)
        if n:
            out.append(f"{n} lossless frames dropped by BMv2 {sw}'s ingress accounting with the headroom from "
                       f"physics {why}")
    return out


def victim(trial: dict) -> dict | None:
    """The victim stream's figures in a trial (pure): delivered fraction, rate over the sending time, delay."""
    s = trial["streams"].get(">".join(VICTIM))
    if s is None:
        return None
    rate = s["received"] * FRAME * 8 / trial["seconds"]
    return {"sent": s["sent"], "received": s["received"], "delivered_mbps": round(rate / 1e6, 3),
            "delay_ms": s["delay_ms"]}


def _plot(trials: list, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dirs = sorted({d for t in trials for dirs in t["hops"].values() for d in dirs})
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    width = 0.8 / len(trials)
    for i, t in enumerate(trials):
        flat = {d: c for dirs in t["hops"].values() for d, c in dirs.items()}
        xs = [j + i * width for j in range(len(dirs))]
        axes[0].bar(xs, [flat.get(d, {}).get("paused_s", 0.0) for d in dirs], width, label=t["label"])
        axes[1].bar(xs, [sum(flat.get(d, {}).get(k, 0) for k in DROPS) for d in dirs], width, label=t["label"])
    for ax, title in zip(axes, ("time held by PAUSE (emulated s)", "frames dropped"), strict=True):
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(dirs))], dirs, rotation=60, fontsize=7)
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=8)
    fig.suptitle(f"4:1 incast to {RECEIVER}, spine-leaf, 100G at scale {SCALE} (per link direction u>v)",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_sweep(rows: list, path: Path) -> None:
    """Lossless incast vs uplink length: the share of datagrams lost per headroom (each point labelled with
    the count; trials send more at longer cables), and the headroom the spine's port needs by physics."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lossless = [r for r in rows if r["priority"] == 3 and "victim" not in r["trial"]]
    dists = list(dict.fromkeys(r["distance"] for r in lossless))
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for h, marker in (("auto", "o"), ("50KB", "x")):
        pts = [(dists.index(r["distance"]), 100 * r["lost"] / r["sent"] if r["sent"] else 0.0, r["lost"])
               for r in lossless if r["headroom"] == h]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, label=f"headroom {h}: lost")
        for x, y, n in pts:
            if n:
                ax.annotate(f"{n:,}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
    ax.set_xticks(range(len(dists)), dists)
    ax.set_xlabel("leaf-spine cable")
    ax.set_ylabel("% of lossless datagrams lost")
    need = {r["distance"]: r["physics_headroom_bytes"].get("s0>l1") for r in lossless if r["headroom"] == "auto"}
    if any(need.values()):
        right = ax.twinx()
        xs = [i for i, d in enumerate(dists) if need.get(d)]
        right.plot(xs, [need[dists[i]] / 1e6 for i in xs], color="grey", linestyle=":", marker=".",
                   label="headroom needed at s0->l1 (physics)")
        right.set_yscale("log")
        right.set_ylabel("headroom needed, MB (log)", color="grey")
        right.legend(fontsize=8, loc="center left")
    ax.set_title("4:1 incast with PFC: headroom from physics vs a fixed 50 KB per port", fontsize=9)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def configs(quick: bool) -> list:
    """(tag, uplink distance, pfc headroom, trials) of a run: the base replica with both trials; the full
    run adds the lossless incast with longer uplinks, with the headroom from physics and an undersized one
    (a fixed 50 KB per port: what happens when the cable outgrows the buffer: loss despite PFC)."""
    out = [("", "100m", "auto", TRIALS if quick else TRIALS + VICTIM_TRIALS)]
    if not quick:
        out += [(f"{d}-{h}", d, h, TRIALS[1:]) for d in ("100m", "1km", "10km", "100km") for h in ("auto", "50KB")
                if (d, h) != ("100m", "auto")]
    return out


def spec_for(distance: str, headroom: str, switches: str = "ovs") -> dict:
    spec = json.loads(json.dumps(SPEC))
    spec["links"]["leaf-spine"]["distance"] = distance
    spec["pfc"]["headroom"] = headroom
    if switches == "bmv2":
        spec["switches"] = {"default": {"p4": "fabric"}}
    return spec


def main(argv=None) -> int:
    args = _args(argv)
    require_root(f"testbed run {NAME}")
    seconds = args.seconds or (2.0 if args.quick else 4.0)
    runs = configs(args.quick)
    with Results(NAME, args, config={"spec": spec_for("100m", "auto", args.switches), "seconds": seconds,
                                      "switches": args.switches, "load_per_sender": LOAD,
                                      "senders": SENDERS, "receiver": RECEIVER,
                                      "configs": [(d, h) for _, d, h, _ in runs]}) as res:
        trials, rows, health = [], [], {}
        for tag, distance, headroom, which in runs:
            out_dir = res.dir / tag if tag else res.dir
            out_dir.mkdir(parents=True, exist_ok=True)
            plan = _replica_trials(spec_for(distance, headroom, args.switches), which, seconds, out_dir, tag, trials,
                                   rows, health)
            for r in rows[len(rows) - len(which):]:
                r.update(distance=distance, headroom=headroom)
        _print(rows, res.out)
        block = res.health(health)
        res.write_json("metrics.json", {"rows": rows, "trials": trials, **block})
        _plot([t for t in trials if not t["config"] and "victim" not in t["label"]], res.path("pfc_fabric.png"))
        if len(runs) > 1:
            _plot_sweep(rows, res.path("pfc_headroom.png"))
        res.finish({"rows": rows, "all_valid": all(r["valid"] for r in rows), "emulator_ok": block["emulator_ok"],
                    "switches": args.switches,
                    "pfc": {"applied": plan.pfc.applied, "relays": len(plan.pfc.relays), "p4_ports": len(plan.pfc.p4)}})
    return 0


def _replica_trials(spec: dict, which, seconds: float, out_dir: Path, tag: str, trials: list, rows: list,
                    health: dict):
    """Build the replica of ``spec``, run ``which`` trials on it (appended to trials/rows/health); its plan."""
    from testbed.doctor import plan_capabilities
    from testbed.emu import Replica, RunRegistry
    from testbed.links.node import DelayLineNode
    from testbed.p4rt.mininet_switch import plan_switch_factory
    from testbed.p4rt.program import install, replica_programs
    from testbed.plan import Overrides, plan_replica
    from testbed.routing.brain import RoutingBrain
    from testbed.topo.spec import build_graph, parse_spec

    p4 = "switches" in spec
    plan = plan_replica(build_graph(parse_spec(spec, source=NAME)), plan_capabilities(),
                        Overrides(seed=1, frame_bytes=FRAME + WIRE_OVERHEAD if p4 else None))
    if plan.pfc is None or not plan.pfc.applied:
        raise RuntimeError(f"the plan did not apply PFC: {plan.pfc.note if plan.pfc else 'no pfc block'}")
    by_dir = sides(plan.pfc.to_json()["links"])
    factory = plan_switch_factory(plan, log_dir=out_dir) if p4 else None
    with RunRegistry(NAME) as run, Replica(plan, run=run, out_dir=out_dir, name=NAME, switch_factory=factory,
                                           link_node_class=DelayLineNode) as rep:
        peers = {str(s.node): {p.port: str(p.peer) for p in s.ports} for s in plan.switches if s.kind == "bmv2"}
        brain = RoutingBrain(plan.graph)
        brain.compute_all(0.0)
        for sw, prog in replica_programs(plan, brain.tables()).items():
            with rep.switch(sw).client() as c:
                install(c, prog)
        for h in SENDERS:   # the switches learn h4's MAC (it only receives): no flooding during the trial
            rep.host(RECEIVER).cmd(f"ping -c1 -W2 {rep.ip(h)}")
        # long uplinks (100 km is 5 s one way at scale 10000): the far leaf's senders' frames reach h4 two
        # cables after they start, so every sender sends that much longer (they overlap at h4 for `seconds`;
        # else at 100 km h3 alone would have finished before they arrive), and the receivers wait out a
        # PAUSE and its XON crossing a cable before the paused frames arrive
        one_way = plan.link("l0", "s0").emulated.one_way_delay_s
        send_s, idle = seconds + 2 * one_way, 4.0 + 2 * one_way
        for label, tos, prio in which:
            label = f"{label} {tag}" if tag else label
            console.print(f"4:1 incast, {label} (priority {prio}), {send_s:g} s")
            pps = LOAD * rep.plan.link(SENDERS[0], "l0").applied.rate_bps / (FRAME * 8)
            # the PFC frames on the wire: those h4's port (its link node) sends into l1; on BMv2 those l1 sends
            # out of its port to the spine (fabric.p4 pauses the ingress ports that fill h4's queue)
            port = rep.intf_name("l1", "s0" if p4 else RECEIVER)
            pcap = out_dir / f"pfc-{label.replace(' ', '-')}.pcap" if prio == 3 and not tag else None
            flows = [] if label == "victim alone" else [(h, RECEIVER) for h in
                                                        (VICTIM_INCAST if "victim" in label else SENDERS)]
            if "victim" in label:
                flows.append((*VICTIM, VICTIM_LOAD / LOAD * pps))
            t = run_streams(rep, flows, tos, prio, send_s, pps, out_dir, label.replace(" ", "-"), idle=idle,
                            capture=(port, pcap) if pcap else None)
            if pcap:
                t["pcap"] = {"file": pcap.name, "port": port}
            t["label"], t["config"] = label, tag
            health[label] = judge(t, emulator_drops(t, by_dir, spec["pfc"].get("headroom", "auto")))
            trials.append(t)
            r = row(t, f"l1>{RECEIVER}", by_dir, peers)
            r["physics_headroom_bytes"] = {d: by_dir[d]["physics_headroom_bytes"] for d in (f"l1>{RECEIVER}", "s0>l1")}
            rows.append(r)
    return plan


def _print(rows: list, to) -> None:
    from rich.table import Table

    t = Table("trial", "uplinks", "headroom", "sent", "received", "dropped", "unaccounted", "PAUSE sent (h4 port)",
              "directions paused",
              "senders paused", "beyond physics headroom", "valid",
              title=f"PFC in a spine-leaf replica: 4:1 incast to {RECEIVER}")
    for r in rows:
        used = r["emulator_allowance_used_bytes"]
        t.add_row(f"{r['trial']} (prio {r['priority']})", r.get("distance", ""), r.get("headroom", ""), str(r["sent"]),
                  str(r["received"]), str(r["dropped"]),
                  str(r["unaccounted"]), f"{r['pause_sent_total']} ({r['pause_sent_at_receiver_port']})",
                  str(len(r["directions_paused"])), f"{r['senders_paused']}/{len(SENDERS)}",
                  ", ".join(f"{d} {b / 1e3:.1f} KB" for d, b in sorted(used.items())) or "-",
                  "valid" if r["valid"] else "INVALID")
    to.print(t)
    victims = [r for r in rows if r.get("victim")]
    if victims:
        t = Table("trial", "victim sent", "received", "delivered Mbit/s", "delay p50 ms", "delay p99 ms",
                  title=f"head-of-line blocking: victim {' -> '.join(VICTIM)} at {VICTIM_LOAD:.0%} of the line rate, "
                        "priority 3 (emulated ms)")
        for r in victims:
            v = r["victim"]
            t.add_row(r["trial"], str(v["sent"]), str(v["received"]), f"{v['delivered_mbps']:.2f}",
                      str(v["delay_ms"]["p50"]), str(v["delay_ms"]["p99"]))
        to.print(t)


if __name__ == "__main__":
    sys.exit(run_main(main))
