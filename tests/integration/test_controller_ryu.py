"""The same fabric app under real Ryu 4.34 (``ryu-manager``, eventlet hub) against OVS: every pair
reaches every other through its ECMP routes, and a crashed spine is routed around (the disconnect reaches
the app under Ryu's hub too). The Ryu environment is built by ``make setup`` (scripts/ryu-env.sh)."""

from __future__ import annotations

import time

import pytest

from controllers.launch import ryu_python
from testbed.emu.switchlife import crash_switch
from testbed.poll import poll
from testbed.routing.failover import switch_event
from testbed.topo import addressing
from testbed.topo import generators as gen

pytestmark = [pytest.mark.root, pytest.mark.mininet, pytest.mark.ovs]


def test_fabric_app_under_real_ryu(tmp_path):
    from controllers.launch import start_controller
    from testbed.doctor import plan_capabilities
    from testbed.emu import Replica, RunRegistry
    from testbed.plan import Overrides, plan_replica

    assert ryu_python().exists(), f"no Ryu environment at {ryu_python()}: make setup builds it (scripts/ryu-env.sh)"
    G = addressing.assign(gen.spine_leaf(2, 2, 2))
    with RunRegistry("test-ryu") as run:
        ctl = start_controller(run, G, tmp_path, lldp_interval=0, framework="ryu")
        plan = plan_replica(G, plan_capabilities(), Overrides(links="off", static_arp=False))
        with Replica(plan, controller=ctl.address, run=run, out_dir=tmp_path, name="test-ryu") as rep:
            ctl.wait_ready()
            assert rep.net.pingAll(timeout="1") == 0.0
            health = ctl.get("/health")
            assert health["arp_replies"] > 0 and health["handler_errors"] == 0
            paths = ctl.get("/paths", src="h0", dst="h3")
            assert paths["ok"] and paths["equal_cost"] == 2
            t = time.time()
            crash_switch(rep, "s0")
            poll(lambda: switch_event(ctl, "switch_down", "s0", t - 0.01), timeout=10, what="Ryu app to see s0 go")
            assert ctl.get("/paths", src="h0", dst="h3")["equal_cost"] == 1
            assert rep.host("h0").cmd(f"ping -c1 -W1 {rep.ip('h3')}").count(" 0% packet loss") == 1
    log = (tmp_path / "controller.log").read_text()
    assert "loading app ryu.controller.ofp_handler" in log and "os_ken" not in log  # Ryu ran it, not os-ken
