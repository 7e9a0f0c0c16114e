"""The OVS fat-tree the controller tests share: k=4 under the fabric controller, plain veths (no link
emulation, so the controller and OVS are what is measured), and the first step of every failover test:
a probe stream, and the links it crosses once port counters show it up to a core switch."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

from testbed.bench.failover import Stream, stream_links
from testbed.topo import addressing
from testbed.topo import generators as gen


@contextmanager
def ovs_fat_tree(out: Path, name: str, lldp_interval: float = 0):
    """``(G, ctl, rep)`` of a running k=4 fat-tree under the fabric controller; torn down on exit."""
    from controllers.launch import start_controller
    from testbed.doctor import plan_capabilities
    from testbed.emu import Replica, RunRegistry
    from testbed.plan import Overrides, plan_replica

    G = addressing.assign(gen.fat_tree(4))
    with RunRegistry(name) as run:
        ctl = start_controller(run, G, out, lldp_interval=lldp_interval)
        plan = plan_replica(G, plan_capabilities(), Overrides(links="off", static_arp=False))
        with Replica(plan, controller=ctl.address, run=run, out_dir=out, name=name) as rep:
            ctl.wait_ready()
            yield G, ctl, rep


def stream_to_core(G, ctl, rep, src: str, dst: str, port: int, sport: int, interval: float, duration: float,
                   out: Path, tag: str) -> tuple[Stream, list[tuple]]:
    """Start a ``src -> dst`` probe stream (ARP resolved first) and return it with the links it crosses,
    once they reach a core switch (counters climb hop by hop; the first hop alone would name the ToR
    uplink). Fails the test when the stream never shows up there."""
    rep.host(src).cmd(f"ping -c1 -W1 {rep.ip(dst)}")
    stream = Stream(rep, src, dst, port, sport, interval, duration, out, tag)
    links = stream_links(ctl, G, interval)
    assert links, f"{src} -> {dst}: the stream never showed on an agg -> core link in port counters"
    return stream, links
