"""Link-cut outage on a BMv2 fabric (``testbed bench failover --cases p4``), measured like the OVS
controller's: the same spec, probe stream, cut rule and outage arithmetic as :mod:`testbed.bench.failover`.

    h(pod 0) --t--a--X--cr--a--t-- h(last pod)      every switch: simple_switch_fast running fabric.p4

One replica of SPEC with every switch on BMv2 (links not shaped: scale 1), programmed once by the routing
brain; then per trial a constant-rate UDP probe stream, the ECMP link on its path leaving the highest
switch that has alternatives is cut (``ip link set <intf> down`` on that switch's end), the failover
driver (:mod:`testbed.p4rt.live`) sees the port go down over netlink, asks the brain (``link_down``)
and rewrites only the entries that change; restore the same way. Per trial:

    detection  = the watcher's netlink event - the start of the cut command (which itself takes time:
                 ``cut_command_ms``; the stream's first lost probe says when the data plane broke)
    compute    = the brain's diff ready - detection
    program    = the last table write - the diff (Thrift calls to every switch concerned, cut ends first)
    outage     = probes lost while cut x sending interval (resolution: the interval)
    valid      = the stream sent into the break (:func:`testbed.links.probe.unmeasured`): a sender the loaded
                 machine descheduled for longer than the few-ms break loses nothing, which is not a 0 ms outage

All of it runs on the wall clock and the data plane is not dilated here, so emulated and real-world time
are the same. The module is shared with ``tests/integration/test_p4_failover_live.py``.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from pathlib import Path

from testbed.bench.failover import Stream, flow_links, path_cut
from testbed.emu.ops import set_link_state
from testbed.links.probe import outage, sent_into, unmeasured
from testbed.poll import poll, sleep_until
from testbed.routing.brain import RoutingBrain, route_dict
from testbed.topo.graph import HOST


def port_counters(rep) -> dict:
    """``{switch: {port: {"neighbour", "tx_bytes"}}}`` from the switches' interface counters (the shape of
    the OVS controller's ``/ports``, so :func:`testbed.bench.failover.flow_links` reads both)."""
    G = rep.G
    out: dict = {}
    for u, v, d in G.edges(data=True):
        for a, b in ((u, v), (v, u)):
            if G.nodes[a].get("role") == HOST:
                continue
            intf = rep.intf_name(a, b)
            try:
                tx = int(Path(f"/sys/class/net/{intf}/statistics/tx_bytes").read_text())
            except OSError:
                tx = 0
            out.setdefault(a, {})[d["ports"][a]] = {"neighbour": b, "tx_bytes": tx}
    return out


@contextmanager
def p4_fabric(G, out_dir: Path, name: str = "bench-p4-failover"):
    """``(rep, fo)``: ``G`` on BMv2 fabric.p4 switches under the failover driver (links not shaped)."""
    from testbed.doctor import plan_capabilities
    from testbed.emu import Replica, RunRegistry
    from testbed.p4rt.live import p4_failover
    from testbed.p4rt.mininet_switch import plan_switch_factory
    from testbed.plan import Overrides, plan_replica

    out_dir.mkdir(parents=True, exist_ok=True)
    plan = plan_replica(G, plan_capabilities(), Overrides(links="off", p4_program="fabric"))
    with RunRegistry(name) as run:
        with Replica(plan, run=run, out_dir=out_dir, name=name,
                     switch_factory=plan_switch_factory(plan, log_dir=out_dir)) as rep:
            with p4_failover(rep, RoutingBrain(rep.G), events=out_dir / "p4-events.jsonl") as fo:
                yield rep, fo


def _event(fo, kind: str, link: tuple, after: float):
    for ev in list(fo.fabric.events):
        if ev.kind == kind and set(ev.target) == set(link) and ev.detected >= after:
            return ev
    return None


def stream_links(rep, interval: float, timeout: float = 5.0) -> list[tuple]:
    """Switch links the running stream crosses, once interface counters show it up to the highest tier."""
    G = rep.G
    top = max(G.nodes[n].get("tier", 0) for n in G)
    before = port_counters(rep)
    min_bytes = int(0.1 / interval * 100)

    def seen():
        links = flow_links(G, before, port_counters(rep), min_bytes)
        return links if any(G.nodes[v].get("tier", 0) == top for _, v in links) else None
    try:
        return poll(seen, timeout=timeout, interval=0.1, what="the stream on a link to the top tier")
    except TimeoutError:
        return []


def backlogged(send_times: list[float], broken: tuple[float, float], interval: float) -> str:
    """Why a cut that lost nothing although its stream sent into the break is not a measurement (pure).

    The probes sent between the cut and the repair met the repaired tables: they waited in front of the
    switch (BMv2's input backlog on a loaded machine: CI at load 3.9, 2026-12-04) longer than the break
    lasted, so the 0 ms is the emulator's queueing, not the repair."""
    t0, t1 = broken
    return (f"nothing lost though the stream sent {sent_into(send_times, broken, interval)} probes into the "
            f"{(t1 - t0) * 1e3:.1f} ms break: they waited "
            "in front of the switch longer than the break (a loaded machine's BMv2 backlog); a 0 ms outage here "
            "is the emulator's queueing, not the repair")


def one_p4_cut(rep, fo, src, dst, sport: int, interval: float, workdir: Path, tag: str,
               hold_s: float = 0.4, during=None) -> dict:
    """Stream src -> dst, cut the ECMP link on its path, restore; the outage record (times in ms).

    ``during(cut)``, when given, is called while the link is down, after the driver's repair (a test reads
    the switches' tables there)."""
    G = rep.G
    stream = Stream(rep, src, dst, 5001, sport, interval, 4.0, workdir, tag)
    links = stream_links(rep, interval)
    routes = [route_dict(r) for r in fo.fabric.brain.routes.values()]
    cut = path_cut(rep, G, links, routes, stream, src, dst, tag)
    intfs = [rep.intf_name(cut[0], cut[1])]
    t_cut = time.time()
    set_link_state(intfs, up=False)
    t_cut_done = time.time()
    try:
        down = poll(lambda: _event(fo, "link_down", cut, t_cut - 0.01), timeout=10, interval=0.002,
                    what=f"the BMv2 driver to see {cut[0]}-{cut[1]} down")
        if during is not None:
            during(cut)
        sleep_until(max(t_cut + hold_s, time.time()))
    finally:
        t_restore = time.time()
        set_link_state(intfs, up=True)
    up = poll(lambda: _event(fo, "link_up", cut, t_restore - 0.01), timeout=10, interval=0.002,
              what=f"the BMv2 driver to see {cut[0]}-{cut[1]} up")
    raw = stream.result()
    o = outage(raw["send_times"], raw["seq"], interval, window=(t_cut - 0.002, t_restore))
    r = outage(raw["send_times"], raw["seq"], interval, window=(t_restore, float("inf")))
    got = set(raw["seq"])
    lost = [t for i, t in enumerate(raw["send_times"]) if i not in got and t_cut - 0.002 <= t < t_restore]
    near = down.ops.get(cut[0], {}).get("done_ms")
    repaired_at = down.programmed if near is None else down.detected + near / 1e3
    why = unmeasured(raw["send_times"], (down.detected, repaired_at), interval)
    if why is None and o.lost_in_window == 0:
        why = backlogged(raw["send_times"], (t_cut, repaired_at), interval)
    return {"problems": [why] if why else [], "src": src, "dst": dst, "sport": sport, "cut": list(cut), "links_seen": [list(lk) for lk in links],
            **o.as_dict(), "restore_lost": r.lost_in_window, "cut_command_ms": (t_cut_done - t_cut) * 1e3,
            "first_loss_ms": (min(lost) - t_cut) * 1e3 if lost else None,
            "last_loss_ms": (max(lost) - t_cut) * 1e3 if lost else None,
            "detect_ms": (down.detected - t_cut) * 1e3, "compute_ms": (down.computed - down.detected) * 1e3,
            "near_end_repaired_ms": None if near is None else (down.detected - t_cut) * 1e3 + near,
            "program_ms": (down.programmed - down.computed) * 1e3,
            "repaired_ms": (down.programmed - t_cut) * 1e3, "table_ops": down.table_ops,
            "route_changes": down.route_changes, "switches_written": len(down.ops), "errors": down.errors,
            "restore_detect_ms": (up.detected - t_restore) * 1e3,
            "restore_repaired_ms": (up.programmed - t_restore) * 1e3, "restore_table_ops": up.table_ops}


def run_p4(G, repetitions: int, interval: float, out_dir: Path, src, dst, log=print) -> list[dict]:
    """The p4 case of the failover bench: ``repetitions`` cuts on one BMv2 replica of ``G``."""
    runs = []
    workdir = out_dir / "probe"
    workdir.mkdir(parents=True, exist_ok=True)
    with p4_fabric(G, out_dir) as (rep, fo):
        rep.host(src).cmd(f"ping -c2 -W1 {rep.ip(dst)}")
        for i in range(repetitions):
            rec = one_p4_cut(rep, fo, src, dst, 43000 + 13 * i, interval, workdir, f"p4-{i}")
            runs.append(rec)
            log(f"p4 {i + 1}/{repetitions}: cut {'-'.join(rec['cut'])} lost {rec['lost_in_window']} = "
                f"{rec['outage_ms']:.1f} ms (command {rec['cut_command_ms']:.1f} ms, seen {rec['detect_ms']:.1f} ms, "
                f"near end {rec['near_end_repaired_ms']:.1f} ms, all tables {rec['repaired_ms']:.1f} ms after the "
                f"cut, {rec['table_ops']} ops)" + "".join(f"; NOT VALID: {p}" for p in rec["problems"]))
    return runs
