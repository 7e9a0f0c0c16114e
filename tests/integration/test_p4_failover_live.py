"""BMv2 fabrics fail over through the routing brain, live (spine-leaf 2 x 2, every switch simple_switch_fast
running fabric.p4):

    h0 -- l0 --X-- s0 -- l1 -- h1        X: the uplink the probe stream crosses, cut with `ip link set down`
            \\---- s1 ---/

1. Under a 2 kpps UDP probe stream h0 -> h1 the uplink it uses is cut: the failover driver sees the port go
   down (netlink), the brain's ``link_down`` diff goes to the switches as incremental writes, the stream
   keeps flowing over the other spine; the outage (lost probes x interval) stays under a bound derived
   from the mechanism; the live tables, read back over Thrift, equal a *fresh* compile of the fabric with
   that link down (a new brain started with it down, entries.fabric_program), and after the restore a
   fresh compile of the whole fabric.
2. ``testbed up --p4 fabric`` + ``testbed fail link`` / ``restore link`` from another process: the replica
   reroutes (ping keeps working with one uplink of l0 cut), drops the routes when l0 has no uplink left,
   and comes back on restore.

The outage bound (test 1), from what the repair is made of:

    outage <= T_detect + T_compute + T_write + 2 probe intervals
    T_detect  <= RESYNC_S (0.1 s): a netlink event arrives as the kernel changes the port's state; if it
                 were ever missed, the sysfs resync that runs every RESYNC_S catches the state
    T_compute <= 30 ms: the brain's link_down and the diff on this 4-switch fabric take < 1 ms on an idle
                 machine; 30 ms allows a Python thread descheduled on the loaded 2-core machine
    T_write   <= table ops x 2 ms: 2 ms is one *unpipelined* Thrift round trip measured under load ~5 (the
                 bench's figure); pipelined writes cost less per op, so this is an upper bound

With ~12 table ops that is ~155 ms; the measured outage is a few ms to tens of ms.

A break of a few ms is shorter than the pauses the loaded 2-core machine gives the probe sender: a trial
whose sender sent nothing into the break is not valid (it would read as a 0 ms outage; seen in CI, a 7.7 ms
pause over a 2.8 ms break), and the test cuts again, up to TRIALS times (6: CI of 0fe7203 at load 4.5 had
three invalid trials in a row, breaks of 1.2-1.3 ms with the sender paused 1.0-1.1 ms over them, and one
whose 10 probes sent into a 5.1 ms break waited in front of BMv2 longer than the break).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.poll import poll

pytestmark = [pytest.mark.root, pytest.mark.mininet, pytest.mark.bmv2]

REPO = Path(__file__).resolve().parents[2]
INTERVAL_S = 0.0005
T_COMPUTE_S = 0.030
T_WRITE_PER_OP_S = 0.002
TRIALS = 6


def _graph():
    from testbed.topo import addressing
    from testbed.topo import generators as gen
    from testbed.topo.graph import HOST

    G = addressing.assign(gen.spine_leaf(2, 2, 1))
    leaves = sorted(n for n in G if G.nodes[n].get("role") == "leaf")
    src = next(n for n in G.neighbors(leaves[0]) if G.nodes[n].get("role") == HOST)
    dst = next(n for n in G.neighbors(leaves[-1]) if G.nodes[n].get("role") == HOST)
    return G, src, dst


def _fresh(G, down=()) -> dict:
    """Independent expectation: a new brain started with ``down`` links already down, fully compiled."""
    from testbed.p4rt import entries as E
    from testbed.p4rt.incremental import normalized
    from testbed.routing.brain import RoutingBrain
    from testbed.topo.graph import switches

    brain = RoutingBrain(G, down_links={frozenset(lk) for lk in down})
    brain.compute_all(0.0)
    out = {}
    for sw in switches(G):
        prog = E.fabric_program(G, sw, brain.tables().get(sw, {}).values())
        out[sw] = {t: sorted(normalized(e) for e in prog.entries if e.table == t and not e.default)
                   for t in ("ipv4_lpm", "ecmp_nhop")}
    return out


def _live(rep) -> dict:
    from testbed.topo.graph import switches

    out = {}
    for sw in switches(rep.G):
        with rep.switch(sw).client() as c:
            out[sw] = {t: c.table_dump(t) for t in ("ipv4_lpm", "ecmp_nhop")}
    return out


def test_bmv2_fabric_reroutes_a_cut_link_under_traffic(tmp_path):
    from testbed.bench.p4_failover import one_p4_cut, p4_fabric
    from testbed.p4rt.linkwatch import RESYNC_S

    G, src, dst = _graph()
    seen = {}
    with p4_fabric(G, tmp_path, name="p4-failover-test") as (rep, fo):
        res = rep.host(src).cmd(f"ping -c2 -W2 {rep.ip(dst)}")
        assert " 0% packet loss" in res, res
        Gp = rep.G  # the plan's graph: hosts carry the addresses and MACs they got
        assert _live(rep) == _fresh(Gp)

        def during(cut):
            seen["cut"] = cut
            seen["tables"] = _live(rep)
        tried = []
        for attempt in range(TRIALS):  # a trial whose sender the machine paused through the break is not one
            rec = one_p4_cut(rep, fo, src, dst, 43000 + attempt, INTERVAL_S, tmp_path, f"cut{attempt}",
                             hold_s=1.0, during=during)
            tried.append(rec["problems"])
            if not rec["problems"]:
                break
        after = _live(rep)
    assert not rec["problems"], f"no valid trial in {TRIALS}: {tried}"
    cut = tuple(rec["cut"])
    assert seen["tables"] == _fresh(Gp, down=[cut])          # during the cut: a fresh compile without the link
    assert after == _fresh(Gp)                                # restored: the original program
    assert not rec["errors"]
    bound_s = RESYNC_S + T_COMPUTE_S + rec["table_ops"] * T_WRITE_PER_OP_S + 2 * INTERVAL_S
    summary = (f"outage {rec['outage_ms']:.1f} ms (bound {bound_s * 1e3:.0f} ms), seen {rec['detect_ms']:.1f} ms "
               f"after the cut command started (it took {rec['cut_command_ms']:.1f} ms), near end repaired "
               f"{rec['near_end_repaired_ms']:.1f} ms, {rec['table_ops']} ops, last loss {rec['last_loss_ms']} ms")
    print(summary)
    assert rec["lost_in_window"] > 0, f"the stream lost nothing: was it on {cut}? {summary}"
    assert rec["outage_ms"] <= bound_s * 1e3, summary
    assert rec["detect_ms"] <= rec["cut_command_ms"] + RESYNC_S * 1e3, summary
    # after the repair the stream flowed: nothing lost between the last loss and the restore
    assert rec["last_loss_ms"] <= bound_s * 1e3, summary
    assert rec["restore_lost"] == 0, summary                  # make-before-break on the way back


def test_a_killed_bmv2_spine_is_routed_around(tmp_path):
    """Switch loss: the spine the stream crosses is SIGKILLed; its exit (a pidfd per BMv2 process) makes the
    driver call the brain's switch_down, and the survivors get the difference. Bound: the process's exit
    (measured here with our own pidfd: the kernel takes tens of ms to tear a BMv2 down, and the data plane
    stops at the kill) + the same compute and write budget as the link cut."""
    import select
    import signal
    import time

    from testbed.bench.failover import Stream
    from testbed.bench.p4_failover import p4_fabric, stream_links
    from testbed.links.probe import outage
    from testbed.p4rt import entries as E
    from testbed.p4rt.incremental import normalized
    from testbed.p4rt.linkwatch import RESYNC_S
    from testbed.routing.brain import RoutingBrain
    from testbed.topo.graph import switches

    G, src, dst = _graph()
    with p4_fabric(G, tmp_path, name="p4-kill-test") as (rep, fo):
        rep.host(src).cmd(f"ping -c2 -W2 {rep.ip(dst)}")
        stream = Stream(rep, src, dst, 5001, 43111, INTERVAL_S, 3.0, tmp_path, "kill")
        spine = next(v for _, v in stream_links(rep, INTERVAL_S) if rep.G.nodes[v].get("role") == "spine")
        proc = rep.switch(spine).process.proc
        pidfd = os.pidfd_open(proc.pid)
        t_kill = time.time()
        os.kill(proc.pid, signal.SIGKILL)
        select.select([pidfd], [], [], 10)
        t_exit = time.time()
        os.close(pidfd)
        ev = poll(lambda: next((e for e in fo.fabric.events if e.kind == "switch_down"), None), timeout=10,
                  interval=0.005, what=f"the driver to route around {spine}")
        raw = stream.result()
        live = {sw: {t: rep.switch(sw).client().table_dump(t) for t in ("ipv4_lpm", "ecmp_nhop")}
                for sw in switches(rep.G) if sw != spine}
        Gp = rep.G
    brain = RoutingBrain(Gp, down_switches={spine})
    brain.compute_all(0.0)
    for sw, tables in live.items():
        prog = E.fabric_program(Gp, sw, brain.tables().get(sw, {}).values())
        want = {t: sorted(normalized(e) for e in prog.entries if e.table == t and not e.default)
                for t in ("ipv4_lpm", "ecmp_nhop")}
        assert tables == want, sw
    o = outage(raw["send_times"], raw["seq"], INTERVAL_S, window=(t_kill - 0.002, float("inf")))
    exit_s = t_exit - t_kill
    bound_s = exit_s + T_COMPUTE_S + ev.table_ops * T_WRITE_PER_OP_S + 2 * INTERVAL_S
    summary = (f"{spine} killed: exited after {exit_s * 1e3:.1f} ms, seen {(ev.detected - t_kill) * 1e3:.1f} ms, "
               f"repaired {(ev.programmed - t_kill) * 1e3:.1f} ms after the kill ({ev.table_ops} ops); outage "
               f"{o.outage_ms:.1f} ms (bound {bound_s * 1e3:.0f} ms)")
    print(summary)
    assert not ev.errors and spine not in ev.ops and ev.table_ops > 0
    assert ev.detected - t_exit <= RESYNC_S, summary
    assert 0 < o.outage_ms <= bound_s * 1e3, summary


def _env():
    return dict(os.environ, TESTBED_LOCK_WAIT=os.environ.get("TESTBED_LOCK_WAIT", "900"), PYTHONPATH=str(REPO))


def _testbed(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "testbed.cli", *args], cwd=REPO, env=_env(), capture_output=True,
                          text=True, timeout=timeout)


SPEC = """\
name: p4-fail-test
kind: spine-leaf
params: {leaves: 2, spines: 2, hosts_per_leaf: 1}
links:
  default: {rate: 10G}
scale: 100
"""


def _ping(src, dst) -> bool:
    res = _testbed("exec", src, "--", "ping", "-c3", "-i0.2", "-W2", dst)
    return res.returncode == 0 and " 0% packet loss" in res.stdout


def test_testbed_fail_link_reroutes_a_p4_replica(tmp_path):
    spec = tmp_path / "p4-fail-test.yaml"
    spec.write_text(SPEC)
    proc = subprocess.Popen([sys.executable, "-m", "testbed.cli", "up", str(spec), "--p4", "fabric", "--wait",
                             "--out", str(tmp_path / "out")], cwd=REPO, env=_env(), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    doc = None
    try:
        def up():
            if proc.poll() is not None:
                raise AssertionError(f"testbed up exited {proc.returncode}: {proc.stderr.read()[-2000:]}")
            doc = json.loads(_testbed("ls", "--json").stdout)["replica"]
            return doc if doc and doc["pid"] == proc.pid else None
        doc = poll(up, timeout=900, interval=0.5, what="testbed up --p4 fabric to bring the replica up")
        assert doc["p4"]["links"] and _ping("h0", "h1")
        res = _testbed("fail", "link", "l0", "s0", "--json")
        assert res.returncode == 0, res.stderr
        out = json.loads(res.stdout)
        ev = out["events"][0]
        assert out["p4"] and sorted(ev["target"]) == ["l0", "s0"] and ev["table_ops"] > 0 and not ev["errors"]
        assert _ping("h0", "h1")                                  # over s1
        res = _testbed("fail", "link", "l0", "s1")
        assert res.returncode == 0 and "table ops" in res.stdout, res.stderr
        assert not _ping("h0", "h1")                              # l0 has no uplink left: no route
        for b in ("s0", "s1"):
            assert _testbed("restore", "link", "l0", b).returncode == 0
        assert _ping("h0", "h1") and _ping("h1", "h0")
        bad = _testbed("fail", "link", "l0", "h9")
        assert bad.returncode == 2 and "no link l0 - h9" in bad.stderr and "Traceback" not in bad.stderr
        kinds = [json.loads(line)["kind"] for line in (tmp_path / "out" / "p4-events.jsonl").read_text().splitlines()]
        assert kinds == ["link_down", "link_down", "link_up", "link_up"]
    finally:
        down = _testbed("down", timeout=600) if doc is not None else None
        try:
            proc.wait(timeout=120 if doc is not None else 0.1)
        except subprocess.TimeoutExpired:
            pass
        finally:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=300)
    assert down.returncode == 0, down.stderr
