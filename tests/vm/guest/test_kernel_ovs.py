"""Inside the test VM: a spine-leaf replica on the OVS *kernel* datapath under the fabric controller —
all pairs ping, two equal-cost paths between leaves, UDP flows spread over both spines by the ECMP hash,
and a spine link cut rerouted to the other spine
(the host suite runs the same checks on the userspace datapath, tests/integration/test_controller_fabric.py).

    s0   s1          spines
    | \\ / |
    l0   l1          leaves, 2 hosts each
"""

from __future__ import annotations

import subprocess
import time

import pytest

from testbed.bench.failover import Stream, cut_candidate, flow_links
from testbed.emu.ops import set_link_state
from testbed.poll import poll
from testbed.routing.failover import link_event
from testbed.topo import addressing
from testbed.topo import generators as gen


@pytest.fixture(scope="module")
def fabric(tmp_path_factory):
    from controllers.launch import start_controller
    from testbed.doctor import plan_capabilities
    from testbed.emu import Replica, RunRegistry
    from testbed.plan import Overrides, plan_replica

    out = tmp_path_factory.mktemp("vmfab")
    G = addressing.assign(gen.spine_leaf(2, 2, 2))
    with RunRegistry("vm-ovs-kernel") as run:
        ctl = start_controller(run, G, out, lldp_interval=2)
        plan = plan_replica(G, plan_capabilities(),
                            Overrides(links="off", static_arp=False, datapath="kernel"))
        with Replica(plan, controller=ctl.address, run=run, out_dir=out,
                     name="vm-ovs-kernel") as rep:
            ctl.wait_ready(timeout=300)   # os-ken and 4 bridges start slowly under TCG on a loaded host
            yield G, ctl, rep, out


def _hosts(G):
    return sorted(n for n, d in G.nodes(data=True) if d["role"] == "host")


def test_bridges_are_on_the_kernel_datapath(fabric):
    G, _, rep, _ = fabric
    switches = [n for n, d in G.nodes(data=True) if d["role"] != "host"]
    out = subprocess.run(["ovs-vsctl", "--columns=name,datapath_type", "list", "Bridge"], capture_output=True,
                         text=True, check=True).stdout
    assert "netdev" not in out
    dps = subprocess.run(["ovs-dpctl", "dump-dps"], capture_output=True, text=True, check=True).stdout
    assert "system@ovs-system" in dps   # the openvswitch kernel module's datapath
    assert len(switches) == 4


def test_all_pairs_ping_and_two_equal_cost_paths(fabric):
    G, ctl, rep, _ = fabric
    assert rep.net.pingAll(timeout="2") == 0.0
    health = ctl.get("/health")
    assert health["handler_errors"] == 0
    hosts = _hosts(G)
    leaf = {h: next(iter(G.neighbors(h))) for h in hosts}
    src = hosts[0]
    dst = next(h for h in hosts if leaf[h] != leaf[src])
    paths = ctl.get("/paths", src=src, dst=dst)
    assert paths["ok"] and paths["equal_cost"] == 2


#: 32 UDP flows (source ports 40000-40031) of 40 x 1000-byte datagrams each, paced in rounds.
SEND_FLOWS = ("import socket, sys, time\n"
              "socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(32)]\n"
              "for i, s in enumerate(socks):\n    s.bind(('', 40000 + i))\n"
              "for _ in range(40):\n    for s in socks:\n        s.sendto(b'x' * 1000, (sys.argv[1], 9000))\n"
              "    time.sleep(0.002)\n")
FLOW_BYTES = 32 * 40 * 1000


def test_ecmp_spreads_udp_flows_over_both_spines(fabric, tmp_path):
    """The controller's NX multipath hashes IPs and L4 ports (UDP too): flows that differ only in their
    source port take both uplinks of the source leaf, each at least a fifth of the bytes (one uplink below
    that with 32 flows hashed evenly: p < 0.001)."""
    G, ctl, rep, _ = fabric
    hosts = _hosts(G)
    leaf = {h: next(iter(G.neighbors(h))) for h in hosts}
    src = hosts[0]
    dst = next(h for h in hosts if leaf[h] != leaf[src])

    def uplinks(c):
        return {p["neighbour"]: p["tx_bytes"] for p in c[leaf[src]].values()
                if p.get("neighbour") and G.nodes[p["neighbour"]]["role"] == "spine"}

    before = uplinks(ctl.get("/ports", fresh=1))
    assert len(before) == 2, before
    script = tmp_path / "flows.py"
    script.write_text(SEND_FLOWS)
    rep.host(src).cmd(f"python3 {script} {rep.ip(dst)}")
    sent = poll(lambda: (d := {s: n - before[s] for s, n in uplinks(ctl.get("/ports", fresh=1)).items()})
                and sum(d.values()) >= FLOW_BYTES and d, timeout=30, what="the flows' bytes in the uplinks' counters")
    total = sum(sent.values())
    assert min(sent.values()) >= total / 5, sent


def test_spine_link_cut_is_rerouted(fabric):
    G, ctl, rep, out = fabric
    hosts = _hosts(G)
    leaf = {h: next(iter(G.neighbors(h))) for h in hosts}
    src = hosts[0]
    dst = next(h for h in hosts if leaf[h] != leaf[src])
    rep.host(src).cmd(f"ping -c1 -W2 {rep.ip(dst)}")
    stream = Stream(rep, src, dst, 5101, 43210, 0.005, 8.0, out, "vmtest")
    c0 = poll(lambda: ctl.get("/ports", fresh=1), timeout=10, what="port counters")
    c1 = poll(lambda: (c := ctl.get("/ports", fresh=1)) and flow_links(G, c0, c, 3000) and c, timeout=15,
              what="the stream to show up in port counters")
    cut = cut_candidate(G, flow_links(G, c0, c1, 3000), ctl.get("/routes"), f"{rep.ip(dst)}/32")
    assert cut is not None and G.nodes[cut[1]]["role"] == "spine"
    intf = rep.intf_name(cut[0], cut[1])
    t_cut = time.time()
    set_link_state([intf], up=False)
    try:
        poll(lambda: link_event(ctl, "link_down", cut, t_cut - 0.01), timeout=20, what="controller reroute")
        a = ctl.get("/ports", fresh=1)
        moved = poll(lambda: (m := flow_links(G, a, ctl.get("/ports", fresh=1), 3000)) and any(
            u == cut[0] and v != cut[1] and G.nodes[v]["role"] == "spine" for u, v in m) and m,
            timeout=20, what="the stream on the other spine")
        assert cut not in moved
        assert ctl.get("/paths", src=src, dst=dst)["equal_cost"] == 1
        assert rep.net.pingAll(timeout="2") == 0.0
    finally:
        set_link_state([intf], up=True)
    # The stream drove the counters above; its receiver gives up after 0.5 s without packets, which the
    # reroute outage exceeds under TCG, so its loss is not asserted here (the host suite asserts it).
    stream.result()
