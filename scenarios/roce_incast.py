"""RoCE incast in a PFC replica: PFC only, DCQCN only, PFC + DCQCN, and a victim flow (issue 16).

::

    h0 h1 h2 h3 h4 --- l0 === s0 === l1 --- h5 h6 h7 h8 h9        receiver h9
     (NICs: soft RoCE)     100 m            (l1 -> h9: the incast port, RED/ECN marking on every switch port)

Soft-RDMA RC ``write_bw`` flows (:mod:`testbed.rdma.fabric_flows`) from N senders to h9 for the same time, on a
spine-leaf of OVS switches whose every link is a link node running PFC (``pfc:`` in the spec) and RED/ECN
marking at each switch egress (the spec's ``red:``; a NIC's side does not mark). 4:1 is h0 h1 (behind l0's
uplink) and h5 h6; 8:1 is h0-h3 and h5-h8. The three modes run on the same replica:

* **PFC only**: DSCP 26 (priority 3, lossless), DCQCN off: nothing lost; the receiver's port pauses its
  feeders, the spine queue fills and pauses l0's uplink, which pauses l0's NICs, for as long as the incast lasts.
* **DCQCN only**: DSCP 8 (priority 1, lossy), DCQCN on: the marks cut the senders' rates; until they do,
  the queue overflows (tail drops, go-back-N resends).
* **PFC + DCQCN**: DSCP 26, DCQCN on: nothing lost, and the pauses stop once the rates fit (the question
  operators ask: does DCQCN keep PFC quiet?).

Then a **slow receiver** (both modes): h5 -> h9 alone, PFC on priority 3, DCQCN off, h9's host taking
datagrams off its NIC at half the line rate, from a 32 KB receive buffer. Without the NIC's PAUSE the buffer
overflows (dropped at the host, resent by go-back-N); with it (``testbed.rdma.rxpause``: PAUSE at xoff of
the buffer, out of h9's interface into its link node) the switch's port to h9 is held, fills, and pauses
h5's NIC in turn: nothing lost, the sender held to what the host takes.

The full run adds a **victim**: h4 -> h8 on priority 3, its QP limited to 10 % of the line rate (as
``ibv_modify_qp_rate_limit``), alone and beside the 4:1 incast with PFC only and with PFC + DCQCN. Its path
l0 -> s0 -> l1 -> h8 shares l0's uplink and the spine's queue with the incast from h0 and h1, not the
congested port to h9: alone it always gets its 2.5 Gb/s; less beside the incast is head-of-line blocking
(the pause spreading back to l0's NICs holds it too).

Per trial: each flow's goodput (real Gb/s = emulated x scale), resends, timeouts, CNPs received and its
DCQCN rate over time; the incast's fairness (Jain's index, and the largest deviation from the mean: SONiC's
RoCEv2 test plan asks < 30 %); per link direction drops by reason, PAUSE sent and received, time held and CE
marks; the frame ledger of the data priority from the link nodes (every frame into the fabric at a NIC is
delivered to a host, dropped by a modelled queue, still held or lost inside OVS: then the trial is INVALID);
emulator health. ``roce_incast.png``: per mode the senders' DCQCN rates, PAUSE and drops.

Real fabric -> replica: 25G links at scale 5000 -> 5 Mbit/s; DCQCN's timers and CNP interval x 5000; pause
quanta at the real 25G, dilated; queues and thresholds in bytes (not dilated).

    sudo testbed run roce_incast --quick     # 4:1, the three modes, the slow receiver; 3 s each (~1.5 min)
    sudo testbed run roce_incast             # 4:1 and 8:1, the slow receiver, the victim; 6 s each (~4 min)
"""

from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__" and __package__ is None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from testbed.console import console, require_root  # noqa: E402
from testbed.scenario import Results, run_main, scenario_parser  # noqa: E402

NAME = "roce_incast"
NO_FAILURES = "its subject is congestion control against PFC; a failure schedule would mix two causes of loss"
SCALE = 5000
RECEIVER = "h9"
INCAST = {4: ("h0", "h1", "h5", "h6"), 8: ("h0", "h1", "h2", "h3", "h5", "h6", "h7", "h8")}
VICTIM = ("h4", "h8")
VICTIM_SHARE = 0.1    # of the line rate: the victim's QP rate limit (alone it is never congested)
#: The slow receiver: h5 -> h9, h9's host drains its NIC at half the line rate. Its receive buffer is 32 KB
#: (the kernel doubles it and counts true sizes, 1.7-2.3 KB per 1 KB datagram: 28-37 datagrams), smaller
#: than what a 64-packet window can bring; the NIC's xoff/xon are in the same bytes (xoff leaves ~17
#: datagrams of headroom for what arrives before the link node holds); PAUSE refreshed every 1 s (0xFFFF
#: quanta at 25G = 1.3 ms real = 6.7 s here).
SLOW_SENDER, SLOW_SHARE = "h5", 0.5
#: The sender's window there is 256 packets: with 64 the switch's port to h9 never holds more than the window
#: (66 KB, below its 100 KB xoff), and the pause would stop one hop from the NIC that sent it.
SLOW = {"buffer": 32768, "xoff": 24_000, "xon": 12_000, "refresh_s": 1.0, "window": 256}
FRAME_BYTES = 1082    # a 1 KB-MTU RoCE data frame on the wire
#: (label, DSCP, PFC priority of that DSCP, DCQCN on)
#: DCQCN only runs on DSCP 8 (priority 1): lossy, and nothing else in the replica uses it (priority 0 also
#: carries ARP broadcasts and the endpoints' TCP set-up, which the frame ledger would count as RoCE).
MODES = (("PFC only", 26, 3, False), ("DCQCN only", 8, 1, True), ("PFC + DCQCN", 26, 3, True))
WINDOW = 64           # packets in flight per QP: ~10 x the BDP (25G, 100 m), never the limit
SERIES_EVERY_S = 0.05
RED = {"kmin": "20KB", "kmax": "80KB", "pmax": "20%"}
SPEC = {"name": "roce-incast", "kind": "spine-leaf", "params": {"leaves": 2, "spines": 1, "hosts_per_leaf": 5},
        "links": {"host": {"rate": "25G", "distance": "2m", "red": RED},
                  "leaf-spine": {"rate": "25G", "distance": "100m", "red": RED}},
        "buffer": "200KB", "scale": SCALE, "pfc": {"priorities": [3], "xoff": "100KB"}}


def _args(argv):
    p = scenario_parser(__doc__, prog=f"testbed run {NAME}", refuse_failures=NO_FAILURES)
    p.add_argument("--seconds", type=float, default=None, help="how long the senders send (quick 3, else 6)")
    return p.parse_args(argv)


def trials(quick: bool) -> list:
    """(label, senders, extra flows, DSCP, priority, DCQCN, receiving host) of a run, in order; the receiving
    host is None (keeps up) or "slow" (:data:`SLOW`, with or without its NIC's PAUSE)."""
    out = [(f"{n}:1 {m}", INCAST[n], (), dscp, prio, cc, None) for n in ((4,) if quick else (4, 8))
           for m, dscp, prio, cc in MODES]
    out += [(f"slow receiver, {'NIC PFC' if pfc else 'no NIC PFC'}", (SLOW_SENDER,), (), 26, 3, False,
             "slow-pfc" if pfc else "slow") for pfc in (False, True)]
    if not quick:
        out += [("victim alone", (), (VICTIM,), 26, 3, True, None)]
        out += [(f"4:1 {m} + victim", INCAST[4], (VICTIM,), dscp, prio, cc, None) for m, dscp, prio, cc in MODES
                if prio == 3]
    return out


def slow_nic(kind: str | None, line_rate_bps: float) -> dict | None:
    """The receiving host's side of a trial (pure): None, or a host that takes datagrams off its NIC at
    :data:`SLOW_SHARE` of the line rate, with a small receive buffer, and (``slow-pfc``) a NIC that sends
    PAUSE for priority 3 at xoff of that buffer."""
    if kind is None:
        return None
    nic = {"rx_limit_pps": SLOW_SHARE * line_rate_bps / (FRAME_BYTES * 8), "rx_buffer_bytes": SLOW["buffer"]}
    if kind == "slow-pfc":
        nic["nic_pfc"] = {"xoff_bytes": SLOW["xoff"], "xon_bytes": SLOW["xon"], "refresh_s": SLOW["refresh_s"],
                          "priority": 3}
    return nic


def _kb(nbytes) -> float | None:
    """KB, or None: a peak an earlier trial on the replica already reached (counters.delta), shown as -."""
    return None if nbytes is None else round(nbytes / 1e3, 1)


def _window(t: dict) -> float:
    """Seconds every flow of the trial was sending (0: they never overlapped)."""
    from testbed.rdma.flowstats import common_window

    w = common_window(t["flows"], t["seconds"])
    return w[1] - w[0] if w else 0.0


def distrust(t: dict) -> list[str]:
    """The scenario's own reasons to distrust a trial (pure): flows that did not compete all along."""
    w = _window(t)
    if w < 0.8 * t["seconds"]:
        return [f"the senders sent together for {w:.2f} s of {t['seconds']:g} (started {t['start_spread_s']:.2f} s "
                "apart): goodput and fairness are not an incast's"]
    return []


def row(t: dict, senders, scale: float, hosts) -> dict:
    """The trial's line in the table and summary (pure); ``hosts``: the replica's hosts (their directions
    are the NICs)."""
    from testbed.rdma.flowstats import goodputs, jain

    served = [(f.get("server") or {}).get("device") or {} for f in t["flows"].values()]
    flat = {d: c for dirs in t["hops"].values() for d, c in dirs.items()}
    common = goodputs(t["flows"], t["seconds"])        # over the time every flow was sending
    good = [common.get(f"{s}>{RECEIVER}", 0.0) * scale / 1e9 for s in senders]     # real Gb/s
    mean = sum(good) / len(good) if good else 0.0
    led = t["ledger"]
    hosts = {str(h) for h in hosts}
    nics = [c for d, c in flat.items() if d.split(">")[0] in hosts]
    victim = common.get(">".join(VICTIM))
    return {"trial": t["label"], "senders": len(senders), "dcqcn": t["dcqcn"], "priority": t["priority"],
            "goodput_gbps": [round(g, 3) for g in good], "goodput_total_gbps": round(sum(good), 3),
            "jain": round(jain(good), 4) if jain(good) is not None else None,
            "common_window_s": round(_window(t), 3),
            "max_deviation": round(max(abs(g - mean) for g in good) / mean, 4) if mean else None,
            "victim_gbps": round(victim * scale / 1e9, 3) if victim is not None else None,
            "frames_sent": led["sent"], "dropped": led["dropped"], "unaccounted": led["unaccounted"],
            "lost_inside_emulator": led["lost_inside_emulator"],
            "retransmissions": sum(f["retransmissions"] for f in t["flows"].values()),
            "timeouts": sum(f["timeouts"] for f in t["flows"].values()),
            "unfinished_messages": sum(f.get("unfinished", 0) for f in t["flows"].values()),
            # the receiving host: datagrams its full receive queue dropped, PAUSE its NIC sent
            "host_drops": sum(d.get("rx_socket_drops", 0) for d in served),
            "nic_pause_sent": sum((d.get("nic_pfc") or {}).get("pause_sent", 0) for d in served),
            "nic_paused_s": round(sum((d.get("nic_pfc") or {}).get("paused_s", 0.0) for d in served), 3),
            "cnps_rx": sum(f["cnps_rx"] for f in t["flows"].values()),
            "ce_marked": sum(c["ce_marked"] for c in flat.values()),
            "pause_sent": sum(c["pause_sent"] for c in flat.values()),
            "pause_sent_receiver_port": flat.get(f"l1>{RECEIVER}", {}).get("pause_sent", 0),
            "directions_paused": sorted(d for d, c in flat.items() if c["pause_received"] > 0),
            "nic_paused_real_ms_mean": round(sum(c["paused_real_s"] for c in nics) / len(nics) * 1e3, 4) if nics else 0,
            # the lossless accounting's peak; a lossy priority has none (its queue is in the link node's series)
            "receiver_port_max_kb": _kb(flat.get(f"l1>{RECEIVER}", {}).get("max_bytes"))
            if t["priority"] in SPEC["pfc"]["priorities"] else None,
            "valid": t.get("valid")}


def main(argv=None) -> int:
    args = _args(argv)
    require_root(f"testbed run {NAME}")
    seconds = args.seconds or (3.0 if args.quick else 6.0)
    plan_ = trials(args.quick)
    with Results(NAME, args, config={"spec": SPEC, "seconds": seconds, "window_pkts": WINDOW,
                                      "trials": [p[0] for p in plan_]}) as res:
        plan = _plan()
        out, rows, health = _run(plan, plan_, seconds, res.dir)
        _print(rows, res.out, plan.endpoints[0].real_qp_timeout_s)
        block = res.health(health)
        res.write_json("metrics.json", {"rows": rows, "trials": out, **block})
        _plot(out, res.path("roce_incast.png"))
        res.finish({"rows": rows, "all_valid": all(r["valid"] for r in rows), "emulator_ok": block["emulator_ok"]})
    return 0


def _plan():
    """The replica plan of :data:`SPEC` (no root)."""
    from testbed.doctor import plan_capabilities
    from testbed.plan import Overrides, plan_replica
    from testbed.topo.spec import build_graph, parse_spec

    return plan_replica(build_graph(parse_spec(SPEC, source=NAME)), plan_capabilities(), Overrides(seed=1))


def _run(plan, plan_: list, seconds: float, out_dir: Path):
    from testbed.emu import Replica, RunRegistry
    from testbed.links.node import DelayLineNode
    from testbed.pfc.streams import judge
    from testbed.rdma.fabric_flows import run_flows

    if plan.pfc is None or not plan.pfc.applied:
        raise RuntimeError(f"the plan did not apply PFC: {plan.pfc.note if plan.pfc else 'no pfc block'}")
    out, rows, health = [], [], {}
    with RunRegistry(NAME) as run, Replica(plan, run=run, out_dir=out_dir, name=NAME,
                                           link_node_class=DelayLineNode) as rep:
        hosts = [e.node for e in plan.endpoints]
        for h in hosts:   # every switch learns every MAC: nothing is flooded during a trial
            if h != RECEIVER:
                rep.host(RECEIVER).cmd(f"ping -c1 -W2 {rep.ip(h)}")
        for label, senders, extra, dscp, prio, cc, host in plan_:
            console.print(f"[bold]{label}[/bold] (DSCP {dscp}, priority {prio}, DCQCN {'on' if cc else 'off'}), "
                          f"{seconds:g} s")
            limit = VICTIM_SHARE * plan.endpoint(VICTIM[0]).emulated_line_rate_bps
            flows = [(s, RECEIVER) for s in senders] + [(*f, limit) for f in extra]
            nic = slow_nic(host, plan.endpoint(RECEIVER).emulated_line_rate_bps)
            t = run_flows(rep, flows, seconds, out_dir / "trials", label.replace(" ", "-").replace(":", "to")
                          .replace(",", ""), dscp, prio, cc, SLOW["window"] if host else WINDOW, SERIES_EVERY_S, nic)
            t["label"] = label
            health[label] = judge(t, distrust(t))
            out.append(t)
            rows.append(row(t, senders, plan.scale, [e.node for e in plan.endpoints]))
            r = rows[-1]
            console.print(f"  goodput {r['goodput_total_gbps']} Gb/s real (Jain {r['jain']}), dropped {r['dropped']}, "
                          f"resent {r['retransmissions']}, CNPs {r['cnps_rx']}, PAUSE {r['pause_sent']}, "
                          + ("valid" if r["valid"] else "INVALID"))
    return out, rows, health


def _print(rows: list, to, qp_timeout_s: float) -> None:
    from rich.table import Table

    from testbed.rdma.fabric_flows import DRAIN_S

    t = Table("trial", "goodput Gb/s (real)", "Jain", "max dev", "victim Gb/s", "dropped (host)", "resent",
              "timeouts (unfinished)",
              "CNPs", "CE marks", "PAUSE (h9 port)", "NIC paused ms (real)", "h9 port max KB", "unaccounted",
              "valid", title=f"RoCE incast to {RECEIVER}: 25G spine-leaf at scale {SCALE} (unfinished: messages "
                             f"still unacknowledged {DRAIN_S:g} s after the sending time; a tail loss waits for the "
                             f"QP's ACK timeout, {qp_timeout_s * 1e3:g} ms real = {qp_timeout_s * SCALE:g} s here)")
    for r in rows:
        t.add_row(r["trial"], f"{r['goodput_total_gbps']:.2f}", str(r["jain"]), str(r["max_deviation"]),
                  "-" if r["victim_gbps"] is None else f"{r['victim_gbps']:.2f}", f"{r['dropped']} ({r['host_drops']})",
                  str(r["retransmissions"]), f"{r['timeouts']} ({r['unfinished_messages']})", str(r["cnps_rx"]), str(r["ce_marked"]),
                  f"{r['pause_sent']} ({r['pause_sent_receiver_port']})"
                  + (f" + NIC {r['nic_pause_sent']}" if r["nic_pause_sent"] else ""), f"{r['nic_paused_real_ms_mean']:.3f}",
                  "-" if r["receiver_port_max_kb"] is None else f"{r['receiver_port_max_kb']:.0f}", str(r["unaccounted"]), "valid" if r["valid"] else "INVALID")
    to.print(t)


def _plot(trials_: list, path: Path) -> None:
    """Per trial: each flow's goodput over time (real Gb/s, from its acknowledged bytes), PAUSE and drops."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from testbed.rdma.flowstats import rate_bins

    n = len(trials_)
    fig, axes = plt.subplots(n, 1, figsize=(9, 2.2 * n), squeeze=False)
    for ax, t in zip(axes[:, 0], trials_, strict=True):
        origin = min(f["started_at"] for f in t["flows"].values())
        for key, f in t["flows"].items():
            ts, rates = rate_bins(f, origin, 0.25)
            ax.step(ts, [r * SCALE / 1e9 for r in rates], where="post", label=key, lw=1)
        flat = {d: c for dirs in t["hops"].values() for d, c in dirs.items()}
        led = t["ledger"]
        ax.set_title(f"{t['label']}: PAUSE {sum(c['pause_sent'] for c in flat.values())}, dropped {led['dropped']}",
                     fontsize=8)
        ax.set_ylabel("goodput Gb/s (real)", fontsize=7)
        ax.legend(fontsize=6, ncol=4)
    axes[-1, 0].set_xlabel("s (emulated)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(run_main(main))
