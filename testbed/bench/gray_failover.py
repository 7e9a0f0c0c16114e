"""A gray failure under the fabric controller, live: a link starts losing 10 % of its frames with its
carrier up; the controller sees it in port counters (:mod:`testbed.routing.gray`), routes around it,
and gives it back after the hold-down. Shared by ``testbed bench failover`` and its integration test.

    h0 -- l0 ==dl1== s0 -- l1 -- h1        ==dlN==: a userspace link node (loss changed at runtime,
            ==dl2== s1 --/                           testbed.links.control); the rest plain HTB links

The fabric is spine-leaf 2 x 2 with one host per leaf; ``l0``'s two uplinks get a 0.1 ms delay, so the
replica plan gives each a link node (no other way to lose frames *between* two counting switch ports:
a qdisc drop happens before the sender counts the frame). One trial (:func:`one_gray`): a probe stream
h0 -> h1 at ``interval``; the uplink it uses starts losing ``loss`` both ways; the controller's
``link_down`` (cause ``gray-loss``) gives the detection time; the last probe lost after the injection
gives the data-plane reroute time (the flow's loss stops there); the loss is then cleared and the
controller's ``link_up`` (``gray-release``) comes after the hold-down.

All on the wall clock at scale 1 (the links are not dilated): emulated and real-world times are the
same, and detection is the counter poll interval times the policy's windows, not the data plane.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from pathlib import Path

from testbed.poll import poll, sleep_until
from testbed.routing.gray import GrayPolicy
from testbed.topo.graph import HOST

#: Probe sending interval of a trial (1 kpps: a 0.3 s window sees 300 frames, well above min_packets).
INTERVAL_S = 0.001
#: Counter poll interval of the controller (window 3 x 0.1 s; declared within ~0.7 s, DOMAIN goal <= 1 s).
GRAY_INTERVAL_S = 0.1


def gray_graph():
    """The fabric of the module docstring (addressed, with dpids): ``(G, source host, destination host)``."""
    from testbed.topo import addressing
    from testbed.topo import generators as gen
    from testbed.topo.builder import set_link

    G = addressing.assign(gen.spine_leaf(2, 2, 1))
    leaves = sorted(n for n in G if G.nodes[n].get("role") == "leaf")
    for sp in sorted(n for n in G if G.nodes[n].get("role") == "spine"):
        set_link(G, leaves[0], sp, delay_s=1e-4)
    src = next(n for n in G.neighbors(leaves[0]) if G.nodes[n].get("role") == HOST)
    dst = next(n for n in G.neighbors(leaves[-1]) if G.nodes[n].get("role") == HOST)
    return G, src, dst


@contextmanager
def gray_fabric(out: Path, name: str, gray_interval: float = GRAY_INTERVAL_S):
    """``(G, src, dst, ctl, rep)``: the fabric running under the controller with gray detection on."""
    from controllers.launch import start_controller
    from testbed.doctor import plan_capabilities
    from testbed.emu import Replica, RunRegistry
    from testbed.links.node import DelayLineNode
    from testbed.plan import Overrides, plan_replica

    G, src, dst = gray_graph()
    with RunRegistry(name) as run:
        ctl = start_controller(run, G, out, lldp_interval=0, gray_interval=gray_interval)
        plan = plan_replica(G, plan_capabilities(), Overrides(static_arp=False, seed=7))
        with Replica(plan, controller=ctl.address, run=run, out_dir=out, name=name,
                     link_node_class=DelayLineNode) as rep:
            ctl.wait_ready()
            rep.host(src).cmd(f"ping -c2 -W1 {rep.ip(dst)}")
            yield G, src, dst, ctl, rep


def _gray_event(ctl, kind: str, link: tuple, after: float, cause: str) -> dict | None:
    for ev in ctl.get("/events")["failovers"]:
        if ev["kind"] == kind and set(ev["link"]) == set(link) and ev["time"] >= after and ev["cause"] == cause:
            return ev
    return None


def uplink_in_use(ctl, G, src: str, interval: float, timeout: float = 5.0) -> tuple:
    """The (leaf, spine) uplink of ``src``'s leaf the running stream crosses, from port counters."""
    from testbed.bench.failover import flow_links

    leaf = next(iter(G.neighbors(src)))
    before = ctl.get("/ports", fresh=1)
    min_bytes = int(0.2 / interval * 100)

    def seen():
        up = [(u, v) for u, v in flow_links(G, before, ctl.get("/ports", fresh=1), min_bytes)
              if u == leaf and G.nodes[v].get("role") == "spine"]
        return up[0] if len(up) == 1 else None
    return poll(seen, timeout=timeout, interval=0.1, what=f"the stream on one uplink of {leaf}")


def one_gray(rep, ctl, G, src: str, dst: str, sport: int, workdir: Path, tag: str, loss: float = 0.1,
             interval: float = INTERVAL_S, gray_interval: float = GRAY_INTERVAL_S) -> dict:
    """One trial (module docstring); returns its record (times in ms after the injection)."""
    from testbed.bench.failover import Stream
    from testbed.links.probe import outage

    policy = GrayPolicy.for_interval(gray_interval)
    stream = Stream(rep, src, dst, 5001, sport, interval, 4.0 + policy.hold_s, workdir, tag)
    link = uplink_in_use(ctl, G, src, interval)
    node = rep.link_node(*link)
    sleep_until(time.time() + policy.window_s + 2 * gray_interval)  # a clean window before the loss
    t_inject = time.time()
    node.set_loss(loss, loss)
    try:
        down = poll(lambda: _gray_event(ctl, "link_down", link, t_inject, "gray-loss"), timeout=5, interval=0.01,
                    what=f"the controller to declare {'-'.join(link)} gray")
        sleep_until(max(t_inject + 1.2, time.time()))
    finally:
        t_clear = time.time()
        node.set_loss(0.0, 0.0)
    up = poll(lambda: _gray_event(ctl, "link_up", link, t_clear, "gray-release"), timeout=policy.hold_s + 5,
              interval=0.02, what=f"the controller to give {'-'.join(link)} back")
    raw = stream.result()
    ledger = node.fresh_stats()["directions"]
    send, got = raw["send_times"], set(raw["seq"])
    lost_after = [send[i] for i in range(len(send)) if i not in got and send[i] >= t_inject]
    last_lost = max(lost_after, default=t_inject)
    before = outage(send, raw["seq"], interval, window=(t_inject, down["time"]))
    rerouted = outage(send, raw["seq"], interval, window=(down["pushed"] + 0.05, t_clear))
    release = outage(send, raw["seq"], interval, window=(t_clear, float("inf")))
    sent_before = sum(1 for t in send if t_inject <= t < down["time"])
    return {"link": list(link), "node": node.name, "loss": loss, "gray_interval_s": gray_interval,
            "interval_s": interval,
            "window_s": policy.window_s, "bound_ms": policy.detection_bound_s(gray_interval) * 1e3,
            "detect_ms": (down["time"] - t_inject) * 1e3, "pushed_ms": (down["pushed"] - t_inject) * 1e3,
            "last_loss_ms": (last_lost - t_inject) * 1e3, "seen_loss": down["detail"].get("loss"),
            "flow_loss_before_detect": before.lost_in_window / sent_before if sent_before else None,
            "lost_before_detect": before.lost_in_window, "lost_after_reroute": rerouted.lost_in_window,
            "lost_after_release": release.lost_in_window, "lost_total": len(lost_after),
            "node_drop_loss": ledger["a>b"]["drop_loss"] + ledger["b>a"]["drop_loss"],
            "held_s": down["detail"].get("hold_s"), "release_after_down_ms": (up["time"] - down["time"]) * 1e3,
            "released_ms_after_clear": (up["time"] - t_clear) * 1e3}


def check_record(rec: dict) -> list[str]:
    """What makes a trial invalid (pure): nothing lost, or losses the link node does not account for."""
    problems = []
    if rec["lost_before_detect"] == 0:
        problems.append("the stream lost nothing before detection (was it on the impaired link?)")
    if rec["lost_total"] > rec["node_drop_loss"]:
        problems.append(f"{rec['lost_total']} probes lost but the link node dropped {rec['node_drop_loss']}")
    return problems

