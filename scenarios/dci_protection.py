"""DCI protection switching: a fibre cut on the working path, an optical circuit switch moves the circuit.

    mode ocs (default)                                 mode packet (comparison)

    hA - dciA - ocsA ====working fibre==== ocsB - dciB - hB      hA - dciA ====working==== dciB - hB
                   \\                        /                         \\                   /
                    \\== standby == amp ==//                            \\== relay (switch) //

Two sites joined by a working and a standby fibre. In ``ocs`` mode each site's DCI switch has one port,
into an OCS (``testbed/ocs/node.py``: tc mirred between its ports, a circuit per port pair) that rides the
working fibre; the standby fibre passes an in-line patch OCS (``amp``, a fixed circuit). The working
fibre is cut at 1/4 of the run; each OCS sees loss of light, waits the detection time, and moves the
circuit to standby, during which (the reconfiguration window) it carries nothing. The fibre is then
repaired and, after a wait-to-restore time, a schedule reverts both OCSs to working (a planned switch:
its outage is the reconfiguration alone). In ``packet`` mode the DCI switches are
joined by both paths directly and the fabric controller reroutes on port-status (the packet-level
reroute of ``fabric_failover``).

The fibres carry their length (5 us/km, dilated: netem or the userspace delay line) and, through an OCS,
its latency and an optical loss budget (``--budget-db``); a cut takes both sides of the working fibre down.
Constant-rate UDP with sequence numbers runs hA -> hB. OCS outage = lost x interval in real units
(emulated / scale: detection and reconfiguration run dilated x scale), next to the model's
detection + reconfiguration; each OCS's events (loss seen, declared, dark, light) are timestamped, so
the detection time and the reconfiguration window are measured directly too. Packet level: the
controller is a real program running at native speed, so its reroute time (cut -> flows pushed) is
measured in wall time and not divided by the scale; the real-unit packet outage is then detection +
that reroute, with loss-of-light port-down detection (the OCS's detection time) or with BFD (3 x 50 ms).

    sudo testbed run dci_protection --quick            # both modes, 5 s of traffic each (~30 s)
    sudo testbed run dci_protection --mode ocs --reconfig-ms 20 --detect-ms 2 --scale 50 --json
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

if __name__ == "__main__" and __package__ is None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from testbed.console import console, require_root  # noqa: E402
from testbed.emu.health import CpuWatch, emulator_processes  # noqa: E402
from testbed.emu.ops import set_link_state  # noqa: E402
from testbed.emu.runhealth import assess  # noqa: E402
from testbed.errors import SpecError  # noqa: E402
from testbed.links.probe import wait_finished  # noqa: E402
from testbed.poll import poll, sleep_until  # noqa: E402
from testbed.scenario import REPO_ROOT, Results, run_main, scenario_parser  # noqa: E402
from testbed.units import FIBRE_DELAY_S_PER_M  # noqa: E402

NAME = "dci_protection"
#: why ``--failures`` is refused here (a scenario takes a failure schedule or says why not)
NO_FAILURES = (
    "it runs its own fibre cut (the working fibre at 1/4 of the traffic) and measures the protection "
    "switch of that one cut; --mode, --detect-ms and --reconfig-ms shape it")
PORT = 5301
PROBE = [sys.executable, "-m", "testbed.links.probe"]
WORKING_M, STANDBY_M = 30_000.0, 40_000.0
#: Optical loss budget of one DCI span, dB: an estimate for amplified single-span coherent optics (a 400G ZR
#: module's note: "link loss < 22 dB: an optical amplifier at the transmit end only"; about 10 dB unamplified,
#: -10 dBm min Tx to -20 dBm Rx). A parameter (--budget-db); docs/ocs.md.
DCI_BUDGET_DB = 22.0


# ------------------------------------------------------------------------------------------ pure
def build_graph(mode: str, budget_db: float = DCI_BUDGET_DB):
    """The two-site graph of the docstring (``mode`` ocs or packet) with tier attributes; the fibres carry
    their propagation delay (and, through an OCS, its latency and loss budget) as link parameters, so the
    replica emulates them like any other link (:func:`testbed.ocs.model.span_link`)."""
    from testbed.ocs.model import span_link
    from testbed.topo.builder import Builder, set_link

    b = Builder(name=f"{NAME}-{mode}", kind="custom")
    ha, hb = b.host(campus=0), b.host(campus=1)
    da, db = b.switch("dci", 1, campus=0), b.switch("dci", 1, campus=1)
    b.link(ha, da, "host")
    b.link(hb, db, "host")
    if mode == "ocs":
        oa, ob = b.switch("ocs", 2, campus=0), b.switch("ocs", 2, campus=1)
        amp = b.switch("ocs", 3)
        b.link(da, oa, "campus-dci")          # ocsA port 1
        b.link(db, ob, "campus-dci")          # ocsB port 1
        b.link(oa, ob, "working")             # port 2 on both
        b.link(oa, amp, "standby")            # ocsA port 3, amp port 1
        b.link(amp, ob, "standby")            # amp port 2, ocsB port 3
        G = b.finish()
        G.graph.update(working=(oa, ob), ocs=(oa, ob), amp=amp)
        spans = {(oa, ob): WORKING_M, (oa, amp): STANDBY_M / 2, (amp, ob): STANDBY_M / 2}
    else:
        relay = b.switch("relay", 2)
        b.link(da, db, "working")
        b.link(da, relay, "standby")
        b.link(relay, db, "standby")
        G = b.finish()
        G.graph.update(working=(da, db))
        spans = {(da, db): WORKING_M, (da, relay): STANDBY_M / 2, (relay, db): STANDBY_M / 2}
    G.graph.update(ends=(ha, hb))
    for (u, v), metres in spans.items():
        lp = span_link(metres, budget_db, through_ocs=mode == "ocs", what=f"the {G.edges[u, v]['tier']} span {u}-{v}")
        set_link(G, u, v, distance_m=metres, delay_s=lp.delay_s)
    return G


def expected(detect_s: float, reconfig_s: float) -> dict:
    from testbed.ocs.model import packet_reroute_outage_s, protection_outage_s

    return {"ocs_outage_ms": protection_outage_s(detect_s, reconfig_s, STANDBY_M - WORKING_M) * 1e3,
            "bfd_detect_ms": packet_reroute_outage_s(50e-3, 3) * 1e3}


def stream_outage(send_doc: dict, recv_doc: dict, window: tuple[float, float], lead_s: float) -> dict:
    """Loss of the stream, counting only packets sent in ``window`` shifted ``lead_s`` earlier: a packet
    still on the working fibre when it is cut was sent up to its propagation time before the cut."""
    from testbed.links.probe import outage

    o = outage(send_doc["send_times"], recv_doc["seq"], send_doc["interval"],
               window=(window[0] - lead_s, window[1] - lead_s))
    return o.as_dict()


# ------------------------------------------------------------------------------------------ root glue
def run_mode(mode: str, res: Results, args) -> dict:
    from testbed.doctor import plan_capabilities
    from testbed.emu import Replica, RunRegistry
    from testbed.links.node import late_tolerance_at, node_class
    from testbed.ocs.model import CircuitSwitch, ProtectionGroup
    from testbed.ocs.node import ocs_switch_factory
    from testbed.plan import Overrides, plan_replica
    from testbed.plan.render import link_delays

    G = build_graph(mode, args.budget_db)
    ha, hb = G.graph["ends"]
    probe_dir = res.path(f"probe-{mode}")
    probe_dir.mkdir(exist_ok=True)
    detect_s, reconfig_s = args.detect_ms / 1e3, args.reconfig_ms / 1e3
    with RunRegistry(f"{NAME}-{mode}") as reg:
        ctl = factory = None
        nodes = {}
        if mode == "ocs":
            oa, ob = G.graph["ocs"]
            for o in (oa, ob):
                nodes[o] = (CircuitSwitch(3, reconfig_s=reconfig_s, circuits={1: 2}),
                            ProtectionGroup(common=1, working=2, standby=3, detect_s=detect_s))
            nodes[G.graph["amp"]] = (CircuitSwitch(2, reconfig_s=reconfig_s, circuits={1: 2}), None)
            factory = ocs_switch_factory(nodes, args.scale)
        else:
            from controllers.launch import start_controller

            ctl = start_controller(reg, G, res.dir, lldp_interval=0)
        # the fibres' delay runs dilated on netem or a delay line; the short links' delay is below the floor
        plan = plan_replica(G, plan_capabilities(), Overrides(scale=args.scale, links="spec", static_arp=ctl is None))
        with Replica(plan, controller=ctl.address if ctl else None, run=reg, switch_factory=factory,
                     # late = later than this experiment resolves: the probe interval (a frame later than
                     # that could change which frames count as lost; earlier ones cannot)
                     link_node_class=node_class(max(late_tolerance_at(plan.scale), args.interval)),
                     out_dir=res.dir / mode, name=f"{NAME}-{mode}") as rep:
            if ctl:
                ctl.wait_ready()
            dst = rep.ip(hb)
            poll(lambda: " 0% packet loss" in rep.host(ha).cmd("ping", "-c1", "-W1", dst), timeout=20,
                 interval=0.2, what=f"{ha} to reach {hb} across the DCI")
            kw = {"cwd": str(REPO_ROOT), "stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE}
            recv = rep.popen(hb, PROBE + ["recv", "--port", str(PORT), "--timeout", str(args.duration + 10),
                                          "--idle", "1.5", "--out", str(probe_dir / "recv.json")], **kw)
            poll(lambda: f":{PORT}" in rep.host(hb).cmd("ss", "-lun"), timeout=10, what="the UDP receiver")
            with CpuWatch(emulator_processes(rep, ctl, own=mode == "ocs")) as cpu:   # the traffic's span
                t_start = time.time()
                send = rep.popen(ha, PROBE + ["send", "--dst", dst, "--port", str(PORT), "--sport", "47100",
                                              "--interval", str(args.interval), "--duration", str(args.duration),
                                              "--size", "200", "--out", str(probe_dir / "send.json")], **kw)
                u, v = G.graph["working"]
                cut_intfs, cut_ns = rep.cut_interfaces(u, v)
                sleep_until(t_start + args.duration / 4)
                t_cut = time.time()
                set_link_state(cut_intfs, up=False, netns=cut_ns)
                console.print(f"{mode}: cut the working fibre {u}-{v} ({', '.join(cut_intfs)}) at {t_cut - t_start:.2f} s")
                down_ev = None
                if ctl:
                    down_ev = poll(lambda: next((e for e in ctl.get("/events")["failovers"]
                                                 if e["kind"] == "link_down" and e["time"] >= t_cut - 0.01), None),
                                   timeout=15, interval=0.02, what="the controller to see the working fibre down")
                else:
                    poll(lambda: all(any(e["kind"] == "light" and e.get("reason") == "protection"
                                         for e in rep.switch(n).events) for n in G.graph["ocs"]),
                         timeout=15 + (reconfig_s + detect_s) * args.scale, interval=0.02,
                         what="both OCSs to switch to the standby fibre")
                sleep_until(time.time() + 0.2)  # a margin of traffic on standby before the repair
                t_repair = time.time()
                set_link_state(cut_intfs, up=True, netns=cut_ns)
                console.print(f"{mode}: repaired the working fibre at {t_repair - t_start:.2f} s")
                if not ctl:  # revertive switching after the wait-to-restore time, as a schedule
                    for n in G.graph["ocs"]:
                        rep.switch(n).play([(args.wtr_ms / 1e3, {1: 2})], t0=t_repair)
                for p, what in ((send, "sender"), (recv, "receiver")):
                    wait_finished(p, what, args.duration + 30)
            ocs_events = {str(n): rep.switch(n).events for n in nodes}
            fibres = link_delays(rep.plan, ("working", "standby"))
            lines, cut_line = rep.link_nodes(), rep.plan.link(u, v).via
            monitor_errors = [rep.switch(n).monitor_error for n in nodes if rep.switch(n).monitor_error]
            health = ctl.get("/health") if ctl else None
    sent, got = json.loads((probe_dir / "send.json").read_text()), json.loads((probe_dir / "recv.json").read_text())
    lead = WORKING_M * FIBRE_DELAY_S_PER_M * args.scale + 0.002   # the working fibre (emulated) + 2 ms
    o, back, calm = (stream_outage(sent, got, w, lead) for w in ((t_cut, t_repair), (t_repair, float("inf")),
                                                                  (t_start, t_cut)))
    # before the cut nothing may be lost: a loss there is the emulator's (no fault was injected yet); the
    # fibres' delay lines give lateness and socket losses, the cut one's unsent frames going with the cut
    stats = {dl.name: dl.final_stats for dl in lines.values() if dl.final_stats}
    emu_health = assess(cpu=cpu.summary(), link_stats=stats, cut=[cut_line] if cut_line else [],
                        unaccounted=calm["lost_in_window"])
    doc = {"mode": mode, "scale": args.scale, "interval_ms": args.interval * 1e3, **o,
           "outage_real_ms": round(o["outage_ms"] / args.scale, 3), "cut_at_s": round(t_cut - t_start, 3),
           "repair_at_s": round(t_repair - t_start, 3), "lost_after_repair": back["lost_in_window"],
           "revert_outage_real_ms": round(back["outage_ms"] / args.scale, 3), "fibres": fibres,
           "lost_before_cut": calm["lost_in_window"], "health": emu_health}
    if mode == "ocs":
        from testbed.ocs.model import protection_timings

        t = protection_timings(ocs_events, args.scale)
        doc.update(ocs_switched=t.pop("switched"), **t, monitor_errors=monitor_errors,
                   model_outage_real_ms=round(expected(detect_s, reconfig_s)["ocs_outage_ms"], 3))
        res.write_json("ocs-events.json", ocs_events)
    else:
        # The controller is a real program running at native speed: its reroute time is not dilated.
        react_ms = (down_ev["pushed"] - t_cut) * 1e3
        doc.update(controller_reroute_wall_ms=round(react_ms, 2),
                   stream_outage_wall_ms=o["outage_ms"],
                   controller_handler_errors=health["handler_errors"] if health else None,
                   port_down_model_outage_real_ms=round(args.detect_ms + react_ms, 2),
                   bfd_model_outage_real_ms=round(expected(detect_s, reconfig_s)["bfd_detect_ms"] + react_ms, 2))
    return doc


def main(argv=None) -> int:
    parser = scenario_parser(__doc__, prog=f"testbed run {NAME}", refuse_failures=NO_FAILURES)
    parser.add_argument("--mode", choices=("ocs", "packet", "both"), default="both")
    parser.add_argument("--reconfig-ms", type=float, default=20.0, help="OCS reconfiguration time, real ms")
    parser.add_argument("--detect-ms", type=float, default=2.0, help="loss-of-light detection, real ms")
    parser.add_argument("--scale", type=float, default=50.0, help="time dilation (x on detection/reconfiguration)")
    parser.add_argument("--duration", type=float, default=None, help="seconds of traffic per mode (default 8; --quick 5)")
    parser.add_argument("--interval", type=float, default=0.001, help="sending interval, seconds (emulated)")
    parser.add_argument("--budget-db", type=float, default=DCI_BUDGET_DB,
                        help="optical loss budget of a fibre span through an OCS, dB (an estimate; docs/ocs.md)")
    parser.add_argument("--wtr-ms", type=float, default=4.0,
                        help="wait-to-restore after the repair before reverting to working, real ms (ocs mode)")
    args = parser.parse_args(argv)
    args.duration = args.duration or (5.0 if args.quick else 8.0)
    for name, value, lo, hi in (("--reconfig-ms", args.reconfig_ms, 0.1, 10_000), ("--detect-ms", args.detect_ms, 0, 1000),
                                ("--scale", args.scale, 1, 1000), ("--duration", args.duration, 2, 600),
                                ("--interval", args.interval, 0.0005, 0.1), ("--wtr-ms", args.wtr_ms, 0, 10_000),
                                ("--budget-db", args.budget_db, 0, 60)):
        if not lo <= value <= hi:
            raise SpecError(name, f"must be {lo:g}..{hi:g}, got {value:g}")
    window_s = (2 * args.reconfig_ms + args.detect_ms + args.wtr_ms) / 1e3 * args.scale + 1.0
    if window_s > 0.75 * args.duration:
        raise SpecError("--duration", f"must hold the cut at 1/4, protection, repair and revert "
                                      f"({window_s:.2f} s in the last 3/4); raise --duration or lower --scale")
    modes = ("ocs", "packet") if args.mode == "both" else (args.mode,)
    for m in modes:   # a span the budget cannot close is refused before anything is made
        build_graph(m, args.budget_db)
    config = {"modes": modes, "reconfig_ms": args.reconfig_ms, "detect_ms": args.detect_ms, "scale": args.scale,
              "duration_s": args.duration, "interval_s": args.interval,
              "fibre_m": {"working": WORKING_M, "standby": STANDBY_M}, "budget_db": args.budget_db}
    with Results(NAME, args, config) as res:
        require_root(f"testbed run {NAME}")
        rows = {m: run_mode(m, res, args) for m in modes}
        block = res.health({m: r.pop("health") for m, r in rows.items()})
        res.write_json("metrics.json", {**rows, **block})
        for m, r in rows.items():
            line = f"{m}: outage {r['outage_real_ms']:.1f} ms real ({r['outage_ms']:.0f} ms emulated, {r['lost']} lost)"
            if m == "ocs":
                line += (f"; model {r['model_outage_real_ms']:.1f} ms; reconfiguration window "
                         f"{r['reconfig_window_real_ms']} ms, detection {r['detection_real_ms']} ms; "
                         f"revert after repair: outage {r['revert_outage_real_ms']:.1f} ms, window "
                         f"{r['revert_window_real_ms']} ms")
            else:
                line = (f"packet: stream outage {r['stream_outage_wall_ms']:.0f} ms wall ({r['lost']} lost); "
                        f"controller reroute {r['controller_reroute_wall_ms']} ms wall (not dilated), so "
                        f"{r['port_down_model_outage_real_ms']} ms real with loss-of-light port-down, "
                        f"{r['bfd_model_outage_real_ms']} ms with BFD (3 x 50 ms)")
            res.out.print(line)
        res.finish({"modes": rows, "reconfig_ms": args.reconfig_ms, "detect_ms": args.detect_ms,
                    "scale": args.scale, "emulator_ok": block["emulator_ok"]})
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
