"""ECMP spreading of soft-RDMA QPs across a k=4 fat-tree replica, measured by switch port counters.

    pod 0 host --4 QPs (UDP source port 0xC000 + hash(QPN), as rdma_rxe)--> host of the last pod
       OVS switches, os-ken controller: ECMP groups hash IP addresses and L4 ports (controllers/ofrules.py)

Every core switch's transmitted bytes are read from the controller's ``/ports`` before and after an
RDMA WRITE test on 4 QPs; a core switch "carries a path" when it moved at least half of one QP's share
of the data. Two hosts in different pods have one path per core switch, so QPs that share one source
port (as every QP did before per-QP ports) use one core, and distinct ports should use >= 2.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from testbed.console import console
from testbed.errors import EmulationError

SPEC = Path(__file__).resolve().parents[2] / "scenarios" / "specs" / "fat-tree-k4.yaml"


def ecmp_qps(qps: int = 4, size: str = "64KiB", iters: int = 40, out_dir: Path | None = None) -> dict:
    from controllers.launch import start_controller
    from testbed.bench.failover import pod_pairs
    from testbed.doctor import plan_capabilities
    from testbed.emu import Replica, RunRegistry
    from testbed.plan import Overrides, plan_replica
    from testbed.topo.spec import build_graph, load_spec

    G = build_graph(load_spec(SPEC))
    out = Path(out_dir) if out_dir else Path(tempfile.mkdtemp(prefix="bench-rdma-ecmp-"))
    cores = sorted(n for n in G if G.nodes[n].get("role") == "core")
    a, b = pod_pairs(G)
    src, dst = a[0], b[-1]
    cli = [sys.executable, "-m", "testbed.cli"]
    with RunRegistry("bench-rdma-ecmp") as run:
        ctl = start_controller(run, G, out, mode="controller", lldp_interval=0)
        plan = plan_replica(G, plan_capabilities(), Overrides(links="off", static_arp=False))
        with Replica(plan, controller=ctl.address, run=run, out_dir=out, name="bench-rdma-ecmp") as rep:
            ctl.wait_ready()
            rep.host(src).cmd(f"ping -c2 -W1 {rep.ip(dst)}")
            rep.host(dst).cmd(f"ping -c2 -W1 {rep.ip(src)}")
            log = (out / "server.log").open("w")
            rep.popen(dst, cli + ["rdma", "server", "--once"], stdout=log, stderr=log)
            before = ctl.get("/ports", fresh=1)
            text = rep.host(src).cmd(" ".join(cli + ["rdma", "write-bw", rep.ip(dst), "--qps", str(qps), "--size",
                                                     size, "--iters", str(iters), "--verify", "--json",
                                                     "--wait", "30s", "2>", str(out / "client.err")]))
            after = ctl.get("/ports", fresh=1)
            log.close()
    try:
        r = json.loads(text[text.index("{"):])
    except ValueError as exc:
        err = (out / "client.err").read_text()[-300:] if (out / "client.err").exists() else ""
        raise EmulationError(f"write-bw --qps {qps} across the fat-tree failed: {err or text[-300:]}") from exc
    core_bytes = {}
    for c in cores:
        moved = 0
        for port_no, ctr in after.get(c, {}).items():
            moved += ctr["tx_bytes"] - before.get(c, {}).get(port_no, {}).get("tx_bytes", 0)
        core_bytes[c] = moved
    share = r["bytes"] * r["iterations"] / qps
    used = [c for c, n in core_bytes.items() if n >= share / 2]
    console.print(f"[dim]fat-tree ECMP: {qps} QPs {src} -> {dst}, bytes per core {core_bytes}[/dim]")
    return {"qps": qps, "src": src, "dst": dst, "core_bytes": core_bytes, "core_paths": len(used),
            "cores_used": used, "sports": [q["sport"] for q in r["qp_list"]], "verified": r.get("verified"),
            "goodput_mbps": r["goodput_mbps"], "results_dir": str(out)}
